"""Print a short summary of a synthesized cloud assembly: stacks and resource counts by type.

Usage: ``python -m llm_infra.synth_summary [cdk.out]``
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


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


def main(argv: list[str]) -> int:
    outdir = Path(argv[1] if len(argv) > 1 else "cdk.out")
    if not (outdir / "manifest.json").is_file():
        print(f"no cloud assembly in {outdir}: run `make synth` first", file=sys.stderr)
        return 1
    print(summarize(outdir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
