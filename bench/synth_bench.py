"""Synth cost of the default app against an empty aws-cdk-lib app, measured in one run; prints the ratio.

    python bench/synth_bench.py [--runs 5]

Both are whole `python <app>` processes (interpreter, jsii's Node kernel, construction, synth) into
a fresh output folder, alternating, median of ``--runs``. The empty app is one empty stack with
aws-cdk-lib's defaults. Goal: full ÷ empty <= 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EMPTY_APP = "import aws_cdk as cdk\napp = cdk.App()\ncdk.Stack(app, 'Empty')\napp.synth()\n"


def timed(command: list[str], outdir: str) -> float:
    env = {**os.environ, "CDK_OUTDIR": outdir}
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        empty_app = Path(tmp, "empty_app.py")
        empty_app.write_text(EMPTY_APP)
        empty, full = [], []
        for run in range(args.runs):
            empty.append(timed([sys.executable, str(empty_app)], f"{tmp}/empty-{run}"))
            full.append(timed([sys.executable, "app.py"], f"{tmp}/full-{run}"))
    e, f = statistics.median(empty), statistics.median(full)
    print(f"empty aws-cdk-lib app: {e:.2f} s, default app: {f:.2f} s (median of {args.runs})")
    print(f"synth ratio (default / empty): {f / e:.2f}")


if __name__ == "__main__":
    main()
