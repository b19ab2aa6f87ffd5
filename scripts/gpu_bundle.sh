#!/usr/bin/env bash
# gpu_bundle.sh: every GPU binary the GPU scripts use, for a GPU host that has the CUDA
# runtime but no compiler. Run it on a machine with nvcc (no GPU needed): it builds the
# programs with the Makefile's flags (MPI and NCCL included; without a GPU here, for every
# GPU from compute capability 8.0 on, else for this one: GPU_ARCH=all or another value in
# the environment decides) into dist/gpu/bin and copies
# the Tiny Shakespeare shards and text into dist/gpu/data (dist/ is git-ignored). Then copy
# dist/gpu to the same place in a checkout of the same commit on the GPU host and run,
# from the repository root there, e.g. scripts/gpu_check.sh (QUICK=1 for the short one);
# the GPU scripts look in dist/gpu/bin and dist/gpu/data unless BIN= and DATA= say otherwise.
# Names in dist/gpu/bin: train_gpt2cu, test_gpt2cu, test_decode, test_sample, test_attention, test_wgmma (bf16),
# the same with _fp16 and _fp32 (no attention tests in fp32), test_comm, bench_matmul, test_fp8, bench_fp8,
# export_hf, prepro; in dist/gpu/bin/ptx the trainer and its test in each precision and the
# attention test (bf16, fp16) as compute_80 PTX alone (make cuda-ptx), for gpu_check.sh's
# section 13.
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${DIST:-dist/gpu}
JOBS=${JOBS:-$(nproc)}
make -s data > /dev/null
# a fresh folder: a binary the Makefile no longer builds must not linger from an older bundle
rm -rf "${DIST:?}/bin" "${DIST:?}/data"
mkdir -p "$DIST/bin" "$DIST/data"
# input.txt too: dev/data/tinyshakespeare.sh finds the shards up to date only beside it
cp data/tinyshakespeare/*.bin data/tinyshakespeare/input.txt "$DIST/data/"
# a HellaSwag-like eval file for gpu_check.sh, made here with our tokenizer
python3 dev/test/hellaswag_like.py "$DIST/data/hellaswag_like.jsonl" 2000 11
python3 dev/data/hellaswag.py "$DIST/data/hellaswag_like.jsonl" -o "$DIST/data/hellaswag_like.bin"

suffix() { [ "$1" = BF16 ] || echo "_$(echo "$1" | tr '[:upper:]' '[:lower:]')"; }
programs() { echo train_gpt2cu test_gpt2cu test_decode test_sample; [ "$1" = FP32 ] || echo test_attention test_wgmma; }
if make -n build/cuda_FP16/train_gpt2cu > /dev/null 2>&1; then
    # a folder per precision: incremental, and the tree's own ./train_gpt2cu stays as it is
    targets=""
    for p in BF16 FP16 FP32; do
        for x in $(programs $p); do targets="$targets build/cuda_$p/$x"; done
    done
    echo "make$targets"
    # shellcheck disable=SC2086  # a list of targets
    make -s -j"$JOBS" $targets
    for p in BF16 FP16 FP32; do
        for x in $(programs $p); do cp "build/cuda_$p/$x" "$DIST/bin/$x$(suffix $p)"; done
    done
else
    # one precision at a time through the shared outputs; BF16 last, so that the tree's
    # binaries end as the default build
    for p in FP16 FP32 BF16; do
        echo "make -B PRECISION=$p: $(programs $p | tr '\n' ' ')"
        make -s -B -j"$JOBS" PRECISION=$p train_gpt2cu test_gpt2cu build/test_decode build/test_sample
        cp train_gpt2cu "$DIST/bin/train_gpt2cu$(suffix $p)"
        cp test_gpt2cu "$DIST/bin/test_gpt2cu$(suffix $p)"
        cp build/test_decode "$DIST/bin/test_decode$(suffix $p)"
        cp build/test_sample "$DIST/bin/test_sample$(suffix $p)"
        if [ $p != FP32 ]; then
            make -s -B -j"$JOBS" PRECISION=$p build/test_attention build/test_wgmma
            cp build/test_attention "$DIST/bin/test_attention$(suffix $p)"
            cp build/test_wgmma "$DIST/bin/test_wgmma$(suffix $p)"
        fi
    done
fi
# the PTX-only builds (no machine code: nvcc only writes PTX, so they build quickly)
make -s -j"$JOBS" cuda-ptx
mkdir -p "$DIST/bin/ptx"
for p in BF16 FP16 FP32; do
    for x in $(programs $p); do
        [ "$x" = test_wgmma ] || cp "build/cuda_$p-ptx/$x" "$DIST/bin/ptx/$x$(suffix $p)"
    done
done
# these live in build/ whatever the precision: -B so that they are bf16 for sure
make -s -B -j"$JOBS" PRECISION=BF16 build/test_comm build/bench_matmul build/test_fp8 build/bench_fp8
cp build/test_comm build/bench_matmul build/test_fp8 build/bench_fp8 "$DIST/bin/"
# the exporter and the tokenizer run on the GPU host's CPU: built for any x86-64, not for this machine's
gcc -O2 -std=c11 -fopenmp -I. -o "$DIST/bin/export_hf" dev/export_hf.c -lm
gcc -O2 -std=c11 -fopenmp -I. -o "$DIST/bin/prepro" dev/data/prepro.c -lm
# which source the binaries came from, for the GPU host to print beside its results
{
    echo "built $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) by scripts/gpu_bundle.sh"
    dirty=$(git diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$dirty"
    nvcc --version | tail -1
} > "$DIST/BUILD_INFO"
cat "$DIST/BUILD_INFO"
du -sh "$DIST"
