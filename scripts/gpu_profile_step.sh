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
# shellcheck disable=SC2086
ls $SHARDS > /dev/null 2>&1 || { echo "error: no shard matches $SHARDS (make data, or set DATA=)" >&2; exit 1; }
mkdir -p "$OUT"
echo "ncu over two steps of $CU (a minute or two)..."
# shellcheck disable=SC2086
ncu --clock-control none --print-units base \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv --page raw \
    "$CU" -e d12 -b 64 -t 1024 -r 0 -x 2 -j "" -v 0 -s 0 -g 0 -i "$SHARDS" "$@" > "$OUT/ncu.csv" 2> "$OUT/ncu.err" \
    || { echo "error: ncu failed; see $OUT/ncu.err" >&2; tail -5 "$OUT/ncu.err" >&2; exit 1; }
python3 dev/ncu_step.py "$OUT/ncu.csv"
