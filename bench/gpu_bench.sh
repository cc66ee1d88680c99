#!/usr/bin/env bash
# The GPU benchmark, one command for a lent GPU machine (about 5 minutes on one H200):
# tokens/s and MFU of the tiny and 1b presets (FSDP2, bf16), and the async checkpoint stall.
#   bash bench/gpu_bench.sh            (needs a CUDA build of torch; prints JSON lines)
set -euo pipefail
cd "$(dirname "$0")/.."
gpus=$(python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.device_count())")
export OMP_NUM_THREADS=8
for preset in tiny 1b; do
  case $preset in
    tiny) flags="--batch-size=32 --seq-len=256" ;;
    1b) flags="--batch-size=4 --seq-len=2048 --activation-checkpointing" ;;
  esac
  # The last JSON lines: the summary (tokens_per_s over the whole run) and the last step's MFU.
  timeout 240 torchrun --standalone --nproc-per-node="$gpus" workloads/train.py --preset=$preset --steps=40 \
    --log-every=10 $flags | grep -E '"event": "(step|summary)"' | tail -2
done
timeout 180 python3 bench/checkpoint_bench.py --preset 1b --repeats 2
