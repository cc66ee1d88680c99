#!/usr/bin/env bash
# HyperPod (EKS orchestrator) lifecycle script: runs once on every new or replaced node, as root.
# HyperPod downloads the whole folder from LifeCycleConfig.SourceS3Uri and runs this file.
# Every step is idempotent (a re-run changes nothing) and any failure fails the node's creation,
# so a misconfigured node never joins the cluster silently.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# LLM_INFRA_ROOT lets the tests run the scripts against a sandbox instead of /.
export LLM_INFRA_ROOT="${LLM_INFRA_ROOT:-}"
LOG="${LLM_INFRA_ROOT}/var/log/provision/provisioning.log"
mkdir -p "$(dirname "$LOG")"
exec > >(tee -a "$LOG") 2>&1

echo "[on_create] $(date -u +%FT%TZ) starting"
# Settings written by the stack (e.g. HUGEPAGES_2MIB), exported to every step.
if [[ -f "$HERE/lifecycle.env" ]]; then
  set -a
  # shellcheck source=/dev/null
  source "$HERE/lifecycle.env"
  set +a
fi
# Hugepages for EFA's libfabric (HUGEPAGES_2MIB; 0 on groups without EFA), then containerd's data root
# and kubelet's directory onto the group's EBS volume when it has one (see each script for its sources).
STEPS=(configure_hugepages.sh configure_container_storage.sh)
for step in "${STEPS[@]}"; do
  echo "[on_create] running $step"
  if ! bash "$HERE/$step"; then
    echo "[on_create] FAILED: $step" >&2
    exit 1
  fi
done
echo "[on_create] $(date -u +%FT%TZ) done"
