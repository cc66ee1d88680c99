"""The same Llama-style model under Ray Train's TorchTrainer, with checkpoints and automatic retries.

    python ray_train.py --storage-path /fsx/ray/results --name ray-train --num-workers 16 --use-gpu

Checkpoints are reported to Ray Train (``storage_path`` on FSx); ``FailureConfig(max_failures)``
restarts the worker group after a failure and the loop resumes from the latest reported
checkpoint. Rerunning with the same ``--name`` resumes too. Needs ``ray[train]`` (not in the DLC
image: use a Ray image, or the Dockerfile). The last stdout line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def train_loop(config: dict[str, Any]) -> None:
    """Runs in every Ray Train worker."""
    import ray.train
    import ray.train.torch
    import torch
    import torch.nn.functional as F
    from data import SyntheticTokens
    from model import PRESETS, Transformer

    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    args = PRESETS[config["preset"]]
    module = Transformer(args)
    module.init_weights(config["seed"])
    net = ray.train.torch.prepare_model(module)  # DDP across the workers
    optimizer = torch.optim.AdamW(net.parameters(), lr=config["lr"])
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            state = torch.load(Path(directory) / "state.pt", weights_only=False)
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    data = SyntheticTokens(
        vocab_size=args.vocab_size,
        seq_len=config["seq_len"],
        batch_size=config["batch_size"],
        seed=config["seed"],
        rank=rank,
        world_size=world_size,
    )
    device = ray.train.torch.get_device()
    fault_marker = Path(config["fault_marker"])
    for step in range(start, config["steps"]):
        if step == config["fail_at_step"] and rank == 0 and not fault_marker.exists():
            fault_marker.write_text(str(step))  # fires once per job: a transient fault
            raise RuntimeError(f"injected fault at step {step}")
        batch = data.batch(step)
        logits = net(batch.inputs.to(device))
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.to(device).flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        if done % config["checkpoint_every"] == 0 or done == config["steps"]:
            metrics = {"step": done, "loss": loss.item(), "resumed_from": start or None}
            with tempfile.TemporaryDirectory() as directory:
                reported = None
                if rank == 0:
                    torch.save(
                        {
                            "model": module.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "step": done,
                        },
                        Path(directory) / "state.pt",
                    )
                    reported = ray.train.Checkpoint.from_directory(directory)
                ray.train.report(metrics, checkpoint=reported)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    parser.add_argument("--storage-path", required=True, help="shared storage for results, e.g. /fsx/ray/results")
    parser.add_argument("--name", default="ray-train")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--use-gpu", action="store_true")
    parser.add_argument("--max-failures", type=int, default=3)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fail-at-step", type=int, default=-1, help="inject one worker failure (tests, drills)")
    args = parser.parse_args(argv)
    if args.num_workers < 1 or args.steps < 1 or args.checkpoint_every < 1:
        parser.error("--num-workers, --steps and --checkpoint-every must be >= 1")

    import ray.train
    from ray.train.torch import TorchTrainer

    run_dir = Path(args.storage_path) / args.name
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {
        k: getattr(args, k)
        for k in ("preset", "steps", "checkpoint_every", "batch_size", "seq_len", "lr", "seed", "fail_at_step")
    }
    config["fault_marker"] = str(run_dir / ".fault-injected")
    trainer = TorchTrainer(
        train_loop,
        train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=args.num_workers, use_gpu=args.use_gpu),
        run_config=ray.train.RunConfig(  # type: ignore[call-arg]  # Train V2 RunConfig; the stubs show V1
            name=args.name,
            storage_path=args.storage_path,
            failure_config=ray.train.FailureConfig(max_failures=args.max_failures),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
            worker_runtime_env={
                "env_vars": {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
            },
        ),
    )
    result = trainer.fit()
    metrics = result.metrics or {}
    summary = {
        "event": "summary",
        **{k: metrics.get(k) for k in ("step", "loss", "resumed_from")},
        "checkpoint": result.checkpoint.path if result.checkpoint else None,
        "error": repr(result.error) if result.error else None,
    }
    print(json.dumps(summary), flush=True)
    return 0 if result.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
