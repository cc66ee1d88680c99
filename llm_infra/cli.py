"""The ``llm-infra`` command: plan what failures cost, simulate it, operate HyperPod nodes.

llm-infra plan --instances 256 --failure-preset llama3-16k-h100 --gpu-hours 2e6 --price-preset p5.48xlarge
llm-infra simulate ... (same flags) --trials 2000
llm-infra nodes list --cluster NAME [--unhealthy]
llm-infra nodes add --cluster NAME --group G --count N
llm-infra nodes replace|reboot --cluster NAME --node ID [--node ID ...] [--yes]
llm-infra cluster status --cluster NAME
llm-infra validate --cluster NAME [--json] [--replace-failed]
llm-infra drill --cluster NAME --out drill.json [--fault replace|reboot|terminate]
llm-infra dashboard --template cdk.out/llm-infra-cluster.template.json --out docs/dashboard.png
llm-infra preflight [--app-dir .] [-c KEY=VALUE ...] [--region R] [--output table|json]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from llm_infra.commands import dashboard, drill, hyperpod, preflight, validate
from llm_infra.commands import plan as plan_commands
from llm_infra.planner import PlanError
from llm_infra.terminal import EXIT_BAD_INPUT, UsageError


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except (PlanError, UsageError) as err:
        print(f"llm-infra: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-infra", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (plan_commands, hyperpod, validate, drill, dashboard, preflight):
        module.register(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
