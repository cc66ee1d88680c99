"""The pinned upstream CRDs: where the tests read them, how `make crds` fetches and checks them."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from llm_infra.rehearsal import crds


def served_from(directory: Path, *, tamper: str | None = None):
    """An opener that answers each pinned URL with the file of that name in ``directory``."""
    by_url = {source.url: name for name, source in crds.CRD_SOURCES.items()}

    def opener(url: str, timeout: float) -> io.BytesIO:
        data = (directory / by_url[url]).read_bytes()
        return io.BytesIO(data + b"# changed\n" if by_url[url] == tamper else data)

    return opener


def test_sources_are_pinned_commits_over_https() -> None:
    for source in crds.CRD_SOURCES.values():
        assert source.url.startswith("https://raw.githubusercontent.com/")
        assert len(source.commit) == 40 and len(source.sha256) == 64


def test_fetch_writes_every_missing_file_after_checking_its_sha256(tmp_path: Path) -> None:
    written = crds.fetch(tmp_path / "cache", opener=served_from(crds.crds_dir()))
    assert sorted(p.name for p in written) == sorted(crds.CRD_SOURCES)
    assert crds.missing(tmp_path / "cache") == []
    assert crds.fetch(tmp_path / "cache", opener=served_from(crds.crds_dir())) == []  # nothing left to do


def test_a_file_that_differs_from_the_pin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(crds.CrdsMissing, match="sha256"):
        crds.fetch(tmp_path, opener=served_from(crds.crds_dir(), tamper="ray.io_rayjobs.yaml"))
    assert not (tmp_path / "ray.io_rayjobs.yaml").exists()
    (tmp_path / "ray.io_rayjobs.yaml").write_text("kind: Tampered\n")
    assert "ray.io_rayjobs.yaml" in crds.missing(tmp_path)
    with pytest.raises(crds.CrdsMissing, match="sha256 differs from the pinned upstream file"):
        crds.read_crd("ray.io_rayjobs.yaml", tmp_path)


def test_the_variable_chooses_the_folder(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(crds.CRDS_DIR_VARIABLE, str(tmp_path))
    assert crds.crds_dir() == tmp_path
    monkeypatch.delenv(crds.CRDS_DIR_VARIABLE)
    assert crds.crds_dir() == REPO_ROOT / ".cache" / "crds"


def test_without_the_crds_the_run_stops_at_once_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, crds.CRDS_DIR_VARIABLE: str(tmp_path / "none")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_planner.py"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    (line,) = [line for line in result.stdout.splitlines() if "make crds" in line]
    assert crds.CRDS_DIR_VARIABLE in line and "passed" not in result.stdout
