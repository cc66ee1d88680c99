"""Kueue on plain EKS: the pinned chart's values (``llm_infra.versions.KUEUE``)."""

from __future__ import annotations

import json

from llm_infra.node_labels import NODE_ROLE_LABEL
from llm_infra.queueing import (
    KUEUE_INTEGRATIONS,
    PODS_READY_TIMEOUT,
    REQUEUE_BACKOFF_BASE_SECONDS,
    REQUEUE_BACKOFF_MAX_SECONDS,
    UNMANAGED_NAMESPACES,
)


def kueue_configuration() -> dict[str, object]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2, kueue v0.17.0 apis/config/v1beta2).

    The chart's ``managerConfig.controllerManagerConfigYaml`` is one string, replaced whole, so the chart's own
    settings are restated (charts/kueue/values.yaml at v0.17.0: probes, metrics, webhook port, leader election,
    concurrency, client QPS), with:

    - ``waitForPodsReady``: all or nothing. A job whose pods are not all Ready ``PODS_READY_TIMEOUT`` after its
      admission is evicted, its pods deleted, and requeued after an exponential backoff (no limit on the count);
      ``blockAdmission``: nothing else is admitted while an admitted job's pods are starting, so two jobs can
      never each hold part of the nodes and wait for the rest (kueue #2796);
    - ``manageJobsWithoutQueueName``: a job that names no queue is queued too (in the jobs' namespace it gets
      the LocalQueue ``default``), except in the cluster's and the operators' namespaces
      (``managedJobsNamespaceSelector``; the chart also scopes its webhooks with it);
    - the integrations our jobs use (:data:`llm_infra.queueing.KUEUE_INTEGRATIONS`).

    The chart's default ``internalCertManagement`` (Kueue makes its webhook's certificate) is kept: the chart
    adds it when cert-manager is off.
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 50, "burst": 100},
        "waitForPodsReady": {
            "timeout": PODS_READY_TIMEOUT,
            "blockAdmission": True,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": REQUEUE_BACKOFF_BASE_SECONDS,
                "backoffMaxSeconds": REQUEUE_BACKOFF_MAX_SECONDS,
            },
        },
        "manageJobsWithoutQueueName": True,
        "managedJobsNamespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(UNMANAGED_NAMESPACES)}
            ]
        },
        "integrations": {"frameworks": list(KUEUE_INTEGRATIONS)},
    }


def kueue_helm_values() -> dict[str, object]:
    """The chart's values: :func:`kueue_configuration` (as YAML: JSON is YAML, and the chart reads it with
    ``fromYaml``), and the controller on the system nodes."""
    return {
        "managerConfig": {"controllerManagerConfigYaml": json.dumps(kueue_configuration(), indent=2)},
        "controllerManager": {"nodeSelector": {NODE_ROLE_LABEL: "system"}},
    }
