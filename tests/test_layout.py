"""The `constructs/` folder never shadows the `constructs` library, in a checkout and when installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from conftest import RAY_TEST_IMAGE, REPO_ROOT


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300) -> str:
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_import_constructs_from_repo_root_gets_the_library() -> None:
    out = run(
        [
            sys.executable,
            "-c",
            "import constructs, sys; print(constructs.__file__); print(constructs.Construct)",
        ],
        REPO_ROOT,
    )
    assert "site-packages" in out and "constructs.Construct" in out


def test_pytest_sees_the_library_and_our_subpackages() -> None:
    import constructs

    import llm_infra.constructs.training_vpc as training_vpc

    assert hasattr(constructs, "Construct")
    assert Path(training_vpc.__file__).parent == REPO_ROOT / "constructs"


def test_python_app_py_synthesizes_from_the_repo_root(tmp_path: Path) -> None:
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path)}
    run([sys.executable, "app.py"], REPO_ROOT, env=env)
    assert {p.name for p in tmp_path.glob("*.template.json")} == {
        "llm-infra-network.template.json",
        "llm-infra-storage.template.json",
        "llm-infra-cluster.template.json",
    }


def test_app_py_reads_context_overrides(tmp_path: Path) -> None:
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path), "CDK_CONTEXT_JSON": '{"gpu_nodes": "0"}'}
    result = subprocess.run([sys.executable, "app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "gpu_nodes: 0 must be >= 1" in result.stderr


@pytest.mark.slow
def test_wheel_install_used_from_another_cdk_app(tmp_path: Path) -> None:
    """`pip install .` (not editable), then a separate app in another folder imports our constructs."""
    wheel_dir = tmp_path / "wheels"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(REPO_ROOT),
        ],
        tmp_path,
    )
    (wheel,) = wheel_dir.glob("llm_infra-*.whl")

    # A fresh venv that reuses this environment's third-party packages (offline, fast) but not
    # its editable llm_infra: site-packages are appended after the venv's own.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip()
    ours = run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip()
    Path(site, "shared-deps.pth").write_text(ours + "\n")
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, str(wheel)], tmp_path)

    app_dir = tmp_path / "their-app"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(
        textwrap.dedent(
            """
            import aws_cdk as cdk
            import llm_infra
            from llm_infra.constructs.efa_security_group import EfaSecurityGroup
            from llm_infra.constructs.training_bucket import TrainingBucket
            from llm_infra.constructs.training_vpc import TrainingVpc

            app = cdk.App(outdir="out")
            stack = cdk.Stack(app, "TheirStack")
            network = TrainingVpc(stack, "Net", gpu_az_id="usw2-az2")
            EfaSecurityGroup(stack, "Efa", vpc=network.vpc)
            TrainingBucket(stack, "Checkpoints")
            app.synth()
            print(llm_infra.__file__)
            """
        )
    )
    out = run([str(python), "app.py"], app_dir, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.strip().startswith(site), out
    assert (app_dir / "out" / "TheirStack.template.json").is_file()
    # The wheel carries the card's folders as subpackages, and no top-level `constructs`.
    listing = run([sys.executable, "-m", "zipfile", "-l", str(wheel)], tmp_path)
    assert "llm_infra/constructs/training_vpc.py" in listing
    assert "llm_infra/constructs/hyperpod_lifecycle/on_create.sh" in listing
    assert "llm_infra/data_prep/tokenize_dataset.py" in listing  # the data-preparation ConfigMap reads it
    assert "\nconstructs/" not in listing


def test_app_writes_the_charts_as_yaml_when_asked(tmp_path: Path) -> None:
    """`make synth RAY_IMAGE=...` passes -c manifests_dir=k8s_manifests/dist -c ray_image=...: the same
    run writes the YAML, the Ray manifests on that image among them."""
    dist = tmp_path / "dist"
    context = {"manifests_dir": str(dist), "ray_image": RAY_TEST_IMAGE}
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path / "out"), "CDK_CONTEXT_JSON": json.dumps(context)}
    run([sys.executable, "app.py"], REPO_ROOT, env=env)
    assert RAY_TEST_IMAGE in (dist / "kuberay.k8s.yaml").read_text()
    assert {p.name for p in dist.glob("*.yaml")} == {
        "base.k8s.yaml",
        "kuberay.k8s.yaml",
        "kueue-queues.k8s.yaml",
        "node-monitoring.k8s.yaml",
        "validation.k8s.yaml",
        "training-job.k8s.yaml",
        "llama2-7b-1-data-prep.k8s.yaml",
        "llama2-7b-2-train.k8s.yaml",
    }


def test_each_folder_of_llm_infra_imports_only_what_its_role_allows() -> None:
    """The foundation (llm_infra/*.py, and the constructs, stacks and charts built on it) imports nothing of
    the command, the planner or the tools (ops/, preflight/, rehearsal/); none of those imports the command,
    and live operations never import the account checks or the rehearsal."""
    import re

    tools = ("llm_infra.ops", "llm_infra.preflight", "llm_infra.rehearsal")
    forbidden = {
        "foundation": ("llm_infra.cli", "llm_infra.planner", *tools),
        "ops": ("llm_infra.cli", "llm_infra.preflight", "llm_infra.rehearsal"),
        "preflight": ("llm_infra.cli", "llm_infra.rehearsal"),
        "rehearsal": ("llm_infra.cli", "llm_infra.preflight"),
        "planner": ("llm_infra.cli",),
    }
    folders = {
        "foundation": [
            *(REPO_ROOT / "llm_infra").glob("*.py"),
            *(REPO_ROOT / "constructs").glob("*.py"),
            *(REPO_ROOT / "stacks").glob("*.py"),
            *(REPO_ROOT / "k8s_manifests").glob("*.py"),
        ],
        **{role: list((REPO_ROOT / "llm_infra" / role).glob("*.py")) for role in ("ops", "preflight", "rehearsal")},
        "planner": list((REPO_ROOT / "llm_infra" / "planner").glob("*.py")),
    }
    imports = re.compile(r"^\s*(?:from|import)\s+(llm_infra[\w.]*)", re.M)
    found = [
        f"{path.relative_to(REPO_ROOT)} imports {module}"
        for role, paths in folders.items()
        for path in paths
        for module in imports.findall(path.read_text())
        if module.startswith(forbidden[role])
    ]
    assert all(folders.values()) and not found, found
