"""Building Kubernetes objects in cdk8s charts from plain dictionaries."""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

APP_LABEL = "app.kubernetes.io/part-of"
APP_NAME = "llm-infra"


def api_object(
    scope: Construct,
    construct_id: str,
    *,
    api_version: str,
    kind: str,
    name: str,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    body: dict[str, Any],
) -> cdk8s.ApiObject:
    """An object named ``name`` (no cdk8s hash suffix, so kubectl and docs can refer to it)."""
    metadata = cdk8s.ApiObjectMetadata(
        name=name,
        namespace=namespace,
        labels={APP_LABEL: APP_NAME, **(labels or {})},
        annotations=annotations or None,
    )
    obj = cdk8s.ApiObject(scope, construct_id, api_version=api_version, kind=kind, metadata=metadata)
    for key, value in body.items():
        obj.add_json_patch(cdk8s.JsonPatch.add(f"/{key}", value))
    return obj
