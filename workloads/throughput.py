"""Throughput heartbeat: tokens/s per interval and its ratio to the recent median, even when stalled.

A hung collective stops the training loop, and with it every per-step log line; an alarm on
per-step metrics then sees no data rather than a drop. This monitor's thread logs one
``{"event": "throughput"}`` line per interval whatever the loop does: ``tokens_per_s`` over the
interval (0 when no step finished) and ``vs_median``, its ratio to the median of the last
``window`` intervals that made progress. CloudWatch alarms on ``vs_median`` (see the README).
Imports only the standard library.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any


class ThroughputMonitor:
    """Count tokens from the training loop (:meth:`add`); :meth:`tick` turns them into a record."""

    def __init__(
        self,
        emit: Callable[[dict[str, Any]], None],
        *,
        interval_s: float = 60.0,
        window: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0 or window < 1:
            raise ValueError(f"throughput monitor: interval_s {interval_s} must be > 0 and window {window} >= 1")
        self._emit, self._interval_s, self._clock = emit, interval_s, clock
        self._recent: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self._tokens, self._step = 0, 0
        self._since = clock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, tokens: int, step: int) -> None:
        """Called by the training loop after each finished step."""
        with self._lock:
            self._tokens += tokens
            self._step = step

    def tick(self) -> dict[str, Any]:
        """Close the current interval: its record (also emitted), then start the next one."""
        now = self._clock()
        with self._lock:
            tokens, step, self._tokens = self._tokens, self._step, 0
        elapsed, self._since = max(now - self._since, 1e-9), now
        rate = tokens / elapsed
        record: dict[str, Any] = {"event": "throughput", "step": step, "tokens_per_s": round(rate, 1)}
        if self._recent:
            record["vs_median"] = round(rate / statistics.median(self._recent), 4)
        if rate > 0:
            self._recent.append(rate)
        self._emit(record)
        return record

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="throughput-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.tick()
