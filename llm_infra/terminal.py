"""What every ``llm-infra`` command shares: its bad-input error, tables and a progress bar."""

from __future__ import annotations

import sys

EXIT_BAD_INPUT = 2


class UsageError(ValueError):
    """Bad input to a command; the message names the flag. The command exits with EXIT_BAD_INPUT."""


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                str(cell).rjust(w) if i else str(cell).ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def progress_bar(done: int, total: int, width: int = 30) -> None:
    filled = width * done // total if total else width
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} running", end="", file=sys.stderr, flush=True)
