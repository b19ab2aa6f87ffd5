#!/usr/bin/env bash
# gpu_profile_step.sh: one training step of train_gpt2cu, kernel by kernel (run THERE, on a
# GPU machine with Nsight Compute's ncu). Runs two d12 B=64 T=1024 steps under ncu (the
# kernels serialised, each at the clock an idle GPU gives it) and prints the second step's
# kernels summed by name: calls, ms, DRAM GB, TB/s (dev/ncu_step.py; docs/performance-notes.md keeps the
# tables). The CSV stays in $OUT. Like the other GPU scripts it takes the binary and the Tiny
# Shakespeare shards from scripts/gpu_bundle.sh's dist/gpu unless BIN= (or CU=) and DATA= say
# otherwise; later options override the defaults (-b 4 -t 256: a small step).
#   BIN=dist/gpu/bin DATA=dist/gpu/data OUT=out/profile \
#     scripts/gpu_profile_step.sh [extra train_gpt2cu options, e.g. -r 1]
# GEN=N: a step of generation instead, late in an N-token text: train_gpt2cu --generate -e
# d12 -g N --top-k 1 --decode-graph 0 (each kernel launched plainly, so that ncu sees it; the
# same kernels as the graph's) runs once to learn its kernels a step, then under ncu over its
# decoder kernels (those named *decode*) from step N-4 on; the table sums one step (the draw,
# decode_sample_kernel, ends each). Later options override, e.g. GEN=256
# scripts/gpu_profile_step.sh -e d48 --num-samples 8. Up to 8 rows (the matrix-vector path):
# with more, cuBLAS's matmuls and the layernorm kernels are not in the table.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-dist/gpu/bin}
CU=${CU:-$BIN/train_gpt2cu}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/profile}
SHARDS="$DATA/tiny_shakespeare_train_*.bin"
command -v ncu > /dev/null || { echo "error: ncu (Nsight Compute) not found on PATH" >&2; exit 1; }
[ -x "$CU" ] || { echo "error: $CU not found or not executable (scripts/gpu_bundle.sh, or set BIN= or CU=)" >&2
                  exit 1; }
mkdir -p "$OUT"
if [ -n "${GEN:-}" ]; then
    if ! [[ "$GEN" =~ ^[0-9]+$ ]] || [ "$GEN" -lt 8 ]; then
        echo "error: GEN=$GEN: give the tokens, 8 or more" >&2
        exit 1
    fi
    gen=("$CU" --generate -e d12 -g "$GEN" --top-k 1 --decode-graph 0 "$@")
    "${gen[@]}" > "$OUT/generate.txt" 2>&1 || { echo "error: ${gen[*]} failed:" >&2; tail -5 "$OUT/generate.txt" >&2
                                               exit 1; }
    per=$(sed -n 's/.* of \([0-9][0-9]*\) kernels.*/\1/p' "$OUT/generate.txt" | head -1)
    [ -n "$per" ] || { echo "error: no kernel count in $OUT/generate.txt" >&2; exit 1; }
    grep '^generate: ' "$OUT/generate.txt" | tail -1
    echo "ncu over 3 steps of $per kernels from step $((GEN - 4))..."
    ncu --clock-control none --print-units base \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
        -k regex:decode --launch-skip $((per * (GEN - 4))) --launch-count $((per * 3)) \
        "${gen[@]}" > "$OUT/ncu.csv" 2> "$OUT/ncu.err" \
        || { echo "error: ncu failed; see $OUT/ncu.err" >&2; tail -5 "$OUT/ncu.err" >&2; exit 1; }
    python3 dev/ncu_step.py "$OUT/ncu.csv" --mark decode_sample_kernel
    exit 0
fi
# shellcheck disable=SC2086
ls $SHARDS > /dev/null 2>&1 || { echo "error: no shard matches $SHARDS (make data, or set DATA=)" >&2; exit 1; }
echo "ncu over two steps of $CU (a minute or two)..."
# shellcheck disable=SC2086
ncu --clock-control none --print-units base \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
    "$CU" -e d12 -b 64 -t 1024 -r 0 -x 2 -j "" -v 0 -s 0 -g 0 -i "$SHARDS" "$@" > "$OUT/ncu.csv" 2> "$OUT/ncu.err" \
    || { echo "error: ncu failed; see $OUT/ncu.err" >&2; tail -5 "$OUT/ncu.err" >&2; exit 1; }
python3 dev/ncu_step.py "$OUT/ncu.csv"
