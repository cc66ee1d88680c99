"""Pinned versions of everything the stacks install into a cluster, in one place.

EKS add-on versions are per Kubernetes version; check what your region offers with
``aws eks describe-addon-versions --kubernetes-version 1.34 --addon-name vpc-cni`` and bump here
(the snapshot tests show every template change a bump causes).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HelmChartPin:
    chart: str
    repository: str
    version: str
    namespace: str


# vpc-cni must be >= 1.19 for `efa-only` interfaces (they carry no IP address).
EKS_ADDONS: dict[str, dict[str, str]] = {
    "1.34": {
        "vpc-cni": "v1.20.4-eksbuild.2",
        "coredns": "v1.12.4-eksbuild.1",
        "kube-proxy": "v1.34.0-eksbuild.5",
        "eks-pod-identity-agent": "v1.3.9-eksbuild.3",
        "aws-fsx-csi-driver": "v1.7.0-eksbuild.1",
        "amazon-cloudwatch-observability": "v4.6.0-eksbuild.1",
    },
    "1.35": {
        "vpc-cni": "v1.20.4-eksbuild.2",
        "coredns": "v1.13.1-eksbuild.1",
        "kube-proxy": "v1.35.0-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.9-eksbuild.3",
        "aws-fsx-csi-driver": "v1.7.0-eksbuild.1",
        "amazon-cloudwatch-observability": "v4.6.0-eksbuild.1",
    },
}

NVIDIA_DEVICE_PLUGIN = HelmChartPin(
    chart="nvidia-device-plugin",
    repository="https://nvidia.github.io/k8s-device-plugin",
    version="0.18.2",
    namespace="kube-system",
)

EFA_DEVICE_PLUGIN = HelmChartPin(
    chart="aws-efa-k8s-device-plugin",
    repository="https://aws.github.io/eks-charts",
    version="v0.5.21",
    namespace="kube-system",
)

KUBERAY_OPERATOR = HelmChartPin(
    chart="kuberay-operator",
    repository="https://ray-project.github.io/kuberay-helm/",
    version="1.7.0",
    namespace="kuberay-system",
)

# The data-preparation Job: fetches the Hugging Face token (AWS CLI), tokenizes (tokenizers).
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.36.44"
TOKENIZERS_VERSION = "0.23.2"  # = the `data` extra in pyproject.toml (a test keeps them equal)
