"""A test double of the Kubernetes API server, for the real ``kubernetes`` client: what the real control
plane here (tests/kwok_cluster.py, issue 22) cannot yet do for the command tests.

Still here, and why:

- the ``validate`` runs that reach the PyTorchJob / HyperPodPyTorchJob stages (``JobController`` plays
  the training operators): no training operator runs on the session's control plane yet, and AWS's
  HyperPod operator is not public. Runs that stop at the health stage (a batch/v1 Job) run on the real
  API server, scheduler and Job controller instead (tests/test_validate_real_api.py);
- ``drill`` (``RunningJob``, ``NodeFaultScenario``): HyperPod's node recovery (replace, reboot) and EKS's
  node-group replacement are platform behaviour no component here plays; not yet moved onto the real
  server with a scripted platform;
- ``ChartPayload``: the pods' output, the real payload run on CPU (also the real-server tests' logs).

The server speaks enough of the REST API for those: discovery, list (label and field selectors), get,
create, server-side apply, JSON merge patch, delete with the garbage collector's cascade, pod logs;
errors as ``Status`` objects. Deviations, on purpose: timestamps carry microseconds; no watch, no
admission, no resourceVersion conflicts; pods are placed on the first node that admits them (why a pod
cannot be placed is the real scheduler's to say, in tests/test_validate_real_api.py).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = REPO_ROOT / "workloads"
FIXTURES = Path(__file__).resolve().parent / "payload" / "fixtures"
JOB_LABEL = "llm-infra.aws/job"
HEALTH_STATUS = "sagemaker.amazonaws.com/node-health-status"


def timestamp(when: datetime | None = None) -> str:
    return (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class ApiResource:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


CORE = [
    ApiResource("", "v1", "Namespace", "namespaces", False),
    ApiResource("", "v1", "Node", "nodes", False),
    ApiResource("", "v1", "PersistentVolume", "persistentvolumes", False),
    ApiResource("", "v1", "Pod", "pods", True),
    ApiResource("", "v1", "Event", "events", True),
    ApiResource("", "v1", "ConfigMap", "configmaps", True),
    ApiResource("", "v1", "ServiceAccount", "serviceaccounts", True),
    ApiResource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True),
    ApiResource("batch", "v1", "Job", "jobs", True),
]
PYTORCH_JOB = ApiResource("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", True)
HYPERPOD_PYTORCH_JOB = ApiResource("sagemaker.amazonaws.com", "v1", "HyperPodPyTorchJob", "hyperpodpytorchjobs", True)


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality (``=``, ``==``, ``!=``), set (``in``, ``notin``) and existence (``k``, ``!k``) requirements."""
    for requirement in re.split(r",(?![^()]*\))", selector) if selector else []:
        requirement = requirement.strip()
        if match := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", requirement):
            key, operator, values = match[1], match[2], {v.strip() for v in match[3].split(",")}
            if (labels.get(key) in values) != (operator == "in") or (operator == "in" and key not in labels):
                return False
        elif "!=" in requirement:
            key, value = requirement.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in requirement:
            key, value = requirement.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif requirement.startswith("!"):
            if requirement[1:] in labels:
                return False
        elif requirement not in labels:
            return False
    return True


def field_value(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def field_selector_matches(selector: str, obj: dict[str, Any]) -> bool:
    for requirement in selector.split(",") if selector else []:
        if "!=" in requirement:
            path, value = requirement.split("!=", 1)
            if field_value(obj, path) == value:
                return False
        else:
            path, value = requirement.replace("==", "=").split("=", 1)
            if field_value(obj, path) != value:
                return False
    return True


class KubeApiDouble:
    """The server and its store; use as a context manager, then :meth:`write_kubeconfig`."""

    def __init__(self, *, custom_resources: tuple[ApiResource, ...] = (PYTORCH_JOB, HYPERPOD_PYTORCH_JOB)) -> None:
        self.resources = [*CORE, *custom_resources]
        self.lock = threading.RLock()
        self.store: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.received: list[dict[str, Any]] = []  # every object created or applied, as sent
        self.patches: list[tuple[str, str, dict[str, Any]]] = []  # (kind, name, merge patch)
        self.controllers: list[Callable[[KubeApiDouble], None]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> KubeApiDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def write_kubeconfig(self, path: Path, *, name: str) -> Path:
        """A kubeconfig whose context, cluster and user are ``name`` (``aws eks update-kubeconfig`` uses the ARN)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": {"token": "test-token"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # ---- the store ------------------------------------------------------------------------
    def resource(self, kind: str) -> ApiResource:
        (found,) = [r for r in self.resources if r.kind == kind]
        return found

    def _key(self, resource: ApiResource, namespace: str | None, name: str) -> tuple[str, str, str, str]:
        return (resource.group_version, resource.plural, namespace or "", name)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as the server would after a create (uid, timestamps filled in)."""
        with self.lock:
            resource = self.resource(obj["kind"])
            metadata = obj.setdefault("metadata", {})
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", timestamp())
            metadata["resourceVersion"] = str(time.monotonic_ns())
            if resource.namespaced:
                metadata.setdefault("namespace", "default")
            self.store[self._key(resource, metadata.get("namespace"), metadata["name"])] = obj
            return obj

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        with self.lock:
            return self.store.get(self._key(self.resource(kind), namespace, name))

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            resource = self.resource(kind)
            return [
                o
                for (gv, plural, ns, _), o in self.store.items()
                if gv == resource.group_version and plural == resource.plural and (namespace is None or ns == namespace)
            ]

    def remove(self, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete as the API does: the object, then (garbage collector) everything it owns."""
        with self.lock:
            obj = self.store.pop(self._key(self.resource(kind), namespace, name), None)
            if obj is None:
                return
            uid = obj["metadata"]["uid"]
            owned = [
                o
                for o in list(self.store.values())
                if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
            ]
            for child in owned:
                self.remove(child["kind"], child["metadata"]["name"], child["metadata"].get("namespace"))
            if obj["kind"] == "Pod":
                self.logs.pop((obj["metadata"]["namespace"], obj["metadata"]["name"]), None)

    def event(self, involved: dict[str, Any], reason: str, message: str, *, type_: str = "Normal") -> None:
        """A core/v1 Event about ``involved`` (node events live in ``default``, as node-controller writes
        them); a repeat of the same event counts up, as the API's event aggregation does."""
        namespace = involved["metadata"].get("namespace") or "default"
        now = timestamp()
        for existing in self.objects("Event", namespace):
            same = existing["involvedObject"].get("uid") == involved["metadata"].get("uid")
            if same and (existing["reason"], existing["message"]) == (reason, message):
                existing["count"] += 1
                existing["lastTimestamp"] = now
                return
        self.put(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{involved['metadata']['name']}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
                "involvedObject": {
                    "kind": involved["kind"],
                    "name": involved["metadata"]["name"],
                    "namespace": involved["metadata"].get("namespace"),
                    "uid": involved["metadata"].get("uid"),
                },
                "reason": reason,
                "message": message,
                "type": type_,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 8,
        role: str = "gpu",
        ready: bool = True,
        labels: dict[str, str] | None = None,
        provider_id: str | None = None,
    ) -> dict[str, Any]:
        """A node as EKS or HyperPod registers it (the GPU taint, the role label the stacks set)."""
        capacity = {"cpu": "192", "memory": "2048Gi", "nvidia.com/gpu": str(gpus), "hugepages-2Mi": "20Gi"}
        if gpus:
            capacity["vpc.amazonaws.com/efa"] = "32"
        return self.put(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "llm-infra.aws/node-role": role,
                        "node.kubernetes.io/instance-type": "p5.48xlarge",
                        **(labels or {}),
                    },
                },
                "spec": {
                    "providerID": provider_id or f"aws:///us-east-1a/i-{uuid.uuid4().hex[:17]}",
                    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}] if gpus else [],
                },
                "status": {
                    "capacity": capacity,
                    "allocatable": dict(capacity),
                    "conditions": [
                        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": timestamp()}
                    ],
                },
            }
        )

    def set_ready(self, name: str, status: str, reason: str) -> None:
        with self.lock:
            node = self.get("Node", name)
            assert node is not None, name
            node["status"]["conditions"] = [
                {"type": "Ready", "status": status, "reason": reason, "lastTransitionTime": timestamp()}
            ]

    # ---- HTTP -----------------------------------------------------------------------------
    def reconcile(self) -> None:
        with self.lock:
            for controller in self.controllers:
                controller(self)

    def discovery(self, path: str) -> dict[str, Any] | None:
        if path == "/version":
            return {"major": "1", "minor": "34", "gitVersion": "v1.34.1", "platform": "linux/amd64"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            groups: dict[str, list[str]] = {}
            for r in self.resources:
                if r.group:
                    groups.setdefault(r.group, [])
                    if r.version not in groups[r.group]:
                        groups[r.group].append(r.version)
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": group,
                        "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                        "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]},
                    }
                    for group, versions in groups.items()
                ],
            }
        group_version = path.removeprefix("/api/") if path.startswith("/api/") else path.removeprefix("/apis/")
        served = [r for r in self.resources if r.group_version == group_version]
        if path.count("/") != (2 if path.startswith("/api/") else 3) or not served:
            return None
        verbs = ["create", "delete", "get", "list", "patch", "update"]
        listed = [
            {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": verbs,
            }
            for r in served
        ]
        if group_version == "v1":
            listed.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]})
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": listed}

    def route(self, path: str) -> tuple[ApiResource, str | None, str | None, str | None]:
        """(resource, namespace, name, subresource) for a resource path."""
        parts = path.strip("/").split("/")
        group, version, rest = ("", parts[1], parts[2:]) if parts[0] == "api" else (parts[1], parts[2], parts[3:])
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
            namespace, rest = rest[1], rest[2:]
        plural, name, sub = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)
        found = [r for r in self.resources if (r.group, r.version, r.plural) == (group, version, plural)]
        if not found:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return found[0], namespace, name, sub

    def handle(self, method: str, raw_path: str, body: bytes, content_type: str) -> tuple[int, Any]:
        parsed = urlparse(raw_path)
        query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
        self.reconcile()
        with self.lock:
            if method == "GET" and (answer := self.discovery(parsed.path)) is not None:
                return 200, answer
            resource, namespace, name, sub = self.route(parsed.path)
            key = self._key(resource, namespace, name or "")
            if method == "GET" and name is None:
                items = [
                    o
                    for (gv, plural, ns, _), o in self.store.items()
                    if (gv, plural) == (resource.group_version, resource.plural)
                    and (namespace is None or ns == namespace)
                    and label_selector_matches(query.get("labelSelector", ""), o["metadata"].get("labels") or {})
                    and field_selector_matches(query.get("fieldSelector", ""), o)
                ]
                return 200, {
                    "kind": f"{resource.kind}List",
                    "apiVersion": resource.group_version,
                    "metadata": {"resourceVersion": str(time.monotonic_ns())},
                    "items": items,
                }
            if method == "GET" and sub == "log":
                if key not in self.store:
                    raise ApiError(404, "NotFound", f'pods "{name}" not found')
                return 200, self.logs.get((namespace or "", name or ""), "")
            if method == "GET":
                if key not in self.store:
                    raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
                return 200, self.store[key]
            if method == "POST":
                obj = json.loads(body)
                self.received.append(copy.deepcopy(obj))
                if resource.namespaced:
                    obj.setdefault("metadata", {})["namespace"] = namespace
                key = self._key(resource, namespace, obj["metadata"]["name"])
                if key in self.store:
                    raise ApiError(
                        409, "AlreadyExists", f'{resource.plural} "{obj["metadata"]["name"]}" already exists'
                    )
                if resource.namespaced and self.get("Namespace", namespace or "") is None:
                    raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
                return 201, self.put(obj)
            if method == "PATCH":
                patch = yaml.safe_load(body)
                if content_type.startswith("application/apply-patch"):
                    self.received.append(copy.deepcopy(patch))
                    existing = self.store.get(key)
                    if existing is None:
                        if resource.namespaced:
                            patch.setdefault("metadata", {})["namespace"] = namespace
                        return 201, self.put(patch)
                    merged = merge_patch(existing, {k: v for k, v in patch.items() if k != "metadata"})
                    merged["metadata"] = merge_patch(existing["metadata"], patch.get("metadata") or {})
                    self.store[key] = merged
                    return 200, merged
                if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                    raise ApiError(415, "UnsupportedMediaType", f"the double does not take {content_type}")
                if key not in self.store:
                    raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
                self.patches.append((resource.kind, name or "", copy.deepcopy(patch)))
                self.store[key] = merge_patch(self.store[key], patch)
                return 200, self.store[key]
            if method == "DELETE":
                if key not in self.store:
                    raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
                obj = self.store[key]
                self.remove(resource.kind, name or "", namespace)
                return 200, obj
        raise ApiError(405, "MethodNotAllowed", f"{method} {parsed.path}")


def _handler(double: KubeApiDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            try:
                code, answer = double.handle(self.command, self.path, body, self.headers.get("Content-Type", ""))
            except ApiError as err:
                code, answer = (
                    err.code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": err.message,
                        "reason": err.reason,
                        "code": err.code,
                    },
                )
            text = answer if isinstance(answer, str) else json.dumps(answer)
            payload = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if isinstance(answer, str) else "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


# ---- the real payload's output --------------------------------------------------------------
def _fake_sysfs(root: Path, efa: int) -> Path:
    """/sys/class/infiniband/<dev>/device/driver -> .../drivers/efa with port 1 ACTIVE (as on a p5)."""
    driver = root / "sys/bus/pci/drivers/efa"
    driver.mkdir(parents=True, exist_ok=True)
    for index in range(efa):
        device = root / f"sys/class/infiniband/efa{index}/device"
        device.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            (device / "driver").symlink_to(driver)
        port = device.parent / "ports/1"
        port.mkdir(parents=True, exist_ok=True)
        (port / "state").write_text("4: ACTIVE\n")
    return root


@functools.cache
def health_check_output(argv: tuple[str, ...], gpu_fixture: str) -> tuple[str, int]:
    """``health_check.py`` with the chart's arguments, in-process, on recorded nvidia-smi output
    (``tests/payload/fixtures``); the node's disks and kernel log are stand-ins, DCGM is absent."""
    sys.path.insert(0, str(WORKLOADS))
    try:
        import health_check
    finally:
        sys.path.remove(str(WORKLOADS))
    fixtures = {
        "nvidia-smi --query-gpu": gpu_fixture,
        "nvidia-smi --query-remapped-rows": "nvidia_smi_remapped_ok.csv",
        "nvidia-smi nvlink": "nvidia_smi_nvlink_ok.txt",
    }

    def run(command: list[str]) -> str:
        line = " ".join([Path(command[0]).name, *command[1:]])
        for prefix, fixture in fixtures.items():
            if line.startswith(prefix):
                return (FIXTURES / fixture).read_text()
        raise health_check.CommandNotFound(f"{command[0]} not found")

    root = Path(tempfile.mkdtemp(prefix="node-"))
    efa = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--expected-efa="))
    stand_ins = [
        f"--kmsg={FIXTURES / 'kmsg_clean.txt'}",
        f"--sysfs-root={_fake_sysfs(root, efa)}",
        f"--disk-path={root}",
        "--min-disk-gib=0",
        f"--shm-path={root}",
        "--min-shm-gib=0",
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = health_check.main([a for a in argv if not a.startswith("--kmsg=")] + stand_ins, run=run)
    return out.getvalue(), code


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@functools.cache
def torchrun_output(script: str, args: tuple[str, ...], max_restarts: int) -> tuple[str, int]:
    """``script`` under torchrun, 2 CPU ranks (gloo), both streams as a pod log has them."""
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{_free_port()}",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.5",
        str(WORKLOADS / script),
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=WORKLOADS, env=env)
    return result.stdout + result.stderr, result.returncode


# What runs where a GPU would: arguments appended to the chart's (argparse keeps the last value).
CPU_ARGS = {
    "allreduce_bench.py": ["--sizes=64K", "--iters=2", "--warmup=1"],
    "train.py": ["--batch-size=2", "--seq-len=32", "--steps=6", "--checkpoint-every=2", "--fail-at-step=3"],
}
GPU_ONLY_ARGS = ("--expect-efa-transport",)  # reads NCCL's log: there is no NCCL on CPU


class ChartPayload:
    """A pod's log and exit code: the real payload run with the pod's own command from the chart.

    ``faulty_nodes`` answer the health check with a recorded faulty GPU listing (7 GPUs, ECC errors);
    ``busbw_floor`` replaces the chart's all-reduce floor (a CPU's bandwidth is far below a p5's).
    """

    def __init__(self, *, faulty_nodes: frozenset[str] = frozenset(), busbw_floor: float | None = 0.0) -> None:
        self.faulty_nodes = faulty_nodes
        self.busbw_floor = busbw_floor

    def __call__(self, job: dict[str, Any], pod_index: int, node: str) -> tuple[str, int]:
        command = list(pod_template(job)["spec"]["containers"][0]["command"])
        (script_at,) = [i for i, part in enumerate(command) if part.endswith(".py")]
        script, args = Path(command[script_at]).name, command[script_at + 1 :]
        if script == "health_check.py":
            fixture = "nvidia_smi_p5_ecc.csv" if node in self.faulty_nodes else "nvidia_smi_p5_ok.csv"
            return health_check_output(tuple(args), fixture)
        args = [a for a in args if a not in GPU_ONLY_ARGS] + CPU_ARGS.get(script, [])
        if script == "allreduce_bench.py" and self.busbw_floor is not None:
            args.append(f"--min-busbw-gbps={self.busbw_floor:g}")
        if script == "train.py":
            args.append(f"--checkpoint-dir={checkpoint_root() / job['metadata']['name']}")
        log, code = torchrun_output(script, tuple(args), max_restarts(job))
        return (log if pod_index == 0 else "", code)  # rank 0 lives in the first pod

    def warm(self, jobs: list[dict[str, Any]], nodes: list[str]) -> None:
        """Run every pod's payload now, before a test's deadlines start."""
        for job in jobs:
            for index, node in enumerate(nodes):
                self(job, index, node)


@functools.cache
def checkpoint_root() -> Path:
    """One folder per test process: a training run's output is cached, so it runs (and saves) once."""
    return Path(tempfile.mkdtemp(prefix="checkpoints-"))


def pod_template(job: dict[str, Any]) -> dict[str, Any]:
    spec = job["spec"]
    if job["kind"] == "Job":
        return dict(spec["template"])
    replica_specs = spec.get("pytorchReplicaSpecs") or spec.get("replicaSpecs")
    specs = list(replica_specs.values()) if isinstance(replica_specs, dict) else list(replica_specs)
    return dict(specs[0]["template"])


def replicas(job: dict[str, Any]) -> int:
    spec = job["spec"]
    if job["kind"] == "Job":
        return int(spec.get("parallelism") or 1)
    replica_specs = spec.get("pytorchReplicaSpecs") or spec.get("replicaSpecs")
    specs = list(replica_specs.values()) if isinstance(replica_specs, dict) else list(replica_specs)
    return sum(int(s.get("replicas") or 1) for s in specs)


def max_restarts(job: dict[str, Any]) -> int:
    """In-place restarts of the workers: a PyTorchJob's torchrun ``maxRestarts``; a HyperPodPyTorchJob's
    process-level restarts before a full-job restart (``runPolicy.restartPolicy``)."""
    spec = job["spec"]
    if "elasticPolicy" in spec:
        return int(spec["elasticPolicy"].get("maxRestarts") or 0)
    restart_policy = (spec.get("runPolicy") or {}).get("restartPolicy") or {}
    return int(restart_policy.get("numRestartBeforeFullJobRestart") or 0)


# ---- controllers ------------------------------------------------------------------------------
JOB_KINDS = ("Job", "PyTorchJob", "HyperPodPyTorchJob")


def _expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {operator} not in the double")


def _tolerated(taint: dict[str, Any], tolerations: list[dict[str, Any]]) -> bool:
    return any(
        t.get("key") == taint["key"]
        and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
        and t.get("effect") in (None, taint["effect"])
        for t in tolerations
    )


class JobController:
    """The Job controller, the training operators and the scheduler, one step per ``tick`` seconds:
    create the pods (Pending), schedule them or report why not, run them, then end them with the
    payload's log and exit code, and set the job's conditions as its kind does."""

    def __init__(self, payload: Callable[[dict[str, Any], int, str], tuple[str, int]], *, tick: float = 0.02) -> None:
        self.payload = payload
        self.tick = tick
        self._stage: dict[str, tuple[str, float]] = {}  # job uid -> (stage, when)

    def __call__(self, api: KubeApiDouble) -> None:
        for kind in JOB_KINDS:
            if kind not in {r.kind for r in api.resources}:
                continue
            for job in api.objects(kind):
                uid = job["metadata"]["uid"]
                stage, since = self._stage.get(uid, ("new", 0.0))
                if time.monotonic() - since < self.tick:
                    continue
                advanced = getattr(self, f"_{stage}")(api, job)
                if advanced:
                    self._stage[uid] = (advanced, time.monotonic())

    def _pods(self, api: KubeApiDouble, job: dict[str, Any]) -> list[dict[str, Any]]:
        uid = job["metadata"]["uid"]
        pods = [
            p
            for p in api.objects("Pod", job["metadata"]["namespace"])
            if any(ref["uid"] == uid for ref in p["metadata"].get("ownerReferences") or [])
        ]
        return sorted(pods, key=lambda p: int(p["metadata"]["annotations"]["index"]))

    def _new(self, api: KubeApiDouble, job: dict[str, Any]) -> str:
        template = pod_template(job)
        metadata = job["metadata"]
        for index in range(replicas(job)):
            api.put(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{metadata['name']}-{index}-{uuid.uuid4().hex[:5]}",
                        "namespace": metadata["namespace"],
                        "labels": dict(template["metadata"].get("labels") or {}),
                        "annotations": {"index": str(index)},
                        "ownerReferences": [
                            {
                                "apiVersion": job["apiVersion"],
                                "kind": job["kind"],
                                "name": metadata["name"],
                                "uid": metadata["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "spec": copy.deepcopy(template["spec"]),
                    "status": {"phase": "Pending"},
                }
            )
        if job["kind"] != "Job":  # the batch Job controller sets conditions only at the end
            self._conditions(job, "Created")
        return "scheduling"

    def _scheduling(self, api: KubeApiDouble, job: dict[str, Any]) -> str | None:
        pending = [p for p in self._pods(api, job) if not p["spec"].get("nodeName")]
        for pod in pending:
            node = self._place(api, pod)
            if node is None:  # why not is the real scheduler's to say: tests/test_validate_real_api.py
                continue
            pod["spec"]["nodeName"] = node
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
            api.event(pod, "Scheduled", f"Successfully assigned {pod['metadata']['name']} to {node}")
        return None if any(not p["spec"].get("nodeName") for p in self._pods(api, job)) else "running"

    def _place(self, api: KubeApiDouble, pod: dict[str, Any]) -> str | None:
        """The first node (by name) the pod may use: its node affinity, tolerations, one pod of a job
        per node, free GPUs."""
        spec = pod["spec"]
        terms = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        )
        gpus = int(spec["containers"][0]["resources"].get("requests", {}).get("nvidia.com/gpu", 0))
        job_label = pod["metadata"]["labels"].get(JOB_LABEL)
        for node in sorted(api.objects("Node"), key=lambda n: n["metadata"]["name"]):
            name, labels = node["metadata"]["name"], node["metadata"].get("labels") or {}
            on_node = [p for p in api.objects("Pod") if p["spec"].get("nodeName") == name]
            used = sum(
                int(p["spec"]["containers"][0]["resources"].get("requests", {}).get("nvidia.com/gpu", 0))
                for p in on_node
                if p["status"]["phase"] in ("Pending", "Running")
            )
            if (
                not node["spec"].get("unschedulable")
                and (
                    not terms
                    or any(all(_expression_matches(e, labels) for e in t.get("matchExpressions", [])) for t in terms)
                )
                and all(_tolerated(t, spec.get("tolerations") or []) for t in node["spec"].get("taints") or [])
                and not (
                    job_label and any(p["metadata"].get("labels", {}).get(JOB_LABEL) == job_label for p in on_node)
                )
                and gpus <= int(node["status"]["allocatable"].get("nvidia.com/gpu", 0)) - used
            ):
                return str(name)
        return None

    def _running(self, api: KubeApiDouble, job: dict[str, Any]) -> str:
        for pod in self._pods(api, job):
            pod["status"] = {
                **pod["status"],
                "phase": "Running",
                "containerStatuses": [{"name": pod["spec"]["containers"][0]["name"], "state": {"running": {}}}],
            }
        if job["kind"] == "Job":
            job.setdefault("status", {})["active"] = replicas(job)
        else:
            self._conditions(job, "Running")
        return "ending"

    def _ending(self, api: KubeApiDouble, job: dict[str, Any]) -> str:
        codes = []
        for pod in self._pods(api, job):
            index = int(pod["metadata"]["annotations"]["index"])
            log, code = self.payload(job, index, pod["spec"]["nodeName"])
            api.logs[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = log
            codes.append(code)
            pod["status"] = {
                **pod["status"],
                "phase": "Succeeded" if code == 0 else "Failed",
                "containerStatuses": [
                    {"name": pod["spec"]["containers"][0]["name"], "state": {"terminated": {"exitCode": code}}}
                ],
            }
        ok = all(code == 0 for code in codes)
        if job["kind"] == "Job":
            job["status"] = {"succeeded" if ok else "failed": len(codes)}
            self._conditions(job, "Complete" if ok else "Failed")
        elif job["kind"] == "PyTorchJob":
            self._conditions(job, "Succeeded" if ok else "Failed")
        else:
            self._conditions(job, "Completed" if ok else "Failed")
        return "done"

    def _done(self, api: KubeApiDouble, job: dict[str, Any]) -> None:
        return None

    @staticmethod
    def _conditions(job: dict[str, Any], kind: str) -> None:
        """Append condition ``kind`` as True and set the earlier ones False (as the operators do)."""
        conditions = job.setdefault("status", {}).setdefault("conditions", [])
        for condition in conditions:
            condition["status"] = "False"
        conditions.append({"type": kind, "status": "True", "reason": f"Job{kind}", "lastTransitionTime": timestamp()})


@dataclass
class RunningJob:
    """A training job already running on ``nodes``: its pods Running, rank 0's log so far."""

    job: dict[str, Any]
    nodes: list[str]
    log_before: str

    def start(self, api: KubeApiDouble) -> None:
        job = api.put(copy.deepcopy(self.job))
        job["status"] = {"conditions": [{"type": "Running", "status": "True", "lastTransitionTime": timestamp()}]}
        template = pod_template(job)
        for index, node in enumerate(self.nodes):
            name = f"{job['metadata']['name']}-worker-{index}"
            api.put(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": job["metadata"]["namespace"],
                        "labels": dict(template["metadata"]["labels"]),
                        "ownerReferences": [
                            {"kind": job["kind"], "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}
                        ],
                    },
                    "spec": {**copy.deepcopy(template["spec"]), "nodeName": node},
                    "status": {"phase": "Running"},
                }
            )
            api.logs[(job["metadata"]["namespace"], name)] = self.log_before if index == 0 else ""


@dataclass
class NodeFaultScenario:
    """A node under a running job fails and recovers, on a timeline (seconds) from the fault the
    command injects: a HyperPod node-health label, or (EKS) a cordon followed by the instance's end.

    ``after_restart`` are the payload's lines of the resumed attempt; their ``time`` fields are moved
    to start at ``resume_at`` after the fault (gaps kept, scaled by ``time_scale``).
    """

    node: str
    running: RunningJob
    after_restart: list[dict[str, Any]]
    replace: bool = True  # a new node (replace/terminate) or the same one back (reboot)
    not_ready_at: float = 0.1
    replaced_at: float = 0.2
    ready_at: float = 0.35
    resume_at: float = 0.4
    time_scale: float = 0.1
    fault_at: float | None = None  # when the double saw the fault (time.time())
    _done: set[str] | None = None
    _labels: dict[str, str] | None = None  # the node's labels before the fault

    def triggered(self, api: KubeApiDouble) -> bool:
        node = api.get("Node", self.node)
        if node is None:
            return True
        labels = node["metadata"].get("labels") or {}
        return labels.get(HEALTH_STATUS, "").startswith("UnschedulablePending") or bool(
            node["spec"].get("unschedulable")
        )

    def __call__(self, api: KubeApiDouble) -> None:
        if self.fault_at is None:
            node = api.get("Node", self.node)
            if node is not None and not self.triggered(api):
                self._labels = dict(node["metadata"].get("labels") or {})
            if not self.triggered(api):
                return
            self.fault_at, self._done = time.time(), set()
        assert self._done is not None
        elapsed = time.time() - self.fault_at
        job = self.running.job["metadata"]
        for step, at in (
            ("not-ready", self.not_ready_at),
            ("replaced", self.replaced_at),
            ("ready", self.ready_at),
            ("resumed", self.resume_at),
        ):
            if elapsed < at or step in self._done:
                continue
            self._done.add(step)
            if step == "not-ready":
                api.set_ready(self.node, "Unknown", "NodeStatusUnknown")
                node = api.get("Node", self.node)
                assert node is not None
                api.event(node, "NodeNotReady", f"Node {self.node} status is now: NodeNotReady")
                for pod in api.objects("Pod", job["namespace"]):
                    if pod["spec"].get("nodeName") == self.node:
                        api.remove("Pod", pod["metadata"]["name"], job["namespace"])
            elif step == "replaced" and self.replace:
                api.remove("Node", self.node)
                # The replacement registers with the group's labels; HyperPod marks it Schedulable once
                # its health checks pass (here: at once).
                labels = {k: v for k, v in (self._labels or {}).items() if k != "kubernetes.io/hostname"}
                if HEALTH_STATUS in labels:
                    labels[HEALTH_STATUS] = "Schedulable"
                api.add_node(f"{self.node}-replacement", ready=False, labels=labels)
            elif step == "ready":
                name = f"{self.node}-replacement" if self.replace else self.node
                api.set_ready(name, "True", "KubeletReady")
                node = api.get("Node", name)
                assert node is not None
                labels = node["metadata"].setdefault("labels", {})
                if labels.get(HEALTH_STATUS, "").startswith("UnschedulablePending"):
                    labels[HEALTH_STATUS] = "Schedulable"  # HyperPod, after the reboot
                node["spec"].pop("unschedulable", None)
            elif step == "resumed":
                first = self.after_restart[0]["time"]
                moved = [
                    {**r, "time": round(self.fault_at + self.resume_at + (r["time"] - first) * self.time_scale, 3)}
                    for r in self.after_restart
                ]
                key = (job["namespace"], f"{job['name']}-worker-0")
                if key[1] in {p["metadata"]["name"] for p in api.objects("Pod", job["namespace"])}:
                    api.logs[key] = api.logs.get(key, "") + "".join(json.dumps(r) + "\n" for r in moved)
                else:  # rank 0's pod went with the node: rank 0 of the restarted job lives in a survivor
                    (survivor, *_) = [
                        p for p in api.objects("Pod", job["namespace"]) if JOB_LABEL in p["metadata"]["labels"]
                    ]
                    name = survivor["metadata"]["name"]
                    api.logs[(job["namespace"], name)] = "".join(json.dumps(r) + "\n" for r in moved)
