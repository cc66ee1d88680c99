"""The real validators on every synthesized template: cfn-lint (0 errors) and cdk-nag AwsSolutions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import byo
import pytest
from aws_cdk import aws_s3 as s3

from conftest import hyperpod_config
from llm_infra.config import HYPERPOD_ADDONS, INSTALLABLE, TrainingConfig
from llm_infra.constructs.nag import acknowledge, managed_policy_finding
from llm_infra.stacks.training_app import add_training_stacks

CONFIGS = {
    "default-p5": TrainingConfig(),
    "p4d-legacy-nics-private-endpoint": TrainingConfig(gpu_instance_type="p4d.24xlarge", endpoint_access="private"),
    "hyperpod": hyperpod_config(hyperpod_cpu_nodes=1),
    "capacity-block-existing-data-bucket": TrainingConfig(
        gpu_capacity="capacity-block",
        capacity_reservation_id="cr-0123456789abcdef0",
        data_bucket="my-datasets",
    ),
    # Bring your own: an existing VPC, EKS cluster, FSx for Lustre file system, alone and together.
    **byo.CONFIGS,
    "byo-cluster-with-addons": TrainingConfig(
        **byo.VPC, **byo.CLUSTER, install_addons=",".join(name for name in INSTALLABLE if name not in HYPERPOD_ADDONS)
    ),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_cfn_lint_reports_no_errors(synth, tmp_path: Path, name: str) -> None:
    app = synth(CONFIGS[name])
    paths = []
    for stack_name, template in app.templates.items():
        path = tmp_path / f"{stack_name}.template.json"
        path.write_text(json.dumps(template))
        paths.append(str(path))
    # Errors only: CDK's own redundant DependsOn entries raise warning W3005, which is not ours.
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "cfn-lint"),
            "--format",
            "parseable",
            "--non-zero-exit-code",
            "error",
            *paths,
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    errors = [line for line in result.stdout.splitlines() if ":E" in line]
    assert errors == []


@pytest.mark.parametrize("name", CONFIGS)
def test_cdk_nag_has_no_unacknowledged_findings(synth, name: str) -> None:
    # synth() runs AwsSolutionsChecks as a validation plugin; any unacknowledged finding raises.
    app = synth(CONFIGS[name])
    report = json.loads((app.outdir / "validation-report.json").read_text())
    assert report["pluginReports"] == []


def test_cdk_nag_is_really_on(tmp_path: Path) -> None:
    """A finding that nobody acknowledged makes synth fail (the check above can fail)."""
    app = cdk.App(outdir=str(tmp_path))
    stacks = add_training_stacks(app, TrainingConfig())
    s3.Bucket(stacks.storage, "Unhardened")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = (tmp_path / "validation-report.json").read_text()
    assert "Unhardened" in report and "AwsSolutions-S1" in report


def test_acknowledgments_need_a_reason_and_name_exact_findings() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    with pytest.raises(ValueError, match="must explain the exception"):
        acknowledge(stack, "IAM5", "because")
    acknowledge(stack, "IAM4", "A reason that explains the exception.", findings=[managed_policy_finding("X")])
    (entry,) = [m for m in stack.node.metadata if m.type == cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY]
    assert entry.data == {
        "Annotation::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/X]": (
            "A reason that explains the exception."
        )
    }
