"""What the docs say in several places says the same thing everywhere, and what they show agrees with
itself: the Go version and the cold `make k8s` time, the drill example and the report it wrote, how to run
`llm-infra` before the README's first example of it."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO_ROOT
from llm_infra.config import TrainingConfig

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


# ---- the teardown and cost pages against the templates ----------------------------------------------------
def test_teardown_names_every_resource_the_templates_retain(synth) -> None:
    page = (REPO_ROOT / "docs" / "teardown.md").read_text()
    for compute in ("eks", "hyperpod"):
        for template in synth(TrainingConfig(compute=compute)).templates.values():
            for name, resource in template["Resources"].items():
                if "Retain" in (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")):
                    assert f"`{resource['Type']}`" in page, f"{compute}: {name} ({resource['Type']}) is retained"


def cost_rows() -> dict[str, tuple[str, float]]:
    """item -> (quantity as written, $ per hour) from docs/cost.md's table."""
    page = (REPO_ROOT / "docs" / "cost.md").read_text()
    rows = {}
    for line in page.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"\**[\d.,]+\**", cells[3]):
            rows[cells[0].strip("*")] = (cells[1], float(cells[3].strip("*").replace(",", "")))
    return rows


def test_the_cost_table_counts_what_the_default_app_creates(default_app) -> None:
    rows = cost_rows()
    resources = [r for t in default_app.templates.values() for r in t["Resources"].values()]

    def of(kind: str) -> list[dict]:
        return [r["Properties"] for r in resources if r["Type"] == kind]

    config = TrainingConfig()
    nodegroups = {tuple(p.get("InstanceTypes") or [config.gpu_instance_type]): p for p in of("AWS::EKS::Nodegroup")}
    gpu = nodegroups[(config.gpu_instance_type,)]["ScalingConfig"]["DesiredSize"]
    system = nodegroups[(config.system_instance_type,)]["ScalingConfig"]["DesiredSize"]
    assert rows[f"GPU nodes, {config.gpu_instance_type}"][0] == str(gpu)
    assert rows[f"system nodes, {config.system_instance_type}"][0] == str(system)
    (volume,) = of("AWS::EC2::LaunchTemplate")[0]["LaunchTemplateData"]["BlockDeviceMappings"]
    ebs = volume["Ebs"]
    root = f"GPU nodes' root volumes, gp3 {ebs['VolumeSize']} GiB, {ebs['Iops']:,} IOPS, {ebs['Throughput']} MB/s"
    assert rows[root][0] == str(gpu)
    assert rows["EKS control plane"][0] == str(len(of("AWS::EKS::Cluster")))
    assert rows["NAT gateway"][0] == str(len(of("AWS::EC2::NatGateway")))
    interface = [p for p in of("AWS::EC2::VPCEndpoint") if p.get("VpcEndpointType") == "Interface"]
    endpoint_row = next(item for item in rows if item.startswith("interface VPC endpoints"))
    assert rows[endpoint_row][0] == str(sum(len(p["SubnetIds"]) for p in interface))
    (fsx,) = of("AWS::FSx::FileSystem")
    throughput = fsx["LustreConfiguration"]["PerUnitStorageThroughput"]
    fsx_row = f"FSx for Lustre {fsx['LustreConfiguration']['DeploymentType']}, {throughput} MB/s/TiB"
    assert rows[fsx_row][0] == f"{fsx['StorageCapacity']:,} GiB"


def test_the_cost_table_adds_up() -> None:
    """Each row is its quantity times its rate (the rates as the page gives them), and the total their sum."""
    from llm_infra.planner import PRICE_PRESETS

    rows = cost_rows()
    hours_per_month = 730  # AWS's pricing pages' month
    gp3_month = 500 * 0.08 + (6000 - 3000) * 0.005 + (500 - 125) * 0.04
    expected = {
        "GPU nodes, p5.48xlarge": 2 * PRICE_PRESETS["p5.48xlarge"],
        "GPU nodes' root volumes, gp3 500 GiB, 6,000 IOPS, 500 MB/s": 2 * gp3_month / hours_per_month,
        "system nodes, m7i.xlarge": 2 * 0.2016,
        "EKS control plane": 0.10,
        "NAT gateway": 0.045,
        "NAT gateway's public IPv4 address": 0.005,
        "interface VPC endpoints (ECR API, ECR Docker, STS, Logs, SageMaker API, EKS Auth) × AZs": 12 * 0.01,
        "FSx for Lustre PERSISTENT_2, 250 MB/s/TiB": 1200 * 0.210 / hours_per_month,
    }
    for item, dollars in expected.items():
        assert rows[item][1] == pytest.approx(dollars, abs=0.0005), item
    assert rows["total"][1] == pytest.approx(sum(expected.values()), abs=0.0005)
    page = (REPO_ROOT / "docs" / "cost.md").read_text()
    share = expected["GPU nodes, p5.48xlarge"] / sum(expected.values())
    assert f"{100 * share:.1f} % of the bill" in page
    rest = (
        sum(expected.values())
        - expected["GPU nodes, p5.48xlarge"]
        - expected["GPU nodes' root volumes, gp3 500 GiB, 6,000 IOPS, 500 MB/s"]
    )
    assert f"about ${rest:.2f} an hour" in page
