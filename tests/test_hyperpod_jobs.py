"""compute=hyperpod with the HyperPod training operator: the training, validation and recipe jobs as
HyperPodPyTorchJobs, checked against the schema derived from AWS's sources, the agent's launch contract,
and log-monitoring rules matched against what the real payload prints.

The rules are evaluated as the operator's agent does (PyPI hyperpod-elastic-agent 1.1.3,
``logagent/log_agent.py``, ``LogEvaluator.evaluate``): ``re.match`` (Python regular expressions,
anchored at the start of the line) on each line of local rank 0's stdout; a capture group is read
with ``float`` and compared with the integer ``metricThreshold``; ``metricEvaluationDataPoints``
consecutive matches beyond it make the rule SLOW; a ``stopPattern`` match retires the rule.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_model import admission_problem
from test_manifests import KUBERNETES_VERSION, OUTPUTS, by_kind, pod_spec, render

from conftest import TorchLaunch, hyperpod_config
from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.hyperpod_job import (
    AGENT_PORT,
    ELASTIC_AGENT,
    ELASTIC_AGENT_REQUIREMENTS,
    HEARTBEAT_SECONDS,
    STALLED_TOKENS_PER_S,
    hyperpodrun_command,
    train_log_rules,
)
from llm_infra.k8s_manifests.payload import WORKLOADS_DIR
from llm_infra.k8s_manifests.pod_spec import TORCHRUN_TEARDOWN_SECONDS
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY, NODE_ROLE_LABEL
from llm_infra.rehearsal.deploy_workloads import NodeSpec
from llm_infra.workloads.train import TrainConfig, parse_config
from manifest_validation import load_documents, validate_object

REPO = Path(__file__).resolve().parents[1]
WORKLOADS = REPO / "workloads"

JOBS = ("train", "validation-2-allreduce", "validation-3-training", "llama2-7b")
NANO = ["--preset=nano", "--batch-size=2", "--seq-len=32"]


@pytest.fixture(scope="module")
def hyperpod(tmp_path_factory) -> dict[str, list[dict]]:
    return render(tmp_path_factory.mktemp("hpto"), hyperpod_config())


def job(charts: dict[str, list[dict]], name: str) -> dict:
    return by_kind(charts, "HyperPodPyTorchJob", name)


def command(obj: dict) -> list[str]:
    return pod_spec(obj)["containers"][0]["command"]


def flags(argv: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in argv if a.startswith("--") and "=" in a)


# ---- the objects -----------------------------------------------------------------------------------
def test_every_gpu_job_is_a_hyperpod_pytorchjob_the_schema_accepts(hyperpod) -> None:
    kinds = {d["kind"] for docs in hyperpod.values() for d in docs}
    assert "PyTorchJob" not in kinds
    for name in JOBS:
        assert validate_object(job(hyperpod, name), KUBERNETES_VERSION) == "schema:hyperpodpytorchjob.schema.json"


@pytest.mark.parametrize(
    ("mistake", "message"),
    [
        (lambda j: j["spec"]["runPolicy"].update(jobMaxRetryCounts=3), "Additional properties are not allowed"),
        (lambda j: j["spec"]["runPolicy"]["restartPolicy"].pop("evalPeriodSeconds"), "'evalPeriodSeconds' is a"),
        (lambda j: j["spec"]["runPolicy"]["logMonitoringConfiguration"][2].update(operator="<"), "is not one of"),
        (lambda j: j["spec"]["runPolicy"]["logMonitoringConfiguration"][2].pop("operator"), "'operator' is a"),
        (lambda j: j["spec"]["runPolicy"]["logMonitoringConfiguration"][0].pop("logPattern"), "'logPattern' is a"),
        (lambda j: j["spec"].update(nprocPerNode=8), "is not of type 'string'"),
        (lambda j: j.update(apiVersion="sagemaker.amazonaws.com/v2"), "was expected"),
    ],
)
def test_the_schema_catches_mistakes(hyperpod, mistake, message: str) -> None:
    broken = copy.deepcopy(job(hyperpod, "train"))
    mistake(broken)
    with pytest.raises(AssertionError, match=message):
        validate_object(broken, KUBERNETES_VERSION)


def test_the_pod_template_is_checked_as_kubernetes_checks_a_pod(hyperpod) -> None:
    broken = copy.deepcopy(job(hyperpod, "train"))
    pod_spec(broken)["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(Exception, match="imagePullPolicy"):
        validate_object(broken, KUBERNETES_VERSION)


def test_restart_budget(hyperpod) -> None:
    values = WorkloadValues.from_config(hyperpod_config())
    policy = job(hyperpod, "train")["spec"]["runPolicy"]
    assert policy["jobMaxRetryCount"] == values.job_max_retries == 3
    assert policy["restartPolicy"] == {
        "numRestartBeforeFullJobRestart": values.max_restarts,
        "evalPeriodSeconds": values.restart_eval_period_seconds,
        "maxFullJobRestarts": values.full_job_restarts,
    }
    assert policy["cleanPodPolicy"] == "None"  # pods stay after the end: their logs hold the verdict
    # The validation gates: the all-reduce never retries; the training run resumes once from its fault.
    gate = job(hyperpod, "validation-2-allreduce")["spec"]["runPolicy"]
    assert gate["jobMaxRetryCount"] == 0 and gate["restartPolicy"]["numRestartBeforeFullJobRestart"] == 0
    assert gate["restartPolicy"]["maxFullJobRestarts"] == 0 and "logMonitoringConfiguration" not in gate
    resume = job(hyperpod, "validation-3-training")["spec"]["runPolicy"]
    assert resume["jobMaxRetryCount"] == 1 and resume["restartPolicy"]["maxFullJobRestarts"] == 0


@pytest.mark.parametrize("name", JOBS)
def test_hyperpodrun_keeps_the_shutdown_contract(hyperpod, name: str) -> None:
    obj = job(hyperpod, name)
    spec = pod_spec(obj)
    (container,) = spec["containers"]
    argv = container["command"]
    # hyperpodrun is PID 1 (exec), so the kubelet's SIGTERM reaches it and through it the workers.
    assert argv[:2] == ["/bin/sh", "-c"] and 'exec hyperpodrun "$@"' in argv[2]
    launcher = flags(argv[4 : argv.index(next(a for a in argv if a.startswith("/workloads/")))])
    budget = WorkloadValues.shutdown_budget_seconds
    # The agent's defaults (SIGKILL, 15 s) would kill a final checkpoint: SIGTERM, then the budget.
    assert launcher["shutdown-signal"] == "SIGTERM" and launcher["shutdown-timeout"] == str(budget)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(budget)
    assert spec["terminationGracePeriodSeconds"] == budget + TORCHRUN_TEARDOWN_SECONDS
    # The log monitor reads <log dir>/.../attempt_<n>/0/stdout.log, which only --tee/--redirects write.
    assert launcher["tee"] == "3" and launcher["log-dir"]
    (replicas,) = obj["spec"]["replicaSpecs"]
    assert launcher["nnodes"] == str(replicas["replicas"]) == "2"  # one number: hyperpodrun has no range
    assert launcher["nproc-per-node"] == obj["spec"]["nprocPerNode"] == "8"
    assert launcher["server-port"] == str(AGENT_PORT) and container["ports"][0]["containerPort"] == AGENT_PORT


def test_the_start_up_install_of_hyperpodrun_is_the_images_and_leaves_torch_alone(hyperpod) -> None:
    # The stock DLC image has no hyperpodrun: the container installs it as workloads/Dockerfile does.
    # The agent requires torch<2.12 and pip<25.3, so it goes in with --no-deps (pip resolving it would
    # replace a newer torch and downgrade pip), and its own requirements at the Dockerfile's pins.
    script = pod_spec(job(hyperpod, "train"))["containers"][0]["command"][2]
    assert f"pip install --quiet --no-cache-dir --no-deps '{ELASTIC_AGENT}'" in script
    assert all(f"'{requirement}'" in script for requirement in ELASTIC_AGENT_REQUIREMENTS)
    dockerfile = (WORKLOADS_DIR / "Dockerfile").read_text()
    assert f'--no-deps "{ELASTIC_AGENT}"' in dockerfile
    assert all(f'"{requirement}"' in dockerfile for requirement in ELASTIC_AGENT_REQUIREMENTS)
    assert "torch" not in " ".join(ELASTIC_AGENT_REQUIREMENTS)


def test_pods_land_only_on_schedulable_gpu_nodes(hyperpod) -> None:
    spec = pod_spec(job(hyperpod, "train"))
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": HEALTH_STATUS_KEY, "operator": "In", "values": ["Schedulable"]} in term["matchExpressions"]

    def node(**labels: str) -> NodeSpec:
        labels = {NODE_ROLE_LABEL: "gpu", **labels}
        return NodeSpec("n", "g", "ml.p5.48xlarge", labels, taints=[], capacity={}, allocatable={})

    assert admission_problem(node(**{HEALTH_STATUS_KEY: "Schedulable"}), spec) is None
    for status in ("Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"):
        assert admission_problem(node(**{HEALTH_STATUS_KEY: status}), spec) == "required node affinity"
    assert admission_problem(node(), spec) == "required node affinity"  # not yet health-checked


def test_without_the_operator_hyperpod_keeps_pytorchjobs(tmp_path: Path) -> None:
    charts = render(tmp_path, hyperpod_config(hyperpod_training_operator=False))
    assert by_kind(charts, "PyTorchJob", "train")["apiVersion"] == "kubeflow.org/v1"
    assert command(by_kind(charts, "PyTorchJob", "train"))[0] == "torchrun"


# ---- tiered checkpointing -------------------------------------------------------------------------
def test_tiered_checkpointing_flags_reach_every_training_run(tmp_path: Path) -> None:
    outputs = {"llm-infra-storage": {**OUTPUTS["llm-infra-storage"], "CheckpointBucketName": "ckpt-bucket"}}
    (tmp_path / "cdk-outputs.json").write_text(json.dumps(outputs))
    config = hyperpod_config(hyperpod_tiered_checkpointing_percent=20)
    files = write_dist(config, tmp_path / "dist", outputs_file=tmp_path / "cdk-outputs.json")
    charts = {f.name: load_documents(f) for f in files}
    for name in ("train", "validation-3-training", "llama2-7b"):
        argv = command(job(charts, name))
        payload_args = argv[argv.index("/workloads/train.py") + 1 :]
        assert "--tiered-checkpointing" in payload_args
        assert f"--tiered-s3-uri=s3://ckpt-bucket/tiered/{name}" in payload_args
        parsed = parse_config(payload_args)  # the payload's own parser and checks accept them
        assert parsed.tiered_checkpointing and parsed.tiered_s3_every == WorkloadValues.tiered_s3_every
    assert "--tiered-checkpointing" not in command(job(charts, "validation-2-allreduce"))


def test_no_tiered_flags_without_the_memory_tier_or_the_bucket(tmp_path: Path, hyperpod) -> None:
    assert not any(a.startswith("--tiered") for a in command(job(hyperpod, "train")))  # no tier configured
    without_bucket = render(tmp_path, hyperpod_config(hyperpod_tiered_checkpointing_percent=20))
    assert not any(a.startswith("--tiered") for a in command(job(without_bucket, "train")))
    values = WorkloadValues.from_config(TrainingConfig())
    with pytest.raises(ValueError, match="tiered_checkpoint_s3_uri: needs compute=hyperpod"):
        WorkloadValues(**{**values.__dict__, "tiered_checkpoint_s3_uri": "s3://b/tiered"})


def test_bad_values_are_clear_errors() -> None:
    values = WorkloadValues.from_config(hyperpod_config())
    for key in ("restart_eval_period_seconds", "hang_timeout_seconds", "stall_minutes", "tiered_s3_every"):
        with pytest.raises(ValueError, match=f"{key}: 0 must be >= 1"):
            WorkloadValues(**{**values.__dict__, key: 0})
    with pytest.raises(ValueError, match="full_job_restarts: -1 must be >= 0"):
        WorkloadValues(**{**values.__dict__, "full_job_restarts": -1})


# ---- the log rules against the real payload ---------------------------------------------------------
class Rule:
    """One logMonitoringConfiguration rule, evaluated line by line as the agent's LogEvaluator does
    (time-based HANGING aside: that needs no line)."""

    OPERATORS = {"gt": float.__gt__, "lt": float.__lt__, "eq": float.__eq__, "gteq": float.__ge__, "lteq": float.__le__}

    def __init__(self, rule: dict[str, Any]) -> None:
        self.rule = rule
        self.pattern = re.compile(rule["logPattern"])
        self.stop = re.compile(rule["stopPattern"]) if "stopPattern" in rule else None
        self.active, self.slow_count, self.matched = True, 0, []

    def feed(self, line: str) -> str:
        """HEALTHY, SLOW or WAITING (nothing matched yet) after ``line``."""
        if not self.active:
            return "HEALTHY"
        match = self.pattern.match(line)
        if match:
            self.matched.append(line)
        if self.stop and self.stop.match(line):
            self.active = False
            return "HEALTHY"
        if match and match.groups() and "operator" in self.rule:
            value = float(match.group(1))
            beyond = self.OPERATORS[self.rule["operator"]](value, float(int(self.rule["metricThreshold"])))
            self.slow_count = min(self.slow_count + 1, self.rule.get("metricEvaluationDataPoints", 1)) if beyond else 0
            if self.slow_count >= self.rule.get("metricEvaluationDataPoints", 1):
                return "SLOW"
        return "HEALTHY" if self.matched else "WAITING"


def start_payload(torch_launch: TorchLaunch, args: list[str]) -> subprocess.Popen[str]:
    """train.py on 2 CPU ranks under torchrun (gloo), stdout as rank 0 writes it."""
    return torch_launch.popen("train.py", [*NANO, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def rules() -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in train_log_rules(WorkloadValues.from_config(hyperpod_config()))}


def test_the_rules_match_what_the_payload_prints(torch_launch, tmp_path: Path) -> None:
    # tiny's steps (~0.1 s), so that heartbeats come between them (nano's 6 steps end within one interval)
    args = ["--preset=tiny", "--steps=6", "--throughput-interval-s=0.5", f"--checkpoint-dir={tmp_path}"]
    process = start_payload(torch_launch, args)
    stdout, _ = process.communicate(timeout=180)
    assert process.returncode == 0, stdout[-2000:]
    lines = stdout.splitlines(keepends=True)  # the agent reads lines with their newline
    records = [json.loads(line) for line in lines if line.startswith("{")]
    evaluated = {name: Rule(rule) for name, rule in rules().items()}
    states = {name: [rule.feed(line) for line in lines] for name, rule in evaluated.items()}

    start, hang, stall = evaluated["JobStart"], evaluated["JobHang"], evaluated["ThroughputStalled"]
    assert [json.loads(m)["event"] for m in start.matched] == ["start"]
    steps = [json.loads(m) for m in hang.matched]
    assert [s["step"] for s in steps] == [r["step"] for r in records if r["event"] == "step"] == list(range(1, 7))
    heartbeats = [r for r in records if r["event"] == "throughput"]
    assert heartbeats, "the run printed no throughput heartbeat"
    assert [json.loads(m) for m in stall.matched] == heartbeats
    captured = [float(Rule(rules()["ThroughputStalled"]).pattern.match(m).group(1)) for m in stall.matched]
    assert captured == [h["tokens_per_s"] for h in heartbeats]
    # The summary line retires the step and heartbeat rules (the run's last steps are no hang).
    assert not hang.active and not stall.active and states["JobHang"][-1] == "HEALTHY"
    assert records[-1]["event"] == "summary"


def workers(launcher: int) -> dict[int, int]:
    """Local rank -> pid of the launcher's worker processes (torchrun starts each in its own session)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (ValueError, OSError, IndexError):
            continue
        ranks = [e.removeprefix(b"LOCAL_RANK=") for e in environ if e.startswith(b"LOCAL_RANK=")]
        if parent == launcher and ranks:
            found[int(ranks[0])] = int(entry.name)
    return found


def test_a_stuck_training_loop_turns_the_stall_rule_slow(torch_launch) -> None:
    # Rank 1 frozen: rank 0 waits in its all-reduce, no step line comes, the heartbeat goes on with 0 tokens/s.
    # Heartbeats every 2 s, SLOW after 3 of them without a step (the rule as rendered, on a shorter clock).
    process = start_payload(torch_launch, ["--steps=400", "--throughput-interval-s=2", "--pg-timeout-seconds=120"])
    assert process.stdout is not None
    stall = dict(rules()["ThroughputStalled"], metricEvaluationDataPoints=3)
    rule, states, stopped_at = Rule(stall), [], None
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and "SLOW" not in states:
            line = process.stdout.readline()
            assert line, "the payload ended early"
            if stopped_at is None and line.startswith('{"event": "step", "step": 3,'):
                os.kill(workers(process.pid)[1], signal.SIGSTOP)
                stopped_at = len(states)
            states.append(rule.feed(line))
    finally:
        for pid in [*workers(process.pid).values(), process.pid]:
            os.kill(pid, signal.SIGKILL)
        process.communicate(timeout=30)
    assert stopped_at is not None and "SLOW" in states
    assert "SLOW" not in states[:stopped_at]  # while the loop ran, never
    assert [json.loads(m)["tokens_per_s"] for m in rule.matched[-3:]] == [0.0, 0.0, 0.0]


def test_the_stall_rule_counts_heartbeats_of_the_payloads_interval() -> None:
    values = WorkloadValues.from_config(hyperpod_config())
    stall = rules()["ThroughputStalled"]
    assert TrainConfig.throughput_interval_s == HEARTBEAT_SECONDS  # what train.py uses unless told
    assert stall["metricEvaluationDataPoints"] * HEARTBEAT_SECONDS == values.stall_minutes * 60
    assert stall["operator"] == "lt" and stall["metricThreshold"] == STALLED_TOKENS_PER_S
    hang = rules()["JobHang"]
    assert hang["expectedRecurringFrequencyInSeconds"] == values.hang_timeout_seconds > values.pg_timeout_seconds


def test_the_launcher_runs_the_script_with_its_arguments() -> None:
    values = WorkloadValues.from_config(hyperpod_config())
    argv = hyperpodrun_command(values, "train.py", ["--steps=5"], nodes=3)
    script_at = argv.index("/workloads/train.py")
    assert argv[script_at + 1 :] == ["--steps=5"] and "--nnodes=3" in argv[:script_at]
