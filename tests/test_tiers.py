"""The tiers (issue 29, tests/tiers.py): each test's tier follows from the fixtures it uses, ``make test-fast``
selects exactly the tests of none, and a fast-tier test cannot start torchrun or a control plane unseen."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tiers
from _pytest.mark.expression import Expression

from conftest import REPO_ROOT

MAKEFILE = REPO_ROOT / "Makefile"


def fast_tier_expression() -> str:
    """The ``-m`` expression ``make test-fast`` passes to pytest."""
    (expression,) = re.findall(r"^FAST_TIER := (.+)$", MAKEFILE.read_text(), flags=re.MULTILINE)
    return expression.strip()


def test_each_tests_tier_is_the_one_its_fixtures_give(request: pytest.FixtureRequest) -> None:
    """Every collected test (the whole session's, when the suite runs) carries exactly its fixtures' tiers."""
    items = request.session.items
    assert request.node in items
    wrong = {
        item.nodeid: (marked, derived)
        for item in items
        if (marked := {t for t in tiers.TIERS if item.get_closest_marker(t)}) != (derived := tiers.item_tiers(item))
    }
    assert not wrong


def test_make_test_fast_selects_exactly_the_tests_of_no_tier(request: pytest.FixtureRequest) -> None:
    expression = Expression.compile(fast_tier_expression())
    assert fast_tier_expression() == tiers.FAST_TIER
    for item in request.session.items:
        names = {mark.name for mark in item.iter_markers()}
        selected = expression.evaluate(lambda name, /, **kwargs: name in names)  # noqa: B023
        assert selected is not tiers.item_tiers(item), item.nodeid


def test_the_tiers_follow_the_fixtures_not_marks() -> None:
    assert tiers.tiers_of(["tmp_path", "capsys"]) == set()
    assert tiers.tiers_of(["kwok", "control_plane", "own_control_plane", "k8s_binaries"]) == {"control_plane"}
    assert tiers.tiers_of(["payload_run", "torch_launch"]) == {"torch_launch"}
    assert tiers.tiers_of(["synth", "extra_synth"]) == {"extra_synth"}
    # A hand-made mark puts no test outside tests/payload/ in a tier; there it stands in for the fixture.
    assert tiers.tiers_of(["tmp_path"], ["torch"], REPO_ROOT / "tests" / "test_x.py") == set()
    assert tiers.tiers_of(["tmp_path"], ["torch"], tiers.PAYLOAD_TESTS / "test_x.py") == {"torch_launch"}
    assert tiers.tiers_of(["tmp_path"], [], tiers.PAYLOAD_TESTS / "test_x.py", ["run_torchrun"]) == {"torch_launch"}
    assert tiers.tiers_of(["tmp_path"], [], tiers.PAYLOAD_TESTS / "test_x.py", ["json_lines"]) == set()


def test_under_xdist_the_control_plane_tier_is_one_group_and_every_other_file_its_own() -> None:
    """One worker runs every control-plane test (one control plane per run); a file's other tests stay together."""
    assert tiers.xdist_group("tests/test_drill_cli.py::test_x", {"control_plane", "torch_launch"}) == "control_plane"
    assert tiers.xdist_group("tests/test_control_plane.py::test_y", {"control_plane"}) == "control_plane"
    assert tiers.xdist_group("tests/test_plan.py::test_z[a]", {"torch_launch"}) == "tests/test_plan.py"
    assert tiers.xdist_group("tests/test_planner.py::test_w", set()) == "tests/test_planner.py"


@pytest.mark.parametrize(
    ("args", "what"),
    [
        ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "train.py"], "torchrun"),
        (["/usr/bin/torchrun", "train.py"], "torchrun"),
        ("python -m torch.distributed.run train.py", "torchrun"),
        (["ray", "start", "--head"], "Ray"),
        ([str(Path("/x/.cache/k8s/v1/kube-apiserver")), "--etcd-servers=x"], "kube-apiserver"),
        (["etcd", "--name=x"], "etcd"),
        ([sys.executable, "-c", "print(1)"], None),
        (["bash", "-c", "echo torch"], None),
        (["ray", "status"], None),
    ],
)
def test_heavy_launches_are_recognised(args, what) -> None:
    found = tiers.heavy_launch(args)
    assert (found is None) if what is None else (found is not None and what in found)


def test_a_fast_tier_test_cannot_start_torchrun_or_a_control_plane(tmp_path: Path) -> None:
    """This test is itself in the fast tier: the guard is on here."""
    from llm_infra.rehearsal.control_plane import ControlPlane

    with pytest.raises(tiers.TierViolation, match=r"started torchrun \(ask for the torch_launch fixture\)"):
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "x.py"], check=False)
    with pytest.raises(tiers.TierViolation, match="started a control plane"):
        ControlPlane(tmp_path).start()
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0  # anything else runs
