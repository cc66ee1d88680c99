"""BaseChart: the namespace, the training service account and the payload ConfigMap."""

from __future__ import annotations

from pathlib import Path

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.pod_spec import WORKLOADS_CONFIGMAP
from llm_infra.k8s_manifests.values import WorkloadValues

WORKLOADS_DIR = Path(__file__).resolve().parent.parent / "workloads"
PAYLOAD_SUFFIXES = (".py", ".sh")


def payload_files(directory: Path = WORKLOADS_DIR) -> dict[str, str]:
    """The files of ``workloads/`` that run in the containers, by name."""
    return {p.name: p.read_text() for p in sorted(directory.iterdir()) if p.is_file() and p.suffix in PAYLOAD_SUFFIXES}


class BaseChart(cdk8s.Chart):
    """Namespace, service accounts (each bound to its role by EKS Pod Identity: ``training`` for the
    jobs, ``data-prep`` for the data-preparation Job, the only one that may read the Hugging Face
    token) and the payload.

    The payload scripts ship in a ConfigMap generated from ``workloads/``, mounted at
    ``/workloads`` in every job, so the stock DLC image runs them with no image build.
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
        api_object(
            self,
            "Payload",
            api_version="v1",
            kind="ConfigMap",
            name=WORKLOADS_CONFIGMAP,
            namespace=values.namespace,
            body={"data": files},
        )
