"""No silent minutes: every client the CLI creates is bounded (connect and read timeouts, a few attempts),
an endpoint that accepts and never answers ends the command within 2 minutes at the first call that meets
it, naming the endpoint and the attempts, and a wait past 10 s says so on stderr. AWS_MAX_ATTEMPTS and
AWS_RETRY_MODE still win, as with the AWS CLI."""

from __future__ import annotations

import argparse
import ast
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import REGION, REPO_ROOT, run_cli
from llm_infra.cli import aws
from llm_infra.cli.aws import aws_client
from llm_infra.ops.kube import Kube, KubeError


class MuteServer:
    """A loopback HTTP endpoint that accepts every connection and reads every request, then answers only
    those ``answer(request)`` has a body for; the others wait forever, as a black-holed endpoint does."""

    def __init__(self, answer: Callable[[bytes], bytes | None] = lambda request: None) -> None:
        self._answer = answer
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.requests: list[bytes] = []
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self._held.append(connection)
            threading.Thread(target=self._handle, args=(connection,), daemon=True).start()

    def _handle(self, connection: socket.socket) -> None:
        data = b""
        with connection:
            while not self._closed.is_set():
                try:
                    chunk = connection.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                if b"\r\n\r\n" not in data or len(body) < length:
                    continue
                self.requests.append(data)
                data = b""
                reply = self._answer(head + b"\r\n\r\n" + body)
                if reply is None:
                    self._closed.wait()  # never answer
                    return
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply)
                )

    def close(self) -> None:
        self._closed.set()
        self._socket.close()
        for connection in self._held:
            connection.close()


@pytest.fixture
def mute() -> Iterator[MuteServer]:
    server = MuteServer()
    yield server
    server.close()


@pytest.fixture
def credentials(bare_aws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")


def args(**given: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    aws.add_aws_flags(parser)
    parsed = parser.parse_args(["--region", REGION])
    vars(parsed).update(given)
    return parsed


# ---- the settings of every client -------------------------------------------------------------------------
def test_a_client_waits_5_s_to_connect_30_s_for_an_answer_in_3_attempts(credentials: None) -> None:
    config = aws_client(args(), "sagemaker").meta.config
    assert (config.connect_timeout, config.read_timeout) == (5.0, 30.0)
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert aws.WORST_CASE_SECONDS <= 120  # 3 * (5 + 30) s and the standard mode's back-off between attempts


def test_the_timeouts_come_from_the_aws_clis_flags(credentials: None) -> None:
    parser = argparse.ArgumentParser()
    aws.add_aws_flags(parser)
    given = parser.parse_args(["--region", REGION, "--cli-connect-timeout", "2", "--cli-read-timeout", "0"])
    config = aws_client(given, "ec2").meta.config
    assert (config.connect_timeout, config.read_timeout) == (2.0, None)  # 0: wait forever, as the AWS CLI


def test_aws_max_attempts_and_aws_retry_mode_still_win(credentials: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "7")
    monkeypatch.setenv("AWS_RETRY_MODE", "adaptive")
    assert aws_client(args(), "sts").meta.config.retries == {"mode": "adaptive", "total_max_attempts": 7}


def test_the_profiles_retry_settings_still_win(credentials: None, bare_aws: Path) -> None:
    (bare_aws / "config").write_text("[default]\nmax_attempts = 2\nretry_mode = legacy\n")
    assert aws_client(args(), "sts").meta.config.retries == {"mode": "legacy", "total_max_attempts": 2}


def test_every_aws_client_of_the_package_is_made_by_aws_client() -> None:
    """A client made elsewhere would have botocore's defaults: 60 s reads, and no notice of the wait."""
    makers = []
    for path in (REPO_ROOT / "llm_infra").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "client":
                makers.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert makers == ["llm_infra/cli/aws.py:" + str(_line_of("session.client(service"))]


def _line_of(text: str) -> int:
    lines = (REPO_ROOT / "llm_infra/cli/aws.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


# ---- a whole command against an endpoint that never answers ------------------------------------------------
def test_nodes_list_gives_up_on_a_mute_endpoint_naming_it_and_the_attempts(
    credentials: None, mute: MuteServer, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    code, out, err = run_cli(
        capsys, "nodes", "list", "--cluster", "c", "--region", REGION, "--endpoint-url", mute.url,
        "--cli-read-timeout", "0.5",
    )  # fmt: skip
    assert time.monotonic() - started < 10
    assert (code, out) == (1, "")
    assert err.startswith(f"llm-infra: error: {mute.url} did not answer SageMaker ListClusterNodes in 3 attempts over ")
    assert "(no answer within 0.5 s): check the network, the region and --endpoint-url" in err
    assert len(mute.requests) == 3 and "Traceback" not in err


def test_aws_max_attempts_sets_how_often_it_asks(
    credentials: None, mute: MuteServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    code, _, err = run_cli(
        capsys, "nodes", "list", "--cluster", "c", "--region", REGION, "--endpoint-url", mute.url,
        "--cli-read-timeout", "0.5",
    )  # fmt: skip
    assert code == 1 and "did not answer SageMaker ListClusterNodes in 1 attempt over " in err
    assert len(mute.requests) == 1


def test_preflight_stops_at_the_first_endpoint_that_does_not_answer(
    credentials: None, default_app, capsys: pytest.CaptureFixture[str]
) -> None:
    """STS answers, the next service does not: one call's attempts, then the command ends; no check after it
    waits for the same endpoint again (an earlier version spent 362 s on six checks)."""

    def sts_only(request: bytes) -> bytes | None:
        if b"Action=GetCallerIdentity" not in request:
            return None
        return (
            b'<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult>'
            b"<Arn>arn:aws:iam::123456789012:user/u</Arn><UserId>u</UserId><Account>123456789012</Account>"
            b"</GetCallerIdentityResult></GetCallerIdentityResponse>"
        )

    server = MuteServer(sts_only)
    try:
        code, out, err = run_cli(
            capsys, "preflight", "--app-dir", str(REPO_ROOT), "--cdk-out", str(default_app.outdir), "--region", REGION,
            "--endpoint-url", server.url,
            "--cli-read-timeout", "0.5",
        )  # fmt: skip
    finally:
        server.close()
    assert (code, out) == (1, "")
    (line,) = err.splitlines()
    assert line.startswith(f"llm-infra: error: {server.url} did not answer ")
    assert " in 3 attempts over " in line
    assert len(server.requests) == 1 + 3  # GetCallerIdentity, then one call's three attempts


def test_a_wait_past_10_s_says_so_on_stderr(
    credentials: None, mute: MuteServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(aws, "NOTICE_AFTER_SECONDS", 0.2)  # 10 s in use; the line is the same
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    code, _, err = run_cli(
        capsys, "nodes", "list", "--cluster", "c", "--region", REGION, "--endpoint-url", mute.url,
        "--cli-read-timeout", "0.6",
    )  # fmt: skip
    waiting = [line for line in err.splitlines() if line.startswith("llm-infra: waiting")]
    assert waiting == [
        f"llm-infra: waiting for {mute.url} (ListClusterNodes): no answer after 0.2 s, attempt {n} of 2" for n in (1, 2)
    ]
    assert code == 1


def test_a_quick_answer_says_nothing_of_waiting(aws_endpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(
        capsys, "nodes", "list", "--cluster", "none", "--region", REGION, "--endpoint-url", aws_endpoint
    )
    assert code == 1 and "waiting" not in err and "did not answer" not in err


# ---- the Kubernetes API ----------------------------------------------------------------------------------
def test_the_kubernetes_client_gives_up_on_a_mute_api_server(mute: MuteServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: '{mute.url}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    started = time.monotonic()
    with pytest.raises(KubeError, match=f"cannot reach the Kubernetes API at {mute.url}"):
        Kube.connect(kubeconfig=str(kubeconfig), context=None, timeouts=(1, 0.5))
    assert time.monotonic() - started < 10
    assert len(mute.requests) == 3  # the first attempt and two retries


def test_the_kubernetes_client_is_bounded_by_default() -> None:
    """A request that names no timeout gets (5 s, 30 s); the kubernetes client's own default is none."""
    from kubernetes import client

    configuration = type.__call__(client.Configuration)
    configuration.host = "https://k8s.invalid"
    api_client = client.ApiClient(configuration)
    seen: list[object] = []

    def request(*args: object, _request_timeout: object = None, **kwargs: object) -> None:
        seen.append(_request_timeout)
        raise RuntimeError("no server here")

    api_client.rest_client.request = request
    with pytest.raises(KubeError, match="no server here"):
        Kube(api_client)
    assert seen == [(5.0, 30.0)]
