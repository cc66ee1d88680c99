"""FsxStorageChart: a static PersistentVolume for the FSx for Lustre file system, and its claim."""

from __future__ import annotations

import cdk8s
from constructs import Construct

from llm_infra.k8s_manifests.objects import api_object
from llm_infra.k8s_manifests.values import WorkloadValues

FSX_CSI_DRIVER = "fsx.csi.aws.com"


class FsxStorageChart(cdk8s.Chart):
    """PV (CSI ``fsx.csi.aws.com``: volumeHandle = file system id, dnsname, mountname) + bound PVC."""

    def __init__(self, scope: Construct, construct_id: str, *, values: WorkloadValues) -> None:
        super().__init__(scope, construct_id)
        if values.fsx is None:
            raise ValueError("fsx: the FSx file system id, DNS name and mount name are required for the volume")
        pv_name = f"{values.pvc_name}-{values.namespace}"
        capacity = {"storage": f"{values.fsx.storage_gib}Gi"}
        api_object(
            self,
            "Volume",
            api_version="v1",
            kind="PersistentVolume",
            name=pv_name,
            body={
                "spec": {
                    "capacity": capacity,
                    "volumeMode": "Filesystem",
                    "accessModes": ["ReadWriteMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "mountOptions": ["flock"],
                    "csi": {
                        "driver": FSX_CSI_DRIVER,
                        "volumeHandle": values.fsx.file_system_id,
                        "volumeAttributes": {"dnsname": values.fsx.dns_name, "mountname": values.fsx.mount_name},
                    },
                }
            },
        )
        api_object(
            self,
            "Claim",
            api_version="v1",
            kind="PersistentVolumeClaim",
            name=values.pvc_name,
            namespace=values.namespace,
            body={
                "spec": {
                    "accessModes": ["ReadWriteMany"],
                    "storageClassName": "",
                    "volumeName": pv_name,
                    "resources": {"requests": capacity},
                }
            },
        )
