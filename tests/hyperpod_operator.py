"""A stand-in for AWS's HyperPod training operator on the real control plane: the one component of the
command tests that is not the real thing, because that operator is closed source (issue 22).

It plays the operator's contract as far as our commands read it, and no further:

- pods (:func:`job_pods`): one per replica of each ``spec.replicaSpecs`` entry, from its template, owned
  by the job (the garbage collector deletes them with it); a pod that disappears (its node failed) is
  created again, as the operator's job-level restart does. The real kube-scheduler places them and KWOK
  runs them;
- conditions: ``Created``, then ``Running`` once every pod runs, then ``Completed`` when every pod
  succeeded or ``Failed`` when one failed; earlier ones turn "False" (the types: PyPI sagemaker-hyperpod
  3.12.0 ``hyperpod_pytorch_job_unified_config.Conditions``, as ``llm_infra/ops/job_state.py`` cites).

Not played: its process-level restarts (the payload's ``hyperpodrun`` restarts are run in the pod by
tests/chart_payload.py), its health monitoring, and its pod names (ours: ``<job>-<replica>-<index>``).
"""

from __future__ import annotations

import contextlib
import copy
from datetime import UTC, datetime
from typing import Any

from kwok_cluster import Loop

from llm_infra.ops.kube import Kube

API_VERSION = "sagemaker.amazonaws.com/v1"
KIND = "HyperPodPyTorchJob"
INDEX_LABEL = "llm-infra.test/replica-index"  # the stand-in's own: the pod's rank-0-first index
TERMINAL = frozenset({"Completed", "Failed"})


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods the operator makes of ``job``: one per replica of each ``spec.replicaSpecs`` entry (no
    ``replicas``: one, as ``llm_infra/ops/job_state.py`` counts them), a copy of its template, named
    ``<job>-<replica>-<index>`` and labelled with the index (rank 0 first). Owned by the job once the API
    server has given it a uid; a job never created (the rehearsal tests apply its pods alone) owns none."""
    metadata = job["metadata"]
    owner = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": metadata["name"],
        "uid": metadata.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    owned = {"ownerReferences": [owner]} if owner["uid"] else {}
    replicas = [
        (str(spec["name"]), spec["template"])
        for spec in job["spec"]["replicaSpecs"]
        for _ in range(int(spec.get("replicas") or 1))
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{metadata['name']}-{replica}-{index}",
                "namespace": metadata["namespace"],
                "labels": {**((template.get("metadata") or {}).get("labels") or {}), INDEX_LABEL: str(index)},
                **copy.deepcopy(owned),
            },
            "spec": copy.deepcopy(template["spec"]),
        }
        for index, (replica, template) in enumerate(replicas)
    ]


class HyperPodOperatorStandIn(Loop):
    """Reconcile every HyperPodPyTorchJob in ``namespace`` every ``tick`` seconds, while the context is open."""

    def __init__(self, kubeconfig: str, namespace: str, *, tick: float = 0.1) -> None:
        super().__init__(kubeconfig, tick)
        self.namespace = namespace

    def step(self, kube: Kube) -> None:
        for job in kube.list(API_VERSION, KIND, namespace=self.namespace):
            if not job["metadata"].get("deletionTimestamp"):
                self.reconcile(kube, job)

    def reconcile(self, kube: Kube, job: dict[str, Any]) -> None:
        conditions = (job.get("status") or {}).get("conditions") or []
        done = {c["type"] for c in conditions if c.get("status") == "True"} & TERMINAL
        if not conditions:
            self._condition(kube, job, "Created")
        if done:
            return
        pods = self._pods(kube, job)
        wanted = job_pods(job)
        for index, pod in enumerate(wanted):
            if index not in pods:
                kube.create(pod)
        live = list(pods.values())
        if len(live) < len(wanted):
            return
        phases = [(p.get("status") or {}).get("phase") for p in live]
        if "Failed" in phases:
            self._condition(kube, job, "Failed")
        elif all(phase == "Succeeded" for phase in phases):
            self._condition(kube, job, "Completed")
        elif all(phase in ("Running", "Succeeded") for phase in phases):
            self._condition(kube, job, "Running")

    def _pods(self, kube: Kube, job: dict[str, Any]) -> dict[int, dict[str, Any]]:
        """The job's pods that are not being deleted, by index."""
        uid = job["metadata"]["uid"]
        return {
            int(pod["metadata"]["labels"][INDEX_LABEL]): pod
            for pod in kube.list("v1", "Pod", namespace=self.namespace, label_selector=INDEX_LABEL)
            if any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or [])
            and not pod["metadata"].get("deletionTimestamp")
        }

    def _condition(self, kube: Kube, job: dict[str, Any], kind: str) -> None:
        """Condition ``kind`` True, the earlier ones False, through the status subresource."""
        from kubernetes import client

        conditions = [{**c, "status": "False"} for c in (job.get("status") or {}).get("conditions") or []]
        if any(c["type"] == kind for c in conditions):
            if conditions[-1]["type"] == kind:
                return
            conditions = [c for c in conditions if c["type"] != kind]
        conditions.append({"type": kind, "status": "True", "reason": kind, "lastTransitionTime": _now()})
        group, version = API_VERSION.split("/")
        with contextlib.suppress(client.ApiException):  # deleted meanwhile
            client.CustomObjectsApi(kube.api_client).patch_namespaced_custom_object_status(
                group,
                version,
                job["metadata"]["namespace"],
                "hyperpodpytorchjobs",
                job["metadata"]["name"],
                {"status": {"conditions": conditions}},
            )
        job.setdefault("status", {})["conditions"] = conditions
