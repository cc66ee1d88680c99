"""KueueQueuesChart: the queue objects of this app's Kueue (plain EKS): a ResourceFlavor per node group, the
ClusterQueue with the nodes' quota, the LocalQueue of the jobs' namespace and the priority classes.

Fields as the pinned release's CRDs define them (sigs.k8s.io/kueue v0.17.0 config/components/crd/bases,
kueue.x-k8s.io/v1beta2; tests/test_queueing.py validates against them).
"""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.queueing import CLUSTER_QUEUE, KUEUE_API_VERSION, PRIORITY_CLASSES, QUEUE_RESOURCES


class KueueQueuesChart(cdk8s.Chart):
    """Kueue's objects for ``values.queues`` (its ``flavors``: :func:`llm_infra.queueing.cluster_queue_flavors`).

    - ``ResourceFlavor`` per flavour: the node group's labels (Kueue adds them to an admitted pod's node
      selector) and taints (Kueue gives the flavour only to pods that tolerate them);
    - ``ClusterQueue llm-infra``: one resource group over every resource our pods request (cpu, memory, GPUs,
      EFA devices, 2 MiB hugepages: a resource a pod requests and no group covers makes it inadmissible), the
      flavours in order (system first, so a CPU-only job lands there), from every namespace; StrictFIFO, so a
      256-node job at the head is not overtaken by small ones forever; no preemption;
    - ``LocalQueue default`` in the jobs' namespace: the queue our jobs name, and the one Kueue gives a job
      there that names none;
    - ``WorkloadPriorityClass`` per kind of job (PRIORITY_CLASSES): the queue's order, validation first.
    """

    def __init__(self, scope: Construct, construct_id: str, *, values: WorkloadValues) -> None:
        super().__init__(scope, construct_id)
        queues = values.queues
        if queues is None or not queues.flavors:
            raise ValueError(
                "queues: the Kueue chart needs the ClusterQueue's flavours (queueing=kueue on compute=eks)"
            )
        for flavor in queues.flavors:
            spec: dict[str, Any] = {"nodeLabels": flavor.node_labels}
            if flavor.node_taints:
                spec["nodeTaints"] = list(flavor.node_taints)
            api_object(
                self,
                f"Flavor-{flavor.name}",
                api_version=KUEUE_API_VERSION,
                kind="ResourceFlavor",
                name=flavor.name,
                body={"spec": spec},
            )
        group = {
            "coveredResources": list(QUEUE_RESOURCES),
            "flavors": [
                {
                    "name": flavor.name,
                    "resources": [{"name": name, "nominalQuota": flavor.quota[name]} for name in QUEUE_RESOURCES],
                }
                for flavor in queues.flavors
            ],
        }
        api_object(
            self,
            "ClusterQueue",
            api_version=KUEUE_API_VERSION,
            kind="ClusterQueue",
            name=CLUSTER_QUEUE,
            body={
                "spec": {
                    "namespaceSelector": {},
                    "queueingStrategy": "StrictFIFO",
                    "resourceGroups": [group],
                }
            },
        )
        api_object(
            self,
            "LocalQueue",
            api_version=KUEUE_API_VERSION,
            kind="LocalQueue",
            name=queues.local_queue,
            namespace=values.namespace,
            body={"spec": {"clusterQueue": CLUSTER_QUEUE}},
        )
        for kind, weight in PRIORITY_CLASSES.items():
            api_object(
                self,
                f"Priority-{kind}",
                api_version=KUEUE_API_VERSION,
                kind="WorkloadPriorityClass",
                name=queues.priority_classes[kind],
                body={"value": weight, "description": f"llm-infra {kind} jobs"},
            )
