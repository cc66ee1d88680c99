"""``llm-infra validate --cluster NAME``: health checks on every GPU node, the NCCL gate, then a small
training run with an injected fault that must resume; one verdict, nothing left running."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llm_infra.cli import EXIT_INTERRUPTED
from llm_infra.cli.commands.cluster_access import (
    ClusterTarget,
    add_cluster_flags,
    connect,
    load_config,
    resolve_cluster,
    workload_values,
)
from llm_infra.cli.errors import EXIT_FAILED
from llm_infra.cli.terminal import (
    OUTPUT_JSON,
    Progress,
    RenamedFlag,
    UsageError,
    confirm,
    number,
    print_table,
    whole_number,
)
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.ops.kube import Kube, KubeError


def register(commands: Any) -> None:
    validate_help = (
        "run the ValidationChart's jobs on a cluster (health on every GPU node, the NCCL gate, a training run "
        "with a fault that must resume); one verdict, nothing left running"
    )
    parser = commands.add_parser("validate", help=validate_help, description=validate_help)
    add_cluster_flags(parser, "the whole report, every stage and node")
    parser.add_argument(
        "--node-count",
        type=whole_number(minimum=1),
        metavar="N",
        help="how many GPU nodes to validate (default: every schedulable GPU node)",
    )
    parser.add_argument("--nodes", action=RenamedFlag, new="--node-count N")
    parser.add_argument(
        "--start-timeout",
        type=number(above=0),
        default=900,
        metavar="SECONDS",
        help="seconds until every pod of a job is scheduled, else the stage fails with the cause (default: 900)",
    )
    parser.add_argument(
        "--timeout-minutes",
        type=number(above=0),
        default=60,
        metavar="MINUTES",
        help="minutes each job may run (default: 60)",
    )
    parser.add_argument(
        "--apply-base",
        action="store_true",
        help="server-side apply the base and FSx charts first, as cdk deploy does; they stay (default: only check "
        "that they are there)",
    )
    parser.add_argument(
        "--replace-existing",
        action="store_true",
        help="delete validation jobs an earlier run left, then start (default: stop and name them)",
    )
    parser.add_argument(
        "--replace-failed",
        action="store_true",
        help="HyperPod: label the nodes that fail the health check for replacement, after asking (default: only "
        "report them)",
    )
    parser.add_argument("--yes", action="store_true", help="label without asking, with --replace-failed (default: ask)")
    parser.set_defaults(handler=run_validate)


class StderrUi:
    """Stage lines and the progress of each stage on stderr (stdout keeps the table or the JSON)."""

    def __init__(self) -> None:
        self.progress = Progress()

    def log(self, message: str) -> None:
        self.progress.close()
        print(message, file=sys.stderr, flush=True)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI runner cancelling) cleans up like Ctrl-C."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_validate(args: argparse.Namespace) -> int:
    config = load_config(args)
    if args.replace_failed and config.compute != "hyperpod":
        raise UsageError("--replace-failed: only with compute=hyperpod (HyperPod replaces labelled nodes)")
    target = resolve_cluster(args, config)
    try:
        with connect(args, target) as kube:
            return _validate(args, config, target, kube)
    except KubeError as err:
        print(f"llm-infra: error: {err}", file=sys.stderr)
        return EXIT_FAILED


def _validate(args: argparse.Namespace, config: TrainingConfig, target: ClusterTarget, kube: Kube) -> int:
    from llm_infra.ops.validation_run import (
        Timing,
        ValidationRun,
        apply_base,
        chart_objects,
        existing_jobs,
        missing_base,
        payload_drift,
        schedulable_gpu_nodes,
    )

    ui = StderrUi()
    values = workload_values(args, config)
    objects = chart_objects(values)
    usable, gpu_nodes = schedulable_gpu_nodes(kube, objects.jobs)
    if not usable:
        found = f"{len(gpu_nodes)} GPU node(s), none that the jobs may use" if gpu_nodes else "no GPU node"
        return _fail(
            f"no schedulable GPU node (labelled llm-infra.aws/node-role=gpu, Ready, not cordoned, allowed by the "
            f"jobs' node affinity): {found}; nothing was started"
        )
    if args.node_count and args.node_count > len(usable):
        return _fail(
            f"--node-count: {args.node_count} requested, {len(usable)} schedulable GPU node(s): {', '.join(usable)}"
        )
    count = args.node_count or len(usable)
    if count != config.gpu_nodes:  # the jobs span the nodes there are: the chart sizes each job from gpu_nodes
        try:
            sized = config.with_(gpu_nodes=count, gpu_nodes_min=None, gpu_nodes_max=None)
        except ConfigError as err:
            raise UsageError(str(err)) from None
        objects = chart_objects(workload_values(args, sized))
    if args.apply_base:
        if values.fsx is None and kube.get("v1", "PersistentVolumeClaim", values.pvc_name, values.namespace) is None:
            raise UsageError(
                f"--apply-base: the FSx claim {values.namespace}/{values.pvc_name} is missing and {args.outputs_file} "
                "has no FSx ids (cdk deploy --outputs-file cdk-outputs.json writes them)"
            )
        for applied in apply_base(kube, objects):
            ui.log(f"applied {applied}")
    else:
        missing = missing_base(kube, objects, values)
        if missing:
            needed = ", ".join(missing)
            return _fail(
                f"the jobs need {needed}: deploy the app (cdk deploy) or pass --apply-base; nothing was started"
            )
        drift = payload_drift(kube, objects)
        if drift:
            files = ", ".join(drift)
            ui.log(f"warning: the cluster's payload differs from this checkout's ({files}); --apply-base updates it")
    timing = Timing(
        poll_seconds=args.poll_seconds,
        start_timeout_seconds=args.start_timeout,
        timeout_seconds=args.timeout_minutes * 60,
        cleanup_timeout_seconds=max(60.0, args.poll_seconds * 10),
    )
    run = ValidationRun(kube, timing, log=ui.log, progress=ui.progress)
    leftover = existing_jobs(kube, objects.jobs)
    if leftover and not args.replace_existing:
        return _fail(f"{', '.join(leftover)} already exist (an earlier run?): delete them or pass --replace-existing")
    if leftover:
        stale = ValidationRun(kube, timing, log=ui.log, progress=ui.progress, created=list(objects.jobs))
        if stale.cleanup():
            return _fail("the earlier run's jobs and pods are still terminating; try again shortly")
    ui.log(f"validating {target.name} ({target.compute}) on {count} of its schedulable GPU nodes: {', '.join(usable)}")
    results = []
    interrupted = False
    with sigterm_as_interrupt():
        try:
            results = run.run(objects.jobs)
        except KeyboardInterrupt:
            interrupted = True
            ui.log("interrupted: deleting the validation jobs")
        finally:
            left = run.cleanup()
    ui.progress.close()
    if left:
        ui.log(f"warning: still terminating after cleanup (jobs, pods): {', '.join(left)}")
    if interrupted:
        return EXIT_INTERRUPTED
    replaced = _replace_failed(args, kube, results, ui) if args.replace_failed else []
    passed = bool(results) and all(r.passed for r in results)
    ran_on = sorted({p.node for r in results for p in r.pods if p.node != "?"})
    report = {
        "kind": "llm-infra/validation",
        "cluster": target.name,
        "compute": target.compute,
        "nodes": ran_on or usable[:count],
        "stages": [r.to_json() for r in results],
        "labelled_for_replacement": replaced,
        "leftover_pods": left,
        "verdict": "pass" if passed else "fail",
    }
    if args.output == OUTPUT_JSON:
        print(json.dumps(report))
    else:
        _print_report(report, results)
    return 0 if passed else EXIT_FAILED


def _replace_failed(args: argparse.Namespace, kube: Kube, results: list[Any], ui: StderrUi) -> list[str]:
    from llm_infra.ops.hyperpod import PENDING_REPLACEMENT, request_node_recovery

    failed = [node for r in results if r.stage == "health" for node in r.failed_nodes]
    if not failed:
        return []
    if not args.yes:
        ui.progress.close()
        if not confirm(f"label {len(failed)} node(s) for HyperPod replacement: {', '.join(failed)}?"):
            ui.log("not labelled")
            return []
    for node in failed:
        request_node_recovery(kube, node, PENDING_REPLACEMENT)
        ui.log(f"labelled {node} {PENDING_REPLACEMENT}")
    return failed


def _print_report(report: dict[str, Any], results: list[Any]) -> None:
    problems: dict[str, list[str]] = {}
    for result in results:
        for pod in result.pods:
            if pod.node in result.failed_nodes and pod.verdict:
                failing = [
                    c["name"] for c in pod.verdict.get("checks") or [] if not c.get("ok") and not c.get("skipped")
                ]
                problems.setdefault(pod.node, []).extend(failing)
            elif pod.node in result.failed_nodes:
                problems.setdefault(pod.node, []).append(f"no verdict (exit {pod.exit_code})")
    header = ["node", *(r.stage for r in results), "problems"]
    print_table(
        header,
        [[node, *(r.on_node(node) for r in results), ", ".join(problems.get(node, []))] for node in report["nodes"]],
        text_columns=len(header),
    )
    print()
    print_table(
        ["stage", "job", "outcome", "detail"], [[r.stage, r.job, r.outcome, r.detail] for r in results], text_columns=4
    )
    if report["labelled_for_replacement"]:
        print(f"labelled for replacement: {', '.join(report['labelled_for_replacement'])}")
    print(f"validation of {report['cluster']}: {report['verdict'].upper()}")


def _fail(message: str) -> int:
    print(f"llm-infra: error: {message}", file=sys.stderr)
    return EXIT_FAILED
