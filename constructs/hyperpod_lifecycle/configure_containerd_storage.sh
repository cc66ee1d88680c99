#!/usr/bin/env bash
# Put containerd's image store on the instance's NVMe volume when HyperPod mounted one
# (/opt/dlami/nvme on P4/P5): DLC images are ~20 GiB and the root volume fills up fast.
set -euo pipefail

ROOT="${LLM_INFRA_ROOT:-}"
NVME="$ROOT/opt/dlami/nvme"
TARGET="$NVME/containerd"
CONFIG="$ROOT/etc/containerd/config.toml"

if ! mountpoint -q "$NVME"; then
  echo "configure_containerd_storage: no NVMe volume at $NVME; keeping the default root"
  exit 0
fi
if [[ ! -f "$CONFIG" ]]; then
  echo "configure_containerd_storage: $CONFIG is missing; is this an EKS-orchestrated HyperPod AMI?" >&2
  exit 1
fi
if grep -q "^root = \"/opt/dlami/nvme/containerd\"" "$CONFIG"; then
  echo "configure_containerd_storage: already on $TARGET"
  exit 0
fi
mkdir -p "$TARGET"
systemctl stop containerd
# Replace an existing root setting or add one at the top of the file.
if grep -q '^root = ' "$CONFIG"; then
  sed -i 's|^root = .*|root = "/opt/dlami/nvme/containerd"|' "$CONFIG"
else
  sed -i '1i root = "/opt/dlami/nvme/containerd"' "$CONFIG"
fi
systemctl start containerd
echo "configure_containerd_storage: containerd root moved to $TARGET"
