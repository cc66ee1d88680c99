"""TrainingJobRole: the AWS identity of training pods, and nothing more."""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from constructs import Construct

from llm_infra.config import TRAINING_NAMESPACE, TRAINING_SERVICE_ACCOUNT
from llm_infra.constructs.training_cluster import TrainingCluster


class TrainingJobRole(Construct):
    """The Pod Identity role of the training service account.

    Its only permissions are the ``access_policies`` it is given (the storage stack's policy:
    read the dataset prefix, read/write checkpoints). It is bound to ``namespace``/``service_account``
    through an EKS Pod Identity association, so no other pod can assume it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: TrainingCluster,
        access_policies: list[iam.IManagedPolicy],
        namespace: str = TRAINING_NAMESPACE,
        service_account: str = TRAINING_SERVICE_ACCOUNT,
    ) -> None:
        super().__init__(scope, construct_id)
        self.namespace = namespace
        self.service_account = service_account
        self.role = cluster.pod_identity_role(
            construct_id,
            namespace=namespace,
            service_account=service_account,
            description="Training pods: read the dataset prefix, read/write checkpoints",
        )
        for policy in access_policies:
            self.role.add_managed_policy(policy)

    @property
    def role_arn(self) -> str:
        return self.role.role_arn
