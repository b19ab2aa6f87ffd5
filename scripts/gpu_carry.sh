#!/usr/bin/env bash
# gpu_carry.sh: run HERE (a machine with nvcc, no GPU needed) before a device call:
# builds every GPU binary the checks use into .carry/bin (git-ignored) and copies the
# Tiny Shakespeare shards into .carry/ts. Then, in one device call:
#   run(command="bash scripts/gpu_verify.sh", carry=[".carry", "data/tinyshakespeare"])
set -euo pipefail
cd "$(dirname "$0")/.."
make -s data > /dev/null
mkdir -p .carry/bin .carry/ts
cp data/tinyshakespeare/*.bin .carry/ts/
F="-O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I."
L="-lcublas -lcublasLt"
build() {  # PRECISION SOURCE OUTPUT
    echo "nvcc -DPRECISION=$1 $2 -> .carry/bin/$3"
    nvcc $F -DPRECISION=$1 -o .carry/bin/$3 $2 $L
}
build BF16 train_gpt2.cu train_gpt2cu
build BF16 test_gpt2.cu test_gpt2cu
build FP16 train_gpt2.cu train_gpt2cu_fp16
build FP16 test_gpt2.cu test_gpt2cu_fp16
build FP32 train_gpt2.cu train_gpt2cu_fp32
build FP32 test_gpt2.cu test_gpt2cu_fp32
build BF16 dev/test/test_attention.cu test_attention
du -sh .carry
