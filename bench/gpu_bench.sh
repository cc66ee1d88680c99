#!/usr/bin/env bash
# The GPU benchmark, one command for a lent GPU machine (under 10 minutes on one H100/H200):
# tokens/s and MFU of the 1b and 8b presets (FSDP2, bf16, per-block compile, selective activation
# checkpointing, fused AdamW; NCCL even at world size 1), and the async checkpoint stall.
#   bash bench/gpu_bench.sh            (needs a CUDA build of torch; prints JSON lines)
set -euo pipefail
cd "$(dirname "$0")/.."
gpus=$(python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.device_count())")
export OMP_NUM_THREADS=8
for preset in 1b 8b; do
  case $preset in
    1b) flags="--batch-size=4 --seq-len=4096 --compile --activation-checkpointing=selective" ;;
    8b) flags="--batch-size=1 --seq-len=8192 --compile --activation-checkpointing=selective" ;;
  esac
  # The last JSON lines: the summary (tokens_per_s over the whole run) and the last step's MFU.
  timeout 240 torchrun --standalone --nproc-per-node="$gpus" workloads/train.py --preset=$preset --steps=40 \
    --log-every=10 $flags | grep -E '"event": "(step|summary)"' | tail -2
done
timeout 180 python3 bench/checkpoint_bench.py --preset 1b --repeats 2
