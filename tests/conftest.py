"""Shared fixtures: synthesize the app once per configuration and hand out the templates; for the
command tests, the CLI in-process against local AWS (moto, botocore's Stubber) and the real control plane
(tests/kwok_cluster.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import aws_cdk.cx_api as cxapi
import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from llm_infra import cli
from llm_infra.cli.commands import cluster_access
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.base_chart import payload_files
from llm_infra.rehearsal import crds
from llm_infra.stacks.training_app import add_training_stacks

REPO_ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"
ACCOUNT = "123456789012"

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
    """The cloud assembly of one app synthesis: templates by stack name, the output folder, and the
    warnings and errors the constructs annotated (what `cdk synth` prints, each with a source line)."""

    def __init__(self, outdir: Path, templates: dict[str, dict[str, Any]], warnings: list[str] | None = None) -> None:
        self.outdir = outdir
        self.templates = templates
        self.warnings = warnings or []

    def template(self, suffix: str) -> dict[str, Any]:
        (name,) = [n for n in self.templates if n.endswith(suffix)]
        return self.templates[name]

    def resources(self, suffix: str, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template(suffix)["Resources"].items() if v["Type"] == resource_type}


_cache: dict[TrainingConfig, Synthesized] = {}


def synthesize(config: TrainingConfig, outdir: Path) -> Synthesized:
    """Synthesize the default app for ``config`` with cdk-nag on (unacknowledged findings raise), with the
    feature flags of cdk.json's context, as `cdk synth` has them (minimizePolicies merges IAM statements)."""
    if config not in _cache:
        flags = {key: value for key, value in _cdk_json_context().items() if key.startswith("@")}
        app = cdk.App(outdir=str(outdir), builtin_cloud_formation_validation=False, context=flags)  # cfn-lint runs
        add_training_stacks(app, config)
        assembly = app.synth()
        templates = {stack.stack_name: stack.template for stack in assembly.stacks}
        warnings = [
            f"{message.id}: {message.entry.data}"
            for stack in assembly.stacks
            for message in stack.messages
            if message.level in (cxapi.SynthesisMessageLevel.WARNING, cxapi.SynthesisMessageLevel.ERROR)
        ]
        _cache[config] = Synthesized(outdir, templates, warnings)
    return _cache[config]


def _cdk_json_context() -> dict[str, Any]:
    return dict(json.loads((REPO_ROOT / "cdk.json").read_text())["context"])


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


# ---- the CLI against local doubles ------------------------------------------------------------
def app_config(**changes: str) -> TrainingConfig:
    """The app's config as the CLI reads it: cdk.json's context, then -c values."""
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return TrainingConfig.from_context({**context, **changes})


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``llm-infra *argv`` in-process: (exit code, stdout, stderr)."""
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def aws_endpoint() -> Iterator[str]:
    """moto in server mode on loopback, with fake credentials for the clients."""
    from moto.server import ThreadedMotoServer

    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", REGION)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
        server.stop()


@pytest.fixture(scope="module")
def eks_arn(aws_endpoint: str) -> str:
    """The EKS cluster "train" in moto (whose backends every in-process moto server shares)."""
    eks = boto3.client("eks", region_name=REGION, endpoint_url=aws_endpoint)
    with contextlib.suppress(eks.exceptions.ResourceInUseException):
        eks.create_cluster(
            name="train",
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks",
            resourcesVpcConfig={"subnetIds": ["subnet-0123456789abcdef0"]},
        )
    return str(eks.describe_cluster(name="train")["cluster"]["arn"])


def stub_hyperpod_cluster(eks_arn: str, monkeypatch: pytest.MonkeyPatch) -> Stubber:
    """The HyperPod cluster "llm-infra-hyperpod" orchestrated by ``eks_arn``: DescribeCluster answered once
    by botocore's Stubber on the real service model (moto's answer has no ``Orchestrator``), for the
    commands' SageMaker client only; other services stay as they are. Use the Stubber as a context."""
    sagemaker = boto3.client(
        "sagemaker",
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"max_attempts": 1}),
    )
    stub = Stubber(sagemaker)
    stub.add_response(
        "describe_cluster",
        {
            "ClusterArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abcdefghijkl",
            "ClusterName": "llm-infra-hyperpod",
            "ClusterStatus": "InService",
            "InstanceGroups": [],
            "Orchestrator": {"Eks": {"ClusterArn": eks_arn}},
        },
        {"ClusterName": "llm-infra-hyperpod"},
    )
    real = cluster_access.aws_client
    monkeypatch.setattr(
        cluster_access, "aws_client", lambda args, service: sagemaker if service == "sagemaker" else real(args, service)
    )
    return stub


# ---- the real control plane (issue 22) ----------------------------------------------------------
@pytest.fixture(scope="session")
def control_plane() -> Iterator[Any]:
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK and (when built) the Kubeflow
    training operator on 127.0.0.1, once per session (``llm_infra.rehearsal.control_plane``); skips when
    ``make k8s`` has not built them. Tests that need the operator ask for ``training_operator``."""
    from llm_infra.rehearsal import control_plane as cp

    components = ("kube-controller-manager", "kube-scheduler", "kwok")
    bin_dir = cp.default_bin_dir()
    absent = cp.missing_binaries(bin_dir, (*cp.REQUIRED, *components))
    if absent:
        pytest.skip(
            f"real control plane: {', '.join(absent)} not built in {bin_dir}; run `make k8s` "
            f"or set {cp.BIN_DIR_VARIABLE} to prebuilt binaries"
        )
    operator = [] if cp.missing_binaries(bin_dir, ["training-operator"]) else ["training-operator"]
    with cp.ControlPlane(bin_dir, components=(*components, *operator)) as plane:
        yield plane


@pytest.fixture
def training_operator(control_plane: Any) -> None:
    """Skip unless the session's control plane runs the real Kubeflow training operator."""
    from llm_infra.rehearsal import control_plane as cp

    if cp.missing_binaries(control_plane.bin_dir, ["training-operator"]):
        pytest.skip(f"the training operator is not built in {control_plane.bin_dir}; run `make k8s`")


@pytest.fixture(scope="session")
def kwok(control_plane: Any) -> Iterator[Any]:
    """The session's control plane with a log-serving KWOK for the command tests' nodes."""
    from kwok_cluster import KwokCluster

    cluster = KwokCluster(control_plane)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def real(kwok: Any) -> Iterator[Any]:
    """The KWOK cluster, emptied of what an earlier test left."""
    kwok.reset()
    yield kwok


@pytest.fixture
def eks_cluster(real: Any, tmp_path: Path, eks_arn: str, aws_endpoint: str) -> tuple[Any, list[str]]:
    """The real API server as the Kubernetes API of the EKS cluster "train" in moto, and the command flags
    that reach it through a generated kubeconfig."""
    from kwok_cluster import write_kubeconfig

    kubeconfig = write_kubeconfig(real.plane, tmp_path / "kubeconfig", name=eks_arn)
    return real, ["--cluster", "train", "--kubeconfig", str(kubeconfig), "--endpoint-url", aws_endpoint]


@pytest.fixture
def hyperpod_cluster(
    real: Any, tmp_path: Path, eks_arn: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, list[str]]]:
    """The real API server behind the HyperPod cluster "llm-infra-hyperpod" (``stub_hyperpod_cluster``),
    and the command flags (compute=hyperpod) that reach it."""
    from kwok_cluster import write_kubeconfig

    stub = stub_hyperpod_cluster(eks_arn, monkeypatch)
    kubeconfig = write_kubeconfig(real.plane, tmp_path / "kubeconfig", name=eks_arn)
    with stub:
        yield real, ["--cluster", "llm-infra-hyperpod", "-c", "compute=hyperpod", "--kubeconfig", str(kubeconfig)]


@pytest.fixture
def hyperpod_operator(real: Any) -> Iterator[Any]:
    """The stand-in for AWS's closed HyperPod training operator (tests/hyperpod_operator.py), running."""
    from hyperpod_operator import HyperPodOperatorStandIn
    from kwok_cluster import NAMESPACE

    with HyperPodOperatorStandIn(str(real.plane.kubeconfig), NAMESPACE) as operator:
        yield operator


@pytest.fixture
def bare_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No credentials, region or profile from the environment or ~/.aws, and no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path
