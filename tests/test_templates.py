"""Fine-grained assertions on what matters in the synthesized templates."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from llm_infra.config import DEFAULT_KUBERNETES_VERSION, ConfigError, TrainingConfig
from llm_infra.node_labels import GPU_TOLERATION
from llm_infra.rehearsal.upstream_charts import addon_pods
from llm_infra.versions import EFA_DEVICE_PLUGIN, EKS_ADDONS, NVIDIA_DEVICE_PLUGIN

NETWORK, STORAGE, CLUSTER = "-network", "-storage", "-cluster"


def launch_template_data(app) -> dict[str, Any]:
    (launch_template,) = app.resources(CLUSTER, "AWS::EC2::LaunchTemplate").values()
    return launch_template["Properties"]["LaunchTemplateData"]


def efa_sg_ref(app) -> Any:
    """The EFA security group id as the cluster stack sees it (an import from the network stack)."""
    interfaces = launch_template_data(app)["NetworkInterfaces"]
    return interfaces[-1]["Groups"][0]


# ---- GPU nodes: 32 EFA interfaces on p5 ---------------------------------------------------------
def test_p5_gets_32_efa_interfaces_with_the_right_indexes(default_app) -> None:
    interfaces = launch_template_data(default_app)["NetworkInterfaces"]
    efa = [i for i in interfaces if i.get("InterfaceType") in ("efa", "efa-only")]
    assert len(efa) == 32
    assert sorted(i["NetworkCardIndex"] for i in efa) == list(range(32))
    # Current EC2 guidance: ENA primary on card 0/device 0, efa-only on card 0/device 1,
    # efa-only on device 0 of cards 1..31.
    primary = interfaces[0]
    assert (primary["NetworkCardIndex"], primary["DeviceIndex"]) == (0, 0)
    assert "InterfaceType" not in primary
    assert {(i["NetworkCardIndex"], i["DeviceIndex"]) for i in efa} == {(0, 1)} | {(c, 0) for c in range(1, 32)}
    assert all(i["InterfaceType"] == "efa-only" for i in efa)


def test_every_nic_carries_the_efa_security_group(default_app) -> None:
    interfaces = launch_template_data(default_app)["NetworkInterfaces"]
    efa_sg = efa_sg_ref(default_app)
    assert all(efa_sg in i["Groups"] for i in interfaces)
    # The primary interface also carries the cluster security group (control plane, egress).
    assert any("ClusterSecurityGroupId" in str(group) for group in interfaces[0]["Groups"])


def test_legacy_layout_for_p4d(synth) -> None:
    app = synth(TrainingConfig(gpu_instance_type="p4d.24xlarge"))
    interfaces = launch_template_data(app)["NetworkInterfaces"]
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces] == [
        (0, 0, "efa"),
        (1, 1, "efa"),
        (2, 1, "efa"),
        (3, 1, "efa"),
    ]
    assert launch_template_data(app)["InstanceType"] == "p4d.24xlarge"


def test_no_efa_means_no_efa_interfaces_and_plain_security_groups(synth) -> None:
    app = synth(TrainingConfig(gpu_instance_type="g5.2xlarge"))
    data = launch_template_data(app)
    assert "NetworkInterfaces" not in data
    assert len(data["SecurityGroupIds"]) == 1
    (nodegroup,) = [
        n for n in app.resources(CLUSTER, "AWS::EKS::Nodegroup").values() if "LaunchTemplate" in n["Properties"]
    ]
    assert nodegroup["Properties"]["Labels"]["llm-infra.aws/efa"] == "false"


def test_gpu_launch_template_hardening_and_placement(default_app) -> None:
    data = launch_template_data(default_app)
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpPutResponseHopLimit": 1,
        "HttpTokens": "required",
    }
    assert data["InstanceType"] == "p5.48xlarge"
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 500
    assert "GroupName" in data["Placement"]
    template = Template.from_json(default_app.template(CLUSTER))
    template.has_resource_properties("AWS::EC2::PlacementGroup", {"Strategy": "cluster"})


def test_gpu_nodegroup_ami_taint_labels_scaling(synth) -> None:
    app = synth(TrainingConfig(gpu_nodes=4, gpu_nodes_min=2, gpu_nodes_max=8))
    Template.from_json(app.template(CLUSTER)).has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "AmiType": "AL2023_x86_64_NVIDIA",
            "CapacityType": "ON_DEMAND",
            "ScalingConfig": {"MinSize": 2, "DesiredSize": 4, "MaxSize": 8},
            "Taints": [{"Key": "nvidia.com/gpu", "Value": "true", "Effect": "NO_SCHEDULE"}],
            "Labels": {"llm-infra.aws/node-role": "gpu", "llm-infra.aws/efa": "true"},
            "NodeRepairConfig": {"Enabled": True},
            "Subnets": [Match.any_value()],
        },
    )


def test_hugepages_in_user_data(default_app) -> None:
    user_data = str(launch_template_data(default_app)["UserData"])
    assert "vm.nr_hugepages=5120" in user_data


def test_capacity_reservation_and_capacity_block(synth) -> None:
    reservation = synth(TrainingConfig(capacity_reservation_id="cr-0123456789abcdef0"))
    data = launch_template_data(reservation)
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert "InstanceMarketOptions" not in data

    block = synth(TrainingConfig(gpu_capacity="capacity-block", capacity_reservation_id="cr-0123456789abcdef1"))
    assert launch_template_data(block)["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    Template.from_json(block.template(CLUSTER)).has_resource_properties(
        "AWS::EKS::Nodegroup", {"CapacityType": "CAPACITY_BLOCK"}
    )


# ---- EFA security group: self rules both ways ---------------------------------------------------
def test_efa_security_group_allows_itself_inbound_and_outbound(default_app) -> None:
    network = default_app.template(NETWORK)
    (sg_id,) = [
        k
        for k, v in network["Resources"].items()
        if v["Type"] == "AWS::EC2::SecurityGroup" and "EFA" in v["Properties"]["GroupDescription"]
    ]
    ref = {"Fn::GetAtt": [sg_id, "GroupId"]}
    template = Template.from_json(network)
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupIngress", {"IpProtocol": "-1", "GroupId": ref, "SourceSecurityGroupId": ref}
    )
    template.has_resource_properties(
        "AWS::EC2::SecurityGroupEgress",
        {"IpProtocol": "-1", "GroupId": ref, "DestinationSecurityGroupId": ref},
    )
    # Nothing else leaves through the EFA group: no 0.0.0.0/0 egress on it.
    assert "SecurityGroupEgress" not in network["Resources"][sg_id]["Properties"]


# ---- VPC ------------------------------------------------------------------------------------------
def test_gpu_subnet_is_placed_by_az_id_on_the_secondary_cidr(default_app) -> None:
    network = default_app.template(NETWORK)
    template = Template.from_json(network)
    template.has_resource_properties("AWS::EC2::VPCCidrBlock", {"CidrBlock": "10.1.0.0/16"})
    gpu = [
        v
        for v in network["Resources"].values()
        if v["Type"] == "AWS::EC2::Subnet" and "AvailabilityZoneId" in v["Properties"]
    ]
    assert len(gpu) == 1
    assert gpu[0]["Properties"]["AvailabilityZoneId"] == "use1-az4"
    assert "AvailabilityZone" not in gpu[0]["Properties"]
    assert gpu[0]["Properties"]["CidrBlock"] == "10.1.0.0/16"
    assert len(gpu[0]["DependsOn"]) == 1


def test_vpc_endpoints_and_flow_logs(default_app) -> None:
    network = default_app.template(NETWORK)
    endpoints = [v["Properties"] for v in network["Resources"].values() if v["Type"] == "AWS::EC2::VPCEndpoint"]
    services = sorted(str(e["ServiceName"]) for e in endpoints)
    for service in ("ecr.api", "ecr.dkr", "sts", "logs", "sagemaker.api", "eks-auth", "s3"):
        assert any(service in s for s in services), (service, services)
    gateway = [e for e in endpoints if e.get("VpcEndpointType") == "Gateway"]
    assert len(gateway[0]["RouteTableIds"]) == 3  # two private subnets + the GPU subnet
    Template.from_json(network).has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL"})
    # Interface endpoints admit the GPU subnet (secondary CIDR) on 443.
    sgs = [v["Properties"] for v in network["Resources"].values() if v["Type"] == "AWS::EC2::SecurityGroup"]
    endpoint_sgs = [sg for sg in sgs if "10.1.0.0/16" in str(sg.get("SecurityGroupIngress"))]
    assert len(endpoint_sgs) == len([e for e in endpoints if e.get("VpcEndpointType") == "Interface"])


def test_az_id_rule_guards_the_region_when_synthesized_environment_agnostic(default_app, synth) -> None:
    rule = default_app.template(NETWORK)["Rules"]["GpuAzIdMatchesRegion"]
    assert rule["Assertions"][0]["Assert"] == {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-east-1"]}
    pinned = synth(TrainingConfig(account="123456789012", region="us-east-1"))
    assert "GpuAzIdMatchesRegion" not in pinned.template(NETWORK).get("Rules", {})


# ---- storage --------------------------------------------------------------------------------------
def test_fsx_persistent2_lz4_in_gpu_subnet_and_retained(default_app) -> None:
    storage = Template.from_json(default_app.template(STORAGE))
    storage.has_resource(
        "AWS::FSx::FileSystem",
        {
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": Match.object_like(
                {
                    "StorageCapacity": 1200,
                    "FileSystemTypeVersion": "2.15",
                    "LustreConfiguration": {
                        "DeploymentType": "PERSISTENT_2",
                        "PerUnitStorageThroughput": 250,
                        "DataCompressionType": "LZ4",
                    },
                }
            ),
        },
    )
    storage.has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemPath": "/data",
            "BatchImportMetaDataOnCreate": True,
            "S3": {
                "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                "AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
            },
        },
    )


def test_fsx_ports_open_to_itself_and_to_gpu_nodes(default_app) -> None:
    ingress = [v["Properties"] for v in default_app.resources(STORAGE, "AWS::EC2::SecurityGroupIngress").values()]
    assert all(i["IpProtocol"] == "tcp" for i in ingress)
    from_clients = [i for i in ingress if "Fn::ImportValue" in i["SourceSecurityGroupId"]]
    assert sorted((i["FromPort"], i["ToPort"]) for i in from_clients) == [(988, 988), (1018, 1023)]
    between_servers = [
        i for i in ingress if "Fn::GetAtt" in i["SourceSecurityGroupId"] and "Fn::GetAtt" in i["GroupId"]
    ]
    assert [(i["FromPort"], i["ToPort"]) for i in between_servers] == [(988, 1023)]
    # And back: the clients' (EFA) group admits the servers (tests/test_deploy_seams.py has the details).
    to_clients = [i for i in ingress if "Fn::ImportValue" in json.dumps(i["GroupId"])]
    assert sorted((i["FromPort"], i["ToPort"]) for i in to_clients) == [(988, 988), (1018, 1023)]
    # The EFA group restricts egress, so the client side gets matching egress rules.
    egress = [v["Properties"] for v in default_app.resources(STORAGE, "AWS::EC2::SecurityGroupEgress").values()]
    assert sorted((e["FromPort"], e["ToPort"]) for e in egress) == [(988, 988), (1018, 1023)]


def test_buckets_encrypted_tls_only_versioned_retained(default_app) -> None:
    storage = default_app.template(STORAGE)
    buckets = default_app.resources(STORAGE, "AWS::S3::Bucket")
    assert len(buckets) == 2  # data + checkpoints
    for bucket in buckets.values():
        assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
        props = bucket["Properties"]
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "AES256"
        }
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        rule = props["LifecycleConfiguration"]["Rules"][0]
        assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    Template.from_json(storage).has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )


def test_existing_data_bucket_is_imported_not_created(synth) -> None:
    app = synth(TrainingConfig(data_bucket="my-datasets", data_prefix="tokens/"))
    assert len(app.resources(STORAGE, "AWS::S3::Bucket")) == 1
    (dra,) = app.resources(STORAGE, "AWS::FSx::DataRepositoryAssociation").values()
    assert dra["Properties"]["DataRepositoryPath"] == "s3://my-datasets/tokens/"


# ---- IAM ------------------------------------------------------------------------------------------
def test_training_policy_reads_data_prefix_and_writes_checkpoints_only(default_app) -> None:
    (policy,) = default_app.resources(STORAGE, "AWS::IAM::ManagedPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    actions = sorted({a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])})
    assert actions == sorted(
        [
            "s3:ListBucket",
            "s3:GetObject",
            "s3:GetObjectVersion",
            "s3:PutObject",
            "s3:DeleteObject",
            "s3:AbortMultipartUpload",
            "s3:GetBucketLocation",  # tiered checkpointing's S3 tier
        ]
    )
    assert all(s["Effect"] == "Allow" and "*" not in str(s["Action"]) for s in statements)
    (location,) = [s for s in statements if "s3:GetBucketLocation" in s["Action"]]
    assert "Checkpoints" in str(location["Resource"]) and "/*" not in str(location["Resource"])
    data_list = [s for s in statements if "s3:ListBucket" in s["Action"] and "Condition" in s]
    assert data_list[0]["Condition"] == {"StringLike": {"s3:prefix": ["datasets/*"]}}
    assert "Data" in str(data_list[0]["Resource"]) and "s3:GetBucketLocation" not in data_list[0]["Action"]
    writes = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert len(writes) == 1 and "Checkpoints" in str(writes[0]["Resource"])


def test_training_role_is_pod_identity_bound(default_app) -> None:
    cluster = Template.from_json(default_app.template(CLUSTER))
    cluster.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"Namespace": "training", "ServiceAccount": "training"}
    )
    cluster.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                    }
                ]
            },
            "ManagedPolicyArns": [{"Fn::ImportValue": Match.string_like_regexp("TrainingAccess")}],
        },
    )


# ---- cluster ----------------------------------------------------------------------------------------
def test_cluster_auth_logging_encryption(default_app) -> None:
    cluster = Template.from_json(default_app.template(CLUSTER))
    cluster.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "AccessConfig": Match.object_like({"AuthenticationMode": "API_AND_CONFIG_MAP"}),
            "Version": "1.34",
            "EncryptionConfig": [Match.object_like({"Resources": ["secrets"]})],
            "Logging": {"ClusterLogging": {"EnabledTypes": Match.array_with([{"Type": "api"}, {"Type": "audit"}])}},
        },
    )
    cluster.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_addons_are_pinned_and_fsx_cni_cloudwatch_use_pod_identity(default_app) -> None:
    addons = {
        a["Properties"]["AddonName"]: a["Properties"]
        for a in default_app.resources(CLUSTER, "AWS::EKS::Addon").values()
    }
    assert set(addons) == {
        "vpc-cni",
        "coredns",
        "kube-proxy",
        "eks-pod-identity-agent",
        "aws-fsx-csi-driver",
        "amazon-cloudwatch-observability",
        "eks-node-monitoring-agent",
    }
    assert all(a.get("AddonVersion", "").startswith("v") for a in addons.values())
    major, minor = addons["vpc-cni"]["AddonVersion"][1:].split(".")[:2]
    assert (int(major), int(minor)) >= (1, 19), "efa-only interfaces need VPC CNI >= 1.19"
    associations = {
        (a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"])
        for a in default_app.resources(CLUSTER, "AWS::EKS::PodIdentityAssociation").values()
    }
    assert {
        ("kube-system", "aws-node"),
        ("kube-system", "fsx-csi-controller-sa"),
        ("amazon-cloudwatch", "cloudwatch-agent"),
    } <= associations


@pytest.mark.parametrize("compute", ["eks", "hyperpod"])
def test_every_addon_overwrites_conflicts(synth, compute: str) -> None:
    # EKS bootstraps self-managed aws-node, coredns and kube-proxy before any add-on; AWS's HyperPod EKS
    # template installs each bootstrap add-on with ResolveConflicts OVERWRITE (aws/sagemaker-hyperpod-
    # cluster-setup, eks/cloudformation/eks-template.yaml L83-118), and the template owns the others too.
    template = Template.from_json(synth(TrainingConfig(compute=compute)).template(CLUSTER))
    addons = {a["Properties"]["AddonName"] for a in template.find_resources("AWS::EKS::Addon").values()}
    bootstrap = {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"}
    hyperpod = {"cert-manager", "amazon-sagemaker-hyperpod-training-operator"}
    hyperpod.add("amazon-sagemaker-hyperpod-taskgovernance")
    operator = hyperpod if compute == "hyperpod" else set()
    others = {"aws-fsx-csi-driver", "amazon-cloudwatch-observability", "eks-node-monitoring-agent"}
    assert addons == bootstrap | others | operator
    template.all_resources_properties("AWS::EKS::Addon", {"ResolveConflicts": "OVERWRITE"})


def test_node_monitoring_agent_marks_gpu_faults_for_node_auto_repair(default_app) -> None:
    """Issue 31, item 5: the EKS node monitoring agent at its pin, OVERWRITE like the others, its DCGM host engine
    (through which it sees Xid errors) tolerating our GPU taint, its agent every taint; node auto repair on the
    GPU node group acts on the AcceleratedHardwareReady condition the agent sets."""
    template = Template.from_json(default_app.template(CLUSTER))
    (agent,) = [
        a["Properties"]
        for a in template.find_resources("AWS::EKS::Addon").values()
        if a["Properties"]["AddonName"] == "eks-node-monitoring-agent"
    ]
    assert agent["AddonVersion"] == EKS_ADDONS[DEFAULT_KUBERNETES_VERSION]["eks-node-monitoring-agent"]
    assert agent["ResolveConflicts"] == "OVERWRITE"
    assert json.loads(agent["ConfigurationValues"]) == {
        "nodeAgent": {"tolerations": [{"operator": "Exists"}]},
        "dcgmAgent": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }
    gpu_groups = [
        n["Properties"]
        for n in template.find_resources("AWS::EKS::Nodegroup").values()
        if n["Properties"].get("Labels", {}).get("llm-infra.aws/node-role") == "gpu"
    ]
    assert gpu_groups and all(g["NodeRepairConfig"] == {"Enabled": True} for g in gpu_groups)
    # What the agent's pods tolerate is what the rehearsal schedules (its model reads these values).
    pods = {
        p.name: p.spec
        for p in addon_pods("eks-node-monitoring-agent", agent["AddonVersion"], agent["ConfigurationValues"])
    }
    assert pods["dcgm-server"]["tolerations"] == [GPU_TOLERATION]


def test_device_plugins_are_pinned_helm_charts(default_app) -> None:
    # Where they land is the scheduling contract's business (test_contracts.py).
    charts = {
        c["Properties"]["Chart"]: c["Properties"]
        for c in default_app.resources(CLUSTER, "Custom::AWSCDK-EKS-HelmChart").values()
    }
    assert set(charts) == {"nvidia-device-plugin", "aws-efa-k8s-device-plugin", "kuberay-operator", "kueue"}
    assert charts["nvidia-device-plugin"]["Version"] == NVIDIA_DEVICE_PLUGIN.version
    assert charts["aws-efa-k8s-device-plugin"]["Version"] == EFA_DEVICE_PLUGIN.version


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, "create"),
        ({"gpu_capacity": "capacity-block", "capacity_reservation_id": "cr-0123456789abcdef0"}, None),
        ({"capacity_reservation_id": "cr-0123456789abcdef0", "gpu_placement_group": "odcr-pg"}, "odcr-pg"),
        ({"gpu_placement_group": "none"}, None),
    ],
)
def test_placement_group_is_created_given_or_left_out(synth, changes: dict, expected: str | None) -> None:
    # An ODCR made in a cluster placement group cannot launch into another one: reserved capacity gets
    # none by default, or the one it was made in.
    app = synth(TrainingConfig(**changes))
    (template,) = app.resources(CLUSTER, "AWS::EC2::LaunchTemplate").values()
    placement = template["Properties"]["LaunchTemplateData"].get("Placement")
    groups = app.resources(CLUSTER, "AWS::EC2::PlacementGroup")
    if expected == "create":
        (group_id,) = groups
        assert placement == {"GroupName": {"Fn::GetAtt": [group_id, "GroupName"]}}
    else:
        assert groups == {}
        assert placement == (None if expected is None else {"GroupName": expected})


def test_bad_placement_group_names_the_key() -> None:
    with pytest.raises(ConfigError, match="gpu_placement_group: 'bad name' is not allowed; allowed: create, none"):
        TrainingConfig(gpu_placement_group="bad name").validate()


def test_private_endpoint_option(synth) -> None:
    app = synth(TrainingConfig(endpoint_access="private"))
    Template.from_json(app.template(CLUSTER)).has_resource_properties(
        "AWS::EKS::Cluster",
        {"ResourcesVpcConfig": Match.object_like({"EndpointPrivateAccess": True, "EndpointPublicAccess": False})},
    )


@pytest.mark.parametrize("version", ["1.34", "1.35"])
def test_supported_kubernetes_versions_synthesize(synth, version: str) -> None:
    app = synth(TrainingConfig(kubernetes_version=version))
    Template.from_json(app.template(CLUSTER)).has_resource_properties("AWS::EKS::Cluster", {"Version": version})


def test_admin_role_gets_an_access_entry(synth) -> None:
    arn = "arn:aws:iam::123456789012:role/ml-admins"
    app = synth(TrainingConfig(admin_role_arn=arn))
    entries = [e["Properties"] for e in app.resources(CLUSTER, "AWS::EKS::AccessEntry").values()]
    (admin,) = [e for e in entries if e["PrincipalArn"] == arn]
    assert admin["AccessPolicies"][0]["AccessScope"] == {"Type": "cluster"}
    assert "AmazonEKSClusterAdminPolicy" in str(admin["AccessPolicies"][0]["PolicyArn"])


@pytest.mark.parametrize("compute", ["eks", "hyperpod"])
def test_synth_warns_of_nothing(synth, compute: str) -> None:
    """`cdk synth` prints each construct warning with a jsii source line (`.../lib/program.js:1:5591`):
    the default app's synth output is the summary alone."""
    assert synth(TrainingConfig(compute=compute)).warnings == []
