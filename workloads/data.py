"""Training data: seeded synthetic token streams, or a memory-mapped token file on FSx.

Both are indexed by **global sample number**: sample ``g`` is the same sequence whatever the world
size, batch size or step it is read at. The data position of a run is the number of samples it has
consumed, which the checkpoint records, so a run resumed at any world size reads exactly the samples
an uninterrupted run would, and never one it already read.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
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
    log(vocab)). Sample ``g`` is seeded by (seed, g).
    """

    ALPHABET = 256

    def __init__(self, *, vocab_size: int, seq_len: int, seed: int) -> None:
        self.vocab_size, self.seq_len, self.seed = vocab_size, seq_len, seed

    def samples(self, first: int, count: int) -> Batch:
        """Global samples ``first .. first + count - 1``."""
        alphabet = min(self.vocab_size, self.ALPHABET)
        starts, rules = [], []
        for sample in range(first, first + count):
            generator = torch.Generator().manual_seed(_seed(self.seed, sample))
            starts.append(torch.randint(0, alphabet, (1,), generator=generator))
            rules.append(torch.randint(0, 4, (1,), generator=generator))
        start, rule = torch.stack(starts), torch.stack(rules)
        a, b = 2 * rule + 1, 7 * rule + 3
        tokens = [start]
        for _ in range(self.seq_len):
            tokens.append((a * tokens[-1] + b) % alphabet)
        sequence = torch.cat(tokens, dim=1)
        return Batch(inputs=sequence[:, :-1].contiguous(), targets=sequence[:, 1:].contiguous())


class EpochPermutation:
    """A pseudo-random permutation of ``range(size)`` per (seed, epoch), evaluated one index at a time.

    A 4-round Feistel network over the smallest even power of two >= ``size``, cycle-walking back
    into range: O(1) time and memory per sample, however large the corpus (a ``randperm`` of every
    window would cost O(corpus) per call).
    """

    def __init__(self, size: int, seed: int, epoch: int) -> None:
        if size < 1:
            raise ValueError(f"size: {size} must be >= 1")
        self.size = size
        self.half_bits = max(1, (max(size - 1, 1).bit_length() + 1) // 2)
        self.mask = (1 << self.half_bits) - 1
        self.keys = [_seed(seed, epoch, round_) for round_ in range(4)]

    def _round(self, value: int, key: int) -> int:
        return (_seed(value, key) >> 7) & self.mask

    def _encrypt(self, value: int) -> int:
        left, right = value >> self.half_bits, value & self.mask
        for key in self.keys:
            left, right = right, left ^ self._round(right, key)
        return (left << self.half_bits) | right

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < self.size:
            raise IndexError(index)
        value = self._encrypt(index)
        while value >= self.size:  # cycle-walk: stays a bijection on range(size)
            value = self._encrypt(value)
        return value


class TokenFile:
    """A flat binary file of token ids (uint16 or uint32), memory-mapped.

    Global sample ``g`` reads window ``permutation_e[g mod windows]`` of epoch ``e = g // windows``:
    every window once per epoch, in a new order each epoch, whatever the world size.
    """

    def __init__(self, path: Path, *, dtype: str, seq_len: int, seed: int, min_samples: int = 1) -> None:
        if dtype not in TOKEN_DTYPES:
            raise ValueError(f"data dtype: {dtype!r} is not allowed; allowed: {', '.join(TOKEN_DTYPES)}")
        size = path.stat().st_size // TOKEN_DTYPES[dtype]
        torch_dtype = {"uint16": torch.uint16, "uint32": torch.uint32}[dtype]
        self.tokens = torch.from_file(str(path), shared=False, size=size, dtype=torch_dtype)
        self.windows = (size - 1) // seq_len
        if self.windows < min_samples:
            raise ValueError(f"data: {path} holds {size} tokens, too few for {min_samples} x {seq_len}")
        self.seq_len, self.seed = seq_len, seed
        self._permutations: dict[int, EpochPermutation] = {}

    def window(self, sample: int) -> int:
        """The window that global sample ``sample`` reads."""
        epoch, index = divmod(sample, self.windows)
        if epoch not in self._permutations:
            self._permutations = {epoch: EpochPermutation(self.windows, self.seed, epoch)}
        return self._permutations[epoch][index]

    def samples(self, first: int, count: int) -> Batch:
        """Global samples ``first .. first + count - 1``."""
        rows = [
            self.tokens[w * self.seq_len : w * self.seq_len + self.seq_len + 1].to(torch.int64)
            for w in (self.window(sample) for sample in range(first, first + count))
        ]
        sequence = torch.stack(rows)
        return Batch(inputs=sequence[:, :-1].contiguous(), targets=sequence[:, 1:].contiguous())


class Prefetcher:
    """The next micro-batch, read in a background thread and (on GPU) pinned, so that copying it to
    the device is asynchronous and reading overlaps the step. ``batch(first)`` returns the
    ``batch_size`` global samples from ``first``; the one after is ``first + stride``."""

    def __init__(
        self, source: SyntheticTokens | TokenFile, device: torch.device, *, batch_size: int, stride: int
    ) -> None:
        self.source, self.device = source, device
        self.batch_size, self.stride = batch_size, stride
        self.pin = device.type == "cuda"
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
        self.ahead: tuple[int, Future[Batch]] | None = None

    def _read(self, first: int) -> Batch:
        batch = self.source.samples(first, self.batch_size)
        if self.pin:
            batch = Batch(inputs=batch.inputs.pin_memory(), targets=batch.targets.pin_memory())
        return batch

    def batch(self, first: int) -> Batch:
        """Samples ``first ..`` on the device; starts reading the next micro-batch (``first + stride``)."""
        prefetched = self.ahead[1] if self.ahead is not None and self.ahead[0] == first else None
        host = prefetched.result() if prefetched is not None else self._read(first)
        self.ahead = (first + self.stride, self.pool.submit(self._read, first + self.stride))
        return Batch(
            inputs=host.inputs.to(self.device, non_blocking=self.pin),
            targets=host.targets.to(self.device, non_blocking=self.pin),
        )

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
