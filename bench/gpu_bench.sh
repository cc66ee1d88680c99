#!/usr/bin/env bash
# The GPU check and benchmark, one bounded command for a lent GPU machine (about 8 minutes on one
# H100/H200). Each part has its own time limit and a failure does not stop the next part:
#   1. what nvidia-smi prints for the health check's queries (saved: real output for the parsers);
#   2. the node health check on this machine (expects every GPU; no EFA on a single-GPU box);
#   3. the payload on CUDA + NCCL: tiny preset, async checkpoints, then a resume from them (verdict);
#   4. tokens/s and MFU of the 1b preset (FSDP2, bf16, per-block compile, selective activation
#      checkpointing, fused AdamW), with async checkpoints inside the run (each one's stall logged);
#   5. async stall vs sync save of a 570 MB training state (pinned staging, as in training);
#   6. the 8b preset on one GPU (full activation checkpointing: fp32 weights, gradients and Adam's
#      moments are 128 GB, so only an H200's 141 GB holds them).
#   bash bench/gpu_bench.sh [OUT_DIR [PART...]]   (needs a CUDA build of torch; logs in OUT_DIR/PART.log)
# PART: health payload-cuda train-1b checkpoint train-8b (default: all, in that order).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-/tmp/gpu-bench}}
shift $(($# > 0 ? 1 : 0))
parts=" ${*:-health payload-cuda train-1b checkpoint train-8b} "
mkdir -p "$out"
scratch=$(mktemp -d)
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || exit 1
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
export OMP_NUM_THREADS=8 PYTHONUNBUFFERED=1
status=0

part() {  # part NAME SECONDS COMMAND...: run with a limit, log to $out/NAME.log, keep going on failure
  local name=$1 limit=$2
  shift 2
  [[ $parts == *" $name "* ]] || return 0
  echo "== $name (limit ${limit}s)"
  local started=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - started))s"
  grep -E '"event": "(step|summary|resume|checkpoint|verdict|fault)"|"verdict"|async_stall|Error|error' \
    "$out/$name.log" | tail -8
  [[ $rc == 0 ]] || status=1
}

train() {  # train ARGS...: the payload under torchrun on every local GPU
  torchrun --standalone --nproc-per-node="$gpus" workloads/train.py "$@"
}

{
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  nvidia-smi
  nvidia-smi --query-gpu=index,name,driver_version,ecc.errors.uncorrected.volatile.total,retired_pages.pending,pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,fabric.state,fabric.status --format=csv,noheader
  nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.pending,remapped_rows.failure --format=csv,noheader
  nvidia-smi nvlink -s
  ls -l /dev/kmsg
  command -v dcgmi fi_info
} >"$out/nvidia-smi.txt" 2>&1

part health 60 python3 workloads/health_check.py --expected-gpus="$gpus" --expected-efa=0 --gpu-name=H \
  --min-disk-gib=1 --min-shm-gib=0.05 --state-dir="$scratch/health"
part payload-cuda 120 bash -c "$(declare -f train); gpus=$gpus; \
  train --preset=tiny --steps=20 --seq-len=256 --checkpoint-dir=$scratch/tiny --checkpoint-every=10 \
    --async-checkpoint --fail-at-step=15 || true; \
  train --preset=tiny --steps=30 --seq-len=256 --checkpoint-dir=$scratch/tiny --checkpoint-every=10 \
    --async-checkpoint --verdict"
part train-1b 150 bash -c "$(declare -f train); gpus=$gpus; \
  train --preset=1b --steps=30 --batch-size=4 --seq-len=4096 --compile --activation-checkpointing=selective \
    --log-every=5 --checkpoint-dir=$scratch/1b --checkpoint-every=10 --async-checkpoint"
part checkpoint 90 python3 bench/checkpoint_bench.py --preset state-570mb --repeats 3 --dir "$scratch/bench"
part train-8b 150 bash -c "$(declare -f train); gpus=$gpus; \
  train --preset=8b --steps=12 --batch-size=1 --seq-len=4096 --compile --activation-checkpointing=full \
    --log-every=2"
rm -rf "$scratch"
exit $status
