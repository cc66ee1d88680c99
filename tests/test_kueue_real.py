"""The real Kueue (issue 31, item 3) in the session's control plane (tests/conftest.py's ``control_plane``):
it starts with its webhooks served on 127.0.0.1, admits a job that its queue has room for and the real
scheduler places its pods on KWOK nodes, holds a job that does not fit (no pod) and says why, manages a job
without a queue label, and its mutating webhook suspends a Job created unsuspended.

Each test works in a namespace of its own, with a ResourceFlavor, ClusterQueue and LocalQueue of its own (8
GPUs) and a KWOK node tainted for it alone.
Skips with the reason when Kueue is not built (``make k8s``), its files not fetched (``make crds``), or no
mount namespace can be made here.

The last test runs ``llm-infra rehearse`` at SCALE_NODES GPU nodes (it starts a control plane of its own, with
Kueue and the app's own queues): every job of the app is admitted and runs, a user's PyTorchJob of every GPU
node runs whole, a Job of one node more is reported not admitted with Kueue's reason (no pod), and the run
exits 1. The 256-node run is ``make rehearse-scale`` (bench/rehearse_scale.py), a benchmark.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_plane import drop_namespace, new_namespace, slug, wait_for

from conftest import REPO_ROOT, Synthesized, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.ops.kube import Kube
from llm_infra.queueing import KUEUE_API_VERSION, QUEUE_LABEL
from llm_infra.rehearsal.control_plane import ControlPlane, kueue_unavailable
from llm_infra.rehearsal.whole_node_jobs import batch_job, pytorch_job

API = KUEUE_API_VERSION
GPU = "nvidia.com/gpu"
TAINT = "llm-infra.test/kueue"
APP_NAMESPACE = "training"  # the default app's jobs' (k8s_manifests/values.py)


class Queued:
    """A namespace with a queue of its own (8 GPUs, 64 CPUs) and a KWOK node with 8 GPUs for its pods."""

    def __init__(self, plane: ControlPlane, kube: Kube, namespace: str) -> None:
        self.plane, self.kube, self.namespace = plane, kube, namespace
        self.queue = f"{namespace}-cq"
        self.node = f"{namespace}-node"

    def create(self) -> None:
        quotas = {"cpu": "64", "memory": "512Gi", GPU: "8"}
        self.kube.apply({"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": self.queue}, "spec": {}})
        self.kube.apply(
            {
                "apiVersion": API,
                "kind": "ClusterQueue",
                "metadata": {"name": self.queue},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": list(quotas),
                            "flavors": [
                                {
                                    "name": self.queue,
                                    "resources": [{"name": k, "nominalQuota": v} for k, v in quotas.items()],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        for name in ("training", "default"):  # a named queue, and the one Kueue gives unlabelled jobs
            self.kube.apply(
                {
                    "apiVersion": API,
                    "kind": "LocalQueue",
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": {"clusterQueue": self.queue},
                }
            )
        capacity = {"cpu": "96", "memory": "1Ti", GPU: "8", "pods": "110"}
        self.kube.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": self.node,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {"kubernetes.io/hostname": self.node, "type": "kwok"},
                },
                "spec": {"taints": [{"key": TAINT, "value": self.namespace, "effect": "NoSchedule"}]},
                "status": {"capacity": capacity, "allocatable": capacity},
            }
        )

    def remove(self) -> None:
        for kind, name in (("ClusterQueue", self.queue), ("ResourceFlavor", self.queue)):
            self.kube.delete(API, kind, name)
        self.kube.delete("v1", "Node", self.node)

    def job(self, name: str, *, pods: int, gpus: int, queue: str | None) -> dict[str, Any]:
        """A Job of ``pods`` pods of ``gpus`` GPUs each, on this test's node, created unsuspended."""
        labels = {QUEUE_LABEL: queue} if queue else {}
        container = {
            "name": "main",
            "image": "busybox",
            "resources": {"requests": {"cpu": "1", GPU: str(gpus)}, "limits": {GPU: str(gpus)}},
        }
        spec = {
            "restartPolicy": "Never",
            "containers": [container],
            "nodeSelector": {"kubernetes.io/hostname": self.node},
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        }
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": spec}},
        }

    def workload(self, job: str) -> dict[str, Any] | None:
        """The Workload Kueue made for Job ``job`` (owned by it), or None."""
        for item in self.kube.list(API, "Workload", namespace=self.namespace):
            if any(ref.get("name") == job for ref in item["metadata"].get("ownerReferences") or []):
                return item
        return None

    def pods(self, job: str) -> list[dict[str, Any]]:
        return self.kube.list("v1", "Pod", namespace=self.namespace, label_selector=f"job-name={job}")


def started(pods: list[dict[str, Any]], count: int) -> list[dict[str, Any]] | None:
    """``pods`` once ``count`` of them are Running or Succeeded."""
    done = [p for p in pods if p["status"].get("phase") in ("Running", "Succeeded")]
    return done if len(done) >= count else None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


@pytest.fixture(scope="module")
def kueue_plane(control_plane: ControlPlane) -> ControlPlane:
    """The session's control plane, with Kueue in it (else skip, saying why)."""
    if "kueue" not in control_plane.running:
        why = control_plane.skipped.get("kueue") or kueue_unavailable(control_plane.bin_dir) or "not started"
        pytest.skip(f"Kueue: {why}")
    return control_plane


@pytest.fixture
def queued(kueue_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[Queued]:
    with kueue_plane.kube() as kube:
        namespace = new_namespace(kueue_plane, kube, slug(f"kueue-{request.node.originalname[5:25]}"), queue=False)
        setup = Queued(kueue_plane, kube, namespace)
        setup.create()
        try:
            yield setup
        finally:
            for pod in kube.list("v1", "Pod", namespace=namespace):
                kube.delete("v1", "Pod", pod["metadata"]["name"], namespace)
            setup.remove()
            drop_namespace(kueue_plane, kube, namespace)


def test_kueue_starts_with_its_webhooks_on_loopback(kueue_plane: ControlPlane) -> None:
    assert kueue_plane.running[-1] == "kueue" and kueue_plane.startup_seconds["kueue"] > 0
    with kueue_plane.kube() as kube:
        configs = [
            *kube.list("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
            *kube.list("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
        ]
    hooks = [
        hook for config in configs if config["metadata"]["name"].startswith("kueue-") for hook in config["webhooks"]
    ]
    assert {"mjob.kb.io", "vjob.kb.io", "mpytorchjob.kb.io", "mrayjob.kb.io", "mworkload.kb.io"} <= {
        h["name"] for h in hooks
    }
    port = kueue_plane.ports["kueue"][0]
    assert all(h["clientConfig"]["url"].startswith(f"https://127.0.0.1:{port}/") for h in hooks)
    assert "Starting manager" in kueue_plane.log_path("kueue").read_text(errors="replace")


def test_a_job_with_room_in_its_queue_is_admitted_and_runs_on_kwok_nodes(queued: Queued) -> None:
    plane = queued.plane
    queued.kube.create(queued.job("fits", pods=2, gpus=4, queue="training"))
    admitted = wait_for(
        "Kueue admits the Job that fits its queue",
        lambda: condition(queued.workload("fits"), "Admitted"),
        plane=plane,
        namespace=queued.namespace,
        component="kueue",
    )
    assert admitted["status"] == "True", admitted
    pods = wait_for(
        "the admitted Job's two pods run (or finish) on the test's KWOK node",
        lambda: started(queued.pods("fits"), 2),
        plane=plane,
        namespace=queued.namespace,
        component="kube-scheduler",
    )
    assert {p["spec"]["nodeName"] for p in pods} == {queued.node}
    job = queued.kube.get("batch/v1", "Job", "fits", queued.namespace) or {}
    assert job["spec"]["suspend"] is False, "Kueue unsuspends the Job it admits"


def test_a_job_that_does_not_fit_is_not_admitted_no_pod_and_the_reason_is_reported(queued: Queued) -> None:
    queued.kube.create(queued.job("too-big", pods=2, gpus=8, queue="training"))  # 16 GPUs, the queue has 8
    reserved = wait_for(
        "Kueue says why the Job's 16 GPUs are not admitted",
        lambda: (c := condition(queued.workload("too-big"), "QuotaReserved")) and c["status"] == "False" and c,
        plane=queued.plane,
        namespace=queued.namespace,
        component="kueue",
    )
    assert "insufficient quota for nvidia.com/gpu" in reserved["message"], reserved
    assert "current podset request (16) > maximum capacity (8)" in reserved["message"], reserved
    time.sleep(2)  # what would have created pods by now (the Job controller) has had its chance
    assert queued.pods("too-big") == []
    assert (condition(queued.workload("too-big"), "Admitted") or {}).get("status") != "True"


def test_a_job_without_a_queue_label_is_managed_too(queued: Queued) -> None:
    queued.kube.create(queued.job("unlabelled", pods=1, gpus=1, queue=None))
    job = queued.kube.get("batch/v1", "Job", "unlabelled", queued.namespace) or {}
    assert job["metadata"]["labels"].get(QUEUE_LABEL) == "default", "the webhook gives it the default queue"
    admitted = wait_for(
        "Kueue admits the unlabelled Job through the namespace's default LocalQueue",
        lambda: (c := condition(queued.workload("unlabelled"), "Admitted")) and c["status"] == "True" and c,
        plane=queued.plane,
        namespace=queued.namespace,
        component="kueue",
    )
    assert admitted


def test_the_mutating_webhook_suspends_a_job_created_unsuspended(queued: Queued) -> None:
    body = queued.job("suspended-by-kueue", pods=1, gpus=16, queue="training")  # never admitted: stays suspended
    assert "suspend" not in body["spec"]
    queued.kube.create(body)
    stored = queued.kube.get("batch/v1", "Job", "suspended-by-kueue", queued.namespace) or {}
    assert stored["spec"]["suspend"] is True, "Kueue's mutating webhook (called by the API server) suspended it"


SCALE_NODES = 16  # the largest size the suite's budget allows here; bench/rehearse_scale.py runs 256


def test_at_scale_the_app_and_a_whole_cluster_job_run_and_one_node_more_is_admitted_as_nothing(
    kueue_plane: ControlPlane,  # Kueue runs here, else skip (rehearse starts a control plane of its own)
    synth: Callable[..., Synthesized],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    # Issue 31, item 4, at the size the suite affords: the app for SCALE_NODES GPU nodes with its own queues, every
    # node rehearsed, each job of dist/ (SCALE_NODES pods) admitted and run, a user's PyTorchJob of SCALE_NODES
    # whole nodes (no queue label: the namespace's default) admitted with every pod Running, and a Job of one
    # node more admitted as nothing, with Kueue's reason naming the app's quota: exit 1 for that alone.
    n = SCALE_NODES
    config = TrainingConfig(gpu_nodes=n)
    app = synth(config)
    dist = tmp_path / "dist"
    write_dist(config, dist)
    (tmp_path / "fits.yaml").write_text(yaml.safe_dump(pytorch_job("whole-cluster", APP_NAMESPACE, n)))
    (tmp_path / "one-more.yaml").write_text(yaml.safe_dump(batch_job("one-node-more", APP_NAMESPACE, n + 1)))
    flags = ["--app-dir", str(REPO_ROOT), "--cdk-out", str(app.outdir), "--manifests", str(dist)]
    flags += ["-c", f"gpu_nodes={n}", "--nodes-per-group", "0", "--output", "json"]
    flags += ["--apply", str(tmp_path / "fits.yaml"), "--apply", str(tmp_path / "one-more.yaml")]
    began = time.monotonic()
    code, out, err = run_cli(capsys, "rehearse", *flags)
    print(f"rehearse at {n} GPU nodes with Kueue: {time.monotonic() - began:.1f} s")
    assert code == 1, err
    report = json.loads(out)
    assert "kueue" in report["control_plane"]["components"]
    peaks = report["control_plane"]["peak_memory_mib"]  # each component's, as the kernel counted it
    assert set(peaks) == set(report["control_plane"]["components"]) and all(mib > 0 for mib in peaks.values())
    assert not report["refused"] and not report["unhandled"], (report["refused"], report["unhandled"])
    assert sum(1 for node in report["nodes"] if node["instance_type"] == "p5.48xlarge") == n
    jobs = {job["name"]: job for job in report["jobs"]}
    assert all(set(job) == {"namespace", "name", "kind", "admitted", "reason"} for job in jobs.values())
    refused = jobs.pop("one-node-more")
    assert refused["admitted"] is False, refused
    # The app's own ClusterQueue holds it back: its GPU flavour's quota is the GPU nodes' (8 each), EFA's 32 each.
    over_gpus = f"current podset request ({8 * (n + 1)}) > maximum capacity ({8 * n})"
    over_efa = f"current podset request ({32 * (n + 1)}) > maximum capacity ({32 * n})"
    assert "in flavor gpu-p5-48xlarge" in refused["reason"], refused
    assert over_gpus in refused["reason"] or over_efa in refused["reason"], refused
    assert not [p for p in report["pods"] if p["name"].startswith("one-node-more")], "no pod while not admitted"
    assert jobs["whole-cluster"]["admitted"] is True
    assert jobs and all(job["admitted"] for job in jobs.values()), jobs  # the app's jobs, labelled or not
    whole = [p for p in report["pods"] if p["name"].startswith("whole-cluster-")]
    assert len(whole) == n and all(p["phase"] == "Running" for p in whole), whole
    assert len({p["node"] for p in whole}) == n  # one pod per GPU node
    others = [p for p in report["pods"] if p not in whole]
    assert others and all(p["phase"] in ("Running", "Succeeded") for p in others), others
