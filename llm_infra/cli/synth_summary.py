"""Print a short summary of a synthesized cloud assembly: stacks and resource counts by type, and the
Kubernetes manifests written beside it.

Usage: ``python -m llm_infra.cli.synth_summary [cdk.out [k8s_manifests/dist]]``
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import yaml


def summarize(outdir: Path) -> str:
    manifest = json.loads((outdir / "manifest.json").read_text())
    lines: list[str] = []
    total = stacks = 0
    for name, artifact in sorted(manifest["artifacts"].items()):
        if artifact.get("type") != "aws:cloudformation:stack":
            continue
        template = json.loads((outdir / artifact["properties"]["templateFile"]).read_text())
        counts = Counter(resource["Type"] for resource in template.get("Resources", {}).values())
        stacks += 1
        total += counts.total()
        lines.append(f"{name}: {counts.total()} resources")
        lines += [f"  {count:4d}  {rtype}" for rtype, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines.append(f"total: {total} resources in {stacks} stacks")
    return "\n".join(lines)


def manifests_summary(dist: Path) -> list[str]:
    """The manifests in ``dist``, and how to get the Ray ones when they are missing (they need an image
    with Ray: k8s_manifests/render.py renders them only once one is known)."""
    names = sorted(p.name for p in dist.glob("*.k8s.yaml"))
    ray = dist / "kuberay.k8s.yaml"
    lines = [f"kubernetes manifests: {' '.join(names)}"]
    if "kuberay.k8s.yaml" not in names:
        lines.append(
            "kuberay.k8s.yaml: not rendered, no Ray image known: build and push workloads/Dockerfile, then "
            "make synth RAY_IMAGE=<account>.dkr.ecr.<region>.amazonaws.com/llm-infra-training:<dlc_image_tag>"
            "-ray<ray_version>; or deploy with -c image_asset=true --outputs-file cdk-outputs.json, then make synth"
        )
    elif not any(doc and doc.get("kind") == "RayCluster" for doc in yaml.safe_load_all(ray.read_text())):
        lines.append(
            "kuberay.k8s.yaml: the RayJob ray-train alone: under HyperPod task governance the always-on RayCluster "
            "could not run in the team's namespace (docs/hyperpod.md); -c queueing=none renders it"
        )
    return lines


def main(argv: list[str]) -> int:
    outdir = Path(argv[1] if len(argv) > 1 else "cdk.out")
    if not (outdir / "manifest.json").is_file():
        print(f"no cloud assembly in {outdir}: run `make synth` first", file=sys.stderr)
        return 1
    print(summarize(outdir))
    if len(argv) > 2:
        print("\n".join(manifests_summary(Path(argv[2]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
