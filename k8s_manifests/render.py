"""Build every chart from one set of values; write them as plain YAML for kubectl / GitOps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import cdk8s

from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.input_files import InputFileError, read_json
from llm_infra.k8s_manifests.base_chart import BaseChart
from llm_infra.k8s_manifests.fsx_storage_chart import FsxStorageChart
from llm_infra.k8s_manifests.kuberay_chart import KubeRayChart
from llm_infra.k8s_manifests.kueue_chart import KueueQueuesChart
from llm_infra.k8s_manifests.node_monitoring_chart import NodeMonitoringChart
from llm_infra.k8s_manifests.recipe_charts import DataPrepChart, recipe_training_chart
from llm_infra.k8s_manifests.recipes import RECIPES
from llm_infra.k8s_manifests.training_job_chart import TrainingJobChart
from llm_infra.k8s_manifests.validation_chart import ValidationChart
from llm_infra.k8s_manifests.values import FsxVolume, WorkloadValues

# The charts that start training jobs on every GPU node (the rest set the cluster up and hold no GPU).
JOB_CHARTS = ("validation", "training-job")
# This app's Kueue objects (plain EKS with queueing=kueue): flavours, ClusterQueue, LocalQueue, priorities.
QUEUES_CHART = "kueue-queues"
# The cluster stack's output with the image that ``image_asset=true`` builds (stacks/cluster_stack.py).
TRAINING_IMAGE_OUTPUT = "TrainingImageUri"


def build_charts(
    app: cdk8s.App, values: WorkloadValues, *, jobs: bool = True, ray: bool = True, recipe: bool = False
) -> dict[str, cdk8s.Chart]:
    """The charts for ``values`` by file name; the FSx volume only when its ids are known.

    ``jobs`` adds the validation and training jobs (PyTorchJob or HyperPodPyTorchJob), ``ray`` the
    RayCluster and its RayJob (GPU workers: run on demand, never applied by ``cdk deploy``),
    ``recipe`` the real-model run of ``values.recipe`` (data preparation, then training): two files
    to apply one after the other.
    """
    charts: dict[str, cdk8s.Chart] = {"base": BaseChart(app, "base", values=values)}
    if values.fsx is not None:
        charts["fsx-storage"] = FsxStorageChart(app, "fsx-storage", values=values)
    charts["node-monitoring"] = NodeMonitoringChart(app, "node-monitoring", values=values)
    if values.queues is not None and values.queues.flavors:  # our Kueue's queues (task governance has its own)
        charts[QUEUES_CHART] = KueueQueuesChart(app, QUEUES_CHART, values=values)
    if ray and values.ray_image is not None:  # Ray needs its image (torch + Ray + EFA): none, no chart
        charts["kuberay"] = KubeRayChart(app, "kuberay", values=values)
    if jobs:
        charts["validation"] = ValidationChart(app, "validation", values=values)
        charts["training-job"] = TrainingJobChart(app, "training-job", values=values)
    if recipe:
        chosen = RECIPES[values.recipe]
        charts[f"{chosen.name}-1-data-prep"] = DataPrepChart(
            app, f"{chosen.name}-1-data-prep", values=values, recipe=chosen
        )
        charts[f"{chosen.name}-2-train"] = recipe_training_chart(
            app, f"{chosen.name}-2-train", values=values, recipe=chosen
        )
    return charts


OUTPUTS_ADVICE = "pass the file cdk deploy --outputs-file wrote, or move it away to render without deployed values"


def deployed_outputs(outputs_file: Path, *, flag: str = "--outputs-file") -> dict[str, str]:
    """Every stack output in ``cdk deploy --outputs-file``'s file ({stack: {name: value}}), by name;
    none when there is no file yet (before the first deploy)."""
    if not outputs_file.exists():
        return {}
    stacks = read_json(outputs_file, flag=flag, advice=OUTPUTS_ADVICE)
    if not isinstance(stacks, dict) or not all(isinstance(outputs, dict) for outputs in stacks.values()):
        raise InputFileError(f"{flag} {outputs_file}: not {{stack: {{output: value}}}}; {OUTPUTS_ADVICE}")
    return {str(name): str(value) for outputs in stacks.values() for name, value in outputs.items()}


def fsx_from_outputs(outputs: dict[str, str], storage_gib: int) -> FsxVolume | None:
    """The FSx ids from the storage stack's outputs, if present."""
    if "FileSystemId" not in outputs:
        return None
    return FsxVolume(
        file_system_id=outputs["FileSystemId"],
        dns_name=outputs["FileSystemDnsName"],
        mount_name=outputs["FileSystemMountName"],
        storage_gib=storage_gib,
    )


def with_deployed_ray_image(config: TrainingConfig, outputs: dict[str, str]) -> TrainingConfig:
    """``config`` with the deployed training image as its Ray image when ``ray_image`` is unset.

    The image is workloads/Dockerfile built with ``RAY_VERSION=ray_version``, tagged ``ray<version>-<hash>``
    (the cluster stack's docker tag prefix), so the Ray image rules hold for it as for one set by hand; a
    mismatch means the deployed image holds another Ray than ``ray_version`` now asks for.
    """
    built = outputs.get(TRAINING_IMAGE_OUTPUT) if config.ray_image is None else None
    if built is None:
        return config
    try:
        return config.with_(ray_image=built)
    except ConfigError as error:
        raise ConfigError(
            f"{TRAINING_IMAGE_OUTPUT} in the deployed stack's outputs ({built}) does not fit this config: deploy "
            f"again with image_asset=true to rebuild it for ray_version, or set ray_image.\n{error}"
        ) from None


def deployed_values(config: TrainingConfig, outputs_file: Path, *, flag: str = "--outputs-file") -> WorkloadValues:
    """The values for ``config`` with what the deployed stacks' outputs tell: the FSx volume, the
    checkpoint bucket (for tiered checkpoints) and the image ``image_asset`` built (the jobs' image with
    ``image_asset``, the Ray pods' when ``ray_image`` is unset), each when present."""
    outputs = deployed_outputs(outputs_file, flag=flag)
    config = with_deployed_ray_image(config, outputs)
    values = WorkloadValues.from_config(
        config,
        fsx=fsx_from_outputs(outputs, config.fsx_storage_gib),
        checkpoint_bucket=outputs.get("CheckpointBucketName"),
    )
    built = outputs.get(TRAINING_IMAGE_OUTPUT)
    # As in the CDK app (stacks/workloads.py): with image_asset the jobs run the image deploy built too.
    return replace(values, image=built) if config.image_asset and built else values


def write_dist(config: TrainingConfig, outdir: Path, *, outputs_file: Path = Path("cdk-outputs.json")) -> list[Path]:
    """Write one YAML file per chart into ``outdir`` (old files there are removed)."""
    values = deployed_values(config, outputs_file, flag="the outputs file")
    outdir.mkdir(parents=True, exist_ok=True)
    for old in outdir.glob("*.k8s.yaml"):
        old.unlink()
    app = cdk8s.App(outdir=str(outdir))
    build_charts(app, values, recipe=True)
    app.synth()
    return sorted(outdir.glob("*.k8s.yaml"))
