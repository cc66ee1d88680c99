"""Pinned versions of everything the stacks install into a cluster, and of the control plane ``make k8s``
builds, in one place: a bump is one edit here (``tests/test_version_pins.py`` fails when a pinned version
is written as a value anywhere else, or a comment or page names another one).

EKS add-on versions are per Kubernetes version; check what your region offers with
``aws eks describe-addon-versions --kubernetes-version 1.34 --addon-name vpc-cni`` and bump here
(the snapshot tests show every template change a bump causes). A Helm chart's pin also names the model
``llm_infra/rehearsal/upstream_charts.py`` keeps of that chart (re-read its values at the new version), and
KubeRay's the commit of its tag, from which ``llm_infra/rehearsal/crds.py`` fetches the CRDs (their
sha256 changes with it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HelmChartPin:
    chart: str
    repository: str
    version: str
    namespace: str


# EKS add-on builds per Kubernetes version. A build that does not exist fails the stack, so each
# pin names the public source that shows it (read 2026-12-03). AWS's own tables list only the newest
# build of some add-ons; before a deploy, `aws eks describe-addon-versions --kubernetes-version <v>
# --addon-name <name>` is the authority. vpc-cni must be >= 1.19 for `efa-only` interfaces.
EKS_ADDONS: dict[str, dict[str, str]] = {
    "1.34": {
        # Public Terraform for EKS 1.34 ("Updated EKS addon versions for Kubernetes 1.34 compatibility").
        "vpc-cni": "v1.20.4-eksbuild.1",
        # docs.aws.amazon.com/eks/latest/userguide/managing-coredns.html: "1.34 v1.12.4-eksbuild.1".
        "coredns": "v1.12.4-eksbuild.1",
        # docs.aws.amazon.com/eks/latest/userguide/managing-kube-proxy.html: "1.34 v1.34.1-eksbuild.2"
        # (v1.34.0-eksbuild.5 is a self-managed image tag, not an add-on build).
        "kube-proxy": "v1.34.1-eksbuild.2",
        # Public Terraform for EKS 1.34: "EKS Pod Identity Agent: v1.3.8-eksbuild.2 -> v1.3.9-eksbuild.3".
        "eks-pod-identity-agent": "v1.3.9-eksbuild.3",
        # awsdocs/amazon-eks-user-guide (hybrid-nodes-add-ons): "FSx CSI driver v1.7.0-eksbuild.1 and above".
        "aws-fsx-csi-driver": "v1.7.0-eksbuild.1",
        # Public Terraform with eks_cluster_version 1.34; aws-observability/helm-charts RELEASE_NOTES v4.6.0.
        "amazon-cloudwatch-observability": "v4.6.0-eksbuild.1",
        # EKS node monitoring agent: sets AcceleratedHardwareReady=False (reason NvidiaXID<code>Error) on a
        # GPU fault, which node auto repair acts on. aws/eks-node-monitoring-agent tag v1.7.0 (c399089, "ci: add
        # 1.7.0 release"), charts/eks-node-monitoring-agent/values.yaml: nodeAgent.image.tag, the build the chart
        # ships; its add-on configuration schema is charts/configuration.schema.json at that tag. To confirm
        # with `aws eks describe-addon-versions --addon-name eks-node-monitoring-agent`.
        "eks-node-monitoring-agent": "v1.7.0-eksbuild.1",
    },
    "1.35": {
        # Public "EKS 1.35-compatible versions" table: vpc-cni v1.21.1-eksbuild.3.
        "vpc-cni": "v1.21.1-eksbuild.3",
        # managing-coredns.md (docs.amazonaws.cn): "| 1.35 | v1.13.2-eksbuild.4 |".
        "coredns": "v1.13.2-eksbuild.4",
        # managing-kube-proxy.md (docs.amazonaws.cn): "| 1.35 | v1.35.3-eksbuild.2 |".
        "kube-proxy": "v1.35.3-eksbuild.2",
        # Public "latest addon versions for EKS 1.35" table: eks-pod-identity-agent v1.4.0-eksbuild.1.
        "eks-pod-identity-agent": "v1.4.0-eksbuild.1",
        # As for 1.34 (the add-on's builds are not per Kubernetes version).
        "aws-fsx-csi-driver": "v1.7.0-eksbuild.1",
        # No public source ties a build to 1.35: the 1.34 build, to confirm with describe-addon-versions.
        "amazon-cloudwatch-observability": "v4.6.0-eksbuild.1",
        # As for 1.34 (one agent build serves every Kubernetes version its chart supports).
        "eks-node-monitoring-agent": "v1.7.0-eksbuild.1",
    },
}

# The add-ons of the HyperPod training operator (compute=hyperpod), per Kubernetes version; a version
# missing here cannot run the operator (the config says so at synth time).
HYPERPOD_TRAINING_OPERATOR_ADDONS: dict[str, dict[str, str]] = {
    version: {
        # awslabs/awsome-distributed-ai 414d4da (PR #1076, from DescribeAddonVersions): "v1.2.1-eksbuild.1
        # (now the default across K8s 1.28-1.35)", installed and ACTIVE on a HyperPod EKS cluster.
        "amazon-sagemaker-hyperpod-training-operator": "v1.2.1-eksbuild.1",
        # EKS community add-on. cert-manager 1.19 supports Kubernetes 1.31-1.35 (cert-manager.io
        # releases table, cert-manager/website #2007); the v1.19.1-eksbuild.1 build is in public EKS
        # Terraform. To confirm with `aws eks describe-addon-versions --addon-name cert-manager`.
        "cert-manager": "v1.19.1-eksbuild.1",
    }
    for version in ("1.34", "1.35")
}

# SageMaker HyperPod task governance (compute=hyperpod): AWS's add-on with its own Kueue, per Kubernetes version.
# docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-operate-console-ui-governance-upgrade.html:
# v1.6.0-eksbuild.1 packages a Kueue release of AWS's choice; the HyperPod training operator needs v1.3.0-eksbuild.1 or
# later (sagemaker-eks-operator-troubleshooting). To confirm per region with `aws eks describe-addon-versions
# --addon-name amazon-sagemaker-hyperpod-taskgovernance`.
HYPERPOD_TASK_GOVERNANCE_ADDONS: dict[str, dict[str, str]] = {
    version: {"amazon-sagemaker-hyperpod-taskgovernance": "v1.6.0-eksbuild.1"} for version in ("1.34", "1.35")
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
# The commit of ray-project/kuberay's tag for that version: its CRDs (llm_infra/rehearsal/crds.py) and the
# sources the chart model and the tests cite are read there.
KUBERAY_COMMIT = "59d663aeec13760646da3db9c1cf8cfe883e30b7"

# The data-preparation Job: fetches the Hugging Face token (AWS CLI), tokenizes (tokenizers).
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.36.44"
TOKENIZERS_VERSION = "0.23.2"  # = the `data` extra in pyproject.toml (a test keeps them equal)


# ---- the control plane ``make k8s`` builds (llm_infra/rehearsal/control_plane.py runs it) -------------
# k8s/build.sh reads these through ``python -m llm_infra.rehearsal.control_plane --versions``; k8s/go.mod
# must pin the first two (k8s/gen_gomod.sh K8S_VERSION generates it; build.sh refuses a mismatch).
K8S_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.4"
KWOK_VERSION = "v0.7.0"
# AWS's HyperPod dependencies chart (aws/sagemaker-hyperpod-cli 011ca92, charts/training-operators)
# runs image kubeflow/training-operator:v1-855e096. The proxy refuses that commit's pseudo-version
# (403), and this is the release whose manifests pin that very image: its Go code (cmd, pkg, go.mod,
# go.sum) is identical to 855e096; only the Python SDK and the manifests' tags differ.
TRAINING_OPERATOR_VERSION = "v1.7.0"
# The KubeRay operator is the pinned chart's (KUBERAY_OPERATOR). The next-best real one, built when the
# pinned one cannot be (k8s/build.sh says so in one line): the module proxy answers "403 ... This module
# version is not available" for the pinned zip of github.com/ray-project/kuberay/ray-operator
# (2026-12-04; its .info and .mod are served), and serves this, the newest release below it (its
# @v/list is stale). Our rendered RayCluster and RayJob use no field its CRDs lack (checked against both).
KUBERAY_FALLBACK_VERSION = "v1.6.0"
# Kueue (issue 31): the controller ``make k8s`` builds (``go install sigs.k8s.io/kueue/cmd/kueue@<pin>``, its own
# dependency graph: k8s.io modules v0.35, so not the 1.34 wrapper module) and that the stack installs. The
# sigs.k8s.io/kueue module ships, at each tag, the controller (cmd/kueue), its Helm chart (charts/kueue) and
# its CRDs and webhook manifests (config/components/crd, config/components/webhook) side by side, so this
# one pin names all three (the control plane reads the CRDs and webhooks from the module: llm_infra/rehearsal/crds.py).
KUEUE_VERSION = "v0.17.0"
# The Helm chart of that release, installed on plain EKS (compute=eks): the OCI chart charts/kueue/README.md names
# at v0.17.0 (`helm install kueue oci://registry.k8s.io/kueue/charts/kueue --version="0.17.0"`). Its image is the
# release's (hack/helm-chart-package.sh sets registry.k8s.io/kueue/kueue at the tag, IfNotPresent). aws_eks_v2's
# kubectl handler pulls an oci:// repository with `helm pull <repository> --version <version>` (no login outside
# ECR), so the repository names the chart itself.
KUEUE = HelmChartPin(
    chart="kueue",
    repository="oci://registry.k8s.io/kueue/charts/kueue",
    version=KUEUE_VERSION.removeprefix("v"),
    namespace="kueue-system",
)
