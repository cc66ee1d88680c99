"""The interface every ``llm-infra`` command shares: --version, --output table|json, help for every flag
(its default and unit, no docstring markup), one meaning per flag name, short usage errors, the region as
the AWS CLI resolves it, progress bars only on a terminal."""

from __future__ import annotations

import argparse
import io
import json
import re
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from conftest import REPO_ROOT, run_cli
from llm_infra import cli
from llm_infra.cli.aws import aws_client, resolve_region
from llm_infra.cli.commands import hyperpod as hyperpod_commands
from llm_infra.cli.terminal import Progress, RenamedFlag
from llm_infra.config import TrainingConfig
from llm_infra.ops.hyperpod import Node


def parsers(parser: argparse.ArgumentParser | None = None) -> Iterator[argparse.ArgumentParser]:
    """The root parser and every subcommand's, depth first."""
    parser = parser or cli.build_parser()
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def leaf_commands() -> dict[str, argparse.ArgumentParser]:
    """``llm-infra nodes list`` -> its parser, for every command that runs something."""
    return {
        p.prog: p
        for p in parsers()
        if p.prog != "llm-infra" and not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
    }


def flag(parser: argparse.ArgumentParser, option: str) -> argparse.Action:
    (action,) = [a for a in parser._actions if option in a.option_strings]
    return action


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    with pytest.raises(SystemExit) as exited:
        cli.main(list(argv))
    assert exited.value.code == 2
    return capsys.readouterr().err.splitlines()


def commands() -> list[str]:
    return list(leaf_commands())


# ---- --version ----------------------------------------------------------------------------------------------
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"llm-infra {version('llm-infra')} (aws-cdk-lib {version('aws-cdk-lib')}, ")
    assert "Kubernetes 1.34 by default" in out


# ---- --output table|json --------------------------------------------------------------------------------------
@pytest.mark.parametrize("prog", commands())
def test_every_command_has_output_table_or_json(prog: str) -> None:
    parser = leaf_commands()[prog]
    output = flag(parser, "--output")
    assert output.choices == ("table", "json") and output.default == "table"
    assert flag(parser, "--json").const == "json" and flag(parser, "--json").dest == "output"


def test_output_json_and_its_alias_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    node = Node("i-0123456789abcdef0", "gpu", "ml.p5.48xlarge", "Running", "2026-12-01T00:00:00+00:00")
    monkeypatch.setattr(hyperpod_commands, "aws_client", lambda args, service: None)
    monkeypatch.setattr("llm_infra.ops.hyperpod.list_nodes", lambda *args, **kwargs: [node])
    outputs = [
        run_cli(capsys, "nodes", "list", "--cluster", "hp", *flags)[1]
        for flags in ([], ["--output", "json"], ["--json"])
    ]
    table, as_json, alias = outputs
    assert table.splitlines()[0].split() == ["instance", "id", "group", "type", "status", "launched"]
    assert json.loads(as_json) == json.loads(alias) == [node.__dict__]


def test_cluster_status_is_a_table_by_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status = {
        "cluster": "hp",
        "status": "InService",
        "instance_groups": [{"name": "gpu", "type": "ml.p5.48xlarge", "count": 2, "target": 2}],
        "node_recovery": "Automatic",
        "eks": {"name": "hp-eks", "status": "ACTIVE", "version": "1.34"},
        "stack_outputs": {"FileSystemId": "fs-0123456789abcdef0"},
    }
    monkeypatch.setattr(hyperpod_commands, "aws_client", lambda args, service: None)
    monkeypatch.setattr("llm_infra.ops.hyperpod.cluster_status", lambda *args: status)
    code, out, _ = run_cli(capsys, "cluster", "status", "--cluster", "hp")
    assert code == 0 and not out.startswith("{")
    assert out.splitlines()[:2] == [
        "HyperPod cluster hp: InService, node recovery Automatic",
        "EKS cluster hp-eks: ACTIVE, Kubernetes 1.34",
    ]
    assert "gpu             ml.p5.48xlarge      2       2" in out
    assert "FileSystemId  fs-0123456789abcdef0" in out
    assert json.loads(run_cli(capsys, "cluster", "status", "--cluster", "hp", "--output", "json")[1]) == status


def dashboard_template(path: Path) -> Path:
    widget = {
        "type": "metric",
        "x": 0,
        "y": 0,
        "width": 12,
        "height": 6,
        "properties": {"title": "GPU utilization", "metrics": [["CWAgent", "DCGM_FI_DEV_GPU_UTIL"]]},
    }
    body = json.dumps({"widgets": [widget]})
    resources = {"Dashboard": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {"DashboardBody": body}}}
    path.write_text(json.dumps({"Resources": resources}))
    return path


def test_dashboard_says_what_it_drew_and_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template, png = dashboard_template(tmp_path / "t.template.json"), tmp_path / "d.png"
    code, out, _ = run_cli(capsys, "dashboard", "--template", str(template), "--out", str(png))
    assert code == 0 and out == f"dashboard: {png} (1 widgets: GPU utilization)\n"
    code, out, _ = run_cli(capsys, "dashboard", "--template", str(template), "--out", str(png), "--output", "json")
    assert code == 0 and json.loads(out) == {"dashboard": str(png), "widgets": ["GPU utilization"]}
    assert png.stat().st_size > 0


@pytest.mark.parametrize("content", ["{}", "[]", '{"Resources": []}'])
def test_dashboard_of_what_is_no_template_is_bad_input(
    content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "t.json"
    template.write_text(content)
    code, _, err = run_cli(capsys, "dashboard", "--template", str(template), "--out", str(tmp_path / "d.png"))
    assert (
        code == 2
        and err == f"llm-infra: error: --template {template}: not a CloudFormation template: no Resources object\n"
    )


# ---- help: every flag, its default and unit, plain text ----------------------------------------------------------
MARKUP = re.compile(r"`|:[a-z]+:`?")
UNIT = re.compile(r"second|minute|hour|day|%|\$|gpu|token|tflop|fraction|byte|gib", re.IGNORECASE)


def help_problems(parser: argparse.ArgumentParser) -> list[str]:
    """What is missing or wrong in the help of ``parser``'s own flags (the words a user reads)."""
    problems = []
    texts = [("description", parser.description or "")]
    in_required_group = {a for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            texts += [(f"command {c.dest}", c.help or "") for c in action._choices_actions]
            continue
        if not action.option_strings or isinstance(action, argparse._HelpAction | RenamedFlag):
            continue
        name = "/".join(action.option_strings)
        if not action.help or action.help == argparse.SUPPRESS:
            problems.append(f"{name}: no help")
            continue
        texts.append((name, action.help))
        if action.nargs == 0:  # a switch: off unless given
            continue
        if not (action.required or action in in_required_group) and "default" not in action.help:
            problems.append(f"{name}: the help does not say the default")
        default = action.default
        if isinstance(default, int | float | str) and not isinstance(default, bool):
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            if shown not in action.help:
                problems.append(f"{name}: the help does not show the default {shown}")
        if action.type is float and not UNIT.search(f"{name} {action.metavar or ''} {action.help}"):
            problems.append(f"{name}: no unit in the name, metavar or help")
    problems += [f"{where}: docstring markup in {text!r}" for where, text in texts if MARKUP.search(text)]
    return problems


@pytest.mark.parametrize("prog", [p.prog for p in parsers()])
def test_every_flag_has_help_with_its_default_and_unit_and_no_markup(prog: str) -> None:
    (parser,) = [p for p in parsers() if p.prog == prog]
    assert help_problems(parser) == []


def test_the_help_check_finds_what_it_looks_for() -> None:
    parser = argparse.ArgumentParser(description="see :func:`main`")
    parser.add_argument("--bare", type=int, default=3)
    parser.add_argument("--wait", type=float, help="how long to wait")
    parser.add_argument("--shown", type=float, default=5.0, help="seconds (default: 4)")
    assert help_problems(parser) == [
        "--bare: no help",
        "--wait: the help does not say the default",
        "--wait: no unit in the name, metavar or help",
        "--shown: the help does not show the default 5",
        "description: docstring markup in 'see :func:`main`'",
    ]


# ---- one meaning per name ---------------------------------------------------------------------------------------
def visible_flags() -> Iterator[tuple[str, str, argparse.Action]]:
    for parser in parsers():
        for action in parser._actions:
            if action.help != argparse.SUPPRESS:
                for option in action.option_strings:
                    yield parser.prog, option, action


def test_node_is_a_kubernetes_node_name_wherever_it_is_a_flag() -> None:
    node = [(prog, action) for prog, option, action in visible_flags() if option == "--node"]
    assert node and all("Kubernetes node" in (action.help or "") for _, action in node)
    instance_id = [(prog, action) for prog, option, action in visible_flags() if option == "--instance-id"]
    assert {prog for prog, _ in instance_id} == {"llm-infra nodes replace", "llm-infra nodes reboot"}
    assert all("instance ID" in (action.help or "") for _, action in instance_id)
    assert not [prog for prog, option, _ in visible_flags() if option == "--nodes"]


def test_instance_ids_are_given_with_instance_id() -> None:
    args = cli.build_parser().parse_args(
        ["nodes", "replace", "--cluster", "hp", "--instance-id", "i-1", "--instance-id", "i-2"]
    )
    assert args.instance_ids == ["i-1", "i-2"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["nodes", "reboot", "--cluster", "hp", "--node", "i-1"], "--node is now --instance-id ID"),
        (["validate", "--cluster", "train", "--nodes", "2"], "--nodes is now --node-count N"),
        (["validate", "--cluster", "train", "--node", "2"], "unrecognized arguments: --node 2"),  # no abbreviations
    ],
)
def test_old_and_abbreviated_spellings_are_usage_errors(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, _ = usage_error(capsys, *argv)
    assert says in first


def test_cluster_says_which_cluster_by_command() -> None:
    commands = leaf_commands()
    for prog in ("llm-infra nodes list", "llm-infra nodes add", "llm-infra cluster status"):
        assert "HyperPod cluster" in (flag(commands[prog], "--cluster").help or "")
    for prog in ("llm-infra validate", "llm-infra drill"):
        cluster_help = flag(commands[prog], "--cluster").help or ""
        assert "compute=eks" in cluster_help and "EKS cluster" in cluster_help
        assert "compute=hyperpod" in cluster_help and "HyperPod cluster" in cluster_help


def test_replace_and_reboot_describe_themselves() -> None:
    commands = leaf_commands()
    replace, reboot = commands["llm-infra nodes replace"], commands["llm-infra nodes reboot"]
    assert "BatchReplaceClusterNodes" in (replace.description or "") and "Reboot" not in (replace.description or "")
    assert "BatchRebootClusterNodes" in (reboot.description or "") and "Replace" not in (reboot.description or "")
    assert "volumes are lost" in (replace.description or "") and "volumes stay" in (reboot.description or "")


# ---- usage errors: two lines, as kubectl's ------------------------------------------------------------------------
@pytest.mark.parametrize("prog", commands())
def test_a_usage_error_is_two_lines_naming_the_commands_help(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = usage_error(capsys, *prog.split()[1:], "--no-such-flag")
    assert first.startswith(f"{prog}: error: ") and second == f"See '{prog} --help'."


@pytest.mark.parametrize(
    ("argv", "first"),
    [
        ([], "llm-infra: error: the following arguments are required: COMMAND"),
        (["nodes"], "llm-infra nodes: error: the following arguments are required: COMMAND"),
        (["nodes", "list"], "llm-infra nodes list: error: the following arguments are required: --cluster"),
        (
            ["nodes", "list", "--cluster", "c", "--bogus"],
            "llm-infra nodes list: error: unrecognized arguments: --bogus",
        ),
        (["plan", "--instances", "x"], "llm-infra plan: error: argument --instances: expected a whole number"),
        (["drill", "--cluster", "c", "--out", "d.json", "--fault", "x"], "llm-infra drill: error: argument --fault: "),
        (
            ["nodes", "list", "--cluster", "c", "--endpoint-url", "notaurl"],
            "llm-infra nodes list: error: argument --endpoint-url: expected an http:// or https:// URL with a host, "
            "got 'notaurl'",
        ),
    ],
)
def test_missing_or_bad_arguments(argv: list[str], first: str, capsys: pytest.CaptureFixture[str]) -> None:
    lines = usage_error(capsys, *argv)
    assert len(lines) == 2 and lines[0].startswith(first) and lines[1].startswith("See 'llm-infra")
    assert lines[1] == f"See '{first.split(': error')[0]} --help'."


def numeric_flags() -> list[tuple[str, str]]:
    """(command, flag) for every flag that takes a number, by the type that parses it."""
    return [
        (prog, action.option_strings[-1])
        for prog, parser in leaf_commands().items()
        for action in parser._actions
        if action.option_strings
        and getattr(action.type, "__name__", "") in ("number", "whole number", "number or preset", "float", "int")
    ]


def test_every_number_is_parsed_by_the_shared_finite_types() -> None:
    """No flag takes a bare float or int: those accept inf, nan (float) or 1_0 (int) into a run and its JSON."""
    assert len(numeric_flags()) > 20
    bare = [f"{prog} {option}" for prog, option in numeric_flags() if action_type(prog, option) in (float, int)]
    assert bare == []


def action_type(prog: str, option: str) -> object:
    return flag(leaf_commands()[prog], option).type


@pytest.mark.parametrize(("prog", "option"), numeric_flags())
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e999", "x"])
def test_every_number_flag_refuses_what_is_not_a_finite_number(
    prog: str, option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, _ = usage_error(capsys, *prog.split()[1:], f"{option}={value}")
    assert first.startswith(f"{prog}: error: argument {option}: expected ")
    assert f"got {value!r}" in first


# ---- the region, as the AWS CLI resolves it ---------------------------------------------------------------------
@pytest.fixture
def bare_aws(bare_aws: Path) -> Path:
    """conftest's bare AWS environment, with ~/.aws/config (tmp_path/config) giving two profiles' regions."""
    (bare_aws / "config").write_text("[default]\nregion = eu-west-1\n[profile other]\nregion = ap-south-1\n")
    return bare_aws


APP_CONFIG = TrainingConfig.from_context({"region": "us-west-2", "gpu_az_id": "usw2-az1"})
NO_PROFILES = "[default]\n"


@pytest.mark.parametrize(
    ("flag_region", "env", "profiles", "profile", "config", "expected"),
    [
        ("eu-north-1", {"AWS_REGION": "us-east-1"}, None, None, APP_CONFIG, ("eu-north-1", "--region")),
        (
            None,
            {"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-2"},
            None,
            None,
            APP_CONFIG,
            ("us-east-1", "AWS_REGION"),
        ),
        (None, {"AWS_DEFAULT_REGION": "us-east-2"}, None, None, APP_CONFIG, ("us-east-2", "AWS_DEFAULT_REGION")),
        (None, {}, None, None, APP_CONFIG, ("eu-west-1", "the region of profile default")),
        (None, {}, None, "other", APP_CONFIG, ("ap-south-1", "the region of profile other")),
        (None, {}, NO_PROFILES, None, APP_CONFIG, ("us-west-2", "the app's config (region)")),
        (None, {}, NO_PROFILES, None, TrainingConfig(), ("us-east-1", "gpu_az_id use1-az4")),
    ],
)
def test_region_order_is_the_aws_clis_then_the_apps_config(
    bare_aws: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag_region: str | None,
    env: dict[str, str],
    profiles: str | None,
    profile: str | None,
    config: TrainingConfig,
    expected: tuple[str, str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if profiles is not None:
        (bare_aws / "config").write_text(profiles)
    region = resolve_region(argparse.Namespace(region=flag_region, profile=profile), config)
    assert (region.name, region.source) == expected


def test_no_region_anywhere_is_the_sdks_no_region_error(bare_aws: Path) -> None:
    from botocore.exceptions import NoRegionError

    (bare_aws / "config").write_text("")
    with pytest.raises(NoRegionError):
        resolve_region(argparse.Namespace(region=None, profile=None))


def test_aws_clients_take_aws_region_over_aws_default_region(bare_aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-2")
    assert aws_client(aws_args(), "sagemaker").meta.region_name == "us-east-1"


def aws_args(**given: object) -> argparse.Namespace:
    """What the AWS flags parse to when none is given, with ``given`` over it."""
    defaults = {"region": None, "profile": None, "endpoint_url": None, "cli_connect_timeout": 5.0}
    return argparse.Namespace(**{**defaults, "cli_read_timeout": 30.0, **given})


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "region eu-west-1 (from the region of profile default)"),
        (["--region", "us-west-2"], "region us-west-2 (from --region)"),
        (["-c", "region=us-east-1"], "region eu-west-1 (from the region of profile default)"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "drill"])
def test_validate_and_drill_say_where_their_region_came_from(
    bare_aws: Path, tmp_path: Path, command: str, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The AWS CLI's rule first (here the default profile's region), as every command has it."""
    extra = ["--out", str(tmp_path / "drill.json")] if command == "drill" else []
    code, out, err = run_cli(capsys, command, "--cluster", "train", "--app-dir", str(REPO_ROOT), *argv, *extra)
    assert (code, out) == (1, "")
    region_line, error = err.splitlines()
    assert region_line == says and error.startswith("llm-infra: error: no AWS credentials found")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "region us-east-1 (from gpu_az_id use1-az4)"),  # the repo's cdk.json: no region, gpu_az_id use1-az4
        (["-c", "region=us-east-1"], "region us-east-1 (from the app's config (region))"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "drill"])
def test_the_apps_config_is_the_last_fallback_for_the_region(
    bare_aws: Path, tmp_path: Path, command: str, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (bare_aws / "config").write_text(NO_PROFILES)
    extra = ["--out", str(tmp_path / "drill.json")] if command == "drill" else []
    code, _, err = run_cli(capsys, command, "--cluster", "train", "--app-dir", str(REPO_ROOT), *argv, *extra)
    assert code == 1 and err.splitlines()[0] == says


# ---- progress: a bar on a terminal, plain lines elsewhere -----------------------------------------------------
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_a_bar_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    progress = Progress(width=4)
    progress(1, 2)
    progress(2, 2)
    progress.close()
    assert terminal.getvalue() == "\r[##..] 1/2 running\r[####] 2/2 running\n"


def test_progress_prints_plain_lines_in_a_log(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    progress = Progress()
    for done in (0, 1, 1, 1, 2):
        progress(done, 2)
    progress.close()  # a new stage: its first count is printed even when it is the same
    progress(2, 2)
    assert log.getvalue() == "0/2 running\n1/2 running\n2/2 running\n2/2 running\n"
