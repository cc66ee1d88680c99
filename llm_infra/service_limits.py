"""AWS service rules that both the config and the constructs enforce (plain data, no CDK import)."""

from __future__ import annotations

# FSx for Lustre PERSISTENT_2
FSX_PERSISTENT_2_THROUGHPUTS = (125, 250, 500, 1000)  # MB/s per TiB


def fsx_persistent_2_capacity_ok(gib: int) -> bool:
    """PERSISTENT_2 takes 1200 GiB or a multiple of 2400 GiB."""
    return gib == 1200 or (gib > 0 and gib % 2400 == 0)


FSX_PERSISTENT_2_CAPACITY_RULE = "1200 or a multiple of 2400"

# SageMaker HyperPod
HYPERPOD_DEEP_HEALTH_CHECKS = ("InstanceStress", "InstanceConnectivity")
# The families we run deep health checks on: the P instances with NVSwitch and EFA. AWS's deep-health-check page
# (sagemaker-hyperpod-eks-resiliency-deep-health-checks) lists each check as for "GPU" instances: GPU/NVLink
# counts, DCGM level 4, EFA and NCCL tests; AWS's HyperPod Helm chart (aws/sagemaker-hyperpod-cli,
# helm_chart/HyperPodHelmChart) schedules its health agent and device plugins on ml.p6-b200.48xlarge.
HYPERPOD_DEEP_HEALTH_CHECK_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200")
HYPERPOD_NODE_RECOVERY = ("Automatic", "None")
# NodeProvisioningMode: the API knows only "Continuous"; left out, HyperPod scales the standard way
# (botocore sagemaker 2017-07-24 ClusterNodeProvisioningMode; cfn-lint schema AWS::SageMaker::Cluster).
# BatchAddClusterNodes works only on Continuous clusters (its API documentation).
HYPERPOD_NODE_PROVISIONING = ("continuous", "standard")
# Regions with SageMaker HyperPod, and so with AWS's cluster-setup bucket
# aws-sagemaker-hyperpod-cluster-setup-<region>-prod that the operators' Helm-chart stack loads its template,
# Lambda and layer from (SageMaker developer guide, "Amazon SageMaker HyperPod", supported AWS Regions, as
# listed when this was written). `llm-infra preflight` checks the bucket itself in the account's region.
HYPERPOD_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ap-northeast-1",
    "ap-south-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ap-southeast-3",
    "ap-southeast-4",
    "eu-central-1",
    "eu-north-1",
    "eu-south-2",
    "eu-west-1",
    "eu-west-2",
    "sa-east-1",
)

# SageMaker HyperPod training operator (EKS add-on amazon-sagemaker-hyperpod-training-operator). Its
# controller runs in this namespace under this service account, the pair its Pod Identity association
# names (docs: sagemaker-eks-operator-install, "create-pod-identity-association ... --namespace
# aws-hyperpod --service-account hp-training-operator-controller-manager").
HYPERPOD_TRAINING_OPERATOR_NAMESPACE = "aws-hyperpod"
HYPERPOD_TRAINING_OPERATOR_SERVICE_ACCOUNT = "hp-training-operator-controller-manager"
# The torch releases its launcher supports: PyPI hyperpod-elastic-agent 1.1.3 (`hyperpodrun`, which
# every HyperPodPyTorchJob container runs) requires torch>=2.4.0,<2.12.0. AWS's operator page still
# lists 2.4.0-2.7.1, written for agent 1.0; agent 1.1.2 was released "to support torch v2.6+"
# (awslabs/awsome-distributed-ai #1022) and AWS's FSDP example runs it with torch 2.9.1.
HYPERPOD_ELASTIC_AGENT_TORCH = ((2, 4), (2, 12))  # [lowest, first unsupported) (major, minor)
