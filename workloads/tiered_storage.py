"""HyperPod managed tiered checkpointing as a checkpoint storage: every save to the CPU memory tier
the cluster runs on its nodes, every N-th save to S3 as well, through PyPI ``amzn-sagemaker-checkpointing``
(1.1.3, an optional import: without it, or without the tier, the run checkpoints to its directory).

Sources (read 2026-12-03): AWS, "Set up managed tiered checkpointing"
(https://docs.aws.amazon.com/sagemaker/latest/dg/managed-tier-checkpointing-setup.html: enable
``TieredStorageConfig`` on the cluster, install the library in the image, save with DCP through
``SageMakerTieredStorageWriter``, load with ``SageMakerTieredStorageReader``), and the package's own
source: ``config/in_memory_client.py`` (the memory tier is the HTTP service
``ai-toolkit-gossip-headless.aws-hyperpod.svc.cluster.local:9200``, found by cluster DNS; the writer
and reader take no other address), ``checkpointing/filesystem/writer.py`` (each rank's shards go to
the memory tier, and to S3 when ``save_to_s3``; the coordinator writes the DCP metadata last) and
``reader.py`` (given a step, memory first, then S3 for every rank when a memory read fails).
Imports only torch and stdlib at module level.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING or not __package__:
    from checkpoint_digests import digesting_tiered_writer, verifying_tiered_reader
else:
    from .checkpoint_digests import digesting_tiered_writer, verifying_tiered_reader

STORAGE_NAME = "tiered"
MEMORY_TIER = "memory"
S3_TIER = "s3"
PROBE_TIMEOUT_SECONDS = 5.0
# Steps the memory tier keeps per namespace, whatever we ask (the client creates every namespace with
# its default: storage/clients/inmemory/inmemory_client.py ``steps_retained=3``); a failed save's step counts.
MEMORY_TIER_STEPS_RETAINED = 3
# The library's namespace rule (README: "alphanumeric, hyphens, and underscores").
_NAMESPACE_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
# An S3 URI with a bucket name as S3 allows it (3-63 lowercase letters, digits, dots, hyphens).
_S3_URI = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?")


@dataclass
class TieredCheckpointOptions:
    """The payload's tiered-checkpointing flags (train.py's checkpoint options inherit them), each with its
    ``--help``."""

    tiered_checkpointing: bool = field(
        default=False,
        metadata={
            "help": "HyperPod managed tiered checkpointing: memory tier on every save (falls back to the "
            "checkpoint dir when unreachable)"
        },
    )
    tiered_s3_uri: str | None = field(
        default=None, metadata={"help": "s3://bucket/prefix of the tiered storage's S3 copies"}
    )
    tiered_s3_every: int | None = field(default=None, metadata={"help": "every N-th save also goes to --tiered-s3-uri"})

    def tiered_errors(self, checkpoint_dir: str | None) -> list[str]:
        """What is wrong with these flags, one message per problem (empty when valid)."""
        errors = []
        uses_s3 = self.tiered_s3_uri is not None or self.tiered_s3_every is not None
        if self.tiered_checkpointing and not checkpoint_dir:
            errors.append("--tiered-checkpointing needs --checkpoint-dir (commit records and the fallback live there)")
        if uses_s3 and not self.tiered_checkpointing:
            errors.append("--tiered-s3-uri and --tiered-s3-every need --tiered-checkpointing")
        if (self.tiered_s3_uri is None) != (self.tiered_s3_every is None):
            errors.append("--tiered-s3-uri and --tiered-s3-every go together (every N-th save also goes to S3)")
        if self.tiered_s3_uri is not None and not _S3_URI.fullmatch(self.tiered_s3_uri):
            errors.append(f"--tiered-s3-uri: {self.tiered_s3_uri!r} is not an S3 URI; expected s3://bucket/prefix")
        if self.tiered_s3_every is not None and self.tiered_s3_every < 1:
            errors.append(f"--tiered-s3-every: {self.tiered_s3_every} must be >= 1")
        return errors


def namespace_for(directory: Path, world_size: int) -> str:
    """The memory-tier namespace of a run: one per checkpoint directory and world size.

    The namespace's rank count is fixed when it is created (world size + 1 for the metadata), so a
    run resumed at another world size writes to a new namespace; the reader of an older checkpoint
    uses the namespace and world size its commit record names.
    """
    resolved = str(directory.resolve())
    name = _NAMESPACE_UNSAFE.sub("-", directory.resolve().name).strip("-")[:40] or "run"
    return f"{name}-{hashlib.sha256(resolved.encode()).hexdigest()[:12]}-w{world_size}"


def unusable_reason(options: TieredCheckpointOptions, namespace: str, rank: int, world_size: int) -> str | None:
    """Why this rank cannot use the tiers asked for (library missing, memory tier or S3 unreachable), or None."""
    try:
        from amzn_sagemaker_checkpointing.checkpointing.filesystem.checkpoint_helpers import CheckpointHelpers
        from amzn_sagemaker_checkpointing.config.in_memory_client import InMemoryClientConfig
        from amzn_sagemaker_checkpointing.storage.clients.inmemory.inmemory_client import InMemoryCheckpointClient
    except ImportError as exc:
        return f"amzn-sagemaker-checkpointing is not installed ({exc})"
    quiet = logging.getLogger("tiered_storage.probe")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    config = InMemoryClientConfig(request_timeout=PROBE_TIMEOUT_SECONDS)
    client = InMemoryCheckpointClient(namespace, str(rank), str(world_size), config=config, logger=quiet)
    try:
        client.get_namespace_config()  # 404 (no namespace yet) is an answer; no answer raises
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable from here
        return f"memory tier unreachable at {config.base_url}: {_describe(exc)}"
    finally:
        client.close()
    if options.tiered_s3_uri:
        try:
            CheckpointHelpers.get_bucket_location(s3_base_path=options.tiered_s3_uri)
        except Exception as exc:  # noqa: BLE001
            return f"S3 tier unreachable at {options.tiered_s3_uri}: {_describe(exc)}"
    return None


def _describe(exc: BaseException) -> str:
    cause = f" ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
    return f"{type(exc).__name__}: {exc}{cause}"


def _checkpoint_config(namespace: str, world_size: int, s3_uri: str | None, save_to_s3: bool) -> Any:
    """A fresh SageMakerCheckpointConfig per writer or reader: a background save reads its config's
    ``save_to_s3`` when it runs, so a shared config changed for the next save would change it too."""
    from amzn_sagemaker_checkpointing.config.s3_path_strategy import DefaultS3PathStrategy
    from amzn_sagemaker_checkpointing.config.sagemaker_checkpoint_config import SageMakerCheckpointConfig

    # The S3 layout named explicitly (rank_R/step_N/): the library picks another one inside a Ray
    # Train worker, and a run restarted under the other launcher must find its checkpoints.
    strategy = DefaultS3PathStrategy(s3_uri.rstrip("/")) if s3_uri else None
    return SageMakerCheckpointConfig(
        namespace=namespace, world_size=world_size, s3_path_strategy=strategy, save_to_s3=save_to_s3
    )


class TieredStorage:
    """Writes every checkpoint to the memory tier, and every ``s3_every``-th one to S3 as well."""

    name = STORAGE_NAME

    def __init__(self, namespace: str, world_size: int, s3_uri: str | None, s3_every: int | None) -> None:
        self.namespace, self.world_size = namespace, world_size
        self.s3_uri, self.s3_every = s3_uri, s3_every

    def describe(self) -> dict[str, Any]:
        from amzn_sagemaker_checkpointing.config.in_memory_client import InMemoryClientConfig

        return {
            "storage": self.name,
            "memory_tier": InMemoryClientConfig().base_url,
            "namespace": self.namespace,
            "s3_uri": self.s3_uri,
            "s3_every": self.s3_every,
        }

    def target(self, step: int, save_index: int, staging_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """DCP's arguments for the save numbered ``save_index``, and what its commit record says
        (``staging_dir`` receives only the commit record: the shards go to the tiers)."""
        from amzn_sagemaker_checkpointing.checkpointing.filesystem.filesystem import SageMakerTieredStorageWriter

        to_s3 = self.s3_uri is not None and self.s3_every is not None and save_index % self.s3_every == 0
        config = _checkpoint_config(self.namespace, self.world_size, self.s3_uri if to_s3 else None, to_s3)
        # Each rank's shard digested as it is serialised (checkpoint_digests.py); the record gets them at commit.
        writer = digesting_tiered_writer(SageMakerTieredStorageWriter, checkpoint_config=config, step=step)
        record = {
            "storage": self.name,
            "namespace": self.namespace,
            "tiers": [MEMORY_TIER, S3_TIER] if to_s3 else [MEMORY_TIER],
            "s3_uri": self.s3_uri if to_s3 else None,
        }
        return {"storage_writer": writer}, record


def load_sources(marker: dict[str, Any]) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """Where a committed tiered checkpoint can be read, in order: the memory tier, then S3 (when it
    went there). Each source gives DCP's ``load`` arguments; the reader is configured with the
    namespace and world size of the save, so a new world size reshards it, and checks each rank's shard,
    from either tier, against the digest recorded at the save (none for one saved before digests)."""

    def reader(s3_uri: str | None) -> dict[str, Any]:
        from amzn_sagemaker_checkpointing.checkpointing.filesystem.filesystem import SageMakerTieredStorageReader

        config = _checkpoint_config(marker["namespace"], marker["world_size"], s3_uri, save_to_s3=False)
        digests, step = marker.get("digests") or {}, marker["step"]
        storage_reader = verifying_tiered_reader(
            SageMakerTieredStorageReader, digests, step, checkpoint_config=config, step=step
        )
        # The reader answers a step it cannot find with empty metadata (DCP then fails on the first
        # key); say what is missing instead.
        if not storage_reader.read_metadata().state_dict_metadata:
            where = "in the memory tier" + ("" if s3_uri is None else f" or under {s3_uri}")
            raise LookupError(f"step {marker['step']} of namespace {marker['namespace']} is not {where}")
        return {"storage_reader": storage_reader}

    sources: list[tuple[str, Callable[[], dict[str, Any]]]] = [(MEMORY_TIER, lambda: reader(None))]
    if S3_TIER in marker["tiers"]:
        sources.append((S3_TIER, lambda: reader(marker["s3_uri"])))
    return sources


def is_durable(marker: dict[str, Any]) -> bool:
    """Whether a tiered checkpoint outlives the cluster's memory (it went to S3)."""
    return S3_TIER in marker.get("tiers", [])


def delete(marker: dict[str, Any]) -> list[str]:
    """Delete a pruned tiered checkpoint's data: its step in the memory tier (every rank's shard and the
    metadata) and, when it went to S3, its objects (``<s3_uri>/<namespace>/rank_R/step_N/...``, the
    library's DefaultS3PathStrategy). Best effort: what could not be deleted, in words."""
    from amzn_sagemaker_checkpointing.storage.clients.inmemory.inmemory_client import InMemoryCheckpointClient

    namespace, world_size, step = marker["namespace"], int(marker["world_size"]), int(marker["step"])
    problems = []
    quiet = logging.getLogger("tiered_storage.delete")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    client = InMemoryCheckpointClient(namespace, "0", str(world_size), logger=quiet)
    try:
        for rank in range(world_size):
            client.delete_checkpoint(step, rank=rank)
        client.delete_checkpoint(step, metadata_index=0)
    except Exception as exc:  # noqa: BLE001 - the tier may have dropped it already (it keeps 3 steps)
        problems.append(f"memory tier: {_describe(exc)}")
    finally:
        client.close()
    if S3_TIER in marker.get("tiers", []) and marker.get("s3_uri"):
        try:
            _delete_s3_step(marker["s3_uri"], namespace, step)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"S3 {marker['s3_uri']}: {_describe(exc)}")
    return problems


def _delete_s3_step(s3_uri: str, namespace: str, step: int) -> None:
    """Every object of ``step`` under the namespace's prefix, through the library's S3 client (CRT)."""
    import os

    from amzn_sagemaker_checkpointing.checkpointing.filesystem.checkpoint_helpers import CheckpointHelpers
    from s3torchconnector._s3client import S3Client

    bucket, _, base = s3_uri.removeprefix("s3://").partition("/")
    prefix = f"{base.strip('/')}/{namespace}/".lstrip("/")
    region = CheckpointHelpers.get_bucket_location(s3_base_path=s3_uri)
    client = S3Client(region, endpoint=os.environ.get("AWS_ENDPOINT_URL"))
    marker = f"/step_{step}/"
    for page in client.list_objects(bucket, prefix):
        for item in page.object_info:
            if marker in f"/{item.key[len(prefix) :]}":
                client.delete_object(bucket, item.key)
