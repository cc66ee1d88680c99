"""Real-model recipes: the Hugging Face token stays in Secrets Manager, the data-prep Job feeds training."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from test_manifests import by_kind, pod_spec, render

from conftest import hyperpod_config
from llm_infra.config import ConfigError, TrainingConfig
from llm_infra.failure_rates import instance_mtbf_hours
from llm_infra.k8s_manifests.recipe_charts import DATA_PREP_DIR, FETCH_TOKEN_SCRIPT, HF_TOKEN_PATH
from llm_infra.k8s_manifests.recipes import RECIPES
from llm_infra.versions import AWS_CLI_IMAGE, TOKENIZERS_VERSION
from llm_infra.workloads.model import PRESETS

REPO = Path(__file__).resolve().parents[1]

SECRET_NAME = "llm-infra/huggingface-token"
# A Hugging Face access token (hf_ + 34 letters/digits), or a value left for a user to fill in.
TOKEN_LIKE = re.compile(r"hf_[A-Za-z0-9]{8,}|<hf[_-]?token>|<your[_ -]token>|YOUR_HF_TOKEN")


@pytest.fixture(scope="module")
def charts(tmp_path_factory) -> dict[str, list[dict]]:
    return render(tmp_path_factory.mktemp("recipes"), TrainingConfig())


def data_prep(charts) -> dict:
    return pod_spec(by_kind(charts, "Job", "llama2-7b-data-prep"))


# ---- the token never leaves Secrets Manager except into the data-prep pod's memory ------------------
def test_no_manifest_or_template_holds_the_token_or_a_placeholder(charts, default_app, synth) -> None:
    hyperpod = synth(hyperpod_config())
    texts = [yaml.safe_dump_all(docs) for docs in charts.values()]
    texts += [json.dumps(t) for app in (default_app, hyperpod) for t in app.templates.values()]
    for text in texts:
        assert not TOKEN_LIKE.search(text), TOKEN_LIKE.search(text)
    (secret,) = default_app.resources("-storage", "AWS::SecretsManager::Secret").values()
    assert "SecretString" not in secret["Properties"]  # CloudFormation generates a throwaway value
    assert secret["Properties"]["GenerateSecretString"] == {}
    assert secret["Properties"]["Name"] == SECRET_NAME
    assert secret["DeletionPolicy"] == "Retain"


def test_no_pod_gets_the_token_through_env_or_a_configmap(charts) -> None:
    for docs in charts.values():
        for doc in docs:
            text = json.dumps(doc)
            assert "secretKeyRef" not in text and '"HF_TOKEN"' not in text
            if doc["kind"] == "ConfigMap":
                assert "hf_" not in json.dumps(doc.get("metadata", {}))


def test_data_prep_reads_the_token_from_the_secret_into_memory(charts) -> None:
    spec = data_prep(charts)
    assert spec["serviceAccountName"] == "data-prep"
    (init,) = spec["initContainers"]
    assert init["image"] == AWS_CLI_IMAGE
    assert init["command"] == ["/bin/sh", "-c", FETCH_TOKEN_SCRIPT]
    assert "aws secretsmanager get-secret-value" in FETCH_TOKEN_SCRIPT and '> "$HF_TOKEN_PATH"' in FETCH_TOKEN_SCRIPT
    env = {e["name"]: e["value"] for e in init["env"]}
    assert env == {"HF_TOKEN_SECRET": SECRET_NAME, "AWS_REGION": "us-east-1", "HF_TOKEN_PATH": HF_TOKEN_PATH}
    volume = next(v for v in spec["volumes"] if v["name"] == "hf-token")
    assert volume["emptyDir"]["medium"] == "Memory"  # never on disk
    (main,) = spec["containers"]
    assert {"name": "HF_TOKEN_PATH", "value": HF_TOKEN_PATH} in main["env"]
    mount = next(m for m in main["volumeMounts"] if m["name"] == "hf-token")
    assert mount["readOnly"] is True and HF_TOKEN_PATH.startswith(mount["mountPath"])
    assert f"--hf-token-secret={SECRET_NAME}" in main["command"]
    assert f"tokenizers=={TOKENIZERS_VERSION}" in main["command"][2]


def test_only_the_data_prep_role_may_read_the_secret(default_app) -> None:
    associations = default_app.resources("-cluster", "AWS::EKS::PodIdentityAssociation").values()
    role_of = {a["Properties"]["ServiceAccount"]: a["Properties"]["RoleArn"]["Fn::GetAtt"][0] for a in associations}
    policies = default_app.resources("-cluster", "AWS::IAM::Policy").values()
    readers = {
        role["Ref"]
        for p in policies
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in json.dumps(s["Action"])
        for role in p["Properties"]["Roles"]
    }
    assert readers == {role_of["data-prep"]}
    (statement,) = [
        s
        for p in policies
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in json.dumps(s["Action"])
    ]
    assert sorted(statement["Action"]) == ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"]
    assert "HuggingFaceTokenSecret" in json.dumps(statement["Resource"])  # that secret, not "*"


def test_the_data_prep_configmap_is_the_data_prep_folder(charts) -> None:
    configmap = by_kind(charts, "ConfigMap", "llm-infra-data-prep")
    assert configmap["data"] == {p.name: p.read_text() for p in DATA_PREP_DIR.glob("*.py")}


# ---- the recipe ------------------------------------------------------------------------------------
def test_training_reads_what_data_prep_writes(charts) -> None:
    (main,) = data_prep(charts)["containers"]
    output = next(a for a in main["command"] if a.startswith("--output=")).removeprefix("--output=")
    assert output == "/fsx/data/tokens/llama2-7b/tokens.bin"  # under the DRA folder: exported to S3
    job = by_kind(charts, "PyTorchJob", "llama2-7b")
    command = pod_spec(job)["containers"][0]["command"]
    assert f"--data={output}" in command
    assert "--preset=llama2-7b" in command and "--data-dtype=uint16" in command and "--seq-len=4096" in command
    # Young/Daly at the job's MTBF: Llama 3's published node MTBF (the planner's preset) / 2 nodes.
    assert f"--mtbf-hours={instance_mtbf_hours('llama3-16k-h100') / 2:g}" in command
    assert "--mtbf-hours=3105.59" in command
    assert "--max-vocab=32000" in main["command"]


def test_llama3_recipe_uses_uint32_tokens(tmp_path: Path) -> None:
    charts = render(tmp_path, TrainingConfig(recipe="llama3-8b"))
    command = pod_spec(by_kind(charts, "PyTorchJob", "llama3-8b"))["containers"][0]["command"]
    assert "--preset=llama3-8b" in command and "--data-dtype=uint32" in command and "--seq-len=8192" in command


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_vocabulary_is_the_model_presets(name: str) -> None:
    recipe = RECIPES[name]
    assert PRESETS[recipe.preset].vocab_size == recipe.vocab_size
    assert recipe.seq_len <= PRESETS[recipe.preset].max_seq_len


def test_tokenizers_pin_matches_the_package_extra() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["data"] == [f"tokenizers=={TOKENIZERS_VERSION}"]


def test_unknown_recipe_is_an_error() -> None:
    with pytest.raises(ConfigError, match="recipe: 'llama4' is not allowed; allowed: llama2-7b, llama3-8b"):
        TrainingConfig(recipe="llama4").validate()
