#!/usr/bin/env bash
# Put containerd's data root and kubelet's directory on the instance group's EBS volume, which HyperPod
# mounts at /opt/sagemaker (SageMaker API ClusterEbsVolumeConfig), so that images (a DLC image is ~20 GB
# compressed) and pods' logs and emptyDirs do not fill the root volume, whose size AWS chooses. AWS's
# reference lifecycle script does the same (awsome-distributed-training, 1.architectures/
# 7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/on_create_main.sh, DISK_FOR_CONTAINERD_KUBELET).
# Unlike that script, this one keeps the AMI's containerd config and changes only its `root` line, and
# copies containerd's state first, so the preloaded pause image every pod sandbox needs comes along.
# Nothing happens on a node without the volume (a CPU group with no storage config), and a second run
# changes nothing.
set -euo pipefail

ROOT="${LLM_INFRA_ROOT:-}"
VOLUME="/opt/sagemaker"
CONFIG="$ROOT/etc/containerd/config.toml"
OLD_STATE="$ROOT/var/lib/containerd"
NEW_STATE="$ROOT$VOLUME/containerd/data-root"
KUBELET="$ROOT/var/lib/kubelet"
NEW_KUBELET="$ROOT$VOLUME/kubelet"

if ! mountpoint -q "$ROOT$VOLUME"; then
  echo "configure_container_storage: $VOLUME is not mounted (no EBS volume for this group); nothing to do"
  exit 0
fi

# containerd: copy the state once, then point the config's root at the copy.
if ! grep -q "^root = \"$VOLUME/containerd/data-root\"" "$CONFIG"; then
  if ! grep -q '^root = ' "$CONFIG"; then
    echo "configure_container_storage: no root line in $CONFIG; refusing to guess the AMI's layout" >&2
    exit 2
  fi
  mkdir -p "$(dirname "$NEW_STATE")"
  rm -rf "$NEW_STATE"
  cp -a "$OLD_STATE" "$NEW_STATE"
  sed -i "s|^root = .*|root = \"$VOLUME/containerd/data-root\"|" "$CONFIG"
  echo "configure_container_storage: containerd root is $VOLUME/containerd/data-root"
fi

# kubelet: its directory becomes a link to the volume.
if [[ ! -L "$KUBELET" ]]; then
  mkdir -p "$NEW_KUBELET"
  if [[ -d "$KUBELET" ]]; then
    cp -a "$KUBELET/." "$NEW_KUBELET/"
    rm -rf "$KUBELET"
  fi
  ln -s "$VOLUME/kubelet" "$KUBELET"
  echo "configure_container_storage: $KUBELET -> $VOLUME/kubelet"
fi
