"""HuggingFaceToken: the Secrets Manager secret that holds a Hugging Face access token."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from llm_infra.constructs.nag import acknowledge


class HuggingFaceToken(Construct):
    """A secret for a Hugging Face token (gated models such as Llama), created without the token.

    CloudFormation fills it with a random value; you put the real token in once with
    ``aws secretsmanager put-secret-value --secret-id <secret_name> --secret-string hf_...``, so
    the token is never in a template, a manifest or a log. Pods read it through their Pod Identity
    role (:meth:`grant_read`). The secret is retained when the stack is deleted.
    """

    def __init__(self, scope: Construct, construct_id: str, *, secret_name: str) -> None:
        super().__init__(scope, construct_id)
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            secret_name=secret_name,
            description=(
                "Hugging Face access token for llm-infra jobs. Set it with: aws secretsmanager put-secret-value "
                f"--secret-id {secret_name} --secret-string hf_..."
            ),
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        acknowledge(
            self.secret,
            "SMG4",
            "A Hugging Face token is issued and rotated on huggingface.co; Secrets Manager cannot rotate it.",
        )
        self.secret_name = secret_name

    @property
    def secret_arn(self) -> str:
        return self.secret.secret_arn

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """``secretsmanager:GetSecretValue`` and ``DescribeSecret`` on this secret only."""
        return self.secret.grant_read(grantee)
