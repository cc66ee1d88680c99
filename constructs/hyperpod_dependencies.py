"""HyperPodDependencies: AWS's HyperPod dependencies Helm chart, installed by AWS's own nested stack."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import aws_cdk as cdk
from constructs import Construct

from llm_infra.config import HYPERPOD_HELM_TEMPLATE_KEY, HYPERPOD_SETUP_BUCKET
from llm_infra.constructs.validation import ConstructValidationError, require_literal

# AWS publishes the stack that `hyp create cluster-stack` and the HyperPod console use to install the
# chart, per region (PyPI hyperpod-cluster-stack-template 1.0.2, creation_template.yaml: HelmChartStack).
HELM_CHART_CUSTOM_RESOURCE_BUCKET = HYPERPOD_SETUP_BUCKET.format(region="${AWS::Region}")
HELM_CHART_TEMPLATE_URL = (
    f"https://{HELM_CHART_CUSTOM_RESOURCE_BUCKET}.s3.${{AWS::Region}}.amazonaws.com/{HYPERPOD_HELM_TEMPLATE_KEY}"
)
HELM_REPO_URL = "https://github.com/aws/sagemaker-hyperpod-cli.git"
HELM_REPO_PATH = "helm_chart/HyperPodHelmChart"
HELM_RELEASE = "hyperpod-dependencies"
HELM_NAMESPACE = "kube-system"
# AWS's template names its Lambda `${ResourceNamePrefix}helmfunc` (at most 64 characters) and its layer
# `${ResourceNamePrefix}-helm-layer`; our prefix is project-<stack id>-<inputs>- (at most 51 + 8).
PROJECT_PREFIX_CHARS = 24
# The nested stack's construct ID: this prefix, then the inputs digest (its logical ID adds CDK's hash).
STACK_ID = "HelmChartStack"

# Every switch of the chart's values.yaml (aws/sagemaker-hyperpod-cli 011ca92, helm_chart/
# HyperPodHelmChart), set explicitly so that a changed default upstream does not change what we get.
# The device plugins are off: TrainingCluster installs pinned ones in both compute modes (one owner).
CHART_SWITCHES = (
    "trainingOperators.enabled",
    "mpi-operator.enabled",
    "health-monitoring-agent.enabled",
    "deep-health-check.enabled",
    "job-auto-restart.enabled",
    "hyperpod-patching.enabled",
    "nvidia-device-plugin.devicePlugin.enabled",
    "aws-efa-k8s-device-plugin.devicePlugin.enabled",
    "neuron-device-plugin.devicePlugin.enabled",
    "cert-manager.enabled",
    "mlflow.enabled",
    "inferenceOperators.enabled",
    "storage.enabled",
    "cluster-role-and-bindings.enabled",
    "namespaced-role-and-bindings.enabled",
    "team-role-and-bindings.enabled",
    "gpu-operator.enabled",
)
TRAINING_OPERATORS = ("trainingOperators.enabled", "mpi-operator.enabled")
HYPERPOD_RESILIENCE = (
    "health-monitoring-agent.enabled",
    "deep-health-check.enabled",
    "job-auto-restart.enabled",
    "hyperpod-patching.enabled",
)


def helm_operators(switches: Mapping[str, bool]) -> str:
    """The ``HelmOperators`` parameter: ``key=true|false`` pairs, comma-separated."""
    return ",".join(f"{key}={str(on).lower()}" for key, on in switches.items())


def inputs_digest(switches: Mapping[str, bool]) -> str:
    """What keys AWS's Helm-chart stack (8 hex): its template, the chart's location and namespace, the switches."""
    chart = {
        "TemplateUrl": HELM_CHART_TEMPLATE_URL,
        "HelmRepoUrl": HELM_REPO_URL,
        "HelmRepoPath": HELM_REPO_PATH,
        "Namespace": HELM_NAMESPACE,
        "HelmOperators": helm_operators(switches),
    }
    return hashlib.sha256(json.dumps(chart, sort_keys=True).encode()).hexdigest()[:8]


def chart_switches(*, hyperpod: bool) -> dict[str, bool]:
    """What the chart installs: the Kubeflow training and MPI operators always; HyperPod's health
    agent, deep health checks, job auto-restart and patching only on a HyperPod cluster."""
    enabled = set(TRAINING_OPERATORS) | (set(HYPERPOD_RESILIENCE) if hyperpod else set())
    return {switch: switch in enabled for switch in CHART_SWITCHES}


class HyperPodDependencies(Construct):
    """AWS's HyperPod dependencies chart (Kubeflow training operator with the PyTorchJob CRD, MPI
    operator; on HyperPod also the health-monitoring agent, deep health checks and job auto-restart).

    Installed at deploy time by AWS's published nested stack, the one the HyperPod console and CLI
    use (``AWS::CloudFormation::Stack`` → ``helm-chart-template.yaml`` in the region's
    ``aws-sagemaker-hyperpod-cluster-setup-<region>-prod`` bucket): its Lambda clones the chart from
    ``aws/sagemaker-hyperpod-cli`` and runs Helm with ``HelmOperators`` as ``--set`` switches, under a
    role it gives cluster-admin through an access entry. Nothing is fetched at synth time and nothing
    needs git or Helm on your machine. The trade-off: AWS's stack installs the chart at the revision
    its template names (not ours to pin), and its Lambda runs outside the VPC, so the cluster's API
    endpoint must be public (``endpoint_access=public-and-private``).

    AWS's Lambda acts once (aws/sagemaker-hyperpod-cluster-setup, ``helm-chart-injector``): its custom
    resource has no properties, so a changed parameter only changes the function's environment and
    never reruns Helm; its Update path would run ``helm upgrade --install`` without the switches; its
    Delete runs ``helm uninstall`` of its release. So the stack is keyed by its inputs
    (:attr:`inputs_digest`, in its logical ID, its release name ``hyperpod-dependencies-<digest>`` and
    its resource names): the same inputs leave it alone; changed inputs (another compute mode) make a
    new stack with a new release, which Helm refuses to install over objects the old release still
    owns, so the deploy fails and rolls back with the old release intact (the rollback's ``helm
    uninstall`` targets the new release name). To change them, deploy once with ``operators=none``
    (AWS's Lambda uninstalls the old release), then with the new setting. Its names carry the parent
    stack's ID, so two deployments in one account and region never share AWS's ``<prefix>helmfunc``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        switches: Mapping[str, bool],
        resource_name_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        unknown = sorted(set(switches) - set(CHART_SWITCHES))
        if unknown:
            raise ConstructValidationError(
                self, f"switches: unknown {', '.join(unknown)}; allowed: {', '.join(CHART_SWITCHES)}"
            )
        # The prefix is cut to PROJECT_PREFIX_CHARS here, to keep AWS's Lambda name within 64 characters.
        require_literal(self, "resource_name_prefix", resource_name_prefix, "it is shortened at synth")
        self.switches = dict(switches)
        self.inputs_digest = inputs_digest(self.switches)
        self.release_name = f"{HELM_RELEASE}-{self.inputs_digest}"
        self.stack = cdk.CfnStack(
            self,
            f"{STACK_ID}{self.inputs_digest}",
            template_url=cdk.Fn.sub(HELM_CHART_TEMPLATE_URL),
            parameters={
                "ResourceNamePrefix": self._unique_prefix(resource_name_prefix),
                "HelmRepoUrl": HELM_REPO_URL,
                "HelmRepoPath": HELM_REPO_PATH,
                "Namespace": HELM_NAMESPACE,
                "HelmRelease": self.release_name,
                "HelmOperators": self.helm_operators,
                "CustomResourceS3Bucket": cdk.Fn.sub(HELM_CHART_CUSTOM_RESOURCE_BUCKET),
                "EKSClusterName": cluster_name,
            },
        )

    @property
    def helm_operators(self) -> str:
        """The ``HelmOperators`` parameter: ``key=true|false`` pairs, comma-separated."""
        return helm_operators(self.switches)

    def _unique_prefix(self, project: str) -> str:
        """``<project>-<first 8 hex of the parent stack's ID>-<inputs digest>-``: unique per deployment
        (the stack ID's UUID) and per inputs (old and new stacks coexist during an update)."""
        stack_uuid = cdk.Fn.select(2, cdk.Fn.split("/", cdk.Aws.STACK_ID))
        return cdk.Fn.join(
            "-",
            [project[:PROJECT_PREFIX_CHARS], cdk.Fn.select(0, cdk.Fn.split("-", stack_uuid)), f"{self.inputs_digest}-"],
        )
