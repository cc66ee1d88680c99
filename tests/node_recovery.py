"""The platform's answer to a node fault, on the real control plane, for the `drill` tests (issue 22).

What plays what:

- the real training operator (EKS) or the HyperPod stand-in (tests/hyperpod_operator.py) creates the
  job's pods again when one is gone, and the real kube-scheduler places them: on the replacement once
  it is Ready and admits them, never on the cordoned or labelled node;
- :class:`NodeRecovery` plays what no component here can: the machine failing and coming back. Once it
  sees the fault the command injected (HyperPod's node-health label; on EKS, the drill's cordon before
  it terminates the instance, or the EKS node monitoring agent's ``AcceleratedHardwareReady=False`` with an
  Xid reason: then it also plays the agent's heartbeat, which writes the agent's own view (True) back once at
  ``agent_heartbeat_at``, and EKS node auto repair, which acts only once the condition has held
  ``repair_after`` seconds by its lastTransitionTime: the documented 10 minutes, compressed, and it cordons the
  node in the step that takes it down), it follows a timeline in seconds: the node goes NotReady and the job's
  pods on it are gone (``not_ready_at``: the kubelet stops answering; its Ready condition Unknown, as the
  node lifecycle controller sets it after its grace period, and that real controller then taints the
  node; the pods are evicted), a
  replacement node registers (``replaced_at``: HyperPod's replacement or the node group's new
  instance, its health label Schedulable) or, for a reboot, none; the node is Ready again
  (``ready_at``), and the job resumes (``resume_at``): the payload's lines of the resumed attempt
  (``after_restart``, the real payload's, their ``time`` moved to start when it writes them, gaps scaled by
  ``time_scale``) are added to the log of the pod that holds rank 0.

The timeline only orders the steps (1.5 s apart: the API server stamps in whole seconds, so each step lands
in a second of its own). What the tests compare a drill with is what happened, as recorded in ``stamps``:
each step's time as the cluster or the payload stamped it (the NotReady condition's and the Ready
condition's ``lastTransitionTime``, the replacement's ``creationTimestamp``, the resumed attempt's ``resume``
and first ``step`` lines), and in ``taken``, when it was taken (``time.time()``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kwok_cluster import KwokCluster, Loop, pod_index, serve_log

from llm_infra.k8s_manifests.pytorch_job import JOB_LABEL
from llm_infra.node_labels import HEALTH_STATUS_KEY
from llm_infra.ops.drill import GPU_CONDITION, node_condition
from llm_infra.ops.kube import Kube, parse_time

PENDING = "UnschedulablePending"  # HyperPod's PendingReplacement / PendingReboot label values


@dataclass
class NodeRecovery(Loop):
    cluster: KwokCluster
    node: str
    job: str  # the training job's name (its pods carry JOB_LABEL=job)
    after_restart: list[dict[str, Any]]
    replace: bool = True  # a new node (replace, terminate) or the same one back (reboot)
    not_ready_at: float = 0.5
    replaced_at: float = 2.0
    ready_at: float = 3.5
    resume_at: float = 5.0
    time_scale: float = 0.1
    agent_heartbeat_at: float = 0.3  # an Xid fault: when the agent's heartbeat writes its True condition back
    repair_after: float = 1.0  # an Xid fault: how long the condition must have held (node auto repair's wait)
    fault: str | None = None  # what it saw: the health label's value, "cordon", or the Xid condition's reason
    fault_at: float | None = None  # when it saw it (time.time())
    done: list[str] = field(default_factory=list)  # the steps taken, in order
    taken: dict[str, float] = field(default_factory=dict)  # step -> when it was taken (time.time())
    stamps: dict[str, datetime] = field(default_factory=dict)  # what happened, as the cluster or payload stamped it
    _labels: dict[str, str] = field(default_factory=dict)  # the node's labels before the fault
    heartbeat_undid: datetime | None = None  # an Xid fault: the condition's transition time the heartbeat undid

    def __post_init__(self) -> None:
        super().__init__(str(self.cluster.plane.kubeconfig), tick=0.05)
        self.namespace = self.cluster.namespace  # the test's

    @property
    def replacement(self) -> str:
        return f"{self.node}-replacement" if self.replace else self.node

    def step(self, kube: Kube) -> None:
        if self.fault_at is None:
            node = kube.get("v1", "Node", self.node) or {}
            labels = (node.get("metadata") or {}).get("labels") or {}
            gpu = node_condition(node, GPU_CONDITION) or {}
            if gpu.get("status") == "False" and str(gpu.get("reason")).startswith("NvidiaXID"):
                self.fault = str(gpu["reason"])
            elif labels.get(HEALTH_STATUS_KEY, "").startswith(PENDING):
                self.fault = labels[HEALTH_STATUS_KEY]
            elif (node.get("spec") or {}).get("unschedulable"):
                self.fault = "cordon"
            else:
                self._labels = dict(labels)
                return
            self.fault_at = time.time()
        elapsed = time.time() - self.fault_at
        if self._xid and self.heartbeat_undid is None and elapsed >= self.agent_heartbeat_at:
            self._agent_heartbeat(kube)
        for step, at in (
            ("not-ready", self.not_ready_at),
            ("replaced", self.replaced_at),
            ("ready", self.ready_at),
            ("resumed", self.resume_at),
        ):
            if step not in self.done and elapsed >= at:
                began = time.time()
                if not getattr(self, "_" + step.replace("-", "_"))(kube):
                    return  # not yet possible: the next look tries again
                self.taken[step] = began
                self.done.append(step)

    @property
    def _xid(self) -> bool:
        return bool(self.fault and self.fault.startswith("NvidiaXID"))

    def _agent_heartbeat(self, kube: Kube) -> None:
        """The agent's report after a heartbeat: its own condition (True: it saw no fault) replaces the node's."""
        condition = node_condition(kube.get("v1", "Node", self.node) or {}, GPU_CONDITION) or {}
        self.heartbeat_undid = parse_time(str(condition["lastTransitionTime"]))
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        healthy = {"type": GPU_CONDITION, "status": "True", "reason": "NvidiaAcceleratedHardwareIsReady"}
        healthy |= {"message": "", "lastTransitionTime": now, "lastHeartbeatTime": now}
        kube.patch_status("v1", "Node", self.node, {"status": {"conditions": [healthy]}})

    def _repair_due(self, kube: Kube) -> bool:
        """Node auto repair's wait: the Xid condition False (again, after the heartbeat) for repair_after."""
        if self.heartbeat_undid is None:
            return False
        condition = node_condition(kube.get("v1", "Node", self.node) or {}, GPU_CONDITION) or {}
        if condition.get("status") != "False":
            return False
        held = time.time() - parse_time(str(condition["lastTransitionTime"])).timestamp()
        return held >= self.repair_after

    def _not_ready(self, kube: Kube) -> bool:
        if self._xid and not self._repair_due(kube):
            return False
        self.cluster.set_ready(self.node, False)
        self.stamps["not-ready"] = _ready_since(kube.get("v1", "Node", self.node))
        if self._xid:  # node auto repair cordons the node it replaces
            kube.patch("v1", "Node", self.node, {"spec": {"unschedulable": True}})
        for pod in self._pods(kube):
            if pod["spec"].get("nodeName") == self.node:
                self.cluster.delete_pod_now(pod["metadata"]["name"])
        return True

    def _replaced(self, kube: Kube) -> bool:
        if not self.replace:
            return True
        kube.delete("v1", "Node", self.node)
        labels = {k: v for k, v in self._labels.items() if k != "kubernetes.io/hostname"}
        if HEALTH_STATUS_KEY in labels:  # HyperPod marks the replacement Schedulable once its checks pass
            labels[HEALTH_STATUS_KEY] = "Schedulable"
        self.cluster.add_node(self.replacement, ready=False, labels=labels)
        created = (kube.get("v1", "Node", self.replacement) or {}).get("metadata") or {}
        self.stamps["replaced"] = parse_time(str(created["creationTimestamp"]))
        return True

    def _ready(self, kube: Kube) -> bool:
        if not self.replace:  # the reboot is over: HyperPod lifts its label and the cordon
            labels = {HEALTH_STATUS_KEY: "Schedulable"} if HEALTH_STATUS_KEY in self._labels else {}
            kube.patch("v1", "Node", self.node, {"metadata": {"labels": labels}, "spec": {"unschedulable": None}})
        self.cluster.set_ready(self.replacement, True)
        self.stamps["ready"] = _ready_since(kube.get("v1", "Node", self.replacement))
        return True

    def _resumed(self, kube: Kube) -> bool:
        """Rank 0's pod (index 0) runs again, or never stopped: the resumed attempt's lines go to its log."""
        (rank0,) = [p for p in self._pods(kube) if pod_index(p) == 0] or [None]
        if rank0 is None or (rank0.get("status") or {}).get("phase") != "Running":
            return False
        now, first = time.time(), self.after_restart[0]["time"]
        moved = [{**r, "time": round(now + (r["time"] - first) * self.time_scale, 3)} for r in self.after_restart]
        resume = next(r for r in moved if r["event"] == "resume")
        step = next(r for r in moved if r["event"] == "step" and r["time"] > resume["time"])
        self.stamps["resumed"] = datetime.fromtimestamp(resume["time"], UTC)
        self.stamps["first-step"] = datetime.fromtimestamp(step["time"], UTC)
        serve_log(self.cluster, kube, rank0, "".join(json.dumps(r) + "\n" for r in moved))
        return True

    def _pods(self, kube: Kube) -> list[dict[str, Any]]:
        pods = kube.list("v1", "Pod", namespace=self.namespace, label_selector=f"{JOB_LABEL}={self.job}")
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _ready_since(node: dict[str, Any] | None) -> datetime:
    """When the node's Ready condition took its present status (whole seconds, as the API server keeps it)."""
    (ready,) = [c for c in ((node or {}).get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
    return parse_time(str(ready["lastTransitionTime"]))
