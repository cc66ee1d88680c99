"""What ``validate`` and ``drill`` share: the app's config, the cluster they act on, its Kubernetes API.

The config is the CDK app's (``cdk.json`` context plus ``-c KEY=VALUE``, as ``cdk synth -c``), so the
objects these commands apply are the ones the app renders. ``--cluster`` names the HyperPod cluster
(compute=hyperpod) or the EKS cluster (compute=eks); its EKS ARN picks the kubeconfig context that
``aws eks update-kubeconfig`` wrote, unless ``--context`` names one. The region follows the AWS CLI's
rule, with the app's config as the last fallback (``llm_infra.cli.aws``); each command says on stderr
where it came from.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from llm_infra.cli.aws import add_aws_flags, aws_client, resolve_region
from llm_infra.cli.terminal import UsageError, add_output_flag, number
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.input_files import read_json
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.ops.kube import Kube, KubeError, context_for_cluster


@dataclass(frozen=True)
class ClusterTarget:
    name: str  # as given with --cluster
    compute: str  # "eks" or "hyperpod"
    eks_arn: str


def add_cluster_flags(parser: argparse.ArgumentParser, json_holds: str) -> None:
    parser.add_argument(
        "--cluster",
        required=True,
        metavar="NAME",
        help="the cluster to act on: with compute=eks (the app's default) the EKS cluster's name, with "
        "compute=hyperpod (-c compute=hyperpod) the HyperPod cluster's name",
    )
    add_aws_flags(parser, reads_app_config=True, kubernetes=True)
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)"
    )
    parser.add_argument(
        "--context",
        help="kubeconfig context (default: the one 'aws eks update-kubeconfig' wrote for the cluster's EKS ARN)",
    )
    add_config_flags(parser)
    parser.add_argument(
        "--namespace",
        type=namespace_name,
        metavar="NAME",
        help="the Kubernetes namespace of the jobs and of the platform objects they need (default: the app's, "
        f"{WorkloadValues.namespace})",
    )
    parser.add_argument(
        "--outputs-file",
        default="cdk-outputs.json",
        metavar="FILE",
        help="what 'cdk deploy --outputs-file' wrote (the FSx volume, the checkpoint bucket), relative to --app-dir "
        "(default: cdk-outputs.json)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=number(above=0),
        default=10.0,
        metavar="SECONDS",
        help="seconds between looks at the cluster (default: 10)",
    )
    add_output_flag(parser, json_holds)


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """``--app-dir`` and ``-c KEY=VALUE``: the app's config, as ``cdk synth`` reads it (``load_config``)."""
    parser.add_argument(
        "--app-dir",
        default=".",
        metavar="DIR",
        help="the CDK app's folder, whose cdk.json context is the config (default: the current folder)",
    )
    parser.add_argument(
        "-c",
        "--cdk-context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config value over cdk.json's, as 'cdk synth -c KEY=VALUE' (repeatable; default: none)",
    )


def load_config(args: argparse.Namespace) -> TrainingConfig:
    """The app's config: ``cdk.json``'s context in ``--app-dir``, then each ``-c KEY=VALUE``."""
    app = read_json(
        Path(args.app_dir) / "cdk.json", flag="--app-dir", advice="run in the CDK app's folder or pass --app-dir"
    )
    context = dict(app.get("context", {})) if isinstance(app, dict) else {}
    for item in args.cdk_context:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise UsageError(f"-c/--cdk-context: expected KEY=VALUE, got {item!r}")
        context[key] = value
    try:
        return TrainingConfig.from_context(context)
    except ConfigError as err:
        raise UsageError(str(err)) from None


def workload_values(args: argparse.Namespace, config: TrainingConfig) -> WorkloadValues:
    """The charts' values for ``config``, with what the outputs file tells (the FSx volume, the
    checkpoint bucket): the same values ``make synth`` writes ``k8s_manifests/dist/`` with, in
    ``--namespace`` when given (every chart object of the namespace follows ``values.namespace``)."""
    from llm_infra.k8s_manifests.render import deployed_values

    try:
        values = deployed_values(config, Path(args.app_dir) / args.outputs_file)
    except ValueError as err:
        raise UsageError(str(err)) from None
    namespace = getattr(args, "namespace", None)
    return values if namespace is None else replace(values, namespace=namespace)


# A namespace's name is a DNS label (RFC 1123), as the API server checks it.
NAMESPACE_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")


def namespace_name(text: str) -> str:
    """An argparse ``type`` for a Kubernetes namespace's name."""
    if not NAMESPACE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a namespace name: at most 63 lowercase letters, digits and '-', starting and ending "
            "with a letter or digit"
        )
    return text


def resolve_cluster(args: argparse.Namespace, config: TrainingConfig) -> ClusterTarget:
    """The cluster behind ``--cluster``, checked against the AWS API (an unknown name is bad input)."""
    from llm_infra.ops.hyperpod import describe_cluster

    region = resolve_region(args, config)
    print(f"region {region.name} (from {region.source})", file=sys.stderr)
    args.region = region.name
    if config.compute == "hyperpod":
        try:
            described = describe_cluster(aws_client(args, "sagemaker"), args.cluster)
        except ValueError as err:
            raise UsageError(f"--{err}") from None
        arn = (described.get("Orchestrator") or {}).get("Eks", {}).get("ClusterArn")
        if not arn:
            raise UsageError(f"--cluster: HyperPod cluster {args.cluster!r} has no EKS orchestrator")
        return ClusterTarget(args.cluster, "hyperpod", str(arn))
    eks = aws_client(args, "eks")
    try:
        arn = eks.describe_cluster(name=args.cluster)["cluster"]["arn"]
    except eks.exceptions.ResourceNotFoundException:
        raise UsageError(
            f"--cluster: no EKS cluster {args.cluster!r} in {args.region} (with compute=hyperpod, name the HyperPod "
            "cluster: -c compute=hyperpod)"
        ) from None
    return ClusterTarget(args.cluster, "eks", str(arn))


def connect(args: argparse.Namespace, target: ClusterTarget) -> Kube:
    """The cluster's Kubernetes API through the kubeconfig."""
    try:
        context = args.context or context_for_cluster(target.eks_arn, args.kubeconfig)
    except KubeError as err:
        raise UsageError(f"--context: {err}") from None
    return Kube.connect(
        kubeconfig=args.kubeconfig, context=context, timeouts=(args.cli_connect_timeout, args.cli_read_timeout)
    )
