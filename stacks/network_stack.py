"""NetworkStack: the VPC (or an existing one), the GPU subnet and the EFA security group."""

from __future__ import annotations

import aws_cdk as cdk
from constructs import Construct

from llm_infra.config import TrainingConfig
from llm_infra.constructs.efa_security_group import EfaSecurityGroup
from llm_infra.constructs.training_vpc import ExistingTrainingVpc, TrainingVpc


class NetworkStack(cdk.Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: TrainingConfig, **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        self.network: TrainingVpc | ExistingTrainingVpc
        if config.existing_vpc_id:  # AWS's HyperPod template: CreateVPCStack false, VpcId and PrivateSubnetIds
            self.network = TrainingVpc.from_existing(
                self,
                "Network",
                vpc_id=config.existing_vpc_id,
                private_subnet_ids=config.private_subnet_ids,
                gpu_subnet_id=config.existing_gpu_subnet_id,
                gpu_az_id=config.gpu_az_id,
                gpu_subnet_cidr=config.gpu_subnet_cidr,
                nat_gateway_id=config.existing_nat_gateway_id,
            )
        else:
            self.network = TrainingVpc(
                self,
                "Network",
                gpu_az_id=config.gpu_az_id,
                cidr=config.vpc_cidr,
                gpu_subnet_cidr=config.gpu_subnet_cidr,
            )
        self.efa = EfaSecurityGroup(self, "Efa", vpc=self.network.vpc)
        if config.gpu_az_region and not config.region:
            # Environment-agnostic synth cannot know the region: refuse a deploy elsewhere.
            cdk.CfnRule(
                self,
                "GpuAzIdMatchesRegion",
                assertions=[
                    cdk.CfnRuleAssertion(
                        assert_=cdk.Fn.condition_equals(cdk.Aws.REGION, config.gpu_az_region),
                        assert_description=(
                            f"gpu_az_id {config.gpu_az_id} lies in {config.gpu_az_region}; deploy there "
                            "or set gpu_az_id to an AZ ID of your region"
                        ),
                    )
                ],
            )
        cdk.CfnOutput(self, "VpcId", value=self.network.vpc.vpc_id)
        cdk.CfnOutput(self, "GpuSubnetId", value=self.network.gpu_subnet.subnet_id)
