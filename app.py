#!/usr/bin/env python3
"""The default llm-infra CDK app: ``cdk synth`` / ``cdk deploy`` (context keys: see README)."""

import aws_cdk as cdk

from llm_infra.config import TrainingConfig
from llm_infra.stacks.training_app import add_training_stacks

app = cdk.App()
add_training_stacks(app, TrainingConfig.from_context(app.node.get_all_context()))
app.synth()
