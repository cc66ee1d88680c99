"""Put the workload charts on the cluster: the bridge from CDK values to cdk8s, and the operators."""

from __future__ import annotations

from dataclasses import replace

import cdk8s
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from llm_infra.config import TrainingConfig
from llm_infra.constructs.lustre_storage import LustreStorage
from llm_infra.constructs.training_cluster import TrainingCluster
from llm_infra.k8s_manifests.base_chart import WORKLOADS_DIR
from llm_infra.k8s_manifests.render import JOB_CHARTS, build_charts
from llm_infra.k8s_manifests.values import FsxVolume, WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_TOLERATION
from llm_infra.versions import KUBERAY_OPERATOR, TOKENIZERS_VERSION


def workload_values(config: TrainingConfig, lustre: LustreStorage) -> WorkloadValues:
    """The one bridge: the charts get the file system's CDK tokens as plain strings."""
    fsx = FsxVolume(
        file_system_id=lustre.file_system_id,
        dns_name=lustre.dns_name,
        mount_name=lustre.mount_name,
        storage_gib=config.fsx_storage_gib,
    )
    return WorkloadValues.from_config(config, fsx=fsx)


class ClusterWorkloads(Construct):
    """The KubeRay operator and the charts that ``cdk deploy`` applies.

    The platform charts (namespace, service accounts, payload ConfigMap, FSx volume, the Xid
    monitor) are always applied; nothing applied at deploy holds a GPU. The GPU jobs (validation,
    training) only with ``apply_jobs``, after ``training_operator`` (the stack that installs the
    PyTorchJob CRD and operator); the RayCluster and recipes run on demand from
    ``k8s_manifests/dist/``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        training_cluster: TrainingCluster,
        values: WorkloadValues,
        apply_jobs: bool = False,
        training_operator: IDependable | None = None,
        image_asset: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if apply_jobs and training_operator is None:
            raise ValueError("training_operator: required with apply_jobs (the jobs are PyTorchJobs)")
        if image_asset:
            # The DLC image with the payload, Ray and tokenizers baked in, built and pushed by `cdk deploy`.
            image = ecr_assets.DockerImageAsset(
                self,
                "TrainingImage",
                directory=str(WORKLOADS_DIR),
                build_args={
                    "BASE_IMAGE": values.image,
                    "RAY_VERSION": values.ray_version,
                    "TOKENIZERS_VERSION": TOKENIZERS_VERSION,
                },
                platform=ecr_assets.Platform.LINUX_AMD64,
            )
            values = replace(values, image=image.image_uri, ray_image=image.image_uri)
        self.values = values
        self.kuberay_operator = training_cluster.add_pinned_helm_chart(
            "KubeRayOperator", KUBERAY_OPERATOR, {"tolerations": [HEALTH_STATUS_TOLERATION]}, scope=self
        )
        charts = build_charts(cdk8s.App(), values, jobs=apply_jobs, ray=False)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        for name, chart in charts.items():
            self.manifests[name] = training_cluster.cluster.add_cdk8s_chart(f"Chart-{name}", chart)
        base = self.manifests["base"]
        for name, manifest in self.manifests.items():
            if name != "base":
                manifest.node.add_dependency(base)
        if training_operator is not None:
            for name in set(charts) & set(JOB_CHARTS):
                self.manifests[name].node.add_dependency(training_operator)
