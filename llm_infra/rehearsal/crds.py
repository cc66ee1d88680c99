"""The upstream CustomResourceDefinitions our manifests are validated against, pinned by commit and sha256.

Each file is the upstream file, unmodified: its served ``openAPIV3Schema`` is what the Kubernetes API
server enforces for that kind. They are read from ``$LLM_INFRA_CRDS_DIR`` when set, else from
``.cache/crds/`` in the checkout, which ``make crds`` (``python -m llm_infra.rehearsal.crds fetch``) fills over
HTTPS, checking every sha256. Loading checks the sha256 again, so a test never validates against a
schema other than the pinned one.

Kueue's CRDs and webhook manifests come from the Go module cache instead (``go mod download -json
sigs.k8s.io/kueue@<pin>`` names the module's folder; the module proxy serves it): the same ``fetch`` copies
them, sha256-checked, into ``.cache/crds/kueue-<pin>/`` of the checkout (``$LLM_INFRA_CRDS_DIR`` may be a
read-only copy without them). Without Go or the proxy only Kueue is missing: ``fetch`` says so and Kueue's
tests skip with the reason.

HyperPodPyTorchJob has no published CRD: :func:`hyperpod_job_crd` makes one from the JSON schema we
derived from AWS's SDK and docs (``schemas/hyperpodpytorchjob.schema.json``, its sources inside).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_infra.versions import KUBERAY_COMMIT, KUEUE_VERSION

CRDS_DIR_VARIABLE = "LLM_INFRA_CRDS_DIR"
DEFAULT_CRDS_DIR = Path(__file__).resolve().parents[2] / ".cache" / "crds"
DERIVED_SCHEMAS_DIR = Path(__file__).resolve().parents[1] / "schemas"
HYPERPOD_JOB_SCHEMA = "hyperpodpytorchjob.schema.json"
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: the CRDs are megabytes


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


# Kueue's files at the pinned module version, by the name they are kept under: the CRDs
# (config/components/crd/bases) and the webhook configurations (config/components/webhook/manifests.yaml).
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_WEBHOOKS = "webhook-manifests.yaml"
_KUEUE_CRD_SHA256 = {
    "admissionchecks": "312793990d5108ce9a4de194c493708516cb59f6f7cf0a558d51890911059dbb",
    "clusterqueues": "666f5466bf85ace8c494a9a790ba87c4c18ddf3ab3eb9f18c878927d396869f3",
    "cohorts": "25fce81a539c3c22a031a501c3c9382f763221016f624c7e227eb47d3abb6f59",
    "localqueues": "5c5768caeb499bb869bb8f90e4f5293170b183a4a74b618f1f182264d9ce4437",
    "multikueueclusters": "45d7b81f34f383c214d3395cf771b49bf1ba0964734e69d7b8d02f992d60ebf8",
    "multikueueconfigs": "af4c24fe9418749448001179df67e273f3256f08aa6aabb07215b7c3c5a8bd98",
    "provisioningrequestconfigs": "9bcf3081565fd449708a1df3aa0fcaee803e4a1eeadb7c3fe082b97545d6d988",
    "resourceflavors": "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173",
    "topologies": "0debce5049a3931db15c99d8acddb0cc509c24fedc98f0bb0235095f7092fc11",
    "workloadpriorityclasses": "b6c089d45938adf9afd21da05a6c613f29408989aa66afc09db189eb724db5a3",
    "workloads": "d4f5c22bff5074b8801412011d6d2fd68050e2868ce4dd0bba2ad523431af36d",
}
KUEUE_CRD_FILES = {
    f"kueue.x-k8s.io_{plural}.yaml": (f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml", sha256)
    for plural, sha256 in _KUEUE_CRD_SHA256.items()
}
KUEUE_FILES: dict[str, tuple[str, str]] = {  # name: (path in the module, sha256)
    **KUEUE_CRD_FILES,
    KUEUE_WEBHOOKS: (
        "config/components/webhook/manifests.yaml",
        "e7ed37c3e8dbb68147081f7b4f03f919fb7bb8e8780760d2930cb90551eff2e8",
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


def kueue_dir() -> Path:
    """Where ``fetch`` keeps Kueue's files: ``.cache/crds/kueue-<pin>/`` of the checkout."""
    return DEFAULT_CRDS_DIR / f"kueue-{KUEUE_VERSION}"


def kueue_missing(directory: Path | None = None) -> list[str]:
    """Kueue's pinned files that are absent from ``directory`` (default :func:`kueue_dir`) or differ."""
    directory = directory or kueue_dir()
    return [
        name
        for name, (_, sha256) in KUEUE_FILES.items()
        if not (directory / name).is_file() or _sha256((directory / name).read_bytes()) != sha256
    ]


def read_kueue_file(name: str, directory: Path | None = None) -> str:
    """The text of one of Kueue's pinned files, checked against its sha256."""
    path = (directory or kueue_dir()) / name
    module_path, sha256 = KUEUE_FILES[name]
    if not path.is_file():
        raise CrdsMissing(f"{path} is missing: run `make crds` (it copies Kueue's files from the Go module cache)")
    data = path.read_bytes()
    if _sha256(data) != sha256:
        raise CrdsMissing(f"{path}: sha256 differs from {KUEUE_MODULE}@{KUEUE_VERSION} {module_path}")
    return data.decode()


def fetch_kueue(directory: Path | None = None, *, go: str = "go") -> list[Path]:
    """Copy Kueue's pinned files missing from ``directory`` out of the module in the Go module cache
    (``go mod download -json``: downloaded through the module proxy, checked against sum.golang.org),
    checking each sha256."""
    directory = directory or kueue_dir()
    absent = kueue_missing(directory)
    if not absent:
        return []
    spec = f"{KUEUE_MODULE}@{KUEUE_VERSION}"
    with tempfile.TemporaryDirectory() as outside_any_module:
        try:
            result = subprocess.run(
                [go, "mod", "download", "-json", spec],
                cwd=outside_any_module,
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -modcacherw", "GOTOOLCHAIN": "local"},
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CrdsMissing(f"go mod download {spec}: {err}") from None
    try:
        answer = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise CrdsMissing(f"go mod download {spec}: {' '.join(result.stderr.split())}") from None
    if answer.get("Error") or not answer.get("Dir"):
        raise CrdsMissing(f"go mod download {spec}: {' '.join(str(answer.get('Error')).split())}")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in absent:
        module_path, sha256 = KUEUE_FILES[name]
        data = (Path(answer["Dir"]) / module_path).read_bytes()
        if _sha256(data) != sha256:
            raise CrdsMissing(f"{spec} {module_path}: sha256 {_sha256(data)}, expected {sha256}; nothing written")
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
    sub.add_parser("check", help="exit 1 unless every pinned CRD (Kueue's files included) is present and intact")
    args = parser.parse_args(argv)
    directory = getattr(args, "directory", None) or crds_dir()
    if args.command == "check":
        absent = [directory / name for name in missing(directory)] + [kueue_dir() / n for n in kueue_missing()]
        for path in absent:
            print(f"{path}: missing or not the pinned file", file=sys.stderr)
        return 1 if absent else 0
    try:
        written = fetch(directory)
    except (OSError, CrdsMissing) as err:
        print(f"crds: {err}; set {CRDS_DIR_VARIABLE} to a folder of the pinned CRDs instead", file=sys.stderr)
        return 1
    try:  # only Kueue's tests need these: without them they skip, saying this
        written += fetch_kueue()
    except (OSError, CrdsMissing) as err:
        print(f"crds: Kueue's CRDs and webhooks not fetched ({err}); the tests that run Kueue skip", file=sys.stderr)
    for path in written:
        print(f"fetched {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
