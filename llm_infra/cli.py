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
import os
import sys
from collections.abc import Sequence

from llm_infra.commands import dashboard, drill, hyperpod, preflight, validate
from llm_infra.commands import plan as plan_commands
from llm_infra.errors import EXIT_FAILED, EXIT_INTERRUPTED, explain
from llm_infra.planner import PlanError
from llm_infra.terminal import EXIT_BAD_INPUT, UsageError


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Every expected failure ends in one or two lines on stderr and an exit code (2 bad
    input, 1 failed, 130 interrupted); ``--debug`` shows the traceback instead."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the boundary, not at interpreter exit
        return code
    except (PlanError, UsageError) as err:
        print(f"llm-infra: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("\nllm-infra: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `llm-infra plan ... | head -1`: the reader left; say nothing more on stdout
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as err:
        message = None if args.debug else explain(err)
        if message is None:
            raise
        print(f"llm-infra: error: {message}", file=sys.stderr)
        return EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-infra", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in (plan_commands, hyperpod, validate, drill, dashboard, preflight):
        module.register(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())
