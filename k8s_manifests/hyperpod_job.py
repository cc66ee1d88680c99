"""A HyperPodPyTorchJob (sagemaker.amazonaws.com/v1): the HyperPod training operator's job, launched
with ``hyperpodrun``, one pod per healthy GPU node, with restart limits and log-monitoring rules.

Sources (read 2026-12-03):
- AWS, "Using the training operator to run jobs"
  (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-eks-operator-usage.html): ``runPolicy``
  (``jobMaxRetryCount``, ``restartPolicy``, ``cleanPodPolicy``, ``logMonitoringConfiguration``) and the
  agent's port, 8080.
- awsome-distributed-training 7217859f, ``3.test_cases/pytorch/FSDP/kubernetes/llama3_1_8b-fsdp-hpto.yaml``:
  ``hyperpodrun --tee=3 --log_dir=/tmp/hyperpod``, node affinity ``node-health-status In [Schedulable]``.
- PyPI sagemaker-hyperpod 3.12.0, ``sagemaker/hyperpod/training/config/hyperpod_pytorch_job_unified_config.py``
  (the CRD's fields and their meaning; tests/schemas/hyperpodpytorchjob.schema.json is derived from it).
- PyPI hyperpod-elastic-agent 1.1.3 (``hyperpodrun``): ``run.py`` (``--shutdown-signal`` defaults to
  SIGKILL, ``--shutdown-timeout`` to 15 s; ``--nnodes`` must be one number), ``logagent/log_agent.py``
  (each rule's ``logPattern`` is applied with Python ``re.match`` to each line of local rank 0's
  ``<log dir>/.../attempt_<n>/0/stdout.log``, written only with ``--tee``/``--redirects``; the capture
  group becomes ``float`` and is compared with the integer ``metricThreshold``).
"""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.payload import WORKLOADS_MOUNT
from llm_infra.k8s_manifests.pod_spec import gpu_pod_spec, one_pod_per_node
from llm_infra.k8s_manifests.pytorch_job import JOB_LABEL
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import HEALTH_STATUS_KEY, HEALTH_STATUS_SCHEDULABLE, NODE_ROLE_LABEL

API_VERSION = "sagemaker.amazonaws.com/v1"
KIND = "HyperPodPyTorchJob"
# The launcher; installed at container start when the image lacks it (the stock DLC images do), as
# workloads/Dockerfile installs it: the agent with --no-deps (it requires torch<2.12 and pip<25.3, and
# must leave the image's torch and pip alone), then its own requirements at the pins it was run with.
ELASTIC_AGENT = "hyperpod-elastic-agent==1.1.3"
ELASTIC_AGENT_REQUIREMENTS = ("fastapi==0.121.0", "uvicorn==0.38.0", "psutil==7.2.2", "pydantic==2.14.4")
AGENT_PORT = 8080  # the agent's API server, which the operator calls (/start, /stop, /status)
AGENT_LOG_DIR = "/tmp/hyperpod"

# workloads/train.py's JSON lines (``emit``: json.dumps with its default separators), as the agent
# matches them: from the start of the line.
START_LINE = r'\{"event": "start", '
STEP_LINE = r'\{"event": "step", "step": \d+, '
END_LINE = r'\{"event": "(?:summary|stopped)", '
# The throughput heartbeat (workloads/throughput.py), which keeps coming while the training loop is
# stuck; group 1 is the interval's tokens/s.
HEARTBEAT_LINE = r'\{"event": "throughput", "step": \d+, "tokens_per_s": (\d+(?:\.\d+)?)[,}]'
HEARTBEAT_SECONDS = 60  # train.py's --throughput-interval-s default
# tokens/s below this in a heartbeat interval: no step finished. The operator's thresholds are
# integers, so the heartbeat's ratio to its median (vs_median) cannot be one.
STALLED_TOKENS_PER_S = 1


def train_log_rules(values: WorkloadValues) -> list[dict[str, Any]]:
    """train.py's rules: the run starts, steps keep coming, the heartbeat shows progress.

    JobStart: the start line within ``start_timeout_seconds``. JobHang: a step line within
    ``hang_timeout_seconds`` of the last (the first after start and hang timeout together). ThroughputStalled
    (the operator's SLOW): ``stall_minutes`` of heartbeats without a finished step. The last two end
    with the summary (or stopped) line.
    """
    return [
        {"name": "JobStart", "logPattern": START_LINE, "expectedStartCutOffInSeconds": values.start_timeout_seconds},
        {
            "name": "JobHang",
            "logPattern": STEP_LINE,
            "stopPattern": END_LINE,
            "expectedStartCutOffInSeconds": values.start_timeout_seconds + values.hang_timeout_seconds,
            "expectedRecurringFrequencyInSeconds": values.hang_timeout_seconds,
        },
        {
            "name": "ThroughputStalled",
            "logPattern": HEARTBEAT_LINE,
            "stopPattern": END_LINE,
            "operator": "lt",
            "metricThreshold": STALLED_TOKENS_PER_S,
            "metricEvaluationDataPoints": max(1, values.stall_minutes * 60 // HEARTBEAT_SECONDS),
        },
    ]


# The scripts whose output the operator watches (allreduce_bench.py, a short gate, is left alone).
LOG_RULES = {"train.py": train_log_rules}


def schedulable_gpu_node_affinity() -> dict[str, Any]:
    """GPU nodes whose HyperPod health label says Schedulable (every HyperPod node carries it)."""
    expressions = [
        {"key": NODE_ROLE_LABEL, "operator": "In", "values": ["gpu"]},
        {"key": HEALTH_STATUS_KEY, "operator": "In", "values": [HEALTH_STATUS_SCHEDULABLE]},
    ]
    required = {"nodeSelectorTerms": [{"matchExpressions": expressions}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def hyperpodrun_command(values: WorkloadValues, script: str, args: list[str], nodes: int) -> list[str]:
    """``hyperpodrun`` as PID 1 (it forwards the pod's SIGTERM to the workers), installed first if missing.

    Workers get SIGTERM (not the agent's default SIGKILL) when the operator stops them, and SIGKILL
    ``shutdown_budget_seconds`` later, as under torchrun. ``--tee`` writes each worker's output to the
    files the log monitor reads and to the pod's log, prefixed ``[default<local rank>]:``.
    """
    launcher = [
        f"--nnodes={nodes}",
        f"--nproc-per-node={values.profile.gpus}",
        "--tee=3",
        f"--log-dir={AGENT_LOG_DIR}",
        "--shutdown-signal=SIGTERM",
        f"--shutdown-timeout={values.shutdown_budget_seconds}",
        f"--server-port={AGENT_PORT}",
    ]
    install_and_run = (
        "command -v hyperpodrun >/dev/null || { "
        f"pip install --quiet --no-cache-dir --no-deps '{ELASTIC_AGENT}' && "
        f"pip install --quiet --no-cache-dir {' '.join(repr(r) for r in ELASTIC_AGENT_REQUIREMENTS)}; }}; "
        'exec hyperpodrun "$@"'
    )
    return ["/bin/sh", "-c", install_and_run, "hyperpodrun", *launcher, f"{WORKLOADS_MOUNT}/{script}", *args]


def hyperpod_pytorch_job(
    scope: Construct,
    construct_id: str,
    *,
    values: WorkloadValues,
    name: str,
    script: str,
    args: list[str],
    nodes: int,
    max_restarts: int | None = None,
    priority: str = "training",
) -> cdk8s.ApiObject:
    """``hyperpodrun /workloads/<script>`` on ``nodes`` GPU nodes (a fixed size: hyperpodrun 1.1.3
    has no elastic node range; the operator replaces a failed node instead).

    Restarts: ``values.max_restarts`` process-level restarts per ``restart_eval_period_seconds``
    before a full-job restart, ``full_job_restarts`` of those, ``job_max_retries`` retries in all.
    An explicit ``max_restarts`` (the validation gates) bounds the whole job: that many retries, no
    full-job restart. The job and its pods carry task governance's labels (the team's LocalQueue, the cluster
    policy's ``priority`` class): its admission policy wants them on every pod in the team's namespace.
    """
    labels = {JOB_LABEL: name}
    queued = {**labels, **values.queue_labels(priority)}
    pod_spec = gpu_pod_spec(
        values,
        container_name="pytorch",
        # workloads/Dockerfile's image has hyperpodrun (image_asset=true makes it values.image; a hand-built
        # push is ray_image): no install at pod start. The stock DLC image falls back to installing it.
        image=values.ray_image or values.image,
        command=hyperpodrun_command(values, script, args, nodes),
        # The job's identity for the payload's checkpoint lease (workloads/checkpoint_lease.py): the same in
        # every pod of the job and at every restart (a pod's uid changes; a PyTorchJob's uid never reaches it).
        extra_env={"PYTHONPATH": WORKLOADS_MOUNT, "LLM_INFRA_JOB": f"{values.namespace}/{name}"},
        affinity={**schedulable_gpu_node_affinity(), **one_pod_per_node(labels)},
    )
    (container,) = pod_spec["containers"]
    container["ports"] = [{"name": "hyperpod-agent", "containerPort": AGENT_PORT}]
    if max_restarts is None:
        restarts, full_job_restarts, retries = values.max_restarts, values.full_job_restarts, values.job_max_retries
    else:
        restarts, full_job_restarts, retries = max_restarts, 0, max_restarts
    run_policy: dict[str, Any] = {
        # Pods stay after the job ends: their logs carry the payload's verdict.
        "cleanPodPolicy": "None",
        "jobMaxRetryCount": retries,
        "restartPolicy": {
            "numRestartBeforeFullJobRestart": restarts,
            "evalPeriodSeconds": values.restart_eval_period_seconds,
            "maxFullJobRestarts": full_job_restarts,
        },
    }
    if script in LOG_RULES:
        run_policy["logMonitoringConfiguration"] = LOG_RULES[script](values)
    return api_object(
        scope,
        construct_id,
        api_version=API_VERSION,
        kind=KIND,
        name=name,
        namespace=values.namespace,
        labels=queued,
        body={
            "spec": {
                "nprocPerNode": str(values.profile.gpus),
                "runPolicy": run_policy,
                "replicaSpecs": [
                    {
                        "name": "pods",
                        "replicas": nodes,
                        "template": {"metadata": {"labels": queued}, "spec": pod_spec},
                    }
                ],
            }
        },
    )
