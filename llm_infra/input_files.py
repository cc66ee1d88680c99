"""Files a user hands to a flag: read as text whatever wrote them, and refused in one line that names the
flag, the file and what to pass instead.

Text is UTF-8, or whatever its byte-order mark says: PowerShell's ``>`` writes UTF-16 with a BOM (Windows
PowerShell 5.1's default), Notepad may write UTF-8 with one.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

# Longest mark first: UTF-32 LE's starts with UTF-16 LE's.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


class BadInput(ValueError):
    """Bad input to a flag (a file or folder it names); the message names the flag. Commands exit 2."""


class InputFileError(BadInput):
    """A file given to a flag cannot be used: the message names the flag, the file and what to do."""


def read_text(path: Path | str, *, flag: str, advice: str) -> str:
    """The text of ``path``; InputFileError (``flag path: why; advice``) when it is missing, a folder,
    unreadable or not text."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputFileError(f"{flag} {path}: no such file; {advice}") from None
    except IsADirectoryError:
        raise InputFileError(f"{flag} {path}: a folder, not a file; {advice}") from None
    except OSError as err:
        raise InputFileError(f"{flag} {path}: cannot read it ({err.strerror or err}); {advice}") from None
    try:
        return decode(data)
    except UnicodeDecodeError as err:
        raise InputFileError(f"{flag} {path}: not a text file ({err.reason} at byte {err.start}); {advice}") from None


def read_json(path: Path | str, *, flag: str, advice: str) -> Any:
    """The JSON document of ``path``, with read_text's errors and one for what is not JSON."""
    text = read_text(path, flag=flag, advice=advice)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputFileError(
            f"{flag} {path}: not JSON ({err.msg} at line {err.lineno} column {err.colno}); {advice}"
        ) from None


def decode(data: bytes) -> str:
    """UTF-8, or the encoding a byte-order mark names; UnicodeDecodeError for anything else."""
    for mark, encoding in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            return data.decode(encoding)
    return data.decode("utf-8")
