"""The AWS side every ``llm-infra`` command shares: the AWS CLI's flags, its region rule, and clients
that never hold a command silent for minutes.

- **Region**, as the AWS CLI resolves it: ``--region``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the
  profile's region; then, for the commands that read the app's config, its ``region`` and last the
  region of its ``gpu_az_id``. botocore itself does not read ``AWS_REGION``, so every client gets the
  resolved region.
- **Waits**: each request waits ``--cli-connect-timeout`` (default 5 s) to connect and
  ``--cli-read-timeout`` (default 30 s) for an answer, in at most 3 attempts (standard retry mode),
  so an endpoint that accepts and never answers is given up within 2 minutes
  (:data:`WORST_CASE_SECONDS`). ``AWS_MAX_ATTEMPTS`` and ``AWS_RETRY_MODE`` (or the profile's
  ``max_attempts``/``retry_mode``) still win. A request that has waited 10 s says so on stderr; when
  the attempts are spent the command stops at that endpoint (:class:`EndpointNotAnswering`) instead
  of trying the next check against it.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from llm_infra.cli.terminal import number

CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
MAX_ATTEMPTS = 3
# The longest a call waits by default: every attempt connects just in time and then gets no answer, and
# standard mode sleeps at most rand(0, 1) * min(2**(i - 1), 20) s after attempt i (botocore
# retries/standard.py ExponentialBackoff, its throttling scale; 0.05 s for other errors): 3 * (5 + 30) + 1 + 2.
WORST_CASE_SECONDS = MAX_ATTEMPTS * (CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS) + sum(
    min(2.0 ** (attempt - 1), 20.0) for attempt in range(1, MAX_ATTEMPTS)
)
NOTICE_AFTER_SECONDS = 10.0


class EndpointNotAnswering(Exception):
    """An endpoint that did not answer (no connection, or no reply) in every attempt the command allows."""

    def __init__(self, endpoint: str, operation: str, attempts: int, seconds: float, reason: str) -> None:
        self.endpoint, self.operation, self.attempts, self.seconds = endpoint, operation, attempts, seconds
        super().__init__(
            f"{endpoint} did not answer {operation} in {attempts} attempt{'s' if attempts != 1 else ''} over "
            f"{seconds:.0f} s ({reason}): check the network, the region and --endpoint-url; --cli-connect-timeout, "
            "--cli-read-timeout and AWS_MAX_ATTEMPTS set how long to wait"
        )


def add_aws_flags(parser: argparse.ArgumentParser, *, reads_app_config: bool = False, kubernetes: bool = False) -> None:
    """--profile, --region, --endpoint-url and the two timeouts, as the AWS CLI has them; ``kubernetes``:
    the timeouts bound the command's Kubernetes requests too."""
    app = "; then the app's config: region, else the region of gpu_az_id" if reads_app_config else ""
    endpoint = "an AWS endpoint or the Kubernetes API" if kubernetes else "an AWS endpoint"
    parser.add_argument(
        "--profile", help="AWS profile from ~/.aws/config (default: AWS_PROFILE, else the default credential chain)"
    )
    parser.add_argument(
        "--region",
        help=f"AWS region (default: AWS_REGION, then AWS_DEFAULT_REGION, then the profile's region{app})",
    )
    parser.add_argument(
        "--endpoint-url",
        type=endpoint_url,
        metavar="URL",
        help="send every AWS request to this endpoint, e.g. http://127.0.0.1:5000 in tests (default: AWS's own)",
    )
    parser.add_argument(
        "--cli-connect-timeout",
        type=number(minimum=0),
        default=CONNECT_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"seconds to wait for a connection to {endpoint}, per attempt; 0: wait forever (default: "
        f"{CONNECT_TIMEOUT_SECONDS:g})",
    )
    parser.add_argument(
        "--cli-read-timeout",
        type=number(minimum=0),
        default=READ_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"seconds to wait for the answer of {endpoint}, per attempt; 0: wait forever (default: "
        f"{READ_TIMEOUT_SECONDS:g}; {MAX_ATTEMPTS} attempts unless AWS_MAX_ATTEMPTS says otherwise)",
    )


def endpoint_url(text: str) -> str:
    """An argparse ``type``: an http(s) URL with a host, as botocore needs it."""
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL with a host, got {text!r}")
    return text


@dataclass(frozen=True)
class Region:
    name: str
    source: str  # where it came from, in words: "--region", "AWS_REGION", ...


def resolve_region(args: argparse.Namespace, config: Any = None) -> Region:
    """The AWS region: --region, AWS_REGION, AWS_DEFAULT_REGION, the profile's; then, given the app's
    ``config`` (a TrainingConfig), its region and last the region of its gpu_az_id. NoRegionError when
    none says."""
    for source, name in (
        ("--region", args.region),
        ("AWS_REGION", os.environ.get("AWS_REGION")),
        ("AWS_DEFAULT_REGION", os.environ.get("AWS_DEFAULT_REGION")),
    ):
        if name:
            return Region(name, source)
    import boto3
    from botocore.exceptions import NoRegionError

    session = boto3.Session(profile_name=args.profile)
    if session.region_name:
        return Region(session.region_name, f"the region of profile {session.profile_name}")
    if config is not None and config.region:
        return Region(config.region, "the app's config (region)")
    if config is not None and config.gpu_az_region:
        return Region(config.gpu_az_region, f"gpu_az_id {config.gpu_az_id}")
    raise NoRegionError


def aws_client(args: argparse.Namespace, service: str) -> Any:
    """A boto3 client in the resolved region (``args.region`` once a command resolved it) with the
    command's timeouts and retries, which gives up on an endpoint that does not answer."""
    import boto3
    from botocore.config import Config

    session = boto3.Session(profile_name=args.profile, region_name=resolve_region(args).name)
    scoped = session._session.get_scoped_config()
    retries: dict[str, Any] = {}
    if not (os.environ.get("AWS_RETRY_MODE") or scoped.get("retry_mode")):
        retries["mode"] = "standard"
    if not (os.environ.get("AWS_MAX_ATTEMPTS") or scoped.get("max_attempts")):
        retries["total_max_attempts"] = MAX_ATTEMPTS
    config = Config(
        connect_timeout=args.cli_connect_timeout or None,
        read_timeout=args.cli_read_timeout or None,
        retries=retries,
    )
    client = session.client(service, endpoint_url=args.endpoint_url, config=config)
    RequestWatch(client).register()
    return client


class RequestWatch:
    """Counts one client's attempts per call, says on stderr when an attempt waits past
    :data:`NOTICE_AFTER_SECONDS`, and turns a call whose every attempt found no answer into
    :class:`EndpointNotAnswering` (a command's checks do not each wait for the same silent endpoint)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._attempts = 0
        self._started = 0.0
        self._notice: threading.Timer | None = None

    def register(self) -> None:
        events = self._client.meta.events
        events.register("before-call.*.*", self._before_call)
        events.register("before-send.*.*", self._before_send)
        events.register("needs-retry.*.*", self._attempt_ended)
        events.register("after-call-error.*.*", self._call_failed)

    def _before_call(self, **_: Any) -> None:
        self._attempts, self._started = 0, time.monotonic()

    def _before_send(self, request: Any, event_name: str, **_: Any) -> None:
        self._attempts += 1
        operation = event_name.rsplit(".", 1)[-1]
        self._notice = threading.Timer(NOTICE_AFTER_SECONDS, self._say_waiting, (request.url, operation))
        self._notice.daemon = True
        self._notice.start()

    def _say_waiting(self, url: str, operation: str) -> None:
        attempts = self._client.meta.config.retries.get("total_max_attempts")
        of = f" of {attempts}" if attempts else ""
        print(
            f"llm-infra: waiting for {_endpoint(url)} ({operation}): no answer after {NOTICE_AFTER_SECONDS:g} s, "
            f"attempt {self._attempts}{of}",
            file=sys.stderr,
            flush=True,
        )

    def _attempt_ended(self, **_: Any) -> None:
        if self._notice is not None:
            self._notice.cancel()
            self._notice = None

    def _call_failed(self, exception: BaseException, event_name: str, **_: Any) -> None:
        from botocore.exceptions import (
            ConnectionClosedError,
            ConnectionError,
            ConnectTimeoutError,
            HTTPClientError,
            ReadTimeoutError,
        )

        self._attempt_ended()
        if isinstance(exception, ConnectionError | HTTPClientError):
            reasons = {
                ReadTimeoutError: f"no answer within {self._client.meta.config.read_timeout} s",
                ConnectTimeoutError: f"no connection within {self._client.meta.config.connect_timeout} s",
                ConnectionClosedError: "the connection was closed",
            }
            reason = next((text for kind, text in reasons.items() if isinstance(exception, kind)), "")
            url = str(getattr(exception, "kwargs", {}).get("endpoint_url") or self._client.meta.endpoint_url)
            raise EndpointNotAnswering(
                _endpoint(url),
                f"{self._client.meta.service_model.service_id} {event_name.rsplit('.', 1)[-1]}",
                max(self._attempts, 1),
                time.monotonic() - self._started,
                reason or "could not connect",
            ) from exception


def _endpoint(url: str) -> str:
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}" if parsed.netloc else url
