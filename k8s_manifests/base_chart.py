"""BaseChart: the namespace, the training service account and the payload ConfigMaps."""

from __future__ import annotations

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.payload import PAYLOAD_SUFFIXES, WORKLOADS_DIR, payload_configmaps, payload_files
from llm_infra.k8s_manifests.values import WorkloadValues


class BaseChart(cdk8s.Chart):
    """Namespace, service accounts (each bound to its role by EKS Pod Identity: ``training`` for the
    jobs, ``data-prep`` for the data-preparation Job, the only one that may read the Hugging Face
    token) and the payload.

    The payload scripts ship in ConfigMaps generated from ``workloads/`` (:mod:`llm_infra.k8s_manifests.payload`),
    mounted together at ``/workloads`` in every job, so the stock DLC image runs them with no image build.
    """

    def __init__(self, scope: Construct, construct_id: str, *, values: WorkloadValues) -> None:
        super().__init__(scope, construct_id)
        api_object(self, "Namespace", api_version="v1", kind="Namespace", name=values.namespace, body={})
        for construct_id, name in (
            ("ServiceAccount", values.service_account),
            ("DataPrepServiceAccount", values.data_prep_service_account),
        ):
            api_object(
                self,
                construct_id,
                api_version="v1",
                kind="ServiceAccount",
                name=name,
                namespace=values.namespace,
                body={},
            )
        files = payload_files()
        if not files:
            raise ValueError(f"workloads: no payload files ({', '.join(PAYLOAD_SUFFIXES)}) in {WORKLOADS_DIR}")
        for index, (name, data) in enumerate(payload_configmaps(files).items()):
            api_object(
                self,
                "Payload" if index == 0 else f"Payload{index + 1}",
                api_version="v1",
                kind="ConfigMap",
                name=name,
                namespace=values.namespace,
                body={"data": data},
            )
