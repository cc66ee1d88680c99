"""``llm-infra drill --cluster NAME --out FILE``: fault one node under the running training job, time
each recovery phase, write the report that ``llm-infra plan --from-run`` reads."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from llm_infra.cli.aws import aws_client
from llm_infra.cli.commands.cluster_access import (
    ClusterTarget,
    add_cluster_flags,
    connect,
    load_config,
    resolve_cluster,
    workload_values,
)
from llm_infra.cli.terminal import OUTPUT_JSON, UsageError, confirm, number, print_table
from llm_infra.ops.kube import Kube, KubeError

EXIT_NOT_RECOVERED = 1


def register(commands: Any) -> None:
    drill_help = (
        "fault one node under the running training job and time detection, replacement and resume; write the "
        "report that plan --from-run reads"
    )
    parser = commands.add_parser("drill", help=drill_help, description=drill_help)
    add_cluster_flags(parser, "the drill report, as written to --out")
    parser.add_argument(
        "--fault",
        choices=("replace", "reboot", "terminate", "gpu-xid"),
        help="HyperPod: replace or reboot, by the node-health label (default: replace); EKS: terminate (the "
        "default), which cordons the node and terminates its EC2 instance, or gpu-xid, which sets the node "
        "condition the EKS node monitoring agent sets for a failed GPU (AcceleratedHardwareReady=False, "
        "NvidiaXID79Error) and holds it until node auto repair replaces the node (after 10 minutes)",
    )
    parser.add_argument(
        "--job", help="the training job's name (default: the training-job chart's, as the app's config renders it)"
    )
    parser.add_argument(
        "--node",
        metavar="NAME",
        help="the Kubernetes node to fault, as 'kubectl get nodes' names it (default: the first node, by name, that "
        "runs a pod of the job)",
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="where to write the drill report (one JSON object), for 'llm-infra plan --from-run FILE'",
    )
    parser.add_argument(
        "--timeout-minutes",
        type=number(above=0),
        default=30,
        metavar="MINUTES",
        help="stop watching after this many minutes; a phase not seen by then is null (default: 30)",
    )
    parser.add_argument(
        "--yes", action="store_true", help="inject the fault without asking (default: ask on the terminal)"
    )
    parser.set_defaults(handler=run_drill)


def run_drill(args: argparse.Namespace) -> int:
    from llm_infra.ops.drill import FAULTS

    config = load_config(args)
    fault = args.fault or FAULTS[config.compute][0]
    if fault not in FAULTS[config.compute]:
        allowed = ", ".join(FAULTS[config.compute])
        raise UsageError(f"--fault: {fault} is not a fault for compute={config.compute}; allowed: {allowed}")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UsageError(f"--out: folder {out.parent} does not exist")
    job = _training_job(args, config)
    target = resolve_cluster(args, config)
    try:
        with connect(args, target) as kube:
            return _drill(args, target, kube, job, fault, out)
    except KubeError as err:
        print(f"llm-infra: error: {err}", file=sys.stderr)
        return EXIT_NOT_RECOVERED


def _training_job(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    """The training job as the training-job chart renders it for this config (its kind and namespace)."""
    import cdk8s

    from llm_infra.k8s_manifests.render import build_charts

    charts = build_charts(cdk8s.App(), workload_values(args, config), jobs=True, ray=False)
    (job,) = charts["training-job"].to_json()
    if args.job:
        job["metadata"]["name"] = args.job
    return dict(job)


def _drill(
    args: argparse.Namespace, target: ClusterTarget, kube: Kube, job: dict[str, Any], fault: str, out: Path
) -> int:
    from llm_infra.ops.drill import (
        GPU_CONDITION,
        GPU_FAULT_REASON,
        GPU_REPAIR_AFTER_MINUTES,
        DrillWatch,
        gpu_nodes,
        inject,
        job_pods,
    )

    metadata = job["metadata"]
    described = f"{job['kind']} {metadata['namespace']}/{metadata['name']}"
    if kube.get(job["apiVersion"], job["kind"], metadata["name"], metadata["namespace"]) is None:
        return _fail(f"no {described} on the cluster: start the training job first (or name another with --job)")
    running = {
        p["spec"]["nodeName"]: p["metadata"]["name"]
        for p in job_pods(kube, job)
        if (p.get("status") or {}).get("phase") == "Running" and (p.get("spec") or {}).get("nodeName")
    }
    if not running:
        return _fail(f"{described} has no running pod: nothing to drill")
    node_name = args.node or sorted(running)[0]
    if node_name not in running:
        raise UsageError(f"--node: {node_name} runs no pod of {described}; its nodes: {', '.join(sorted(running))}")
    node = kube.get("v1", "Node", node_name)
    if node is None:
        return _fail(f"node {node_name} vanished")
    if not args.yes and not confirm(f"{fault} node {node_name} under {described} on {target.name}?"):
        print("aborted", file=sys.stderr)
        return EXIT_NOT_RECOVERED
    ec2 = aws_client(args, "ec2") if fault == "terminate" else None
    nodes_before = {n["metadata"]["name"] for n in gpu_nodes(kube)}
    injected_at = inject(kube, ec2, fault, node)
    print(f"{fault}: injected on {node_name} at {injected_at.isoformat()}", file=sys.stderr)
    if fault == "gpu-xid":
        print(
            f"  {GPU_CONDITION}=False ({GPU_FAULT_REASON}): EKS node auto repair acts once it has held "
            f"{GPU_REPAIR_AFTER_MINUTES} minutes; held until then",
            file=sys.stderr,
        )
    watch = DrillWatch(kube, job, node_name, fault, injected_at, {running[node_name]}, nodes_before)
    deadline = time.monotonic() + args.timeout_minutes * 60
    reported: set[str] = set()
    try:
        while True:
            watch.look()
            for phase in [p for p in watch.seen if p not in reported]:
                seconds = (watch.seen[phase] - injected_at).total_seconds()
                print(f"  {phase}: {seconds:.1f} s after the fault", file=sys.stderr, flush=True)
                reported.add(phase)
            if watch.done or time.monotonic() >= deadline:
                break
            time.sleep(args.poll_seconds)
    except KeyboardInterrupt:
        print("interrupted: writing what was seen", file=sys.stderr)
    report = watch.report(cluster=target.name, compute=target.compute)
    out.write_text(json.dumps(report) + "\n")
    if args.output == OUTPUT_JSON:
        print(json.dumps(report))
    else:
        print_table(
            ["phase", "seconds after the fault"],
            [[p, "-" if s is None else f"{s:.1f}"] for p, s in report["phases_seconds"].items()],
        )
        step = report["resumed_at_step"]
        print(f"resumed at step {step}" if step is not None else "no resume seen")
        print(f"report: {out}")
    return 0 if report["recovery_seconds"] is not None else EXIT_NOT_RECOVERED


def _fail(message: str) -> int:
    print(f"llm-infra: error: {message}", file=sys.stderr)
    return EXIT_NOT_RECOVERED
