#!/usr/bin/env python3
"""The default llm-infra CDK app: ``cdk synth`` / ``cdk deploy`` (context keys: see README)."""

import sys
from pathlib import Path

import aws_cdk as cdk

from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.input_files import InputFileError
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.stacks.training_app import add_training_stacks

# aws-cdk-lib's built-in "CloudFormation Validate" (a WebAssembly template linter) costs ~1.9 s of each
# synth here; the test suite validates every template of both compute modes with cfn-lint instead.
app = cdk.App(builtin_cloud_formation_validation=False)
try:
    config = TrainingConfig.from_context(app.node.get_all_context())
    add_training_stacks(app, config)
    app.synth()
    if config.manifests_dir:  # `make synth`: the same charts as plain YAML for kubectl / GitOps
        write_dist(config, Path(config.manifests_dir))
except (ConfigError, InputFileError) as err:  # bad input: its message alone, no traceback
    sys.exit(f"error: {err}")
