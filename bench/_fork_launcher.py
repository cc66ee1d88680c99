"""torchrun whose workers are forked from a launcher that has already imported torch and the payload.

    python bench/_fork_launcher.py <torchrun flags> bench/_train_probe.py <train.py flags>

Not a benchmark itself: recovery_bench.py's ``fork`` launcher. It parses torchrun's own flags
(``torch.distributed.run``'s parser and ``config_from_args``), imports torch, the payload and
torch._dynamo (FSDP2's first forward and a meta-device ``normal_`` import it) once, then calls
torch's ``elastic_launch`` with a function entrypoint and ``start_method="fork"``: the agent,
rendezvous, monitoring and restarts are torchrun's own, but a (re)started worker is a fork that skips
the interpreter start and every import. The script named after the torchrun flags is ignored (the
workers run train.py's ``main`` through bench/_train_probe.py). Safe to fork: the launcher has run no
torch op (no OpenMP pool, no CUDA context) before forking.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _train_probe  # noqa: E402


def main() -> None:
    _train_probe.prepare(stamps=False)
    import torch._dynamo  # noqa: F401
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, get_args_parser

    args = get_args_parser().parse_args()
    if args.master_port is None:
        args.master_port = 29500  # as torchrun's run() does
    config, _, _ = config_from_args(args)
    config.start_method = "fork"
    elastic_launch(config, _train_probe.forked_worker)(*args.training_script_args)


if __name__ == "__main__":
    main()
