"""A resume applies the flags the user gives (issue 30, item 5): the learning rate, weight decay and
schedule given now win over the checkpoint's, the ``start`` line lists every flag that changed, and a
change that cannot apply (another model shape) is refused naming both."""

from __future__ import annotations

import json
from pathlib import Path

from llm_infra.workloads import train

from .conftest import SMALL

RUN = [*SMALL, "--log-every=1", "--checkpoint-every=2", "--warmup-steps=4"]


def events(stdout: str, name: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{") and f'"event": "{name}"' in line]


def test_lr_and_weight_decay_given_on_resume_are_the_ones_used(torch_launch, tmp_path: Path) -> None:
    first = torch_launch.run("train.py", [*RUN, "--steps=4", f"--checkpoint-dir={tmp_path}"], timeout=240)
    assert first.returncode == 0, first.stderr[-3000:]
    args = [*RUN, "--steps=6", f"--checkpoint-dir={tmp_path}", "--lr=0.0003", "--weight-decay=0.05"]
    resumed = torch_launch.run("train.py", args, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (start,) = events(resumed.stdout, "start")
    assert start["resumed_from"] == 4
    assert {"lr 0.003 -> 0.0003", "weight_decay 0.1 -> 0.05", "steps 4 -> 6"} <= set(start["changed"])
    # The lr each step used: 0.0003 on the new schedule (warm-up done at step 4: cosine over steps 4..6),
    # not the checkpoint's 0.003 that the restored scheduler's base rates would bring back.
    schedule = train.lr_lambda(train.parse_config(["--steps=6", "--warmup-steps=4"]))
    used = {r["step"]: r["lr"] for r in events(resumed.stdout, "step")}
    assert used == {5: 0.0003 * schedule(4), 6: 0.0003 * schedule(5)}
