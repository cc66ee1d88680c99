"""checkov, a peer's policy suite, on what we synthesize: both modes' CloudFormation templates and Kubernetes
manifests, and the pod templates inside the custom resources (PyTorchJob, HyperPodPyTorchJob, RayCluster,
RayJob), which checkov does not read, as standalone Pods. Every finding is either fixed or accepted with its
reason in tests/checkov_accepted.py; an accepted finding that no longer occurs fails too.

checkov runs from its own venv (``make checkov``: ~/.cache/llm-infra/checkov-<version>, pinned in the
Makefile) and offline (``--skip-download``). One run per mode and framework, about 5 s for the templates and
3 s for the manifests.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from checkov_accepted import ACCEPTED, MODES, NOT_PRIVILEGED, RAY_HEAD, TRAINING_WORKERS, Accepted, rendered
from cluster_model import pod_templates
from test_manifests import render

from conftest import RAY_TEST_IMAGE, hyperpod_config
from llm_infra.config import TrainingConfig
from manifest_validation import load_documents

CHECKOV_VERSION = "3.3.30"  # the Makefile's CHECKOV_VERSION
# Where `make checkov` builds it (the Makefile's CHECKOV_VENV; make test passes it as $LLM_INFRA_CHECKOV).
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-infra"
CHECKOV = Path(os.environ.get("LLM_INFRA_CHECKOV") or CACHE / f"checkov-{CHECKOV_VERSION}" / "bin" / "checkov")
# The kinds whose containers checkov's kubernetes framework reads itself (checkov 3.3.30,
# checkov/kubernetes/checks/resource/base_container_check.py L12-25); any other kind's pod templates are extracted.
CHECKOV_WORKLOAD_KINDS = frozenset(
    {
        "CronJob",
        "Pod",
        "PodTemplate",
        "Deployment",
        "DeploymentConfig",
        "DaemonSet",
        "Job",
        "ReplicaSet",
        "ReplicationController",
        "StatefulSet",
    }
)
EMBEDDED_PODS_FILE = "embedded-pods.k8s.yaml"
CONFIGS = {"eks": TrainingConfig(), "hyperpod": hyperpod_config()}


@dataclass(frozen=True)
class Finding:
    """One failed check: ``resource`` as checkov names it (``AWS::IAM::Policy.<logical id>``,
    ``<Kind>.<namespace>.<name>``), ``file`` the template or manifest it is in."""

    check: str
    resource: str
    file: str
    name: str

    def __str__(self) -> str:
        return f"{self.check} {self.resource} ({self.file}): {self.name}"


@dataclass(frozen=True)
class Run:
    """One mode's findings, both frameworks, and what the runs took."""

    findings: tuple[Finding, ...]
    seconds: dict[str, float]
    resources: dict[str, int]


# ---- running checkov ------------------------------------------------------------------------------
def checkov(framework: str, folder: Path) -> tuple[list[Finding], int]:
    """checkov's ``framework`` on every file in ``folder``: the failed checks and the resource count.

    No soft fail and no skipped check: checkov exits 1 when a check fails, 0 when none does; anything else,
    a parsing error or a folder it read no resource from is an error here.
    """
    if not CHECKOV.is_file():
        pytest.fail(f"checkov is not installed at {CHECKOV}: run `make checkov`")
    command = [str(CHECKOV), "--framework", framework, "--skip-download", "--quiet", "-o", "json", "-d", str(folder)]
    # Its own working folder (no .checkov.yaml of anyone's) and no platform key from the environment.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("BC_", "CKV_", "PRISMA_"))}
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), f"checkov exited {done.returncode}:\n{done.stderr[-4000:]}"
    report = json.loads(done.stdout)
    assert isinstance(report, dict) and report.get("check_type") == framework, done.stdout[:2000]
    summary = report["summary"]
    assert summary["checkov_version"] == CHECKOV_VERSION, summary
    assert summary["parsing_errors"] == 0, report["results"].get("parsing_errors")
    assert summary["resource_count"] > 0, f"checkov read no {framework} resource in {folder}"
    findings = [
        Finding(f["check_id"], f["resource"], Path(f["file_path"]).name, f["check_name"])
        for f in report["results"]["failed_checks"]
    ]
    assert summary["failed"] == len(findings)
    return findings, summary["resource_count"]


def embedded_pods(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates inside an object of a kind checkov does not read, each as a standalone Pod named
    ``<kind>.<name>.<path to the template>`` (lowercase; a list item by its ``name`` or ``groupName``)."""
    if document.get("kind") in CHECKOV_WORKLOAD_KINDS:
        return []
    metadata = document.get("metadata") or {}
    prefix = [document["kind"], metadata.get("name", "")]
    pods: list[dict[str, Any]] = []

    def walk(node: Any, path: list[str]) -> None:
        if isinstance(node, list):
            for index, item in enumerate(node):
                label = item.get("name") or item.get("groupName") if isinstance(item, dict) else None
                walk(item, [*path, str(label or index)])
        elif isinstance(node, dict):
            template = node.get("template")
            if isinstance(template, dict) and "containers" in (template.get("spec") or {}):
                template_metadata = template.get("metadata") or {}
                pods.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": ".".join([*prefix, *path]).lower(),
                            **({"namespace": metadata["namespace"]} if "namespace" in metadata else {}),
                            **{k: v for k, v in template_metadata.items() if k in ("labels", "annotations")},
                        },
                        "spec": template["spec"],
                    }
                )
            for key, value in node.items():
                if key != "template":
                    walk(value, [*path, key])

    walk(document.get("spec"), [])
    return pods


def write_templates(folder: Path, templates: dict[str, dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for stack, template in templates.items():
        (folder / f"{stack}.template.json").write_text(json.dumps(template, indent=1))
    return folder


def write_manifests(folder: Path, dist: Path) -> Path:
    """``dist``'s manifests, and the pod templates inside them in one more file."""
    folder.mkdir(parents=True, exist_ok=True)
    pods = []
    for path in sorted(dist.glob("*.k8s.yaml")):
        shutil.copy(path, folder / path.name)
        pods += [pod for document in load_documents(path) for pod in embedded_pods(document)]
    (folder / EMBEDDED_PODS_FILE).write_text(yaml.safe_dump_all(pods, sort_keys=False))
    return folder


def lint(templates: Path, manifests: Path) -> Run:
    """checkov on one mode: the templates (cloudformation), the manifests and their pods (kubernetes)."""
    findings: list[Finding] = []
    seconds, resources = {}, {}
    for framework, folder in (("cloudformation", templates), ("kubernetes", manifests)):
        start = time.monotonic()
        found, resources[framework] = checkov(framework, folder)
        seconds[framework] = time.monotonic() - start
        findings += found
    return Run(tuple(findings), seconds, resources)


def matches(entry: Accepted, pattern: str, finding: Finding) -> bool:
    return entry.check == finding.check and fnmatch.fnmatchcase(finding.resource, pattern)


def accepted_for(finding: Finding, mode: str) -> Accepted | None:
    for entry in ACCEPTED:
        if mode in entry.modes and any(matches(entry, pattern, finding) for pattern in entry.resources):
            return entry
    return None


def unaccepted(run: Run, mode: str) -> list[Finding]:
    return sorted((f for f in run.findings if accepted_for(f, mode) is None), key=str)


def stale(accepted: Iterable[Accepted], runs: dict[str, Run]) -> list[str]:
    """Each pattern of an entry that matches no finding in one of the entry's modes that renders it."""
    return [
        f"{entry.check} {pattern} ({mode})"
        for entry in accepted
        for pattern in entry.resources
        for mode in entry.modes
        if rendered(pattern, mode) and not any(matches(entry, pattern, finding) for finding in runs[mode].findings)
    ]


# ---- the runs -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def inputs(synth, tmp_path_factory) -> dict[str, tuple[dict[str, dict[str, Any]], Path]]:
    """Each mode's templates (the session's synthesis) and manifests (``make synth``'s, with a Ray image)."""
    out = {}
    for mode, config in CONFIGS.items():
        folder = tmp_path_factory.mktemp(f"manifests-{mode}")
        render(folder, config.with_(ray_image=RAY_TEST_IMAGE))
        out[mode] = (synth(config).templates, folder / "dist")
    return out


@pytest.fixture(scope="module")
def runs(inputs, tmp_path_factory) -> dict[str, Run]:
    out = {}
    for mode, (templates, dist) in inputs.items():
        folder = tmp_path_factory.mktemp(f"checkov-{mode}")
        out[mode] = lint(write_templates(folder / "cfn", templates), write_manifests(folder / "k8s", dist))
        run = out[mode]
        print(
            f"checkov {mode}: "
            + ", ".join(f"{k} {run.resources[k]} resources {run.seconds[k]:.1f} s" for k in run.seconds)
        )
    return out


@pytest.mark.parametrize("mode", MODES)
def test_checkov_reports_nothing_that_is_not_accepted(runs: dict[str, Run], mode: str) -> None:
    new = unaccepted(runs[mode], mode)
    assert not new, f"checkov findings ({mode}) neither fixed nor in tests/checkov_accepted.py:\n" + "\n".join(
        map(str, new)
    )


def test_no_accepted_finding_is_stale(runs: dict[str, Run]) -> None:
    gone = stale(ACCEPTED, runs)
    assert not gone, "accepted in tests/checkov_accepted.py, but checkov no longer reports:\n" + "\n".join(gone)
    # And an entry whose finding is gone (a privileged training worker) would be reported, in each of its modes.
    entry = Accepted("CKV_K8S_16", (TRAINING_WORKERS,), "A made-up acceptance of a finding that does not occur.")
    assert stale([entry], runs) == [f"CKV_K8S_16 {TRAINING_WORKERS} ({mode})" for mode in MODES]


# The pod security checks issue 28 fixed on every pod that is not privileged by design: no escalation (20), NET_RAW
# and every other capability dropped (28, 37), pod and container security contexts (29, 30), the runtime's seccomp
# profile (31), no API token where nothing calls the API (38: all but the Ray head, whose autoscaler does).
POD_SECURITY_CHECKS = ("CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_29", "CKV_K8S_30", "CKV_K8S_31", "CKV_K8S_37", "CKV_K8S_38")


@pytest.mark.parametrize("mode", MODES)
def test_the_pods_not_privileged_by_design_pass_the_pod_security_checks(runs: dict[str, Run], mode: str) -> None:
    patterns = [pattern for pattern in NOT_PRIVILEGED if rendered(pattern, mode)]
    failed = sorted(
        str(f)
        for f in runs[mode].findings
        if f.check in POD_SECURITY_CHECKS
        and any(fnmatch.fnmatchcase(f.resource, pattern) for pattern in patterns)
        and (f.check, fnmatch.fnmatchcase(f.resource, RAY_HEAD)) != ("CKV_K8S_38", True)
    )
    assert not failed, "\n".join(failed)
    # Each pattern names pods checkov read (a pattern that matched nothing would pass the check above vacuously).
    linted = {f.resource for f in runs[mode].findings}
    assert all(any(fnmatch.fnmatchcase(r, pattern) for r in linted) for pattern in patterns)


@pytest.mark.parametrize("mode", MODES)
def test_every_pod_template_is_linted(inputs, runs: dict[str, Run], mode: str) -> None:
    """Each custom resource's pod templates (as cluster_model.pod_templates counts them) become Pods that
    checkov reads: each is in its findings, since no pod of ours is free of accepted ones."""
    _, dist = inputs[mode]
    documents = [d for path in sorted(dist.glob("*.k8s.yaml")) for d in load_documents(path)]
    custom = [d for d in documents if d["kind"] not in CHECKOV_WORKLOAD_KINDS and pod_templates(d)]
    # The always-on RayCluster on EKS; under HyperPod's task governance the RayJob alone.
    assert {d["kind"] for d in custom} == (
        {"PyTorchJob", "RayCluster", "RayJob"} if mode == "eks" else {"HyperPodPyTorchJob", "RayJob"}
    )
    pods = [pod for d in documents for pod in embedded_pods(d)]
    assert len(pods) == sum(len(pod_templates(d)) for d in custom)
    linted = {f.resource for f in runs[mode].findings if f.file == EMBEDDED_PODS_FILE}
    assert linted == {f"Pod.{p['metadata']['namespace']}.{p['metadata']['name']}" for p in pods}


# ---- planted faults: the suite fails on them ------------------------------------------------------
def plant_admin_statement(templates: dict[str, dict[str, Any]]) -> str:
    """``Action: "*"`` on ``"*"`` in the cluster stack's first inline policy; its checkov resource id."""
    (cluster,) = [name for name in templates if name.endswith("-cluster")]
    policies = sorted(k for k, v in templates[cluster]["Resources"].items() if v["Type"] == "AWS::IAM::Policy")
    statements = templates[cluster]["Resources"][policies[0]]["Properties"]["PolicyDocument"]["Statement"]
    statements.append({"Effect": "Allow", "Action": "*", "Resource": "*"})
    return f"AWS::IAM::Policy.{policies[0]}"


def plant_privileged_worker(dist: Path) -> str:
    """``privileged: true`` on the training job's worker containers; the extracted Pod's checkov resource id."""
    path = dist / "training-job.k8s.yaml"
    documents = load_documents(path)
    (job,) = [d for d in documents if d["kind"] in ("PyTorchJob", "HyperPodPyTorchJob")]
    if job["kind"] == "PyTorchJob":
        template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    else:
        (replicas,) = job["spec"]["replicaSpecs"]
        template = replicas["template"]
    for container in template["spec"]["containers"]:
        container["securityContext"] = {"privileged": True}
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    (pod,) = embedded_pods(job)
    return f"Pod.{pod['metadata']['namespace']}.{pod['metadata']['name']}"


@pytest.mark.parametrize("mode", MODES)
def test_planted_faults_fail_the_suite(inputs, tmp_path: Path, mode: str) -> None:
    templates, dist = copy.deepcopy(inputs[mode][0]), tmp_path / "dist"
    shutil.copytree(inputs[mode][1], dist)
    policy = plant_admin_statement(templates)
    worker = plant_privileged_worker(dist)
    run = lint(write_templates(tmp_path / "cfn", templates), write_manifests(tmp_path / "k8s", dist))
    new = {(f.check, f.resource) for f in unaccepted(run, mode)}
    # CKV_AWS_62: full "*:*" administrative privileges; CKV_AWS_109/111: permissions management and writes
    # without constraints; CKV_K8S_16: a privileged container. (CKV_AWS_63, "*" as a statement's actions, reads
    # only a policy's first statement: checkov 3.3.30, checkov/cloudformation/checks/resource/aws/
    # IAMStarActionPolicyDocument.py L52-56, check_policy returns after it.)
    planted = {("CKV_AWS_62", policy), ("CKV_AWS_109", policy), ("CKV_AWS_111", policy), ("CKV_K8S_16", worker)}
    assert planted <= new, sorted(planted - new)
