"""The upstream CustomResourceDefinitions our manifests are validated against, pinned by commit and sha256.

Each file is the upstream file, unmodified: its served ``openAPIV3Schema`` is what the Kubernetes API
server enforces for that kind. They are read from ``$LLM_INFRA_CRDS_DIR`` when set, else from
``.cache/crds/`` in the checkout, which ``make crds`` (``python -m llm_infra.rehearsal.crds fetch``) fills over
HTTPS, checking every sha256. Loading checks the sha256 again, so a test never validates against a
schema other than the pinned one.

HyperPodPyTorchJob has no published CRD: :func:`hyperpod_job_crd` makes one from the JSON schema we
derived from AWS's SDK and docs (``schemas/hyperpodpytorchjob.schema.json``, its sources inside).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_infra.versions import KUBERAY_COMMIT

CRDS_DIR_VARIABLE = "LLM_INFRA_CRDS_DIR"
DEFAULT_CRDS_DIR = Path(__file__).resolve().parents[2] / ".cache" / "crds"
DERIVED_SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"
HYPERPOD_JOB_SCHEMA = "hyperpodpytorchjob.schema.json"


@dataclass(frozen=True)
class CrdSource:
    group: str
    kind: str
    repository: str
    commit: str
    path: str
    sha256: str

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repository}/{self.commit}/{self.path}"


# The training operator as AWS's HyperPod dependencies chart ships it (the chart both compute modes
# install), and KubeRay's at the commit of the pinned kuberay-operator chart's tag (llm_infra/versions.py:
# a bump there changes the commit, and so the files and their sha256 below).
_HYPERPOD_CLI = ("aws/sagemaker-hyperpod-cli", "011ca927123e02b35a399935bbb3ab1905fe33c7")
_HYPERPOD_CHARTS = "helm_chart/HyperPodHelmChart/charts"
_KUBERAY = ("ray-project/kuberay", KUBERAY_COMMIT)
CRD_SOURCES: dict[str, CrdSource] = {
    "kubeflow.org_pytorchjobs.yaml": CrdSource(
        "kubeflow.org",
        "PyTorchJob",
        *_HYPERPOD_CLI,
        f"{_HYPERPOD_CHARTS}/training-operators/crds/pytorchjobs.kubeflow.org-CustomResourceDefinition.yaml",
        "bc5144778e472f1b690d05dbf92b0143839bed777e9a27c7ead27ed7a1cfa2c5",
    ),
    "kubeflow.org_mpijobs.yaml": CrdSource(
        "kubeflow.org",
        "MPIJob",
        *_HYPERPOD_CLI,
        f"{_HYPERPOD_CHARTS}/mpi-operator/templates/mpijob-crd.yaml",
        "8a6c0384d285e66906340946e678beeadc5bef85f7202d4f9f8767f6b36a3030",
    ),
    "ray.io_rayclusters.yaml": CrdSource(
        "ray.io",
        "RayCluster",
        *_KUBERAY,
        "helm-chart/kuberay-operator/crds/ray.io_rayclusters.yaml",
        "c44704442eef0c6721ad40c1d66782c8bd3fdab9d3344306a5820910a679baa1",
    ),
    "ray.io_rayjobs.yaml": CrdSource(
        "ray.io",
        "RayJob",
        *_KUBERAY,
        "helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml",
        "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5",
    ),
}


class CrdsMissing(RuntimeError):
    """The pinned CRD files are not where the tests look for them."""


def crds_dir() -> Path:
    """``$LLM_INFRA_CRDS_DIR`` if set, else ``.cache/crds`` of the checkout."""
    configured = os.environ.get(CRDS_DIR_VARIABLE)
    return Path(configured) if configured else DEFAULT_CRDS_DIR


def missing(directory: Path) -> list[str]:
    """The pinned files that are absent from ``directory`` or differ from their pinned sha256."""
    return [
        name
        for name, source in CRD_SOURCES.items()
        if not (directory / name).is_file() or _sha256((directory / name).read_bytes()) != source.sha256
    ]


def read_crd(name: str, directory: Path | None = None) -> str:
    """The text of a pinned CRD file, checked against its sha256."""
    directory = directory or crds_dir()
    source = CRD_SOURCES[name]
    path = directory / name
    if not path.is_file():
        raise CrdsMissing(f"{path} is missing: run `make crds` or set {CRDS_DIR_VARIABLE} to a folder of the CRDs")
    data = path.read_bytes()
    if _sha256(data) != source.sha256:
        raise CrdsMissing(f"{path}: sha256 differs from the pinned upstream file {source.url}")
    return data.decode()


def fetch(directory: Path, *, opener=urllib.request.urlopen) -> list[Path]:
    """Download every pinned CRD missing from ``directory`` over HTTPS, checking its sha256."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in missing(directory):
        source = CRD_SOURCES[name]
        with opener(source.url, timeout=60) as response:
            data = response.read()
        digest = _sha256(data)
        if digest != source.sha256:
            raise CrdsMissing(f"{source.url}: sha256 {digest}, expected {source.sha256}; nothing written")
        partial = directory / f".{name}.partial"
        partial.write_bytes(data)
        partial.replace(directory / name)
        written.append(directory / name)
    return written


def hyperpod_job_crd() -> dict[str, Any]:
    """A CustomResourceDefinition for HyperPodPyTorchJob (sagemaker.amazonaws.com/v1) with the derived
    schema as its structural schema: ``$ref``s inlined, ``const`` as a one-value ``enum``,
    ``dependencies`` as CEL rules, closed objects left to the API server's pruning and strict field
    validation, open ones (the pod templates' ``spec``, ``status``) marked to keep unknown fields."""
    schema = json.loads((DERIVED_SCHEMAS_DIR / HYPERPOD_JOB_SCHEMA).read_text())
    definitions = schema["definitions"]

    def structural(node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            return structural(definitions[node["$ref"].rpartition("/")[2]])
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "properties":
                out[key] = {name: structural(child) for name, child in value.items()}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = structural(value)
            elif key == "const":
                out["enum"] = [value]
            elif key == "dependencies":
                out["x-kubernetes-validations"] = [
                    {"rule": f"!has(self.{field}) || has(self.{needed})", "message": f"{field} needs {needed}"}
                    for field, needs in value.items()
                    for needed in needs
                ]
            elif key not in ("$schema", "$id", "$comment", "title", "definitions", "additionalProperties"):
                out[key] = value
        if "enum" in out and "type" not in out:
            out["type"] = "string"
        if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out

    root = structural(schema)
    group, _, version = root["properties"].pop("apiVersion")["enum"][0].partition("/")
    kind = root["properties"].pop("kind")["enum"][0]
    root["properties"].pop("metadata")  # the API server checks metadata itself
    root["required"] = [field for field in root["required"] if field in root["properties"]]
    return custom_resource_definition(group, version, kind, root)


def custom_resource_definition(
    group: str, version: str, kind: str, schema: dict[str, Any], *, plural: str | None = None
) -> dict[str, Any]:
    """A namespaced CustomResourceDefinition serving ``kind`` at ``group/version`` (``plural``, default the
    lowercase kind + "s") with ``schema`` as its structural schema and a status subresource."""
    plural = plural or kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_infra.rehearsal.crds", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_parser = sub.add_parser("fetch", help="download the pinned CRDs that are missing")
    fetch_parser.add_argument("directory", type=Path, nargs="?", default=None)
    sub.add_parser("check", help="exit 1 unless every pinned CRD is present and intact")
    args = parser.parse_args(argv)
    directory = getattr(args, "directory", None) or crds_dir()
    if args.command == "check":
        absent = missing(directory)
        for name in absent:
            print(f"{directory / name}: missing or not the pinned file", file=sys.stderr)
        return 1 if absent else 0
    try:
        written = fetch(directory)
    except (OSError, CrdsMissing) as err:
        print(f"crds: {err}; set {CRDS_DIR_VARIABLE} to a folder of the pinned CRDs instead", file=sys.stderr)
        return 1
    for path in written:
        print(f"fetched {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
