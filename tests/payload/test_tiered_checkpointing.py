"""Managed tiered checkpointing end to end on CPU: train.py under torchrun (2 ranks, gloo) writes
through the real ``amzn-sagemaker-checkpointing`` writer and reads through its reader.

The HyperPod memory tier is a test double written here: an HTTP server that speaks the protocol
of the library's client (``storage/clients/inmemory/inmemory_client.py`` in 1.1.3: namespaces,
per-rank shards with an xxh3-128 checksum header, ``latest``). The library has no setting for the
tier's address (``config/in_memory_client.py``: the cluster service
``ai-toolkit-gossip-headless.aws-hyperpod.svc.cluster.local:9200``), so the ranks reach the double
as their HTTP proxy, and it answers only for that host: every request proves the payload talks to
the documented address. The S3 tier is moto in server mode (``AWS_ENDPOINT_URL``); the library's
S3 client (s3torchconnector's CRT) also takes the proxy, and ignores ``NO_PROXY``, so the double
forwards every other host unchanged. What the real service does beyond its protocol (retention,
replication across nodes) is not known here and not tested.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

import boto3
import pytest
import xxhash
from moto.server import ThreadedMotoServer

from llm_infra.workloads import train as train_module

from .conftest import REPO_ROOT, WORKLOADS, ReferenceRun, free_port, json_lines, summary, train

MEMORY_TIER_HOST = ("ai-toolkit-gossip-headless.aws-hyperpod.svc.cluster.local", 9200)
BUCKET = "tiered-checkpoints"
_NAMESPACE = re.compile(r"/v1/cp/namespaces/(?P<ns>[^/]+)")
_LATEST = re.compile(r"/v1/cp/checkpoints/(?P<ns>[^/]+)/latest")
_SHARD = re.compile(r"/v1/cp/checkpoints/(?P<ns>[^/]+)/(?P<rank>\d+)/(?P<step>\d+)")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


def _checksum(blob: bytes) -> str:
    return base64.b64encode(xxhash.xxh3_128(blob).digest()).decode()


class MemoryTier:
    """The memory tier as the library's client sees it. A namespace is created with its rank count
    (world size + metadata) and the number of newest steps it keeps; shards are checked against
    their checksum header on the way in and carry one on the way out; ``latest`` lists the steps
    that have every rank's shard, newest first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.namespaces: dict[str, dict[str, int]] = {}
        self.shards: dict[str, dict[int, dict[int, bytes]]] = {}  # namespace -> step -> rank -> blob
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.proxy_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def lose_everything(self) -> None:
        """What a restart of every node does to the memory tier."""
        with self.lock:
            self.namespaces.clear()
            self.shards.clear()

    def stored(self) -> dict[str, dict[int, list[int]]]:
        with self.lock:
            return {
                ns: {step: sorted(ranks) for step, ranks in steps.items() if ranks} for ns, steps in self.shards.items()
            }

    def answer(self, method: str, path: str, query: dict[str, str], body: bytes, shard_meta: str | None):
        """(status, body, headers) for one request of the protocol."""
        if match := _LATEST.fullmatch(path):
            namespace = self.namespaces.get(match["ns"])
            if namespace is None:
                return 404, b"no such namespace", {}
            steps = self.shards[match["ns"]]
            complete = sorted((s for s, ranks in steps.items() if len(ranks) == namespace["num_ranks"]), reverse=True)
            return 200, json.dumps(complete[: int(query.get("limit", "5"))]).encode(), {}
        if match := _NAMESPACE.fullmatch(path):
            name = match["ns"]
            if method == "POST":
                created = {key: int(query[key]) for key in ("num_ranks", "steps_retained")}
                self.namespaces[name] = created
                self.shards.setdefault(name, {})
                return 200, b"{}", {}
            if name not in self.namespaces:
                return 404, b"no such namespace", {}
            if method == "DELETE":
                del self.namespaces[name], self.shards[name]
                return 200, b"", {}
            return 200, json.dumps({"namespace": name, **self.namespaces[name]}).encode(), {}
        if match := _SHARD.fullmatch(path):
            name, rank, step = match["ns"], int(match["rank"]), int(match["step"])
            if name not in self.namespaces:
                return 404, b"no such namespace", {}
            steps = self.shards[name]
            if method == "POST":
                if json.loads(shard_meta or "{}").get("checksum") != _checksum(body):
                    return 400, b"checksum mismatch", {}
                if not 0 <= rank < self.namespaces[name]["num_ranks"]:
                    return 400, b"rank out of range", {}
                steps.setdefault(step, {})[rank] = body
                for old in sorted(steps)[: -self.namespaces[name]["steps_retained"]]:
                    del steps[old]
                return 200, b"", {}
            blob = steps.get(step, {}).get(rank)
            if blob is None:
                return 404, b"no such shard", {}
            if method == "DELETE":
                del steps[step][rank]
                return 200, b"", {}
            return 200, blob, {"Shard-Meta": json.dumps({"checksum": _checksum(blob), "algorithm": "xxh3_128"})}
        return 404, b"no such route", {}


def _handler(tier: MemoryTier) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        """A forward proxy: the memory tier's host is answered here, any other host is forwarded."""

        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
            return b"".join(chunks)

        def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes, length: int | None = None) -> None:
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self, url: SplitResult, body: bytes) -> None:
            upstream = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            headers["Content-Length"] = str(len(body))
            upstream.request(self.command, url.path + (f"?{url.query}" if url.query else ""), body, headers)
            response = upstream.getresponse()
            payload = response.read()
            passed = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP | {"content-length"}]
            length = int(response.getheader("Content-Length") or 0) if self.command == "HEAD" else None
            self._reply(response.status, passed, b"" if self.command == "HEAD" else payload, length)
            upstream.close()

        def _serve(self) -> None:
            url = urlsplit(self.path)
            body = self._body()
            if (url.hostname, url.port) != MEMORY_TIER_HOST:
                self._forward(url, body)
                return
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            shard_meta = self.headers.get("Shard-Meta")
            with tier.lock:
                status, payload, headers = tier.answer(self.command, url.path, query, body, shard_meta)
            self._reply(status, list(headers.items()), payload)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve

    return Handler


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 in server mode on loopback, with one bucket."""
    with pytest.MonkeyPatch.context() as env:
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }.items():
            env.setenv(key, value)
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield endpoint
        server.stop()


@pytest.fixture
def memory_tier(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryTier]:
    """A fresh memory tier, the ranks' way to it (their proxy), and S3 (the ranks inherit the env)."""
    tier = MemoryTier()
    monkeypatch.setenv("HTTP_PROXY", tier.proxy_url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # boto3 honours it; the CRT client does not
    yield tier
    tier.server.shutdown()
    tier.server.server_close()


def s3_keys(prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"][len(prefix) :] for item in listed.get("Contents", []))


def marker(directory: Path, step: int) -> dict[str, Any]:
    return json.loads((directory / f"step-{step:08d}" / "COMMITTED").read_text())


def events(stdout: str, name: str) -> list[dict[str, Any]]:
    return [r for r in json_lines(stdout) if r.get("event") == name]


# ---- flags -------------------------------------------------------------------------------------
ON = ["--checkpoint-dir", "/x", "--tiered-checkpointing"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tiered-checkpointing"], "--tiered-checkpointing needs --checkpoint-dir"),
        (["--tiered-s3-uri", "s3://bucket/p", "--tiered-s3-every", "2"], "need --tiered-checkpointing"),
        ([*ON, "--tiered-s3-every", "2"], "go together"),
        ([*ON, "--tiered-s3-uri", "s3://bucket/p"], "go together"),
        (
            [*ON, "--tiered-s3-uri", "bucket/p", "--tiered-s3-every", "2"],
            "--tiered-s3-uri: 'bucket/p' is not an S3 URI; expected s3://bucket/prefix",
        ),
        ([*ON, "--tiered-s3-uri", "s3://b/p", "--tiered-s3-every", "2"], "is not an S3 URI"),  # 3-63 characters
        ([*ON, "--tiered-s3-uri", "s3://bkt", "--tiered-s3-every", "0"], "--tiered-s3-every: 0 must be >= 1"),
    ],
)
def test_bad_tiered_flags_are_errors(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as err:
        train_module.parse_config(argv)
    assert message in str(err.value)


def test_tiered_flags_come_from_flags_and_the_config_file(tmp_path: Path) -> None:
    config_file = tmp_path / "run.json"
    config_file.write_text(json.dumps({"checkpoint_dir": "/fsx/ckpt", "tiered_checkpointing": True}))
    config = train_module.parse_config(
        ["--config", str(config_file), "--tiered-s3-uri", "s3://my-bucket/ckpt", "--tiered-s3-every", "5"]
    )
    tiered = config.checkpoint
    assert (tiered.tiered_checkpointing, tiered.tiered_s3_uri, tiered.tiered_s3_every) == (
        True,
        "s3://my-bucket/ckpt",
        5,
    )


# ---- runs --------------------------------------------------------------------------------------
@pytest.mark.torch
def test_memory_every_save_s3_every_nth_and_lost_memory_resumes_from_s3(
    memory_tier: MemoryTier, reference_run: ReferenceRun, tmp_path: Path
) -> None:
    s3_uri = f"s3://{BUCKET}/{tmp_path.name}"
    tiered = ["--tiered-checkpointing", f"--tiered-s3-uri={s3_uri}", "--tiered-s3-every=2"]
    common = [f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2", "--keep-checkpoints=1", *tiered]
    first = train(["--steps=6", *common])
    assert first.returncode == 0, first.stderr[-3000:]
    (storage,) = events(first.stdout, "checkpoint_storage")
    assert storage["storage"] == "tiered" and storage["s3_every"] == 2
    assert storage["memory_tier"] == "http://ai-toolkit-gossip-headless.aws-hyperpod.svc.cluster.local:9200"
    namespace = storage["namespace"]
    assert namespace.endswith("-w2")
    # Saves 1, 2, 3 at steps 2, 4, 6: all in memory (ranks 0, 1 and the metadata as rank 2), the 2nd
    # also in S3. keep=1 keeps step 6 and the newest durable one, 4: step 2 is gone from the tier too.
    assert memory_tier.stored()[namespace] == {4: [0, 1, 2], 6: [0, 1, 2]}
    assert s3_keys(f"{tmp_path.name}/{namespace}/") == [
        "rank_0/step_4/checkpoint.pt",
        "rank_0/step_4/metadata.metadata",
        "rank_1/step_4/checkpoint.pt",
    ]
    assert [(r["step"], r["tiers"]) for r in events(first.stdout, "checkpoint")] == [
        (2, ["memory"]),
        (4, ["memory", "s3"]),
        (6, ["memory"]),
    ]
    # keep=1 keeps the newest, and the newest durable one; no shards on the directory.
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000004", "step-00000006"]
    assert not list(tmp_path.rglob("*.distcp"))
    assert set(marker(tmp_path, 6)["digests"]) == {"rank_0", "rank_1"}  # each rank's shard, as serialised
    assert marker(tmp_path, 6) | {"committed_at": 0, "digests": {}} == {
        "step": 6,
        "world_size": 2,
        "committed_at": 0,
        "storage": "tiered",
        "namespace": namespace,
        "tiers": ["memory"],
        "s3_uri": None,
        "save_index": 3,
        "healthy": True,
        "verified": False,
        "digest_algorithm": "crc32",
        "digests": {},
    }

    memory_tier.lose_everything()  # every node restarted: only S3 still has checkpoints
    again = train(["--steps=10", *common])
    assert again.returncode == 0, again.stderr[-3000:]
    (skipped,) = events(again.stdout, "checkpoint_skipped")
    assert skipped["path"].endswith("step-00000006")
    missing = f"LookupError: step 6 of namespace {namespace} is not in the memory tier"
    assert skipped["reason"] == f"memory: ranks 0, 1: {missing}"  # every rank's outcome
    (resume,) = events(again.stdout, "resume")
    assert (resume["step"], resume["source"]) == (4, "s3")
    assert summary(again.stdout)["param_sha256"] == reference_run.summary["param_sha256"]
    # The S3 cadence counts on across the restart: saves 4, 5, 6 at steps 6, 8, 10.
    assert [(r["step"], r["tiers"]) for r in events(again.stdout, "checkpoint")] == [
        (6, ["memory", "s3"]),
        (8, ["memory"]),
        (10, ["memory", "s3"]),
    ]
    # Retention follows keep=1 in the tiers as on disk: step 10, and step 4, the newest checkpoint whose
    # digests a load verified (kept whatever keep says), in S3.
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000004", "step-00000010"]
    assert marker(tmp_path, 4)["verified"] is True
    assert memory_tier.stored()[namespace] == {10: [0, 1, 2]}
    assert s3_keys(f"{tmp_path.name}/{namespace}/") == [
        "rank_0/step_10/checkpoint.pt",
        "rank_0/step_10/metadata.metadata",
        "rank_0/step_4/checkpoint.pt",
        "rank_0/step_4/metadata.metadata",
        "rank_1/step_10/checkpoint.pt",
        "rank_1/step_4/checkpoint.pt",
    ]


@pytest.mark.torch
def test_crash_resumes_from_the_memory_tier_bitwise_identical(
    memory_tier: MemoryTier, reference_run: ReferenceRun, tmp_path: Path
) -> None:
    result = train(
        [
            "--steps=10",
            f"--checkpoint-dir={tmp_path}",
            "--checkpoint-every=2",
            "--async-checkpoint",
            "--tiered-checkpointing",
            "--fail-at-step=5",
            "--fail-rank=1",
        ],
        max_restarts=1,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert '"kind": "exit"' in result.stderr  # the fault really fired
    records = json_lines(result.stdout)
    (resumed_at,) = [i for i, r in enumerate(records) if r.get("event") == "resume"]
    # The newest checkpoint committed before the crash: step 4's async save is committed at a later step's
    # agreement once every rank's write is durable; on a loaded machine it may still be in flight when rank
    # 1 dies, and then it is never committed and the run resumes from step 2 (the result is the same).
    newest = max(r["step"] for r in records[:resumed_at] if r.get("event") == "checkpoint")
    assert newest in (2, 4)
    assert (records[resumed_at]["step"], records[resumed_at]["source"]) == (newest, "memory")
    final = summary(result.stdout)
    assert (final["restart"], final["resumed_from"], final["step"]) == (1, newest, 10)
    assert final["param_sha256"] == reference_run.summary["param_sha256"]
    assert not list(tmp_path.rglob("*.distcp"))


@pytest.mark.torch
def test_a_new_world_size_reshards_a_tiered_checkpoint(memory_tier: MemoryTier, tmp_path: Path) -> None:
    common = [f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2", "--tiered-checkpointing"]
    first = train(["--steps=4", *common])
    assert first.returncode == 0, first.stderr[-3000:]
    again = train(["--steps=6", *common], nproc=1)
    assert again.returncode == 0, again.stderr[-3000:]
    (resume,) = events(again.stdout, "resume")
    assert (resume["step"], resume["source"]) == (4, "memory")
    (change,) = events(again.stdout, "world_size_changed")
    assert (change["saved"], change["now"]) == (2, 1)
    # One namespace per world size: the 1-rank run writes its own (1 rank + metadata).
    stored = memory_tier.stored()
    assert stored[marker(tmp_path, 4)["namespace"]][4] == [0, 1, 2]
    assert stored[marker(tmp_path, 6)["namespace"]] == {6: [0, 1]}


@pytest.mark.torch
def test_lost_memory_without_s3_is_no_fresh_start(memory_tier: MemoryTier, tmp_path: Path) -> None:
    common = [f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2", "--tiered-checkpointing"]
    first = train(["--steps=2", *common])
    assert first.returncode == 0, first.stderr[-3000:]
    memory_tier.lose_everything()
    again = train(["--steps=4", *common])
    assert again.returncode != 0
    assert "refusing to start over from step 0" in again.stderr
    assert not events(again.stdout, "summary")


@pytest.mark.torch
def test_a_corrupt_shard_in_the_memory_tier_is_refused(memory_tier: MemoryTier, tmp_path: Path) -> None:
    """One byte of rank 1's shard of step 4 changed inside the memory tier (its own xxh3 checksum, computed
    on what it holds, still agrees): the digest taken when the shard was serialised refuses it on every
    rank, naming the step and the shard, and the run resumes from step 2."""
    common = [f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2", "--tiered-checkpointing", *PG_TIMEOUT]
    first = train(["--steps=4", *common])
    assert first.returncode == 0, first.stderr[-3000:]
    namespace = marker(tmp_path, 4)["namespace"]
    with memory_tier.lock:
        shard = bytearray(memory_tier.shards[namespace][4][1])
        shard[len(shard) // 2] ^= 0x01
        memory_tier.shards[namespace][4][1] = bytes(shard)
    again = train(["--steps=6", *common])
    assert again.returncode == 0, again.stderr[-3000:]
    (skipped,) = events(again.stdout, "checkpoint_skipped")
    assert skipped["path"].endswith("step-00000004")
    assert "DigestMismatch: step 4: the shard of rank_1 does not match its digest" in skipped["reason"]
    (resume,) = events(again.stdout, "resume")
    assert (resume["step"], resume["source"]) == (2, "memory")


@pytest.mark.torch
def test_unreachable_memory_tier_falls_back_to_the_directory(
    monkeypatch: pytest.MonkeyPatch, reference_run: ReferenceRun, tmp_path: Path
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    result = train(["--steps=10", f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2", "--tiered-checkpointing"])
    assert result.returncode == 0, result.stderr[-3000:]
    (storage,) = events(result.stdout, "checkpoint_storage")
    assert (storage["storage"], storage["requested"]) == ("directory", "tiered")
    assert storage["reason"].startswith(
        "rank 0: memory tier unreachable at http://ai-toolkit-gossip-headless.aws-hyperpod.svc.cluster.local:9200"
    )
    assert '"requested": "tiered"' in result.stderr  # the fallback is a warning too
    assert list((tmp_path / "step-00000010").glob("*.distcp"))
    assert marker(tmp_path, 10)["storage"] == "directory"
    assert summary(result.stdout)["param_sha256"] == reference_run.summary["param_sha256"]


# ---- one rank's memory tier fails: every rank agrees, nobody waits in a collective ---------------
PG_TIMEOUT = ["--pg-timeout-seconds=60"]  # a rank left waiting would wait this long: runs end well inside it


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_memory_tier_outage_on_one_rank_at_save_sends_the_run_to_the_directory(
    memory_tier: MemoryTier, reference_run: ReferenceRun, tmp_path: Path, mode: str
) -> None:
    """Rank 1's shards of step 4 are refused (the library's SageMakerInMemoryTierError, raised inside
    DCP's write, reaches every rank as DCP's CheckpointException, a BaseException): caught, agreed,
    logged; the run continues on the directory (FSx) and ends as an uninterrupted run."""
    args = ["--steps=10", f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2", "--tiered-checkpointing"]
    args += [*PG_TIMEOUT, "--fail-memory-tier-at-step=4", "--fail-rank=1"]
    args += ["--async-checkpoint"] if mode == "async" else []
    started = time.monotonic()
    result = train(args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert time.monotonic() - started < 30
    assert "injected memory-tier outage at step 4" in result.stderr  # the fault really fired, on rank 1
    tiered, fallback = events(result.stdout, "checkpoint_storage")
    assert (tiered["storage"], fallback["storage"], fallback["requested"]) == ("tiered", "directory", "tiered")
    assert "rank 1: SageMakerInMemoryTierError: injected memory-tier outage at step 4" in fallback["reason"]
    committed = [(r["step"], r["storage"]) for r in events(result.stdout, "checkpoint")]
    if mode == "sync":  # that save itself went to the directory
        assert committed == [(2, "tiered"), (4, "directory"), (6, "directory"), (8, "directory"), (10, "directory")]
    else:  # the background save was dropped (logged); the next one went to the directory
        (dropped,) = events(result.stdout, "checkpoint_failed")
        assert dropped["step"] == 4 and not dropped["committed"]
        assert committed == [(2, "tiered"), (6, "directory"), (8, "directory"), (10, "directory")]
    assert marker(tmp_path, 10)["storage"] == "directory" and list((tmp_path / "step-00000010").glob("*.distcp"))
    assert summary(result.stdout)["param_sha256"] == reference_run.summary["param_sha256"]


@pytest.mark.torch
def test_a_memory_tier_outage_on_one_rank_at_load_reads_s3_on_every_rank(
    memory_tier: MemoryTier, reference_run: ReferenceRun, tmp_path: Path
) -> None:
    """Rank 1 finds nothing in the memory tier (its reader's metadata comes back empty, before DCP):
    every rank agrees to read that checkpoint from S3 instead; before, rank 0 waited inside DCP's load
    for rank 1 until the process-group timeout, on every restart."""
    s3_uri = f"s3://{BUCKET}/{tmp_path.name}"
    common = [f"--checkpoint-dir={tmp_path}", "--checkpoint-every=2", "--tiered-checkpointing", *PG_TIMEOUT]
    common += [f"--tiered-s3-uri={s3_uri}", "--tiered-s3-every=1"]
    first = train(["--steps=6", *common])
    assert first.returncode == 0, first.stderr[-3000:]
    started = time.monotonic()
    again = train(["--steps=10", *common, "--fail-memory-tier-at-load", "--fail-rank=1"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert time.monotonic() - started < 30
    (resume,) = events(again.stdout, "resume")
    assert (resume["step"], resume["source"]) == (6, "s3")
    assert summary(again.stdout)["param_sha256"] == reference_run.summary["param_sha256"]


# ---- the image ---------------------------------------------------------------------------------
def test_the_image_installs_the_tested_library_and_what_it_imports() -> None:
    # amzn-sagemaker-checkpointing 1.1.3 declares only requests and xxhash, but imports
    # s3torchconnector and tenacity (its README lists them as prerequisites): the image pins all
    # three to the versions these tests ran against, and the first to pyproject's `train` extra.
    dockerfile = (WORKLOADS / "Dockerfile").read_text()
    for package in ("amzn-sagemaker-checkpointing", "s3torchconnector", "tenacity"):
        assert f'"{package}=={metadata.version(package)}"' in dockerfile, package
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"amzn-sagemaker-checkpointing=={metadata.version('amzn-sagemaker-checkpointing')}" in extras["train"]
