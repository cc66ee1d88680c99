"""``llm-infra preflight``: before ``cdk deploy``, check with your AWS credentials what synth cannot know
(quotas, capacity, add-on builds, published templates, the CDK bootstrap); one PASS/FAIL table."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from llm_infra.cli.commands.cluster_access import add_config_flags, load_config
from llm_infra.cli.commands.hyperpod import add_aws_flags, aws_client, resolve_region
from llm_infra.cli.terminal import OUTPUT_JSON, add_output_flag, print_table
from llm_infra.config import TrainingConfig

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
    add_aws_flags(parser, region_default="the app's config (region), then ")
    add_output_flag(parser, "the region, the account and every check")
    parser.set_defaults(handler=run_preflight)


def run_preflight(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from llm_infra.ops.preflight import failed, run_checks

    config = load_config(args)
    try:
        args.region = resolve_region(args, [("the app's config (region)", config.region)]).name
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
    if args.output == OUTPUT_JSON:
        print(json.dumps({"region": args.region, "account": account, "checks": [r.to_json() for r in results]}))
    else:
        _print_report(results, account, args.region)
    return EXIT_FAILED if failed(results) else 0


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
    print_table(["check", "status", "detail"], [[r.name, r.status, r.detail] for r in results], text_columns=3)
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
