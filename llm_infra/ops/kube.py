"""Kubernetes access for the operational commands, on the real ``kubernetes`` client (36.x).

The cluster is the one a kubeconfig context names; ``aws eks update-kubeconfig --name NAME`` writes a
context and a cluster entry named by the EKS cluster's ARN (and an ``aws eks get-token`` exec user,
which the client runs). Objects go in and come out as plain dictionaries, as the API serves them.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FIELD_MANAGER = "llm-infra"


class KubeError(RuntimeError):
    """A Kubernetes API call failed, or the API does not serve a kind; the message names the object."""


class KubeNotFound(KubeError):
    """The object a call names is not there (404)."""


def context_for_cluster(cluster_arn: str, kubeconfig: str | None = None) -> str:
    """The kubeconfig context whose cluster is ``cluster_arn`` (``aws eks update-kubeconfig``'s naming)."""
    from kubernetes import config

    try:
        contexts, _ = config.list_kube_config_contexts(config_file=kubeconfig)
    except config.ConfigException as err:
        raise KubeError(f"kubeconfig {kubeconfig or '(default)'}: {err}") from None
    for context in contexts:
        if cluster_arn in (context["name"], context.get("context", {}).get("cluster")):
            return str(context["name"])
    raise KubeError(
        f"no kubeconfig context for {cluster_arn}; run `aws eks update-kubeconfig --name "
        f"{cluster_arn.rsplit('/', 1)[-1]} --region {cluster_arn.split(':')[3]}` or pass --context"
    )


# Every request waits at most this long to connect and for an answer, in at most 3 attempts (urllib3
# retries idempotent requests): the kubernetes client's own default is to wait forever.
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
RETRIES = 2


class Kube:
    """One cluster: server-side apply, create, get, list, patch, delete, and pod logs. Every request is
    bounded by ``timeouts`` (connect, read; seconds, 0 or None: no bound) unless it names its own."""

    def __init__(
        self,
        api_client: Any,
        *,
        timeouts: tuple[float | None, float | None] = (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS),
    ) -> None:
        from kubernetes import client
        from kubernetes.dynamic import DynamicClient

        self.api_client = api_client
        _bound_requests(api_client, timeouts)
        self._core = client.CoreV1Api(api_client)
        # The dynamic client discovers each kind's path (core, batch, custom resources) from the API;
        # its discovery cache lives as long as this object.
        self._cache_dir = tempfile.TemporaryDirectory(prefix="llm-infra-discovery-")
        try:
            self._dynamic = DynamicClient(api_client, cache_file=str(Path(self._cache_dir.name) / "discovery.json"))
        except Exception as err:
            self.close()
            raise KubeError(f"cannot reach the Kubernetes API at {api_client.configuration.host}: {err}") from None

    @classmethod
    def connect(
        cls,
        *,
        kubeconfig: str | None,
        context: str | None,
        timeouts: tuple[float | None, float | None] = (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS),
    ) -> Kube:
        """The cluster of ``context`` in ``kubeconfig`` (default: $KUBECONFIG or ~/.kube/config)."""
        from kubernetes import client, config
        from urllib3 import Retry

        configuration = type.__call__(client.Configuration)  # not a copy of a process-wide default
        configuration.retries = Retry(total=RETRIES, backoff_factor=0.5)
        try:
            api_client = config.new_client_from_config(
                config_file=kubeconfig, context=context, persist_config=False, client_configuration=configuration
            )
        except config.ConfigException as err:
            raise KubeError(f"kubeconfig {kubeconfig or '(default)'}, context {context}: {err}") from None
        return cls(api_client, timeouts=timeouts)

    def close(self) -> None:
        self._cache_dir.cleanup()
        self.api_client.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _resource(self, api_version: str, kind: str) -> Any:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            return self._dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            raise KubeError(
                f"the cluster does not serve {kind} ({api_version}): is the operator that defines it installed?"
            ) from None

    def _call(self, what: str, action: Any, *, missing_ok: bool = False) -> Any:
        """``action()``; an API error as a KubeError, or None for a missing object when ``missing_ok``."""
        from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError

        try:
            return action()
        except NotFoundError as err:
            if missing_ok:
                return None
            raise KubeNotFound(f"{what}: not found: {_message(err.body)}") from None
        except DynamicApiError as err:
            raise KubeError(f"{what}: {err.status} {err.reason}: {_message(err.body)}") from None

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when there is none."""
        resource = self._resource(api_version, kind)
        found = self._call(f"get {kind}/{name}", lambda: resource.get(name=name, namespace=namespace), missing_ok=True)
        return None if found is None else dict(found.to_dict())

    def list(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        resource = self._resource(api_version, kind)
        answer = self._call(
            f"list {kind}",
            lambda: resource.get(namespace=namespace, label_selector=label_selector, field_selector=field_selector),
        )
        return list(answer.to_dict().get("items") or [])

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        resource = self._resource(obj["apiVersion"], obj["kind"])
        namespace = obj["metadata"].get("namespace")
        created = self._call(f"create {_name(obj)}", lambda: resource.create(body=obj, namespace=namespace))
        return dict(created.to_dict())

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply as field manager ``llm-infra``, taking over fields others set."""
        resource = self._resource(obj["apiVersion"], obj["kind"])
        applied = self._call(
            f"apply {_name(obj)}",
            lambda: resource.server_side_apply(
                body=obj, namespace=obj["metadata"].get("namespace"), field_manager=FIELD_MANAGER, force_conflicts=True
            ),
        )
        return dict(applied.to_dict())

    def patch(
        self, api_version: str, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386): a None value removes the key."""
        resource = self._resource(api_version, kind)
        patched = self._call(
            f"patch {kind}/{name}",
            lambda: resource.patch(
                body=patch, name=name, namespace=namespace, content_type="application/merge-patch+json"
            ),
        )
        return dict(patched.to_dict())

    def patch_status(self, api_version: str, kind: str, name: str, patch: dict[str, Any]) -> None:
        """A strategic merge patch (``{"status": ...}``) of a cluster-scoped object's status subresource: lists
        with a merge key (a node's conditions, by ``type``) keep the entries the patch does not name."""
        resource = self._resource(api_version, kind).subresources["status"]
        self._call(
            f"patch {kind}/{name} status",
            lambda: resource.patch(body=patch, name=name, content_type="application/strategic-merge-patch+json"),
        )

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None, *, propagation: str = "Background"
    ) -> bool:
        """Delete the object and, through the garbage collector, what it owns (its pods); False when absent.
        ``propagation="Foreground"``: the object stays, marked for deletion, until what it owns is gone (a
        controller makes no new pod for it meanwhile), so that its absence means theirs too."""
        resource = self._resource(api_version, kind)
        deleted = self._call(
            f"delete {kind}/{name}",
            lambda: resource.delete(name=name, namespace=namespace, propagation_policy=propagation),
            missing_ok=True,
        )
        return deleted is not None

    def pod_log(self, namespace: str, name: str, *, since_seconds: int | None = None) -> str:
        """The pod's log (stdout and stderr of its container), or its last ``since_seconds``; empty
        before the container started."""
        from kubernetes.client.exceptions import ApiException

        try:
            # Raw bytes: with content preloaded the client json-decodes a log that is one JSON line
            # (a health check's verdict) into a dict.
            response = self._core.read_namespaced_pod_log(
                name=name, namespace=namespace, since_seconds=since_seconds, _preload_content=False
            )
            return bytes(response.data).decode("utf-8", errors="replace")
        except ApiException as err:
            if err.status in (400, 404):  # waiting to start, or gone
                return ""
            raise KubeError(f"log of pod {namespace}/{name}: {err.status} {err.reason}: {_message(err.body)}") from None


def _bound_requests(api_client: Any, timeouts: tuple[float | None, float | None]) -> None:
    """Give every request of ``api_client`` the (connect, read) timeouts unless it passes its own."""
    connect, read = (seconds or None for seconds in timeouts)
    if connect is None and read is None:
        return
    rest = api_client.rest_client
    request = rest.request

    def bounded(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return request(*args, _request_timeout=_request_timeout or (connect, read), **kwargs)

    rest.request = bounded


def parse_time(text: str) -> datetime:
    """An API timestamp: RFC 3339 in UTC, whole seconds (metav1.Time) or microseconds (MicroTime)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def event_time(event: dict[str, Any]) -> datetime | None:
    """When an event last happened: ``lastTimestamp`` (core/v1 events), else ``eventTime`` (events.k8s.io
    style, microseconds), else when it was first seen or created."""
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        if event.get(key):
            return parse_time(str(event[key]))
    created = (event.get("metadata") or {}).get("creationTimestamp")
    return parse_time(str(created)) if created else None


def _name(obj: dict[str, Any]) -> str:
    namespace = obj["metadata"].get("namespace")
    return f"{obj['kind']} {namespace + '/' if namespace else ''}{obj['metadata']['name']}"


def _message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status body, else the body."""
    import json

    try:
        return str(json.loads(body).get("message") or body)
    except (TypeError, ValueError, AttributeError):
        return str(body)
