"""Network-interface layouts for multi-card EFA instances, as launch-template entries."""

from __future__ import annotations

from typing import Any

from llm_infra.instance_types import EfaLayout, InstanceProfile


def network_interfaces(
    profile: InstanceProfile,
    layout: EfaLayout,
    *,
    primary_security_group_ids: list[str],
    efa_security_group_id: str,
) -> list[dict[str, Any]]:
    """The ``NetworkInterfaces`` of a launch template for ``profile`` in ``layout``.

    The primary interface (card 0, device 0) carries all security groups; every EFA interface
    carries the EFA security group, which EFA needs on each interface. The number of EFA
    interfaces equals ``profile.efa_interfaces`` (32 on p5.48xlarge) in both layouts.
    """
    if not profile.efa_supported:
        raise ValueError(f"{profile.instance_type} has no EFA; no EFA layout applies")
    primary_groups = [*primary_security_group_ids, efa_security_group_id]
    efa_groups = [efa_security_group_id]
    interfaces: list[dict[str, Any]] = []
    if layout is EfaLayout.EFA_ONLY:
        # ENA primary, then one efa-only interface per card (card 0 on device 1).
        interfaces.append(_interface(0, 0, None, primary_groups))
        interfaces.append(_interface(0, 1, "efa-only", efa_groups))
        interfaces += [_interface(card, 0, "efa-only", efa_groups) for card in range(1, profile.efa_interfaces)]
    elif layout is EfaLayout.EFA_LEGACY:
        interfaces.append(_interface(0, 0, "efa", primary_groups))
        interfaces += [_interface(card, 1, "efa", efa_groups) for card in range(1, profile.efa_interfaces)]
    else:  # pragma: no cover - exhaustive over the enum
        raise ValueError(f"unknown EFA layout {layout!r}")
    return interfaces


def _interface(card: int, device: int, interface_type: str | None, groups: list[str]) -> dict[str, Any]:
    interface: dict[str, Any] = {
        "NetworkCardIndex": card,
        "DeviceIndex": device,
        "Groups": groups,
        "DeleteOnTermination": True,
    }
    if interface_type is not None:
        interface["InterfaceType"] = interface_type
    return interface
