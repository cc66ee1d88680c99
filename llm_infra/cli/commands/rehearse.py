"""``llm-infra rehearse``: what ``cdk deploy`` would apply, run on a real control plane on this machine
(kube-apiserver, kube-scheduler, controllers, operators; KWOK nodes as the templates would create them),
each pod reported with its node, or the scheduler's reason why none."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from llm_infra.cli.commands.cluster_access import add_config_flags, load_config
from llm_infra.cli.terminal import OUTPUT_JSON, add_output_flag, number, print_table, whole_number

EXIT_FAILED = 1
MODELLED = (
    "EKS add-ons and Helm releases: their pods as modelled from the pinned charts "
    "(llm_infra/rehearsal/upstream_charts.py)"
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "rehearse",
        help="run what the deploy applies on a local control plane with simulated nodes: where each pod lands",
        description="Before paying for GPUs: start a real kube-apiserver, scheduler, controllers and the operators "
        "on 127.0.0.1 (built by make k8s), create KWOK nodes as the templates in cdk.out would (labels, taints, "
        "allocatable CPU, memory, GPUs, EFA, hugepages), apply the CRDs, the add-ons' and Helm releases' workloads "
        "(modelled from the pinned charts), the templates' manifests, then each job of k8s_manifests/dist and "
        "your --apply files. Reports every pod's node and phase, and the scheduler's reason for a Pending one; "
        "when the app installs Kueue's queues, the real Kueue runs too and each job it manages is reported "
        "admitted or not, with Kueue's reason. Exits 0 when every pod is Running or Succeeded and every such "
        "job admitted, 1 otherwise.",
    )
    add_config_flags(parser)
    parser.add_argument(
        "--cdk-out", metavar="DIR", help="the synthesized templates (default: cdk.out in --app-dir; make synth)"
    )
    parser.add_argument(
        "--manifests",
        metavar="DIR",
        help="the rendered manifests (default: k8s_manifests/dist in --app-dir; make synth)",
    )
    parser.add_argument(
        "--apply",
        action="append",
        default=[],
        metavar="FILE",
        type=Path,
        help="a YAML file of your objects (a job, say) to apply on the deployed cluster (repeatable; default: none)",
    )
    parser.add_argument(
        "--existing-nodes",
        type=Path,
        metavar="FILE",
        help="on an existing cluster (existing_cluster_name): its own nodes, as kubectl get nodes -o yaml "
        "writes them, added to those the templates create (default: only the templates' nodes, said in a note)",
    )
    parser.add_argument(
        "--nodes-per-group",
        type=whole_number(minimum=0),
        metavar="N",
        help="simulate at most N nodes of each node group or instance group (default: 4; 0: as many as the "
        "template asks)",
    )
    parser.add_argument(
        "--skip-app-jobs",
        action="store_true",
        help="deploy the app (the templates and the manifests' other objects) without running each job of the "
        "manifests, then your --apply files: at 256 nodes each job is a step of 15-35 s (default: run them)",
    )
    parser.add_argument(
        "--timeout",
        type=number(above=0),
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for each step's pods to be placed (default: 60)",
    )
    add_output_flag(parser, "pods, nodes, objects without a controller here, refusals and warnings")
    parser.set_defaults(handler=run_rehearse)


def run_rehearse(args: argparse.Namespace) -> int:
    from llm_infra.rehearsal import control_plane

    # SIGINT, SIGTERM (a CI runner's timeout) and SIGHUP stop the control plane and every process it started,
    # then exit 130, 143 or 129 with one line: the handlers go in first, also where SIGINT came ignored (a
    # shell's background job); the children die with this process even when it is SIGKILLed (control_plane).
    started: list[Any] = []
    try:
        with control_plane.stop_on_signals():
            return _rehearse(args, started)
    except control_plane.Stopped as stop:
        print(f"llm-infra: rehearse stopped by {stop.name}: {_what_stopped(started)}", file=sys.stderr)
        return stop.exit_code


def _what_stopped(started: list[Any]) -> str:
    if not started:
        return "nothing was started"
    plane = started[-1]
    took = f" in {plane.stop_seconds:.1f} s" if plane.stop_seconds is not None else ""
    kept = f"; the components' logs are kept in {plane.logs_kept}" if plane.logs_kept is not None else ""
    return f"the control plane and every process it started are stopped{took}{kept}"


def _rehearse(args: argparse.Namespace, started: list[Any]) -> int:
    from llm_infra.ops.kube import KubeError
    from llm_infra.rehearsal import control_plane
    from llm_infra.rehearsal.rehearse import REQUIRED_COMPONENTS, plan, rehearse

    config = load_config(args)
    app_dir = Path(args.app_dir)
    cdk_out = Path(args.cdk_out) if args.cdk_out else app_dir / "cdk.out"
    manifests = Path(args.manifests) if args.manifests else app_dir / "k8s_manifests" / "dist"
    rehearsal = plan(
        config,
        cdk_out,
        manifests,
        args.apply,
        nodes_per_group=args.nodes_per_group,
        existing_nodes=args.existing_nodes,
        app_jobs=not args.skip_app_jobs,
    )

    bin_dir = control_plane.default_bin_dir()
    absent = control_plane.missing_binaries(bin_dir, REQUIRED_COMPONENTS)
    if absent:
        return _error(
            f"the control plane is not built ({', '.join(absent)} not in {bin_dir}): run `make k8s` "
            f"(or set {control_plane.BIN_DIR_VARIABLE} to prebuilt binaries)"
        )

    def say(line: str) -> None:
        print(f"rehearse: {line}", file=sys.stderr, flush=True)

    # Kueue only where the app installs its queues: without one it would hold every job.
    components = None if rehearsal.queues else [n for n in control_plane.OPTIONAL if n != "kueue"]
    say(f"starting the control plane ({bin_dir})")
    began = time.monotonic()
    cp = control_plane.ControlPlane(bin_dir, components=_built(bin_dir, components))
    started.append(cp)
    try:
        with cp:
            up = ", ".join(n for n in (*control_plane.REQUIRED, *control_plane.OPTIONAL) if n in cp.startup_seconds)
            say(f"up in {time.monotonic() - began:.1f} s: {up}")
            for line in cp.retries:
                say(f"retried: {line}")
            report = rehearse(rehearsal, cp, timeout=args.timeout, say=say)
    except (control_plane.ControlPlaneError, KubeError) as err:
        kept = cp.logs_kept if cp.logs_kept is not None and "kept in" not in str(err) else None
        return _error(f"control plane: {err}" + (f" (the components' logs are kept in {kept})" if kept else ""))
    if args.output == OUTPUT_JSON:
        print(json.dumps(report.to_json()))
    else:
        _print_report(report)
    return 0 if report.passed else EXIT_FAILED


def _built(bin_dir: Path, components: list[str] | None) -> list[str] | None:
    """Those of ``components`` that are built (None: each one built)."""
    from llm_infra.rehearsal import control_plane

    return None if components is None else [c for c in components if not control_plane.missing_binaries(bin_dir, [c])]


def _print_report(report: Any) -> None:
    components = ", ".join(report.control_plane["components"])
    print(f"control plane: Kubernetes {report.control_plane['kubernetes']} on 127.0.0.1 ({components})")
    for note in report.control_plane["operators"].values():
        print(f"  {note}")
    print("\nnodes (KWOK, as the templates create them; GPUs and EFA where the device plugins run):")
    rows = []
    for node in report.nodes:
        allocatable = node["allocatable"]
        rows.append(
            [
                node["name"],
                node["instance_type"],
                allocatable.get("cpu", ""),
                allocatable.get("memory", ""),
                allocatable.get("hugepages-2Mi", ""),
                allocatable.get("pods", ""),
                allocatable.get("nvidia.com/gpu", "0"),
                allocatable.get("vpc.amazonaws.com/efa", "0"),
                " ".join(node["taints"]) or "-",
            ]
        )
    header = ["node", "instance type", "cpu", "memory", "hugepages-2Mi", "pods", "gpu", "efa", "taints"]
    print_table(header, rows, text_columns=2)
    steps = list(dict.fromkeys(p.step for p in report.pods))
    for step in steps:
        print(f"\n{step}" + (f"  ({MODELLED}; the templates' manifests; dist's objects)" if step == "deploy" else ""))
        rows = [[p.namespace, p.name, p.node or "-", p.phase, p.reason] for p in report.pods if p.step == step]
        print_table(["namespace", "pod", "node", "phase", "reason"], rows, text_columns=5)
    if report.jobs:
        print("\njobs (Kueue's admission):")
        rows = [[j.namespace, j.name, j.kind, "yes" if j.admitted else "no", j.reason] for j in report.jobs]
        print_table(["namespace", "job", "kind", "admitted", "reason"], rows, text_columns=5)
    sections = [
        ("no controller here (applied and validated by the API server; not rehearsed, not passed)", report.unhandled),
        ("refused", report.refused),
        ("warnings from the controllers", report.warnings),
    ]
    for title, findings in sections:
        if findings:
            print(f"\n{title}:")
            for f in findings:
                where = f"{f.namespace}/" if f.namespace else ""
                print(f"  {f.kind} {where}{f.name} ({f.origin}): {f.reason}")
    for note in report.notes:
        print(f"\nnote: {note}")
    not_done = [p for p in report.pods if not p.ok]
    verdict = "PASS" if report.passed else "FAIL"
    summary = f"{len(report.pods) - len(not_done)} of {len(report.pods)} pods Running or Succeeded"
    if report.unhandled:
        summary += f"; {len(report.unhandled)} objects with no controller here"
    if not all(j.admitted for j in report.jobs):
        summary += f"; {sum(not j.admitted for j in report.jobs)} of {len(report.jobs)} jobs not admitted by Kueue"
    if report.refused:
        summary += f"; {len(report.refused)} refused"
    if report.failed_creates:
        summary += f"; {len(report.failed_creates)} pods a controller failed to create"
    print(f"\nrehearsal: {verdict} ({summary}) in {report.seconds:.0f} s")


def _error(message: str) -> int:
    print(f"llm-infra: error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_FAILED
