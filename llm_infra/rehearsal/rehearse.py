"""``llm-infra rehearse``: the Kubernetes half of a deploy, run on a real control plane on this machine
before paying for GPUs.

It reads what ``make synth`` wrote (the templates in ``cdk.out/``, the manifests in
``k8s_manifests/dist/``), starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK and
the operators that are built (:mod:`llm_infra.rehearsal.control_plane`), creates one KWOK node per node the
templates would create (:func:`llm_infra.rehearsal.deploy_workloads.template_nodes`), applies the CRDs, then:

1. deploy: the EKS add-ons' and Helm releases' workloads as :mod:`llm_infra.rehearsal.upstream_charts` models
   them (their pods' placement and requests, not the real charts), the templates' ``KubernetesManifest``
   objects and the objects of ``dist/`` that are not jobs. GPUs and EFA devices are then advertised on
   the nodes where the device plugins' pods run, as the plugins would.
2. each job of ``dist/`` on its own, in file order, deleted before the next (they want the same GPUs);
3. the ``--apply`` files, each on top of the deployed cluster.

The real scheduler places the pods and KWOK marks them Running (a Job's pods Succeeded). Each pod is
reported with its node and phase, a Pending one with the scheduler's reason. When the app installs Kueue (a
ClusterQueue among what it applies), or HyperPod's task governance (AWS's Kueue, closed: the real Kueue stands
in for it with the queues of the templates' compute allocation, :mod:`llm_infra.rehearsal.task_governance`),
the real Kueue runs too: each job it manages is reported admitted or not, with Kueue's reason (its Workload's
conditions). Objects no controller here
runs (HyperPodPyTorchJob: its operator is closed source) are applied, so validated by the API server,
and listed apart, never as passed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llm_infra.config import TrainingConfig
from llm_infra.input_files import BadInput, read_text
from llm_infra.ops.job_state import job_workload, kueue_admission
from llm_infra.ops.kube import KubeError
from llm_infra.queueing import KUEUE_API_VERSION, UNMANAGED_NAMESPACES
from llm_infra.rehearsal import crds, existing_cluster, task_governance
from llm_infra.rehearsal.control_plane import (
    OPTIONAL,
    REQUIRED,
    ControlPlane,
    ControlPlaneError,
    LocalKube,
    condition_tainted,
    object_ref,
    operator_version_note,
)
from llm_infra.rehearsal.deploy_workloads import (
    EFA,
    GPU,
    HUGEPAGES,
    NodeSpec,
    Release,
    Templates,
    applied_objects,
    hyperpod_hugepages,
    releases,
    template_nodes,
)
from llm_infra.rehearsal.upstream_charts import NoModel, PodTemplate

FIELD_MANAGER = "llm-infra-rehearse"
TASK_GOVERNANCE_MANAGER = "hyperpod-task-governance-stand-in"
TASK_GOVERNANCE_ORIGIN = "HyperPod task governance (the stand-in's queues for cdk.out's compute allocation)"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NAME_LABEL = "app.kubernetes.io/name"
MODELLED_ANNOTATION = "llm-infra.aws/modelled-from"
MODELLED_IMAGE = "modelled.invalid/{name}:pinned-chart"  # never pulled: KWOK runs no container
DEFAULT_NODES_PER_GROUP = 4
DEPLOY_STEP = "deploy"
SETTLED_FOR = 1.0  # seconds without a change before a step counts as settled
PENDING_SETTLED_FOR = 3.0  # the same while a pod is Pending (the scheduler's retry backoff: 1 s, 2 s, 4 s ...)
POLL = 0.5
DONE_PHASES = ("Running", "Succeeded")
# Jobs that users run after the deploy: rehearsed one at a time.
JOB_KINDS = {
    ("batch", "Job"),
    ("kubeflow.org", "PyTorchJob"),
    ("kubeflow.org", "MPIJob"),
    ("ray.io", "RayJob"),
    ("sagemaker.amazonaws.com", "HyperPodPyTorchJob"),
}
# Custom kinds and the control-plane component that runs their controller, when it is built.
KUEUE_GROUP = "kueue.x-k8s.io"
OPERATOR_KINDS = {
    **{
        (KUEUE_GROUP, kind): "kueue"
        for kind in ("ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort", "WorkloadPriorityClass")
    },
    ("kubeflow.org", "PyTorchJob"): "training-operator",
    ("ray.io", "RayCluster"): "kuberay-operator",
    ("ray.io", "RayJob"): "kuberay-operator",
    ("ray.io", "RayService"): "kuberay-operator",
}
NO_PUBLIC_CONTROLLER = {
    ("sagemaker.amazonaws.com", "HyperPodPyTorchJob"): "the HyperPod training operator is closed source",
}
STATUSLESS_KINDS = {"ResourceFlavor", "WorkloadPriorityClass"}  # Kueue reads them but writes no status
# The jobs Kueue manages here (its integrations, queueing.KUEUE_INTEGRATIONS), and where it keeps its decision.
KUEUE_JOB_KINDS = {("batch", "Job"), ("kubeflow.org", "PyTorchJob"), ("ray.io", "RayJob")}
WORKLOAD = (KUEUE_API_VERSION, "Workload")
DEVICE_PLUGINS = {"nvidia-device-plugin": GPU, "aws-efa-k8s-device-plugin": EFA}
# Services' endpoints name fake pod IPs, and race with the deletions between steps: not rehearsed. Nor
# are the warnings about a job deleted after its step (its operator sees its pods go first).
IGNORED_EVENT_SOURCES = {"endpoint-controller", "endpointslice-controller"}
# The kinds a rehearsal reads (apiVersion, kind).
PODS, NODES, EVENTS = ("v1", "Pod"), ("v1", "Node"), ("v1", "Event")
WORKLOADS = (("apps/v1", "Deployment"), ("apps/v1", "DaemonSet"), ("batch/v1", "Job"), ("v1", "PersistentVolumeClaim"))
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: the CRDs are megabytes
SIMULATION = ("kube-controller-manager", "kube-scheduler", "kwok")  # what a rehearsal needs beyond the server
REQUIRED_COMPONENTS = (*REQUIRED, *SIMULATION)


# ---- what to apply --------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Applied:
    """An object to apply, where it comes from, and who applies it (equal only to itself)."""

    obj: dict[str, Any]
    origin: str
    # The server-side apply's field manager: another one's fields stay when the same object is applied again
    # (the team namespace: task governance's labels, then the app's Namespace).
    field_manager: str = FIELD_MANAGER

    @property
    def ref(self) -> str:
        return object_ref(self.obj)

    @property
    def group_kind(self) -> tuple[str, str]:
        return str(self.obj.get("apiVersion", "")).rpartition("/")[0], str(self.obj.get("kind"))


@dataclass(frozen=True)
class Step:
    """Objects applied together and waited on; ``remove_after``: deleted before the next step."""

    name: str
    objects: tuple[Applied, ...]
    remove_after: bool = False


@dataclass
class Plan:
    """What a rehearsal creates, read from the synthesized app and the user's files."""

    nodes: list[NodeSpec]
    crds: list[dict[str, Any]]
    steps: list[Step]
    unmodelled: list[Release] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    modelled: list[str] = field(default_factory=list)  # the releases whose pods are modelled

    @property
    def queues(self) -> bool:
        """Whether the app installs Kueue's queues (a ClusterQueue among what it applies)."""
        return any(a.group_kind == (KUEUE_GROUP, "ClusterQueue") for step in self.steps for a in step.objects)


def read_templates(cdk_out: Path) -> Templates:
    """The stack templates of the cloud assembly in ``cdk_out`` (its manifest.json names them)."""
    manifest = cdk_out / "manifest.json"
    if not manifest.is_file():
        raise BadInput(f"--cdk-out: {cdk_out} has no manifest.json: run `make synth` first (or pass --cdk-out)")
    artifacts = json.loads(manifest.read_text()).get("artifacts", {})
    templates = {
        name: json.loads((cdk_out / artifact["properties"]["templateFile"]).read_text())
        for name, artifact in artifacts.items()
        if artifact.get("type") == "aws:cloudformation:stack"
    }
    if not templates:
        raise BadInput(f"--cdk-out: {cdk_out} holds no stack: run `make synth` first")
    return Templates(templates)


def _check_synthesized_for(config: TrainingConfig, templates: Templates, cdk_out: Path) -> None:
    hyperpod = any(templates.resources("AWS::SageMaker::Cluster"))
    synthesized = "hyperpod" if hyperpod else "eks"
    again = "synthesize with the same config and -c flags (make synth, or npx cdk synth -c KEY=VALUE ...)"
    if synthesized != config.compute:
        raise BadInput(f"{cdk_out} holds compute={synthesized} templates, the config says {config.compute}: {again}")
    if not any(stack.startswith(f"{config.project_name}-") for stack in templates.templates):
        stacks = ", ".join(sorted(templates.templates))
        raise BadInput(f"{cdk_out} holds no stack of project {config.project_name} ({stacks}): {again}")


def read_objects(path: Path, flag: str) -> list[dict[str, Any]]:
    """The Kubernetes objects of a YAML file (``---``-separated; empty documents skipped)."""
    advice = "pass a YAML file of Kubernetes objects, as kubectl apply -f takes"
    text = read_text(path, flag=flag, advice=advice)
    try:
        documents = list(yaml.load_all(text, Loader=YAML_LOADER))
    except yaml.YAMLError as err:
        raise BadInput(f"{flag} {path}: not YAML ({' '.join(str(err).split())}); {advice}") from None
    objects = [doc for doc in documents if doc is not None]
    for doc in objects:
        if not isinstance(doc, dict) or not {"apiVersion", "kind", "metadata"} <= doc.keys():
            raise BadInput(f"{flag} {path}: every document must be a Kubernetes object (apiVersion, kind, metadata)")
    return objects


def _modelled_workload(namespace: str, pod: PodTemplate, source: str) -> dict[str, Any]:
    """A Deployment (or DaemonSet) whose pods are the modelled pod, with a placeholder image."""
    labels = {NAME_LABEL: pod.name}
    spec = json.loads(json.dumps(pod.spec))
    for container in spec["containers"]:
        container.setdefault("image", MODELLED_IMAGE.format(name=pod.name))
    workload: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": {**pod.labels, **labels}}, "spec": spec},
    }
    if not pod.daemon:
        workload["replicas"] = pod.replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet" if pod.daemon else "Deployment",
        "metadata": {
            "name": pod.name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {MODELLED_ANNOTATION: source},
        },
        "spec": workload,
    }


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _capped(nodes: list[NodeSpec], per_group: int | None) -> tuple[list[NodeSpec], list[str]]:
    """At most ``per_group`` nodes of each group (None: DEFAULT_NODES_PER_GROUP; 0: no cap)."""
    cap = DEFAULT_NODES_PER_GROUP if per_group is None else per_group
    kept: list[NodeSpec] = []
    notes = []
    groups: dict[str, list[NodeSpec]] = {}
    for node in nodes:
        groups.setdefault(node.group, []).append(node)
    for group, members in groups.items():
        if cap and len(members) > cap:
            notes.append(
                f"node group {group}: {len(members)} nodes in the template, {cap} rehearsed (--nodes-per-group "
                "N, 0 for all): a job sized for the whole group stays Pending here"
            )
            members = members[:cap]
        kept += members
    return kept, notes


def plan(
    config: TrainingConfig,
    cdk_out: Path,
    manifests: Path,
    apply_files: Sequence[Path] = (),
    *,
    nodes_per_group: int | None = None,
    crds_dir: Path | None = None,
    existing_nodes: Path | None = None,
    app_jobs: bool = True,
) -> Plan:
    """Read everything a rehearsal needs; bad input raises BadInput before anything starts. On an existing
    cluster, ``existing_nodes`` adds its own nodes (:mod:`llm_infra.rehearsal.existing_cluster`). Without
    ``app_jobs`` the manifests' jobs are not run (their other objects are deployed), only ``apply_files``."""
    if existing_nodes is not None and not config.existing_cluster:
        raise BadInput(
            f"{existing_cluster.FLAG}: only for an app on an existing cluster (existing_cluster_name); "
            "this app creates its cluster, whose nodes the templates give"
        )
    theirs = existing_cluster.read_existing_nodes(existing_nodes) if existing_nodes is not None else []
    templates = read_templates(cdk_out)
    _check_synthesized_for(config, templates, cdk_out)
    if not manifests.is_dir():
        raise BadInput(f"--manifests: {manifests} is not a folder: run `make synth` first (or pass --manifests)")
    user = [(path, read_objects(path, "--apply")) for path in apply_files]
    directory = crds_dir or crds.crds_dir()
    absent = crds.missing(directory)
    if absent:
        raise BadInput(
            f"the pinned CRDs ({', '.join(absent)}) are not in {directory}: run `make crds` or set "
            f"{crds.CRDS_DIR_VARIABLE}"
        )
    pinned = [
        doc for name in sorted(crds.CRD_SOURCES) for doc in yaml.load_all(crds.read_crd(name, directory), YAML_LOADER)
    ]
    try:
        hugepages = hyperpod_hugepages(templates, cdk_out)
        cluster_sg = [config.existing_cluster_security_group_id] if config.existing_cluster_security_group_id else []
        templated = template_nodes(
            templates, hyperpod_hugepages_mib=hugepages, existing_cluster_security_groups=cluster_sg
        )
        nodes, notes = _capped(templated, nodes_per_group)
    except (ValueError, OSError) as err:
        raise BadInput(f"{cdk_out}: cannot derive the nodes: {err}") from None
    gpu_nodes = sum(1 for node in templated if node.gpus)
    # -c gpu_nodes=256 on a 2-node cdk.out; templates without GPU nodes (a bare stack) are rehearsed as they are.
    if gpu_nodes and gpu_nodes != config.gpu_nodes and not config.existing_cluster:
        raise BadInput(
            f"{cdk_out} creates {gpu_nodes} GPU nodes, the config says gpu_nodes={config.gpu_nodes}: synthesize with "
            "the same config and -c flags (make synth, or npx cdk synth -c KEY=VALUE ...)"
        )
    devices = existing_cluster.owners_devices(config)
    nodes = [existing_cluster.with_owners_devices(node, devices) for node in nodes] + theirs
    notes += existing_cluster.notes(config, theirs, existing_nodes)

    deploy: list[Applied] = []
    installed = releases(templates)
    modelled = [r for r in installed if r.unmodelled is None]
    for namespace in sorted({ns for r in modelled for ns, _ in r.pods}):
        deploy.append(Applied(_namespace(namespace), "the namespaces of the modelled releases"))
    for release in modelled:
        source = f"{release.source} (modelled from the pinned chart)"
        deploy += [Applied(_modelled_workload(ns, pod, source), source) for ns, pod in release.pods]
    deploy += [Applied(obj, f"cdk.out {stack} {logical_id}") for stack, logical_id, obj in applied_objects(templates)]
    try:
        governance = task_governance.stand_in_objects(templates)
    except NoModel as err:
        raise BadInput(f"{cdk_out}: no stand-in for HyperPod task governance's queues: {err}") from None
    if governance:
        deploy += [Applied(obj, TASK_GOVERNANCE_ORIGIN, TASK_GOVERNANCE_MANAGER) for obj in governance]
        notes.append(
            "HyperPod task governance: AWS's Kueue is closed; the real Kueue stands in for it, with the queues its "
            "compute allocation makes (llm_infra/rehearsal/task_governance.py says what is AWS's and what assumed)"
        )
    jobs: list[Step] = []
    for path in sorted(manifests.glob("*.yaml")):
        for obj in read_objects(path, "--manifests"):
            applied = Applied(obj, f"{manifests.name}/{path.name}")
            if applied.group_kind in JOB_KINDS:
                jobs.append(Step(f"{path.name}: {applied.ref}", (applied,), remove_after=True))
            else:
                deploy.append(applied)
    deploy.sort(key=lambda a: a.obj["kind"] != "Namespace")  # stable: namespaces first
    if not app_jobs and jobs:
        notes.append(f"{manifests.name}/: its objects deployed, its {len(jobs)} jobs not run, as asked: {_names(jobs)}")
        jobs = []
    steps = [Step(DEPLOY_STEP, tuple(deploy)), *jobs]
    steps += [Step(f"--apply {path}", tuple(Applied(obj, str(path)) for obj in objects)) for path, objects in user]
    unmodelled = [r for r in installed if r.unmodelled is not None]
    definitions = [doc for doc in pinned if doc] + [crds.hyperpod_job_crd()]
    return Plan(nodes, definitions, steps, unmodelled, notes, [r.source for r in modelled])


def _names(steps: list[Step]) -> str:
    return ", ".join(a.ref for step in steps for a in step.objects)


# ---- results --------------------------------------------------------------------------------
@dataclass(frozen=True)
class PodResult:
    step: str
    namespace: str
    name: str
    node: str
    phase: str
    reason: str

    @property
    def ok(self) -> bool:
        return self.phase in DONE_PHASES


@dataclass(frozen=True)
class JobResult:
    """A job Kueue manages: whether its Workload was admitted, and Kueue's reason when not."""

    namespace: str
    name: str
    kind: str
    admitted: bool
    reason: str


@dataclass(frozen=True)
class Finding:
    """An object that did not rehearse: no controller here, refused, or a controller's warning."""

    step: str
    kind: str
    namespace: str
    name: str
    origin: str  # the file or template it came from; for a warning, the component that reported it
    reason: str


@dataclass
class Report:
    control_plane: dict[str, Any]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[PodResult] = field(default_factory=list)
    jobs: list[JobResult] = field(default_factory=list)
    unhandled: list[Finding] = field(default_factory=list)
    refused: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    modelled: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed_creates(self) -> list[Finding]:
        return [w for w in self.warnings if w.reason.startswith("FailedCreate")]

    @property
    def passed(self) -> bool:
        """Every pod Running or Succeeded, every job Kueue manages admitted, nothing refused, no controller
        failed to create a pod."""
        return (
            all(p.ok for p in self.pods)
            and all(j.admitted for j in self.jobs)
            and not self.refused
            and not self.failed_creates
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "pods": [asdict(p) for p in self.pods],
            "jobs": [asdict(j) for j in self.jobs],
            "nodes": self.nodes,
            "unhandled": [asdict(f) for f in self.unhandled],
            "refused": [asdict(f) for f in self.refused],
            "warnings": [asdict(f) for f in self.warnings],
            "notes": self.notes,
            "modelled_from_pinned_charts": self.modelled,
            "control_plane": self.control_plane,
            "seconds": round(self.seconds, 1),
        }


# ---- the cluster ----------------------------------------------------------------------------
def _quantities(resources: dict[str, int]) -> dict[str, str]:
    units = {"cpu": "m", "memory": "Mi", HUGEPAGES: "Mi"}
    return {name: f"{value}{units.get(name, '')}" for name, value in resources.items()}


def node_object(node: NodeSpec) -> dict[str, Any]:
    """The Node as KWOK manages it: the template's labels and taints, capacity and allocatable (GPUs and
    EFA devices come later, from the device plugins)."""
    name = node.name.lower()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake"},
            "labels": {**node.labels, "kubernetes.io/hostname": name},
        },
        "spec": {"taints": node.taints},
        "status": {"capacity": _quantities(node.capacity), "allocatable": _quantities(node.allocatable)},
    }


def _is_builtin(group: str) -> bool:
    return "." not in group or group.endswith(".k8s.io")


class Rehearsal:
    """One rehearsal of a :class:`Plan` on a started :class:`ControlPlane`, through ``kube`` (the one
    Kubernetes client, :class:`llm_infra.ops.kube.Kube`, as :class:`LocalKube`): no kubectl."""

    def __init__(self, cp: ControlPlane, kube: LocalKube, timeout: float, say: Callable[[str], None]) -> None:
        self.cp = cp
        self.kube = kube
        self.timeout = timeout
        self.say = say
        self.started = set(cp.startup_seconds) & {*REQUIRED, *OPTIONAL}
        self.seen_events: set[str] = set()
        self.removed: set[tuple[str, str, str]] = set()  # kind, namespace, name
        self.hardware: dict[str, NodeSpec] = {}
        operators = {name: operator_version_note(cp.bin_dir, name) for name in cp.operator_versions}
        self.report = Report(
            control_plane={
                "components": [c for c in (*REQUIRED, *OPTIONAL) if c in self.started],
                "operators": {name: note for name, note in operators.items() if name in self.started},
                **self._version(),
            }
        )

    def _version(self) -> dict[str, Any]:
        return {"kubernetes": self.kube.server_version()}

    # --- the API ----------------------------------------------------------------------------------
    def _get(self, *kinds: tuple[str, str], namespace: str | None = None) -> list[dict[str, Any]]:
        """Every object of ``kinds`` (apiVersion, kind) in ``namespace``, or in every namespace."""
        return [item for api_version, kind in kinds for item in self.kube.items(api_version, kind, namespace)]

    def _apply(self, objects: Sequence[Applied], *, dry_run: bool = False) -> dict[Applied, str]:
        """Server-side apply of each object with strict field validation, in order; the refusals by object,
        each the API server's status and message (an unknown kind: that the cluster does not serve it)."""
        refused = {}
        for applied in objects:
            try:
                self.kube.apply_as(applied.obj, field_manager=applied.field_manager, dry_run=dry_run)
            except KubeError as err:
                refused[applied] = str(err).removeprefix(f"apply {applied.ref}: ")
        return refused

    # --- the steps --------------------------------------------------------------------------------
    def run(self, plan: Plan) -> Report:
        began = time.monotonic()
        self.report.notes += plan.notes
        self.report.modelled = plan.modelled
        self.report.unhandled += [
            Finding(DEPLOY_STEP, "release", "", r.source, "cdk.out", f"not modelled: {r.unmodelled}")
            for r in plan.unmodelled
        ]
        self.hardware = {node.name.lower(): node for node in plan.nodes}
        self._install_crds(plan.crds)
        self._create_nodes(plan.nodes)
        for step in plan.steps:
            self._run_step(step)
        self.report.nodes = [self._node_summary(n) for n in self._get(NODES)]
        self.report.control_plane["peak_memory_mib"] = self.cp.peak_memory_mib()
        self.report.seconds = time.monotonic() - began
        return self.report

    def _install_crds(self, definitions: list[dict[str, Any]]) -> None:
        # The deploy's CRDs win over those the control plane applied for its operators, as in the cluster.
        refused = self._apply([Applied(d, "the pinned CRDs") for d in definitions])
        if refused:
            raise ControlPlaneError("; ".join(f"{a.ref}: {message}" for a, message in refused.items()))
        self.kube.wait_established(definitions, self.timeout)
        self.say(f"{len(definitions)} CRDs established")

    def _wait_ready(self, names: set[str]) -> None:
        """Until each node in ``names`` is Ready (bounded by the timeout)."""
        deadline = time.monotonic() + self.timeout
        while True:
            waiting = names - {
                node["metadata"]["name"]
                for node in self._get(NODES)
                if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])
            }
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"not Ready after {self.timeout:.0f} s: {', '.join(sorted(waiting))}")
            time.sleep(POLL)

    def _create_nodes(self, nodes: list[NodeSpec]) -> None:
        objects = [node_object(n) for n in nodes]
        for obj in objects:
            self.kube.create(obj)
        self._wait_ready({o["metadata"]["name"] for o in objects})
        # The TaintNodesByCondition admission plugin taints every new Node not-ready; the node lifecycle
        # controller lifts it once it sees the node Ready (KWOK renews the nodes' leases, their heartbeat).
        deadline = time.monotonic() + self.timeout
        while tainted := [n["metadata"]["name"] for n in self._get(NODES) if condition_tainted(n)]:
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"still tainted not-ready after {self.timeout:.0f} s: {', '.join(tainted)}")
            time.sleep(POLL)
        self.say(f"{len(nodes)} KWOK nodes Ready")

    def _run_step(self, step: Step) -> None:
        scope = _scope(step)
        before = {p["metadata"]["uid"] for p in self._get(PODS, namespace=scope)}
        refused = self._apply(step.objects)
        applied = [a for a in step.objects if a not in refused]
        for obj, message in refused.items():
            self._finding(self.report.refused, step, obj, message)
        for obj in applied:
            self._check_unhandled(step, obj)
        operated = sorted(
            {(str(a.obj["apiVersion"]), str(a.obj["kind"])) for a in applied if self._operated(*a.group_kind)}
        )
        pods = self._settle(step, before, operated, scope)
        if self._kueue_decided(self._queued(applied)):  # the admitted jobs' pods come now
            pods = self._settle(step, before, operated, scope)
        waiting = any(p["status"].get("phase") not in DONE_PHASES for p in pods)
        if step.name == DEPLOY_STEP and self._advertise_devices(pods) and waiting:
            pods = self._settle(step, before, operated, scope)
        self._record(step, pods)
        self._record_jobs(self._queued(applied))
        if step.remove_after and applied:
            self._remove(applied, pods, scope)

    def _remove(self, applied: list[Applied], pods: list[dict[str, Any]], scope: str | None) -> None:
        """Delete the objects, then their pods and Kueue's Workloads (the garbage collector may not watch
        a new custom kind yet: it rediscovers kinds every 30 s), and wait until the pods are gone (KWOK
        finalizes them) and Kueue has released the quota the jobs held (their Workloads are gone), so that
        the next job meets an empty queue."""
        queued = self._queued(applied)
        workloads = list(self._workloads(queued).values())
        for a in applied:
            meta = a.obj["metadata"]
            self.kube.delete(str(a.obj["apiVersion"]), str(a.obj["kind"]), meta["name"], meta.get("namespace"))
        self.removed |= {(str(a.obj["kind"]), *_namespaced_name(a.obj)) for a in applied}
        for pod in pods:
            self.kube.delete(*PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
        for workload in workloads:
            self.kube.delete(*WORKLOAD, workload["metadata"]["name"], workload["metadata"]["namespace"])
        self._wait_gone({p["metadata"]["uid"] for p in pods}, scope)
        deadline = time.monotonic() + self.timeout
        while queued and self._workloads(queued) and time.monotonic() < deadline:
            time.sleep(POLL)

    def _finding(self, into: list[Finding], step: Step, applied: Applied, reason: str) -> None:
        meta = applied.obj.get("metadata") or {}
        kind, namespace = str(applied.obj.get("kind")), str(meta.get("namespace", ""))
        into.append(Finding(step.name, kind, namespace, str(meta.get("name")), applied.origin, reason))

    def _check_unhandled(self, step: Step, applied: Applied) -> None:
        group, kind = applied.group_kind
        if _is_builtin(group) or self._operated(group, kind):
            return
        if (group, kind) in NO_PUBLIC_CONTROLLER:
            why = NO_PUBLIC_CONTROLLER[(group, kind)]
        elif (group, kind) in OPERATOR_KINDS:
            why = f"its controller ({OPERATOR_KINDS[(group, kind)]}) is not built (make k8s)"
        else:
            why = f"no controller for {group} {kind} runs here"
        refusals = self._apply(self._pod_templates(applied), dry_run=True)
        for template, message in refusals.items():
            self._finding(self.report.refused, step, applied, f"{template.ref}: {message}")
        self._finding(self.report.unhandled, step, applied, f"no controller here: {why}")

    @staticmethod
    def _pod_templates(applied: Applied) -> list[Applied]:
        """The pod templates of a HyperPodPyTorchJob as PodTemplates, for the API server to check."""
        meta = applied.obj["metadata"]
        return [
            Applied(
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {
                        "name": f"{meta['name']}-{replica['name']}".lower(),
                        "namespace": meta.get("namespace"),
                    },
                    "template": replica["template"],
                },
                applied.origin,
            )
            for replica in (applied.obj.get("spec") or {}).get("replicaSpecs") or []
            if isinstance(replica, dict) and "template" in replica
        ]

    def _operated(self, group: str, kind: str) -> bool:
        """Whether an operator started here runs ``kind``'s controller."""
        return OPERATOR_KINDS.get((group, kind)) in self.started

    def _settle(
        self, step: Step, before: set[str], operated: Sequence[tuple[str, str]], scope: str | None
    ) -> list[dict[str, Any]]:
        """The step's pods once every one is placed or refused by the scheduler, every controller has
        created its pods (an operator: reconciled its objects of the ``operated`` resources once), every
        pre-bound claim is bound, and nothing changed for SETTLED_FOR seconds
        (PENDING_SETTLED_FOR while a pod is Pending: the scheduler retries after a backoff); bounded by
        the timeout. Read in the step's ``scope`` (its namespace, or every namespace)."""
        deadline = time.monotonic() + self.timeout
        last: tuple[Any, ...] = ()
        since = time.monotonic()
        while True:
            reading = time.monotonic()
            items = self._get(PODS, *WORKLOADS, *operated, namespace=scope)
            took = time.monotonic() - reading
            pods = [p for p in items if p["kind"] == "Pod" and p["metadata"]["uid"] not in before]
            state = tuple(sorted((p["metadata"]["uid"], p["status"].get("phase"), _node(p)) for p in pods))
            now = time.monotonic()
            pending = any(p["status"].get("phase") == "Pending" for p in pods)
            if state != last:
                last, since = state, now
            elif (
                all(map(_placed, pods))
                and all(map(_created, items))
                and now - since >= (PENDING_SETTLED_FOR if pending else SETTLED_FOR)
            ):
                return pods
            if now > deadline:
                self.report.notes.append(f"{step.name}: still changing after --timeout {self.timeout:.0f} s")
                return pods
            time.sleep(_pause(took))

    def _advertise_devices(self, pods: list[dict[str, Any]]) -> bool:
        """Add nvidia.com/gpu and vpc.amazonaws.com/efa to each node where the plugin's pod runs, as the
        device plugins register them with the kubelet. True when a node changed."""
        devices: dict[str, dict[str, str]] = {}
        for pod in pods:
            resource = DEVICE_PLUGINS.get((pod["metadata"].get("labels") or {}).get(NAME_LABEL, ""))
            node = self.hardware.get(_node(pod))
            if resource and node and pod["status"].get("phase") == "Running":
                count = node.gpus if resource == GPU else node.efa_devices
                if count:
                    devices.setdefault(_node(pod), {})[resource] = str(count)
        for name, resources in devices.items():
            patch = {"status": {"capacity": resources, "allocatable": resources}}
            self.kube.patch_status(*NODES, name, patch)
        if devices:
            self.say(f"device plugins advertise on {len(devices)} nodes")
        return bool(devices)

    def _wait_gone(self, uids: set[str], scope: str | None) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            reading = time.monotonic()
            if not uids & {p["metadata"]["uid"] for p in self._get(PODS, namespace=scope)}:
                return
            time.sleep(_pause(time.monotonic() - reading))

    def _queued(self, applied: list[Applied]) -> list[Applied]:
        """The jobs among ``applied`` that Kueue manages here (none when it does not run)."""
        if "kueue" not in self.started:
            return []
        return [
            a
            for a in applied
            if a.group_kind in KUEUE_JOB_KINDS and _namespaced_name(a.obj)[0] not in UNMANAGED_NAMESPACES
        ]

    def _workloads(self, jobs: list[Applied]) -> dict[tuple[str, str, str], dict[str, Any]]:
        """The Workload Kueue made for each of ``jobs`` that has one, by (kind, namespace, name) of the job."""
        workloads: dict[tuple[str, str, str], dict[str, Any]] = {}
        for namespace in sorted({_namespaced_name(a.obj)[0] for a in jobs}):
            listed = self.kube.items(*WORKLOAD, namespace)
            for a in jobs:
                if _namespaced_name(a.obj)[0] == namespace and (found := job_workload(listed, a.obj)) is not None:
                    workloads[(str(a.obj["kind"]), *_namespaced_name(a.obj))] = found
        return workloads

    def _kueue_decided(self, jobs: list[Applied]) -> bool:
        """Wait (bounded by the timeout) until Kueue has decided on each of ``jobs``: its Workload has reserved
        quota, or says why not. False when there is nothing to wait for."""
        if not jobs:
            return False
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            workloads = self._workloads(jobs)
            keys = [(str(a.obj["kind"]), *_namespaced_name(a.obj)) for a in jobs]
            if all(_conditions(workloads.get(key)).get("QuotaReserved") for key in keys):
                break
            time.sleep(POLL)
        return True

    def _record_jobs(self, jobs: list[Applied]) -> None:
        """Kueue's decision on each of ``jobs``: its Workload's Admitted condition, and when not admitted the
        reason (why it was deactivated or evicted, else QuotaReserved's message)."""
        workloads = self._workloads(jobs)
        for a in jobs:
            namespace, name = _namespaced_name(a.obj)
            kind = str(a.obj["kind"])
            admission = kueue_admission(workloads.get((kind, namespace, name)))
            self.report.jobs.append(JobResult(namespace, name, kind, admission.admitted, admission.reason))

    def _record(self, step: Step, pods: list[dict[str, Any]]) -> None:
        # Only warnings are read (FailedScheduling is one): at 256 nodes the Normal events are tens of thousands.
        events = self.kube.items(*EVENTS, field_selector="type=Warning")
        scheduling: dict[str, str] = {}
        for event in sorted(events, key=_event_time):
            involved = event.get("involvedObject") or {}
            source = str((event.get("source") or {}).get("component", ""))
            if event.get("reason") == "FailedScheduling":
                scheduling[involved.get("uid", "")] = " ".join(str(event.get("message", "")).split())
            elif (
                event.get("type") == "Warning"
                and event["metadata"]["uid"] not in self.seen_events
                and source not in IGNORED_EVENT_SOURCES
                and (involved.get("kind"), *_namespaced_name({"metadata": involved})) not in self.removed
            ):
                self.report.warnings.append(
                    Finding(
                        step.name,
                        str(involved.get("kind")),
                        str(involved.get("namespace", "")),
                        str(involved.get("name")),
                        source,
                        f"{event.get('reason')}: {' '.join(str(event.get('message', '')).split())}",
                    )
                )
            self.seen_events.add(event["metadata"]["uid"])
        results = [self._result(step, pod, scheduling) for pod in pods]
        self.report.pods += sorted(results, key=lambda r: (r.namespace, r.name))
        counts: dict[str, int] = {}
        for result in results:
            counts[result.phase] = counts.get(result.phase, 0) + 1
        summary = ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items())) or "no pods"
        self.say(f"{step.name}: {summary}")

    @staticmethod
    def _result(step: Step, pod: dict[str, Any], scheduling: dict[str, str]) -> PodResult:
        status = pod.get("status") or {}
        phase = status.get("phase", "Unknown")
        reason = ""
        if phase == "Pending":
            conditions = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
            condition: dict[str, Any] = conditions[0] if conditions else {}
            reason = scheduling.get(pod["metadata"]["uid"]) or condition.get("message") or "not scheduled yet"
        elif phase == "Failed":
            reason = f"{status.get('reason', '')} {status.get('message', '')}".strip()
        meta = pod["metadata"]
        return PodResult(step.name, meta["namespace"], meta["name"], _node(pod), phase, reason)

    @staticmethod
    def _node_summary(node: dict[str, Any]) -> dict[str, Any]:
        meta, spec = node["metadata"], node.get("spec") or {}
        return {
            "name": meta["name"],
            "instance_type": meta["labels"].get("node.kubernetes.io/instance-type", ""),
            "labels": meta["labels"],
            "taints": [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in spec.get("taints") or []],
            "allocatable": node["status"].get("allocatable", {}),
        }


def _pause(took: float) -> float:
    """Seconds between two readings of the cluster: POLL, or twice what the last reading took when that is
    longer (at 256 nodes a listing of every pod keeps the API server busy for a good part of a second), so
    that waiting on the controllers takes at most a third of the API server they share."""
    return max(POLL, 2 * took)


def _scope(step: Step) -> str | None:
    """Where a step's pods can be: the namespace of all its namespaced objects when they share one (a
    controller's pods live in its owner's namespace), else None (every namespace). At 256 nodes a listing of
    every pod is 3,000 deploy-time pods that a job's step would read, and the API server serve, twice a second."""
    namespaces = {_namespaced_name(a.obj)[0] for a in step.objects}
    return next(iter(namespaces)) if len(namespaces) == 1 and "" not in namespaces else None


def _namespaced_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name"))


def _node(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """An object's status conditions by type."""
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def _placed(pod: dict[str, Any]) -> bool:
    """Running or finished, or the scheduler has said why not."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending":
        return True
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in status.get("conditions") or []
    )


def _created(obj: dict[str, Any]) -> bool:
    """Whether a Deployment, DaemonSet or Job's controller has created the pods it wants now, a claim
    has its volume, and an operator has reconciled its object (given it a status)."""
    spec, status, meta = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    if obj["kind"] == "Pod":
        return True
    if obj["kind"] in STATUSLESS_KINDS:
        return True
    if obj["kind"] not in ("Deployment", "DaemonSet", "Job", "PersistentVolumeClaim"):  # an operator's
        return bool(status)
    if obj["kind"] == "PersistentVolumeClaim":  # one naming its volume is bound by the PV controller
        return not spec.get("volumeName") or status.get("phase") == "Bound"
    if obj["kind"] in ("Deployment", "DaemonSet") and status.get("observedGeneration", 0) < meta.get("generation", 1):
        return False
    if obj["kind"] == "Deployment":
        return int(status.get("replicas", 0)) >= int(spec.get("replicas", 1))
    if obj["kind"] == "Job" and spec.get("suspend"):  # held by Kueue: its Workload says when it may start
        return True
    if obj["kind"] == "DaemonSet":
        return int(status.get("currentNumberScheduled", 0)) >= int(status.get("desiredNumberScheduled", 0))
    finished = any(
        c.get("status") == "True" for c in status.get("conditions") or [] if c["type"] in ("Complete", "Failed")
    )
    completions = spec.get("completions")
    wanted = int(spec.get("parallelism", 1))
    if completions is not None:
        wanted = min(wanted, int(completions) - int(status.get("succeeded", 0)))
    return finished or int(status.get("active", 0)) >= wanted


def _event_time(event: dict[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp", ""))


def rehearse(
    plan: Plan, cp: ControlPlane, *, timeout: float = 60.0, say: Callable[[str], None] = lambda _: None
) -> Report:
    """Run ``plan`` on ``cp`` (started, with kube-scheduler, kube-controller-manager and KWOK)."""
    absent = [name for name in SIMULATION if name not in cp.startup_seconds]
    if absent:
        raise ControlPlaneError(f"{', '.join(absent)} not running: a rehearsal needs the scheduler, controllers, KWOK")
    with cp.kube() as kube:
        return Rehearsal(cp, kube, timeout, say).run(plan)
