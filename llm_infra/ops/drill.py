"""``llm-infra drill``: inject one node fault under a running training job and time its recovery.

Faults: on HyperPod, label the node for replacement or reboot (HyperPod's own recovery takes it from
there, as after a failed health check); on EKS, cordon the node and terminate its EC2 instance (the
managed node group launches a replacement), or ``gpu-xid``: set the node condition the EKS node monitoring
agent sets for a GPU that fell off the bus (``AcceleratedHardwareReady=False``, reason ``NvidiaXID79Error``),
on which EKS node auto repair cordons and replaces the node once it has held 10 minutes. The agent writes its
own view of its conditions back at every heartbeat (every 5 minutes: it would undo the fault before the
repair), so the drill holds the condition, with the injection's transition time, until the repair cordons
the node. Then watch, from the fault on:

- ``detected``: the platform reacted: the node stopped being Ready or disappeared, a job pod on it
  ended or began terminating, HyperPod tainted or cordoned it (on EKS after a ``gpu-xid``: node auto
  repair cordoned it), or the job turned Restarting;
- ``node_replaced``: a new GPU node object appeared (not for a reboot);
- ``rejoined``: the replacement (or the rebooted node) is Ready and takes the job's pods again (its
  node affinity holds: on HyperPod, the health label says Schedulable);
- ``job_resumed``: the payload's ``resume`` line (its ``step`` is ``resumed_at_step``);
- ``first_step_after_resume``: the payload's first ``step`` line after it, or a ``throughput`` line
  with tokens (``workloads/train.py`` and ``throughput.py`` print both on rank 0, stamped ``time``).

Each phase is seconds after the injection, from the object's own timestamp where it has one (a
condition's lastTransitionTime, a node's creationTimestamp, an event's time, the payload's ``time``),
else from when a look first saw it; null when not seen before the timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from llm_infra.node_labels import HEALTH_STATUS_KEY, NODE_ROLE_LABEL
from llm_infra.ops.job_state import Phase, job_state, node_admits, pod_finished, pod_specs
from llm_infra.ops.kube import Kube, event_time, parse_time
from llm_infra.payload_log import json_objects

DRILL_KIND = "llm-infra/drill"  # the format llm_infra/planner/measured_run.py reads (plan --from-run)
DRILL_VERSION = 1
FAULTS = {"hyperpod": ("replace", "reboot"), "eks": ("terminate", "gpu-xid")}
# The node condition the EKS node monitoring agent sets on a GPU fault, which EKS node auto repair acts on. EKS
# user guide, "Detect node health issues with the EKS node monitoring agent" (node-health-nma): a well-known Xid
# sets AcceleratedHardwareReady=False with reason NvidiaXID<code>Error; Xid 79 ("GPU has fallen off the bus")
# is repaired by Replace, and is a well-known code of the pinned agent (aws/eks-node-monitoring-agent v1.7.0,
# monitors/nvidia/dcgm/dcgm_policies.go). "Automatically repair nodes in EKS clusters" (node-repair):
# AcceleratedHardwareReady is repaired after 10 minutes. The agent re-reports its own conditions at every
# heartbeat (pkg/manager/node_exporter.go at that tag: heartbeatInterval 5 minutes, an upsert of its state).
GPU_CONDITION = "AcceleratedHardwareReady"
GPU_FAULT_REASON = "NvidiaXID79Error"
GPU_REPAIR_AFTER_MINUTES = 10
PHASES = ("detected", "node_replaced", "rejoined", "job_resumed", "first_step_after_resume")
# Node events that say the control plane noticed (node-controller, kubelet).
DETECTION_EVENTS = frozenset({"NodeNotReady", "NodeNotSchedulable", "RemovingNode", "DeletingNode", "Rebooted"})


def now() -> datetime:
    return datetime.now(UTC)


def instance_id(node: dict[str, Any]) -> str:
    """The EC2 instance behind a node: ``spec.providerID`` is ``aws:///<az>/<instance id>``."""
    provider_id = str((node.get("spec") or {}).get("providerID") or "")
    if not provider_id.startswith("aws://"):
        raise ValueError(f"node {node['metadata']['name']}: providerID {provider_id!r} is not an EC2 instance")
    return provider_id.rsplit("/", 1)[-1]


def api_time(when: datetime) -> str:
    """A time as the API server keeps a condition's: RFC 3339 in whole seconds, UTC."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_fault_condition(since: datetime) -> dict[str, Any]:
    """The agent's condition for a GPU that fell off the bus, False since ``since``."""
    return {
        "type": GPU_CONDITION,
        "status": "False",
        "reason": GPU_FAULT_REASON,
        "message": "detected XID-79 on the instance (injected by llm-infra drill)",
        "lastTransitionTime": api_time(since),
        "lastHeartbeatTime": api_time(now()),
    }


def inject(kube: Kube, ec2: Any, fault: str, node: dict[str, Any]) -> datetime:
    """Inject ``fault`` into ``node``; the time it started."""
    from llm_infra.ops.hyperpod import PENDING_REBOOT, PENDING_REPLACEMENT, request_node_recovery

    name = node["metadata"]["name"]
    started = now()
    if fault in ("replace", "reboot"):
        request_node_recovery(kube, name, PENDING_REPLACEMENT if fault == "replace" else PENDING_REBOOT)
    elif fault == "terminate":
        target = instance_id(node)
        kube.patch("v1", "Node", name, {"spec": {"unschedulable": True}})  # no new pods while it dies
        ec2.terminate_instances(InstanceIds=[target])
    elif fault == "gpu-xid":
        kube.patch_status("v1", "Node", name, {"status": {"conditions": [gpu_fault_condition(started)]}})
    else:
        raise ValueError(f"fault: {fault!r} is not allowed; allowed: replace, reboot, terminate, gpu-xid")
    return started


def gpu_nodes(kube: Kube) -> list[dict[str, Any]]:
    return kube.list("v1", "Node", label_selector=f"{NODE_ROLE_LABEL}=gpu")


def job_pods(kube: Kube, job: dict[str, Any]) -> list[dict[str, Any]]:
    """The job's pods: the charts label every pod template with the job's name."""
    from llm_infra.k8s_manifests.pytorch_job import JOB_LABEL

    metadata = job["metadata"]
    return kube.list("v1", "Pod", namespace=metadata["namespace"], label_selector=f"{JOB_LABEL}={metadata['name']}")


def payload_records(log: str) -> list[dict[str, Any]]:
    """The payload's JSON lines (with a ``time``) in a pod log."""
    return [r for r in json_objects(log) if isinstance(r.get("time"), int | float)]


def node_condition(node: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The node's condition of type ``kind``, if it has one."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def _ready_condition(node: dict[str, Any]) -> dict[str, Any] | None:
    return node_condition(node, "Ready")


@dataclass
class DrillWatch:
    """What one drill saw; :meth:`look` once per poll, until :attr:`done` or the timeout."""

    kube: Kube
    job: dict[str, Any]  # the training job object (kind, name, namespace)
    node: str  # the faulted node
    fault: str
    injected_at: datetime
    pods_on_node: set[str]  # the job's pods on the node when the fault was injected
    nodes_before: set[str]  # the GPU nodes there were then
    clock: Callable[[], datetime] = now
    seen: dict[str, datetime] = field(default_factory=dict)
    resumed_at_step: int | None = None
    reasserted: int = 0  # gpu-xid: how often the fault condition was set again after something undid it

    @property
    def phases(self) -> tuple[str, ...]:
        return tuple(p for p in PHASES if not (p == "node_replaced" and self.fault == "reboot"))

    @property
    def done(self) -> bool:
        return all(p in self.seen for p in self.phases)

    def look(self) -> None:
        """One look at the nodes, the job, its pods, events and logs."""
        faulted = self.kube.get("v1", "Node", self.node)
        pods = self._job_pods()
        if self.fault == "gpu-xid":
            self._hold_gpu_fault(faulted)
        self._detection(faulted, pods)
        self._node_phases(faulted)
        self._payload_phases(pods)

    def _hold_gpu_fault(self, faulted: dict[str, Any] | None) -> None:
        """Until node auto repair cordons the node (or it is gone), keep the fault's condition False with the
        injection's transition time: the agent's heartbeat writes its own view back."""
        if faulted is None or (faulted.get("spec") or {}).get("unschedulable") or "detected" in self.seen:
            return
        condition = node_condition(faulted, GPU_CONDITION) or {}
        if condition.get("status") == "False" and condition.get("reason") == GPU_FAULT_REASON:
            return
        fault = {"status": {"conditions": [gpu_fault_condition(self.injected_at)]}}
        self.kube.patch_status("v1", "Node", self.node, fault)
        self.reasserted += 1

    def _takes_the_job(self, node: dict[str, Any]) -> bool:
        """Ready, and the job's pods may land there (its node affinity: on HyperPod, the health label)."""
        return all(node_admits(node, spec) for spec in pod_specs(self.job))

    def _first(self, phase: str, when: datetime | None) -> None:
        """Keep the earliest time seen for ``phase`` (never before the injection)."""
        if when is None:
            return
        when = max(when, self.injected_at)
        if phase not in self.seen or when < self.seen[phase]:
            self.seen[phase] = when

    def _after_injection(self, when: str | datetime | None) -> datetime | None:
        """An API time (whole seconds, or microseconds) if it is not before the injection's second."""
        if not when:
            return None
        when = parse_time(when) if isinstance(when, str) else when
        return when if when >= self.injected_at.replace(microsecond=0) else None

    def _detection(self, faulted: dict[str, Any] | None, pods: list[dict[str, Any]]) -> None:
        if faulted is None:  # the node object is gone
            self._first("detected", self.clock())
        else:
            ready = _ready_condition(faulted)
            if ready and ready.get("status") != "True":
                self._first("detected", self._after_injection(ready.get("lastTransitionTime")) or self.clock())
            taints = (faulted.get("spec") or {}).get("taints") or []
            # HyperPod taints (and cordons) a node it is about to reboot or replace; on EKS the drill cordoned it.
            if self.fault != "terminate" and (
                any(t.get("key") == HEALTH_STATUS_KEY for t in taints)
                or (faulted.get("spec") or {}).get("unschedulable")
            ):
                self._first("detected", self.clock())
            for event in self._node_events():
                self._first("detected", self._after_injection(event_time(event)))
        names = {p["metadata"]["name"]: p for p in pods}
        for name in self.pods_on_node:
            pod = names.get(name)
            if pod is None or pod["metadata"].get("deletionTimestamp") or pod_finished(pod):
                self._first("detected", self.clock())
        state = job_state(self.kube.get(self.job["apiVersion"], self.job["kind"], *self._job_key()) or {})
        if state.phase is Phase.RESTARTING:
            self._first("detected", self._after_injection(state.since) or self.clock())

    def _node_events(self) -> list[dict[str, Any]]:
        events = self.kube.list(
            "v1", "Event", field_selector=f"involvedObject.kind=Node,involvedObject.name={self.node}"
        )
        if self.fault == "terminate":  # the drill's own cordon makes NodeNotSchedulable
            events = [e for e in events if e.get("reason") != "NodeNotSchedulable"]
        return [e for e in events if e.get("reason") in DETECTION_EVENTS]

    def _node_phases(self, faulted: dict[str, Any] | None) -> None:
        if self.fault == "reboot":
            # Back Ready after the reboot (a Ready transition since the fault, or after it was seen
            # down), and HyperPod lifted the reboot label.
            ready = _ready_condition(faulted) if faulted else None
            if faulted and ready and self._takes_the_job(faulted):
                back = self._after_injection(ready.get("lastTransitionTime"))
                if back or "detected" in self.seen:
                    self._first("rejoined", back or self.clock())
            return
        for node in gpu_nodes(self.kube):
            if node["metadata"]["name"] in self.nodes_before:
                continue
            self._first(
                "node_replaced", self._after_injection(node["metadata"].get("creationTimestamp")) or self.clock()
            )
            ready = _ready_condition(node)
            if ready and self._takes_the_job(node):
                self._first("rejoined", self._after_injection(ready.get("lastTransitionTime")) or self.clock())

    def _payload_phases(self, pods: list[dict[str, Any]]) -> None:
        # Every pod, every look: after a restart rank 0 (the one that prints) may live in any pod.
        # Only what was logged since the fault is read.
        since = max(1, int((self.clock() - self.injected_at).total_seconds()) + 60)
        records = [
            record
            for pod in pods
            for record in payload_records(
                self.kube.pod_log(pod["metadata"]["namespace"], pod["metadata"]["name"], since_seconds=since)
            )
        ]
        after = sorted((r for r in records if r["time"] >= self.injected_at.timestamp()), key=lambda r: r["time"])
        resume = next((r for r in after if r.get("event") == "resume"), None)
        if resume is None:
            return
        self._first("job_resumed", datetime.fromtimestamp(resume["time"], UTC))
        self.resumed_at_step = int(resume["step"])
        step = next(
            (
                r
                for r in after
                if r["time"] > resume["time"]
                and (r.get("event") == "step" or (r.get("event") == "throughput" and (r.get("tokens_per_s") or 0) > 0))
            ),
            None,
        )
        if step is not None:
            self._first("first_step_after_resume", datetime.fromtimestamp(step["time"], UTC))

    def _job_key(self) -> tuple[str, str]:
        return self.job["metadata"]["name"], self.job["metadata"]["namespace"]

    def _job_pods(self) -> list[dict[str, Any]]:
        return job_pods(self.kube, self.job)

    def report(self, *, cluster: str, compute: str) -> dict[str, Any]:
        """The drill report, in the format ``llm-infra plan --from-run`` reads."""
        phases = {
            p: round((self.seen[p] - self.injected_at).total_seconds(), 3) if p in self.seen else None for p in PHASES
        }
        return {
            "kind": DRILL_KIND,
            "version": DRILL_VERSION,
            "cluster": cluster,
            "compute": compute,
            "fault": self.fault,
            "node": self.node,
            "job": self.job["metadata"]["name"],
            "injected_at": self.injected_at.isoformat(),
            "phases_seconds": phases,
            "resumed_at_step": self.resumed_at_step,
            "recovery_seconds": phases["first_step_after_resume"],
        }
