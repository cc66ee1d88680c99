"""Put the workload charts on the cluster: the bridge from CDK values to cdk8s, and the operators."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from llm_infra.config import TrainingConfig
from llm_infra.constructs.local_helm_chart import helm_chart_from_directory
from llm_infra.constructs.lustre_storage import LustreStorage
from llm_infra.constructs.training_cluster import TrainingCluster
from llm_infra.k8s_manifests.base_chart import WORKLOADS_DIR
from llm_infra.k8s_manifests.render import PLATFORM_CHARTS, build_charts
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
    """Operators (KubeRay; the Kubeflow training operator on plain EKS) and the charts, applied by deploy.

    The platform charts (namespace, service account, payload ConfigMap, FSx volume, Ray) are
    always applied; the GPU jobs (validation, training) only with ``apply_jobs``, otherwise they
    are run on demand from the YAML in ``k8s_manifests/dist/``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        training_cluster: TrainingCluster,
        values: WorkloadValues,
        apply_jobs: bool = False,
        training_operator_chart: Path | None = None,
        wait_for: list[IDependable] | None = None,
        image_asset: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
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
        cluster = training_cluster.cluster
        self.training_operator = self._training_operator(cluster, values, training_operator_chart)

        charts = build_charts(cdk8s.App(), values, jobs=apply_jobs)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        for name, chart in charts.items():
            self.manifests[name] = cluster.add_cdk8s_chart(f"Chart-{name}", chart)
        base = self.manifests["base"]
        for name, manifest in self.manifests.items():
            if name != "base":
                manifest.node.add_dependency(base)
        self.manifests["kuberay"].node.add_dependency(self.kuberay_operator)
        for prerequisite in wait_for or []:  # e.g. the HyperPod dependencies chart (PyTorchJob CRD)
            for manifest in self.manifests.values():
                manifest.node.add_dependency(prerequisite)
        if self.training_operator is not None:
            for name in set(self.manifests) - set(PLATFORM_CHARTS):
                self.manifests[name].node.add_dependency(self.training_operator)

    def _training_operator(
        self, cluster: eks.Cluster, values: WorkloadValues, chart_dir: Path | None
    ) -> eks.HelmChart | None:
        """On plain EKS, the Kubeflow training operator (PyTorchJob) from a local chart copy.

        HyperPod mode gets it from the HyperPod dependencies chart. Without a chart the stack
        still deploys, with a warning: PyTorchJobs then need an operator installed by hand.
        """
        if values.hyperpod:
            return None
        if chart_dir is None or not (chart_dir / "Chart.yaml").is_file():
            cdk.Annotations.of(self).add_warning_v2(
                "llm-infra:no-training-operator",
                f"training_operator_chart: no chart at {chart_dir}; PyTorchJobs (training, validation) need "
                "the Kubeflow training operator: run `make hyperpod-chart` (it contains one) or install it.",
            )
            return None
        return helm_chart_from_directory(
            self,
            "TrainingOperator",
            cluster=cluster,
            chart_dir=chart_dir,
            release="training-operators",
            namespace="kubeflow",
            values={"tolerations": [HEALTH_STATUS_TOLERATION]},
        )
