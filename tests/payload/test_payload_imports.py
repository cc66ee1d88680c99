"""How the payload is imported: one way in the tests, another in the containers, the same modules.

The tests import ``llm_infra.workloads.<module>`` (the package maps the folder); the containers run the
files as scripts from ``/workloads`` (``torchrun /workloads/train.py``, PYTHONPATH=/workloads, llm_infra
not installed), where the modules import each other by plain name. Each payload module that imports
another says both (``if TYPE_CHECKING or not __package__:`` plain names, ``else:`` relative ones), so
neither way leaves top-level ``train``/``data``/``model``... in ``sys.modules`` for the other to find.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT, WORKLOADS

TESTS = REPO_ROOT / "tests"
PAYLOAD_MODULES = frozenset(p.stem for p in WORKLOADS.glob("*.py"))
# The entry points the charts and the docs run as scripts, and a flag each accepts.
SCRIPTS = ("train.py", "allreduce_bench.py", "health_check.py", "xid_monitor.py", "ray_train.py")


def all_test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__snapshots__" not in p.parts)


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def test_no_test_file_touches_sys_path() -> None:
    touching = [
        f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
        for path in all_test_files()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    assert touching == [], "import the payload as llm_infra.workloads.<module> instead"


def test_no_test_file_imports_a_payload_module_by_its_plain_name() -> None:
    plain = []
    for path in all_test_files():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            plain += [f"{path.relative_to(REPO_ROOT)}:{node.lineno} {n}" for n in names if n in PAYLOAD_MODULES]
    assert plain == []


IMPORT_EVERY_TEST_MODULE = """
import importlib, json, pathlib, sys
import pytest
tests = pathlib.Path(sys.argv[1])
names = [p.stem for p in sorted(tests.glob("*.py"))]
names += [f"payload.{p.stem}" for p in sorted((tests / "payload").glob("*.py"))]
failed = {}
for name in names:
    try:
        importlib.import_module(name)
    except pytest.skip.Exception:
        pass
    except Exception as error:
        failed[name] = repr(error)[:300]
print(json.dumps({"failed": failed, "modules": sorted(sys.modules)}))
"""


def test_importing_every_test_module_leaves_no_plain_payload_module() -> None:
    """As pytest collects them (tests/ first on the path, as its rootdir conftest puts it), in a fresh
    interpreter: the payload is there only as llm_infra.workloads.*."""
    child = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERY_TEST_MODULE, str(TESTS)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
    )
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.splitlines()[-1])
    # A test module that does not import fails its own collection; here only what the others leave counts.
    assert sorted(PAYLOAD_MODULES & set(result["modules"])) == [], result["failed"]
    assert "llm_infra.workloads.train" in result["modules"]  # the payload was imported, the package's way
    # And in this session, whatever pytest collected:
    assert sorted(PAYLOAD_MODULES & set(sys.modules)) == []


@pytest.fixture(scope="module")
def container_copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The payload as the pods have it: the files alone in a folder named workloads, that folder on
    PYTHONPATH, and no llm_infra to import (a stand-in package that refuses, ahead of the installed one)."""
    root = tmp_path_factory.mktemp("container")
    copy = root / "workloads"
    copy.mkdir()
    for path in WORKLOADS.glob("*.py"):
        shutil.copy(path, copy / path.name)
    blocker = root / "site" / "llm_infra"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('llm_infra is not installed in the containers')\n")
    pythonpath = os.pathsep.join([str(copy), str(blocker.parent)])
    return copy, {**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"}


@pytest.mark.torch
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_entry_point_still_runs_as_a_script_outside_the_repository(
    container_copy: tuple[Path, dict[str, str]], script: str
) -> None:
    copy, env = container_copy
    if script == "ray_train.py":
        pytest.importorskip("ray.train")
    child = subprocess.run(
        [sys.executable, str(copy / script), "--help"], capture_output=True, text=True, timeout=120, env=env, cwd="/"
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.startswith("usage: ")


@pytest.mark.torch
def test_a_short_run_as_a_script_outside_the_repository(container_copy: tuple[Path, dict[str, str]]) -> None:
    """train.py from the copy, one process (no launcher), two steps with checkpoints: every payload
    module it needs loads by plain name, and none of them reaches for llm_infra."""
    copy, env = container_copy
    checkpoints = copy.parent / "ckpt"
    flags = ["--preset=nano", "--batch-size=2", "--seq-len=32", "--steps=2", "--checkpoint-every=1"]
    child = subprocess.run(
        [sys.executable, str(copy / "train.py"), *flags, f"--checkpoint-dir={checkpoints}", "--keep-checkpoints=1"],
        capture_output=True,
        text=True,
        timeout=180,
        env={k: v for k, v in env.items() if k not in ("MASTER_ADDR", "RANK", "WORLD_SIZE")},
        cwd=copy.parent,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    lines = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    assert lines[-1]["event"] == "summary" and lines[-1]["step"] == 2
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step-00000002"]  # pruned to one


# ---- the payload's own imports ------------------------------------------------------------------
def sibling_imports(path: Path) -> dict[str, set[tuple[str, str]]]:
    """The payload modules ``path`` imports, as ``(module, name)`` pairs: by plain name (the script
    branch) and relatively (the package branch), wherever they are in the file."""
    found: dict[str, set[tuple[str, str]]] = {"plain": set(), "relative": set()}
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found["plain"] |= {(a.name, "") for a in node.names if a.name in PAYLOAD_MODULES}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in PAYLOAD_MODULES:
            found["plain"] |= {(node.module, a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found["relative"] |= {(node.module, a.name) for a in node.names}
            else:  # from . import tiered_storage
                found["relative"] |= {(a.name, "") for a in node.names}
    return found


@pytest.mark.parametrize("path", sorted(WORKLOADS.glob("*.py")), ids=lambda p: p.name)
def test_both_ways_import_the_same_payload_modules(path: Path) -> None:
    imports = sibling_imports(path)
    assert imports["plain"] == imports["relative"]


def test_the_payload_modules_import_each_other_without_a_cycle() -> None:
    """Type-only imports included (stopping.py once imported train.py's Runtime for its annotations, while
    train.py imported stopping.py)."""
    graph = {path.stem: {module for module, _ in sibling_imports(path)["plain"]} for path in WORKLOADS.glob("*.py")}
    assert graph["stopping"] == {"accelerator"}

    def visit(module: str, trail: tuple[str, ...]) -> None:
        assert module not in trail, " -> ".join([*trail, module])
        for imported in sorted(graph[module]):
            visit(imported, (*trail, module))

    for module in sorted(graph):
        visit(module, ())
