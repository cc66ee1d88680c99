"""The CLI's error boundary: every expected failure ends in one or two lines and an exit code (2 bad
input, 1 failed, 130 interrupted), never a traceback; ``--debug`` shows the traceback."""

from __future__ import annotations

import io
import os
import socket
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import MaxRetryError

from llm_infra import cli
from llm_infra.cli.commands import plan as plan_commands
from llm_infra.cli.errors import explain

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
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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
    assert code == 1 and f"{tmp_path / 'missing' / 'plan.png'}: No such file or directory" in one_error(err)


def test_a_binary_run_log(tmp_path: Path, capsys) -> None:
    log = tmp_path / "run.log"
    log.write_bytes(b"\xff\xfe\x00binary")
    code, _, err = run(capsys, "plan", *JOB, "--from-run", str(log))
    assert code == 1 and "not a text file" in one_error(err)


def test_a_dashboard_template_that_is_not_json(tmp_path: Path, capsys) -> None:
    template = tmp_path / "t.json"
    template.write_text("nope")
    code, _, err = run(capsys, "dashboard", "--template", str(template), "--out", str(tmp_path / "d.png"))
    assert code == 1 and "not JSON" in one_error(err)


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
