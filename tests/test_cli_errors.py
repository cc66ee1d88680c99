"""The CLI's error boundary: every expected failure ends in one or two lines and an exit code (2 bad
input, 1 failed, 130 interrupted), never a traceback; ``--debug`` shows the traceback."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import MaxRetryError

from conftest import REPO_ROOT
from llm_infra import cli
from llm_infra.cli.commands import plan as plan_commands
from llm_infra.cli.errors import explain
from llm_infra.rehearsal import ports

JOB = ["--instances", "16", "--failure-rate", "0.05", "--gpu-hours", "1e5", "--price", "40"]
NODES = ["nodes", "list", "--cluster", "c"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("llm-infra: error: "), err
    return err


def test_no_credentials(bare_aws: Path, capsys) -> None:
    code, _, err = run(capsys, *NODES, "--region", "us-east-1")
    assert code == 1 and "no AWS credentials found: pass --profile" in one_error(err)


def test_no_region(bare_aws: Path, capsys) -> None:
    code, _, err = run(capsys, *NODES)
    assert code == 1 and "no AWS region: pass --region, export AWS_REGION" in one_error(err)


def test_aws_region_is_honoured_as_the_aws_cli_does(bare_aws: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")  # boto3 alone reads only AWS_DEFAULT_REGION
    code, _, err = run(capsys, *NODES)
    assert code == 1 and "no AWS credentials found" in one_error(err)  # got past the region


def test_unknown_profile(bare_aws: Path, capsys) -> None:
    code, _, err = run(capsys, *NODES, "--profile", "nope")
    assert code == 1 and "The config profile (nope) could not be found" in one_error(err)


def test_no_network(bare_aws: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setattr("botocore.retries.standard.ExponentialBackoff.delay_amount", lambda self, context: 0)
    port = ports.reserve().port  # reserved and held, never listening: nothing answers there
    code, _, err = run(capsys, *NODES, "--region", "us-east-1", "--endpoint-url", f"http://127.0.0.1:{port}")
    assert (
        code == 1
        and f"http://127.0.0.1:{port} did not answer SageMaker ListClusterNodes in 3 attempts" in one_error(err)
    )
    assert "(could not connect): check the network" in err


def test_a_prompt_without_a_terminal_says_pass_yes(bare_aws: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, out, err = run(
        capsys, "nodes", "reboot", "--cluster", "c", "--instance-id", "i-0123", "--region", "us-east-1"
    )
    prompt, error = err.split("\n", 1)  # the question on stderr, stdout kept for the command's output
    assert (code, out, prompt) == (1, "", "reboot 1 node(s) of c: i-0123? [y/N] ")
    assert "no terminal to ask for confirmation: pass --yes" in one_error(error)


def test_a_plot_into_a_missing_folder(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, "plan", *JOB, "--plot", str(tmp_path / "missing" / "plan.png"))
    assert code == 2 and f"there is no folder {tmp_path / 'missing'} to write it in" in one_error(err)


def test_a_binary_run_log(tmp_path: Path, capsys) -> None:
    log = tmp_path / "run.log"
    log.write_bytes(b"\xff\xfe\x00binary")
    code, _, err = run(capsys, "plan", *JOB, "--from-run", str(log))
    assert code == 2 and f"--from-run {log}: not a text file" in one_error(err)


def test_a_dashboard_template_that_is_not_json(tmp_path: Path, capsys) -> None:
    template = tmp_path / "t.json"
    template.write_text("nope")
    code, _, err = run(capsys, "dashboard", "--template", str(template), "--out", str(tmp_path / "d.png"))
    assert code == 2 and f"--template {template}: not JSON (Expecting value at line 1 column 1)" in one_error(err)


def test_a_closed_pipe_ends_quietly(monkeypatch, capsys) -> None:
    read, write = os.pipe()
    os.close(read)  # `| head -1` has left
    saved = os.dup(1)
    closed = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stdout", closed)
    try:
        code = cli.main(["plan", *JOB])
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert code == 1
    assert "Traceback" not in capsys.readouterr().err


def test_ctrl_c_exits_130(monkeypatch, capsys) -> None:
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(plan_commands, "inputs_from", interrupted)
    code, _, err = run(capsys, "plan", *JOB)
    assert code == 130 and err.strip() == "llm-infra: interrupted"


def test_debug_shows_the_traceback(bare_aws: Path) -> None:
    from botocore.exceptions import NoRegionError

    with pytest.raises(NoRegionError):
        cli.main(["--debug", *NODES])


def test_a_bug_keeps_its_traceback(monkeypatch) -> None:
    def broken(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(plan_commands, "inputs_from", broken)
    with pytest.raises(ZeroDivisionError):
        cli.main(["plan", *JOB])


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (
            ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "ListClusterNodes"),
            "AWS denied ListClusterNodes: no\nallow that action",
        ),
        (
            ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"}}, "DescribeCluster"),
            "AWS throttled DescribeCluster (ThrottlingException): wait a minute",
        ),
        (
            ClientError({"Error": {"Code": "ExpiredToken", "Message": "old"}}, "ListClusters"),
            "AWS rejected the credentials (ExpiredToken)",
        ),
        (
            ConfigException("Invalid kube-config file. No configuration found."),
            "no usable kubeconfig (Invalid kube-config file. No configuration found.): run `aws eks update-kubeconfig",
        ),
        (ApiException(status=403, reason="Forbidden"), "the Kubernetes API refused the request (403 Forbidden)"),
        (MaxRetryError(None, "https://1.2.3.4/api"), "cannot reach the Kubernetes API"),
    ],
)
def test_aws_and_kubernetes_failures_in_words(error: BaseException, says: str) -> None:
    message = explain(error)
    assert message is not None and message.startswith(says)


# ---- the start-up, a closed pipe, an encoding without ± ------------------------------------------------------
LLM_INFRA = str(Path(sys.executable).with_name("llm-infra"))


def test_ctrl_c_while_the_commands_load_is_quiet(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The interrupt lands while main() loads the commands (here: in build_parser, deterministically)."""
    real = cli.build_parser

    def interrupted_while_loading():
        os.kill(os.getpid(), signal.SIGINT)
        return real()

    monkeypatch.setattr(cli, "build_parser", interrupted_while_loading)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh process
    with pytest.raises(SystemExit) as exited:
        cli.main(["plan", *JOB])
    assert exited.value.code == 130 and capsys.readouterr().err == "\nllm-infra: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's own again


@pytest.mark.parametrize("after", [0.05, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5])
def test_ctrl_c_while_the_command_starts_is_quiet(after: float) -> None:
    """The console script, interrupted at points across its start. Before the interpreter has read its own
    site packages (~20 ms here, longer on a loaded machine) no program's code runs yet: Python itself dies
    of the signal, quietly (-2) or with its 'init_import_site' fatal error, and that is accepted as such."""
    process = subprocess.Popen(
        [LLM_INFRA, "plan", *JOB], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(after)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    if process.returncode == -signal.SIGINT or err.startswith("Fatal Python error: init_import_site"):
        return  # the interpreter's own start
    assert "Traceback" not in err
    if process.returncode != 0:  # it may have finished first
        assert (process.returncode, err.strip()) == (130, "llm-infra: interrupted")


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["plan", "--help"], ["plan", *JOB]])
def test_a_reader_that_left_before_anything_was_read(argv: list[str]) -> None:
    """``llm-infra --version | true``: the pipe is closed before the command writes."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as closed:
        result = subprocess.run([LLM_INFRA, *argv], stdout=closed, stderr=subprocess.PIPE, text=True, timeout=60)
    assert result.stderr == "" and result.returncode in (0, 1)


def test_a_terminal_that_cannot_write_plus_minus(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    result = subprocess.run(
        [LLM_INFRA, "simulate", *JOB, "--trials", "50"], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "+/- stderr" in result.stdout and "Traceback" not in result.stderr


def test_jsii_runs_the_environments_node_whatever_path_holds(tmp_path: Path) -> None:
    """drill renders the job with cdk8s (jsii, Node) before it asks AWS: with PATH holding only the system's
    folders (a Node 20 there prints a dozen lines of banners on every call) the output is ours alone."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    argv = ["drill", "--cluster", "c", "--out", str(tmp_path / "d.json"), "--app-dir", str(REPO_ROOT)]
    result = subprocess.run([LLM_INFRA, *argv, "--region", "us-east-1"], capture_output=True, text=True, env=env)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == "region us-east-1 (from --region)"
    assert result.stderr.splitlines()[1].startswith("llm-infra: error: no AWS credentials found")
    assert len(result.stderr.splitlines()) == 2, result.stderr
