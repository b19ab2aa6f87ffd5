#!/usr/bin/env bash
# gpu_carry.sh: run HERE (a machine with nvcc, no GPU needed) before a device call:
# builds every GPU binary the checks use into .carry/bin (git-ignored) with the
# Makefile's flags (MPI and NCCL included) and copies the Tiny Shakespeare shards into
# .carry/ts. Then, in one device call:
#   run(command="bash scripts/gpu_verify.sh", carry=[".carry", "data/tinyshakespeare"])
set -euo pipefail
cd "$(dirname "$0")/.."
make -s data > /dev/null
mkdir -p .carry/bin .carry/ts
cp data/tinyshakespeare/*.bin .carry/ts/
for p in FP16 FP32 BF16; do  # BF16 last: the tree's own binaries stay the default build
    suffix=""; [ $p != BF16 ] && suffix="_$(echo $p | tr A-Z a-z)"
    echo "make PRECISION=$p train_gpt2cu test_gpt2cu -> .carry/bin/*$suffix"
    make -s -B PRECISION=$p train_gpt2cu test_gpt2cu
    cp train_gpt2cu ".carry/bin/train_gpt2cu$suffix"
    cp test_gpt2cu ".carry/bin/test_gpt2cu$suffix"
done
make -s -B PRECISION=FP16 build/test_attention build/test_wgmma
cp build/test_attention .carry/bin/test_attention_fp16
cp build/test_wgmma .carry/bin/test_wgmma_fp16
make -s -B build/test_attention build/test_wgmma build/test_comm build/bench_matmul
cp build/test_attention build/test_wgmma build/test_comm build/bench_matmul .carry/bin/
du -sh .carry
