#!/usr/bin/env bash
# quickstart.sh: the main job (README, first command). Prepares Tiny Shakespeare, then
# trains a GPT-2 on it and prints samples: on the GPU with train_gpt2cu when one is
# present and the GPU trainer builds (or is built), else a small GPT-2 on the CPU for a few
# minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
./dev/data/tinyshakespeare.sh
mkdir -p log
# the GPU run needs the GPU trainer: built here with nvcc, or already built (a GPU host with
# only the CUDA runtime); when neither, or its build fails, the CPU run still shows training
gpu=""
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1 && [ -f train_gpt2.cu ]; then
    if command -v "${NVCC:-nvcc}" > /dev/null 2>&1; then
        if make -s train_gpt2cu; then gpu=1
        else echo "note: a GPU is present but train_gpt2cu did not build (make's errors above); using the CPU"; fi
    elif [ -x train_gpt2cu ]; then
        gpu=1
    else
        echo "note: a GPU is present but nvcc is not on the PATH, so train_gpt2cu cannot be built (install the" \
             "CUDA toolkit for the GPU run); using the CPU"
    fi
fi
# a second quickstart starts over: --overwrite 1 removes the first one's checkpoints and logs
if [ -n "$gpu" ]; then
    echo "GPU found: training GPT-2 124M (d12) from scratch with train_gpt2cu"
    ./train_gpt2cu -e d12 -b 16 -t 1024 -x 300 -l 6e-4 -u 30 -q 0.1 -v 50 -m 10 -s 100 -g 64 -o log/quickstart_gpu \
        --overwrite 1
else
    threads=${OMP_NUM_THREADS:-$(nproc)}
    echo "no GPU run: training a small GPT-2 (4 layers, 256 channels) on the CPU with $threads threads"
    OMP_NUM_THREADS=$threads ./train_gpt2 -e l4h4c256t64 -b 8 -t 64 -x 240 -l 2e-3 -u 20 -q 0.1 \
        -c 0.1 -v 60 -m 8 -s 240 -g 48 --prompt "ROMEO:" -o log/quickstart_cpu --overwrite 1
fi
