"""Put the workload charts on the cluster: the bridge from CDK values to cdk8s, and the operators."""

from __future__ import annotations

from dataclasses import replace

import cdk8s
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3 as s3
from constructs import Construct, IDependable

from llm_infra.config import TrainingConfig
from llm_infra.constructs.lustre_storage import ILustreStorage
from llm_infra.constructs.training_cluster import ExistingTrainingCluster, TrainingCluster
from llm_infra.constructs.validation import ConstructValidationError
from llm_infra.k8s_manifests.payload import WORKLOADS_DIR
from llm_infra.k8s_manifests.render import JOB_CHARTS, QUEUES_CHART, build_charts
from llm_infra.k8s_manifests.values import FsxVolume, WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_TOLERATION
from llm_infra.versions import KUBERAY_OPERATOR, TOKENIZERS_VERSION


def training_image_tag_prefix(ray_version: str) -> str:
    """The prefix of the tag ``image_asset`` pushes its image under (the asset hash follows), so the tag
    names the Ray inside like a hand-built Ray image's (``ray_image``: ``...-ray2.60.0``); the cluster
    stack's synthesizer sets it (``DefaultStackSynthesizer(docker_tag_prefix=...)``)."""
    return f"ray{ray_version}-"


def workload_values(
    config: TrainingConfig, lustre: ILustreStorage, *, checkpoint_bucket: s3.IBucket | None = None
) -> WorkloadValues:
    """The one bridge: the charts get the file system's (and the checkpoint bucket's) CDK tokens as
    plain strings."""
    fsx = FsxVolume(
        file_system_id=lustre.file_system_id,
        dns_name=lustre.dns_name,
        mount_name=lustre.mount_name,
        storage_gib=config.fsx_storage_gib,
    )
    bucket = checkpoint_bucket.bucket_name if checkpoint_bucket is not None else None
    return WorkloadValues.from_config(config, fsx=fsx, checkpoint_bucket=bucket)


class ClusterWorkloads(Construct):
    """The KubeRay operator and the charts that ``cdk deploy`` applies.

    The platform charts (namespace, service accounts, payload ConfigMap, FSx volume, the Xid
    monitor) are always applied; nothing applied at deploy holds a GPU. The GPU jobs (validation,
    training) only with ``apply_jobs``, after ``training_operator`` (what installs the job kind's CRD
    and operator: Kubeflow's for PyTorchJob, the HyperPod training operator add-on for
    HyperPodPyTorchJob); the RayCluster and recipes run on demand from ``k8s_manifests/dist/``.
    With ``image_asset``, ``training_image`` is the image ``cdk deploy`` builds from workloads/Dockerfile.
    ``kuberay_operator=False`` leaves the KubeRay operator to the cluster's owner (an existing cluster).
    ``queues``: what makes the jobs' queue exist (this app's Kueue chart, which the queue objects wait for; on
    HyperPod the task-governance add-on and the team's compute allocation); the GPU jobs wait for it, so
    Kueue's webhook is serving before a job is created (one created before runs unqueued).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        training_cluster: TrainingCluster | ExistingTrainingCluster,
        values: WorkloadValues,
        apply_jobs: bool = False,
        training_operator: IDependable | None = None,
        image_asset: bool = False,
        kuberay_operator: bool = True,
        queues: IDependable | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if apply_jobs and training_operator is None:
            raise ConstructValidationError(
                self, "training_operator: required with apply_jobs (the jobs need their operator's CRD)"
            )
        self.training_image: ecr_assets.DockerImageAsset | None = None
        if image_asset:
            # The DLC image with the payload, Ray and tokenizers baked in, built and pushed by `cdk deploy`.
            image = self.training_image = ecr_assets.DockerImageAsset(
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
        self.kuberay_operator = (
            training_cluster.add_pinned_helm_chart(
                "KubeRayOperator", KUBERAY_OPERATOR, {"tolerations": [HEALTH_STATUS_TOLERATION]}, scope=self
            )
            if kuberay_operator
            else None
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
        if queues is not None:
            # The team namespace of task governance exists once its compute allocation does (ours is created
            # either way); our queue objects need Kueue's CRDs; the jobs need the queue.
            base.node.add_dependency(queues)
            for name in set(charts) & {QUEUES_CHART, *JOB_CHARTS}:
                self.manifests[name].node.add_dependency(queues)
            if QUEUES_CHART in charts:
                for name in set(charts) & set(JOB_CHARTS):
                    self.manifests[name].node.add_dependency(self.manifests[QUEUES_CHART])
