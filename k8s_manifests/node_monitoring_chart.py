"""NodeMonitoringChart: the GPU Xid monitor on every GPU node (what the CloudWatch add-on lacks)."""

from __future__ import annotations

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.payload import WORKLOADS_MOUNT, payload_files
from llm_infra.k8s_manifests.values import WorkloadValues
from llm_infra.node_labels import GPU_TOLERATION, HEALTH_STATUS_TOLERATION, NODE_ROLE_LABEL

XID_MONITOR = "gpu-xid-monitor"
# The monitor's own ConfigMap: xid_monitor.py and what it imports (not the whole payload, nor its namespace).
XID_MONITOR_CONFIGMAP = "llm-infra-xid-monitor"
XID_MONITOR_FILES = ("xid_monitor.py", "health_check.py")


class NodeMonitoringChart(cdk8s.Chart):
    """A DaemonSet that runs ``xid_monitor.py`` on every GPU node, healthy or not.

    GPU utilisation/memory and EFA counters come from the amazon-cloudwatch-observability add-on;
    it collects no Xid errors, so this follows ``/dev/kmsg`` (hence privileged, with the device
    mounted read-only) and logs each Xid as a JSON line, which the add-on's Fluent Bit ships to
    the application log group where a metric filter counts it. It tolerates HyperPod's
    unhealthy taints: a node that is failing is the one to watch. The EKS node monitoring agent marks
    nodes for node auto repair but publishes no metric: this stays the Xid metric beside it.

    It runs in ``values.node_agents_namespace``: kube-system where the jobs' namespace is a task governance team's
    (whose admission policy would refuse a DaemonSet that names no queue), with its scripts in a ConfigMap of its own.
    """

    def __init__(self, scope: Construct, construct_id: str, *, values: WorkloadValues) -> None:
        super().__init__(scope, construct_id)
        labels = {"app.kubernetes.io/name": XID_MONITOR}
        namespace, configmap, files = values.node_agents_namespace, XID_MONITOR_CONFIGMAP, payload_files()
        api_object(
            self,
            "XidMonitorScripts",
            api_version="v1",
            kind="ConfigMap",
            name=configmap,
            namespace=namespace,
            body={"data": {name: files[name] for name in XID_MONITOR_FILES}},
        )
        container = {
            "name": "xid-monitor",
            "image": values.image,  # the DLC image the GPU jobs pull anyway: python3, no extra image
            "imagePullPolicy": "IfNotPresent",
            "command": ["python3", f"{WORKLOADS_MOUNT}/xid_monitor.py"],
            "env": [
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "PYTHONUNBUFFERED", "value": "1"},
            ],
            "securityContext": {"privileged": True, "readOnlyRootFilesystem": True},
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
            "volumeMounts": [
                {"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True},
                {"name": "workloads", "mountPath": WORKLOADS_MOUNT, "readOnly": True},
            ],
        }
        node_affinity = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": NODE_ROLE_LABEL, "operator": "In", "values": ["gpu"]}]}
                ]
            }
        }
        api_object(
            self,
            "XidMonitor",
            api_version="apps/v1",
            kind="DaemonSet",
            name=XID_MONITOR,
            namespace=namespace,
            labels=labels,
            body={
                "spec": {
                    "selector": {"matchLabels": labels},
                    "updateStrategy": {"type": "RollingUpdate"},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "automountServiceAccountToken": False,
                            "tolerations": [GPU_TOLERATION, HEALTH_STATUS_TOLERATION],
                            "affinity": {"nodeAffinity": node_affinity},
                            "containers": [container],
                            "volumes": [
                                {"name": "kmsg", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}},
                                {"name": "workloads", "configMap": {"name": configmap, "defaultMode": 0o555}},
                            ],
                        },
                    },
                }
            },
        )
