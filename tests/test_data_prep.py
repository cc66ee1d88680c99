"""data_prep/tokenize_dataset.py on a tiny corpus with a tokenizer built offline from the `tokenizers` package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from llm_infra.workloads.data import TokenFile

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "data_prep" / "tokenize_dataset.py"

DOCUMENTS = [
    "Checkpoints are written to FSx and committed atomically.",
    "A node fails every few hours at 256 nodes; training resumes from the last complete checkpoint.",
    "EFA carries the all-reduce traffic between p5 nodes.",
]
SECRET = "llm-infra/huggingface-token"


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> Path:
    """A Llama-like byte-level BPE tokenizer (BOS added, EOS in the vocabulary), trained offline here."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(DOCUMENTS * 4, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def corpus(tmp_path: Path) -> Path:
    source = tmp_path / "raw"
    source.mkdir()
    (source / "a.txt").write_text(DOCUMENTS[0])
    (source / "b.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in DOCUMENTS[1:]) + "\n")
    return source


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_token_file_reads_back_as_the_documents(tmp_path: Path, tokenizer_file: Path) -> None:
    output = tmp_path / "tokens" / "tokens.bin"
    result = run(f"--tokenizer={tokenizer_file}", f"--input={corpus(tmp_path)}", f"--output={output}")
    assert result.returncode == 0, result.stderr
    metadata = json.loads((output.with_suffix(".json")).read_text())
    assert metadata["dtype"] == "uint16" and metadata["documents"] == 3
    assert output.stat().st_size == 2 * metadata["tokens"]
    assert not list(output.parent.glob("*.partial"))

    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    bos, eos = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    data = TokenFile(output, dtype="uint16", seq_len=8, seed=0)
    ids = data.tokens.tolist()
    texts, current = [], []
    for token in ids:
        if token == eos:
            texts.append(tokenizer.decode(current))
            current = []
        else:
            current.append(token)
    assert texts == DOCUMENTS  # each document: BOS, its tokens, EOS; in file order
    assert ids.count(bos) == 3
    batch = data.samples(0, 1)
    assert batch.inputs.shape == (1, 8) and int(batch.inputs.max()) < tokenizer.get_vocab_size()


def test_vocabulary_larger_than_the_model_is_an_error(tmp_path: Path, tokenizer_file: Path) -> None:
    result = run(
        f"--tokenizer={tokenizer_file}", f"--input={corpus(tmp_path)}", f"--output={tmp_path}/t.bin", "--max-vocab=100"
    )
    assert result.returncode != 0
    assert "more than the model's vocab_size 100" in result.stderr
    assert not (tmp_path / "t.bin").exists()


def test_an_unset_token_secret_is_a_clear_error_that_does_not_print_it(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("Xq7~random-value-cdk-generated")
    result = run(
        "--tokenizer=meta-llama/Llama-2-7b-hf",
        f"--input={corpus(tmp_path)}",
        f"--output={tmp_path}/t.bin",
        f"--hf-token-file={token_file}",
        f"--hf-token-secret={SECRET}",
    )
    assert result.returncode != 0
    assert f"secret '{SECRET}' is not set" in result.stderr
    assert f"put-secret-value --secret-id {SECRET}" in result.stderr
    assert "Xq7~random" not in result.stdout + result.stderr


def test_bad_input_is_a_clear_error(tmp_path: Path, tokenizer_file: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"body": "no text field"}\n')
    result = run(f"--tokenizer={tokenizer_file}", f"--input={bad}", f"--output={tmp_path}/t.bin")
    assert result.returncode != 0 and "bad.jsonl:1: not a JSON object with a 'text' field" in result.stderr
