"""TrainingJobChart: the resilient FSDP2 training job (``workloads/train.py``) on every GPU node."""

from __future__ import annotations

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.training_job import training_job
from llm_infra.k8s_manifests.values import WorkloadValues


def checkpoint_args(values: WorkloadValues, *, directory: str, name: str) -> list[str]:
    """train.py's checkpoint directory, and with the HyperPod memory tier its tiered-checkpointing
    flags (every save to the memory tier, every ``tiered_s3_every``-th also to S3 under ``name``)."""
    args = [f"--checkpoint-dir={directory}"]
    if values.tiered_checkpoint_s3_uri is not None:
        args += [
            "--tiered-checkpointing",
            f"--tiered-s3-uri={values.tiered_checkpoint_s3_uri}/{name}",
            f"--tiered-s3-every={values.tiered_s3_every}",
        ]
    return args


class TrainingJobChart(cdk8s.Chart):
    """A training job (:func:`training_job`) that trains ``preset`` for ``steps`` with checkpoints on FSx.

    Checkpoints go to ``<fsx>/checkpoints/<name>`` (and the memory tier, where HyperPod has one); a
    restarted or replaced worker resumes from the newest complete checkpoint. ``data`` is a token file
    on FSx (``/fsx/data/...``) or ``synthetic``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        values: WorkloadValues,
        name: str = "train",
        preset: str = "8b",
        steps: int = 1000,
        checkpoint_every: int | None = 100,
        data: str = "synthetic",
        extra_args: list[str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if steps < 1 or (checkpoint_every is not None and checkpoint_every < 1):
            raise ValueError(f"steps/checkpoint_every: must be >= 1, got {steps}/{checkpoint_every}")
        args = [
            f"--preset={preset}",
            f"--steps={steps}",
            *checkpoint_args(values, directory=f"{values.fsx_mount_path}/checkpoints/{name}", name=name),
            f"--pg-timeout-seconds={values.pg_timeout_seconds}",
        ]
        if checkpoint_every is not None:  # else extra_args choose the schedule (e.g. --mtbf-hours)
            args.append(f"--checkpoint-every={checkpoint_every}")
        if data != "synthetic":
            args.append(f"--data={data}")
        training_job(self, "Job", values=values, name=name, script="train.py", args=args + (extra_args or []))
