"""The real control plane as the tests share it (issue 29): one ``wait_for``, a namespace of a test's own,
and what is kept when a test on a control plane fails.

- :func:`wait_for` is the one polling loop of the control-plane tests: it returns what ``check`` found, and
  on a timeout fails with what the cluster shows (the namespace's pods and events, the log of the component
  that should have acted). Its timeout guards against a hang and is generous on purpose: it is never the
  thing measured.
- :func:`new_namespace` makes a namespace by ``generateName`` for the test that asks, and names it for the
  logs kept on a failure (:data:`NAMESPACES`); the tests on the session's control plane keep to theirs. Where
  Kueue runs, the namespace gets a LocalQueue ``default`` (Kueue gives a job without a queue label the
  namespace's ``default`` queue) on a ClusterQueue of the tests' (:func:`default_queue`), so that the tests'
  jobs go through Kueue's admission as every job does on the platform.
- On a failure (tests/conftest.py's ``pytest_runtest_makereport``) :func:`keep_logs` writes, into
  ``.cache/test-logs/<test>/``, the log of every component of every control plane up now (what it wrote
  during the test), and for each of the test's namespaces its pods (with their logs) and events, as KubeRay's
  e2e support keeps them; the failure's report names the folder.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from llm_infra.ops.kube import Kube, event_time
from llm_infra.rehearsal import control_plane as cp

REPO_ROOT = Path(__file__).resolve().parent.parent
LOGS_DIR = REPO_ROOT / ".cache" / "test-logs"
# The control planes the fixtures started that are up now, and the namespaces of the test running now.
LIVE: list[cp.ControlPlane] = []
NAMESPACES: list[tuple[cp.ControlPlane, str]] = []
T = TypeVar("T")


def wait_for(
    what: str,
    check: Callable[[], T | None],
    *,
    plane: cp.ControlPlane,
    namespace: str | None = None,
    component: str | Path | None = None,
    timeout: float = 60.0,
    tick: float = 0.1,
) -> T:
    """Poll ``check`` every ``tick`` seconds until it returns something other than None or False, and return
    that. ``timeout`` (seconds) only guards against a hang: on it the test fails naming ``what``, with the pods
    and events of ``namespace`` (every namespace's when None) and the end of ``component``'s log (a component
    of ``plane`` by name, or a log file)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:g} s: {what}\n{describe(plane, namespace, component)}", pytrace=False)
        time.sleep(tick)


def describe(plane: cp.ControlPlane, namespace: str | None = None, component: str | Path | None = None) -> str:
    """The pods and events of ``namespace`` (of all when None), and the end of ``component``'s log."""
    parts = []
    try:
        with Kube.connect(kubeconfig=str(plane.kubeconfig), context=None) as kube:
            parts.append("pods:\n" + pod_table(kube.list("v1", "Pod", namespace=namespace)))
            parts.append("events:\n" + event_table(kube.list("v1", "Event", namespace=namespace))[-4000:])
    except Exception as err:  # the API server itself may be what failed
        parts.append(f"(the API server did not answer: {err})")
    if component is not None:
        log = component if isinstance(component, Path) else plane.workdir / f"{component}.log"
        parts.append(f"{component} log (last 30 lines):\n{tail(log, 30)}")
    return "\n".join(parts)


def tail(path: Path, lines: int) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else f"({path}: none)"


def pod_table(pods: Iterable[dict[str, Any]]) -> str:
    rows = []
    for pod in pods:
        status = pod.get("status") or {}
        why = "; ".join(
            f"{c.get('reason')}: {c.get('message')}"
            for c in status.get("conditions") or []
            if c.get("status") != "True"
        )
        rows.append(
            f"{pod['metadata']['namespace']}/{pod['metadata']['name']}  node={pod['spec'].get('nodeName') or '-'}  "
            f"phase={status.get('phase')}{'  ' + why if why else ''}"
        )
    return "\n".join(rows) or "(none)"


def event_table(events: Iterable[dict[str, Any]]) -> str:
    def when(event: dict[str, Any]) -> datetime:
        return event_time(event) or datetime.min.replace(tzinfo=UTC)

    rows = []
    for event in sorted(events, key=when):
        involved = event.get("involvedObject") or {}
        rows.append(
            f"{when(event).isoformat()}  {event.get('type')}  {event.get('reason')}  "
            f"{involved.get('kind')}/{involved.get('name')}  {event.get('source', {}).get('component') or ''}: "
            f"{event.get('message')}"
        )
    return "\n".join(rows) or "(none)"


def new_namespace(plane: cp.ControlPlane, kube: Kube, prefix: str, *, queue: bool = True) -> str:
    """A namespace of the test's own, named by the API server (``generateName``), recorded for the logs; where
    Kueue runs, with the LocalQueue ``default`` of :func:`default_queue` unless not ``queue``."""
    from kubernetes import client

    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": f"{prefix[:40].rstrip('-')}-"}}
    name = str(client.CoreV1Api(kube.api_client).create_namespace(body).metadata.name)
    NAMESPACES.append((plane, name))
    if queue and "kueue" in plane.running:
        default_queue(kube, name)
    return name


TESTS_QUEUE = "llm-infra-tests"
QUEUED_RESOURCES = (  # every resource the tests' pods ask for: Kueue admits no workload asking for one not listed
    "cpu",
    "memory",
    "ephemeral-storage",
    "hugepages-2Mi",
    "nvidia.com/gpu",
    "vpc.amazonaws.com/efa",
)

UNLIMITED = {"memory": "1Pi", "ephemeral-storage": "1Pi", "hugepages-2Mi": "1Pi"}  # bytes; the rest counts


def default_queue(kube: Kube, namespace: str) -> None:
    """A ResourceFlavor and a ClusterQueue of the tests' (cluster-wide, room for anything), the app's
    WorkloadPriorityClasses (its jobs name them: Kueue makes no Workload for a job whose class is missing), and
    the LocalQueues on it in ``namespace``: ``default`` and the one HyperPod's task governance makes for the
    default team (the HyperPod mode's jobs name it)."""
    from llm_infra.config import DEFAULT_HYPERPOD_TEAM
    from llm_infra.queueing import (
        DEFAULT_LOCAL_QUEUE,
        HYPERPOD_PRIORITY_SUFFIX,
        KUEUE_API_VERSION,
        PRIORITY_CLASSES,
        hyperpod_queue_values,
    )

    api = KUEUE_API_VERSION
    meta = {"name": TESTS_QUEUE}
    quotas = [{"name": name, "nominalQuota": UNLIMITED.get(name, "100000")} for name in QUEUED_RESOURCES]
    for kind, value in PRIORITY_CLASSES.items():
        name = f"{kind}{HYPERPOD_PRIORITY_SUFFIX}"
        kube.apply({"apiVersion": api, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value})
    for obj in (
        {"apiVersion": api, "kind": "ResourceFlavor", "metadata": meta, "spec": {}},
        {
            "apiVersion": api,
            "kind": "ClusterQueue",
            "metadata": meta,
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": list(QUEUED_RESOURCES),
                        "flavors": [{"name": TESTS_QUEUE, "resources": quotas}],
                    }
                ],
            },
        },
        *(
            {
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": TESTS_QUEUE},
            }
            for name in (DEFAULT_LOCAL_QUEUE, hyperpod_queue_values(DEFAULT_HYPERPOD_TEAM).local_queue)
        ),
    ):
        kube.apply(obj)


def slug(text: str) -> str:
    """``text`` as a namespace prefix or a folder name: lowercase letters, digits and '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "test"


def log_sizes() -> dict[Path, int]:
    """How long each component log of the live control planes is now (kept from there on a failure)."""
    return {log: log.stat().st_size for plane in LIVE for log in component_logs(plane)}


def component_logs(plane: cp.ControlPlane) -> list[Path]:
    """The components' logs: the control plane's own and the tests' log-serving KWOK's."""
    workdir = getattr(plane, "workdir", None)
    if workdir is None or not workdir.exists():
        return []
    return sorted([*workdir.glob("*.log"), *workdir.glob("kwok-logs/kwok.log")])


def keep_logs(nodeid: str, since: dict[Path, int]) -> Path | None:
    """Write what the live control planes' components logged since ``since`` and each namespace of the test's:
    its pods, their logs and its events. The folder, or None when there was nothing to keep."""
    if not LIVE:
        return None
    folder = LOGS_DIR / slug(nodeid)[:150]
    folder.mkdir(parents=True, exist_ok=True)
    for index, plane in enumerate(LIVE):
        into = folder / (f"control-plane-{index}" if len(LIVE) > 1 else "control-plane")
        into.mkdir(exist_ok=True)
        for log in component_logs(plane):  # kwok.log and kwok-logs/kwok.log (the tests' KWOK): kwok-logs-kwok.log
            with log.open("rb") as source:
                source.seek(since.get(log, 0))
                (into / "-".join(log.relative_to(plane.workdir).parts)).write_bytes(source.read())
    for index, plane in enumerate(LIVE):  # the nodes' events: the drills' and the node lifecycle controller's
        with contextlib.suppress(Exception), Kube.connect(kubeconfig=str(plane.kubeconfig), context=None) as kube:
            nodes = event_table(kube.list("v1", "Event", field_selector="involvedObject.kind=Node"))
            (folder / (f"control-plane-{index}" if len(LIVE) > 1 else "control-plane") / "node-events.txt").write_text(
                nodes + "\n"
            )
    for plane, namespace in NAMESPACES:
        if plane not in LIVE:
            continue
        into = folder / namespace
        into.mkdir(exist_ok=True)
        try:
            with Kube.connect(kubeconfig=str(plane.kubeconfig), context=None) as kube:
                pods = kube.list("v1", "Pod", namespace=namespace)
                (into / "pods.yaml").write_text(yaml.safe_dump_all(pods))
                (into / "events.txt").write_text(event_table(kube.list("v1", "Event", namespace=namespace)) + "\n")
                for pod in pods:
                    name = pod["metadata"]["name"]
                    (into / f"{name}.log").write_text(kube.pod_log(namespace, name))
        except Exception as err:  # keep what the components logged whatever the API server does
            (into / "error.txt").write_text(f"the API server did not answer: {err}\n")
    return folder


def render_dist(config: Any, outdir: Path, *, outputs_file: Path, namespace: str) -> list[Path]:
    """What ``make synth`` writes to ``dist/`` for ``config`` (``write_dist``'s charts and values), in
    ``namespace``: the charts put every namespaced object in ``values.namespace``."""
    import dataclasses

    import cdk8s

    from llm_infra.k8s_manifests.render import build_charts, deployed_values

    values = dataclasses.replace(deployed_values(config, outputs_file, flag="the outputs file"), namespace=namespace)
    outdir.mkdir(parents=True, exist_ok=True)
    app = cdk8s.App(outdir=str(outdir))
    build_charts(app, values, recipe=True)
    app.synth()
    return sorted(outdir.glob("*.k8s.yaml"))


def drop_namespace(plane: cp.ControlPlane, kube: Kube, namespace: str) -> None:
    """Delete ``namespace`` (its controller removes what is in it, in the background)."""
    from kubernetes import client

    with contextlib.suppress(client.ApiException):
        client.CoreV1Api(kube.api_client).delete_namespace(namespace)
    NAMESPACES[:] = [(p, n) for p, n in NAMESPACES if (p, n) != (plane, namespace)]
