"""``llm-infra preflight``: before ``cdk deploy``, check with your AWS credentials what synth cannot know
(quotas, capacity, add-on builds, published templates, the CDK bootstrap); one PASS/FAIL table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from llm_infra.cli.aws import add_aws_flags, aws_client, resolve_region
from llm_infra.cli.commands.cluster_access import add_config_flags, load_config
from llm_infra.cli.terminal import OUTPUT_JSON, add_output_flag, print_table

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
    parser.add_argument(
        "--cdk-out",
        metavar="DIR",
        help="the synthesized templates, compared with the deployed stacks (default: cdk.out in --app-dir; "
        "make synth or npx cdk synth with the same -c flags)",
    )
    add_aws_flags(parser, reads_app_config=True)
    add_output_flag(parser, "the region, the account and every check")
    parser.set_defaults(handler=run_preflight)


def run_preflight(args: argparse.Namespace) -> int:
    from llm_infra.preflight.checks import failed, run_checks

    config = load_config(args)
    args.region = resolve_region(args, config).name
    clients: dict[str, Any] = {}

    def client(service: str) -> Any:
        if service not in clients:
            clients[service] = aws_client(args, service)
        return clients[service]

    account = str(client("sts").get_caller_identity()["Account"])
    cdk_out = Path(args.cdk_out) if args.cdk_out else Path(args.app_dir) / "cdk.out"
    results = run_checks(config, region=args.region, account=account, client=client, cdk_out=cdk_out)
    if args.output == OUTPUT_JSON:
        print(json.dumps({"region": args.region, "account": account, "checks": [r.to_json() for r in results]}))
    else:
        _print_report(results, account, args.region)
    return EXIT_FAILED if failed(results) else 0


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
