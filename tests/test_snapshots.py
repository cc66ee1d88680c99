"""Snapshots of every synthesized template (asset hashes normalized): review template changes in diffs."""

from __future__ import annotations

import pytest
from conftest import normalize
from syrupy.extensions.json import JSONSnapshotExtension

from llm_infra.config import TrainingConfig

SNAPSHOT_CONFIGS = {
    "eks-p5": TrainingConfig(),
}


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("config_name", SNAPSHOT_CONFIGS)
@pytest.mark.parametrize("stack", ["network", "storage", "cluster"])
def test_template_snapshot(synth, snapshot_json, config_name: str, stack: str) -> None:
    app = synth(SNAPSHOT_CONFIGS[config_name])
    assert normalize(app.template(f"-{stack}")) == snapshot_json
