"""The model presets (exact Llama parameter counts), FLOPs, data determinism and the interval formulas."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

from .conftest import WORKLOADS

sys.path.insert(0, str(WORKLOADS))
import checkpoint_interval  # noqa: E402
import data  # noqa: E402
import model  # noqa: E402

# Published parameter counts of Llama 3.2 1B, Llama 3.1 8B (= Llama 3 8B), Llama 2 7B and Llama 3.1 70B.
KNOWN_COUNTS = {
    "1b": 1_235_814_400,
    "8b": 8_030_261_248,
    "llama3-8b": 8_030_261_248,
    "llama2-7b": 6_738_415_616,
    "70b": 70_553_706_496,
}


@pytest.mark.parametrize("preset", sorted(KNOWN_COUNTS))
def test_parameter_counts_match_llama(preset: str) -> None:
    args = model.PRESETS[preset]
    assert model.parameter_count(args) == KNOWN_COUNTS[preset]
    with torch.device("meta"):
        instance = model.Transformer(args)
    assert sum(p.numel() for p in instance.parameters()) == KNOWN_COUNTS[preset]


def test_tiny_is_a_few_million_parameters() -> None:
    assert 1e6 < model.parameter_count(model.PRESETS["tiny"]) < 1e7


def test_flops_per_token() -> None:
    args = model.PRESETS["8b"]
    non_embedding = KNOWN_COUNTS["8b"] - args.vocab_size * args.dim
    expected = 6 * non_embedding + 12 * 32 * 32 * 128 * 8192
    assert model.flops_per_token(args, 8192) == expected
    # ~6N for short sequences: the attention term grows with the sequence length.
    assert model.flops_per_token(args, 1) == pytest.approx(6 * non_embedding, rel=1e-4)
    # A tied output still multiplies by its (shared) weight: the 1b preset's matmuls use every parameter.
    tied = model.PRESETS["1b"]
    assert tied.tie_embeddings
    assert model.flops_per_token(tied, 1) == pytest.approx(6 * KNOWN_COUNTS["1b"], rel=1e-4)


@pytest.mark.parametrize("tied", [False, True])
def test_meta_built_sharded_model_equals_an_eager_one(monkeypatch, tied: bool) -> None:
    # train.build_model: meta device, FSDP2, to_empty, then init: the same parameters as building the
    # whole model eagerly (and, the init being per whole parameter, for any world size).
    import torch.distributed as dist
    import train

    for name in ("MASTER_ADDR", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    args = dataclasses.replace(model.PRESETS["tiny"], tie_embeddings=tied)  # tied: one FSDP unit for both
    monkeypatch.setitem(train.PRESETS, "tiny", args)
    runtime = train.init_distributed(60)
    try:
        config = train.TrainConfig(preset="tiny", seed=3)
        sharded = train.build_model(config, runtime)
        eager = model.Transformer(args)
        eager.init_weights(3)
        full = {k: v.full_tensor() for k, v in sharded.state_dict().items()}
        assert full.keys() == eager.state_dict().keys()
        for key, value in eager.state_dict().items():
            assert torch.equal(full[key], value), key
        assert torch.equal(sharded.freqs, eager.freqs)  # the RoPE buffer is real after to_empty
        if tied:
            assert sharded.output.weight is sharded.tok_embeddings.weight
    finally:
        dist.destroy_process_group()


def test_forward_shapes_and_gqa() -> None:
    args = model.PRESETS["tiny"]
    net = model.Transformer(args)
    net.init_weights(0)
    logits = net(torch.randint(0, args.vocab_size, (2, 16)))
    assert logits.shape == (2, 16, args.vocab_size)
    assert net.layers[0].attention.wk.out_features == args.n_kv_heads * args.head_dim
    with pytest.raises(ValueError, match="do not divide"):
        model.Transformer(model.ModelArgs(dim=100, n_layers=1, n_heads=3, n_kv_heads=2, ffn_hidden=8, vocab_size=8))


def test_rope_is_a_rotation() -> None:
    freqs = model.rope_frequencies(16, 8, 10000.0)
    x = torch.randn(1, 8, 2, 16)
    assert torch.allclose(model.apply_rope(x, freqs).norm(dim=-1), x.norm(dim=-1), atol=1e-5)


def test_synthetic_data_is_deterministic_per_step_and_rank() -> None:
    make = lambda rank: data.SyntheticTokens(vocab_size=4096, seq_len=32, batch_size=4, seed=7, rank=rank, world_size=2)  # noqa: E731
    a, b = make(0).batch(5), make(0).batch(5)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.inputs[:, 1:], a.targets[:, :-1])
    assert not torch.equal(make(1).batch(5).inputs, a.inputs)
    assert not torch.equal(make(0).batch(6).inputs, a.inputs)


def test_token_file_shards_by_rank(tmp_path: Path) -> None:
    path = tmp_path / "tokens.bin"
    torch.arange(50_000, dtype=torch.int32).to(torch.uint16).numpy().tofile(path)
    shard = lambda rank: data.TokenFile(path, dtype="uint16", seq_len=16, batch_size=4, seed=1, rank=rank, world_size=2)  # noqa: E731
    first, second = shard(0).batch(3), shard(1).batch(3)
    starts = {int(row[0]) for row in torch.cat([first.inputs, second.inputs])}
    assert len(starts) == 8  # no two ranks read the same window in a step
    assert torch.equal(first.targets[:, :-1], first.inputs[:, 1:])
    assert torch.equal(shard(0).batch(3).inputs, first.inputs)
    with pytest.raises(ValueError, match="data dtype"):
        data.TokenFile(path, dtype="int8", seq_len=16, batch_size=4, seed=1, rank=0, world_size=1)


@pytest.mark.parametrize("size", [1, 2, 7, 1000, 4097])
def test_epoch_permutation_is_a_permutation_and_changes_per_epoch(size: int) -> None:
    first = [data.EpochPermutation(size, seed=5, epoch=0)[i] for i in range(size)]
    assert sorted(first) == list(range(size))
    if size > 7:
        assert first != list(range(size))
        assert first != [data.EpochPermutation(size, seed=5, epoch=1)[i] for i in range(size)]


def test_token_file_reads_every_window_once_per_epoch(tmp_path: Path) -> None:
    path = tmp_path / "tokens.bin"
    torch.arange(16 * 40 + 1, dtype=torch.int32).to(torch.uint16).numpy().tofile(path)  # 40 windows
    shards = [
        data.TokenFile(path, dtype="uint16", seq_len=16, batch_size=2, seed=1, rank=r, world_size=2) for r in (0, 1)
    ]
    epoch = [int(row[0]) // 16 for step in range(10) for s in shards for row in s.batch(step).inputs]
    assert sorted(epoch) == list(range(40))  # 10 steps x 2 ranks x 2 = one pass over all 40 windows
    second_epoch = [shards[0].window(40 + i) for i in range(40)]
    assert sorted(second_epoch) == list(range(40)) and second_epoch != [shards[0].window(i) for i in range(40)]


def test_prefetcher_returns_each_steps_batch(tmp_path: Path) -> None:
    source = data.SyntheticTokens(vocab_size=4096, seq_len=8, batch_size=2, seed=7, rank=0, world_size=1)
    loader = data.Prefetcher(source, torch.device("cpu"))
    try:
        for step in (0, 1, 2, 5, 6):  # in order (served from the prefetch) and after a jump (a resume)
            assert torch.equal(loader.batch(step).inputs, source.batch(step).inputs)
    finally:
        loader.close()


@pytest.mark.parametrize(("mtbf_minutes", "expected"), [(24 * 60, 117), (6 * 60, 57), (15, 9.1)])
def test_daly_validation_vectors(mtbf_minutes: float, expected: float) -> None:
    # Daly (2006), with a 5-minute checkpoint stall.
    assert checkpoint_interval.daly_interval(5.0, mtbf_minutes) == pytest.approx(expected, abs=0.6)


def test_young_interval_and_bad_input() -> None:
    assert checkpoint_interval.young_interval(5.0, 24 * 60) == pytest.approx(120.0)
    assert checkpoint_interval.daly_interval(30.0, 10.0) == 10.0  # stall >= 2M: checkpoint every MTBF
    with pytest.raises(ValueError, match="stall must be > 0"):
        checkpoint_interval.young_interval(0, 10)
