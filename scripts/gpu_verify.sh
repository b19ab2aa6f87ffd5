#!/usr/bin/env bash
# gpu_verify.sh: run THERE (the GPU machine), after scripts/gpu_carry.sh here. One call:
# the flash attention kernel test, the trainer tests in every precision at a small shape
# and d12 plus bit-exact resume (gpu_check.sh QUICK=1), then GPT-2 124M B=64 beside
# the PyTorch baseline (bench_gpu.sh, d12 only), then a per-phase profile of one d12
# B=64 run. Pass trainer options for the tests, the benchmark and the profile in FLAGS
# (e.g. FLAGS="-f -1": flash attention where supported); CU_R picks the recompute levels
# timed (default 1), D24_BATCHES the d24 batch sizes to try (default none), BENCH_S the
# benchmark's time budget (default 200 s). CU_ALT: other trainer options benchmarked and
# profiled beside the default (e.g. CU_ALT="--deterministic 0"). SKIP_TESTS=1 skips the
# tests (SKIP_ATTENTION=1: all but the attention kernel test). Summaries print last; logs go to $OUT.
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_verify}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/check" "$OUT/bench"
: > "$OUT/check/summary.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
    if [ "${SKIP_ATTENTION:-0}" != 1 ]; then
        timeout 150 .carry/bin/test_attention > "$OUT/attention.log" 2>&1
        echo "test_attention rc=$? $(tail -1 "$OUT/attention.log")"
    fi
    QUICK=1 BIN=.carry/bin DATA=.carry/ts OUT="$OUT/check" timeout 300 bash scripts/gpu_check.sh > /dev/null 2>&1
fi
CU=.carry/bin/train_gpt2cu CU_R=${CU_R:-1} CU_ALT=${CU_ALT:-} D24_BATCHES=${D24_BATCHES-""} STEPS=30 BUDGET_S=${BENCH_S:-200} \
    OUT="$OUT/bench" timeout $((${BENCH_S:-200} + 20)) bash scripts/bench_gpu.sh > /dev/null 2>&1
TR="-i .carry/ts/tiny_shakespeare_train_*.bin -j .carry/ts/tiny_shakespeare_train_*.bin"
# profile LOG [OPTIONS...]: a --profile 1 run of d12 B=64 -r 1 into $OUT/LOG
profile() {
    local log=$1; shift
    # shellcheck disable=SC2086  # FLAGS is a list of options
    timeout 90 .carry/bin/train_gpt2cu $TR -e d12 -b 64 -t 1024 -x 12 -r 1 -l 6e-4 -v 0 -s 0 -g 0 --profile 1 \
        ${FLAGS:-} "$@" > "$OUT/$log" 2>&1
}
show_profile() {  # LOG TITLE
    echo "==== profile (d12 B=64 -r 1 $2)"; grep -E '^(memory|mean over|device memory)' "$OUT/$1"
    sed -n '/^profile:/,/sum of phases/p' "$OUT/$1"
}
profile profile.log
# shellcheck disable=SC2086  # CU_ALT is a list of options
[ -n "${CU_ALT:-}" ] && profile profile_alt.log $CU_ALT
rm -f "$OUT/bench/logs.tar.gz" "$OUT/check/ref.log"
echo "==== tests"; cat "$OUT/check/summary.txt"
show_profile profile.log "${FLAGS:-}"
[ -n "${CU_ALT:-}" ] && show_profile profile_alt.log "${FLAGS:-} $CU_ALT"
echo "==== benchmark"; cat "$OUT/bench/table.txt"
