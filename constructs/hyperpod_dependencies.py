"""HyperPodDependencies: what HyperPod's resilience features need inside the EKS cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from llm_infra.constructs.local_helm_chart import helm_chart_from_directory
from llm_infra.node_labels import HEALTH_STATUS_TOLERATION


class HyperPodDependencies(Construct):
    """The SageMaker HyperPod dependencies Helm chart, installed before the HyperPod cluster.

    AWS publishes the chart in the ``aws/sagemaker-hyperpod-cli`` repository
    (``helm_chart/HyperPodHelmChart``), not in a Helm repository, so the stack takes a local copy
    at a pinned commit (``make hyperpod-chart`` fetches it) and ships it as a CDK asset. Enabled:
    the health-monitoring agent (detects GPU/EFA/kernel faults and marks nodes for reboot or
    replacement), deep health checks, job auto-restart (restarts PyTorchJobs annotated with
    ``sagemaker.amazonaws.com/enable-job-auto-resume``), the Kubeflow training operator
    (PyTorchJob) and the MPI operator. The NVIDIA and EFA device plugins stay disabled here:
    :class:`TrainingCluster` installs pinned ones for both compute modes.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        chart_dir: Path,
        extra_values: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if not (chart_dir / "Chart.yaml").is_file():
            raise ValueError(
                f"hyperpod_helm_chart: {chart_dir} has no Chart.yaml; run `make hyperpod-chart` or point "
                "it at helm_chart/HyperPodHelmChart of aws/sagemaker-hyperpod-cli"
            )
        self.values = self.default_values(cdk.Stack.of(self).region) | (extra_values or {})
        self.chart = helm_chart_from_directory(
            self,
            "Chart",
            cluster=cluster,
            chart_dir=chart_dir,
            release="hyperpod-dependencies",
            namespace="kube-system",
            values=self.values,
            timeout=cdk.Duration.minutes(15),
        )

    @staticmethod
    def default_values(region: str) -> dict[str, Any]:
        """Chart values: resilience on, duplicates of what TrainingCluster installs off."""
        return {
            "health-monitoring-agent": {"enabled": True, "region": region},
            "deep-health-check": {"enabled": True},
            "job-auto-restart": {"enabled": True},
            "trainingOperators": {"enabled": True},
            "training-operators": {"tolerations": [HEALTH_STATUS_TOLERATION]},
            "mpi-operator": {"enabled": True},
            "nvidia-device-plugin": {"devicePlugin": {"enabled": False}},
            "aws-efa-k8s-device-plugin": {"devicePlugin": {"enabled": False}},
            "neuron-device-plugin": {"devicePlugin": {"enabled": False}},
            "mlflow": {"enabled": False},
            "inferenceOperators": {"enabled": False},
            "cert-manager": {"enabled": False},
        }
