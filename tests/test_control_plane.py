"""A real kube-apiserver 1.34 (+ etcd) built from pinned Go modules (issue 22, k8s/build.sh): it accepts a
server-side dry-run of every rendered manifest whose kind it serves, the operators' CRDs applied first.

This tier is not yet in CI: without the binaries (``make k8s``, or ``$LLM_INFRA_K8S_BIN_DIR``) it skips.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conftest import RAY_TEST_IMAGE
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.rehearsal import control_plane, crds

BIN_DIR = control_plane.default_bin_dir()
SHARED_CRDS = Path(__file__).resolve().parent.parent.parent / "shared" / "crds"
OUTPUTS = {  # as cdk deploy --outputs-file writes them: the FSx chart is rendered too
    "llm-infra-storage": {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "FileSystemMountName": "abcdefgh",
    }
}


@pytest.fixture(scope="session")
def cluster() -> Iterator[control_plane.ControlPlane]:
    absent = control_plane.missing_binaries(BIN_DIR)
    if absent:
        pytest.skip(
            f"real control-plane tier (not yet in CI): {', '.join(absent)} not built in {BIN_DIR}; "
            f"build them with `make k8s` (k8s/build.sh; a cold build takes tens of minutes, see "
            f"docs/control-plane.md) or set {control_plane.BIN_DIR_VARIABLE} to prebuilt binaries"
        )
    try:
        control_plane.kubectl_binary()
    except control_plane.ControlPlaneError as err:
        pytest.skip(f"real control-plane tier: {err}")
    with control_plane.ControlPlane(BIN_DIR) as cp:
        yield cp


def crd_files() -> list[Path]:
    """The pinned CRDs: ``$LLM_INFRA_CRDS_DIR`` / ``.cache/crds``, else the shared copy."""
    for directory in (crds.crds_dir(), SHARED_CRDS):
        files = sorted(directory.glob("*.yaml"))
        if files:
            return files
    return []


def served_kinds(cp: control_plane.ControlPlane) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every resource the API server serves now."""
    out = cp.kubectl("api-resources", "--no-headers", "-o", "wide").stdout
    kinds = set()
    for line in out.splitlines():
        fields = line.split()
        # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND VERBS [CATEGORIES]
        namespaced = next(i for i, f in enumerate(fields) if f in ("true", "false"))
        kinds.add((fields[namespaced - 1], fields[namespaced + 1]))
    return kinds


def wait_established(cp: control_plane.ControlPlane, names: list[str], timeout: float = 60.0) -> None:
    """Until every CRD in ``names`` has condition Established=True (bounded by ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        items = json.loads(cp.kubectl("get", *names, "-o", "json").stdout)["items"]
        pending = [
            item["metadata"]["name"]
            for item in items
            if not any(
                c["type"] == "Established" and c["status"] == "True"
                for c in item.get("status", {}).get("conditions") or []
            )
        ]
        if not pending:
            return
        assert time.monotonic() < deadline, f"CRDs not established after {timeout:.0f} s: {pending}"
        time.sleep(0.5)


def test_server_is_the_pinned_release(cluster) -> None:
    versions = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert versions["serverVersion"]["gitVersion"] == control_plane.K8S_VERSION


def test_server_side_dry_run_of_a_namespace(cluster, tmp_path: Path) -> None:
    manifest = tmp_path / "ns.yaml"
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: dry-run-check\n")
    result = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(manifest))
    assert "namespace/dry-run-check created (server dry run)" in result.stdout
    assert cluster.kubectl("get", "namespace", "dry-run-check", check=False).returncode != 0  # nothing stored


def test_every_rendered_object_passes_a_server_side_dry_run(cluster, tmp_path: Path) -> None:
    # The operators' CRDs first (for real: a dry-run of a custom object needs its CRD established).
    files = crd_files()
    assert files, f"no CRDs in {crds.crds_dir()} or {SHARED_CRDS}: run `make crds`"
    names = [cluster.kubectl("apply", "--server-side", "-o", "name", "-f", str(crd)).stdout.strip() for crd in files]
    wait_established(cluster, names)

    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    rendered = write_dist(TrainingConfig(ray_image=RAY_TEST_IMAGE), tmp_path / "dist", outputs_file=outputs)
    assert rendered
    objects = [
        (path.name, obj)
        for path in rendered
        for obj in yaml.safe_load_all(path.read_text())
        if obj  # cdk8s may leave empty documents
    ]
    served = served_kinds(cluster)
    unserved = sorted(
        {f"{o['apiVersion']}/{o['kind']}" for _, o in objects if (o["apiVersion"], o["kind"]) not in served}
    )
    checked = [(name, o) for name, o in objects if (o["apiVersion"], o["kind"]) in served]

    # Namespaces for real, so that the namespaced objects' dry-run finds them.
    namespaces = [o for _, o in checked if o["kind"] == "Namespace"]
    if namespaces:
        ns_file = tmp_path / "namespaces.yaml"
        ns_file.write_text(yaml.safe_dump_all(namespaces))
        cluster.kubectl("apply", "-f", str(ns_file))
    failures = []
    for index, (name, obj) in enumerate(checked):
        one = tmp_path / f"obj-{index}.yaml"
        one.write_text(yaml.safe_dump(obj))
        result = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(one), check=False)
        if result.returncode != 0:
            failures.append(f"{name}: {obj['kind']}/{obj['metadata'].get('name')}: {result.stderr.strip()}")
    assert not failures, "\n".join(failures)
    assert len(checked) > 10, f"too few objects checked; not served: {unserved}"
    # Every kind we render is built in or has its CRD applied above.
    assert not unserved, f"kinds the server does not serve (no CRD applied): {unserved}"


def test_every_process_is_stopped_by_pid_on_exit() -> None:
    if control_plane.missing_binaries(BIN_DIR):
        pytest.skip(f"real control-plane tier (not yet in CI): no binaries in {BIN_DIR}; run `make k8s`")
    with control_plane.ControlPlane(BIN_DIR, components=()) as cp:
        pids = [p.popen.pid for p in cp._processes]
        workdir = cp.workdir
        assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not workdir.exists()
