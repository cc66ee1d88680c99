"""Training recipes for published models: shape preset, tokenizer, sequence length, optimiser."""

from __future__ import annotations

from dataclasses import dataclass, field

from llm_infra.failure_rates import instance_mtbf_hours


@dataclass(frozen=True)
class Recipe:
    """What a real-model run needs beyond the cluster: the model, its tokenizer, the schedule.

    ``tokenizer`` is a Hugging Face Hub repository (gated: the Job reads the token from Secrets
    Manager) pinned to ``tokenizer_revision``; ``vocab_size`` is the model preset's, which the
    data-preparation Job checks the tokenizer against.
    """

    name: str
    preset: str
    vocab_size: int
    tokenizer: str
    tokenizer_revision: str
    seq_len: int
    batch_size_per_gpu: int
    lr: float
    warmup_steps: int
    steps: int
    # Instance MTBF for the Young/Daly checkpoint interval: Llama 3's 16k-H100 run (the planner's
    # llama3-16k-h100 preset, 0.0161 % per instance-hour: 6,211 h). train.py measures the checkpoint stall.
    node_mtbf_hours: float = field(default_factory=lambda: instance_mtbf_hours("llama3-16k-h100"))

    def __post_init__(self) -> None:
        if self.seq_len < 2 or self.batch_size_per_gpu < 1 or self.steps < 1 or self.warmup_steps < 0:
            raise ValueError(f"recipe {self.name}: seq_len >= 2, batch_size_per_gpu >= 1, steps >= 1 required")

    def token_dtype(self) -> str:
        return "uint16" if self.vocab_size <= 2**16 else "uint32"


RECIPES: dict[str, Recipe] = {
    # Llama 2 7B: 4k context, 32k SentencePiece-BPE vocabulary, peak lr 3e-4 (Touvron et al., 2023).
    "llama2-7b": Recipe(
        name="llama2-7b",
        preset="llama2-7b",
        vocab_size=32000,
        tokenizer="meta-llama/Llama-2-7b-hf",
        tokenizer_revision="main",
        seq_len=4096,
        batch_size_per_gpu=2,
        lr=3e-4,
        warmup_steps=2000,
        steps=250_000,
    ),
    # Llama 3 8B: 8k context, 128k tiktoken-BPE vocabulary.
    "llama3-8b": Recipe(
        name="llama3-8b",
        preset="llama3-8b",
        vocab_size=128256,
        tokenizer="meta-llama/Meta-Llama-3-8B",
        tokenizer_revision="main",
        seq_len=8192,
        batch_size_per_gpu=1,
        lr=3e-4,
        warmup_steps=2000,
        steps=250_000,
    ),
}
