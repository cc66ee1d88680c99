"""Training data: seeded synthetic token streams, or a memory-mapped token file on FSx.

Both are pure functions of (step, rank): the data position of a run is its step, which the
checkpoint records, so a resumed run reads exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

TOKEN_DTYPES = {"uint16": 2, "uint32": 4}


def _seed(*parts: int) -> int:
    """A 63-bit seed mixed from integers, identical in every process (no Python hash())."""
    value = 0x9E3779B97F4A7C15
    for part in parts:
        value = (value ^ (part & 0xFFFF_FFFF_FFFF_FFFF)) * 0x100000001B3 % (1 << 64)
    return value & 0x7FFF_FFFF_FFFF_FFFF


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor  # (batch, seq) int64
    targets: torch.Tensor  # (batch, seq) int64


class SyntheticTokens:
    """Learnable synthetic sequences: ``t[i+1] = (a * t[i] + b) mod A`` over an alphabet of A tokens.

    The alphabet (the first ``min(vocab, 256)`` ids) and the small set of rules make the data
    learnable, so the loss falls within a few dozen steps (uniformly random tokens would keep it at
    log(vocab)). Seeded by (seed, step, rank).
    """

    ALPHABET = 256

    def __init__(self, *, vocab_size: int, seq_len: int, batch_size: int, seed: int, rank: int, world_size: int):
        self.vocab_size, self.seq_len, self.batch_size = vocab_size, seq_len, batch_size
        self.seed, self.rank, self.world_size = seed, rank, world_size

    def batch(self, step: int) -> Batch:
        generator = torch.Generator().manual_seed(_seed(self.seed, step, self.rank))
        alphabet = min(self.vocab_size, self.ALPHABET)
        start = torch.randint(0, alphabet, (self.batch_size, 1), generator=generator)
        rule = torch.randint(0, 4, (self.batch_size, 1), generator=generator)
        a, b = 2 * rule + 1, 7 * rule + 3
        tokens = [start]
        for _ in range(self.seq_len):
            tokens.append((a * tokens[-1] + b) % alphabet)
        sequence = torch.cat(tokens, dim=1)
        return Batch(inputs=sequence[:, :-1].contiguous(), targets=sequence[:, 1:].contiguous())


class TokenFile:
    """A flat binary file of token ids (uint16 or uint32), memory-mapped; each rank reads its shard.

    Global sample ``i`` at ``step`` for ``rank`` starts at a position drawn from a per-(seed, step)
    permutation, so ranks never read the same window in a step and a resume reads the same data.
    """

    def __init__(
        self, path: Path, *, dtype: str, seq_len: int, batch_size: int, seed: int, rank: int, world_size: int
    ) -> None:
        if dtype not in TOKEN_DTYPES:
            raise ValueError(f"data dtype: {dtype!r} is not allowed; allowed: {', '.join(TOKEN_DTYPES)}")
        size = path.stat().st_size // TOKEN_DTYPES[dtype]
        torch_dtype = {"uint16": torch.uint16, "uint32": torch.uint32}[dtype]
        self.tokens = torch.from_file(str(path), shared=False, size=size, dtype=torch_dtype)
        self.windows = (size - 1) // seq_len
        if self.windows < batch_size * world_size:
            raise ValueError(f"data: {path} holds {size} tokens, too few for {batch_size * world_size} x {seq_len}")
        self.seq_len, self.batch_size, self.seed, self.rank, self.world_size = (
            seq_len,
            batch_size,
            seed,
            rank,
            world_size,
        )

    def batch(self, step: int) -> Batch:
        generator = torch.Generator().manual_seed(_seed(self.seed, step))
        order = torch.randperm(self.windows, generator=generator)
        mine = order[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        rows = [self.tokens[w * self.seq_len : w * self.seq_len + self.seq_len + 1].to(torch.int64) for w in mine]
        sequence = torch.stack(rows)
        return Batch(inputs=sequence[:, :-1].contiguous(), targets=sequence[:, 1:].contiguous())
