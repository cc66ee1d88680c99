"""The suite's tiers (issue 29), derived from the fixtures each test uses, never marked by hand.

A test is in a heavy tier when it uses, directly or through another fixture (pytest's closure,
``item.fixturenames``), the fixture that stands for that tier's work:

- ``control_plane``: ``k8s_binaries``, a real control plane: the session's shared one (``control_plane``), one of
  the test's own (``own_control_plane``), or one that a command under test starts (``llm-infra rehearse``);
- ``torch_launch``: ``torch_launch``, torchrun (or Ray) on CPU: the payload's processes;
- ``extra_synth``: ``extra_synth``, an app synthesized beyond the session's default one (``synth(config)``, a
  ``cdk synth`` subprocess).

The fast tier (``make test-fast``) is every other test: :data:`FAST_TIER` deselects the three markers, and
tests/test_tiers.py holds the Makefile's expression to exactly that. In a fast-tier test, :func:`guard` makes a
torchrun or Ray launch, a control-plane binary or a ``ControlPlane`` start fail loudly, naming the fixture to
ask for: such work cannot hide in the fast tier.

Transitional: tests/payload/ launches torchrun through its own helpers (tests/payload/conftest.py); until
they ask for ``torch_launch``, a test there counts as a torch launch when it is marked ``torch`` or ``ray``
(:data:`LEGACY_LAUNCH_MARKS`) or names one of those helpers (:data:`LEGACY_LAUNCHERS`, in its code or as a
fixture); the guard still catches one there that launches otherwise.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from llm_infra.rehearsal import control_plane

TIER_FIXTURES = {"control_plane": "k8s_binaries", "torch_launch": "torch_launch", "extra_synth": "extra_synth"}
TIERS = tuple(TIER_FIXTURES)
FAST_TIER = " and ".join(f"not {tier}" for tier in TIERS)
LEGACY_LAUNCH_MARKS = ("torch", "ray")
LEGACY_LAUNCHERS = frozenset({"run_torchrun", "start_torchrun", "torchrun_command", "train", "reference_run"})
PAYLOAD_TESTS = Path(__file__).resolve().parent / "payload"
CONTROL_PLANE_BINARIES = frozenset((*control_plane.REQUIRED, *control_plane.OPTIONAL))


def tiers_of(
    fixturenames: Iterable[str], marks: Iterable[str] = (), path: Path | None = None, names: Iterable[str] = ()
) -> set[str]:
    """The heavy tiers of a test that uses ``fixturenames`` (the closure), with ``marks``, in ``path``, whose
    code names ``names``."""
    fixtures = set(fixturenames)
    tiers = {tier for tier, fixture in TIER_FIXTURES.items() if fixture in fixtures}
    legacy = set(marks) & set(LEGACY_LAUNCH_MARKS) or (fixtures | set(names)) & LEGACY_LAUNCHERS
    if path is not None and PAYLOAD_TESTS in path.parents and legacy:
        tiers.add("torch_launch")
    return tiers


def item_tiers(item: pytest.Item) -> set[str]:
    marks = {mark.name for mark in item.iter_markers()}
    code = getattr(getattr(item, "function", None), "__code__", None)
    names = code.co_names if code is not None else ()
    return tiers_of(getattr(item, "fixturenames", ()), marks, Path(str(item.path)), names)


def mark(items: Sequence[pytest.Item]) -> None:
    """Add each test's tier markers (pytest_collection_modifyitems)."""
    for item in items:
        for tier in sorted(item_tiers(item)):
            item.add_marker(tier)


def heavy_launch(args: Any) -> str | None:
    """What heavy work the command ``args`` (as subprocess takes it) starts, or None."""
    argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
    words = [os.fsdecode(a) for a in argv]
    if len(words) == 1:  # a command line as one string (shell=True)
        words = words[0].split()
    names = [Path(word).name for word in words]
    if "torch.distributed.run" in words or "torchrun" in names:
        return "torchrun (ask for the torch_launch fixture)"
    if "ray" in names and "start" in words:
        return "a Ray cluster (ask for the torch_launch fixture)"
    if names and names[0] in CONTROL_PLANE_BINARIES:
        return f"{names[0]}, a control-plane binary (ask for the k8s_binaries fixture, or control_plane)"
    return None


class TierViolation(AssertionError):
    """A fast-tier test started work of a heavy tier without asking for its fixture."""


def guard(monkeypatch: pytest.MonkeyPatch, test: str) -> None:
    """For one fast-tier test: a heavy launch (:func:`heavy_launch`) or a control-plane start raises."""
    popen_init = subprocess.Popen.__init__

    def launch(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        what = heavy_launch(args)
        if what is not None:
            raise TierViolation(f"{test} is in the fast tier but started {what}")
        popen_init(self, args, *rest, **kwargs)

    def start(self: control_plane.ControlPlane) -> None:
        raise TierViolation(f"{test} is in the fast tier but started a control plane (ask for k8s_binaries)")

    monkeypatch.setattr(subprocess.Popen, "__init__", launch)
    monkeypatch.setattr(control_plane.ControlPlane, "start", start)
