"""The real control plane (``control_plane`` fixture) as a cluster for the command tests (issue 22).

Everything the commands see is the real API server's: the Jobs they create are scheduled by the real
kube-scheduler and run by the real Job controller and garbage collector. What no component here can
do is run a container; a second KWOK plays the kubelet for the test's nodes:

- its Stages (``STAGES``) take each pod to Running, and to Succeeded or Failed with the exit code the
  test puts in the pod's annotation ``llm-infra.test/exit-code``;
- its kubelet-like HTTPS server, on 127.0.0.1 (the nodes' InternalIP and daemonEndpoints port), serves
  ``pods/log`` through the API server from a file per pod: a ``Logs`` object (kwok.x-k8s.io/v1alpha1,
  ``--enable-crds=Logs``) names it.

:class:`PodRuntime` is the container: for each job pod that runs, it writes the payload's output as a
CRI log file, names it in a ``Logs`` object, waits until the API server serves it, then sets the exit
code. The session's own KWOK (``kwok.x-k8s.io/node=fake`` nodes) serves no logs, hence this second one:
``llm_infra.rehearsal.control_plane`` starts KWOK without ``--config``/``--enable-crds``/``--node-port``.

Each test works in a namespace of its own (:meth:`KwokCluster.begin`, by ``generateName``; the commands get
it with ``--namespace``); :meth:`KwokCluster.end` removes what it left outside it: its nodes and volumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import yaml
from shared_plane import drop_namespace, new_namespace, wait_for

from llm_infra.k8s_manifests.pytorch_job import JOB_LABEL
from llm_infra.ops.kube import Kube, KubeError, KubeNotFound
from llm_infra.rehearsal import control_plane as cp

MANAGED_ANNOTATION = "llm-infra.test/kwok"  # nodes the log-serving KWOK manages: "logs"
EXIT_ANNOTATION = "llm-infra.test/exit-code"  # set on a Running pod: KWOK ends it with that code
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
READY_ANNOTATION = "llm-infra.test/ready"  # "false": KWOK leaves the node's Ready condition alone

STAGES = """
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: node-initialize}
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: '.status.conditions.[] | select( .type == "Ready" ) | .status', operator: NotIn, values: ['True']}
    - {key: '.metadata.annotations["llm-infra.test/ready"]', operator: NotIn, values: ['false']}
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
      addresses:
      - address: {{ NodeIP | Quote }}
        type: InternalIP
      daemonEndpoints:
        kubeletEndpoint:
          Port: {{ NodePort }}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-ready}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.podIP, operator: DoesNotExist}
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Ready}
      - {lastTransitionTime: {{ $now | Quote }}, status: "True", type: ContainersReady}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      {{ $uid := or .metadata.uid "" }}
      {{ $name := or .metadata.name "" }}
      {{ $namespace := or .metadata.namespace "" }}
      podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) $uid $name $namespace | Quote }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-exit}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: DoesNotExist}
    - {key: .status.phase, operator: In, values: [Running]}
    - {key: '.metadata.annotations["llm-infra.test/exit-code"]', operator: Exists}
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $code := index .metadata.annotations "llm-infra.test/exit-code" }}
      conditions:
      - {lastTransitionTime: {{ $now | Quote }}, status: "False", type: Ready}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{ $code }}
            finishedAt: {{ $now | Quote }}
            reason: {{ if eq $code "0" }}Completed{{ else }}Error{{ end }}
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: {{ if eq $code "0" }}Succeeded{{ else }}Failed{{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata: {name: pod-delete}
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: .metadata.deletionTimestamp, operator: Exists}
  next:
    finalizers: {empty: true}
    delete: true
"""


def write_kubeconfig(plane: cp.ControlPlane, path: Path, *, name: str) -> Path:
    """A kubeconfig for ``plane`` whose context and cluster are ``name`` (as ``aws eks update-kubeconfig``
    names them: the cluster's ARN)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": plane.server, "certificate-authority": str(plane.workdir / "ca.crt")}}
        ],
        "users": [{"name": name, "user": {"token": plane.token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    return path


class KwokCluster:
    """The control plane plus a log-serving KWOK for the tests' nodes; each test in a namespace of its own
    (:meth:`begin`, :meth:`end`)."""

    def __init__(self, plane: cp.ControlPlane) -> None:
        self.plane = plane
        self.workdir = plane.workdir / "kwok-logs"
        self.workdir.mkdir(exist_ok=True)
        self.kube = Kube.connect(kubeconfig=str(plane.kubeconfig), context=None)
        self._process: subprocess.Popen[bytes] | None = None
        self.namespace = ""  # the test's, between begin and end

    def wait_for(self, what: str, check: Callable[[], Any], *, component: str | Path = "kwok", **options: Any) -> Any:
        """:func:`shared_plane.wait_for` on this cluster, in the test's namespace."""
        return wait_for(what, check, plane=self.plane, namespace=self.namespace or None, component=component, **options)

    def start(self) -> None:
        from llm_infra.rehearsal import crds

        # KWOK's Logs objects only name a file: a CRD that serves any content is enough here.
        any_content = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        logs = crds.custom_resource_definition("kwok.x-k8s.io", "v1alpha1", "Logs", any_content, plural="logs")
        definitions = [logs, crds.hyperpod_job_crd()]
        if not self._established("pytorchjobs.kubeflow.org"):  # the training operator's, when it runs
            definitions.append(yaml.safe_load((crds.crds_dir() / "kubeflow.org_pytorchjobs.yaml").read_text()))
        for crd in definitions:
            self.kube.apply(crd)
        for crd_name in (
            "logs.kwok.x-k8s.io",
            "pytorchjobs.kubeflow.org",
            "hyperpodpytorchjobs.sagemaker.amazonaws.com",
        ):
            self.wait_for(
                f"CRD {crd_name} established",
                functools.partial(self._established, crd_name),
                component="kube-apiserver",
            )
        self.kube.close()  # a fresh client: its discovery now has the CRDs' kinds
        self.kube = Kube.connect(kubeconfig=str(self.plane.kubeconfig), context=None)
        (self.workdir / "stages.yaml").write_text(STAGES)
        port = cp.free_port()
        with (self.workdir / "kwok.log").open("wb") as log:
            self._process = subprocess.Popen(
                [
                    str(self.plane.bin_dir / "kwok"),
                    f"--kubeconfig={self.plane.kubeconfig}",
                    f"--server-address={cp.LOOPBACK}:{port}",
                    f"--node-port={port}",
                    f"--node-ip={cp.LOOPBACK}",
                    f"--node-lease-duration-seconds={cp.NODE_LEASE_SECONDS}",
                    f"--manage-nodes-with-annotation-selector={MANAGED_ANNOTATION}=logs",
                    "--enable-crds=Logs",
                    f"--config={self.workdir / 'stages.yaml'}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=cp.die_with_parent(),  # nothing outlives a SIGKILLed test run
                start_new_session=True,
            )

        def healthy() -> bool:
            import urllib.request

            assert self._process is not None and self._process.poll() is None, self.log_tail()
            url = f"http://{cp.LOOPBACK}:{port}/healthz"
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as answer:
                return bool(answer.status == 200)
            return False

        self.wait_for("log-serving KWOK healthy", healthy, component=self.workdir / "kwok.log")

    def _established(self, name: str) -> bool:
        crd = self.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
        conditions = ((crd or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.kill(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self._process.pid, signal.SIGKILL)
                self._process.wait(timeout=10)
        self.kube.close()

    def log_tail(self, lines: int = 20) -> str:
        log = self.workdir / "kwok.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    # ---- objects ------------------------------------------------------------------------------
    def add_node(
        self,
        name: str,
        *,
        gpus: int = 8,
        role: str = "gpu",
        ready: bool = True,
        labels: dict[str, str] | None = None,
        provider_id: str | None = None,
    ) -> None:
        """A node as EKS or HyperPod registers it: a p5.48xlarge's capacity (GPUs and EFA from the device
        plugins), the role label the stacks set, the GPU taint; KWOK makes it Ready and the node lifecycle
        controller lifts the not-ready taint, unless ``ready`` is False: then its kubelet says NotReady (a
        node still booting) until :meth:`set_ready`."""
        capacity = {
            "cpu": "192",
            "memory": "2048Gi",
            "pods": "110",
            "hugepages-2Mi": "20Gi",
            "nvidia.com/gpu": str(gpus),
        }
        if gpus:
            capacity["vpc.amazonaws.com/efa"] = "32"
        spec: dict[str, Any] = {"taints": [GPU_TAINT]} if gpus else {}
        if provider_id:
            spec["providerID"] = provider_id
        self.kube.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {MANAGED_ANNOTATION: "logs", READY_ANNOTATION: str(ready).lower()},
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "llm-infra.aws/node-role": role,
                        "node.kubernetes.io/instance-type": "p5.48xlarge",
                        **(labels or {}),
                    },
                },
                "spec": spec,
                # As a kubelet registers: NotReady until it is up (KWOK's node-initialize stage makes it Ready).
                "status": {
                    "capacity": capacity,
                    "allocatable": dict(capacity),
                    "conditions": [_ready_condition("False", "KubeletNotReady")],
                },
            }
        )
        if ready:
            self._wait_until_ready(name)

    def set_ready(self, name: str, ready: bool) -> None:
        """Take a node down (its kubelet stops answering: Ready Unknown, as the node lifecycle controller
        marks it once the heartbeats stop; that controller then taints it unreachable) or bring it back
        (KWOK makes it Ready again, the node lifecycle controller lifts the taints)."""
        self.kube.patch("v1", "Node", name, {"metadata": {"annotations": {READY_ANNOTATION: str(ready).lower()}}})
        if ready:
            self._wait_until_ready(name)
        else:
            self._post_ready_condition(name, "Unknown", "NodeStatusUnknown")

    def _wait_until_ready(self, name: str) -> None:
        def ready() -> bool:
            node = self.kube.get("v1", "Node", name) or {}
            return _ready(node) and not cp.condition_tainted(node)

        self.wait_for(f"node {name} Ready and untainted", ready, component="kube-controller-manager")

    def _post_ready_condition(self, name: str, status: str, reason: str) -> None:
        from kubernetes import client

        node = self.kube.get("v1", "Node", name) or {}
        others = [c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] != "Ready"]
        conditions = [*others, _ready_condition(status, reason)]
        client.CoreV1Api(self.kube.api_client).patch_node_status(name, {"status": {"conditions": conditions}})

    def add_fsx_claim(self, claim: str, namespace: str) -> None:
        """The FSx claim, bound to a statically provisioned volume as the PV controller leaves them (its
        own binding waits for a periodic sync, up to 15 s: written here at once)."""
        from kubernetes import client

        volume = f"{claim}-{namespace}-test"
        spec = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}
        created = self.kube.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": claim,
                    "namespace": namespace,
                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"},
                },
                "spec": {**spec, "volumeName": volume, "resources": {"requests": {"storage": "1200Gi"}}},
            }
        )
        self.kube.create(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": volume},
                "spec": {
                    **spec,
                    "capacity": {"storage": "1200Gi"},
                    "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": "fs-0123456789abcdef0"},
                    "claimRef": {"namespace": namespace, "name": claim, "uid": created["metadata"]["uid"]},
                },
            }
        )
        status = {"phase": "Bound", "accessModes": spec["accessModes"], "capacity": {"storage": "1200Gi"}}
        client.CoreV1Api(self.kube.api_client).patch_namespaced_persistent_volume_claim_status(
            claim, namespace, {"status": status}
        )

    def jobs(self) -> list[dict[str, Any]]:
        """The jobs of every kind the commands create, in the test's namespace."""
        return self.jobs_in(self.namespace)

    def jobs_in(self, namespace: str) -> list[dict[str, Any]]:
        return [
            job for api_version, kind in JOB_KINDS for job in self.kube.list(api_version, kind, namespace=namespace)
        ]

    def job_pods(self) -> list[dict[str, Any]]:
        return self.kube.list("v1", "Pod", namespace=self.namespace, label_selector=JOB_LABEL)

    def delete_pod_now(self, name: str) -> None:
        """Delete a pod of the namespace at once (grace period 0; KWOK then removes it)."""
        from kubernetes import client

        with contextlib.suppress(client.ApiException):
            client.CoreV1Api(self.kube.api_client).delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    def values(self, config: Any) -> Any:
        """The charts' values for ``config`` in the test's namespace (what ``--namespace`` renders)."""
        from llm_infra.k8s_manifests.values import WorkloadValues

        return dataclasses.replace(WorkloadValues.from_config(config), namespace=self.namespace)

    def deploy(
        self, config: Any, gpu_nodes: list[str], *, gpus: int = 8, provider_ids: dict[str, str] | None = None
    ) -> None:
        """What `cdk deploy` leaves: the GPU nodes (HyperPod labels its nodes Schedulable; ``provider_ids``:
        their EC2 instances), a system node, the base chart's objects, the FSx claim bound."""
        from llm_infra.node_labels import HEALTH_STATUS_KEY
        from llm_infra.ops.validation_run import chart_objects

        hyperpod = {HEALTH_STATUS_KEY: "Schedulable"} if config.compute == "hyperpod" else {}
        for name in gpu_nodes:
            self.add_node(name, gpus=gpus, labels=hyperpod, provider_id=(provider_ids or {}).get(name))
        self.add_node("system-1", gpus=0, role="system")
        values = self.values(config)
        for obj in chart_objects(values).base:
            self.kube.apply(obj)
        self.add_fsx_claim(values.pvc_name, self.namespace)

    def begin(self, prefix: str) -> str:
        """A namespace of the test's own (``generateName``: ``<prefix>-xxxxx``), for what it creates."""
        self.namespace = new_namespace(self.plane, self.kube, prefix)
        return self.namespace

    def end(self) -> None:
        """Remove what the test left: its pods (KWOK lets them go while their nodes are there), then its nodes
        and volumes, which outlive a namespace, then the namespace (its controller deletes the rest)."""
        from kubernetes import client

        namespace, self.namespace = self.namespace, ""
        for job in self.jobs_in(namespace):
            self.kube.delete(job["apiVersion"], job["kind"], job["metadata"]["name"], namespace)
        core = client.CoreV1Api(self.kube.api_client)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_for(
            f"the pods of {namespace} gone",
            lambda: not self.kube.list("v1", "Pod", namespace=namespace),
            plane=self.plane,
            namespace=namespace,
            component=self.workdir / "kwok.log",
        )
        ours = [
            n for n in self.kube.list("v1", "Node") if MANAGED_ANNOTATION in (n["metadata"].get("annotations") or {})
        ]
        volumes = [
            v
            for v in self.kube.list("v1", "PersistentVolume")
            if (v["spec"].get("claimRef") or {}).get("namespace") == namespace
        ]
        for node in ours:
            self.kube.delete("v1", "Node", node["metadata"]["name"])
        for volume in volumes:  # the protection finalizer waits on the PV controller's periodic sync: lifted
            self.kube.delete("v1", "PersistentVolume", volume["metadata"]["name"])
            with contextlib.suppress(KubeError):
                self.kube.patch(
                    "v1", "PersistentVolume", volume["metadata"]["name"], {"metadata": {"finalizers": None}}
                )
        drop_namespace(self.plane, self.kube, namespace)
        left = [("Node", n["metadata"]["name"]) for n in ours] + [
            ("PersistentVolume", v["metadata"]["name"]) for v in volumes
        ]
        wait_for(
            f"the nodes and volumes of {namespace} gone",
            lambda: not any(self.kube.get("v1", kind, name) for kind, name in left),
            plane=self.plane,
        )


JOB_KINDS = (
    ("batch/v1", "Job"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("sagemaker.amazonaws.com/v1", "HyperPodPyTorchJob"),
)


def _ready_condition(status: str, reason: str) -> dict[str, str]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "Ready", "status": status, "reason": reason, "lastHeartbeatTime": now, "lastTransitionTime": now}


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def cri_log(text: str, when: datetime | None = None) -> str:
    """``text`` as the container runtime writes it (CRI format), one record per line on stdout."""
    stamp = (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return "".join(f"{stamp} stdout F {line}\n" for line in text.splitlines())


# (job, pod index, node) -> (log, exit code); an exit code of None: the container keeps running.
Payload = Callable[[dict[str, Any], int, str], tuple[str, int | None]]
# Where each job kind's controller writes a pod's index (rank 0 lives in index 0): the Job controller's
# annotation (Indexed mode), the training operator's label, the HyperPod stand-in's label.
INDEX_KEYS = (
    ("annotations", "batch.kubernetes.io/job-completion-index"),
    ("labels", "training.kubeflow.org/replica-index"),
    ("labels", "llm-infra.test/replica-index"),
)


def pod_index(pod: dict[str, Any]) -> int:
    metadata = pod["metadata"]
    for where, key in INDEX_KEYS:
        if key in (metadata.get(where) or {}):
            return int(metadata[where][key])
    raise AssertionError(f"pod {metadata['name']}: no index in {INDEX_KEYS}")


def serve_log(cluster: KwokCluster, kube: Kube, pod: dict[str, Any], text: str) -> None:
    """Add ``text`` to the pod's log and wait until the API server serves it (KWOK reads the file that a
    ``Logs`` object names); ``kube``: the caller's client (a Loop's thread has its own)."""
    metadata = pod["metadata"]
    path = cluster.workdir / f"{metadata['namespace']}_{metadata['name']}_{metadata['uid']}.log"
    fresh = not path.exists()
    with path.open("a") as log:
        log.write(cri_log(text))
    if fresh:  # apply: a pod created again under the same name (an operator's restart) gets its own file
        kube.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
                "spec": {"logs": [{"logsFile": str(path)}]},
            }
        )
    last = text.strip().splitlines()[-1] if text.strip() else ""
    wait_for(
        f"the log of {metadata['namespace']}/{metadata['name']} served through the API server",
        lambda: last in kube.pod_log(metadata["namespace"], metadata["name"]),
        plane=cluster.plane,
        namespace=metadata["namespace"],
        component=cluster.workdir / "kwok.log",
    )


class Loop:
    """A component the tests play: :meth:`step` every ``tick`` seconds in a thread, with its own API client,
    while the context is open; an error in the thread is raised when it closes."""

    def __init__(self, kubeconfig: str, tick: float) -> None:
        self.kubeconfig = kubeconfig
        self.tick = tick
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def step(self, kube: Kube) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        kube = Kube.connect(kubeconfig=self.kubeconfig, context=None)
        try:
            while not self._stop.is_set():
                self.step(kube)
                self._stop.wait(self.tick)
        except BaseException as err:  # raised again in the test's thread
            self._error = err
        finally:
            kube.close()


class PodRuntime(Loop):
    """The containers of the jobs' pods on KWOK's nodes: once a pod runs, its log (``payload``) is served
    through the API server, then the pod ends with the payload's exit code (or keeps running). ``jobs``:
    the jobs whose pods it ran, in order."""

    def __init__(self, cluster: KwokCluster, payload: Payload) -> None:
        super().__init__(str(cluster.plane.kubeconfig), tick=0.05)
        self.cluster = cluster
        self.namespace = cluster.namespace  # the test's
        self.payload = payload
        self.done: set[str] = set()  # the pods' uids
        self.jobs: list[str] = []

    def step(self, kube: Kube) -> None:
        for pod in kube.list("v1", "Pod", namespace=self.namespace, label_selector=JOB_LABEL):
            uid = pod["metadata"]["uid"]
            running = (pod.get("status") or {}).get("phase") == "Running"
            if running and uid not in self.done and not pod["metadata"].get("deletionTimestamp"):
                self._finish(kube, pod)
                self.done.add(uid)

    def _finish(self, kube: Kube, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        (owner,) = [ref for ref in metadata.get("ownerReferences") or [] if ref.get("controller")]
        job = kube.get(owner["apiVersion"], owner["kind"], owner["name"], metadata["namespace"])
        if job is None:
            return
        if owner["name"] not in self.jobs:
            self.jobs.append(owner["name"])
        log, code = self.payload(job, pod_index(pod), pod["spec"]["nodeName"])
        serve_log(self.cluster, kube, pod, log)
        if code is not None:
            with contextlib.suppress(KubeNotFound):  # the job ended and took its pods meanwhile
                kube.patch(
                    "v1",
                    "Pod",
                    metadata["name"],
                    {"metadata": {"annotations": {EXIT_ANNOTATION: str(code)}}},
                    metadata["namespace"],
                )


@contextlib.contextmanager
def signal_when(cluster: KwokCluster, signum: int, sent: list[int]) -> Iterator[None]:
    """Send ``signum`` to this process once the first job exists (a user's Ctrl-C mid-run)."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if cluster.jobs():
                sent.append(signum)
                os.kill(os.getpid(), signum)
                return
            stop.wait(0.05)

    # A runner that starts the tests in the background (nohup, `cmd &`, some CI agents) hands Python SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler: a Ctrl-C is Python's default here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if signum == signal.SIGINT else None
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def as_sent(obj: dict[str, Any]) -> dict[str, Any]:
    """A chart object as JSON, for comparison with what the server holds."""
    return dict(json.loads(json.dumps(obj)))
