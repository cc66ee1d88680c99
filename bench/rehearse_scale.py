"""Rehearse at the scale users run (issue 31, item 4): the default app synthesized for N GPU nodes, every node
rehearsed, a user's N-node PyTorchJob (8 GPUs and 32 EFA devices per pod) and an (N+1)-node Job on top.

    python bench/rehearse_scale.py [--gpu-nodes 256] [--compute eks|hyperpod] [--out DIR] [--reuse] [--with-app-jobs]

Goal (a benchmark, not a timed test): at 256 nodes, the app deployed on every node, the N-node job admitted by
Kueue with every pod Running, the (N+1)-node job admitted as nothing (no pod) with Kueue's reason, the rehearsal
exiting 1 for that reason alone, in <= 120 s once built. The app's own jobs (k8s_manifests/dist, each a 256-node
step of its own) are left out of the goal (rehearse --skip-app-jobs) unless --with-app-jobs. Prints the synth
time, the rehearsal's phases as it reported them (stderr, with the seconds since it started), the two jobs'
verdicts, the pod counts and each component's peak memory; writes the JSON report to ``DIR/report.json``.

``--compute hyperpod``: the HyperPod mode at the same size. Its queues are task governance's: the real Kueue stands
in for AWS's with the queues of the compute allocation (llm_infra/rehearsal/task_governance.py), so the goal is the
same; the user's jobs name the team's queue, as task governance's admission policy wants there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from llm_infra.config import TrainingConfig
from llm_infra.k8s_manifests.values import queue_values
from llm_infra.queueing import QUEUE_LABEL
from llm_infra.rehearsal.whole_node_jobs import batch_job, pytorch_job

REPO = Path(__file__).resolve().parent.parent


def synth(context: list[str], out: Path) -> float:
    """``npx cdk synth`` with the ``-c`` flags of ``context`` into ``out``; its seconds."""
    began = time.monotonic()
    subprocess.run(
        [
            "npx", "cdk", "synth", "--no-notices", "--no-version-reporting", "--quiet",
            *context, "-c", f"manifests_dir={out / 'dist'}", "-o", str(out / "cdk.out"),
        ],
        cwd=REPO,
        check=True,
        env={**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"},
    )  # fmt: skip
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu-nodes", type=int, default=256)
    parser.add_argument("--compute", choices=("eks", "hyperpod"), default="eks")
    parser.add_argument("--out", type=Path, help="where the synthesized app and the report go")
    parser.add_argument("--reuse", action="store_true", help="use DIR's synthesized app when it is there")
    parser.add_argument("--timeout", type=float, default=600.0, help="rehearse's --timeout for each step")
    parser.add_argument(
        "--with-app-jobs", action="store_true", help="run each job of the app's manifests too, one at a time"
    )
    args = parser.parse_args()
    nodes = args.gpu_nodes
    out = args.out or REPO / ".cache" / "rehearse-scale" / f"{args.compute}-{nodes}"
    context = ["-c", f"gpu_nodes={nodes}", "-c", f"compute={args.compute}"]
    # The app's jobs' namespace (the LocalQueue default is there on EKS; the team's namespace on HyperPod) and,
    # on HyperPod, the team's queue (task governance refuses an unlabelled pod there).
    config = TrainingConfig(compute=args.compute, gpu_nodes=nodes)
    namespace = config.jobs_namespace
    queue = queue_values(config)
    labels = {QUEUE_LABEL: queue.local_queue} if queue and args.compute == "hyperpod" else {}
    out.mkdir(parents=True, exist_ok=True)
    if args.reuse and (out / "cdk.out" / "manifest.json").is_file():
        print(f"synth: reusing {out}")
    else:
        print(f"synth: {synth(context, out):.0f} s ({' '.join(context)})", flush=True)
    fits, too_big = f"user-{nodes}-nodes", f"user-{nodes + 1}-nodes"
    (out / "fits.yaml").write_text(yaml.safe_dump(pytorch_job(fits, namespace, nodes, labels)))
    (out / "too-big.yaml").write_text(yaml.safe_dump(batch_job(too_big, namespace, nodes + 1, labels)))
    command = [
        sys.executable, "-m", "llm_infra.cli", "rehearse", *context,
        "--cdk-out", str(out / "cdk.out"), "--manifests", str(out / "dist"), "--nodes-per-group", "0",
        "--apply", str(out / "fits.yaml"), "--apply", str(out / "too-big.yaml"),
        "--timeout", str(args.timeout), "--output", "json", *([] if args.with_app_jobs else ["--skip-app-jobs"]),
    ]  # fmt: skip
    began = time.monotonic()
    # The report into a file, not a pipe: megabytes of JSON at 256 nodes would fill a pipe nobody reads yet.
    with (
        (out / "report.json").open("w") as report_file,
        subprocess.Popen(command, cwd=REPO, stdout=report_file, stderr=subprocess.PIPE, text=True) as proc,
    ):
        assert proc.stderr is not None
        for line in proc.stderr:  # the rehearsal's phases, as it reaches them
            print(f"{time.monotonic() - began:7.1f} s  {line.rstrip()}", flush=True)
    seconds = time.monotonic() - began
    report = json.loads((out / "report.json").read_text())
    jobs = {job["name"]: job for job in report["jobs"]}
    pods = [p for p in report["pods"] if p["step"].endswith("fits.yaml")]
    running = [p for p in pods if p["phase"] == "Running"]
    refused = [p for p in report["pods"] if p["name"].startswith(too_big)]
    print(f"rehearse: exit {proc.returncode} in {seconds:.0f} s ({report['seconds']} s after the control plane)")
    print(f"{fits}: admitted {jobs.get(fits, {}).get('admitted')}, {len(running)} of {nodes} pods Running")
    print(f"{too_big}: admitted {jobs.get(too_big, {}).get('admitted')}, {len(refused)} pods; {jobs.get(too_big)}")
    print(f"every pod: {len(report['pods'])}, nodes: {len(report['nodes'])}; the report: {out / 'report.json'}")
    peaks = report["control_plane"].get("peak_memory_mib") or {}
    print("peak memory (MiB): " + ", ".join(f"{name} {mib}" for name, mib in peaks.items()))
    # Kueue (ours on EKS, the stand-in for task governance's on HyperPod) admits the N+1 job as nothing: no pod.
    held = jobs.get(fits, {}).get("admitted") is True and jobs.get(too_big, {}).get("admitted") is False
    held = held and not refused
    met = proc.returncode == 1 and len(running) == nodes and held
    print(f"goal (N-node job running, N+1 held, exit 1): {'met' if met else 'NOT met'}; <= 120 s: {seconds <= 120}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
