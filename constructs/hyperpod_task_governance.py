"""HyperPodTaskGovernance: SageMaker HyperPod task governance (AWS's Kueue) for one team's training jobs.

Sources (read 2026-12-04):
- AWS, "SageMaker HyperPod task governance" and "Upgrade the task governance add-on"
  (docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-operate-console-ui-governance*.html): the
  EKS add-on ``amazon-sagemaker-hyperpod-taskgovernance`` installs Kueue and SageMaker-managed ClusterQueues,
  LocalQueues, WorkloadPriorityClasses and ResourceFlavors from the cluster policy and compute allocations;
  no other Kueue may be installed; updated with ``--resolve-conflicts OVERWRITE``.
- CloudFormation's schemas of ``AWS::SageMaker::ClusterSchedulerConfig`` (the cluster policy: PriorityClasses
  with weights 0-100, FairShare, IdleResourceSharing) and ``AWS::SageMaker::ComputeQuota`` (a compute
  allocation: ComputeQuotaResources per ml. instance type, ResourceSharingConfig Strategy Lend/DontLend/
  LendAndBorrow, PreemptTeamTasks Never/LowerPriority, ComputeQuotaTarget.TeamName "materialized as Kubernetes
  namespace 'hyperpod-ns-<TeamName>'"), as cfn-lint 1.58 ships them; aws-cdk-lib 2.275 has no L1 for
  ComputeQuota (CfnComputeQuota arrives in 2.276), hence a CfnResource.
- aws-samples/awsome-distributed-training 1cd090a, 1.architectures/7.sagemaker-hyperpod-eks/task-governance/
  README.md: ``create-cluster-scheduler-config`` and ``create-compute-quota`` with these fields; jobs in
  ``hyperpod-ns-<team>`` labelled with ``hyperpod-ns-<team>-localqueue`` and ``<priority class>-priority``.
"""

from __future__ import annotations

import re

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from llm_infra.constructs.hyperpod_cluster import HyperPodCluster
from llm_infra.constructs.training_cluster import ExistingTrainingCluster, TrainingCluster, overwrite_conflicts
from llm_infra.constructs.validation import ConstructValidationError, is_token
from llm_infra.queueing import PRIORITY_CLASSES
from llm_infra.versions import HYPERPOD_TASK_GOVERNANCE_ADDONS

TASK_GOVERNANCE_ADDON = "amazon-sagemaker-hyperpod-taskgovernance"
COMPUTE_QUOTA_TYPE = "AWS::SageMaker::ComputeQuota"
# ComputeQuotaTarget.TeamName and PriorityClass.Name (CloudFormation's schemas).
TEAM_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9]){0,39}?$"


class HyperPodTaskGovernance(Construct):
    """Task governance on the HyperPod cluster ``hyperpod``, with ``team`` holding all of its GPU nodes.

    - ``addon``: the pinned task-governance add-on (none with ``addon=False``: the cluster's owner runs it),
      after the HyperPod cluster; ``ResolveConflicts: OVERWRITE`` on a cluster this app created;
    - ``cluster_policy``: ``AWS::SageMaker::ClusterSchedulerConfig`` (L1) with our priority classes
      (:data:`llm_infra.queueing.PRIORITY_CLASSES`: validation before training), FairShare off (one team);
    - ``compute_quota``: ``AWS::SageMaker::ComputeQuota`` (``CfnResource``) giving ``team`` every instance of
      the GPU instance group: DontLend (the nodes are this team's; a borrower would be preempted when a
      256-node job arrives) and PreemptTeamTasks Never (a validation gate never stops a training run). It
      creates the namespace ``hyperpod-ns-<team>`` with its LocalQueue; both wait for the add-on.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        training_cluster: TrainingCluster | ExistingTrainingCluster,
        hyperpod: HyperPodCluster,
        team: str,
        addon: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        if not is_token(team) and not re.match(TEAM_NAME_PATTERN, team):
            raise ConstructValidationError(
                self, f"team: {team!r} is not allowed; allowed: 1-41 of a-z, 0-9 and '-' (namespace hyperpod-ns-<team>)"
            )
        version = training_cluster.kubernetes_version
        if version not in HYPERPOD_TASK_GOVERNANCE_ADDONS:
            raise ConstructValidationError(
                self,
                f"kubernetes_version: {version!r} has no pinned task-governance add-on; "
                f"allowed: {', '.join(HYPERPOD_TASK_GOVERNANCE_ADDONS)}",
            )
        gpu_groups = [group for group in hyperpod.instance_groups if group.gpu]
        if not gpu_groups:
            raise ConstructValidationError(self, "hyperpod: no GPU instance group to give the team")
        self.team = team
        names = {
            "cluster policy": f"{hyperpod.cluster_name}-policy",
            "compute quota": f"{hyperpod.cluster_name}-{team}",
        }
        for what, name in names.items():
            if not is_token(name) and len(name) > 63:
                raise ConstructValidationError(
                    self, f"team: the {what} name {name!r} (<HyperPod cluster>-...) is over 63 characters; shorten it"
                )

        self.addon: eks.Addon | None = None
        if addon:
            self.addon = eks.Addon(
                self,
                "Addon",
                cluster=training_cluster.cluster,
                addon_name=TASK_GOVERNANCE_ADDON,
                addon_version=HYPERPOD_TASK_GOVERNANCE_ADDONS[version][TASK_GOVERNANCE_ADDON],
                preserve_on_delete=False,
            )
            if isinstance(training_cluster, TrainingCluster):
                overwrite_conflicts(self.addon)
            # Its Kueue controller runs on a node: the cluster's, once HyperPod has joined it.
            self.addon.node.add_dependency(hyperpod.resource, training_cluster.system_nodegroup)

        self.cluster_policy = sagemaker.CfnClusterSchedulerConfig(
            self,
            "ClusterPolicy",
            cluster_arn=hyperpod.cluster_arn,
            name=names["cluster policy"],
            scheduler_config=sagemaker.CfnClusterSchedulerConfig.SchedulerConfigProperty(
                priority_classes=[
                    sagemaker.CfnClusterSchedulerConfig.PriorityClassProperty(name=name, weight=weight)
                    for name, weight in PRIORITY_CLASSES.items()
                ],
                fair_share="Disabled",
            ),
            description="llm-infra: validation gates before training runs",
        )
        self.compute_quota = cdk.CfnResource(
            self,
            "ComputeQuota",
            type=COMPUTE_QUOTA_TYPE,
            properties={
                "Name": names["compute quota"],
                "ClusterArn": hyperpod.cluster_arn,
                "ActivationState": "Enabled",
                "ComputeQuotaTarget": {"TeamName": team},
                "ComputeQuotaConfig": {
                    "ComputeQuotaResources": [
                        {"InstanceType": group.instance_type, "Count": group.count} for group in gpu_groups
                    ],
                    "ResourceSharingConfig": {"Strategy": "DontLend"},
                    "PreemptTeamTasks": "Never",
                },
                "Description": f"llm-infra: every GPU node for team {team}",
            },
        )
        for resource in (self.cluster_policy, self.compute_quota):
            if self.addon is not None:
                resource.node.add_dependency(self.addon)
        # The quota's queues take the policy's priority classes.
        self.compute_quota.node.add_dependency(self.cluster_policy)
