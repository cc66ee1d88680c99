"""Digests of a checkpoint's files, computed as the bytes are written, checked before a load.

The algorithm is zlib's CRC-32: measured on these machines it runs at 2.3-7 GB/s on one core against
1.7-2 GB/s for SHA-256, while a checkpoint is written at 0.5-1.5 GB/s (page cache; FSx is slower). It
detects every burst error up to 32 bits and all but 2^-32 of the others: what a flipped bit or a torn
write does. It is no defence against someone who wants to forge a checkpoint (that is the folder's
permissions' job).

- **Directory storage** (DCP's file system writer): :class:`DigestingFileSystemWriter` swaps the
  writer's file system for :class:`DigestingFileSystem`, whose write streams update a CRC with every
  ``write`` call before the bytes go to the file: each rank's shard files and rank 0's ``.metadata``
  get a digest without being read back. A large buffer's CRC is computed on a helper thread while the
  same buffer is written, and while such a stream is open torch.save's own CRC of each zip record
  (computed on every save, checked on no load) is not computed (:class:`_ZipCrcSwitch`): the file's CRC
  takes its CPU time. Measured (``bench/checkpoint_bench.py``, docs/benchmarks.md): a CRC in the
  writing thread on top of torch's made a save 35 % slower; with both, the digested save is faster than
  DCP's plain one. ``.metadata`` is written as ``.metadata.tmp`` and renamed; the digest follows the
  rename.
- **Tiered storage** (amzn-sagemaker-checkpointing): each rank's shard is one buffer, sent to the
  memory tier (which checks its own xxh3-128 on put and get) and to S3 unchanged; its CRC is taken
  as the items are serialised into it (:func:`digesting_tiered_writer`) and checked on the blob the
  reader got, from either tier (:func:`verifying_tiered_reader`).

A digest is ``{"crc32": "0x1234abcd", "bytes": n}``, keyed by the file's name (directory) or
``rank_R`` (tiered); each rank's are gathered into the commit record.
"""

from __future__ import annotations

import io
import os
import threading
import zlib
from collections.abc import Callable, Generator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.utils.serialization import config as serialization_config

ALGORITHM = "crc32"
VERIFY_CHUNK = 16 * 2**20
OVERLAP_BYTES = 2**20  # a write at least this large has its CRC computed beside it, on the helper thread
Digest = dict[str, Any]


class DigestMismatch(RuntimeError):
    """A checkpoint file's bytes differ from the digest recorded when it was written."""


def digest(crc: int, size: int) -> Digest:
    return {ALGORITHM: f"0x{crc:08x}", "bytes": size}


class _DigestingStream:
    """A write stream that updates a CRC with every buffer it writes (what DCP's writer calls: ``write``,
    ``tell``, ``fileno``, ``flush``, ``close``). With a ``helper`` thread, a buffer of at least
    :data:`OVERLAP_BYTES` has its CRC computed there while this thread writes it (zlib's CRC and a file
    write both release the GIL), joined before ``write`` returns: the buffer is the caller's again, and
    the CRCs stay in order."""

    def __init__(
        self, raw: Any, errors: list[OSError] | None = None, path: str | None = None, helper: Executor | None = None
    ) -> None:
        self.raw, self.crc, self.size, self.path, self.helper = raw, 0, 0, path, helper
        self.errors = [] if errors is None else errors

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.size += view.nbytes
        if self.helper is None or view.nbytes < OVERLAP_BYTES:
            self.crc = zlib.crc32(view, self.crc)
            return self._write(view)
        crc = self.helper.submit(zlib.crc32, view, self.crc)
        try:
            return self._write(view)
        finally:
            self.crc = crc.result()

    def _write(self, view: memoryview) -> int:
        try:
            return int(self.raw.write(view))
        except OSError as exc:  # torch.save's C++ writer reports it only as "unexpected pos": keep the cause
            named = exc.filename or self.path is None
            self.errors.append(exc if named else OSError(exc.errno, exc.strerror, self.path))
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class _ZipCrcSwitch:
    """torch.save's own CRC-32 of each record in its zip file: never checked on load (PyTorch builds miniz
    without its read-side CRC checks: a flipped bit loads silently), yet computed on every save. While a
    digesting stream is open it is not computed (``torch.utils.serialization.config.save.compute_crc32``,
    a process-wide setting: counted, so that concurrent streams restore it only when the last closes);
    the file's digest, checked before every load, takes its place and its CPU time."""

    def __init__(self) -> None:
        self._lock, self._open, self._saved = threading.Lock(), 0, True

    @contextmanager
    def off(self) -> Generator[None, None, None]:
        with self._lock:
            if self._open == 0:
                self._saved = serialization_config.save.compute_crc32
                serialization_config.save.compute_crc32 = False
            self._open += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1
                if self._open == 0:
                    serialization_config.save.compute_crc32 = self._saved


_ZIP_CRC = _ZipCrcSwitch()


class DigestingFileSystem(FileSystem):
    """DCP's local file system whose write streams digest what they write (``digests``: name -> digest)."""

    def __init__(self) -> None:
        super().__init__()
        self.digests: dict[str, Digest] = {}
        self.errors: list[OSError] = []  # what the file system said when a write failed (ENOSPC, EIO...)

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None, None]:
        with super().create_stream(path, mode) as raw:
            if "w" not in mode:
                yield raw
                return
            with _ZIP_CRC.off(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-crc") as helper:
                stream = _DigestingStream(raw, self.errors, str(path), helper)
                yield stream  # type: ignore[misc]
        self.digests[Path(path).name] = digest(stream.crc, stream.size)

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        super().rename(path, new_path)
        if Path(path).name in self.digests:
            self.digests[Path(new_path).name] = self.digests.pop(Path(path).name)


class DigestingFileSystemWriter(FileSystemWriter):
    """DCP's file system writer whose files are digested as written (:attr:`digests`)."""

    def __init__(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.fs: DigestingFileSystem = DigestingFileSystem()

    @property
    def digests(self) -> dict[str, Digest]:
        return dict(self.fs.digests)

    @property
    def first_error(self) -> OSError | None:
        """The first write error of this save, as the file system raised it."""
        return self.fs.errors[0] if self.fs.errors else None


def file_digest(path: Path) -> Digest:
    """The digest of a file as it is now (read in chunks)."""
    crc, size = 0, 0
    with open(path, "rb") as handle:
        while chunk := handle.read(VERIFY_CHUNK):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return digest(crc, size)


def verify_files(directory: Path, digests: dict[str, Digest], step: int, rank: int, world_size: int) -> None:
    """Check this rank's share of a committed folder's files (every ``world_size``-th, sorted by name)
    against their recorded digests; :class:`DigestMismatch` names the step and the first bad file."""
    for name in sorted(digests)[rank::world_size]:
        check(digests[name], partial(file_digest, directory / name), step, name)


def check(expected: Digest, actual: Callable[[], Digest], step: int, name: str) -> None:
    """Raise :class:`DigestMismatch` when ``actual()`` differs from ``expected``."""
    found = actual()
    if found != expected:
        raise DigestMismatch(
            f"step {step}: {name} does not match its digest ({ALGORITHM} {found[ALGORITHM]}, {found['bytes']} bytes; "
            f"written as {expected[ALGORITHM]}, {expected['bytes']} bytes)"
        )


# ---- tiered storage (amzn-sagemaker-checkpointing; imported only when that storage is used) -------------
class _DigestingBuffer(_DigestingStream):
    """The tiered writer's per-rank buffer, digested as items are serialised into it."""

    def tell(self) -> int:
        return int(self.raw.tell())


def digesting_tiered_writer(writer_class: type, **kwargs: Any) -> Any:
    """A ``SageMakerTieredStorageWriter`` that digests this rank's shard as it is serialised
    (``digests``: ``{"rank_R": digest}``). The library serialises every item into one buffer in order
    (``_process_write_item(item, planner, buffer)``) and sends that buffer to each tier."""

    class DigestingTieredWriter(writer_class):  # type: ignore[misc, valid-type]
        def __init__(self, **inner: Any) -> None:
            super().__init__(**inner)
            self._stream: _DigestingBuffer | None = None

        def _process_write_item(self, item: Any, planner: Any, buffer: io.BytesIO) -> Any:
            if self._stream is None or self._stream.raw is not buffer:
                self._stream = _DigestingBuffer(buffer)
            with _ZIP_CRC.off():  # this shard's digest replaces torch.save's unchecked one
                return super()._process_write_item(item, planner, self._stream)

        @property
        def digests(self) -> dict[str, Digest]:
            stream = self._stream
            return {} if stream is None else {f"rank_{self.rank}": digest(stream.crc, stream.size)}

    return DigestingTieredWriter(**kwargs)


def verifying_tiered_reader(reader_class: type, digests: dict[str, Digest], step: int, /, **kwargs: Any) -> Any:
    """A ``SageMakerTieredStorageReader`` that checks each rank's shard blob (from the memory tier or S3)
    against ``digests`` before taking any item from it."""

    class VerifyingTieredReader(reader_class):  # type: ignore[misc, valid-type]
        def __init__(self, **inner: Any) -> None:
            super().__init__(**inner)
            self._checked: tuple[int, bytes] | None = None  # the shard's blob that was checked last
            self.mismatch: DigestMismatch | None = None  # the library wraps it: kept here for the cause

        def _process_read_item(self, read_item: Any, blob: bytes, planner: Any) -> None:
            shard = self.storage_data[read_item.storage_index].rank
            if self._checked is None or self._checked[0] != shard or self._checked[1] is not blob:
                name = f"rank_{shard}"
                if name in digests:
                    try:
                        check(digests[name], lambda: digest(zlib.crc32(blob), len(blob)), step, f"the shard of {name}")
                    except DigestMismatch as exc:
                        self.mismatch = exc
                        raise
                self._checked = (shard, blob)
            super()._process_read_item(read_item, blob, planner)

    return VerifyingTieredReader(**kwargs)
