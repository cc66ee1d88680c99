"""What a rehearsal of an app on an existing EKS cluster (``existing_cluster_name``) takes from its owner.

The templates say what this app adds to that cluster (its node groups, its add-ons) but not what is there
already. Three things follow:

- The cluster's own nodes are unknown: ``--existing-nodes FILE`` (the output of ``kubectl get nodes -o
  yaml``) adds them as KWOK nodes with their labels, taints, capacity and allocatable (device counts
  included: their owner's device plugins advertise them). Without it, rehearse says that it rehearsed
  only the nodes this app creates.
- The node groups' launch templates name no security group, so EKS attaches the cluster security group:
  ``existing_cluster_security_group_id`` (there is no ``AWS::EKS::Cluster`` in the templates to read it
  from).
- The device plugins that ``install_addons`` leaves out are the owner's, assumed to run on every GPU node:
  those nodes advertise their GPUs and EFA devices from the start instead of waiting for our plugins' pods.

What rehearse still cannot know (their other workloads, their quotas and policies) is said in its notes.
"""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from llm_infra.config import TrainingConfig
from llm_infra.input_files import BadInput, read_text
from llm_infra.rehearsal.deploy_workloads import EFA, GPU, HUGEPAGES, NodeSpec
from llm_infra.versions import EFA_DEVICE_PLUGIN, NVIDIA_DEVICE_PLUGIN

FLAG = "--existing-nodes"
ADVICE = "pass the output of `kubectl get nodes -o yaml` on the existing cluster"
GROUP_LABEL = "eks.amazonaws.com/nodegroup"
# The device plugin (chart name, as install_addons names it) that advertises each extended resource.
PLUGIN_OF = {GPU: NVIDIA_DEVICE_PLUGIN.chart, EFA: EFA_DEVICE_PLUGIN.chart}
# Kubernetes quantity suffixes (k8s.io/apimachinery resource.Quantity): binary and decimal multipliers.
_SUFFIXES: dict[str, Decimal] = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_MIB = 2**20


def quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity (``191450m``, ``2045200Ki``, ``8``); ValueError if it is none."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    try:
        number = Decimal(match[1])
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from None
    return number * _SUFFIXES[match[2] or ""]


def _resources(values: dict[str, Any]) -> dict[str, int]:
    """A node's capacity or allocatable in NodeSpec's units: cpu in millicores, memory and hugepages in MiB."""
    found: dict[str, int] = {}
    for name, text in values.items():
        value = quantity(text)
        if name == "cpu":
            found[name] = int(value * 1000)
        elif name == "memory" or name == HUGEPAGES:
            found[name] = int(value // _MIB)
        elif name in ("pods", GPU, EFA):
            found[name] = int(value)
    return found


def _node(obj: dict[str, Any], where: str) -> NodeSpec:
    metadata, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name = metadata.get("name")
    if not name or not status.get("allocatable"):
        raise BadInput(f"{where}: a Node needs metadata.name and status.allocatable; {ADVICE}")
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    try:
        capacity = _resources(status.get("capacity") or status["allocatable"])
        allocatable = _resources(status["allocatable"])
    except ValueError as err:
        raise BadInput(f"{where}: node {name}: {err}") from None
    taints = [
        {"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]}
        for t in spec.get("taints") or []
        if t.get("key") != "node.kubernetes.io/not-ready"  # a condition's taint: the node lifecycle's own
    ]
    return NodeSpec(
        name=name,
        group=labels.get(GROUP_LABEL, "existing nodes"),
        instance_type=labels.get("node.kubernetes.io/instance-type", "unknown"),
        labels=labels,
        taints=taints,
        capacity=capacity,
        allocatable=allocatable,
        gpus=allocatable.get(GPU, 0),
        efa_devices=allocatable.get(EFA, 0),
    )


def read_existing_nodes(path: Path) -> list[NodeSpec]:
    """The Nodes of ``kubectl get nodes -o yaml`` (a List) or of a YAML stream of Node objects."""
    text = read_text(path, flag=FLAG, advice=ADVICE)
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as err:
        raise BadInput(f"{FLAG} {path}: not YAML ({' '.join(str(err).split())}); {ADVICE}") from None
    objects: list[Any] = []
    for doc in documents:
        objects += doc.get("items") or [] if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
    if not objects:
        raise BadInput(f"{FLAG} {path}: no Node in it; {ADVICE}")
    nodes = []
    for index, obj in enumerate(objects):
        if not isinstance(obj, dict) or obj.get("kind") != "Node":
            kind = obj.get("kind") if isinstance(obj, dict) else type(obj).__name__
            raise BadInput(f"{FLAG} {path}: object {index} is a {kind}, not a Node; {ADVICE}")
        nodes.append(_node(obj, f"{FLAG} {path}"))
    names = [n.name for n in nodes]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise BadInput(f"{FLAG} {path}: node {', '.join(twice)} given twice")
    return nodes


def owners_devices(config: TrainingConfig) -> list[str]:
    """The extended resources whose device plugin the existing cluster's owner runs (not in install_addons)."""
    if not config.existing_cluster:
        return []
    return [resource for resource, chart in PLUGIN_OF.items() if chart not in config.installs]


def with_owners_devices(node: NodeSpec, resources: list[str]) -> NodeSpec:
    """``node`` advertising its GPUs/EFA devices from the start, for each resource an owner's plugin serves."""
    counts = {GPU: node.gpus, EFA: node.efa_devices}
    added = {r: counts[r] for r in resources if counts[r]}
    if not added:
        return node
    return dataclasses.replace(node, capacity={**node.capacity, **added}, allocatable={**node.allocatable, **added})


def notes(config: TrainingConfig, existing: list[NodeSpec], existing_file: Path | None) -> list[str]:
    """What a rehearsal of an app on an existing cluster took from its owner, and what it cannot know."""
    if not config.existing_cluster:
        return []
    cluster = config.existing_cluster_name
    said = []
    if existing_file is None:
        said.append(
            f"existing cluster {cluster}: only the nodes this app adds are rehearsed; its own nodes are unknown "
            f"here: pass {FLAG} FILE (kubectl get nodes -o yaml) to add them"
        )
    else:
        said.append(f"existing cluster {cluster}: {len(existing)} of its nodes from {FLAG} {existing_file}")
    said.append(
        f"existing cluster {cluster}: its owner's workloads, quotas, policies and admission webhooks are not "
        "known here and not rehearsed; the add-ons install_addons names are"
    )
    for resource in owners_devices(config):
        said.append(
            f"existing cluster {cluster}: {PLUGIN_OF[resource]} is not in install_addons, so it is assumed to "
            f"run as the owner's: GPU nodes advertise {resource} from the start"
        )
    return said
