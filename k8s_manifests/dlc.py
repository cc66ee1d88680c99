"""AWS Deep Learning Container image URIs, per region."""

from __future__ import annotations

DLC_DEFAULT_ACCOUNT = "763104351884"
# Regions whose DLC registry lives in another account (the rest use DLC_DEFAULT_ACCOUNT).
DLC_REGISTRY_ACCOUNTS = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-northeast-3": "364406365360",
    "ap-south-2": "772153158452",
    "ap-southeast-3": "907027046896",
    "ca-west-1": "204538143572",
    "eu-central-2": "380420809688",
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "us-gov-west-1": "442386744353",
}
DLC_DEFAULT_ACCOUNT_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ca-central-1",
    "sa-east-1",
    "eu-central-1",
    "eu-north-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-south-1",
    "ap-southeast-1",
    "ap-southeast-2",
)


def dlc_registry(region: str) -> str:
    """``<account>.dkr.ecr.<region>.<suffix>`` of the DLC registry in ``region``."""
    if region in DLC_REGISTRY_ACCOUNTS:
        account = DLC_REGISTRY_ACCOUNTS[region]
    elif region in DLC_DEFAULT_ACCOUNT_REGIONS:
        account = DLC_DEFAULT_ACCOUNT
    else:
        known = sorted([*DLC_DEFAULT_ACCOUNT_REGIONS, *DLC_REGISTRY_ACCOUNTS])
        raise ValueError(
            f"region: no AWS Deep Learning Containers registry known for {region!r}; known: {', '.join(known)}"
        )
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{suffix}"


def dlc_image_uri(region: str, tag: str, repository: str = "pytorch-training") -> str:
    """The DLC image URI, e.g. ``763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:<tag>``."""
    if not tag:
        raise ValueError("dlc_image_tag: required, e.g. 2.8.0-gpu-py312-cu129-ubuntu22.04-ec2")
    return f"{dlc_registry(region)}/{repository}:{tag}"
