"""The model presets (exact Llama parameter counts), FLOPs, data determinism and the interval formulas."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from llm_infra.workloads import checkpoint_interval, data, model

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

    from llm_infra.workloads import train

    for name in ("MASTER_ADDR", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    args = dataclasses.replace(model.PRESETS["tiny"], tie_embeddings=tied)  # tied: one FSDP unit for both
    monkeypatch.setitem(train.PRESETS, "tiny", args)
    runtime = train.init_distributed(60)
    try:
        config = train.TrainConfig.from_flat({"preset": "tiny", "seed": 3})
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


def test_synthetic_samples_are_a_function_of_their_global_number() -> None:
    source = data.SyntheticTokens(vocab_size=4096, seq_len=32, seed=7)
    a = source.samples(10, 4)
    assert torch.equal(a.inputs, source.samples(10, 4).inputs) and torch.equal(a.inputs[:, 1:], a.targets[:, :-1])
    # Sample g is the same whichever batch it is read in (any world size, batch size or step).
    assert torch.equal(source.samples(12, 1).inputs[0], a.inputs[2])
    assert torch.equal(torch.cat([source.samples(10, 2).inputs, source.samples(12, 2).inputs]), a.inputs)
    assert not torch.equal(source.samples(14, 4).inputs, a.inputs)
    assert not torch.equal(data.SyntheticTokens(vocab_size=4096, seq_len=32, seed=8).samples(10, 4).inputs, a.inputs)


def test_token_file_samples_are_a_function_of_their_global_number(tmp_path: Path) -> None:
    path = tmp_path / "tokens.bin"
    torch.arange(50_000, dtype=torch.int32).to(torch.uint16).numpy().tofile(path)
    source = data.TokenFile(path, dtype="uint16", seq_len=16, seed=1)
    batch = source.samples(24, 8)
    assert len({int(row[0]) for row in batch.inputs}) == 8  # eight samples, eight windows
    assert torch.equal(batch.targets[:, :-1], batch.inputs[:, 1:])
    assert torch.equal(source.samples(28, 2).inputs, batch.inputs[4:6])
    with pytest.raises(ValueError, match="data dtype"):
        data.TokenFile(path, dtype="int8", seq_len=16, seed=1)
    with pytest.raises(ValueError, match="too few"):
        data.TokenFile(path, dtype="uint16", seq_len=16, seed=1, min_samples=10_000)


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
    source = data.TokenFile(path, dtype="uint16", seq_len=16, seed=1)
    epoch = [int(row[0]) // 16 for first in range(0, 40, 4) for row in source.samples(first, 4).inputs]
    assert sorted(epoch) == list(range(40))  # samples 0..39: one pass over all 40 windows
    second_epoch = [source.window(40 + i) for i in range(40)]
    assert sorted(second_epoch) == list(range(40)) and second_epoch != [source.window(i) for i in range(40)]


def test_prefetcher_returns_each_micro_batch(tmp_path: Path) -> None:
    source = data.SyntheticTokens(vocab_size=4096, seq_len=8, seed=7)
    loader = data.Prefetcher(source, torch.device("cpu"), batch_size=2, stride=4)
    try:
        for first in (0, 4, 8, 20, 24):  # in order (served from the prefetch) and after a jump (a resume)
            assert torch.equal(loader.batch(first).inputs, source.samples(first, 2).inputs)
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
