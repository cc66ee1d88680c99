"""``llm_infra.rehearsal.control_plane`` as a public, envtest-like module (issue 29): a component whose reserved
port was taken before it could bind is started again on new ports; a failed start stops everything, keeps
the components' logs in a folder and says where; ``keep_logs`` keeps them after a good run too; ``kube()`` is
the ops client (``llm_infra.ops.kube.Kube``), whose errors name the object and carry the API server's
message. etcd and kube-apiserver only (about 5 s each); skipped, with the build command, without them."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llm_infra.ops.kube import KubeError
from llm_infra.rehearsal import control_plane, ports
from llm_infra.versions import K8S_VERSION

BIN_DIR = control_plane.default_bin_dir()
MISSING = control_plane.missing_binaries(BIN_DIR)


@pytest.fixture(scope="session")
def k8s_binaries() -> Path:
    """The control plane's binaries; skips with the build command without them. By its name this puts the tests
    that use it in the ``control_plane`` tier (tests/tiers.py); tests/conftest.py has the same fixture."""
    if MISSING:
        pytest.skip(
            f"real control plane: {', '.join(MISSING)} not built in {BIN_DIR}; run `make k8s` "
            f"or set {control_plane.BIN_DIR_VARIABLE} to prebuilt binaries"
        )
    return BIN_DIR


@pytest.fixture
def take_etcds_ports(k8s_binaries: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], list[int]]]:
    """``take(n)``: the first ``n`` ports reserved for etcd's client URL are taken right after their
    reservation, by a listener outside the scheme (with SO_REUSEADDR, as a server may have it); the ports
    taken are returned. (A test that uses it starts a control plane: ``k8s_binaries``.)"""
    taken: list[socket.socket] = []
    state = {"left": 0, "calls": 0}
    real = control_plane.reserve

    def reserve(host: str = ports.LOOPBACK, *, hold: bool = True) -> ports.Reservation:
        reservation = real(host, hold=hold)
        state["calls"] += 1
        if state["left"] and state["calls"] % 2 == 1:  # etcd reserves (client, peer): its client port
            state["left"] -= 1
            thief = socket.socket()
            thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            thief.bind((host, reservation.port))
            thief.listen()
            taken.append(thief)
        return reservation

    def take(count: int) -> list[int]:
        state["left"] = count
        return [s.getsockname()[1] for s in taken]

    monkeypatch.setattr(control_plane, "reserve", reserve)
    yield take
    for thief in taken:
        thief.close()


def test_a_component_whose_port_was_taken_starts_again_on_new_ports(take_etcds_ports, tmp_path: Path) -> None:
    take_etcds_ports(1)
    with control_plane.ControlPlane(BIN_DIR, components=(), keep_logs=True, logs_dir=tmp_path) as cp:
        (taken,) = take_etcds_ports(0)
        assert [line.split(":")[0] for line in cp.retries] == ["etcd"], cp.retries
        assert f"127.0.0.1:{taken}: bind: address already in use" in cp.retries[0]
        assert taken not in cp.ports["etcd"] and cp.running == ["etcd", "kube-apiserver"]
        assert cp.server_version() == K8S_VERSION
        with cp.kube() as kube:  # the ops client, errors naming the object and the API server's message
            kube.apply_as({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "checked"}})
            with pytest.raises(
                KubeError, match=r"^apply Namespace typo: 500 .*: \.spec\.bogus: field not declared in schema$"
            ):
                kube.apply_as(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "typo"}, "spec": {"bogus": 1}}
                )
            assert [n["metadata"]["name"] for n in kube.items("v1", "Namespace") if n["metadata"]["name"] == "checked"]
    assert cp.logs_kept is not None and cp.logs_kept.parent == tmp_path  # asked for: kept after a good run
    kept = {path.name for path in cp.logs_kept.iterdir()}
    assert kept == {"etcd.attempt-1.log", "etcd.log", "kube-apiserver.log"}, kept
    assert "bind: address already in use" in (cp.logs_kept / "etcd.attempt-1.log").read_text()
    assert not cp.workdir.exists() and not cp.running


def test_a_failed_start_stops_everything_and_keeps_the_logs(take_etcds_ports, tmp_path: Path) -> None:
    take_etcds_ports(2)
    plane = control_plane.ControlPlane(BIN_DIR, components=(), start_attempts=2, logs_dir=tmp_path)
    with pytest.raises(control_plane.ControlPlaneError) as failed:
        plane.start()
    message = str(failed.value)
    assert message.startswith("etcd could not bind its port: ") and "(2 attempts, new ports each time)" in message
    assert plane.logs_kept is not None and message.endswith(f"(the components' logs are kept in {plane.logs_kept})")
    assert {path.name for path in plane.logs_kept.iterdir()} == {"etcd.attempt-1.log", "etcd.attempt-2.log"}
    assert not plane.running and not plane.workdir.exists()
