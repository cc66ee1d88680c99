"""``llm-infra validate``: the ValidationChart's three jobs on a live cluster, one after the other.

The objects are the chart's own (``build_charts``, the same code ``cdk deploy`` and ``make synth`` use),
built from the app's config; each job is created, watched until it ends, its pods' logs read for the
payload's JSON verdict lines (``health_check.py``: one per pod; ``allreduce_bench.py`` and
``train.py --verdict``: one, on rank 0), and deleted again, whatever happens.

The platform objects the jobs need (namespace, service account, payload ConfigMap, FSx claim) belong
to ``cdk deploy``: they are checked, and only applied (server-side) when asked to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import NODE_ROLE_LABEL
from llm_infra.ops.job_state import (
    Admission,
    Phase,
    expected_pods,
    job_state,
    job_suspended,
    job_workload,
    kueue_admission,
    node_admits,
    not_started_cause,
    pod_finished,
    pod_scheduled,
    pod_specs,
    pod_started,
    stuck_containers,
)
from llm_infra.ops.kube import Kube, KubeError, event_time
from llm_infra.payload_log import json_objects
from llm_infra.queueing import KUEUE_API_VERSION

# The chart's jobs, in the order they run (k8s_manifests/validation_chart.py).
STAGES = ("health", "allreduce", "training")
PASS, FAIL, SKIPPED, NOT_STARTED, TIMED_OUT = "pass", "fail", "skipped", "not-started", "timed-out"


@dataclass(frozen=True)
class Timing:
    poll_seconds: float = 10.0
    start_timeout_seconds: float = 900.0  # every pod scheduled by then (image pulls come after)
    timeout_seconds: float = 3600.0  # per job
    cleanup_timeout_seconds: float = 300.0  # until the jobs' pods are gone


@dataclass(frozen=True)
class ChartObjects:
    base: list[dict[str, Any]]  # namespace, service accounts, payload ConfigMap (+ FSx PV and claim)
    jobs: list[dict[str, Any]]  # the ValidationChart's jobs, in STAGES order


def chart_objects(values: WorkloadValues) -> ChartObjects:
    """The base, FSx (when its ids are known) and validation charts' objects for ``values``."""
    import cdk8s

    from llm_infra.k8s_manifests.render import build_charts
    from llm_infra.k8s_manifests.validation_chart import ALLREDUCE_JOB, HEALTH_JOB, TRAINING_JOB

    charts = build_charts(cdk8s.App(), values, jobs=True, ray=False)
    base = [*charts["base"].to_json(), *(charts["fsx-storage"].to_json() if "fsx-storage" in charts else [])]
    by_name = {obj["metadata"]["name"]: obj for obj in charts["validation"].to_json()}
    return ChartObjects(base=base, jobs=[by_name[name] for name in (HEALTH_JOB, ALLREDUCE_JOB, TRAINING_JOB)])


def schedulable_gpu_nodes(kube: Kube, jobs: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(GPU nodes every job's pods may use, all GPU nodes): the charts' own node affinity and
    tolerations decide (on HyperPod: only nodes whose health label allows it)."""
    nodes = kube.list("v1", "Node", label_selector=f"{NODE_ROLE_LABEL}=gpu")
    specs = [spec for job in jobs for spec in pod_specs(job)]
    usable = [n["metadata"]["name"] for n in nodes if all(node_admits(n, spec) for spec in specs)]
    return sorted(usable), sorted(n["metadata"]["name"] for n in nodes)


def missing_base(kube: Kube, objects: ChartObjects, values: WorkloadValues) -> list[str]:
    """The platform objects the jobs need that the cluster lacks (``Kind namespace/name``)."""
    needed = [
        o
        for o in objects.base
        if o["kind"] in ("Namespace", "ConfigMap")
        or (o["kind"] == "ServiceAccount" and o["metadata"]["name"] == values.service_account)
    ]
    missing = [_describe(o) for o in needed if _get(kube, o) is None]
    if kube.get("v1", "PersistentVolumeClaim", values.pvc_name, values.namespace) is None:
        missing.append(f"PersistentVolumeClaim {values.namespace}/{values.pvc_name}")
    return missing


def payload_drift(kube: Kube, objects: ChartObjects) -> list[str]:
    """Payload files whose copy in the cluster's ConfigMaps differs from this checkout's (the payload is packed
    into several: ``llm_infra.k8s_manifests.payload``; a missing one is :func:`missing_base`'s to report)."""
    drift = []
    for payload in (o for o in objects.base if o["kind"] == "ConfigMap"):
        deployed = _get(kube, payload)
        if deployed is not None:
            theirs = deployed.get("data") or {}
            drift += [name for name, text in payload["data"].items() if theirs.get(name) != text]
    return sorted(drift)


def apply_base(kube: Kube, objects: ChartObjects) -> list[str]:
    """Server-side apply the platform objects (as ``cdk deploy`` would); what was applied."""
    return [_describe(kube.apply(obj)) for obj in objects.base]


def existing_jobs(kube: Kube, jobs: list[dict[str, Any]]) -> list[str]:
    return [_describe(job) for job in jobs if _get(kube, job) is not None]


@dataclass(frozen=True)
class PodOutcome:
    pod: str
    node: str
    verdict: dict[str, Any] | None  # the payload's last JSON line with a "verdict"
    exit_code: int | None


@dataclass(frozen=True)
class StageResult:
    stage: str
    job: str
    kind: str
    outcome: str  # PASS, FAIL, SKIPPED, NOT_STARTED, TIMED_OUT
    detail: str
    pods: tuple[PodOutcome, ...] = ()
    failed_nodes: tuple[str, ...] = ()  # nodes the stage found faulty (the health check's)

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    def on_node(self, node: str) -> str:
        """This stage's outcome for one node: its own (health) or the job's (a job across nodes)."""
        if self.outcome == SKIPPED:
            return SKIPPED
        if node in self.failed_nodes:
            return FAIL
        if self.stage == "health" and any(p.node == node for p in self.pods):
            return PASS
        return self.outcome if any(p.node == node for p in self.pods) else "-"

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "job": self.job,
            "kind": self.kind,
            "outcome": self.outcome,
            "detail": self.detail,
            "failed_nodes": list(self.failed_nodes),
            "pods": [p.__dict__ for p in self.pods],
        }


def verdict_lines(log: str) -> list[dict[str, Any]]:
    """The payload's JSON verdict lines in a pod log, in order."""
    return [r for r in json_objects(log) if "verdict" in r]


@dataclass
class ValidationRun:
    """Runs the jobs one by one; :meth:`cleanup` deletes every job it created (call it in ``finally``)."""

    kube: Kube
    timing: Timing
    log: Callable[[str], None]
    progress: Callable[[int, int], None]
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    created: list[dict[str, Any]] = field(default_factory=list)

    def run(self, jobs: list[dict[str, Any]]) -> list[StageResult]:
        """Each stage after the previous one passed; the rest are skipped."""
        results: list[StageResult] = []
        for number, (stage, job) in enumerate(zip(STAGES, jobs, strict=True), start=1):
            if results and not results[-1].passed:
                results.append(
                    StageResult(stage, job["metadata"]["name"], job["kind"], SKIPPED, "an earlier stage failed")
                )
                continue
            self.log(f"[{number}/{len(STAGES)}] {job['kind']} {job['metadata']['name']}")
            results.append(self._stage(stage, job))
        return results

    def _stage(self, stage: str, job: dict[str, Any]) -> StageResult:
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        # Recorded first: an interrupt that lands while the create is under way (the server may have
        # stored the job before the answer arrives) still finds it to delete.
        self.created.append(job)
        try:
            self.kube.create(job)
        except KubeError:  # not ours (say, it already exists): not ours to delete either
            self.created.remove(job)
            raise
        expected = expected_pods(job)
        started_at = self.clock()
        # Finished pods' logs are read as soon as they finish: an operator may delete pods when the job ends.
        outcomes: dict[str, PodOutcome] = {}
        while True:
            current = _get(self.kube, job)
            if current is None:
                return StageResult(stage, name, job["kind"], FAIL, "the job was deleted while it ran")
            state = job_state(current)
            pods = self._pods(namespace, name)
            self.progress(min(sum(pod_started(p) for p in pods), expected), expected)
            for pod in pods:
                if pod_finished(pod) and pod["metadata"]["name"] not in outcomes:
                    outcomes[pod["metadata"]["name"]] = self._outcome(pod)
            if state.phase.terminal:
                break
            waited = self.clock() - started_at
            scheduled = sum(pod_scheduled(p) for p in pods)
            if stuck_containers(pods) or (scheduled < expected and waited > self.timing.start_timeout_seconds):
                admission = None if pods else self._admission(current)
                cause = not_started_cause(pods, expected, self._events(namespace, pods), admission)
                return StageResult(stage, name, job["kind"], NOT_STARTED, f"did not start: {cause}")
            if waited > self.timing.timeout_seconds:
                return StageResult(
                    stage, name, job["kind"], TIMED_OUT, f"still {state.phase} after {self.timing.timeout_seconds:g} s"
                )
            self.sleep(self.timing.poll_seconds)
        outcomes.update({p["metadata"]["name"]: self._outcome(p) for p in self._pods(namespace, name)})
        return judge(stage, current, state.phase, state.reason, tuple(outcomes.values()), expected)

    def _pods(self, namespace: str, job_name: str) -> list[dict[str, Any]]:
        from llm_infra.k8s_manifests.pytorch_job import JOB_LABEL

        pods = self.kube.list("v1", "Pod", namespace=namespace, label_selector=f"{JOB_LABEL}={job_name}")
        return sorted(pods, key=lambda p: str(p["metadata"]["name"]))

    def _events(self, namespace: str, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        names = {p["metadata"]["name"] for p in pods}
        events = [
            e
            for e in self.kube.list("v1", "Event", namespace=namespace)
            if (e.get("involvedObject") or {}).get("name") in names
        ]
        return sorted(events, key=lambda e: event_time(e) or datetime.min.replace(tzinfo=UTC))

    def _admission(self, job: dict[str, Any]) -> Admission | None:
        """Kueue's decision on ``job`` where Kueue manages it (it made a Workload for it, or holds it suspended),
        else None."""
        try:
            workloads = self.kube.list(KUEUE_API_VERSION, "Workload", namespace=job["metadata"]["namespace"])
        except KubeError:  # no Kueue on this cluster: nothing holds jobs back
            return None
        workload = job_workload(workloads, job)
        if workload is None and not job_suspended(job):
            return None
        return kueue_admission(workload)

    def _outcome(self, pod: dict[str, Any]) -> PodOutcome:
        metadata = pod["metadata"]
        verdicts = verdict_lines(self.kube.pod_log(metadata["namespace"], metadata["name"]))
        exit_code = None
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated:
                exit_code = terminated.get("exitCode")
        return PodOutcome(
            pod=metadata["name"],
            node=(pod.get("spec") or {}).get("nodeName") or "?",
            verdict=verdicts[-1] if verdicts else None,
            exit_code=exit_code,
        )

    def cleanup(self) -> list[str]:
        """Delete the jobs this run created and their pods; what is still there at the timeout (pods, or a job
        whose pods are). Deleted in the foreground: a job stays until the garbage collector has deleted its
        pods, and its controller makes none for it meanwhile. (In the background, the Job controller once made
        a pod for a job already deleted, after the pods had been counted gone: the pod outlived the run.)"""
        from llm_infra.k8s_manifests.pytorch_job import JOB_LABEL

        for job in reversed(self.created):
            metadata = job["metadata"]
            name, namespace = metadata["name"], metadata.get("namespace")
            if self.kube.delete(job["apiVersion"], job["kind"], name, namespace, propagation="Foreground"):
                self.log(f"deleted {_describe(job)}")
        deadline = self.clock() + self.timing.cleanup_timeout_seconds
        while True:
            left = [
                f"{job['metadata']['namespace']}/{p['metadata']['name']}"
                for job in self.created
                for p in self.kube.list(
                    "v1",
                    "Pod",
                    namespace=job["metadata"]["namespace"],
                    label_selector=f"{JOB_LABEL}={job['metadata']['name']}",
                )
            ]
            left += [
                _describe(job)
                for job in self.created
                if self.kube.get(job["apiVersion"], job["kind"], job["metadata"]["name"], job["metadata"]["namespace"])
            ]
            if not left or self.clock() >= deadline:
                return left
            self.sleep(self.timing.poll_seconds)


def judge(
    stage: str, job: dict[str, Any], phase: Phase, reason: str, pods: tuple[PodOutcome, ...], expected: int
) -> StageResult:
    """A finished job's outcome from its payload verdicts (and its phase)."""
    name, kind = job["metadata"]["name"], job["kind"]
    if stage == "health":
        failed = tuple(sorted({p.node for p in pods if not p.verdict or p.verdict.get("verdict") != PASS}))
        problems = [_health_problem(p) for p in pods if p.node in failed]
        passed_nodes = len({p.node for p in pods}) - len(failed)
        ok = phase is Phase.SUCCEEDED and not failed and passed_nodes == expected
        detail = f"{passed_nodes} of {expected} nodes pass" + ("; " + "; ".join(problems) if problems else "")
        return StageResult(stage, name, kind, PASS if ok else FAIL, detail, pods, failed)
    verdicts = [p.verdict for p in pods if p.verdict]
    if not verdicts:
        codes = ", ".join(f"{p.pod} exit {p.exit_code}" for p in pods) or "no pods"
        return StageResult(stage, name, kind, FAIL, f"job {phase}, no verdict line ({codes}) {reason}".strip(), pods)
    verdict = verdicts[-1]
    if stage == "allreduce":
        detail = (
            f"bus bandwidth {verdict.get('busbw_gbps')} GB/s at {verdict.get('size_bytes')} B "
            f"(floor {verdict.get('min_busbw_gbps')}), {verdict.get('world_size')} ranks"
        )
        problems = verdict.get("problems") or []
        ok = verdict.get("verdict") == PASS and phase is Phase.SUCCEEDED
        return StageResult(stage, name, kind, PASS if ok else FAIL, "; ".join([detail, *problems]), pods)
    checks = verdict.get("checks") or {}
    resumed = verdict.get("resumed_from")
    detail = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in checks.items())
    detail += f", resumed from step {resumed}" if resumed is not None else ", did NOT resume after the injected fault"
    ok = verdict.get("verdict") == PASS and resumed is not None and phase is Phase.SUCCEEDED
    return StageResult(stage, name, kind, PASS if ok else FAIL, detail, pods)


def _health_problem(pod: PodOutcome) -> str:
    if not pod.verdict:
        return f"{pod.node}: no verdict (exit {pod.exit_code})"
    failed = [c for c in pod.verdict.get("checks") or [] if not c.get("ok") and not c.get("skipped")]
    return f"{pod.node}: " + ", ".join(f"{c.get('name')} ({c.get('detail')})" for c in failed)


def _get(kube: Kube, obj: dict[str, Any]) -> dict[str, Any] | None:
    metadata = obj["metadata"]
    return kube.get(obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace"))


def _describe(obj: dict[str, Any]) -> str:
    namespace = obj["metadata"].get("namespace")
    return f"{obj['kind']} {namespace + '/' if namespace else ''}{obj['metadata']['name']}"
