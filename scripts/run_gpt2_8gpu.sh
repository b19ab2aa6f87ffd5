#!/usr/bin/env bash
# run_gpt2_8gpu.sh: GPT-2 124M (default) or 1.5B from scratch on one node of 8 GPUs, on
# FineWeb 10B (./dev/data/fineweb.sh first), with mpirun and NCCL. Usage:
#   scripts/run_gpt2_8gpu.sh            # 124M: 10B tokens in 19,073 steps of 0.5M tokens
#   MODEL=1558M scripts/run_gpt2_8gpu.sh
#   NP=4 scripts/run_gpt2_8gpu.sh       # fewer GPUs: the same total batch, more accumulation
set -euo pipefail
cd "$(dirname "$0")/.."
NP=${NP:-8}
MODEL=${MODEL:-124M}
make -s train_gpt2cu
case "$MODEL" in
  # -e: model shape from scratch; -b: micro-batch per GPU (the largest that fits an 80 GB+ GPU
  # at -r 0 / -r 1); -z: ZeRO stage (1: AdamW moments and fp32 master weights split over
  # the ranks); -l/-u/-q: peak lr, warmup steps, final lr as a fraction of the peak;
  # -x: steps (10B tokens / 524,288 tokens per step, for 124M)
  124M)  ARGS=(-e d12 -b 64 -r 0 -z 1 -l 6e-4 -u 700 -q 0.0 -x 19073) ;;
  1558M) ARGS=(-e d48 -b 16 -r 1 -z 1 -l 2e-4 -u 700 -q 0.1 -x 32000) ;;
  *) echo "MODEL must be 124M or 1558M" >&2; exit 1 ;;
esac
# NCCL_NVLS_ENABLE=0: NVLink multicast off (it hangs on some virtualised multi-GPU hosts)
# -x on mpirun exports a variable to every rank
mpirun -np "$NP" --bind-to none -x NCCL_NVLS_ENABLE=0 ./train_gpt2cu "${ARGS[@]}" \
    -i "data/fineweb10B/fineweb_train_*.bin" \
    -j "data/fineweb10B/fineweb_val_*.bin" \
    -o "log/gpt2_${MODEL}_${NP}gpu" \
    -t 1024 \
    -d 524288 \
    -c 0.1 \
    -k cosine \
    -v 250 -m 20 \
    -s 5000 -g 144 \
    -n 5000 \
    -y "${RESUME:-0}"
# -t: sequence length; -d: tokens per optimizer step over all GPUs (a multiple of
# B*T*NP; the rest is gradient accumulation); -c: weight decay (2-D weights only);
# -k: lr schedule; -v/-m: validation loss every 250 steps over 20 batches; -s/-g: a
# 144-token sample every 5000 steps (rank 0); -n: checkpoint every 5000 steps into -o
# (model_<step>.bin, state_<step>.bin and, under ZeRO, state_<step>.rank<r>.bin);
# RESUME=1 continues the run in -o from its newest complete checkpoint, bit-exactly
# when launched with the same number of GPUs.
