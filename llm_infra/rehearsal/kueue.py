"""Kueue in the control plane (issue 31): its manager Configuration, its CRDs and its webhooks served on
127.0.0.1, as controller-runtime's envtest serves a manager's webhooks.

The webhook server binds a reserved loopback port with the control plane's own serving certificate for
127.0.0.1 (``server.crt``, signed by its CA); Kueue's internal certificate management is off; the
Mutating/ValidatingWebhookConfigurations of the pinned module (``config/components/webhook/manifests.yaml``)
and the conversion webhooks its kustomization patches into five CRDs are rewritten to
``clientConfig.url: https://127.0.0.1:<port>/<path>`` with the CA as ``caBundle``; what the module's Helm chart
(``charts/kueue/templates/webhook/manifests.yaml``) sets from the configuration is set the same way here
(the job webhooks' namespaceSelector; Ignore for the pod, deployment and statefulset webhooks of frameworks
that are off).

Kueue v0.17.0 reads its metrics certificate from the fixed path ``/etc/kueue/metrics/certs`` when its
internal certificate management is off (``cmd/kueue/main.go``; the Configuration's API doc says so): it runs
in a mount namespace of its own (``unshare --mount --map-root-user``) in which a folder of the control
plane's holds ``/etc``, so nothing outside the temporary folder is written.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

import yaml

from llm_infra.constructs.kueue import kueue_configuration
from llm_infra.queueing import KUEUE_INTEGRATIONS
from llm_infra.rehearsal import crds
from llm_infra.versions import KUEUE

# The five CRDs whose conversion webhook the module's kustomization patches in
# (config/components/crd/kustomization.yaml, patches/webhook_in_*.yaml).
CONVERTED_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
# Frameworks whose webhooks the chart sets to Ignore when they are not enabled (they watch core kinds).
CORE_KIND_WEBHOOKS = {"pod": "pods", "deployment": "deployments", "statefulset": "statefulsets"}
METRICS_CERTS = Path("kueue/metrics/certs")  # under /etc: Kueue's fixed path, see the module's docstring


def managed_namespaces() -> dict[str, Any]:
    """The namespaceSelector of the namespaces whose jobs Kueue manages (with or without a queue label)."""
    return cast(dict[str, Any], kueue_configuration()["managedJobsNamespaceSelector"])


def configuration(*, webhook_port: int, cert_dir: Path, metrics: str, probe: str) -> dict[str, Any]:
    """The stack's Kueue Configuration (:func:`llm_infra.constructs.kueue.kueue_configuration`: admission,
    waitForPodsReady, the managed namespaces, the integrations) as it runs on 127.0.0.1: its servers on the
    reserved ports, no leader election, the internal certificate management off (the webhook certificate in
    ``cert_dir``), and no pending-workloads API (VisibilityOnDemand: an aggregated API server of its own)."""
    return {
        **kueue_configuration(),
        "namespace": KUEUE.namespace,
        "health": {"healthProbeBindAddress": probe},
        "metrics": {"bindAddress": metrics},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_configurations(url: str, ca_bundle: str, directory: Path | None = None) -> list[dict[str, Any]]:
    """The module's Mutating/ValidatingWebhookConfigurations pointing at ``url`` (``https://127.0.0.1:PORT``)
    with ``ca_bundle`` (base64 PEM), renamed as the chart names them (``kueue-``), set as the chart sets them."""
    documents = [doc for doc in yaml.safe_load_all(crds.read_kueue_file(crds.KUEUE_WEBHOOKS, directory)) if doc]
    enabled = {name.rpartition("/")[2] for name in KUEUE_INTEGRATIONS}
    ignored = {resource for name, resource in CORE_KIND_WEBHOOKS.items() if name not in enabled}
    for doc in documents:
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        for webhook in doc["webhooks"]:
            service = webhook["clientConfig"].pop("service")
            webhook["clientConfig"] = {"url": f"{url}{service['path']}", "caBundle": ca_bundle}
            resources = {r for rule in webhook.get("rules") or [] for r in rule.get("resources") or []}
            groups = {g for rule in webhook.get("rules") or [] for g in rule.get("apiGroups") or []}
            if groups != {"kueue.x-k8s.io"}:  # a job framework's webhook: only where Kueue manages jobs
                webhook["namespaceSelector"] = managed_namespaces()
            if resources & ignored:
                webhook["failurePolicy"] = "Ignore"
    return documents


def custom_resource_definitions(url: str, ca_bundle: str, directory: Path | None = None) -> list[dict[str, Any]]:
    """Kueue's CRDs of the pinned module, the five that convert between v1beta1 and v1beta2 with their
    conversion webhook at ``url``/convert."""
    definitions = []
    for name in sorted(crds.KUEUE_CRD_FILES):
        for doc in yaml.load_all(crds.read_kueue_file(name, directory), Loader=crds.YAML_LOADER):
            if not doc:
                continue
            if doc["spec"]["names"]["plural"] in CONVERTED_CRDS:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{url}/convert", "caBundle": ca_bundle},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            definitions.append(doc)
    return definitions


def prepare(folder: Path, server_cert: Path, server_key: Path) -> tuple[Path, Path]:
    """The webhook server's certificate folder and the ``/etc`` stand-in (the metrics certificate), both
    under ``folder``, holding the control plane's serving certificate for 127.0.0.1 as tls.crt/tls.key."""
    certs, etc = folder / "webhook-certs", folder / "etc"
    for target in (certs, etc / METRICS_CERTS):
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(server_cert, target / "tls.crt")
        shutil.copyfile(server_key, target / "tls.key")
    return certs, etc


def command(binary: Path, etc: Path, args: list[str]) -> list[str]:
    """``binary args`` in a mount namespace of its own in which ``etc`` is ``/etc``."""
    return [
        "unshare", "--mount", "--map-root-user", "--propagation", "private",
        "sh", "-c", 'mount --bind "$0" /etc && exec "$@"', str(etc), str(binary), *args,
    ]  # fmt: skip


def mount_namespace_problem() -> str | None:
    """Why Kueue cannot run here (no ``unshare``, or no mount namespace for this user); None when it can."""
    if shutil.which("unshare") is None:
        return "no unshare command (util-linux): Kueue's fixed metrics-certificate path needs a mount namespace"
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--map-root-user", "true"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unshare --mount --map-root-user failed: {err}"
    if result.returncode != 0:
        return f"unshare --mount --map-root-user failed: {result.stderr.strip()}"
    return None
