"""Helm charts that ship from a local folder (charts AWS publishes only in a git repository)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from llm_infra.constructs.nag import CDK_S3_READ_FINDINGS, acknowledge, asset_bucket_objects_finding


def helm_chart_from_directory(
    scope: Construct,
    construct_id: str,
    *,
    cluster: eks.Cluster,
    chart_dir: Path,
    release: str,
    namespace: str,
    values: dict[str, Any],
    timeout: cdk.Duration | None = None,
) -> eks.HelmChart:
    """Install the chart in ``chart_dir`` (uploaded as a CDK asset) with ``values``, waiting for it."""
    chart = eks.HelmChart(
        scope,
        construct_id,
        cluster=cluster,  # type: ignore[arg-type]  # jsii's ICluster stub lags the class
        chart_asset=s3_assets.Asset(scope, f"{construct_id}Asset", path=str(chart_dir)),
        release=release,
        namespace=namespace,
        create_namespace=namespace != "kube-system",
        values=values,
        wait=True,
        timeout=timeout,
    )
    acknowledge(
        cluster.node.find_child("KubectlProvider"),
        "IAM5",
        "The kubectl handler reads local chart assets from the CDK assets bucket (CDK's grant_read).",
        findings=[*CDK_S3_READ_FINDINGS, asset_bucket_objects_finding(scope)],
    )
    return chart
