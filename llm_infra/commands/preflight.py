"""``llm-infra preflight``: before ``cdk deploy``, check with your AWS credentials what synth cannot know
(quotas, capacity, add-on builds, published templates, the CDK bootstrap); one PASS/FAIL table."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from llm_infra.commands.cluster_access import add_config_flags, load_config
from llm_infra.commands.hyperpod import aws_client
from llm_infra.config import TrainingConfig
from llm_infra.terminal import print_table

EXIT_FAILED = 1


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "preflight",
        help="check quotas, capacity, add-on builds and the CDK bootstrap in your AWS account before a deploy",
        description="Before cdk deploy, check with your AWS credentials what synth cannot know: quotas, capacity, "
        "add-on builds, AWS's published templates, whether the operators would change, the CDK bootstrap. "
        "Exits 1 when a check fails.",
    )
    add_config_flags(parser)
    parser.add_argument("--profile", help="AWS profile (default: the standard credential chain)")
    parser.add_argument(
        "--region",
        help="AWS region to check (default: the config's region, else AWS_REGION, AWS_DEFAULT_REGION or the profile's)",
    )
    parser.add_argument("--endpoint-url", help="a local AWS endpoint for every service, e.g. for tests")
    parser.add_argument(
        "--output", choices=("table", "json"), default="table", help="a table with fixes (default), or JSON"
    )
    parser.set_defaults(handler=run_preflight)


def run_preflight(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from llm_infra.preflight import failed, run_checks

    config = load_config(args)
    try:
        args.region = _region(args, config)
        if not args.region:
            return _error(_no_region(config))
        clients: dict[str, Any] = {}

        def client(service: str) -> Any:
            if service not in clients:
                clients[service] = aws_client(args, service)
            return clients[service]

        try:
            account = str(client("sts").get_caller_identity()["Account"])
        except ClientError as err:
            error = err.response.get("Error", {})
            return _error(
                f"AWS rejected the credentials ({error.get('Code')}: {error.get('Message')}): refresh them "
                "(aws sso login, new keys) or pick others with --profile"
            )
        results = run_checks(config, region=args.region, account=account, client=client)
    except BotoCoreError as err:
        return _error(_sdk_error(err, args, config))
    if args.output == "json":
        print(json.dumps({"region": args.region, "account": account, "checks": [r.to_json() for r in results]}))
    else:
        _print_report(results, account, args.region)
    return EXIT_FAILED if failed(results) else 0


def _region(args: argparse.Namespace, config: TrainingConfig) -> str | None:
    """--region, else the config's region, else AWS_REGION (which the CDK CLI reads and boto3 does not),
    else what boto3 resolves (AWS_DEFAULT_REGION, the profile's region)."""
    explicit = args.region or config.region or os.environ.get("AWS_REGION")
    if explicit:
        return str(explicit)
    import boto3

    return boto3.Session(profile_name=args.profile).region_name


def _no_region(config: TrainingConfig) -> str:
    hint = f" (gpu_az_id {config.gpu_az_id} lies in {config.gpu_az_region})" if config.gpu_az_region else ""
    return f"no AWS region: pass --region, set -c region=REGION, export AWS_REGION or set the profile's region{hint}"


def _sdk_error(err: Exception, args: argparse.Namespace, config: TrainingConfig) -> str:
    """One line for an error of the SDK: what failed and what to do."""
    from botocore.exceptions import (
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        ProfileNotFound,
        SSOError,
        TokenRetrievalError,
    )

    if isinstance(err, NoCredentialsError):
        return (
            "no AWS credentials found: pass --profile or set AWS_PROFILE, run `aws configure` or `aws sso login`, "
            "or export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(err, ProfileNotFound):
        return f"{err}: pass a profile that exists (aws configure list-profiles) or configure it"
    if isinstance(err, NoRegionError):
        return _no_region(config)
    if isinstance(err, EndpointConnectionError | ConnectTimeoutError):
        where = f" at {args.endpoint_url}" if args.endpoint_url else ""
        return f"cannot reach AWS{where} ({err}): check the network connection, proxy settings and --region"
    if isinstance(err, SSOError | TokenRetrievalError):
        return f"{err}: run `aws sso login` (with --profile if you use one)"
    return f"AWS SDK: {err}"


def _print_report(results: list[Any], account: str, region: str) -> None:
    # print_table right-aligns every column but the first (numbers); cells padded to their column's width
    # read left-aligned, as text should.
    rows = [["check", "status", "detail"], *([r.name, r.status, r.detail] for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    header, *body = [[cell.ljust(w) for cell, w in zip(row, widths, strict=True)] for row in rows]
    print_table(header, body)
    fixes = [r for r in results if r.status in ("FAIL", "WARN") and r.fix]
    if fixes:
        print()
        print("to fix:")
        for r in fixes:
            print(f"  {r.name}: {r.fix}")
    counts = {status: sum(r.status == status for r in results) for status in ("PASS", "FAIL", "WARN", "SKIP")}
    verdict = "FAIL" if counts["FAIL"] else "PASS"
    summary = ", ".join(f"{n} {status.lower()}" for status, n in counts.items() if n)
    print(f"\npreflight of account {account} in {region}: {verdict} ({summary})")


def _error(message: str) -> int:
    one_line = " ".join(message.split())
    print(f"llm-infra: error: {one_line}", file=sys.stderr)
    return EXIT_FAILED
