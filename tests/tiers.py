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

import json
import os
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from llm_infra.rehearsal import control_plane

TIER_FIXTURES = {"control_plane": "k8s_binaries", "torch_launch": "torch_launch", "extra_synth": "extra_synth"}
TIERS = tuple(TIER_FIXTURES)
FAST_TIER = " and ".join(f"not {tier}" for tier in TIERS)
LEGACY_LAUNCH_MARKS = ("torch", "ray")
LEGACY_LAUNCHERS = frozenset(
    {"run_torchrun", "start_torchrun", "torchrun_command", "train", "reference_run", "checkpoints_after"}
)
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
    """Add each test's tier markers (pytest_collection_modifyitems); under pytest-xdist, also say each test's
    worker group (:func:`write_groups`)."""
    tiers = {item.nodeid: sorted(item_tiers(item)) for item in items}
    for item in items:
        for tier in tiers[item.nodeid]:
            item.add_marker(tier)
    write_groups(tiers)


# ---- two workers (pytest-xdist) ------------------------------------------------------------------------
# ``make test`` runs ``-n 2 --dist loadfile``: each file whole on one worker (its module fixtures, a payload run
# or a synthesized app, made once), but the control-plane tier is one unit, so that one worker runs all its tests
# on one control plane. pytest-xdist's own ``xdist_group`` cannot say that with pytest 9.2 (its worker renames
# ``item._nodeid``, which pytest 9.2's nodes no longer read), so the workers write each test's tiers to a file
# the run's controller named (:data:`GROUPS_VARIABLE`), and :func:`make_scheduler` groups and orders by them.
GROUPS_VARIABLE = "LLM_INFRA_TEST_GROUPS"


def xdist_group(nodeid: str, tiers: set[str]) -> str:
    """The worker group of a test: the control-plane tier's, else its file's."""
    return "control_plane" if "control_plane" in tiers else nodeid.split("::", 1)[0]


def name_groups_file(config: pytest.Config) -> None:
    """In the controller of a pytest-xdist run (pytest_configure): where the workers write the groups."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        os.environ[GROUPS_VARIABLE] = str(Path(tempfile.mkdtemp(prefix="llm-infra-test-groups-")) / "groups.json")


def write_groups(tiers: dict[str, list[str]]) -> None:
    """In a worker (every worker collects the same tests): each test's tiers, for the controller."""
    target = os.environ.get(GROUPS_VARIABLE)
    if target:
        written = Path(f"{target}.{os.getpid()}")
        written.write_text(json.dumps(tiers))
        os.replace(written, target)


# Which units go first (the longest first, so that no worker is left with a long one at the end): the
# control-plane unit (minutes of rehearsals and command runs), then files that run torchrun or synthesize.
WEIGHTS = {"control_plane": 3, "torch_launch": 2, "extra_synth": 1}


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The controller's scheduler for ``--dist loadfile``: loadfile's, with the workers' groups as the units,
    the heaviest first."""
    if config.getoption("dist") != "loadfile" or not os.environ.get(GROUPS_VARIABLE):
        return None
    from xdist.scheduler import LoadScopeScheduling

    path = Path(os.environ[GROUPS_VARIABLE])

    class TierScheduling(LoadScopeScheduling):  # type: ignore[misc]
        tiers: dict[str, list[str]] | None = None
        ordered = False

        def _tiers(self, nodeid: str) -> set[str]:
            if self.tiers is None:  # read once: every worker has collected (and written) by now
                self.tiers = json.loads(path.read_text()) if path.exists() else {}
            return set(self.tiers.get(nodeid, ()))

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid, self._tiers(nodeid))

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:
                self.ordered = True

                def weight(unit: dict[str, bool]) -> tuple[int, int]:
                    tiers = set().union(*(self._tiers(nodeid) for nodeid in unit))
                    return max((WEIGHTS[t] for t in tiers), default=0), len(unit)

                for scope in sorted(self.workqueue, key=lambda scope: weight(self.workqueue[scope]), reverse=True):
                    self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return TierScheduling(config, log)


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
