"""Contracts with the components we do not write, checked on the synthesized templates and manifests:
that the device-plugin charts' default placement would keep their pods off our nodes (the defects our
values fix), that every node a pod which mounts FSx may run on serves and admits FSx, that GPU nodes
admit each other's EFA traffic, and that every custom resource kind we use has its operator installed,
in time.
Models: ``upstream_charts.py``, ``cluster_model.py`` (why a scheduler run cannot answer these: its
docstring). Where pods land and whether they fit: tests/test_scheduling_real.py, on the real scheduler.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cluster_model import admission_problem, custom_kind, deploy_pods, pod_templates, yaml_objects

from conftest import RAY_TEST_IMAGE, hyperpod_config
from llm_infra.config import TrainingConfig
from llm_infra.constructs.lustre_storage import LUSTRE_PORTS
from llm_infra.k8s_manifests.render import write_dist
from llm_infra.rehearsal.deploy_workloads import (
    NodeSpec,
    Templates,
    applied_objects,
    helm_operator_switches,
    hyperpod_hugepages,
    template_nodes,
)
from llm_infra.rehearsal.upstream_charts import NoModel, PodTemplate, addon_pods, chart_model, hyperpod_chart
from llm_infra.versions import EFA_DEVICE_PLUGIN, EKS_ADDONS, NVIDIA_DEVICE_PLUGIN

# With a Ray image, so that dist holds the Ray manifests too (it changes no template).
CONFIGS = {"eks": TrainingConfig(ray_image=RAY_TEST_IMAGE), "hyperpod": hyperpod_config(ray_image=RAY_TEST_IMAGE)}
OUTPUTS = {"llm-infra-storage": {"FileSystemId": "fs-0", "FileSystemDnsName": "fs-0.fsx", "FileSystemMountName": "m"}}
LUSTRE_TCP_PORTS = [p.to_rule_json() for p in LUSTRE_PORTS]


class Deployment:
    """One compute mode as deployed: templates, nodes, what deploy applies, what users apply later."""

    def __init__(self, app, config: TrainingConfig, dist_dir: Path) -> None:
        self.templates = Templates(app.templates)
        self.config = config
        self.hyperpod_hugepages_mib = hyperpod_hugepages(self.templates, app.outdir)
        dist_dir.mkdir(parents=True, exist_ok=True)
        outputs = dist_dir / "cdk-outputs.json"
        outputs.write_text(json.dumps(OUTPUTS))
        self.dist = {p.name.removesuffix(".k8s.yaml"): p for p in write_dist(config, dist_dir, outputs_file=outputs)}

    def nodes(self) -> list[NodeSpec]:
        return template_nodes(self.templates, hyperpod_hugepages_mib=self.hyperpod_hugepages_mib)

    def deploy_pods(self) -> list[PodTemplate]:
        return deploy_pods(self.templates)

    def on_demand(self, name: str) -> list[PodTemplate]:
        return [p for obj in yaml_objects([self.dist[name]]) for p in pod_templates(obj)]


@pytest.fixture(scope="module", params=list(CONFIGS))
def deployed(request, synth, tmp_path_factory) -> Deployment:
    config = CONFIGS[request.param]
    return Deployment(synth(config), config, tmp_path_factory.mktemp(f"dist-{request.param}"))


def gpu_nodes(cluster: list[NodeSpec]) -> list[NodeSpec]:
    return [n for n in cluster if n.gpus]


# ---- the chart defaults our values override (regressions) -------------------------------------
def test_the_nvidia_charts_default_affinity_matches_none_of_our_nodes(deployed: Deployment) -> None:
    # Only a nodeSelector on our label (the first version's values) keeps the chart's default affinity
    # (NFD or nvidia.com/gpu.present labels), which EKS and HyperPod nodes do not carry.
    (plugin, _) = chart_model(NVIDIA_DEVICE_PLUGIN.chart, NVIDIA_DEVICE_PLUGIN.version).render(
        {"nodeSelector": {"llm-infra.aws/node-role": "gpu"}}
    )
    assert all(admission_problem(n, plugin.spec) for n in deployed.nodes())


def test_the_efa_charts_default_instance_list_misses_hyperpod_nodes(synth) -> None:
    deployed_nodes = [n for n in template_nodes(Templates(synth(CONFIGS["hyperpod"]).templates)) if n.efa_devices]
    (plugin,) = chart_model(EFA_DEVICE_PLUGIN.chart, EFA_DEVICE_PLUGIN.version).render(
        {"nodeSelector": {"llm-infra.aws/efa": "true"}}
    )
    assert deployed_nodes and all(admission_problem(n, plugin.spec) for n in deployed_nodes)


# ---- reachability ----------------------------------------------------------------------------
def _rules(templates: Templates, group: str, direction: str) -> list[dict[str, Any]]:
    """Every ``Ingress`` or ``Egress`` rule of ``group``, inline and standalone, peers resolved."""
    peer_key = "SourceSecurityGroupId" if direction == "Ingress" else "DestinationSecurityGroupId"
    rules = []
    for stack, logical_id, resource in templates.resources("AWS::EC2::SecurityGroup"):
        if f"{stack}/{logical_id}.GroupId" == group:
            for rule in resource["Properties"].get(f"SecurityGroup{direction}", []):
                rules.append({**rule, "peer": templates.identity(stack, rule.get(peer_key, ""))})
    for stack, _, resource in templates.resources(f"AWS::EC2::SecurityGroup{direction}"):
        props = resource["Properties"]
        if templates.identity(stack, props["GroupId"]) == group:
            rules.append({**props, "peer": templates.identity(stack, props.get(peer_key, ""))})
    return rules


def _admitted(rules: list[dict[str, Any]], port: dict[str, Any]) -> set[str]:
    """The peers that ``rules`` allow on ``port``."""
    return {
        r["peer"]
        for r in rules
        if r["IpProtocol"] == "-1"
        or (r["IpProtocol"] == "tcp" and r["FromPort"] <= port["fromPort"] and port["toPort"] <= r["ToPort"])
    }


def test_every_pod_that_mounts_fsx_runs_only_where_lustre_is_admitted(deployed: Deployment) -> None:
    templates = deployed.templates
    (fsx_group,) = [
        f"{stack}/{logical_id}.GroupId"
        for stack, logical_id, _ in templates.resources("AWS::EC2::SecurityGroup")
        if "Lustre" in logical_id
    ]
    rules = _rules(templates, fsx_group, "Ingress")
    cluster = deployed.nodes()
    pods = deployed.deploy_pods() + [p for name in deployed.dist for p in deployed.on_demand(name)]
    mounting = [
        p
        for p in pods
        if any((v.get("persistentVolumeClaim") or {}).get("claimName") == "fsx-data" for v in p.spec.get("volumes", []))
    ]
    # The always-on RayCluster and its Redis on EKS; under HyperPod's task governance the Ray job's cluster alone.
    ray = {"ray", "ray-gcs-redis"} if deployed.config.compute == "eks" else {"ray-train-cluster"}
    assert {p.name.split("/")[1] for p in mounting} >= {*ray, "validation-1-health", "train"}
    (csi_node,) = [p for p in pods if p.name == "fsx-csi-node"]
    for pod in mounting:
        candidates = [n for n in cluster if admission_problem(n, pod.spec) is None]
        assert candidates, f"{pod.name} has no node"
        for node in candidates:
            assert admission_problem(node, csi_node.spec) is None, f"{pod.name} may run on {node.name}: no FSx CSI node"
            for port in LUSTRE_TCP_PORTS:
                assert node.security_groups & _admitted(rules, port), (
                    f"{pod.name} may run on {node.name}, whose groups the FSx group does not admit on TCP {port}"
                )


def test_gpu_nodes_reach_each_other_over_the_efa_group(deployed: Deployment) -> None:
    # Security groups add up: EFA traffic flows when a group on every EFA interface allows all traffic
    # from and to itself (the EFA requirement).
    templates = deployed.templates
    every_port = {"fromPort": 0, "toPort": 65535}

    def self_admitting(group: str) -> bool:
        return group in _admitted(_rules(templates, group, "Ingress"), every_port) and group in _admitted(
            _rules(templates, group, "Egress"), every_port
        )

    for node in gpu_nodes(deployed.nodes()):
        assert node.efa_security_groups, f"{node.name}: no group on its EFA interfaces"
        assert any(self_admitting(g) for g in node.efa_security_groups), f"{node.name}: EFA peers not admitted"


# ---- operators -------------------------------------------------------------------------------
# EKS add-on -> the custom resource kinds whose CRDs it installs (AWS docs, "Using the HyperPod
# training operator": the add-on runs the operator of HyperPodPyTorchJob, sagemaker.amazonaws.com/v1).
ADDON_CRDS = {"amazon-sagemaker-hyperpod-training-operator": {("sagemaker.amazonaws.com", "HyperPodPyTorchJob")}}
# The job kind the charts render per mode (HyperPod: with the training operator, the default).
JOB_KINDS = {"eks": ("kubeflow.org", "PyTorchJob"), "hyperpod": ("sagemaker.amazonaws.com", "HyperPodPyTorchJob")}


def _installers(templates: Templates) -> dict[tuple[str, str], tuple[str, str]]:
    """Custom resource kind -> (stack, logical id) of the resource that installs its CRD."""
    found = {}
    for stack, logical_id, addon in templates.resources("AWS::EKS::Addon"):
        for kind in ADDON_CRDS.get(addon["Properties"]["AddonName"], ()):
            found[kind] = (stack, logical_id)
    for stack, logical_id, chart in templates.resources("Custom::AWSCDK-EKS-HelmChart"):
        props = chart["Properties"]
        for kind in chart_model(props["Chart"], props["Version"]).crds:
            found[kind] = (stack, logical_id)
    for stack, logical_id, nested in templates.resources("AWS::CloudFormation::Stack"):
        for kind in hyperpod_chart(helm_operator_switches(nested))[1]:
            found[kind] = (stack, logical_id)
    return found


@pytest.mark.parametrize("apply_jobs", [False, True])
def test_every_custom_kind_has_its_operator_installed_first(synth, tmp_path, apply_jobs: bool) -> None:
    for compute, config in CONFIGS.items():
        config = config.with_(apply_jobs=apply_jobs)
        deployed = Deployment(synth(config), config, tmp_path / compute)
        installers = _installers(deployed.templates)
        applied = set()
        for stack, logical_id, obj in applied_objects(deployed.templates):
            kind = custom_kind(obj)
            if kind is not None:
                applied.add(kind)
                assert kind in installers, f"{compute}: {kind} is applied but nothing installs it"
                assert installers[kind][1] in deployed.templates.depends_on(stack, logical_id), (
                    f"{compute}: {logical_id} ({kind[1]}) may be applied before its CRD exists"
                )
        # Deploy applies the job kind only with apply_jobs, and never a Ray kind (their GPU workers run on
        # demand); what users apply from dist later still needs its operator, installed at deploy.
        assert (JOB_KINDS[compute] in applied) is apply_jobs, f"{compute}: applies {applied}"
        assert not {kind for kind in applied if kind[0] == "ray.io"}, f"{compute}: applies {applied}"
        rendered = {custom_kind(obj) for obj in yaml_objects(deployed.dist.values())} - {None}
        assert rendered <= set(installers), f"{compute}: no operator for {rendered - set(installers)}"
        assert {JOB_KINDS[compute], ("ray.io", "RayJob")} <= rendered
        assert (("ray.io", "RayCluster") in rendered) is (compute == "eks")  # none under task governance


def test_without_operators_nothing_installs_pytorchjob(synth) -> None:
    app = synth(TrainingConfig(operators="none", endpoint_access="private"))
    assert ("kubeflow.org", "PyTorchJob") not in _installers(Templates(app.templates))


def test_the_coredns_model_runs_what_eks_may_scale_to() -> None:
    """Autoscaled CoreDNS is modelled at its maxReplicas (the most EKS keeps), so a rehearsal shows whether the
    system nodes hold them; what the model does not read is refused, not ignored."""
    from llm_infra.constructs.training_cluster import coredns_configuration

    version = EKS_ADDONS[TrainingConfig().kubernetes_version]["coredns"]
    (pod,) = addon_pods("coredns", version)
    assert pod.replicas == 2
    (scaled,) = addon_pods("coredns", version, json.dumps(coredns_configuration(258)))
    assert scaled.replicas == 17 and scaled.spec == pod.spec
    with pytest.raises(NoModel, match="reads autoScaling only, got replicaCount"):
        addon_pods("coredns", version, json.dumps({"replicaCount": 3}))
    with pytest.raises(NoModel, match="autoScaling without maxReplicas"):
        addon_pods("coredns", version, json.dumps({"autoScaling": {"enabled": True}}))


def test_the_model_merges_values_like_helm() -> None:
    # Maps merge, lists are replaced, null deletes: the semantics the device-plugin values rely on.
    from llm_infra.rehearsal.upstream_charts import NVIDIA_DEFAULTS, helm_coalesce

    ours = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}
    merged = helm_coalesce(NVIDIA_DEFAULTS, copy.deepcopy(ours))
    assert merged["affinity"] == ours["affinity"] and merged["tolerations"] == NVIDIA_DEFAULTS["tolerations"]
    assert "affinity" not in helm_coalesce(NVIDIA_DEFAULTS, {"affinity": None})
