"""A real-model run in two charts: tokenize the dataset (with the Hugging Face token), then train."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.pod_spec import container_security_context, gpu_node_affinity, pod_security_context
from llm_infra.k8s_manifests.recipes import Recipe
from llm_infra.k8s_manifests.training_job_chart import TrainingJobChart
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import GPU_TOLERATION
from llm_infra.versions import AWS_CLI_IMAGE, TOKENIZERS_VERSION

DATA_PREP_DIR = Path(__file__).resolve().parent.parent / "data_prep"
DATA_PREP_CONFIGMAP = "llm-infra-data-prep"
DATA_PREP_MOUNT = "/data-prep"
HF_TOKEN_DIR = "/var/run/secrets/huggingface"
HF_TOKEN_PATH = f"{HF_TOKEN_DIR}/token"
# The init container's only job: copy the secret into a memory-backed file, printing nothing.
FETCH_TOKEN_SCRIPT = (
    'umask 077 && aws secretsmanager get-secret-value --secret-id "$HF_TOKEN_SECRET" '
    '--query SecretString --output text > "$HF_TOKEN_PATH"'
)


def token_file(values: WorkloadValues, recipe: Recipe) -> str:
    """Where the data-preparation Job writes the recipe's tokens (exported to S3 by the DRA)."""
    return f"{values.dataset_dir}/tokens/{recipe.name}/tokens.bin"


class DataPrepChart(cdk8s.Chart):
    """A Job that tokenizes ``<dataset_dir>/<dataset>`` (the FSx view of the S3 dataset prefix)
    with the recipe's tokenizer into :func:`token_file`.

    The Hugging Face token never appears in a manifest: an init container (AWS CLI, under the
    ``data-prep`` service account's Pod Identity role, the only role allowed to read the secret)
    writes it to a memory-backed volume that the tokenizer container mounts read-only and finds
    through ``HF_TOKEN_PATH``. It runs on a GPU node (those mount FSx) without taking GPUs.

    Both containers drop every capability and may not escalate, under the runtime's seccomp filter
    (pod_spec.container_security_context). No Kubernetes API token: neither calls the API, and Pod Identity
    gives the init container its credentials through a token of its own (see pod_spec.gpu_pod_spec).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, values: WorkloadValues, recipe: Recipe, dataset: str = "raw"
    ) -> None:
        super().__init__(scope, construct_id)
        scripts = {p.name: p.read_text() for p in sorted(DATA_PREP_DIR.glob("*.py"))}
        api_object(
            self,
            "Scripts",
            api_version="v1",
            kind="ConfigMap",
            name=DATA_PREP_CONFIGMAP,
            namespace=values.namespace,
            body={"data": scripts},
        )
        name = f"{recipe.name}-data-prep"
        labels = {"llm-infra.aws/job": name, **values.queue_labels("training")}
        api_object(
            self,
            "Job",
            api_version="batch/v1",
            kind="Job",
            name=name,
            namespace=values.namespace,
            labels=labels,
            body={
                "spec": {
                    "backoffLimit": 2,
                    "ttlSecondsAfterFinished": 86400,
                    "template": {"metadata": {"labels": labels}, "spec": self._pod_spec(values, recipe, dataset)},
                }
            },
        )

    @staticmethod
    def _pod_spec(values: WorkloadValues, recipe: Recipe, dataset: str) -> dict[str, Any]:
        token_env = {"name": "HF_TOKEN_PATH", "value": HF_TOKEN_PATH}
        token_mount = {"name": "hf-token", "mountPath": HF_TOKEN_DIR}
        args = [
            f"--tokenizer={recipe.tokenizer}",
            f"--revision={recipe.tokenizer_revision}",
            f"--input={values.dataset_dir}/{dataset}",
            f"--output={token_file(values, recipe)}",
            f"--max-vocab={recipe.vocab_size}",
            f"--hf-token-secret={values.hf_token_secret}",
        ]
        install_and_run = (
            f"pip install --quiet --no-cache-dir tokenizers=={TOKENIZERS_VERSION} && "
            f'exec python3 {DATA_PREP_MOUNT}/tokenize_dataset.py "$@"'
        )
        return {
            "serviceAccountName": values.data_prep_service_account,
            "automountServiceAccountToken": False,
            "securityContext": pod_security_context(),
            "restartPolicy": "Never",
            "tolerations": [GPU_TOLERATION],
            "affinity": gpu_node_affinity(),
            "initContainers": [
                {
                    "name": "fetch-hf-token",
                    "image": AWS_CLI_IMAGE,
                    "command": ["/bin/sh", "-c", FETCH_TOKEN_SCRIPT],
                    "env": [
                        {"name": "HF_TOKEN_SECRET", "value": values.hf_token_secret},
                        {"name": "AWS_REGION", "value": values.region},
                        token_env,
                    ],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                    "securityContext": container_security_context(),
                    "volumeMounts": [token_mount],
                }
            ],
            "containers": [
                {
                    "name": "tokenize",
                    "image": values.image,
                    "command": ["/bin/sh", "-c", install_and_run, "tokenize_dataset", *args],
                    "env": [token_env, {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}],
                    "resources": {"requests": {"cpu": "16", "memory": "64Gi"}, "limits": {"memory": "64Gi"}},
                    "securityContext": container_security_context(),
                    "volumeMounts": [
                        {**token_mount, "readOnly": True},
                        {"name": "fsx", "mountPath": values.fsx_mount_path},
                        {"name": "scripts", "mountPath": DATA_PREP_MOUNT, "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "hf-token", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
                {"name": "fsx", "persistentVolumeClaim": {"claimName": values.pvc_name}},
                {"name": "scripts", "configMap": {"name": DATA_PREP_CONFIGMAP, "defaultMode": 0o444}},
            ],
        }


def recipe_training_chart(
    scope: Construct, construct_id: str, *, values: WorkloadValues, recipe: Recipe
) -> TrainingJobChart:
    """The recipe's training job: FSDP2 on every GPU node, reading :func:`token_file`, async
    checkpoints at the Young/Daly interval of the job's MTBF (node MTBF / nodes)."""
    return TrainingJobChart(
        scope,
        construct_id,
        values=values,
        name=recipe.name,
        preset=recipe.preset,
        steps=recipe.steps,
        data=token_file(values, recipe),
        checkpoint_every=None,
        extra_args=[
            f"--data-dtype={recipe.token_dtype()}",
            f"--seq-len={recipe.seq_len}",
            f"--batch-size={recipe.batch_size_per_gpu}",
            f"--lr={recipe.lr:g}",
            f"--warmup-steps={recipe.warmup_steps}",
            f"--mtbf-hours={recipe.node_mtbf_hours / values.gpu_nodes:g}",
            "--async-checkpoint",
            "--activation-checkpointing=selective",
            "--compile",
            "--log-every=10",
        ],
    )
