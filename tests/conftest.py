"""Shared fixtures: synthesize the app once per configuration and hand out the templates."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from llm_infra import crds
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.base_chart import payload_files
from llm_infra.stacks.training_app import add_training_stacks

REPO_ROOT = Path(__file__).resolve().parent.parent

_ASSET_HASH = re.compile(r"\b[0-9a-f]{64}\b")
# A Ray image as users pass it (-c ray_image=...): workloads/Dockerfile built on the DLC training image
# and pushed to their ECR, its tag naming the DLC and the Ray inside. Without one (and without
# image_asset), the Ray manifests are not rendered.
RAY_TEST_IMAGE = (
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/llm-infra-training:2.8.0-gpu-py312-cu129-ubuntu22.04-ec2-ray2.60.0"
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, in one line, when the pinned upstream CRDs are not where the tests read them."""
    absent = crds.missing(crds.crds_dir())
    if absent:
        pytest.exit(
            f"the pinned CRDs ({', '.join(absent)}) are missing from {crds.crds_dir()}: run `make crds` "
            f"or set {crds.CRDS_DIR_VARIABLE} to a folder that has them",
            returncode=2,
        )


def hyperpod_config(**changes: Any) -> TrainingConfig:
    """A HyperPod-mode config."""
    return TrainingConfig(compute="hyperpod").with_(**changes)


class Synthesized:
    """The cloud assembly of one app synthesis: templates by stack name, plus the output folder."""

    def __init__(self, outdir: Path, templates: dict[str, dict[str, Any]]) -> None:
        self.outdir = outdir
        self.templates = templates

    def template(self, suffix: str) -> dict[str, Any]:
        (name,) = [n for n in self.templates if n.endswith(suffix)]
        return self.templates[name]

    def resources(self, suffix: str, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template(suffix)["Resources"].items() if v["Type"] == resource_type}


_cache: dict[TrainingConfig, Synthesized] = {}


def synthesize(config: TrainingConfig, outdir: Path) -> Synthesized:
    """Synthesize the default app for ``config`` with cdk-nag on (unacknowledged findings raise)."""
    if config not in _cache:
        app = cdk.App(outdir=str(outdir), builtin_cloud_formation_validation=False)  # cfn-lint runs instead
        add_training_stacks(app, config)
        assembly = app.synth()
        templates = {stack.stack_name: stack.template for stack in assembly.stacks}
        _cache[config] = Synthesized(outdir, templates)
    return _cache[config]


def normalize(template: dict[str, Any]) -> dict[str, Any]:
    """A template with asset hashes and payload sources replaced, so snapshots only change when the
    infrastructure does. A payload file is replaced only where the template holds exactly its
    current content, so a stale copy still shows up as a snapshot difference."""
    text = json.dumps(template, sort_keys=True)
    for name, content in payload_files().items():
        # In the template the ConfigMap sits in a JSON string inside JSON: escaped twice.
        escaped_twice = json.dumps(json.dumps(content)[1:-1])[1:-1]
        text = text.replace(escaped_twice, f"<workloads/{name}>")
    return json.loads(_ASSET_HASH.sub("<asset-hash>", text))


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory):
    """``synth(config)`` -> :class:`Synthesized`, cached for the whole session."""

    def _synth(config: TrainingConfig | None = None) -> Synthesized:
        config = config or TrainingConfig()
        return synthesize(config, tmp_path_factory.mktemp("cdk.out"))

    return _synth


@pytest.fixture(scope="session")
def default_app(synth) -> Synthesized:
    return synth(TrainingConfig())
