"""Watch a GPU node's kernel log for NVIDIA Xid errors; log each one as a JSON line.

The CloudWatch observability add-on collects GPU utilisation, memory and EFA counters, but no
Xid errors, and on Amazon Linux 2023 it ships no kernel log. This runs as a DaemonSet on every
GPU node, follows ``/dev/kmsg`` from its end (a restart does not count old errors twice) and
prints ``{"event": "gpu_xid", "xid": 79, "fatal": true, ...}``; a CloudWatch metric filter on
the application log group turns the lines into the ``GpuXidErrors`` metrics and the alarm.
Beside the EKS node monitoring agent, which marks a node for node auto repair on the Xids it knows, this
stays the only Xid metric, and the alarm keeps only the fatal Xids that nothing repairs
(docs/observability.md, "The Xid monitor beside the EKS node monitoring agent").
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

# The payload's own modules: plain names when run as a script from /workloads, the package's when
# imported as llm_infra.workloads (see train.py).
if TYPE_CHECKING or not __package__:
    from health_check import parse_xid_events
else:
    from .health_check import parse_xid_events


def xid_records(lines: Iterable[str], node: str) -> Iterator[dict[str, Any]]:
    """One record per Xid in ``lines`` (``/dev/kmsg`` records or plain ``dmesg`` text); ``fatal`` as the
    health check judges it (:func:`health_check.xid_is_fatal`: Xid 154 back to "None" is not)."""
    for line in lines:
        for pci, code, fatal in parse_xid_events(line):
            yield {"event": "gpu_xid", "xid": code, "fatal": fatal, "pci": pci, "node": node}


def kmsg_lines(path: str, *, from_start: bool) -> Iterator[str]:
    """Records of the kernel ring buffer as they arrive (one ``read`` returns one record)."""
    fd = os.open(path, os.O_RDONLY)
    if not from_start:
        os.lseek(fd, 0, os.SEEK_END)
    while True:
        try:
            record = os.read(fd, 8192)
        except BrokenPipeError:  # the ring buffer overwrote records we had not read: go on
            continue
        if not record:  # a plain file (tests): end of input
            return
        yield record.decode("utf-8", errors="replace")


def watch(lines: Iterable[str], node: str, out: TextIO) -> int:
    """Print a JSON line per Xid; the number printed."""
    count = 0
    for record in xid_records(lines, node):
        out.write(json.dumps({**record, "time": round(time.time(), 3)}) + "\n")
        out.flush()
        count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kmsg", default="/dev/kmsg", help="kernel log device (a file in tests)")
    parser.add_argument("--from-start", action="store_true", help="read the whole ring buffer, not only new records")
    args = parser.parse_args(argv)
    node = os.environ.get("NODE_NAME", socket.gethostname())
    print(json.dumps({"event": "xid_monitor_started", "node": node, "kmsg": args.kmsg}), flush=True)
    watch(kmsg_lines(args.kmsg, from_start=args.from_start), node, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
