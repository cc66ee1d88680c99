"""What every ``llm-infra`` command shares: its argument parser and bad-input error, the ``--output``
flag, tables, and progress on stderr."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

EXIT_BAD_INPUT = 2
OUTPUT_TABLE = "table"
OUTPUT_JSON = "json"


class UsageError(ValueError):
    """Bad input to a command; the message names the flag. The command exits with EXIT_BAD_INPUT."""


class Parser(argparse.ArgumentParser):
    """The parser of ``llm-infra`` and, through ``add_subparsers``, of each of its subcommands.

    A usage error is two lines, as kubectl's: what is wrong and where the help is, not the usage block;
    an unknown flag is the error of the subcommand it was given to, which points to that one's help.
    Flags are never abbreviated, so that ``--node`` cannot silently mean ``--node-count``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]  # one signature for typeshed's overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed, unknown

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\nSee '{self.prog} --help'.\n")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        sys.stdout.flush()  # what --help or --version printed: a closed pipe shows inside the error boundary
        super().exit(status, message)


def number(
    *, minimum: float | None = None, above: float | None = None, maximum: float | None = None
) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number: ``inf`` and ``nan`` are refused (JSON cannot hold them,
    and no flag of ours means them), and so is a value below ``minimum``, not above ``above`` or above
    ``maximum``. The message says what the flag takes; argparse adds the flag's name."""
    bounds = [
        *([f">= {minimum:g}"] if minimum is not None else []),
        *([f"> {above:g}"] if above is not None else []),
        *([f"<= {maximum:g}"] if maximum is not None else []),
    ]
    wanted = f"a finite number {' and '.join(bounds)}".rstrip()

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
        if (
            not math.isfinite(value)
            or (minimum is not None and value < minimum)
            or (above is not None and not value > above)
            or (maximum is not None and value > maximum)
        ):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value

    parse.__name__ = "number"  # argparse names the type in its own messages
    return parse


def whole_number(*, minimum: int = 0) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value

    parse.__name__ = "whole number"
    return parse


def png_path(flag: str, text: str, default_name: str) -> Path:
    """Where a picture flag writes: the ``.png`` file named, or ``default_name`` in a folder named; anything
    else is a UsageError before any work, so the file written is always the one the output names."""
    path = Path(text)
    if path.is_dir():
        return path / default_name
    if path.suffix.lower() != ".png":
        raise UsageError(
            f"{flag}: {text}: the picture is a PNG: give a file name ending in .png, or a folder to write "
            f"{default_name} in"
        )
    if not path.parent.is_dir():
        raise UsageError(f"{flag}: {text}: there is no folder {path.parent} to write it in")
    return path


def add_output_flag(parser: argparse.ArgumentParser, json_holds: str) -> None:
    """``--output table|json`` (default table), and ``--json`` for ``--output json``. The command
    reads ``args.output`` (OUTPUT_TABLE or OUTPUT_JSON); ``json_holds`` says what the JSON is."""
    parser.add_argument(
        "--output",
        choices=(OUTPUT_TABLE, OUTPUT_JSON),
        default=OUTPUT_TABLE,
        help=f"table: for reading (default); json: {json_holds}, on stdout, for scripts",
    )
    parser.add_argument(
        "--json", dest="output", action="store_const", const=OUTPUT_JSON, help="the same as --output json"
    )


class RenamedFlag(argparse.Action):
    """The old spelling of a renamed flag, hidden from the help: giving it is a usage error that names the
    new one (``new``), so that it never means something else silently."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        parser.error(f"{self.option_strings[0]} is now {self.new}")


def confirm(question: str) -> bool:
    """Ask ``question`` on stderr (stdout keeps the command's output); True for y or yes. With nothing to
    answer (no terminal, stdin closed) the EOFError stays, on a line of its own: the error boundary says
    to pass --yes."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:
        print(file=sys.stderr)
        raise
    return answer.strip().lower() in ("y", "yes")


def print_table(header: list[str], rows: list[list[str]], *, text_columns: int = 1) -> None:
    """Columns two spaces apart: the first ``text_columns`` left-aligned, the rest (numbers) right-aligned."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [
            str(cell).ljust(w) if i < text_columns else str(cell).rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())


class Progress:
    """How far a wait got, on stderr: on a terminal a bar redrawn in place; elsewhere (a CI log, a file) a
    plain line each time the count changes. Call :meth:`close` before printing anything else."""

    def __init__(self, width: int = 30) -> None:
        self._width = width
        self._bar_open = False
        self._last: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if sys.stderr.isatty():
            filled = self._width * done // total if total else self._width
            bar = f"[{'#' * filled}{'.' * (self._width - filled)}]"
            print(f"\r{bar} {done}/{total} running", end="", file=sys.stderr, flush=True)
            self._bar_open = True
        elif (done, total) != self._last:
            print(f"{done}/{total} running", file=sys.stderr, flush=True)
        self._last = (done, total)

    def close(self) -> None:
        """End the bar's line; the next count is printed even when it equals the last one."""
        if self._bar_open:
            print(file=sys.stderr, flush=True)
            self._bar_open = False
        self._last = None
