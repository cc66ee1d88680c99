"""Tokenize a text dataset into the token file that ``workloads/train.py --data`` reads.

Input: a ``.txt`` file (one document), a ``.jsonl`` file (one document per line, in its ``text``
field), or a folder of them (read in sorted order). In the cluster the folder is the FSx view of
the S3 dataset prefix (the data repository association imports the objects on first read).

Output: ``tokens.bin``, the token ids of every document (BOS/EOS as the tokenizer adds them, EOS
appended where it does not) as little-endian uint16 (vocabularies up to 65,536) or uint32, and
``tokens.json`` beside it (dtype, counts, tokenizer). Both are written to temporary names and
renamed when complete, so a training job never reads half a file.

The tokenizer is a ``tokenizer.json`` path or a Hugging Face Hub repository id. For gated repos
(Llama) the token is read from ``--hf-token-file`` (``$HF_TOKEN_PATH``, put there by the pod's
init container from Secrets Manager); it is passed to the Hub client and never printed.
Needs the ``tokenizers`` package besides the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer

EOS_CANDIDATES = ("</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>")
TYPECODES = {"uint16": "H", "uint32": "I"}
BATCH_DOCUMENTS = 256


class DataPrepError(SystemExit):
    """A clear, non-zero exit: what is wrong and how to fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"tokenize_dataset.py: {message}")


def read_hf_token(path: Path, secret_name: str) -> str:
    """The Hugging Face token in ``path``; an error (without the file's content) if it is not one."""
    if not path.is_file():
        raise DataPrepError(f"no Hugging Face token file at {path} (the init container writes it from {secret_name})")
    token = path.read_text().strip()
    if not token.startswith("hf_"):
        raise DataPrepError(
            f"the Hugging Face token in Secrets Manager secret {secret_name!r} is not set (it holds the random "
            f"value CDK created). Put yours: aws secretsmanager put-secret-value --secret-id {secret_name} "
            "--secret-string hf_..."
        )
    return token


def load_tokenizer(name: str, *, revision: str, hf_token: str | None) -> Tokenizer:
    if Path(name).is_file():
        return Tokenizer.from_file(name)
    return Tokenizer.from_pretrained(name, revision=revision, token=hf_token)


def documents(source: Path) -> Iterator[str]:
    """The documents of a file or a folder (``*.txt`` and ``*.jsonl``, sorted by path)."""
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    files = [f for f in files if f.suffix in (".txt", ".jsonl")]
    if not files:
        raise DataPrepError(f"--input {source}: no .txt or .jsonl files")
    for file in files:
        if file.suffix == ".txt":
            yield file.read_text(encoding="utf-8")
            continue
        with file.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    try:
                        yield json.loads(line)["text"]
                    except (json.JSONDecodeError, KeyError, TypeError):
                        raise DataPrepError(f"{file}:{number}: not a JSON object with a 'text' field") from None


def eos_id(tokenizer: Tokenizer, eos_token: str | None) -> int | None:
    """The id of ``eos_token``, or of the first known end-of-sequence token the vocabulary has."""
    for candidate in (eos_token,) if eos_token else EOS_CANDIDATES:
        token_id = tokenizer.token_to_id(candidate)
        if token_id is not None:
            return token_id
    if eos_token:
        raise DataPrepError(f"--eos-token: {eos_token!r} is not in the tokenizer's vocabulary")
    return None


def batches(items: Iterator[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def tokenize(
    tokenizer: Tokenizer, source: Path, output: Path, *, eos: int | None, max_vocab: int | None
) -> dict[str, object]:
    """Write ``output`` and its ``.json`` metadata; the metadata."""
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    if max_vocab is not None and vocab > max_vocab:
        raise DataPrepError(f"the tokenizer has {vocab} tokens, more than the model's vocab_size {max_vocab}")
    dtype = "uint16" if vocab <= 2**16 else "uint32"
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    total = docs = 0
    with partial.open("wb") as out:
        for batch in batches(documents(source), BATCH_DOCUMENTS):
            ids = array(TYPECODES[dtype])
            for encoding in tokenizer.encode_batch(batch):
                ids.extend(encoding.ids)
                if eos is not None and (not encoding.ids or encoding.ids[-1] != eos):
                    ids.append(eos)
            if sys.byteorder != "little":
                ids.byteswap()
            ids.tofile(out)
            total += len(ids)
            docs += len(batch)
        out.flush()
        os.fsync(out.fileno())
    metadata: dict[str, object] = {
        "dtype": dtype,
        "tokens": total,
        "documents": docs,
        "vocab_size": vocab,
        "eos_id": eos,
    }
    os.replace(partial, output)
    metadata_file = output.with_suffix(".json")
    partial_metadata = metadata_file.with_name(metadata_file.name + ".partial")
    partial_metadata.write_text(json.dumps(metadata, indent=2) + "\n")
    os.replace(partial_metadata, metadata_file)
    return metadata


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json path or Hub repo id")
    parser.add_argument("--revision", default="main", help="Hub revision (a commit pins it)")
    parser.add_argument("--input", type=Path, required=True, help=".txt/.jsonl file or folder")
    parser.add_argument("--output", type=Path, required=True, help="token file to write, e.g. /fsx/data/tokens/x.bin")
    parser.add_argument("--hf-token-file", type=Path, default=os.environ.get("HF_TOKEN_PATH"))
    parser.add_argument("--hf-token-secret", default="the Hugging Face token secret", help="named in errors")
    parser.add_argument("--eos-token", help="appended after each document (default: the vocabulary's EOS)")
    parser.add_argument("--max-vocab", type=int, help="fail if the tokenizer has more tokens (the model's vocab)")
    args = parser.parse_args(argv)

    hf_token = None
    if not Path(args.tokenizer).is_file() and args.hf_token_file is not None:
        hf_token = read_hf_token(args.hf_token_file, args.hf_token_secret)
    tokenizer = load_tokenizer(args.tokenizer, revision=args.revision, hf_token=hf_token)
    metadata = tokenize(
        tokenizer, args.input, args.output, eos=eos_id(tokenizer, args.eos_token), max_vocab=args.max_vocab
    )
    print(json.dumps({"event": "tokenized", "output": str(args.output), "tokenizer": args.tokenizer, **metadata}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
