"""compute=hyperpod: the HyperPodCluster construct, its role, lifecycle upload and EKS dependencies."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

from conftest import hyperpod_config
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.constructs.hyperpod_cluster import LIFECYCLE_SCRIPTS, HyperPodCluster, HyperPodInstanceGroup
from llm_infra.node_labels import NODE_ROLE_LABEL

CLUSTER = "-cluster"


@pytest.fixture(scope="module")
def hyperpod_app(synth):
    return synth(hyperpod_config())


def sagemaker_cluster(app) -> dict:
    (cluster,) = app.resources(CLUSTER, "AWS::SageMaker::Cluster").values()
    return cluster


def logical_id(app, resource_type: str) -> str:
    (lid,) = app.resources(CLUSTER, resource_type)
    return lid


def test_orchestrator_is_a_reference_to_our_eks_cluster(hyperpod_app) -> None:
    props = sagemaker_cluster(hyperpod_app)["Properties"]
    assert props["Orchestrator"] == {
        "Eks": {"ClusterArn": {"Fn::GetAtt": [logical_id(hyperpod_app, "AWS::EKS::Cluster"), "Arn"]}}
    }


def test_resilience_settings(hyperpod_app) -> None:
    props = sagemaker_cluster(hyperpod_app)["Properties"]
    assert props["NodeRecovery"] == "Automatic"
    gpu, _ = props["InstanceGroups"]  # and the CPU group, below
    assert gpu["InstanceType"] == "ml.p5.48xlarge"
    assert gpu["InstanceCount"] == 2
    assert gpu["ThreadsPerCore"] == 1
    assert gpu["OnStartDeepHealthChecks"] == ["InstanceStress", "InstanceConnectivity"]
    assert gpu["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}]
    assert gpu["KubernetesConfig"]["Labels"] == {"llm-infra.aws/node-role": "gpu", "llm-infra.aws/efa": "true"}
    assert gpu["KubernetesConfig"]["Taints"] == [{"Effect": "NoSchedule", "Key": "nvidia.com/gpu", "Value": "true"}]


def test_vpc_config_uses_gpu_subnet_and_efa_security_group(hyperpod_app) -> None:
    vpc = sagemaker_cluster(hyperpod_app)["Properties"]["VpcConfig"]
    (subnet,) = vpc["Subnets"]
    assert "GpuSubnet" in subnet["Fn::ImportValue"]
    assert any("EfaSecurityGroup" in str(sg) for sg in vpc["SecurityGroupIds"])
    assert any("ClusterSecurityGroupId" in str(sg) for sg in vpc["SecurityGroupIds"])


def test_lifecycle_uri_resolves_to_the_uploaded_asset(hyperpod_app) -> None:
    deployments = hyperpod_app.resources(CLUSTER, "Custom::CDKBucketDeployment")
    bucket_ref = {"Ref": logical_id(hyperpod_app, "AWS::S3::Bucket")}
    for group in sagemaker_cluster(hyperpod_app)["Properties"]["InstanceGroups"]:
        lifecycle = group["LifeCycleConfig"]
        assert lifecycle["OnCreate"] == "on_create.sh"
        prefix = f"hyperpod/lifecycle/{group['InstanceGroupName']}/"
        assert lifecycle["SourceS3Uri"] == {"Fn::Join": ["", ["s3://", bucket_ref, f"/{prefix}"]]}
        # Each group's scripts are uploaded under its prefix before the cluster is created.
        (deployment_id,) = [
            lid for lid, d in deployments.items() if d["Properties"]["DestinationBucketKeyPrefix"] == prefix
        ]
        assert deployments[deployment_id]["Properties"]["DestinationBucketName"] == bucket_ref
        assert deployment_id in sagemaker_cluster(hyperpod_app)["DependsOn"]


def test_every_lifecycle_file_is_uploaded(hyperpod_app) -> None:
    # The folder asset staged in cdk.out holds every file of the lifecycle folder, not only on_create.sh.
    staged = [p for p in hyperpod_app.outdir.glob("asset.*") if p.is_dir() and (p / "on_create.sh").is_file()]
    assert len(staged) == 1
    expected = sorted(p.name for p in LIFECYCLE_SCRIPTS.iterdir() if p.is_file())
    assert sorted(p.name for p in staged[0].iterdir()) == expected
    assert len(expected) >= 2
    # Each group's deployment copies the scripts and that group's own lifecycle.env.
    envs = [p for p in hyperpod_app.outdir.glob("asset.*") if p.is_dir() and (p / "lifecycle.env").is_file()]
    assert sorted((env / "lifecycle.env").read_text() for env in envs) == [
        "HUGEPAGES_2MIB=0\n",
        "HUGEPAGES_2MIB=5120\n",
    ]
    for deployment in hyperpod_app.resources(CLUSTER, "Custom::CDKBucketDeployment").values():
        keys = json.dumps(deployment["Properties"]["SourceObjectKeys"])
        assert staged[0].name.removeprefix("asset.") in keys
        assert sum(env.name.removeprefix("asset.") in keys for env in envs) == 1


def test_execution_role_trust_and_policies(hyperpod_app) -> None:
    roles = hyperpod_app.resources(CLUSTER, "AWS::IAM::Role")
    (role_id,) = [
        k
        for k, v in roles.items()
        if "sagemaker.amazonaws.com" in json.dumps(v["Properties"]["AssumeRolePolicyDocument"])
    ]
    role = roles[role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}}
    ]
    assert "AmazonSageMakerClusterInstanceRolePolicy" in json.dumps(role["ManagedPolicyArns"])
    policies = [
        p["Properties"]
        for p in hyperpod_app.resources(CLUSTER, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    statements = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    # Every action of AWS's reference execution role (awsome-distributed-training,
    # 7.sagemaker-hyperpod-eks/cfn-templates/nested-stacks/sagemaker-iam-role-stack.yaml, inline policy).
    reference = {
        "ec2:AssignPrivateIpAddresses",
        "ec2:CreateNetworkInterface",
        "ec2:CreateNetworkInterfacePermission",
        "ec2:DeleteNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeVpcs",
        "ec2:DescribeDhcpOptions",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "ec2:DetachNetworkInterface",
        "ec2:ModifyNetworkInterfaceAttribute",
        "ec2:UnassignPrivateIpAddresses",
        "ec2:CreateTags",
        "ecr:BatchCheckLayerAvailability",
        "ecr:BatchGetImage",
        "ecr:GetAuthorizationToken",
        "ecr:GetDownloadUrlForLayer",
        "eks-auth:AssumeRoleForPodIdentity",
        "cloudwatch:DescribeAlarms",
        "s3:GetObject",
    }
    assert reference <= actions, sorted(reference - actions)
    assert not any(a.endswith("*") for a in actions)
    (pod_identity,) = [s for s in statements if s["Action"] == "eks-auth:AssumeRoleForPodIdentity"]
    assert pod_identity["Resource"] == {"Fn::GetAtt": [logical_id(hyperpod_app, "AWS::EKS::Cluster"), "Arn"]}


def actions_of(statement: dict) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else action


def resources_of(statement: dict) -> list:
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


def execution_role_policy(app) -> tuple[str, dict]:
    """The execution role's logical id and its inline policy (the role's DefaultPolicy)."""
    roles = app.resources(CLUSTER, "AWS::IAM::Role")
    (role_id,) = [k for k in roles if k.startswith("HyperPodExecutionRole")]
    (policy,) = [
        p["Properties"]
        for p in app.resources(CLUSTER, "AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": role_id}]
    ]
    return role_id, policy


def ec2_arn(resource_type: str, name: object = "*") -> dict:
    """``arn:<partition>:ec2:<region>:<account>:<resource_type>/<name>`` as the template writes it."""
    tail = [f":{resource_type}/{name}"] if isinstance(name, str) else [f":{resource_type}/", name]
    return {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, ":ec2:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"}] + tail,
        ]
    }


def test_execution_role_changes_the_network_only_where_aws_reference_role_does(hyperpod_app) -> None:
    # AWS's reference execution role (aws/sagemaker-hyperpod-cluster-setup,
    # eks/cloudformation/sagemaker-iam-role-template.yaml): Attach on instances and ENIs (L197-202), the ENI
    # mutations on instances, ENIs, the VPC (L223-235), each subnet and security group (L283-572), CreateTags on
    # ENIs (L212-217, L256-259), the describe calls on * (L203-211, L236-242).
    role_id, policy = execution_role_policy(hyperpod_app)
    statements = policy["PolicyDocument"]["Statement"]
    # No EC2 action but a describe (which takes no resource ARN) is granted on "*".
    on_star = sorted(a for s in statements if "*" in resources_of(s) for a in actions_of(s))
    assert [a for a in on_star if a.startswith("ec2:") and not a.startswith("ec2:Describe")] == [], on_star
    # The exact resources: this account's and region's instances and ENIs, the cluster's VPC, subnet and
    # security groups (HyperPod's VpcConfig), and the VPC the network stack exports.
    vpc_config = sagemaker_cluster(hyperpod_app)["Properties"]["VpcConfig"]
    network = hyperpod_app.template("-network")
    (vpc_id,) = hyperpod_app.resources("-network", "AWS::EC2::VPC")
    (vpc_export,) = [
        o["Export"]["Name"] for o in network["Outputs"].values() if o["Value"] == {"Ref": vpc_id} and "Export" in o
    ]
    instances, interfaces = ec2_arn("instance"), ec2_arn("network-interface")
    in_the_cluster_subnet = [
        instances,
        interfaces,
        ec2_arn("vpc", {"Fn::ImportValue": vpc_export}),
        *(ec2_arn("subnet", subnet) for subnet in vpc_config["Subnets"]),
        *(ec2_arn("security-group", group) for group in vpc_config["SecurityGroupIds"]),
    ]
    assert len(in_the_cluster_subnet) == 6  # the GPU subnet, the EFA and the cluster security group
    mutations = [
        "ec2:AssignPrivateIpAddresses",
        "ec2:CreateNetworkInterface",
        "ec2:CreateNetworkInterfacePermission",
        "ec2:DeleteNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission",
        "ec2:ModifyNetworkInterfaceAttribute",
        "ec2:UnassignPrivateIpAddresses",
    ]
    # As sets: cdk.json's @aws-cdk/aws-iam:minimizePolicies sorts actions and resources.
    by_sid = {statement.get("Sid"): statement for statement in statements}

    def granted(sid: str) -> tuple[list[str], list[str]]:
        statement = by_sid[sid]
        assert statement["Effect"] == "Allow" and set(statement) == {"Sid", "Effect", "Action", "Resource"}
        return sorted(actions_of(statement)), sorted(json.dumps(r, sort_keys=True) for r in resources_of(statement))

    def as_json(resources: list[object]) -> list[str]:
        return sorted(json.dumps(r, sort_keys=True) for r in resources)

    assert granted("AttachInterfaces") == (
        ["ec2:AttachNetworkInterface", "ec2:DetachNetworkInterface"],
        as_json([instances, interfaces]),
    )
    assert granted("InterfacesInTheClusterSubnet") == (mutations, as_json(in_the_cluster_subnet))
    assert granted("TagInterfaces") == (["ec2:CreateTags"], as_json([interfaces]))
    assert role_id in json.dumps(policy["Roles"])
    # Every EC2 action is in exactly one statement, so the statements above are all that grant them.
    ec2_actions = [a for s in statements for a in actions_of(s) if a.startswith("ec2:")]
    assert len(ec2_actions) == len(set(ec2_actions))


def test_execution_role_lists_the_lifecycle_bucket_and_reads_its_prefix(hyperpod_app) -> None:
    # As AWS's reference role (sagemaker-iam-role-template.yaml L260-272): s3:ListBucket on the bucket with no
    # prefix condition (HyperPod may list from the root when it checks SourceS3Uri), objects read-only.
    _, policy = execution_role_policy(hyperpod_app)
    s3 = [s for s in policy["PolicyDocument"]["Statement"] if any(a.startswith("s3:") for a in actions_of(s))]
    bucket_arn = {"Fn::GetAtt": [logical_id(hyperpod_app, "AWS::S3::Bucket"), "Arn"]}
    assert s3 == [
        {"Sid": "ListLifecycleBucket", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn},
        {
            "Sid": "ReadLifecycleScripts",
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": {"Fn::Join": ["", [bucket_arn, "/hyperpod/lifecycle/*"]]},
        },
    ]


def test_no_access_entry_for_the_execution_role(hyperpod_app) -> None:
    # HyperPod creates the execution role's EKS access entry itself (SageMaker API, ClusterMetadata.
    # EksRoleAccessEntries: "This is created by HyperPod on your behalf"); a second one would conflict.
    entries = hyperpod_app.resources(CLUSTER, "AWS::EKS::AccessEntry")
    assert not [e for e in entries.values() if e["Properties"].get("Type") == "HYPERPOD_LINUX"]
    assert not any("ExecutionRole" in json.dumps(e["Properties"]["PrincipalArn"]) for e in entries.values())


def test_dependencies_stack_installed_before_the_cluster(hyperpod_app) -> None:
    (stack_id,) = hyperpod_app.resources(CLUSTER, "AWS::CloudFormation::Stack")
    assert stack_id in sagemaker_cluster(hyperpod_app)["DependsOn"]
    operators = hyperpod_app.resources(CLUSTER, "AWS::CloudFormation::Stack")[stack_id]["Properties"]["Parameters"]
    switches = dict(pair.split("=") for pair in operators["HelmOperators"].split(","))
    for enabled in (
        "health-monitoring-agent.enabled",
        "deep-health-check.enabled",
        "job-auto-restart.enabled",
        "trainingOperators.enabled",
        "mpi-operator.enabled",
    ):
        assert switches[enabled] == "true", enabled
    # One owner per device plugin: ours (pinned), never the chart's too.
    assert switches["nvidia-device-plugin.devicePlugin.enabled"] == "false"
    assert switches["aws-efa-k8s-device-plugin.devicePlugin.enabled"] == "false"
    charts = hyperpod_app.resources(CLUSTER, "Custom::AWSCDK-EKS-HelmChart")
    plugins = [
        v["Properties"]
        for v in charts.values()
        if v["Properties"].get("Chart") in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin")
    ]
    assert len(plugins) == 2
    assert all("sagemaker.amazonaws.com/node-health-status" in json.dumps(p["Values"]) for p in plugins)


def test_hyperpod_replaces_the_gpu_node_group(hyperpod_app, default_app) -> None:
    assert hyperpod_app.resources(CLUSTER, "AWS::EC2::LaunchTemplate") == {}
    assert len(hyperpod_app.resources(CLUSTER, "AWS::EKS::Nodegroup")) == 1  # system nodes only
    assert default_app.resources(CLUSTER, "AWS::SageMaker::Cluster") == {}
    # Network and storage are the same in both modes.
    assert hyperpod_app.template("-network") == default_app.template("-network")
    assert hyperpod_app.template("-storage") == default_app.template("-storage")


def test_cpu_group_training_plan_and_tiered_checkpointing(synth) -> None:
    app = synth(
        hyperpod_config(
            hyperpod_cpu_nodes=1,
            hyperpod_training_plan_arn="arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5-plan",
            hyperpod_tiered_checkpointing_percent=20,
        )
    )
    props = sagemaker_cluster(app)["Properties"]
    gpu, cpu = props["InstanceGroups"]
    assert gpu["TrainingPlanArn"].endswith("training-plan/p5-plan")
    assert cpu["InstanceType"] == "ml.m5.2xlarge"
    assert "OnStartDeepHealthChecks" not in cpu and "Taints" not in cpu["KubernetesConfig"]
    assert props["TieredStorageConfig"] == {"Mode": "Enable", "InstanceMemoryAllocationPercentage": 20}


def test_a_cpu_group_by_default_only_with_the_training_operator(hyperpod_app, synth) -> None:
    # The training operator's controller runs there (HyperPodTrainingOperator); AWS's reference
    # HyperPod EKS cluster has the same general-purpose group: one ml.m5.2xlarge, ThreadsPerCore 1
    # (awslabs/awsome-distributed-ai 1.architectures/7.sagemaker-hyperpod-eks/cfn-templates/nested-stacks/
    # main-stack.yaml, GeneralPurposeInstance*).
    _, cpu = sagemaker_cluster(hyperpod_app)["Properties"]["InstanceGroups"]
    assert (cpu["InstanceType"], cpu["InstanceCount"], cpu["ThreadsPerCore"]) == ("ml.m5.2xlarge", 1, 1)
    assert cpu["KubernetesConfig"]["Labels"][NODE_ROLE_LABEL] == "cpu" and "Taints" not in cpu["KubernetesConfig"]
    without = synth(hyperpod_config(hyperpod_training_operator=False, hyperpod_node_provisioning="standard"))
    assert [g["InstanceGroupName"] for g in sagemaker_cluster(without)["Properties"]["InstanceGroups"]] == ["gpu"]


# ---- bad input ---------------------------------------------------------------------------------
def make_cluster(**group_changes: object) -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "S")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    cluster = eks.Cluster(
        stack,
        "Eks",
        version=eks.KubernetesVersion.V1_34,
        vpc=vpc,
        default_capacity=0,
        default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
    )
    group = HyperPodInstanceGroup(name="gpu", **group_changes)  # type: ignore[arg-type]
    HyperPodCluster(
        stack,
        "HP",
        cluster=cluster,
        subnet=vpc.private_subnets[0],
        security_groups=[],
        instance_groups=[group],
        cluster_name="hp",
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"instance_type": "p5.48xlarge"},
            "instance_groups[gpu].instance_type: 'p5.48xlarge' must carry the SageMaker 'ml.' prefix",
        ),
        (
            {"instance_type": "ml.x9.huge"},
            "instance_groups[gpu].instance_type: 'ml.x9.huge' is not supported; allowed:",
        ),
        ({"count": 0}, "instance_groups[gpu].count: 0 must be >= 1"),
        ({"storage_volumes_gib": (500, 500)}, "HyperPod allows one storage config per instance group, got 2"),
        (
            {"deep_health_checks": ("InstanceStress", "GpuBurn")},
            "deep_health_checks: unknown GpuBurn; allowed: InstanceStress, InstanceConnectivity",
        ),
        ({"instance_type": "ml.g5.48xlarge"}, "ml.g5.48xlarge does not support deep health checks"),
        (
            {"instance_type": "ml.p6e-gb200.36xlarge"},
            "instance_groups[gpu].instance_type: 'ml.p6e-gb200.36xlarge' is a GB200 UltraServer node, which this "
            "library does not yet support",
        ),
        ({"instance_type": "ml.m5.2xlarge"}, "instance_groups[gpu].gpu: ml.m5.2xlarge has no GPUs"),
        ({"threads_per_core": 4}, "threads_per_core: 4 is not allowed"),
    ],
)
def test_bad_instance_groups_fail_at_synth(changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        make_cluster(**changes)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hyperpod_deep_health_checks": "InstanceStress,Burn"}, "hyperpod_deep_health_checks: unknown Burn"),
        (
            {"hyperpod_node_recovery": "Manual"},
            "hyperpod_node_recovery: 'Manual' is not allowed; allowed: Automatic, None",
        ),
        ({"capacity_reservation_id": "cr-0123456789abcdef0"}, "set hyperpod_training_plan_arn instead"),
        ({"gpu_placement_group": "my-pg"}, "gpu_placement_group: HyperPod places its instances itself"),
        ({"hyperpod_tiered_checkpointing_percent": 0}, "hyperpod_tiered_checkpointing_percent: 0 must lie in 1..100"),
        ({"gpu_nodes": 0}, "gpu_nodes: 0 must be >= 1"),
        (
            {"hyperpod_node_provisioning": "Continuous"},
            "hyperpod_node_provisioning: 'Continuous' is not allowed; allowed: continuous, standard",
        ),
    ],
)
def test_bad_hyperpod_config_fails_with_the_key(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        hyperpod_config(**changes)
    assert message in str(err.value)


def test_compute_key_selects_the_mode_from_context() -> None:
    config = TrainingConfig.from_context({"compute": "hyperpod"})
    assert config.compute == "hyperpod"
    assert config.hyperpod_health_checks == ("InstanceStress", "InstanceConnectivity")
