"""The payload's JSON lines in a log: what ``validate``, ``drill`` and ``plan --from-run`` read."""

from __future__ import annotations

import json
from typing import Any


def json_object_in(line: str) -> dict[str, Any] | None:
    """The JSON object on a log line, after any prefix a launcher or log collector adds (a timestamp,
    ``hyperpodrun``'s ``[default0]:``)."""
    start = line.find("{")
    if start < 0:
        return None
    try:
        record = json.loads(line[start:])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def json_objects(log: str) -> list[dict[str, Any]]:
    """Every line's JSON object, in order; other lines are skipped."""
    return [record for line in log.splitlines() if (record := json_object_in(line)) is not None]
