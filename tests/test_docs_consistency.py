"""What the docs say in several places says the same thing everywhere, and what they show agrees with
itself: the Go version and the cold `make k8s` time, the drill example and the report it wrote, how to run
`llm-infra` before the README's first example of it."""

from __future__ import annotations

import json
import re

from conftest import REPO_ROOT

PLACES = [
    REPO_ROOT / "README.md",
    REPO_ROOT / "Makefile",
    REPO_ROOT / "k8s" / "build.sh",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
]


def mentions(pattern: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in PLACES:
        for match in re.finditer(pattern, path.read_text()):
            found.setdefault(match.group(1), set()).add(str(path.relative_to(REPO_ROOT)))
    return found


def test_one_go_version_everywhere() -> None:
    versions = mentions(r"Go >= (\d+\.\d+)")
    assert len(versions) == 1, versions
    (version,) = versions
    # The highest `go` line of what make k8s builds: KubeRay v1.7.0's go.mod asks 1.26.0.
    assert version == "1.26"
    assert {"README.md", "Makefile", "docs/control-plane.md", "k8s/build.sh"} <= versions[version]


def test_one_cold_make_k8s_time_everywhere() -> None:
    times = mentions(r"about (\d+) min(?:utes)?(?: cold| of Go)")
    assert len(times) == 1, times
    assert {"README.md", "Makefile"} <= next(iter(times.values()))


def test_the_drill_example_is_the_report_it_shows() -> None:
    page = (REPO_ROOT / "docs" / "operations.md").read_text()
    block = page[page.index("$ llm-infra drill ") :].split("```", 1)[0]
    report = json.loads((REPO_ROOT / "docs" / "examples" / "drill.json").read_text())
    assert f"{report['fault']}: injected on {report['node']} at {report['injected_at']}" in block
    for phase, seconds in report["phases_seconds"].items():
        assert f"  {phase}: {seconds:.1f} s after the fault" in block
        assert re.search(rf"^{phase} +{seconds:.1f}$", block, re.MULTILINE), phase
    assert f"resumed at step {report['resumed_at_step']}" in block
    assert report["recovery_seconds"] == report["phases_seconds"]["first_step_after_resume"]
    shown = page[page.index("```json\n") + 8 :].split("```", 1)[0]
    assert json.loads(shown) == report


def test_the_readme_says_how_to_run_llm_infra_before_its_first_example() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    first_example = readme.index("`llm-infra ")
    assert ".venv/bin/llm-infra" in readme[:first_example]
    assert (
        "source\n.venv/bin/activate" in readme[:first_example] or "source .venv/bin/activate" in readme[:first_example]
    )


def test_no_page_cites_what_users_do_not_have() -> None:
    """An internal design sketch is not something a reader can open."""
    for path in PLACES:
        assert "sketch" not in path.read_text().lower(), path
