"""The ``llm-infra`` command: its parser, the error boundary around every subcommand, ``--version``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from llm_infra.cli.commands import dashboard, drill, hyperpod, preflight, rehearse, validate
from llm_infra.cli.commands import plan as plan_commands
from llm_infra.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, explain
from llm_infra.cli.terminal import EXIT_BAD_INPUT, Parser, UsageError
from llm_infra.ops.rehearse import BadInput
from llm_infra.planner import PlanError

DESCRIPTION = """Plan what failures cost a training job, check an AWS account before a deploy, validate and drill
a deployed cluster, operate HyperPod nodes.

  llm-infra plan --instances 256 --failure-preset llama3-16k-h100 --gpu-hours 2e6
  llm-infra preflight --region us-east-1
  llm-infra validate --cluster NAME
  llm-infra nodes list --cluster NAME --unhealthy

Every command takes --help. Exit codes: 0 done, 1 failed, 2 bad input, 130 interrupted."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Every expected failure ends in one or two lines on stderr and an exit code (2 bad
    input, 1 failed, 130 interrupted); ``--debug`` shows the traceback instead."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the boundary, not at interpreter exit
        return code
    except (PlanError, UsageError, BadInput) as err:
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
    parser = Parser(prog="llm-infra", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=VersionAction)
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure instead of one line")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (plan_commands, hyperpod, validate, drill, dashboard, preflight, rehearse):
        module.register(commands)
    return parser


class VersionAction(argparse.Action):
    """``--version``: this package's version and the pins it builds clusters with, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="print the version of llm-infra, of the CDK libraries and the default Kubernetes version, then exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(version_text())
        parser.exit()


def version_text() -> str:
    from importlib.metadata import version

    from llm_infra.config import KUBERNETES_VERSIONS, TrainingConfig

    default = TrainingConfig().kubernetes_version
    return (
        f"llm-infra {version('llm-infra')} (aws-cdk-lib {version('aws-cdk-lib')}, cdk8s {version('cdk8s')}; "
        f"Kubernetes {default} by default, {' or '.join(KUBERNETES_VERSIONS)} supported)"
    )


if __name__ == "__main__":
    sys.exit(main())
