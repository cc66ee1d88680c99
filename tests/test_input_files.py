"""Files handed to a flag: read whatever wrote them (UTF-8, or UTF-16/32 and UTF-8 with a byte-order mark,
as PowerShell's ``>`` and Notepad write), and refused in one line naming the flag, the file and advice that
fits the flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO_ROOT, run_cli
from llm_infra.config import TrainingConfig
from llm_infra.input_files import InputFileError, read_json, read_text
from llm_infra.k8s_manifests.render import deployed_values
from llm_infra.rehearsal.rehearse import read_objects

POD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i}]}\n"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-be", "utf-32"])
def test_text_is_read_whatever_wrote_it(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "f"
    data = "ok ±\n".encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data  # PowerShell 7's "BigEndianUnicode" writes its BOM
    path.write_bytes(data)
    assert read_text(path, flag="--x", advice="a") == "ok ±\n"


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "a folder, not a file"),
        (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff"), "not a text file (invalid start byte at byte 0)"),
    ],
)
def test_a_file_that_cannot_be_read_names_the_flag_the_file_and_the_advice(tmp_path: Path, make, why: str) -> None:
    path = tmp_path / "f"
    make(path)
    with pytest.raises(InputFileError) as error:
        read_text(path, flag="--template", advice="pass the template")
    assert str(error.value) == f"--template {path}: {why}; pass the template"


def test_json_that_is_not_json_says_where(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"a": 1,\n}')
    with pytest.raises(InputFileError, match=r"--template .*t.json: not JSON \(Expecting property name enclosed in "
                       r"double quotes at line 2 column 1\); pass it"):  # fmt: skip
        read_json(path, flag="--template", advice="pass it")


# ---- each flag, end to end ----------------------------------------------------------------------------------
def test_dashboard_reads_a_template_powershell_wrote(default_app, tmp_path: Path, capsys) -> None:
    template = tmp_path / "cluster.template.json"
    template.write_text(json.dumps(default_app.templates["llm-infra-cluster"]), encoding="utf-16")
    code, out, err = run_cli(capsys, "dashboard", "--template", str(template), "--out", str(tmp_path))
    assert (code, err) == (0, "")
    assert out.startswith(f"dashboard: {tmp_path / 'dashboard.png'} (") and (tmp_path / "dashboard.png").is_file()


def test_dashboard_template_errors_advise_make_synth(tmp_path: Path, capsys) -> None:
    code, out, err = run_cli(capsys, "dashboard", "--template", str(tmp_path / "no.json"), "--out", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (
        f"llm-infra: error: --template {tmp_path / 'no.json'}: no such file; pass the cluster stack's template "
        "that make synth writes: cdk.out/<project_name>-cluster.template.json\n"
    )


@pytest.mark.parametrize("out", ["d.txt", "d"])
def test_a_picture_is_a_png_or_goes_into_a_folder(tmp_path: Path, out: str, capsys) -> None:
    code, _, err = run_cli(capsys, "dashboard", "--template", str(tmp_path / "t.json"), "--out", str(tmp_path / out))
    assert code == 2 and "--out" in err and "the picture is a PNG: give a file name ending in .png, or a folder" in err
    assert not (tmp_path / out).exists()


def test_apply_reads_yaml_powershell_wrote(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(POD, encoding="utf-16")
    assert [obj["kind"] for obj in read_objects(path, "--apply")] == ["Pod"]


def test_apply_of_what_is_not_yaml_names_the_flag_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("a: [\n")
    with pytest.raises(Exception, match=rf"^--apply {path}: not YAML \(.*\); pass a YAML file of Kubernetes objects"):
        read_objects(path, "--apply")


def test_app_dir_cdk_json_from_powershell(tmp_path: Path, capsys) -> None:
    (tmp_path / "cdk.json").write_text((REPO_ROOT / "cdk.json").read_text(), encoding="utf-16")
    code, _, err = run_cli(capsys, "preflight", "--app-dir", str(tmp_path), "--region", "us-east-1")
    assert code == 1 and "no AWS credentials found" in err  # past the config: it was read


def test_app_dir_without_cdk_json(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(capsys, "preflight", "--app-dir", str(tmp_path))
    assert code == 2
    assert err == (
        f"llm-infra: error: --app-dir {tmp_path / 'cdk.json'}: no such file; run in the CDK app's folder or pass "
        "--app-dir\n"
    )


def test_outputs_file_from_powershell_and_a_broken_one(tmp_path: Path) -> None:
    outputs = tmp_path / "cdk-outputs.json"
    storage = {"FileSystemId": "fs-1", "FileSystemDnsName": "fs-1.fsx", "FileSystemMountName": "abc"}
    outputs.write_text(json.dumps({"llm-infra-storage": storage}), encoding="utf-16")
    assert deployed_values(TrainingConfig(), outputs).fsx is not None
    outputs.write_text('["not", "outputs"]')
    with pytest.raises(InputFileError, match=r"^--outputs-file .*: not \{stack: \{output: value\}\}; pass the file"):
        deployed_values(TrainingConfig(), outputs)
