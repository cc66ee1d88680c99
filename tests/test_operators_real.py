"""The real Kubeflow training operator and the real KubeRay operator (built by k8s/build.sh at the versions
we deploy) against the real control plane: what ``make synth`` renders turns into pods that the real
kube-scheduler binds to simulated p5 nodes (KWOK: scheduled and marked Running, no container runs).

On the session's control plane (tests/conftest.py's ``control_plane``, which runs both operators), the charts
rendered into a namespace of this module's own; its nodes (two p5s and a system node) are the only ones while
it runs and are removed after it. Without the binaries (``make k8s``, or ``$LLM_INFRA_K8S_BIN_DIR``) it skips.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_plane import drop_namespace, new_namespace, render_dist, wait_for

from conftest import RAY_TEST_IMAGE
from llm_infra.config import TrainingConfig
from llm_infra.instance_types import INSTANCE_PROFILES
from llm_infra.node_labels import EFA_LABEL, GPU_TAINT_KEY, INSTANCE_TYPE_LABEL, NODE_ROLE_LABEL
from llm_infra.ops.kube import Kube
from llm_infra.rehearsal import control_plane, crds
from llm_infra.rehearsal.control_plane import (
    BIN_DIR_VARIABLE,
    ControlPlaneError,
    condition_tainted,
    kubectl_binary,
    missing_binaries,
)

BIN_DIR = control_plane.default_bin_dir()
BASE = ("kube-controller-manager", "kube-scheduler", "kwok")
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
GPU_NODES = ("p5-0", "p5-1")
SYSTEM_NODE = "system-0"
OUTPUTS = {  # as cdk deploy --outputs-file writes them: the FSx volume (the pods' PVC) is rendered too
    "llm-infra-storage": {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemDnsName": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "FileSystemMountName": "abcdefgh",
    }
}


class Cluster:
    """The session's control plane with the charts rendered into ``namespace`` at hand."""

    def __init__(self, cp: control_plane.ControlPlane, dist: Path, tmp: Path, namespace: str) -> None:
        self.cp = cp
        self.dist = dist
        self.tmp = tmp
        self.namespace = namespace

    def objects(self, file: str, kind: str) -> list[dict[str, Any]]:
        docs = yaml.safe_load_all((self.dist / file).read_text())
        return [doc for doc in docs if doc and doc["kind"] == kind]

    def apply(self, name: str, objects: list[dict[str, Any]]) -> None:
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(objects))
        self.cp.kubectl("apply", "--server-side", "-f", str(path))

    def pods(self, selector: str) -> list[dict[str, Any]]:
        out = self.cp.kubectl("get", "pods", "-n", self.namespace, "-l", selector, "-o", "json").stdout
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def nodes(self) -> dict[str, dict[str, Any]]:
        items = json.loads(self.cp.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        return {node["metadata"]["name"]: node for node in items}

    def wait_for(
        self, what: str, check: Callable[[], list[dict[str, Any]] | None], component: str
    ) -> list[dict[str, Any]]:
        """:func:`shared_plane.wait_for` in the module's namespace: what ``check`` returned once it was a list."""
        return wait_for(what, check, plane=self.cp, namespace=self.namespace, component=component)


def allocatable(vcpus: int, memory_gib: int, hugepages_mib: int = 0) -> dict[str, str]:
    """What the kubelet offers: a core and 2 GiB held back (about the EKS AMI's reservation), the
    hugepages out of memory, the kubelet's default 110 pods."""
    resources = {"cpu": str(vcpus - 1), "memory": f"{memory_gib * 1024 - 2048 - hugepages_mib}Mi", "pods": "110"}
    if hugepages_mib:
        resources["hugepages-2Mi"] = f"{hugepages_mib}Mi"
    return resources


def kwok_node(name: str, instance_type: str, labels: dict[str, str], resources: dict[str, str]) -> dict[str, Any]:
    """A Node that KWOK manages (its annotation), as the kubelet of ``instance_type`` registers it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                INSTANCE_TYPE_LABEL: instance_type,
                **labels,
            },
        },
        "spec": {"taints": [{"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]}
        if labels.get(NODE_ROLE_LABEL) == "gpu"
        else {},
        "status": {"capacity": resources, "allocatable": resources},
    }


def cluster_nodes() -> list[dict[str, Any]]:
    """Two p5.48xlarge GPU nodes as constructs/gpu_node_group.py labels and taints them (hugepages as
    the default config reserves them), and one system node (constructs/training_cluster.py) for the Ray head."""
    config = TrainingConfig()
    p5 = INSTANCE_PROFILES["p5.48xlarge"]
    gpu_resources = {
        **allocatable(p5.vcpus, p5.memory_gib, hugepages_mib=config.hugepages_2mib * 2),
        GPU: str(p5.gpus),
        EFA: str(p5.efa_interfaces),
    }
    gpu_labels = {NODE_ROLE_LABEL: "gpu", EFA_LABEL: "true"}
    # TrainingConfig's default system_instance_type: 4 vCPUs, 16 GiB (EC2 instance-type documentation).
    system = kwok_node(SYSTEM_NODE, "m7i.xlarge", {NODE_ROLE_LABEL: "system"}, allocatable(vcpus=4, memory_gib=16))
    return [system, *(kwok_node(name, p5.instance_type, gpu_labels, gpu_resources) for name in GPU_NODES)]


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The session's control plane (the fixture ``control_plane``, here a ControlPlane, not the module) with the
    charts rendered into a namespace of the module's own, two p5 nodes and a system node."""
    absent = missing_binaries(control_plane.bin_dir, BASE)
    if absent:
        pytest.skip(
            f"real control plane: {', '.join(absent)} not built in {control_plane.bin_dir}; build them "
            f"with `make k8s` (k8s/build.sh; see docs/control-plane.md) or set {BIN_DIR_VARIABLE}"
        )
    try:
        kubectl_binary()
    except ControlPlaneError as err:
        pytest.skip(f"real control-plane tier: {err}")
    tmp = tmp_path_factory.mktemp("operators")
    outputs = tmp / "cdk-outputs.json"
    outputs.write_text(json.dumps(OUTPUTS))
    with Kube.connect(kubeconfig=str(control_plane.kubeconfig), context=None) as kube:
        namespace = new_namespace(control_plane, kube, "operators")
        dist = tmp / "dist"
        render_dist(TrainingConfig(ray_image=RAY_TEST_IMAGE), dist, outputs_file=outputs, namespace=namespace)
        cluster = Cluster(control_plane, dist, tmp, namespace)
        # The Namespace, ServiceAccount and ConfigMap the pods name, and the FSx PV + PVC they mount.
        for file in ("base.k8s.yaml", "fsx-storage.k8s.yaml"):
            control_plane.kubectl("apply", "--server-side", "-f", str(dist / file))
        nodes = cluster_nodes()
        cluster.apply("nodes", nodes)
        try:

            def ready() -> list[dict[str, Any]] | None:
                got = [cluster.nodes()[node["metadata"]["name"]] for node in nodes]
                return got if all(_ready(node) for node in got) else None

            cluster.wait_for("KWOK marks the nodes Ready", ready, "kwok")

            def bound() -> list[dict[str, Any]] | None:
                claims = json.loads(control_plane.kubectl("get", "pvc", "-n", namespace, "-o", "json").stdout)["items"]
                return claims if claims and all(c["status"].get("phase") == "Bound" for c in claims) else None

            cluster.wait_for("the PV controller binds the FSx claim", bound, "kube-controller-manager")

            def untainted() -> list[dict[str, Any]] | None:
                got = [cluster.nodes()[node["metadata"]["name"]] for node in nodes]
                return None if any(condition_tainted(node) for node in got) else got

            cluster.wait_for(
                "the node lifecycle controller lifts the not-ready taint", untainted, "kube-controller-manager"
            )
            yield cluster
        finally:  # the nodes and the volume outlive the namespace: removed, so that no other test sees them
            for kind in ("rayclusters.ray.io", "pytorchjobs.kubeflow.org"):  # KubeRay's GCS cleanup finalizer too
                left = control_plane.kubectl("get", kind, "-n", namespace, "-o", "name", check=False).stdout.split()
                for name in left:
                    control_plane.kubectl("delete", name, "-n", namespace, "--wait=false")
                    control_plane.kubectl(
                        "patch", name, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                        check=False,
                    )  # fmt: skip
            control_plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force")
            names = [node["metadata"]["name"] for node in nodes]
            control_plane.kubectl("delete", "nodes", *names, "--ignore-not-found")
            control_plane.kubectl("delete", "pv", f"fsx-data-{namespace}", "--ignore-not-found", "--wait=false")
            control_plane.kubectl(
                "patch", "pv", f"fsx-data-{namespace}", "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                check=False,
            )  # fmt: skip
            drop_namespace(control_plane, kube, namespace)
            wait_for(
                f"nodes {names} gone",
                lambda: not set(names) & set(cluster.nodes()),
                plane=control_plane,
            )


def _ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _require(operator: str) -> None:
    if control_plane.missing_binaries(BIN_DIR, [operator]):
        pytest.skip(f"{operator} not built in {BIN_DIR}: k8s/build.sh {operator}")


def _scheduled(pods: list[dict[str, Any]], count: int) -> list[dict[str, Any]] | None:
    """``pods`` when there are ``count`` of them, each bound to a node and Running (KWOK's doing)."""
    if len(pods) != count:
        return None
    if all(pod["spec"].get("nodeName") and pod["status"].get("phase") == "Running" for pod in pods):
        return pods
    return None


def _assert_on_gpu_nodes(cluster: Cluster, pods: list[dict[str, Any]]) -> None:
    nodes = cluster.nodes()
    placed = [pod["spec"]["nodeName"] for pod in pods]
    assert sorted(placed) == sorted(GPU_NODES), f"one pod per GPU node, got {placed}"
    for pod in pods:
        assert nodes[pod["spec"]["nodeName"]]["metadata"]["labels"][NODE_ROLE_LABEL] == "gpu"
        (container,) = [c for c in pod["spec"]["containers"] if GPU in c["resources"].get("requests", {})]
        assert container["resources"]["requests"][GPU] == "8", pod["metadata"]["name"]
        assert container["resources"]["requests"][EFA] == "32", pod["metadata"]["name"]


def _owner_kinds(pod: dict[str, Any]) -> list[str]:
    return [owner["kind"] for owner in pod["metadata"].get("ownerReferences", [])]


@pytest.mark.parametrize("operator", control_plane.OPERATORS)
def test_operator_crds_are_the_pinned_ones(operator: str) -> None:
    """The CRDs an operator starts with (from its own module) are byte for byte the ones we pin and deploy."""
    built = control_plane.operator_crds(BIN_DIR, operator)
    if not built:
        pytest.skip(f"{operator} not built in {BIN_DIR}: make k8s")
    if control_plane.built_version(BIN_DIR, operator) == control_plane.FALLBACK_VERSIONS.get(operator):
        pytest.skip(
            f"{control_plane.operator_version_note(BIN_DIR, operator)}: it starts with that release's own CRDs; "
            "the pinned ones stay what the manifests are validated against"
        )
    checked = 0
    for crd in built:
        source = crds.CRD_SOURCES.get(crd.name)
        if source is not None:  # RayService: KubeRay needs it, we pin no copy
            assert hashlib.sha256(crd.read_bytes()).hexdigest() == source.sha256, crd
            checked += 1
    assert checked, f"none of {[crd.name for crd in built]} is a pinned CRD"


def test_every_process_listens_on_loopback_only(cluster: Cluster) -> None:
    for name, pid in cluster.cp.pids.items():
        addresses = _listening(pid)
        assert addresses, f"{name} listens nowhere?"
        assert addresses == {"127.0.0.1"}, f"{name} listens on {addresses}"


def _listening(pid: int) -> set[str]:
    """The local IPs of the TCP sockets ``pid`` listens on (from /proc: its socket inodes, then net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with_target = os.readlink(f"/proc/{pid}/fd/{fd}")
        if with_target.startswith("socket:["):
            inodes.add(with_target[len("socket:[") : -1])
    addresses = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                hex_ip = fields[1].split(":")[0]
                if table == "tcp":
                    addresses.add(".".join(str(b) for b in reversed(bytes.fromhex(hex_ip))))
                else:
                    addresses.add(f"IPv6 {hex_ip}")
    return addresses


def test_training_operator_turns_the_pytorchjob_into_pods_on_gpu_nodes(cluster: Cluster) -> None:
    _require("training-operator")
    (job,) = cluster.objects("training-job.k8s.yaml", "PyTorchJob")
    name = job["metadata"]["name"]
    workers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    assert workers == len(GPU_NODES)
    cluster.apply("pytorchjob", [job])
    selector = f"training.kubeflow.org/job-name={name}"
    pods = cluster.wait_for(
        f"{workers} pods of PyTorchJob {name} bound and Running",
        lambda: _scheduled(cluster.pods(selector), workers),
        "training-operator",
    )
    assert all(_owner_kinds(pod) == ["PyTorchJob"] for pod in pods)  # the operator made them
    _assert_on_gpu_nodes(cluster, pods)

    # The GPU nodes free again for the next test: the garbage collector deletes the pods, KWOK ends them.
    cluster.cp.kubectl("delete", "pytorchjob", name, "-n", cluster.namespace, "--wait=true")
    cluster.wait_for(f"pods of {name} gone", lambda: [] if not cluster.pods(selector) else None, "kwok")


def _kuberay_version(head: dict[str, Any]) -> str | None:
    """The KubeRay version that made ``head``: the operator writes its own (utils.KUBERAY_VERSION) into
    the head's RAY_USAGE_STATS_EXTRA_TAGS (``kuberay_version=v1.7.0;kuberay_crd=RayCluster``)."""
    for container in head["spec"]["containers"]:
        for env in container.get("env", []):
            if env["name"] == "RAY_USAGE_STATS_EXTRA_TAGS":
                tags = dict(tag.split("=", 1) for tag in env.get("value", "").split(";") if "=" in tag)
                return tags.get("kuberay_version")
    return None


def test_kuberay_creates_the_head_then_gpu_workers_when_scaled(cluster: Cluster) -> None:
    """With the pinned KubeRay operator, or with the fallback k8s/build.sh builds when the pinned one cannot be
    built (control_plane.KUBERAY_FALLBACK_VERSION, its own CRDs): which one ran is asserted, and a fallback warns."""
    _require("kuberay-operator")
    built = control_plane.built_version(BIN_DIR, "kuberay-operator")
    (ray,) = cluster.objects("kuberay.k8s.yaml", "RayCluster")
    name = ray["metadata"]["name"]
    (group,) = ray["spec"]["workerGroupSpecs"]
    assert group["replicas"] == 0  # scaled up on demand, never at deploy
    cluster.apply("raycluster", [ray])
    of_cluster = f"ray.io/cluster={name}"

    (head,) = cluster.wait_for(
        f"the head pod of RayCluster {name} bound and Running (kuberay-operator {built})",
        lambda: _scheduled(cluster.pods(f"{of_cluster},ray.io/node-type=head"), 1),
        "kuberay-operator",
    )
    assert _owner_kinds(head) == ["RayCluster"]
    assert head["spec"]["nodeName"] == SYSTEM_NODE
    ran = _kuberay_version(head)
    assert ran in (control_plane.KUBERAY_VERSION, control_plane.KUBERAY_FALLBACK_VERSION), (
        f"the head was made by KubeRay {ran}: neither the pinned {control_plane.KUBERAY_VERSION} nor the fallback "
        f"{control_plane.KUBERAY_FALLBACK_VERSION} ({control_plane.operator_version_note(BIN_DIR, 'kuberay-operator')})"
    )
    if built is not None and built.startswith("v"):  # not "(devel)": built from a module version
        assert built == ran, f"{BIN_DIR / 'kuberay-operator'} was built from {built}, but KubeRay {ran} ran"
    if ran != control_plane.KUBERAY_VERSION:
        warnings.warn(
            f"KubeRay operator {ran} ran, the fallback for the pinned {control_plane.KUBERAY_VERSION} "
            f"(k8s/build.sh could not build that one); {BIN_DIR}",
            stacklevel=1,
        )
    workers = f"{of_cluster},ray.io/node-type=worker,ray.io/group={group['groupName']}"
    assert cluster.pods(workers) == []

    wanted = len(GPU_NODES)
    patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": wanted}]
    cluster.cp.kubectl("patch", "raycluster", name, "-n", cluster.namespace, "--type=json", "-p", json.dumps(patch))
    pods = cluster.wait_for(
        f"{wanted} GPU workers of RayCluster {name} bound and Running",
        lambda: _scheduled(cluster.pods(workers), wanted),
        "kuberay-operator",
    )
    assert all(_owner_kinds(pod) == ["RayCluster"] for pod in pods)
    _assert_on_gpu_nodes(cluster, pods)
