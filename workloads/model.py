"""A Llama-style decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention) and its presets.

Imports only torch and the standard library: it runs unchanged in the stock DLC image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, distribute_tensor


@dataclass(frozen=True)
class ModelArgs:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    vocab_size: int
    max_seq_len: int = 2048
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def validate(self) -> None:
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(f"dim {self.dim}, n_heads {self.n_heads}, n_kv_heads {self.n_kv_heads} do not divide")


# Shapes of the published Llama models. Two are ours: tiny (5.2 M parameters) for the cluster's validation job, and
# nano (0.16 M) for the test suite, where only the machinery is under test (a launch's steps and checkpoints then
# cost almost nothing beside its start).
PRESETS: dict[str, ModelArgs] = {
    "tiny": ModelArgs(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_hidden=768, vocab_size=4096, max_seq_len=256),
    "nano": ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=192, vocab_size=512, max_seq_len=256),
    "1b": ModelArgs(
        dim=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        ffn_hidden=8192,
        vocab_size=128256,
        max_seq_len=8192,
        tie_embeddings=True,
    ),
    "8b": ModelArgs(
        dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab_size=128256, max_seq_len=8192
    ),
    "llama2-7b": ModelArgs(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=32,
        ffn_hidden=11008,
        vocab_size=32000,
        max_seq_len=4096,
        rope_theta=10000.0,
    ),
    "70b": ModelArgs(
        dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_hidden=28672, vocab_size=128256, max_seq_len=8192
    ),
}
PRESETS["llama3-8b"] = PRESETS["8b"]  # the recipe's name for Meta-Llama-3-8B


def parameter_count(args: ModelArgs) -> int:
    """Exact parameter count from the shapes (equals ``sum(p.numel())`` of :class:`Transformer`)."""
    attention = args.dim * args.n_heads * args.head_dim * 2 + args.dim * args.n_kv_heads * args.head_dim * 2
    feed_forward = 3 * args.dim * args.ffn_hidden
    block = attention + feed_forward + 2 * args.dim  # two RMSNorm weights
    embeddings = args.vocab_size * args.dim * (1 if args.tie_embeddings else 2)
    return args.n_layers * block + embeddings + args.dim  # + final norm


def flops_per_token(args: ModelArgs, seq_len: int) -> int:
    """Training FLOPs per token: 6 x (the parameters of every matmul) + attention scores (12 L H d T).

    The input embedding is a lookup, not a matmul; the output projection is a matmul whether or not
    its weight is tied to the embedding (a tied model still multiplies by it).
    """
    embedding_tables = args.vocab_size * args.dim * (1 if args.tie_embeddings else 2)
    matmul_parameters = parameter_count(args) - embedding_tables + args.vocab_size * args.dim
    return 6 * matmul_parameters + 12 * args.n_layers * args.n_heads * args.head_dim * seq_len


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_frequencies(head_dim: int, seq_len: int, theta: float, device: torch.device | None = None) -> torch.Tensor:
    """Complex rotations ``(seq_len, head_dim / 2)`` for rotary position embeddings."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv_freq)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (batch, seq, heads, head_dim) by ``freqs`` (seq, head_dim / 2)."""
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    rotated = torch.view_as_real(pairs * freqs[None, :, None, :]).flatten(3)
    return rotated.type_as(x)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        # Grouped-query attention: SDPA shares each K/V head across n_heads / n_kv_heads query heads
        # itself (no repeated copies of K and V).
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
        )
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.ffn_hidden)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), freqs)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    freqs: torch.Tensor  # RoPE rotations, a non-persistent buffer

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        args.validate()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer(
            "freqs", rope_frequencies(args.head_dim, args.max_seq_len, args.rope_theta), persistent=False
        )

    def init_weights(self, seed: int) -> None:
        """Deterministic initialisation, the same for every world size: each parameter is drawn whole
        (one at a time, so the peak is the largest parameter, not the model) and each rank keeps its
        shard. Also recomputes the RoPE buffer, so a model built on the meta device and materialised
        with ``to_empty`` is complete afterwards."""
        device = self.freqs.device
        self.freqs = rope_frequencies(self.args.head_dim, self.args.max_seq_len, self.args.rope_theta, device)
        generator = torch.Generator(device=device).manual_seed(seed)
        for name, param in self.named_parameters():
            with torch.no_grad():
                if name.endswith("norm.weight") or ".attention_norm." in name or ".ffn_norm." in name:
                    param.fill_(1.0)
                    continue
                std = 0.02 / math.sqrt(2 * self.args.n_layers) if name.endswith(("wo.weight", "w2.weight")) else 0.02
                full = torch.randn(param.shape, generator=generator, device=device) * std
                if isinstance(param, DTensor):  # sharded by FSDP2: keep this rank's shard, no communication
                    full = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
                param.copy_(full)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        freqs = self.freqs[:seq]
        for layer in self.layers:
            h = layer(h, freqs)
        return self.output(self.norm(h)).float()
