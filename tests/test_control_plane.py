"""A real kube-apiserver 1.34 (+ etcd) built from pinned Go modules (issue 22, k8s/build.sh): it accepts a
server-side dry-run of every rendered manifest whose kind it serves, the operators' CRDs applied first.

On the session's control plane (tests/conftest.py's ``control_plane``), in a namespace of the test's own. Two
tests start their own: the stop test (it checks the control plane's own life) and, only when an operator of the
session's plane runs CRDs other than the pinned ones (KubeRay's fallback), the dry-run, which then checks the
rendered objects against the pinned CRDs on an etcd and kube-apiserver of its own. Without the binaries
(``make k8s``, or ``$LLM_INFRA_K8S_BIN_DIR``) every test here skips.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_plane import drop_namespace, new_namespace, render_dist

from conftest import RAY_TEST_IMAGE
from llm_infra.config import TrainingConfig
from llm_infra.ops.kube import Kube, KubeError
from llm_infra.rehearsal import control_plane, crds
from llm_infra.rehearsal.control_plane import ControlPlane, ControlPlaneError, kubectl_binary

SHARED_CRDS = Path(__file__).resolve().parent.parent.parent / "shared" / "crds"
OUTPUTS = {  # as cdk deploy --outputs-file writes them: the FSx chart is rendered too
    "llm-infra-storage": {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "FileSystemMountName": "abcdefgh",
    }
}


@pytest.fixture(scope="session")
def cluster(control_plane: ControlPlane) -> ControlPlane:
    """The session's control plane (the fixture ``control_plane``, not the module), with kubectl."""
    try:
        kubectl_binary()
    except ControlPlaneError as err:
        pytest.skip(f"real control-plane tier: {err}")
    return control_plane


def crd_files() -> list[Path]:
    """The pinned CRDs: ``$LLM_INFRA_CRDS_DIR`` / ``.cache/crds``, else the shared copy; and Kueue's, which
    ``make crds`` copies from its Go module (the queues the app renders are its kinds)."""
    kueue = [crds.kueue_dir() / name for name in sorted(crds.KUEUE_CRD_FILES)]
    kueue = kueue if not crds.kueue_missing() else []
    for directory in (crds.crds_dir(), SHARED_CRDS):
        files = sorted(directory.glob("*.yaml"))
        if files:
            return files + kueue
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


def other_than_pinned(cp: control_plane.ControlPlane, files: list[Path]) -> list[str]:
    """The pinned CRDs that an operator of ``cp`` runs in another version (its own, as k8s/build.sh copied them)."""
    theirs = {crd.name: crd for name in cp.operator_versions for crd in control_plane.operator_crds(cp.bin_dir, name)}
    return [f.name for f in files if f.name in theirs and theirs[f.name].read_bytes() != f.read_bytes()]


def test_server_is_the_pinned_release(cluster) -> None:
    versions = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert versions["serverVersion"]["gitVersion"] == control_plane.K8S_VERSION


def test_server_side_dry_run_of_a_namespace(cluster, tmp_path: Path) -> None:
    manifest = tmp_path / "ns.yaml"
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: dry-run-check\n")
    result = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(manifest))
    assert "namespace/dry-run-check created (server dry run)" in result.stdout
    assert cluster.kubectl("get", "namespace", "dry-run-check", check=False).returncode != 0  # nothing stored


def test_a_rehearsal_reads_only_the_warning_events_it_asks_for(cluster) -> None:
    # rehearse reads events with type=Warning (at 256 nodes the Normal ones are tens of thousands): the API
    # server filters them, and a selector it does not support is an error, not every event.
    with cluster.kube() as kube:
        namespace = new_namespace(cluster, kube, "events", queue=False)
        try:
            for kind in ("Warning", "Normal"):
                kube.create(
                    {
                        "apiVersion": "v1",
                        "kind": "Event",
                        "metadata": {"name": kind.lower(), "namespace": namespace},
                        "involvedObject": {"kind": "ConfigMap", "namespace": namespace, "name": "any"},
                        "type": kind,
                        "reason": "Test",
                    }
                )
            found = kube.items("v1", "Event", namespace, field_selector="type=Warning")
            assert [(e["metadata"]["name"], e["kind"]) for e in found] == [("warning", "Event")]
            with pytest.raises(KubeError, match="list Event"):
                kube.items("v1", "Event", namespace, field_selector="color=red")
        finally:
            drop_namespace(cluster, kube, namespace)


def test_every_rendered_object_passes_a_server_side_dry_run(cluster, own_control_plane, tmp_path: Path) -> None:
    # The operators' CRDs first (for real: a dry-run of a custom object needs its CRD established).
    files = crd_files()
    assert files, f"no CRDs in {crds.crds_dir()} or {SHARED_CRDS}: run `make crds`"
    with contextlib.ExitStack() as stack:
        plane = cluster
        if other_than_pinned(cluster, files):  # the pinned CRDs, not the operator's, are what is checked
            plane = stack.enter_context(own_control_plane(components=()))
        plane.apply_crds(files)  # server-side, then waits until each is Established
        kube = stack.enter_context(Kube.connect(kubeconfig=str(plane.kubeconfig), context=None))
        namespace = new_namespace(plane, kube, "dry-run")
        stack.callback(drop_namespace, plane, kube, namespace)
        dry_run(plane, tmp_path, namespace)


def dry_run(plane: control_plane.ControlPlane, tmp_path: Path, namespace: str) -> None:
    """Every object of the rendered charts (in ``namespace``) passes a strict server-side dry-run."""
    outputs = tmp_path / "cdk-outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    rendered = render_dist(
        TrainingConfig(ray_image=RAY_TEST_IMAGE), tmp_path / "dist", outputs_file=outputs, namespace=namespace
    )
    assert rendered
    objects: list[tuple[str, Any]] = [
        (path.name, obj)
        for path in rendered
        for obj in yaml.safe_load_all(path.read_text())
        if obj  # cdk8s may leave empty documents
    ]
    served = served_kinds(plane)
    unserved = sorted(
        {f"{o['apiVersion']}/{o['kind']}" for _, o in objects if (o["apiVersion"], o["kind"]) not in served}
    )
    checked = [(name, o) for name, o in objects if (o["apiVersion"], o["kind"]) in served]

    # The Namespace exists (the test's own): the namespaced objects' dry-run finds it.
    assert [o["metadata"]["name"] for _, o in checked if o["kind"] == "Namespace"] == [namespace]
    failures = []
    for index, (name, obj) in enumerate(checked):
        one = tmp_path / f"obj-{index}.yaml"
        one.write_text(yaml.safe_dump(obj))
        result = plane.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(one), check=False)
        if result.returncode != 0:
            failures.append(f"{name}: {obj['kind']}/{obj['metadata'].get('name')}: {result.stderr.strip()}")
    assert not failures, "\n".join(failures)
    assert len(checked) > 10, f"too few objects checked; not served: {unserved}"
    # Every kind we render is built in or has its CRD applied above.
    assert not unserved, f"kinds the server does not serve (no CRD applied; Kueue's: make crds): {unserved}"


def test_every_process_is_stopped_by_pid_on_exit(k8s_binaries: Path) -> None:
    """A control plane of its own: what is checked is its life, start to stop."""
    with control_plane.ControlPlane(k8s_binaries, components=()) as cp:
        pids = list(cp.pids.values())
        workdir = cp.workdir
        assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not workdir.exists()
