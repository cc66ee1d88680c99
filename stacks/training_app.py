"""Compose the stacks of a training cluster from one config."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
import cdk_nag

from llm_infra.config import TrainingConfig
from llm_infra.stacks.cluster_stack import ClusterStack
from llm_infra.stacks.network_stack import NetworkStack
from llm_infra.stacks.storage_stack import StorageStack
from llm_infra.stacks.workloads import workload_values


@dataclass(frozen=True)
class TrainingStacks:
    network: NetworkStack
    storage: StorageStack
    cluster: ClusterStack


def add_training_stacks(app: cdk.App, config: TrainingConfig, *, nag: bool = True) -> TrainingStacks:
    """Add the network, storage and cluster stacks for ``config`` to ``app``.

    With ``nag`` (the default), cdk-nag's AwsSolutions checks run at synth and any finding that
    is not acknowledged with a reason makes synth fail.
    """
    env = cdk.Environment(account=config.account, region=config.region) if config.account or config.region else None
    prefix = config.project_name
    network = NetworkStack(app, f"{prefix}-network", config=config, env=env)
    storage = StorageStack(
        app,
        f"{prefix}-storage",
        config=config,
        vpc=network.network.vpc,
        subnet=network.network.gpu_subnet,
        clients=network.efa.security_group,
        env=env,
        termination_protection=True,
    )
    cluster = ClusterStack(
        app,
        f"{prefix}-cluster",
        config=config,
        vpc=network.network.vpc,
        control_plane_subnets=network.network.private_subnets,
        gpu_subnet=network.network.gpu_subnet,
        efa_security_group=network.efa.security_group,
        lustre=storage.lustre,
        training_access_policy=storage.training_access_policy,
        hf_token=storage.hf_token,
        workloads=workload_values(config, storage.lustre, checkpoint_bucket=storage.checkpoints.bucket),
        env=env,
    )
    for stack in (network, storage, cluster):
        cdk.Tags.of(stack).add("project", prefix)
    if nag:
        cdk.Validations.of(app).add_plugins(cdk_nag.AwsSolutionsChecks(app))
    return TrainingStacks(network=network, storage=storage, cluster=cluster)
