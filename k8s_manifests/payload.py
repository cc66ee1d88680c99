"""The payload: the files of ``workloads/`` that the containers run, shipped in ConfigMaps and mounted together at
``/workloads``, so that the stock DLC image runs them with no image build.

The CDK applies each manifest with ``kubectl apply``, which records the whole object in its
``kubectl.kubernetes.io/last-applied-configuration`` annotation, and the API server refuses an object whose
annotations exceed 256 KiB (k8s.io/apimachinery ``ValidateAnnotationsSize``, ``TotalAnnotationSizeLimitB`` =
262144). One ConfigMap of the whole payload passed that limit; so the files are packed into ConfigMaps of at most
:data:`CONFIGMAP_BUDGET` bytes each (as JSON, as the annotation holds them), and a projected volume mounts them
all in one folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

WORKLOADS_DIR = Path(__file__).resolve().parent.parent / "workloads"
PAYLOAD_SUFFIXES = (".py", ".sh")
WORKLOADS_CONFIGMAP = "llm-infra-workloads"  # the first; the next are -2, -3, ...
WORKLOADS_MOUNT = "/workloads"
ANNOTATIONS_LIMIT = 262144
CONFIGMAP_BUDGET = 200_000  # leaves room for the rest of the object and the other annotations


def payload_files(directory: Path = WORKLOADS_DIR) -> dict[str, str]:
    """The files of ``workloads/`` that run in the containers, by name."""
    return {p.name: p.read_text() for p in sorted(directory.iterdir()) if p.is_file() and p.suffix in PAYLOAD_SUFFIXES}


def _json_size(name: str, content: str) -> int:
    return len(json.dumps({name: content})) - 2


def payload_configmaps(files: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """``files`` packed in name order into ConfigMaps of at most :data:`CONFIGMAP_BUDGET` bytes as JSON: the
    ConfigMaps' names and data. A file larger than the budget on its own is a ValueError naming it."""
    packed: list[dict[str, str]] = [{}]
    used = 0
    for name, content in sorted(files.items()):
        size = _json_size(name, content)
        if size > CONFIGMAP_BUDGET:
            raise ValueError(
                f"workloads/{name}: {size} bytes as JSON, over the {CONFIGMAP_BUDGET} a payload ConfigMap may hold "
                f"(kubectl apply's annotation is capped at {ANNOTATIONS_LIMIT} bytes): split the module"
            )
        if packed[-1] and used + size > CONFIGMAP_BUDGET:
            packed.append({})
            used = 0
        packed[-1][name] = content
        used += size
    names = [WORKLOADS_CONFIGMAP] + [f"{WORKLOADS_CONFIGMAP}-{index}" for index in range(2, len(packed) + 1)]
    return dict(zip(names, packed, strict=True))


def workloads_volume(directory: Path = WORKLOADS_DIR) -> dict[str, Any]:
    """The ``workloads`` volume: every payload ConfigMap projected into one folder, the scripts executable."""
    sources = [{"configMap": {"name": name}} for name in payload_configmaps(payload_files(directory))]
    return {"name": "workloads", "projected": {"sources": sources, "defaultMode": 0o555}}
