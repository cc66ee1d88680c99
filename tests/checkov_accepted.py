"""The checkov findings we accept on what we synthesize, each with its reason: the one list that
tests/test_checkov.py holds checkov's report against (as constructs/nag.py's acknowledgements are for cdk-nag).

An entry accepts one check on the resources its patterns match (``fnmatch`` over checkov's resource id:
``AWS::<type>.<logical id>`` in a template, ``<Kind>.<namespace>.<name>`` in a manifest; a pod template inside
a custom resource is the Pod ``<kind>.<name>.<path>``, see ``embedded_pods``), in the modes it names. A finding
that no entry accepts fails the test, and so does a pattern that matches no finding in one of its modes (stale).
A reason that begins "Open:" names a change still to make in the charts (k8s_manifests/); the rest are the
design (none is open since issue 28's pod security contexts: docs/workloads.md, "Pod security").
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("eks", "hyperpod")


@dataclass(frozen=True)
class Accepted:
    check: str
    resources: tuple[str, ...]
    reason: str
    modes: tuple[str, ...] = MODES

    def __post_init__(self) -> None:
        if len(self.reason) < 40 or not self.resources or "*" in self.resources:
            raise ValueError(f"{self.check}: name the resources and explain the exception")


# ---- the resources, by checkov's ids --------------------------------------------------------------
DATA_BUCKETS = ("AWS::S3::Bucket.DataBucket*", "AWS::S3::Bucket.CheckpointsBucket*")
LIFECYCLE_BUCKET = ("AWS::S3::Bucket.HyperPodLifecycleBucket*",)
KUBECTL_PROVIDER = ("AWS::Lambda::Function.EksClusterKubectlProvider*",)  # aws_eks_v2's kubectl handler + framework
BUCKET_DEPLOYMENT = ("AWS::Lambda::Function.CustomCDKBucketDeployment*",)  # the lifecycle-script upload
NODES_READY = ("AWS::Lambda::Function.HyperPodTrainingOperatorNodesReady*",)  # constructs/hyperpod_nodes_ready.py
# The training workers: PyTorchJob (eks) or HyperPodPyTorchJob (hyperpod) pod templates, validation and training.
# The jobs' namespace: training on EKS, task governance's team namespace hyperpod-ns-training on HyperPod.
JOBS = "*training"
TRAINING_WORKERS = f"Pod.{JOBS}.*pytorchjob.*"
RAY_HEAD = f"Pod.{JOBS}.ray*.headgroupspec"  # RayCluster's and RayJob's head
RAY_WORKERS = f"Pod.{JOBS}.ray*.workergroupspecs.*"  # their GPU workers
HEALTH_JOB = f"Job.{JOBS}.validation-1-health"  # the validation suite's per-node health check
DATA_PREP = f"Job.{JOBS}.*-data-prep"  # the recipe's tokenization Job
# In the jobs' namespace on EKS, in kube-system on HyperPod (WorkloadValues.node_agents_namespace).
XID_MONITOR = "DaemonSet.*.gpu-xid-monitor"
REDIS = f"Deployment.{JOBS}.ray-gcs-redis"  # Ray GCS fault tolerance's store
NOT_PRIVILEGED = (TRAINING_WORKERS, RAY_HEAD, RAY_WORKERS, DATA_PREP, REDIS)
# The patterns of objects some modes do not render, and the modes that do: the always-on RayCluster's Redis is not
# rendered under HyperPod's task governance (k8s_manifests/kuberay_chart.py).
RENDERED_IN = {REDIS: ("eks",)}


def rendered(pattern: str, mode: str) -> bool:
    """Whether ``mode``'s manifests hold what ``pattern`` names."""
    return mode in RENDERED_IN.get(pattern, MODES)


RUN_AS_THEIR_IMAGE = "The containers run as their images' user, root in AWS's Deep Learning Containers and the Ray "
HYPERPOD = ("hyperpod",)

LAMBDA_DLQ = (
    "Deploy-time custom-resource handlers: CloudFormation and the provider framework call them and fail the "
    "deploy on an error, so a dead-letter queue would hold nothing anyone reads."
)
LAMBDA_CONCURRENCY = (
    "Deploy-time custom-resource handlers, run a few times per deploy: reserved concurrency would take capacity "
    "from the account's pool for nothing."
)
LAMBDA_ENVIRONMENT = (
    "The environment holds function names and ARNs, no secret; Lambda encrypts it at rest with its AWS managed "
    "key, and a customer managed key would add a key policy to keep for no secret."
)
LOG_GROUP_KMS = (
    "CloudWatch Logs encrypts every log group at rest; a customer managed key would need a key policy for the "
    "logs service. What is logged is flow metadata, container output and deploy-time handler logs, no secret."
)

ACCEPTED: tuple[Accepted, ...] = (
    # ---- CloudFormation ----------------------------------------------------------------------------
    Accepted(
        "CKV_AWS_18",
        DATA_BUCKETS,
        "Object-level access is audited with CloudTrail S3 data events, which the account owns; server access "
        "logs would need one more bucket per training bucket (cdk-nag S1, constructs/training_bucket.py).",
    ),
    Accepted(
        "CKV_AWS_18",
        LIFECYCLE_BUCKET,
        "The lifecycle-script bucket is a TrainingBucket like the data buckets: audited with CloudTrail S3 data "
        "events, no server access logs (cdk-nag S1).",
        HYPERPOD,
    ),
    Accepted(
        "CKV_AWS_149",
        ("AWS::SecretsManager::Secret.HuggingFaceTokenSecret*",),
        "The Hugging Face token is encrypted with Secrets Manager's AWS managed key; only this account's "
        "data-prep role reads it (its grant_read), so a customer managed key would add no control over who can.",
    ),
    Accepted(
        "CKV_AWS_158",
        ("AWS::Logs::LogGroup.NetworkFlowLogs*", "AWS::Logs::LogGroup.EksApplicationLogs*"),
        LOG_GROUP_KMS,
    ),
    Accepted("CKV_AWS_158", ("AWS::Logs::LogGroup.HyperPodTrainingOperatorNodesReadyLogs*",), LOG_GROUP_KMS, HYPERPOD),
    Accepted("CKV_AWS_116", KUBECTL_PROVIDER, LAMBDA_DLQ),
    Accepted("CKV_AWS_116", BUCKET_DEPLOYMENT + NODES_READY, LAMBDA_DLQ, HYPERPOD),
    Accepted("CKV_AWS_115", KUBECTL_PROVIDER, LAMBDA_CONCURRENCY),
    Accepted("CKV_AWS_115", BUCKET_DEPLOYMENT + NODES_READY, LAMBDA_CONCURRENCY, HYPERPOD),
    Accepted("CKV_AWS_173", KUBECTL_PROVIDER, LAMBDA_ENVIRONMENT),
    Accepted(
        "CKV_AWS_173",
        BUCKET_DEPLOYMENT + ("AWS::Lambda::Function.HyperPodTrainingOperatorNodesReadyProviderframework*",),
        LAMBDA_ENVIRONMENT,
        HYPERPOD,
    ),
    Accepted(
        "CKV_AWS_117",
        BUCKET_DEPLOYMENT + NODES_READY,
        "They call only AWS APIs (S3, SageMaker ListClusterNodes, Lambda), nothing in the VPC; in it they would "
        "need ENIs and endpoints for nothing. The kubectl handler, which reaches the private API endpoint, is in it.",
        HYPERPOD,
    ),
    # ---- Kubernetes: the design ----------------------------------------------------------------------
    Accepted(
        "CKV_K8S_43",
        (TRAINING_WORKERS, RAY_HEAD, RAY_WORKERS, HEALTH_JOB, DATA_PREP, XID_MONITOR, REDIS),
        "Images are pinned by version tag (llm_infra/versions.py, k8s_manifests/dlc.py): AWS republishes a DLC "
        "tag with security patches, and the Ray image is the user's build, known by its tag at synth.",
    ),
    Accepted(
        "CKV_K8S_15",
        (TRAINING_WORKERS, RAY_HEAD, RAY_WORKERS, HEALTH_JOB, DATA_PREP, XID_MONITOR, REDIS),
        "IfNotPresent (or the default for a tag): the DLC images are tens of GB, and a restart after a fault "
        "must not pull them again; the tags are versions.",
    ),
    Accepted(
        "CKV_K8S_10",
        (TRAINING_WORKERS, RAY_WORKERS, HEALTH_JOB),
        "One pod per GPU node holding all its GPUs, EFA interfaces and most of its memory (anti-affinity, "
        "requests): a CPU request would only hold back CPUs of a node nothing else runs on.",
    ),
    Accepted(
        "CKV_K8S_11",
        (TRAINING_WORKERS, RAY_HEAD, RAY_WORKERS, HEALTH_JOB, DATA_PREP, XID_MONITOR, REDIS),
        "No CPU limits: CFS throttling stalls data loaders, NCCL's proxy threads and collectives; CPU requests, "
        "where set, reserve what a pod needs.",
    ),
    Accepted(
        "CKV_K8S_8",
        (TRAINING_WORKERS,),
        "Run-to-completion workers (checkov asks no probes of a Job's pods: checkov 3.3.30, checkov/kubernetes/"
        "checks/resource/k8s/LivenessProbe.py L12-15): a hung rank ends at the process group timeout and the job "
        "restarts; a liveness probe would kill a rank inside a collective.",
    ),
    Accepted(
        "CKV_K8S_9",
        (TRAINING_WORKERS,),
        "Run-to-completion workers behind no Service: nothing routes traffic by their readiness.",
    ),
    Accepted(
        "CKV_K8S_8",
        (RAY_HEAD, RAY_WORKERS),
        "KubeRay injects liveness and readiness probes into the Ray containers it creates (ray-project/kuberay "
        "v1.7.0, ray-operator/controllers/ray/common/pod.go L587-592 and L919-929, on unless disabled).",
    ),
    Accepted(
        "CKV_K8S_9",
        (RAY_HEAD, RAY_WORKERS),
        "KubeRay injects liveness and readiness probes into the Ray containers it creates (ray-project/kuberay "
        "v1.7.0, ray-operator/controllers/ray/common/pod.go L587-592 and L919-929, on unless disabled).",
    ),
    Accepted(
        "CKV_K8S_8",
        (XID_MONITOR,),
        "It follows /dev/kmsg and serves nothing a probe could ask; an error ends it and the DaemonSet restarts it.",
    ),
    Accepted("CKV_K8S_9", (XID_MONITOR,), "It serves nothing: no Service routes to it, readiness has no use."),
    Accepted(
        "CKV_K8S_16",
        (HEALTH_JOB, XID_MONITOR),
        "Both read the node's kernel log (/dev/kmsg, for Xid errors), and the health check runs DCGM diagnostics "
        "on the GPUs: privileged (k8s_manifests/node_monitoring_chart.py, validation_chart.py).",
    ),
    *(
        Accepted(
            check,
            (HEALTH_JOB, XID_MONITOR),
            "Privileged containers (CKV_K8S_16): escalation, capabilities, root and the default seccomp profile "
            "are what privileged means; they run only on GPU nodes and read, not write, the kernel log.",
        )
        for check in ("CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_29", "CKV_K8S_31", "CKV_K8S_37", "CKV_K8S_40")
    ),
    Accepted(
        "CKV_K8S_23",
        (TRAINING_WORKERS, RAY_HEAD, RAY_WORKERS, DATA_PREP),
        RUN_AS_THEIR_IMAGE + "image built on them (workloads/Dockerfile); another user would need images of ours.",
    ),
    Accepted(
        "CKV_K8S_40",
        (TRAINING_WORKERS, RAY_HEAD, RAY_WORKERS, DATA_PREP),
        RUN_AS_THEIR_IMAGE + "image built on them (workloads/Dockerfile); another user would need images of ours.",
    ),
    Accepted(
        "CKV_K8S_22",
        (TRAINING_WORKERS, RAY_HEAD, RAY_WORKERS, HEALTH_JOB, DATA_PREP),
        "torch, Triton, NCCL, Ray and Hugging Face write caches and scratch files into the image's home and /tmp; "
        "a read-only root would need an emptyDir for each place.",
    ),
    Accepted(
        "CKV_K8S_35",
        (REDIS,),
        "redis-server takes its password as --requirepass on its command line, which expands only environment "
        "variables; Ray reads the same Secret through its redisPassword secretKeyRef.",
    ),
    Accepted(
        "CKV2_K8S_6",
        (
            TRAINING_WORKERS,
            f"Pod.{JOBS}.rayjob.*",
            f"Pod.{JOBS}.validation-1-health.*",
            f"Pod.{JOBS}.*-data-prep.*",
        ),
        "No per-workload NetworkPolicy: training ranks reach each other on ports torchrun and NCCL pick at run "
        "time (the TCP bootstrap and socket transport), as the Ray job's head and workers do on the ports Ray "
        "picks at start (GCS, raylets, object managers, workers; checkov sees them since they carry the job's "
        "queue labels); the others reach only AWS APIs and FSx; Redis, which serves, has one.",
    ),
    Accepted(
        "CKV2_K8S_6",
        ("Pod.*.gpu-xid-monitor.*",),
        "The Xid monitor serves nothing and reaches nothing (it writes to stdout); no NetworkPolicy written yet.",
    ),
    Accepted(
        "CKV_K8S_38",
        (RAY_HEAD,),
        "KubeRay's autoscaler sidecar in the head calls the Kubernetes API with the service account KubeRay "
        "gives the head (ray-project/kuberay v1.7.0, ray-operator/controllers/ray/common/pod.go L242-249).",
    ),
    Accepted(
        "CKV_K8S_25",
        (REDIS,),
        "Only the init container adds a capability, CHOWN, with every other dropped: the kubelet creates Redis's "
        "FSx subPath as root and uid 999 must own it (k8s_manifests/kuberay_chart.py); Redis itself adds none.",
    ),
    Accepted(
        "CKV_K8S_40",
        (REDIS,),
        "Redis runs as uid 999, the official image's redis user (docker-library/redis Dockerfile.template "
        "L15-16), whom the image's entrypoint always ran it as and who owns its append-only files on FSx; with no "
        "capability, no escalation and no host path, a host account of that uid gives it nothing.",
    ),
)
