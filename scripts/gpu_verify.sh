#!/usr/bin/env bash
# gpu_verify.sh: the short GPU check and the benchmark in one go, on the GPU host from the
# repository root, with the binaries of scripts/gpu_bundle.sh in $BIN (default dist/gpu/bin)
# and the shards in $DATA (default dist/gpu/data). Runs the flash attention kernel test,
# scripts/gpu_check.sh with QUICK=1 (every precision at three shapes, accumulation, resume,
# the fp16 loss scaler, the collectives, kill -9), GPT-2 124M B=64 beside the PyTorch
# baseline (scripts/bench_gpu.sh, d12 only) and a per-phase profile of one d12 B=64 run.
# The benchmark and the profile are timing runs: each counts as a check only for running
# to its table. Ends with "N passed, M failed"; exits 1 if any check failed.
#   FLAGS="..."   trainer options for the tests, the benchmark and the profile (e.g. "--flash-attention 0")
#   CU_R          the recompute levels timed (default 1); D24_BATCHES the d24 batch sizes
#                 to try (default none); BENCH_S the benchmark's time budget (default 200 s)
#   CU_ALT="..."  other trainer options benchmarked and profiled beside the default
#   SKIP_TESTS=1  no tests (SKIP_ATTENTION=1: all but the attention kernel test)
# Logs in $OUT (default out/gpu_verify).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/gpu_verify}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/bench"
. dev/test/testlib.sh
# summary LOG: the "N passed, M failed" line a test program or script ends with
summary() { grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -1; }

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    if [ "${SKIP_ATTENTION:-0}" != 1 ]; then
        timeout 150 "$BIN/test_attention" > "$OUT/attention.log" 2>&1
        rc=$?
        res=$(summary "$OUT/attention.log")
        if [ $rc = 0 ] && [[ "$res" == *" 0 failed" ]]; then ok "test_attention: $res"
        else bad "test_attention: exit $rc, ${res:-no summary line}"; fi
    fi
    echo "==== scripts/gpu_check.sh, QUICK=1"
    QUICK=1 BIN="$BIN" DATA="$DATA" OUT="$OUT/check" FLAGS="${FLAGS:-}" timeout 420 bash scripts/gpu_check.sh \
        2>&1 | tee "$OUT/check.log" | sed 's/^/    /'
    rc=${PIPESTATUS[0]}
    res=$(summary "$OUT/check.log")
    if [ "$rc" = 0 ] && [[ "$res" == *" 0 failed" ]]; then ok "gpu_check.sh QUICK=1: $res"
    else bad "gpu_check.sh QUICK=1: exit $rc, ${res:-no summary line}"; fi
fi

echo "==== benchmark (scripts/bench_gpu.sh, d12 B=64)"
CU=$BIN/train_gpt2cu DATA=$DATA CU_R=${CU_R:-1} CU_ALT=${CU_ALT:-} D24_BATCHES=${D24_BATCHES-""} STEPS=30 \
    BUDGET_S=${BENCH_S:-200} OUT="$OUT/bench" timeout $((${BENCH_S:-200} + 20)) bash scripts/bench_gpu.sh \
    > "$OUT/bench.log" 2>&1
# the table's d12 rows, ours and PyTorch's, each with a time (d24 may fail on purpose: out of memory)
d12=$(grep -E '^(train_gpt2cu_r[0-9]+(_alt)?|pytorch_d12) +d12 ' "$OUT/bench/table.txt" 2>/dev/null)
cat "$OUT/bench/table.txt" 2>/dev/null
if [ -n "$d12" ] && echo "$d12" | grep -q '^pytorch_d12' && ! echo "$d12" | grep -qE ' (failed|skipped)'; then
    ok "benchmark: every d12 row measured"
else bad "benchmark: d12 rows missing or failed (bench.log)"; fi

TR="-i $DATA/tiny_shakespeare_train_*.bin -j $DATA/tiny_shakespeare_train_*.bin"
# profile LOG TITLE [OPTIONS...]: a --profile 1 run of d12 B=64 -r 1, its phase table printed
profile() {
    local log=$1 title=$2
    shift 2
    # shellcheck disable=SC2086  # option lists
    timeout 90 "$BIN/train_gpt2cu" $TR -e d12 -b 64 -t 1024 -x 12 -r 1 -l 6e-4 -v 0 -s 0 -g 0 --profile 1 \
        ${FLAGS:-} "$@" > "$OUT/$log" 2>&1
    local rc=$?
    echo "==== profile (d12 B=64 -r 1 $title)"
    grep -E '^(memory|mean over|device memory)' "$OUT/$log"
    sed -n '/^profile:/,/sum of phases/p' "$OUT/$log"
    if [ $rc = 0 ] && grep -q "sum of phases" "$OUT/$log"; then ok "profile run${title:+ ($title)}"
    else bad "profile run $title: exit $rc, no phase table ($log)"; fi
}
profile profile.log "${FLAGS:-}"
# shellcheck disable=SC2086  # CU_ALT is a list of options
[ -n "${CU_ALT:-}" ] && profile profile_alt.log "${FLAGS:-} $CU_ALT" $CU_ALT
rm -f "$OUT/bench/logs.tar.gz"
test_finish
