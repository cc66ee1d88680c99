"""Snapshots of every synthesized template (asset hashes normalized): review template changes in diffs."""

from __future__ import annotations

import byo
import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from conftest import hyperpod_config, normalize
from llm_infra.config import TrainingConfig

SNAPSHOT_CONFIGS = {
    "eks-p5": TrainingConfig(),
    "hyperpod-p5": hyperpod_config(),
    # An existing VPC (the GPU subnet created in it), EKS cluster and FSx for Lustre file system.
    "byo-all": byo.CONFIGS["byo-all"],
    "byo-all-hyperpod": byo.CONFIGS["byo-all-hyperpod"],
}
# Network and storage do not depend on the compute mode (test_hyperpod asserts it).
CASES = [
    ("eks-p5", "network"),
    ("eks-p5", "storage"),
    ("eks-p5", "cluster"),
    ("hyperpod-p5", "cluster"),
    ("byo-all", "network"),
    ("byo-all", "storage"),
    ("byo-all", "cluster"),
    ("byo-all-hyperpod", "cluster"),
]


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize(("config_name", "stack"), CASES)
def test_template_snapshot(synth, snapshot_json, config_name: str, stack: str) -> None:
    app = synth(SNAPSHOT_CONFIGS[config_name])
    assert normalize(app.template(f"-{stack}")) == snapshot_json
