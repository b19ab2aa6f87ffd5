#!/usr/bin/env bash
# gpu_verify.sh: run THERE (the GPU machine), after scripts/gpu_carry.sh here. One call:
# the flash attention kernel test, the trainer tests in every precision at a small shape
# and d12 plus bit-exact resume (gpu_check.sh QUICK=1), then GPT-2 124M B=64 beside
# the PyTorch baseline (bench_gpu.sh, d12 only). Pass trainer options for both the tests
# and the benchmark in FLAGS (e.g. FLAGS="-f -1": flash attention where supported). Summaries print last; logs go to $OUT.
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_verify}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/check" "$OUT/bench"
timeout 60 .carry/bin/test_attention > "$OUT/attention.log" 2>&1
echo "test_attention rc=$? $(tail -1 "$OUT/attention.log")"
QUICK=1 BIN=.carry/bin DATA=.carry/ts OUT="$OUT/check" timeout 300 bash scripts/gpu_check.sh > /dev/null 2>&1
CU=.carry/bin/train_gpt2cu CU_R=1 D24_BATCHES="" STEPS=30 BUDGET_S=200 OUT="$OUT/bench" \
    timeout 220 bash scripts/bench_gpu.sh > /dev/null 2>&1
rm -f "$OUT/bench/logs.tar.gz" "$OUT/check/ref.log"
echo "==== tests"; cat "$OUT/check/summary.txt"
echo "==== benchmark"; cat "$OUT/bench/table.txt"
