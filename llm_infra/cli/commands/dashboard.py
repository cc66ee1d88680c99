"""``llm-infra dashboard``: draw the CloudWatch dashboard of a synthesized cluster stack."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from llm_infra.cli.terminal import OUTPUT_JSON, UsageError, add_output_flag, png_path
from llm_infra.input_files import read_json

TEMPLATE_ADVICE = (
    "pass the cluster stack's template that make synth writes: cdk.out/<project_name>-cluster.template.json"
)


def register(commands: Any) -> None:
    dashboard_help = "draw the CloudWatch dashboard of a synthesized cluster stack as a PNG"
    dashboard = commands.add_parser("dashboard", help=dashboard_help, description=dashboard_help)
    dashboard.add_argument(
        "--template",
        type=Path,
        required=True,
        metavar="FILE",
        help="the cluster stack's synthesized template, cdk.out/<project_name>-cluster.template.json (make synth)",
    )
    dashboard.add_argument(
        "--out",
        required=True,
        metavar="FILE.png",
        help="where to write the picture: a .png file, or a folder to write dashboard.png in",
    )
    add_output_flag(dashboard, "the picture's path and its widgets' titles")
    dashboard.set_defaults(handler=run_dashboard)


def run_dashboard(args: argparse.Namespace) -> int:
    from llm_infra.cli.dashboard_diagram import dashboard_body, render

    out = png_path("--out", args.out, "dashboard.png")
    template = read_json(args.template, flag="--template", advice=TEMPLATE_ADVICE)
    try:
        dashboard_body(template)
    except ValueError as err:
        raise UsageError(f"--template {args.template}: {err}") from None
    titles = render(template, out, title=args.template.name.removesuffix(".template.json") + " dashboard")
    if args.output == OUTPUT_JSON:
        print(json.dumps({"dashboard": str(out), "widgets": titles}))
    else:
        print(f"dashboard: {out} ({len(titles)} widgets: {', '.join(titles)})")
    return 0
