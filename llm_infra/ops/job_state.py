"""Where a job stands, whatever its kind: a batch/v1 Job, a Kubeflow PyTorchJob or a HyperPodPyTorchJob.

All three report ``status.conditions`` (type, status "True"/"False", reason, message); the kinds differ
in the condition types:

- batch/v1 Job: ``Complete`` or ``Failed`` when it ends (Kubernetes API reference, JobCondition).
- Kubeflow PyTorchJob: ``Created``, ``Running``, ``Restarting``, ``Succeeded``, ``Failed`` (kubeflow
  training-operator JobConditionType; the CRD at crds/kubeflow.org_pytorchjobs.yaml leaves the type a
  free string). The operator sets the previous condition to "False" as it moves on.
- HyperPodPyTorchJob (sagemaker.amazonaws.com/v1): ``Created`` ... ``Completed`` or ``Failed`` (PyPI
  sagemaker-hyperpod 3.12.0, ``hyperpod_pytorch_job_unified_config.Conditions``; its CLI shows the
  last condition whose status is "True"; aws/sagemaker-hyperpod-recipes' validation launcher waits for
  ``Completed True`` / ``Failed True``).

So: a True terminal condition ends the job; otherwise the last True condition says whether it runs
or restarts; a job with no condition yet is pending. Also here: whether its pods were scheduled or
are stuck, why not (the scheduler's events), and whether a node admits its pods.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

SUCCEEDED_TYPES = frozenset({"Complete", "Succeeded", "Completed"})
FAILED_TYPES = frozenset({"Failed"})
RESTARTING_TYPES = frozenset({"Restarting"})
RUNNING_TYPES = frozenset({"Running"})
# Container waiting reasons that will not resolve by waiting longer.
STUCK_CONTAINER_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}
)


class Phase(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


@dataclass(frozen=True)
class JobState:
    phase: Phase
    reason: str = ""  # the deciding condition's reason and message
    since: str | None = None  # its lastTransitionTime


def job_state(job: dict[str, Any]) -> JobState:
    """The phase of ``job`` from its conditions (see the module docstring)."""
    status = job.get("status") or {}
    true = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    for types, phase in ((FAILED_TYPES, Phase.FAILED), (SUCCEEDED_TYPES, Phase.SUCCEEDED)):
        ended = [c for c in true if c.get("type") in types]
        if ended:
            return _state(phase, ended[-1])
    for condition in reversed(true):
        if condition.get("type") in RESTARTING_TYPES:
            return _state(Phase.RESTARTING, condition)
        if condition.get("type") in RUNNING_TYPES:
            return _state(Phase.RUNNING, condition)
    if status.get("active"):  # batch/v1 Job: no condition until it ends
        return JobState(Phase.RUNNING)
    return JobState(Phase.PENDING)


def _state(phase: Phase, condition: dict[str, Any]) -> JobState:
    words = " ".join(str(condition.get(k) or "") for k in ("reason", "message")).strip()
    return JobState(phase, words, condition.get("lastTransitionTime"))


def _replica_specs(job: dict[str, Any]) -> list[dict[str, Any]]:
    """PyTorchJob ``pytorchReplicaSpecs`` (a map by replica type), HyperPodPyTorchJob ``replicaSpecs`` (a list)."""
    spec = job.get("spec") or {}
    replica_specs = spec.get("pytorchReplicaSpecs") or spec.get("replicaSpecs") or {}
    return list(replica_specs.values() if isinstance(replica_specs, dict) else replica_specs)


def expected_pods(job: dict[str, Any]) -> int:
    """How many pods the job runs at once: a Job's parallelism, or the sum of its replicas."""
    spec = job.get("spec") or {}
    if job.get("kind") == "Job":
        return int(spec.get("parallelism") or spec.get("completions") or 1)
    return sum(int(s.get("replicas") or 1) for s in _replica_specs(job))


def pod_specs(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of the job's templates."""
    if job.get("kind") == "Job":
        return [job["spec"]["template"]["spec"]]
    return [s["template"]["spec"] for s in _replica_specs(job)]


def pod_scheduled(pod: dict[str, Any]) -> bool:
    if (pod.get("spec") or {}).get("nodeName"):
        return True
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conditions)


def pod_started(pod: dict[str, Any]) -> bool:
    """Running or finished (its containers ran)."""
    return (pod.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")


def pod_finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def stuck_containers(pods: list[dict[str, Any]]) -> list[str]:
    """``pod: reason: message`` for containers that wait for something that will not come (a bad image)."""
    stuck = []
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in STUCK_CONTAINER_REASONS:
                stuck.append(f"{pod['metadata']['name']}: {waiting['reason']}: {waiting.get('message', '')}".strip())
    return stuck


_AFFINITY_CAUSE = (
    "no node matches the jobs' node affinity (label llm-infra.aws/node-role=gpu; on HyperPod the health label "
    "Schedulable)"
)
# What the scheduler's FailedScheduling message says, and what it likely means here.
_SCHEDULING_CAUSES = (
    (
        re.compile(r"Insufficient nvidia\.com/gpu"),
        "not enough free nvidia.com/gpu: the GPU nodes are busy, or the NVIDIA device plugin is not running on them",
    ),
    (
        re.compile(r"Insufficient vpc\.amazonaws\.com/efa"),
        "not enough free vpc.amazonaws.com/efa: the EFA device plugin is not running on the GPU nodes",
    ),
    (re.compile(r"Insufficient hugepages"), "not enough 2 MiB hugepages on the GPU nodes (hugepages_2mib)"),
    (re.compile(r"didn't match Pod's node affinity"), _AFFINITY_CAUSE),
    (re.compile(r"untolerated taint"), "the GPU nodes carry a taint the job does not tolerate"),
    (re.compile(r"persistentvolumeclaim|PersistentVolumeClaim"), "the FSx volume claim is missing or not bound"),
    (re.compile(r"didn't match pod anti-affinity"), "fewer free GPU nodes than the job's pods (one pod per node)"),
)


@dataclass(frozen=True)
class Admission:
    """Kueue's decision on a job, read from the Workload Kueue made for it (kueue.x-k8s.io/v1beta2 in v0.17:
    ``status.conditions`` of types QuotaReserved, Admitted, Evicted, Deactivated; pkg/workload/workload.go)."""

    admitted: bool
    reason: str = ""  # why not, in Kueue's words; empty when admitted


def kueue_admission(workload: dict[str, Any] | None) -> Admission:
    """The decision in ``workload`` (None: Kueue made none for the job). Not admitted, the reason is why it was
    deactivated or evicted, else QuotaReserved's message (which names the resource and the quota short)."""
    if workload is None:
        return Admission(
            False, "Kueue made no Workload for it: is its controller running, and does the job's priority class exist?"
        )
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    if (conditions.get("Admitted") or {}).get("status") == "True":
        return Admission(True)
    decided = [conditions[t] for t in ("Deactivated", "Evicted") if (conditions.get(t) or {}).get("status") == "True"]
    why = [*decided, conditions.get("QuotaReserved")]
    reason = next((" ".join(str(c.get("message") or "").split()) for c in why if c), "")
    return Admission(False, reason or "not yet decided")


def job_suspended(job: dict[str, Any]) -> bool:
    """Held from starting pods: a Job's ``spec.suspend``, a Kubeflow job's ``spec.runPolicy.suspend`` (what Kueue
    sets on a job until it admits it)."""
    spec = job.get("spec") or {}
    return bool(spec.get("suspend") or (spec.get("runPolicy") or {}).get("suspend"))


def job_workload(workloads: list[dict[str, Any]], job: dict[str, Any]) -> dict[str, Any] | None:
    """The Workload among ``workloads`` that Kueue made for ``job`` (it owns it), or None."""
    for workload in workloads:
        for owner in workload["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == job["kind"] and owner.get("name") == job["metadata"]["name"]:
                return workload
    return None


def not_started_cause(
    pods: list[dict[str, Any]], expected: int, events: list[dict[str, Any]], admission: Admission | None = None
) -> str:
    """Why the job's pods did not start, from their state and their events (newest last), and Kueue's
    ``admission`` of the job where Kueue manages it (None: it does not, or it runs nowhere here)."""
    if not pods and admission is not None and not admission.admitted:
        return f"Kueue has not admitted the job, so it made no pod: {admission.reason}"
    if not pods:
        return (
            f"no pod was created (expected {expected}): is the job's operator running, and does the namespace's "
            "quota allow the pods?"
        )
    stuck = stuck_containers(pods)
    if stuck:
        return "containers cannot start: " + "; ".join(stuck)
    messages = [str(e.get("message") or "") for e in events if e.get("reason") == "FailedScheduling"]
    if messages:
        latest = messages[-1]
        causes = [cause for pattern, cause in _SCHEDULING_CAUSES if pattern.search(latest)]
        # Nodes that are not GPU nodes always fail the affinity: that is the cause only when alone.
        if len(causes) > 1:
            causes = [c for c in causes if c != _AFFINITY_CAUSE]
        return f"{'; '.join(causes) or 'pods cannot be scheduled'} (scheduler: {latest})"
    unscheduled = sum(not pod_scheduled(p) for p in pods)
    if unscheduled:
        return f"{unscheduled} of {len(pods)} pods not scheduled, and no scheduler event says why"
    return f"{len(pods)} of {expected} pods were created"


def node_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _expression_holds(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False  # Gt and Lt: numeric labels, which the charts do not use


def _tolerates(pod_spec: dict[str, Any], taint: dict[str, Any]) -> bool:
    return any(
        t.get("key") in (None, taint.get("key"))
        and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
        and t.get("effect") in (None, "", taint.get("effect"))
        for t in pod_spec.get("tolerations") or []
    )


def node_admits(node: dict[str, Any], pod_spec: dict[str, Any]) -> bool:
    """Whether the scheduler may place ``pod_spec`` on ``node`` (resources aside): Ready, not cordoned,
    the pod's required node affinity holds, every NoSchedule/NoExecute taint is tolerated."""
    labels = node["metadata"].get("labels") or {}
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    selector = pod_spec.get("nodeSelector") or {}
    taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    return (
        node_ready(node)
        and not (node.get("spec") or {}).get("unschedulable")
        and all(labels.get(k) == v for k, v in selector.items())
        and (
            not terms or any(all(_expression_holds(e, labels) for e in t.get("matchExpressions") or []) for t in terms)
        )
        and all(_tolerates(pod_spec, t) for t in taints)
    )
