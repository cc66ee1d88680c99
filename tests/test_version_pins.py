"""A version bump touches one place (issue 29, item 10): every pinned version lives in
``llm_infra/versions.py`` and is written as a value nowhere else, and what the code's comments, docstrings
and the docs say about a pinned component names the pinned version.

Two checks over the repository's Python, shell and Makefiles (tracked and new files, as git lists them):

- values: no string in the code (Python string constants outside docstrings; shell and Makefile lines
  outside comments) holds a pinned version or commit, except in ``llm_infra/versions.py``: the code
  imports it from there;
- citations: a comment, docstring or page (``README.md``, ``docs/``) that names a pinned component with a
  version ("KubeRay v1.7.0", "kwok v0.7.0") names the pinned one (or its fallback). A citation is what a
  model or a rule was read from: after a bump this check names each one to read again at the new version.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

from llm_infra import versions

REPO_ROOT = Path(__file__).resolve().parents[1]
HOME = "llm_infra/versions.py"
THIS = "tests/test_version_pins.py"  # plants faults of both kinds to check the checks
CODE_SUFFIXES = (".py", ".sh")
CODE_NAMES = ("Makefile", "run")  # .ci/run


@dataclass(frozen=True)
class Pin:
    what: str
    value: str
    names: str  # a regular expression for the component's names in prose
    also: tuple[str, ...] = ()  # other versions prose may name (a fallback)


def _bare(version: str) -> str:
    return version.removeprefix("v")


PINS = (
    Pin("Kubernetes (make k8s)", versions.K8S_VERSION, r"k8s\.io/kubernetes|kube-apiserver|Kubernetes"),
    Pin("etcd (make k8s)", versions.ETCD_VERSION, r"etcd(?:/server/v3)?"),
    Pin("KWOK (make k8s)", versions.KWOK_VERSION, r"(?i:kwok)"),
    Pin("Kubeflow training operator (make k8s)", versions.TRAINING_OPERATOR_VERSION, r"training[- ]operator(?:\.v1)?"),
    Pin(
        "KubeRay (chart and operator)",
        versions.KUBERAY_OPERATOR.version,
        r"(?i:kuberay)(?:[ -]operator|_version)?|ray-operator|kuberay-helm",
        also=(versions.KUBERAY_FALLBACK_VERSION,),
    ),
    Pin("Kueue (make k8s, and the stack's chart and CRDs)", versions.KUEUE_VERSION, r"(?i:kueue)"),
    Pin("NVIDIA device plugin chart", versions.NVIDIA_DEVICE_PLUGIN.version, r"(?:nvidia|k8s)-device-plugin"),
    Pin("EFA device plugin chart", versions.EFA_DEVICE_PLUGIN.version, r"aws-efa-k8s-device-plugin"),
)
# What each value is (two pins may share one); a commit is checked as a value only (a citation names it by
# a prefix, which says nothing about a version).
VALUES: dict[str, str] = {}
for _what, _value in [
    *((pin.what, pin.value) for pin in PINS),
    ("KubeRay fallback (make k8s)", versions.KUBERAY_FALLBACK_VERSION),
    ("KubeRay's tag commit", versions.KUBERAY_COMMIT),
]:
    _key = _value.removeprefix("v") if re.fullmatch(r"v?\d+\.\d+\.\d+", _value) else _value
    VALUES[_key] = f"{VALUES[_key]} / {_what}" if _key in VALUES else _what
SEMVER = r"v?(?P<version>\d+\.\d+\.\d+)(?![\w-]|\.\d)"


def _value_pattern(value: str) -> re.Pattern[str]:
    if re.fullmatch(r"v?\d+\.\d+\.\d+", value):
        return re.compile(rf"(?<![\w.])v?{re.escape(_bare(value))}(?![\w-]|\.\d)")
    return re.compile(re.escape(value))


VALUE_PATTERNS = {value: _value_pattern(value) for value in VALUES}
CITATIONS = [(pin, re.compile(rf"(?<![\w-])(?:{pin.names})[ @:=]+{SEMVER}")) for pin in PINS]


def repository_files() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"not a git checkout: {err}")
    return sorted(path for path in set(listed) if (REPO_ROOT / path).is_file())


def _is_code(path: str) -> bool:
    return path.endswith(CODE_SUFFIXES) or Path(path).name in CODE_NAMES


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def split_python(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(values, prose) of a Python file, each as (line, text): string constants outside docstrings; comments
    and docstrings."""
    tree = ast.parse(text)
    docstrings = _docstrings(tree)
    values, prose = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            (prose if id(node) in docstrings else values).append((node.lineno, node.value))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            prose.append((token.start[0], token.string))
    return values, prose


def split_shell(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(values, prose) of a shell script or Makefile: each line outside its comment; the comments."""
    values, prose = [], []
    for number, line in enumerate(text.splitlines(), 1):
        comment = re.search(r"(?:^|\s)#", line)
        values.append((number, line[: comment.start()] if comment else line))
        if comment:
            prose.append((number, line[comment.end() :]))
    return values, prose


def parts(path: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    text = (REPO_ROOT / path).read_text(encoding="utf-8", errors="replace")
    if path.endswith(".py"):
        return split_python(text)
    if _is_code(path):
        return split_shell(text)
    return [], list(enumerate(text.splitlines(), 1))  # a page: all prose


def value_findings(path: str, values: list[tuple[int, str]]) -> list[str]:
    """A pinned value in the code, but within a citation (a component named with its version: a reason's
    text, say), which :func:`citation_findings` checks."""
    findings = []
    for line, text in values:
        for _, citation in CITATIONS:
            text = citation.sub(" ", text)
        findings += [
            f"{path}:{line}: {VALUES[value]} {value} written as a value; import it from {HOME}"
            for value, pattern in VALUE_PATTERNS.items()
            if pattern.search(text)
        ]
    return findings


def citation_findings(path: str, prose: list[tuple[int, str]]) -> list[str]:
    findings = []
    for line, text in prose:
        for pin, pattern in CITATIONS:
            for match in pattern.finditer(text):
                allowed = {_bare(pin.value), *(_bare(v) for v in pin.also)}
                if match["version"] not in allowed:
                    findings.append(
                        f"{path}:{line}: names {pin.what} {match.group(0)!r}, the pin is {pin.value} ({HOME}): "
                        "read what it cites again at the pinned version and correct it"
                    )
    return findings


def test_every_pinned_version_is_a_value_only_in_versions_py_and_cited_as_pinned() -> None:
    files = [
        p
        for p in repository_files()
        if _is_code(p) or p == "README.md" or (p.startswith("docs/") and p.endswith(".md"))
    ]
    assert HOME in files and "llm_infra/rehearsal/control_plane.py" in files
    findings = []
    for path in files:
        if path in (HOME, THIS):
            continue
        values, prose = parts(path)
        findings += value_findings(path, values) + citation_findings(path, values + prose)
    assert not findings, "\n".join(findings)


def test_the_checks_catch_a_written_value_and_a_stale_citation() -> None:
    kuberay = versions.KUBERAY_OPERATOR.version
    values, prose = split_python(
        '"""KubeRay v0.0.1 is cited here."""\n'
        f'PIN = ("kuberay-operator", "{kuberay}")  # read at ray-project/kuberay v{kuberay}\n'
        f'ALSO = f"kwok {{x}} {versions.KWOK_VERSION}"\n'
        'FINE = "v1.7.0-eksbuild.1"  # an add-on build, not a pin\n'
    )
    assert [f.split(": ", 1)[0] for f in value_findings("x.py", values)] == ["x.py:2", "x.py:3"]
    (stale,) = citation_findings("x.py", prose)
    assert stale.startswith("x.py:1: names KubeRay (chart and operator) 'KubeRay v0.0.1'"), stale
    shell_values, shell_prose = split_shell(
        f"# etcd {versions.ETCD_VERSION} and etcd v9.9.9\nrun --etcd={versions.ETCD_VERSION} # fine\n"
    )
    assert [f.split(": ", 1)[0] for f in value_findings("b.sh", shell_values)] == ["b.sh:2"]
    assert [f.split(": ", 1)[0] for f in citation_findings("b.sh", shell_prose)] == ["b.sh:1"]
