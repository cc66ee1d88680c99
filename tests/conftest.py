"""Shared fixtures: synthesize the app once per configuration and hand out the templates; for the
command tests, the CLI in-process against local AWS (moto, botocore's Stubber) and the real control plane
(tests/kwok_cluster.py), one per session (tests/shared_plane.py); torchrun on CPU for the payload's runs.

Each test's tier (tests/tiers.py) follows from the fixtures it uses: ``k8s_binaries`` (a control plane),
``torch_launch`` (torchrun), ``extra_synth`` (an app beyond the session's default one). ``make test-fast``
runs every test that uses none of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import aws_cdk.cx_api as cxapi
import boto3
import pytest
import shared_plane
import tiers
from botocore.config import Config
from botocore.stub import Stubber

from llm_infra import cli
from llm_infra.cli.commands import cluster_access
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.payload import payload_files
from llm_infra.rehearsal import crds
from llm_infra.rehearsal.control_plane import die_with_parent
from llm_infra.stacks.training_app import add_training_stacks

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = REPO_ROOT / "workloads"
REGION = "us-east-1"
ACCOUNT = "123456789012"

# The tests' control planes (Go, all of them) trade memory for CPU: kube-apiserver's start with the CRDs took
# 10.4 CPU-s here at Go's default GOGC=100, 6.9 at 400 (its resident memory 0.7 GB then 1.5; at most two planes
# are up at once in a run). `llm-infra rehearse` outside the tests keeps Go's default.
os.environ.setdefault("GOGC", "400")

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


# ---- tiers (issue 29) ----------------------------------------------------------------------------
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with the tiers of the fixtures it uses (tests/tiers.py)."""
    tiers.mark(items)


def pytest_configure(config: pytest.Config) -> None:
    tiers.name_groups_file(config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n 2 --dist loadfile``: files whole, the control-plane tier on one worker (tests/tiers.py)."""
    return tiers.make_scheduler(config, log)


@pytest.fixture(autouse=True)
def _fast_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a fast-tier test, torchrun, Ray, a control-plane binary or a control plane's start fails loudly."""
    if not any(request.node.get_closest_marker(tier) for tier in tiers.TIERS):
        tiers.guard(monkeypatch, request.node.nodeid)


@pytest.fixture(scope="session")
def extra_synth() -> None:
    """Stands for synthesizing an app beyond the session's default one (``synth``, a ``cdk synth`` subprocess):
    a test that asks for it, directly or through another fixture, is in the ``extra_synth`` tier."""


class TorchLaunch:
    """torchrun on this machine's CPUs (gloo) for the payload's scripts in workloads/, each run on a free
    loopback port: the ``torch_launch`` fixture, through which every test that starts torchrun does so."""

    def command(
        self, script: str, args: Sequence[str], *, nproc: int = 2, max_restarts: int = 0, monitor_interval: float = 0.5
    ) -> list[str]:
        from llm_infra.rehearsal.control_plane import free_port

        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}",
            f"--max-restarts={max_restarts}",
            f"--monitor-interval={monitor_interval:g}",
            str(WORKLOADS / script),
            *args,
        ]

    @staticmethod
    def environment() -> dict[str, str]:
        return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

    def run(
        self, script: str, args: Sequence[str], *, timeout: float = 300, **options: Any
    ) -> subprocess.CompletedProcess[str]:
        """Run it to the end (``timeout``: a hang guard): stdout and stderr captured as text."""
        command = self.command(script, args, **options)
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, cwd=WORKLOADS, env=self.environment()
        )

    def popen(self, script: str, args: Sequence[str], **popen: Any) -> subprocess.Popen[str]:
        """Start it, in a session of its own; ``popen``: subprocess.Popen's arguments (stdout, stderr, ...)."""
        return subprocess.Popen(
            self.command(script, args),
            text=True,
            env=self.environment(),
            cwd=WORKLOADS,
            preexec_fn=die_with_parent(),  # torchrun and its workers die with a SIGKILLed test run
            start_new_session=True,
            **popen,
        )


@pytest.fixture(scope="session")
def torch_launch() -> TorchLaunch:
    """torchrun on CPU: a test that asks for it, directly or through another fixture, is in the ``torch_launch``
    tier."""
    return TorchLaunch()


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
def synth(extra_synth: None, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Synthesized]:
    """``synth(config)`` -> :class:`Synthesized`, cached for the whole session (the ``extra_synth`` tier: for
    the default app alone, ask for ``default_app``)."""

    def _synth(config: TrainingConfig | None = None) -> Synthesized:
        config = config or TrainingConfig()
        return synthesize(config, tmp_path_factory.mktemp("cdk.out"))

    return _synth


@pytest.fixture
def rehearsal_binaries(k8s_binaries: Path) -> None:
    """What ``llm-infra rehearse`` starts: every component it needs built, else skip."""
    from llm_infra.rehearsal import control_plane as cp
    from llm_infra.rehearsal.rehearse import REQUIRED_COMPONENTS

    absent = cp.missing_binaries(k8s_binaries, REQUIRED_COMPONENTS)
    if absent:
        pytest.skip(f"real control plane: {', '.join(absent)} not built in {k8s_binaries}; run `make k8s`")


@pytest.fixture(scope="session")
def default_app(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """The default app, synthesized once per session (the fast tier has it; ``synth(TrainingConfig())`` is it too)."""
    return synthesize(TrainingConfig(), tmp_path_factory.mktemp("cdk.out"))


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


# ---- the real control plane (issue 22; one per session: issue 29) --------------------------------
@pytest.fixture(scope="session")
def k8s_binaries() -> Path:
    """The control plane's binaries (``make k8s``, or ``$LLM_INFRA_K8S_BIN_DIR``); skips with the build
    command without etcd and kube-apiserver. Every test that starts a control plane, or runs a command that
    does, asks for this (directly or through ``control_plane``/``own_control_plane``): the ``control_plane``
    tier."""
    from llm_infra.rehearsal import control_plane as cp

    bin_dir = cp.default_bin_dir()
    absent = cp.missing_binaries(bin_dir)
    if absent:
        pytest.skip(
            f"real control plane: {', '.join(absent)} not built in {bin_dir}; run `make k8s` "
            f"or set {cp.BIN_DIR_VARIABLE} to prebuilt binaries"
        )
    return bin_dir


@pytest.fixture(scope="session")
def own_control_plane(k8s_binaries: Path) -> Callable[..., contextlib.AbstractContextManager[Any]]:
    """``with own_control_plane(components): ...`` starts a control plane of the caller's own (``components``:
    the optional ones, default every one built), for a test that needs cluster-wide state no other test may see
    (its own node set, a whole deploy) or checks the control plane's own life; its logs are kept on a failure."""
    from llm_infra.rehearsal import control_plane as cp

    @contextlib.contextmanager
    def start(components: Sequence[str] | None = None) -> Iterator[cp.ControlPlane]:
        with cp.ControlPlane(k8s_binaries, components=components) as plane:
            shared_plane.LIVE.append(plane)
            try:
                yield plane
            finally:
                shared_plane.LIVE.remove(plane)

    return start


@pytest.fixture(scope="session")
def control_plane(own_control_plane: Callable[..., Any]) -> Iterator[Any]:
    """The session's control plane, shared by every test that can share one: etcd, kube-apiserver and each
    optional component built (controller-manager, scheduler, KWOK, the training and KubeRay operators), started
    once. Its tests keep to namespaces of their own (``shared_plane.new_namespace``) and remove the nodes they
    add. Tests that need the training operator ask for ``training_operator``."""
    with own_control_plane() as plane:
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

    from llm_infra.rehearsal import control_plane as cp

    absent = cp.missing_binaries(control_plane.bin_dir, ("kube-controller-manager", "kube-scheduler", "kwok"))
    if absent:
        pytest.skip(f"real control plane: {', '.join(absent)} not built in {control_plane.bin_dir}; run `make k8s`")
    cluster = KwokCluster(control_plane)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def real(kwok: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The KWOK cluster in a namespace of this test's own (``kwok.namespace``); the nodes, volumes and
    namespace the test left are removed after it."""
    kwok.begin(shared_plane.slug(request.node.originalname))
    try:
        yield kwok
    finally:
        kwok.end()


@pytest.fixture
def eks_cluster(real: Any, tmp_path: Path, eks_arn: str, aws_endpoint: str) -> tuple[Any, list[str]]:
    """The real API server as the Kubernetes API of the EKS cluster "train" in moto, and the command flags
    that reach it through a generated kubeconfig, in the test's namespace."""
    from kwok_cluster import write_kubeconfig

    kubeconfig = write_kubeconfig(real.plane, tmp_path / "kubeconfig", name=eks_arn)
    flags = ["--cluster", "train", "--kubeconfig", str(kubeconfig), "--endpoint-url", aws_endpoint]
    return real, [*flags, "--namespace", real.namespace]


@pytest.fixture
def hyperpod_cluster(
    real: Any, tmp_path: Path, eks_arn: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, list[str]]]:
    """The real API server behind the HyperPod cluster "llm-infra-hyperpod" (``stub_hyperpod_cluster``),
    and the command flags (compute=hyperpod) that reach it, in the test's namespace."""
    from kwok_cluster import write_kubeconfig

    stub = stub_hyperpod_cluster(eks_arn, monkeypatch)
    kubeconfig = write_kubeconfig(real.plane, tmp_path / "kubeconfig", name=eks_arn)
    flags = ["--cluster", "llm-infra-hyperpod", "-c", "compute=hyperpod", "--kubeconfig", str(kubeconfig)]
    with stub:
        yield real, [*flags, "--namespace", real.namespace]


@pytest.fixture
def hyperpod_operator(real: Any) -> Iterator[Any]:
    """The stand-in for AWS's closed HyperPod training operator (tests/hyperpod_operator.py), running in the
    test's namespace."""
    from hyperpod_operator import HyperPodOperatorStandIn

    with HyperPodOperatorStandIn(str(real.plane.kubeconfig), real.namespace) as operator:
        yield operator


# ---- what a failure on a control plane leaves (issue 29) ------------------------------------------
LOG_SIZES = pytest.StashKey[dict[Path, int]]()
LOGS_SECTION = "control plane logs"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[LOG_SIZES] = shared_plane.log_sizes()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """For a failed test on a control plane: keep the components' logs and its namespaces' pods, their logs and
    events (tests/shared_plane.py), and say where in the failure's report."""
    report = yield
    if report.failed and item.get_closest_marker("control_plane"):
        folder = shared_plane.keep_logs(item.nodeid, item.stash.get(LOG_SIZES, {}))
        if folder is not None:
            report.sections.append((LOGS_SECTION, f"kept in {folder}"))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Where each failure's control plane logs are (also under pytest-xdist: the reports carry it)."""
    kept = [
        f"{report.nodeid}: {content.removeprefix('kept in ')}"
        for key in ("failed", "error")
        for report in terminalreporter.stats.get(key, [])
        for title, content in getattr(report, "sections", [])
        if title == LOGS_SECTION
    ]
    if kept:
        terminalreporter.section(LOGS_SECTION + " kept")
        for line in kept:
            terminalreporter.write_line(line)


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
