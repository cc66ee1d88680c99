"""``llm-infra dashboard``: draw the CloudWatch dashboard of a synthesized cluster stack."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from llm_infra.terminal import UsageError


def register(commands: Any) -> None:
    dashboard = commands.add_parser("dashboard", help="draw the CloudWatch dashboard of a synthesized cluster stack")
    dashboard.add_argument("--template", type=Path, required=True, help="cdk.out/<project>-cluster.template.json")
    dashboard.add_argument("--out", type=Path, required=True, metavar="FILE.png")
    dashboard.set_defaults(handler=run_dashboard)


def run_dashboard(args: argparse.Namespace) -> int:
    from llm_infra.dashboard_diagram import dashboard_body, render

    if not args.template.is_file():
        raise UsageError(f"--template: {args.template} does not exist; run `make synth` first")
    template = json.loads(args.template.read_text())
    try:
        dashboard_body(template)
    except ValueError as err:
        raise UsageError(f"--template {args.template}: {err}") from None
    titles = render(template, args.out, title=args.template.name.removesuffix(".template.json") + " dashboard")
    print(json.dumps({"dashboard": str(args.out), "widgets": titles}))
    return 0
