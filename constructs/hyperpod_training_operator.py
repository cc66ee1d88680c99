"""HyperPodTrainingOperator: the SageMaker HyperPod training operator (EKS add-on) and what it needs."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from llm_infra.constructs.hyperpod_cluster import HyperPodCluster
from llm_infra.constructs.hyperpod_nodes_ready import HyperPodNodesReady
from llm_infra.constructs.nag import use_aws_managed_policies
from llm_infra.constructs.training_cluster import (
    POD_IDENTITY_PRINCIPAL,
    ExistingTrainingCluster,
    TrainingCluster,
    overwrite_conflicts,
)
from llm_infra.constructs.validation import ConstructValidationError
from llm_infra.node_labels import NODE_ROLE_LABEL
from llm_infra.service_limits import (
    HYPERPOD_TRAINING_OPERATOR_NAMESPACE,
    HYPERPOD_TRAINING_OPERATOR_SERVICE_ACCOUNT,
)
from llm_infra.versions import HYPERPOD_TRAINING_OPERATOR_ADDONS

OPERATOR_ADDON = "amazon-sagemaker-hyperpod-training-operator"
CERT_MANAGER_ADDON = "cert-manager"
OPERATOR_POLICY = "AmazonSageMakerHyperPodTrainingOperatorAccess"


def controller_configuration(node_role: str) -> dict[str, object]:
    """The add-on's configuration: its controller on the nodes labelled ``llm-infra.aws/node-role:
    <node_role>``, which must all be HyperPod nodes.

    ``hpTrainingControllerManager.nodeSelector`` is a documented parameter whose default selects the
    HyperPod nodes (``sagemaker.amazonaws.com/compute-type``; docs: sagemaker-eks-operator-install,
    parameter table). How the add-on combines a given selector with that default is not published:
    if it replaces it, the controller goes to the ``node_role`` nodes; if it merges it as Helm merges
    values (keys added to the default map), to the HyperPod nodes that also carry the role. With a
    role that only HyperPod nodes carry, both are the same nodes. The compute-type key is not restated:
    its value stays the add-on's own (``HyperPod`` in AWS's table, ``hyperpod`` in published node
    listings; label values are case-sensitive), so no spelling of ours can contradict it.
    """
    return {"hpTrainingControllerManager": {"nodeSelector": {NODE_ROLE_LABEL: node_role}}}


class HyperPodTrainingOperator(Construct):
    """The HyperPod training operator (``HyperPodPyTorchJob``, ``sagemaker.amazonaws.com/v1``) on a
    training cluster whose GPU capacity is the HyperPod cluster ``hyperpod``.

    - ``role``: the controller's identity, AmazonSageMakerHyperPodTrainingOperatorAccess, assumable
      only through EKS Pod Identity;
    - ``pod_identity_association``: a standalone association of that role with the controller's
      service account (``aws-hyperpod/hp-training-operator-controller-manager``), created before the
      add-on. Never the add-on's inline ``PodIdentityAssociations``: EKS accepts those only while the
      add-on version advertises ``requiresIamPermissions``, which v1.2.1-eksbuild.1 stopped doing, so
      every inline install failed (awslabs/awsome-distributed-ai #1075, fixed by #1076 this way);
    - ``cert_manager``: the cert-manager EKS add-on, a documented prerequisite; its pods tolerate no
      taint, so they run on the system nodes or a HyperPod CPU node, never on the GPU nodes (``None``
      with ``cert_manager=False``: the cluster's owner runs it);
    - ``addon``: the pinned add-on for the cluster's Kubernetes version, after the association,
      cert-manager, the Pod Identity agent and the HyperPod cluster (AWS installs the operator on a
      cluster that has its HyperPod nodes; docs: sagemaker-eks-operator-install, prerequisites).
      Its controller (1 CPU, 2 GiB requested) runs on ``hyperpod``'s first CPU instance group
      (``controller_configuration``): HyperPod nodes, as the add-on's default wants, but not the GPU
      nodes, whose NoSchedule taint it does not tolerate. ``hyperpod`` needs a CPU group;
    - on a cluster this app did not create (:class:`ExistingTrainingCluster`) neither add-on gets
      ``ResolveConflicts: OVERWRITE``: what is there is its owner's;
    - ``nodes_ready``: the add-on also waits until that group has a Running node
      (:class:`HyperPodNodesReady`). With continuous provisioning the HyperPod cluster's create ends
      before any node has joined, and an add-on whose controller cannot be scheduled is unhealthy.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        training_cluster: TrainingCluster | ExistingTrainingCluster,
        hyperpod: HyperPodCluster,
        cert_manager: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        cpu_groups = [group for group in hyperpod.instance_groups if not group.gpu]
        if not cpu_groups:
            raise ConstructValidationError(
                self,
                "hyperpod: the training operator's controller runs on a HyperPod CPU instance group and "
                f"there is none (groups: {', '.join(g.name for g in hyperpod.instance_groups)}); add one "
                "with gpu=False, e.g. ml.m5.2xlarge",
            )
        controller_role = cpu_groups[0].node_role
        version = training_cluster.kubernetes_version
        if version not in HYPERPOD_TRAINING_OPERATOR_ADDONS:
            raise ConstructValidationError(
                self,
                f"kubernetes_version: {version!r} has no pinned HyperPod training operator add-on; "
                f"allowed: {', '.join(HYPERPOD_TRAINING_OPERATOR_ADDONS)}",
            )
        versions = HYPERPOD_TRAINING_OPERATOR_ADDONS[version]
        cluster = training_cluster.cluster

        self.role = iam.Role(
            self,
            "Role",
            # EKS Pod Identity needs sts:TagSession besides sts:AssumeRole.
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
            description="HyperPod training operator controller: read HyperPod cluster nodes, manage its jobs",
        )
        use_aws_managed_policies(
            self.role, [OPERATOR_POLICY], "The HyperPod training operator's documented, AWS-maintained policy."
        )
        self.pod_identity_association = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=HYPERPOD_TRAINING_OPERATOR_NAMESPACE,
            service_account=HYPERPOD_TRAINING_OPERATOR_SERVICE_ACCOUNT,
            role_arn=self.role.role_arn,
        )

        self.cert_manager: eks.Addon | None = None
        if cert_manager:  # off where the cluster's owner runs cert-manager already
            self.cert_manager = eks.Addon(
                self,
                "CertManager",
                cluster=cluster,
                addon_name=CERT_MANAGER_ADDON,
                addon_version=versions[CERT_MANAGER_ADDON],
                preserve_on_delete=False,
            )
            # Both add-ons take over what exists: AWS's CLI steps (docs: sagemaker-eks-operator-install,
            # `aws eks create-addon ... --resolve-conflicts OVERWRITE`) and AWS's HyperPod Terraform module do
            # so; the operators' Helm stack has already created the aws-hyperpod namespace. Not on a cluster
            # this app did not create: what is there is its owner's.
            if isinstance(training_cluster, TrainingCluster):
                overwrite_conflicts(self.cert_manager)
            # Its pods need nodes to become ACTIVE.
            self.cert_manager.node.add_dependency(training_cluster.system_nodegroup)

        self.addon = eks.Addon(
            self,
            "Addon",
            cluster=cluster,
            addon_name=OPERATOR_ADDON,
            addon_version=versions[OPERATOR_ADDON],
            configuration_values=controller_configuration(controller_role),
            preserve_on_delete=False,
        )
        if isinstance(training_cluster, TrainingCluster):
            overwrite_conflicts(self.addon)
        self.nodes_ready = HyperPodNodesReady(
            self, "NodesReady", hyperpod=hyperpod, instance_groups={cpu_groups[0].name: 1}
        )
        self.addon.node.add_dependency(self.pod_identity_association, hyperpod.resource, self.nodes_ready.resource)
        # cert-manager and the Pod Identity agent: ours where this app installs them, else the owner's.
        for prerequisite in (self.cert_manager, training_cluster.addons.get("eks-pod-identity-agent")):
            if prerequisite is not None:
                self.addon.node.add_dependency(prerequisite)
