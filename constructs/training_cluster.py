"""TrainingCluster: the EKS control plane, system nodes, add-ons and device plugins."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Collection, Sequence

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

from llm_infra.config import (
    DEFAULT_ENDPOINT_ACCESS,
    DEFAULT_GPU_INSTANCE_TYPE,
    DEFAULT_KUBERNETES_VERSION,
    DEFAULT_SYSTEM_INSTANCE_TYPE,
    DEFAULT_SYSTEM_NODES,
    INSTALLABLE,
)
from llm_infra.constructs.nag import (
    acknowledge,
    attribute_finding,
    managed_policy_finding,
    use_aws_managed_policies,
)
from llm_infra.constructs.validation import ConstructValidationError, is_token, require_literal
from llm_infra.node_labels import (
    CRITICAL_ADDONS_TOLERATION,
    EFA_LABEL,
    GPU_TOLERATION,
    HEALTH_STATUS_TOLERATION,
    INSTANCE_TYPE_LABEL,
    NODE_ROLE_LABEL,
)
from llm_infra.versions import EFA_DEVICE_PLUGIN, EKS_ADDONS, NVIDIA_DEVICE_PLUGIN, HelmChartPin

ENDPOINT_ACCESS = {
    "public-and-private": eks.EndpointAccess.PUBLIC_AND_PRIVATE,
    "private": eks.EndpointAccess.PRIVATE,
}
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
# Add-on configuration values (each add-on's schema: `aws eks describe-addon-configuration`).
# vpc-cni: NetworkPolicy objects (the Ray GCS Redis has one) are enforced only with the VPC CNI's
# network policy agent on (EKS user guide, "Restrict Pod network traffic with Kubernetes network
# policies": configuration value enableNetworkPolicy "true", vpc-cni v1.14.0 or later).
# eks-node-monitoring-agent (schema: aws/eks-node-monitoring-agent, charts/configuration.schema.json at the pinned
# tag; the EKS user guide's "Configure the node monitoring agent" still names the agent's key monitoringAgent,
# which that repository renamed nodeAgent in #86): two DaemonSets. nodeAgent runs everywhere (its chart's
# default toleration, Exists, kept explicit); dcgmAgent runs nv-hostengine, the DCGM host engine through which
# the agent sees Xid errors (monitors/nvidia/dcgm/dcgm_policies.go), only on NVIDIA instance types, and its
# chart tolerates no taint: without our GPU taint's toleration it never runs on the GPU nodes, and no Xid
# reaches AcceleratedHardwareReady. Helm replaces lists, so each list is the whole set.
NODE_MONITORING_AGENT_CONFIGURATION: dict[str, object] = {
    "nodeAgent": {"tolerations": [{"operator": "Exists"}]},
    "dcgmAgent": {"tolerations": [GPU_TOLERATION]},
}
ADDON_CONFIGURATION: dict[str, dict[str, object]] = {
    "vpc-cni": {"enableNetworkPolicy": "true"},
    "eks-node-monitoring-agent": NODE_MONITORING_AGENT_CONFIGURATION,
}
# CoreDNS autoscaled by EKS (AWS, "Scale CoreDNS Pods for high DNS traffic": docs.aws.amazon.com/eks/latest/
# userguide/coredns-autoscaling.html; awsdocs/amazon-eks-user-guide coredns-autoscaling.md): the add-on's
# configuration {"autoScaling": {"enabled": true, "minReplicas", "maxReplicas"}} (CoreDNS v1.9, EKS 1.25 and
# later); EKS's control plane keeps max(nodes / 16, vCPUs / 256) replicas within those bounds and scales down by a
# third every 3 minutes. Without it: 2 replicas, whatever the cluster's size. CoreDNS runs on the system nodes
# only (it tolerates no GPU taint), so its bound is the formula's node term at the cluster's largest size: its
# vCPU term would ask 192 replicas of 256 p5.48xlarge, which two system nodes do not hold.
COREDNS_MIN_REPLICAS = 2
COREDNS_NODES_PER_REPLICA = 16


def coredns_configuration(max_nodes: int) -> dict[str, object]:
    """The CoreDNS add-on's configuration: autoscaled by EKS from 2 replicas to one per 16 of ``max_nodes``."""
    most = max(COREDNS_MIN_REPLICAS, -(-max_nodes // COREDNS_NODES_PER_REPLICA))
    return {"autoScaling": {"enabled": True, "minReplicas": COREDNS_MIN_REPLICAS, "maxReplicas": most}}


# AmazonEKSClusterAdminPolicy on the whole cluster, as eks.Cluster.grant_cluster_admin gives it.
CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# EKS CreateCluster: "The unique name to give to your cluster" (1-100, ^[0-9A-Za-z][A-Za-z0-9\-_]*).
CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")


def eks_version(version: str) -> eks.KubernetesVersion:
    """The CDK version object for ``"1.34"``-style strings that this library supports."""
    if version not in EKS_ADDONS:
        raise ValueError(f"kubernetes_version: {version!r} is not supported; allowed: {', '.join(EKS_ADDONS)}")
    return eks.KubernetesVersion.of(version)


def cluster_admin_policy() -> eks.IAccessPolicy:
    return eks.AccessPolicy.from_access_policy_name(CLUSTER_ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER)


def nvidia_device_plugin_values() -> dict[str, object]:
    """Values for the NVIDIA device plugin chart: run on our GPU nodes.

    The chart's default ``affinity`` (deployments/helm/nvidia-device-plugin/values.yaml at v0.18.2)
    requires an NFD label or ``nvidia.com/gpu.present=true``, which neither EKS nor HyperPod nodes
    carry and which NFD (off by default) would add. Helm merges maps but replaces lists, so this
    ``nodeSelectorTerms`` list replaces the default terms; the chart's default tolerations are
    replaced too (GPU taint, HyperPod's health-status taint, CriticalAddonsOnly kept).
    """
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": NODE_ROLE_LABEL, "operator": "In", "values": ["gpu"]}]}
                    ]
                }
            }
        },
        "tolerations": [CRITICAL_ADDONS_TOLERATION, GPU_TOLERATION, HEALTH_STATUS_TOLERATION],
    }


def efa_device_plugin_values(gpu_instance_types: Sequence[str]) -> dict[str, object]:
    """Values for the EFA device plugin chart: run on our EFA nodes.

    The chart's DaemonSet affinity is hard-coded from ``supportedInstanceLabels`` (key
    ``node.kubernetes.io/instance-type`` In ``values``: EC2 names such as ``p5.48xlarge``; HyperPod
    nodes carry ``ml.p5.48xlarge``), so the list names our GPU nodes' instance types exactly.
    """
    return {
        "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_LABEL], "values": list(gpu_instance_types)},
        "nodeSelector": {EFA_LABEL: "true"},
        "tolerations": [GPU_TOLERATION, HEALTH_STATUS_TOLERATION],
    }


def overwrite_conflicts(addon: eks.Addon) -> None:
    """``ResolveConflicts: OVERWRITE``: the add-on takes over fields that another manager set (EKS's
    self-managed bootstrap copy, a Helm release, an edit by hand); the L2 has no such prop.

    With ``NONE`` (the default) EKS leaves such a field alone and the create or update may fail; with
    ``OVERWRITE`` it sets the add-on's value (EKS API reference, CreateAddon and UpdateAddon,
    ``resolveConflicts``). Every add-on here gets it: AWS's HyperPod EKS template sets it on each
    add-on it installs (aws/sagemaker-hyperpod-cluster-setup, eks/cloudformation/eks-template.yaml
    L83-118: vpc-cni, kube-proxy, coredns, eks-pod-identity-agent), and the template owns the others too.
    """
    cfn_addon = addon.node.default_child
    assert isinstance(cfn_addon, eks.CfnAddon)
    cfn_addon.resolve_conflicts = "OVERWRITE"


def kubectl_layer(scope: Construct, version: str) -> lambda_.ILayerVersion:
    """The kubectl/helm Lambda layer that matches the cluster's Kubernetes version."""
    minor = version.split(".")[1]
    module = importlib.import_module(f"aws_cdk.lambda_layer_kubectl_v{minor}")
    layer_class = getattr(module, f"KubectlV{minor}Layer")
    return layer_class(scope, "KubectlLayer")


class _TrainingClusterBase(Construct):
    """What a training cluster gives the rest of the app, whether this app created it
    (:class:`TrainingCluster`) or it exists (:class:`ExistingTrainingCluster`)."""

    cluster: eks.ICluster
    kubernetes_version: str
    system_nodegroup: eks.Nodegroup
    addons: dict[str, eks.Addon]
    application_log_group: logs.ILogGroup
    nvidia_device_plugin: eks.HelmChart | None
    efa_device_plugin: eks.HelmChart | None

    # ---- public API ---------------------------------------------------------------------------
    def add_pinned_helm_chart(
        self, construct_id: str, pin: HelmChartPin, values: dict[str, object], *, scope: Construct | None = None
    ) -> eks.HelmChart:
        """Install ``pin`` (chart, repository, exact version, namespace) with ``values``, after the
        system nodes exist (a release's pods, and Helm's wait, need somewhere to run)."""
        chart = eks.HelmChart(
            scope or self,
            construct_id,
            cluster=self.cluster,
            chart=pin.chart,
            repository=pin.repository,
            version=pin.version,
            namespace=pin.namespace,
            create_namespace=pin.namespace != "kube-system",
            release=pin.chart,
            values=values,
        )
        chart.node.add_dependency(self.system_nodegroup)
        return chart

    @property
    def cluster_name(self) -> str:
        return self.cluster.cluster_name

    @property
    def cluster_arn(self) -> str:
        return self.cluster.cluster_arn

    @property
    def cluster_security_group(self) -> ec2.ISecurityGroup:
        return self.cluster.cluster_security_group

    def grant_cluster_admin(self, construct_id: str, principal_arn: str) -> eks.AccessEntry:
        """Give an IAM principal cluster-admin through an EKS access entry."""
        raise NotImplementedError

    def pod_identity_role(
        self, construct_id: str, *, namespace: str, service_account: str, description: str
    ) -> iam.Role:
        """A role that only the given Kubernetes service account can assume, via EKS Pod Identity."""
        role = iam.Role(
            self,
            f"{construct_id}Role",
            # EKS Pod Identity needs sts:TagSession besides sts:AssumeRole.
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
            description=description,
        )
        eks.CfnPodIdentityAssociation(
            self,
            f"{construct_id}PodIdentity",
            cluster_name=self.cluster.cluster_name,
            namespace=namespace,
            service_account=service_account,
            role_arn=role.role_arn,
        )
        return role

    # ---- parts --------------------------------------------------------------------------------
    def _check_common(
        self, kubernetes_version: str, system_nodes: int, gpu_instance_types: Sequence[str], max_nodes: int | None
    ) -> int:
        """Validate the props both kinds of cluster take; the most nodes the cluster holds (``max_nodes``, else
        the system nodes)."""
        require_literal(
            self, "kubernetes_version", kubernetes_version, "it picks the add-on builds and the kubectl layer"
        )
        if kubernetes_version not in EKS_ADDONS:
            raise ConstructValidationError(
                self, f"kubernetes_version: {kubernetes_version!r} is not supported; allowed: {', '.join(EKS_ADDONS)}"
            )
        require_literal(self, "system_nodes", system_nodes, "the node group's maximum is derived from it")
        if system_nodes < 1:
            raise ConstructValidationError(self, f"system_nodes: {system_nodes} must be >= 1")
        if not is_token(gpu_instance_types) and not gpu_instance_types:
            raise ConstructValidationError(
                self, "gpu_instance_types: at least one (the GPU nodes' node.kubernetes.io/instance-type)"
            )
        if max_nodes is None:
            return system_nodes
        require_literal(self, "max_nodes", max_nodes, "CoreDNS's autoscaling bound is derived from it")
        if max_nodes < system_nodes:
            raise ConstructValidationError(
                self, f"max_nodes: {max_nodes} must be >= system_nodes ({system_nodes}): it counts every node"
            )
        return max_nodes

    def _system_node_role(self) -> iam.Role:
        role = iam.Role(
            self,
            "SystemNodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        )
        use_aws_managed_policies(
            role,
            ["AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryPullOnly"],
            "The documented minimum for EKS nodes; the CNI policy lives on a Pod Identity role.",
        )
        return role

    @staticmethod
    def _system_nodegroup_options(instance_type: str, nodes: int, role: iam.IRole) -> dict[str, object]:
        return {
            "ami_type": eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            "instance_types": [ec2.InstanceType(instance_type)],
            "min_size": nodes,
            "desired_size": nodes,
            "max_size": max(nodes, 2 * nodes),
            "node_role": role,
            "labels": {NODE_ROLE_LABEL: "system"},
            "enable_node_auto_repair": True,
        }

    def _addons(self, install: Collection[str], *, overwrite: bool, max_nodes: int) -> dict[str, eks.Addon]:
        """The pinned EKS add-ons named in ``install``, each AWS-calling one with its Pod Identity role, CoreDNS
        autoscaled for ``max_nodes`` (:func:`coredns_configuration`); with ``overwrite``, ``ResolveConflicts:
        OVERWRITE`` (:func:`overwrite_conflicts`)."""
        versions = {name: version for name, version in EKS_ADDONS[self.kubernetes_version].items() if name in install}
        if "vpc-cni" in versions:
            cni_role = self.pod_identity_role(
                "VpcCni",
                namespace="kube-system",
                service_account="aws-node",
                description="VPC CNI: manage ENIs and IPs of the nodes",
            )
            use_aws_managed_policies(
                cni_role, ["AmazonEKS_CNI_Policy"], "The VPC CNI's documented, AWS-maintained policy."
            )

        if "aws-fsx-csi-driver" in versions:
            fsx_role = self.pod_identity_role(
                "FsxCsi",
                namespace="kube-system",
                service_account="fsx-csi-controller-sa",
                description="FSx CSI controller: describe file systems for static volumes",
            )
            fsx_role.add_to_policy(
                iam.PolicyStatement(
                    actions=["fsx:DescribeFileSystems", "fsx:DescribeDataRepositoryAssociations"], resources=["*"]
                )
            )
            acknowledge(
                fsx_role,
                "IAM5",
                "fsx:Describe* actions do not support resource-level permissions.",
                findings=["Resource::*"],
            )

        if "amazon-cloudwatch-observability" in versions:
            cw_role = self.pod_identity_role(
                "CloudWatchAgent",
                namespace="amazon-cloudwatch",
                service_account="cloudwatch-agent",
                description="CloudWatch agent: publish Container Insights metrics and logs",
            )
            use_aws_managed_policies(
                cw_role,
                ["CloudWatchAgentServerPolicy"],
                "The CloudWatch agent's documented, AWS-maintained policy.",
            )

        addons: dict[str, eks.Addon] = {}
        for name, version in versions.items():
            addons[name] = eks.Addon(
                self,
                f"Addon-{name}",
                cluster=self.cluster,
                addon_name=name,
                addon_version=version,
                configuration_values=coredns_configuration(max_nodes)
                if name == "coredns"
                else ADDON_CONFIGURATION.get(name),
                preserve_on_delete=False,
            )
            if overwrite:
                # EKS's bootstrap copies (aws-node, coredns, kube-proxy) exist before the add-ons; the
                # vpc-cni configuration values change aws-node's fields.
                overwrite_conflicts(addons[name])
        # The add-on's application log group (container stdout). Fluent Bit would create it on first write,
        # with no retention; here it is retained and expires. Without the add-on it is its owner's.
        log_group_name = f"/aws/containerinsights/{self.cluster.cluster_name}/application"
        if "amazon-cloudwatch-observability" in addons:
            self.application_log_group = logs.LogGroup(
                self,
                "ApplicationLogs",
                log_group_name=log_group_name,
                retention=logs.RetentionDays.ONE_MONTH,
                removal_policy=cdk.RemovalPolicy.RETAIN,
            )
            addons["amazon-cloudwatch-observability"].node.add_dependency(self.application_log_group)
        else:
            self.application_log_group = logs.LogGroup.from_log_group_name(self, "ApplicationLogs", log_group_name)
        # CoreDNS, the CloudWatch agent and the node monitoring agent need nodes to reach ACTIVE.
        for name in ("coredns", "amazon-cloudwatch-observability", "aws-fsx-csi-driver", "eks-node-monitoring-agent"):
            if name in addons:
                addons[name].node.add_dependency(self.system_nodegroup)
        return addons

    def _device_plugins(self, install: Collection[str], gpu_instance_types: Sequence[str]) -> None:
        self.nvidia_device_plugin = (
            self.add_pinned_helm_chart("NvidiaDevicePlugin", NVIDIA_DEVICE_PLUGIN, nvidia_device_plugin_values())
            if NVIDIA_DEVICE_PLUGIN.chart in install
            else None
        )
        self.efa_device_plugin = (
            self.add_pinned_helm_chart(
                "EfaDevicePlugin", EFA_DEVICE_PLUGIN, efa_device_plugin_values(gpu_instance_types)
            )
            if EFA_DEVICE_PLUGIN.chart in install
            else None
        )

    def _acknowledge_kubectl_provider(self, provider: IConstruct) -> None:
        """Acknowledge, finding by finding, what aws_eks_v2's kubectl provider generates."""
        handler = provider.node.find_child("Handler")
        has_ecr_public = handler.node.find_child("HasEcrPublic")
        assert isinstance(has_ecr_public, cdk.CfnCondition)
        conditional_ecr_public = json.dumps(
            {
                "Fn::If": [
                    cdk.Stack.of(self).get_logical_id(has_ecr_public),
                    {
                        "Fn::Join": [
                            "",
                            [
                                "arn:",
                                {"Ref": "AWS::Partition"},
                                ":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly",
                            ],
                        ]
                    },
                    {"Ref": "AWS::NoValue"},
                ]
            },
            separators=(",", ":"),
        )
        lambda_policies = [
            "service-role/AWSLambdaBasicExecutionRole",
            "service-role/AWSLambdaVPCAccessExecutionRole",
        ]
        acknowledge(
            provider,
            "IAM4",
            "aws_eks_v2's kubectl provider Lambdas run in the VPC with AWS-maintained Lambda execution "
            "policies and pull the kubectl image layers read-only.",
            findings=[
                *(managed_policy_finding(name) for name in lambda_policies),
                managed_policy_finding("AmazonEC2ContainerRegistryReadOnly"),
                f"Policy::{conditional_ecr_public}",
            ],
        )
        handler_function = handler.node.default_child
        assert isinstance(handler_function, cdk.CfnResource)
        acknowledge(
            provider,
            "IAM5",
            "The custom-resource provider framework invokes the kubectl handler and its versions (ARN:*).",
            findings=[attribute_finding(handler_function, "Arn", ":*")],
        )
        acknowledge(
            provider,
            "L1",
            "The runtime of the custom-resource provider framework Lambda is pinned by aws-cdk-lib.",
        )


class TrainingCluster(_TrainingClusterBase):
    """An EKS cluster (``aws_eks_v2``) ready for GPU training.

    - control plane in the private subnets, API_AND_CONFIG_MAP authentication with access entries,
      secrets encrypted with a rotated KMS key, all control-plane log types on;
    - a managed node group of system nodes (CoreDNS, operators);
    - pinned EKS add-ons: vpc-cni (recent enough for ``efa-only`` interfaces, NetworkPolicy enforced),
      coredns (autoscaled by EKS up to one replica per 16 of ``max_nodes``, the most nodes the cluster will
      hold; default: the system nodes), kube-proxy,
      eks-pod-identity-agent, aws-fsx-csi-driver and amazon-cloudwatch-observability, the ones that
      call AWS with their own Pod Identity role, and eks-node-monitoring-agent (GPU faults as node
      conditions for node auto repair, its DCGM part tolerating the GPU taint); each with
      ``ResolveConflicts: OVERWRITE`` (:func:`overwrite_conflicts`);
    - the add-on's application log group (``application_log_group``: container stdout, retained,
      one month), created before the add-on so that metric filters can attach to it;
    - pinned Helm charts, each after the system nodes: the NVIDIA device plugin (nodes labelled
      ``llm-infra.aws/node-role=gpu``) and the AWS EFA device plugin (nodes labelled
      ``llm-infra.aws/efa=true`` whose instance type is one of ``gpu_instance_types``).

    ``gpu_instance_types`` are the values of ``node.kubernetes.io/instance-type`` on the GPU nodes:
    EC2 names for managed node groups, ``ml.``-prefixed names on HyperPod. ``cluster_name`` and
    ``admin_role_arn`` may be tokens. An existing cluster: :meth:`from_existing`.
    """

    cluster: eks.Cluster  # type: ignore[assignment]  # jsii's ICluster stub lags the class

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: list[ec2.ISubnet],
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        system_instance_type: str = DEFAULT_SYSTEM_INSTANCE_TYPE,
        system_nodes: int = DEFAULT_SYSTEM_NODES,
        endpoint_access: str = DEFAULT_ENDPOINT_ACCESS,
        admin_role_arn: str | None = None,
        cluster_name: str | None = None,
        gpu_instance_types: Sequence[str] = (DEFAULT_GPU_INSTANCE_TYPE,),
        max_nodes: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        max_nodes = self._check_common(kubernetes_version, system_nodes, gpu_instance_types, max_nodes)
        if endpoint_access not in ENDPOINT_ACCESS:
            raise ConstructValidationError(
                self, f"endpoint_access: {endpoint_access!r} is not allowed; allowed: {', '.join(ENDPOINT_ACCESS)}"
            )
        if len(subnets) < 2:
            raise ConstructValidationError(
                self, f"subnets: the EKS control plane needs subnets in two AZs, got {len(subnets)}"
            )
        if cluster_name is not None and not is_token(cluster_name) and not CLUSTER_NAME.match(cluster_name):
            raise ConstructValidationError(
                self,
                f"cluster_name: {cluster_name!r} is not allowed; allowed: 1-100 letters, digits, '-' and '_', "
                "starting with a letter or digit",
            )
        self.kubernetes_version = kubernetes_version

        self.secrets_key = kms.Key(
            self, "SecretsKey", enable_key_rotation=True, description="EKS secrets envelope encryption"
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            version=eks_version(kubernetes_version),
            cluster_name=cluster_name,
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnets=subnets)],
            default_capacity=0,
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            endpoint_access=ENDPOINT_ACCESS[endpoint_access],
            cluster_logging=[
                eks.ClusterLoggingTypes.API,
                eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR,
                eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ],
            secrets_encryption_key=self.secrets_key,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, kubernetes_version), private_subnets=subnets
            ),
        )
        cfn_cluster = self.cluster.node.default_child
        assert isinstance(cfn_cluster, eks.CfnCluster)
        cfn_cluster.add_property_override("AccessConfig.AuthenticationMode", "API_AND_CONFIG_MAP")
        if admin_role_arn:
            self.grant_cluster_admin("Admin", admin_role_arn)

        self.system_nodegroup = self.cluster.add_nodegroup_capacity(
            "SystemNodes",
            subnets=ec2.SubnetSelection(subnets=subnets),
            **self._system_nodegroup_options(  # type: ignore[arg-type]
                system_instance_type, system_nodes, self._system_node_role()
            ),
        )
        self.addons = self._addons(INSTALLABLE, overwrite=True, max_nodes=max_nodes)
        self._device_plugins(INSTALLABLE, gpu_instance_types)
        self._acknowledge_cdk_internals()

    @staticmethod
    def from_existing(
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        cluster_security_group_id: str,
        vpc: ec2.IVpc,
        subnets: list[ec2.ISubnet],
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        install: Collection[str] = (),
        system_instance_type: str = DEFAULT_SYSTEM_INSTANCE_TYPE,
        system_nodes: int = DEFAULT_SYSTEM_NODES,
        admin_role_arn: str | None = None,
        gpu_instance_types: Sequence[str] = (DEFAULT_GPU_INSTANCE_TYPE,),
        max_nodes: int | None = None,
    ) -> ExistingTrainingCluster:
        """An EKS cluster this app does not create, by name (nothing is looked up): the same interface as
        a new one. See :class:`ExistingTrainingCluster` for what it adds to the cluster."""
        return ExistingTrainingCluster(
            scope,
            construct_id,
            cluster_name=cluster_name,
            cluster_security_group_id=cluster_security_group_id,
            vpc=vpc,
            subnets=subnets,
            kubernetes_version=kubernetes_version,
            install=install,
            system_instance_type=system_instance_type,
            system_nodes=system_nodes,
            admin_role_arn=admin_role_arn,
            gpu_instance_types=gpu_instance_types,
            max_nodes=max_nodes,
        )

    def grant_cluster_admin(self, construct_id: str, principal_arn: str) -> eks.AccessEntry:
        """Give an IAM principal cluster-admin through an EKS access entry (``eks.Cluster.grant_cluster_admin``:
        AmazonEKSClusterAdminPolicy, cluster scope)."""
        return self.cluster.grant_cluster_admin(construct_id, principal_arn)

    def _acknowledge_cdk_internals(self) -> None:
        """Acknowledge, finding by finding, what aws_eks_v2 itself generates."""
        acknowledge(
            self.cluster.role,
            "IAM4",
            "AmazonEKSClusterPolicy is the EKS control plane's required, AWS-maintained policy.",
            findings=[managed_policy_finding("AmazonEKSClusterPolicy")],
        )
        self._acknowledge_kubectl_provider(self.cluster.node.find_child("KubectlProvider"))


class ExistingTrainingCluster(_TrainingClusterBase):
    """An EKS cluster this app does not create (:meth:`TrainingCluster.from_existing`), with what the app
    needs in it and nothing over what its owner runs:

    - ``cluster``: ``eks.Cluster.from_cluster_attributes`` (name, VPC, cluster security group) with a
      kubectl provider of this app's (a Lambda in ``subnets`` with the cluster security group, as a new
      cluster's), which an access entry (``kubectl_access``, AmazonEKSClusterAdminPolicy) admits: the
      cluster's authentication mode must take access entries (API or API_AND_CONFIG_MAP);
    - a system node group of this app's (``llm-infra.aws/node-role=system``: the Ray head and Redis
      select it) in ``subnets``;
    - of the add-ons and charts a new cluster gets (CoreDNS autoscaled for ``max_nodes`` as there), only those
      named in ``install``, each with
      ``ResolveConflicts`` left unset: where the owner's copy differs (EKS's self-managed bootstrap
      aws-node, coredns, kube-proxy; a Helm release) the create fails and theirs stays as it is;
    - ``application_log_group``: this app's only with ``amazon-cloudwatch-observability`` in ``install``;
      otherwise the add-on's group by name, which the owner's add-on must have created;
    - ``admin_role_arn``: an access entry, as on a new cluster.

    ``kubernetes_version`` must be the cluster's (the add-on builds and the kubectl layer follow it).
    ``cluster_name``, ``cluster_security_group_id`` and ``admin_role_arn`` may be tokens.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        cluster_security_group_id: str,
        vpc: ec2.IVpc,
        subnets: list[ec2.ISubnet],
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        install: Collection[str] = (),
        system_instance_type: str = DEFAULT_SYSTEM_INSTANCE_TYPE,
        system_nodes: int = DEFAULT_SYSTEM_NODES,
        admin_role_arn: str | None = None,
        gpu_instance_types: Sequence[str] = (DEFAULT_GPU_INSTANCE_TYPE,),
        max_nodes: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        max_nodes = self._check_common(kubernetes_version, system_nodes, gpu_instance_types, max_nodes)
        if not is_token(cluster_name) and not CLUSTER_NAME.match(cluster_name):
            raise ConstructValidationError(
                self,
                f"cluster_name: {cluster_name!r} is not an EKS cluster name (1-100 letters, digits, '-' and '_', "
                "starting with a letter or digit)",
            )
        if not is_token(cluster_security_group_id) and not re.fullmatch(
            r"sg-[0-9a-f]{8}([0-9a-f]{9})?", cluster_security_group_id
        ):
            raise ConstructValidationError(
                self,
                f"cluster_security_group_id: {cluster_security_group_id!r} is not an id such as sg-0123456789abcdef0",
            )
        unknown = sorted(set(install) - set(INSTALLABLE))
        if unknown:
            raise ConstructValidationError(
                self, f"install: {', '.join(unknown)} not allowed; allowed: {', '.join(INSTALLABLE)}"
            )
        if not subnets:
            raise ConstructValidationError(self, "subnets: at least one private subnet (system nodes, kubectl)")
        self.kubernetes_version = kubernetes_version
        self.install = frozenset(install)

        attributes = {
            "cluster_name": cluster_name,
            "vpc": vpc,
            "cluster_security_group_id": cluster_security_group_id,
        }
        # The cluster without a kubectl provider: what the provider and the access entries need of it.
        self._reference = eks.Cluster.from_cluster_attributes(self, "Reference", **attributes)  # type: ignore[arg-type]
        self.kubectl_provider = eks.KubectlProvider(
            self,
            "KubectlProvider",
            cluster=self._reference,
            kubectl_layer=kubectl_layer(self, kubernetes_version),
            private_subnets=subnets,
        )
        assert self.kubectl_provider.role is not None
        self.kubectl_access = self.grant_cluster_admin("KubectlAccess", self.kubectl_provider.role.role_arn)
        # Every custom resource the provider serves waits for the access entry (its framework function does).
        self.kubectl_provider.node.find_child("Provider").node.add_dependency(self.kubectl_access)
        self.cluster = eks.Cluster.from_cluster_attributes(
            self,
            "Cluster",
            kubectl_provider=self.kubectl_provider,
            **attributes,  # type: ignore[arg-type]
        )
        if admin_role_arn:
            self.grant_cluster_admin("Admin", admin_role_arn)

        self.system_nodegroup = eks.Nodegroup(
            self,
            "SystemNodes",
            cluster=self.cluster,
            subnets=ec2.SubnetSelection(subnets=subnets),
            **self._system_nodegroup_options(  # type: ignore[arg-type]
                system_instance_type, system_nodes, self._system_node_role()
            ),
        )
        self.addons = self._addons(self.install, overwrite=False, max_nodes=max_nodes)
        self._device_plugins(self.install, gpu_instance_types)
        self._acknowledge_kubectl_provider(self.kubectl_provider)

    def grant_cluster_admin(self, construct_id: str, principal_arn: str) -> eks.AccessEntry:
        """Give an IAM principal cluster-admin through an EKS access entry: what
        ``eks.Cluster.grant_cluster_admin`` makes, which an imported cluster does not offer."""
        return eks.AccessEntry(
            self,
            construct_id,
            cluster=self._reference,
            principal=principal_arn,
            access_policies=[cluster_admin_policy()],
        )
