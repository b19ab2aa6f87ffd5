#!/usr/bin/env bash
# gpu_attention.sh: the flash attention kernels, on the GPU host from the repository root,
# with the binaries of scripts/gpu_bundle.sh in $BIN (default dist/gpu/bin): the wgmma
# building blocks (test_wgmma), the kernel tests in bf16 and fp16 (every tile variant, fresh
# seeds), and the variants' timing beside PyTorch SDPA on the same shapes
# (dev/bench_attention.py). With TRAIN_BENCH=1 and every test passing, also GPT-2 124M B=64
# -r 0 beside the PyTorch baseline (scripts/bench_gpu.sh, d12 only). The timings count as
# checks only for running to their tables. Ends with "N passed, M failed"; exits 1 if any
# check failed. Logs in $OUT (default out/gpu_attention).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/gpu_attention}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
. dev/test/testlib.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader 2>&1
# the wgmma kernels are in the binary only when it was built for sm_90a
echo "HGMMA instructions in test_attention: $(cuobjdump --dump-sass "$BIN/test_attention" 2>/dev/null | grep -c HGMMA)"
for p in "" _fp16; do
    timeout 60 "$BIN/test_wgmma$p" > "$OUT/wgmma$p.log" 2>&1
    rc=$?
    if [ $rc = 0 ]; then ok "test_wgmma$p: $(tail -1 "$OUT/wgmma$p.log")"
    elif [ $rc = 77 ]; then skip "test_wgmma$p: $(tail -1 "$OUT/wgmma$p.log")"  # (a GPU other than 9.0)
    else
        bad "test_wgmma$p: exit $rc, $(tail -1 "$OUT/wgmma$p.log")"
        grep -E "err|failed" "$OUT/wgmma$p.log" | head -10
    fi
    timeout 240 "$BIN/test_attention$p" > "$OUT/attention$p.log" 2>&1
    rc=$?
    res=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT/attention$p.log" | tail -1)
    if [ $rc = 0 ] && [[ "$res" == *" 0 failed" ]]; then ok "test_attention$p: $res"
    else
        bad "test_attention$p: exit $rc, ${res:-no summary line}"
        # the first failing checks, with their case and variant lines
        grep -E "^(case|variant)|FAIL" "$OUT/attention$p.log" | grep -B2 FAIL | head -20
    fi
done
timeout 150 python3 dev/bench_attention.py "$BIN/test_attention" > "$OUT/bench_attention.log" 2>&1
rc=$?
echo "==== attention timing"
grep -E "^VARIANT|^(shape|B=|  )" "$OUT/bench_attention.log" | grep -v "^  *$"
if [ $rc = 0 ] && grep -q '^shape ' "$OUT/bench_attention.log"; then ok "attention timing (dev/bench_attention.py)"
else bad "attention timing: exit $rc, no table (bench_attention.log)"; fi
if [ "${TRAIN_BENCH:-0}" = 1 ] && [ $TEST_FAILED = 0 ]; then
    CU=$BIN/train_gpt2cu DATA=$DATA CU_R=0 D24_BATCHES="" STEPS=30 BUDGET_S=200 OUT="$OUT/bench" \
        timeout 230 bash scripts/bench_gpu.sh > "$OUT/bench.log" 2>&1
    echo "==== trainer benchmark"
    cat "$OUT/bench/table.txt" 2>/dev/null
    d12=$(grep -E '^(train_gpt2cu_r0|pytorch_d12) +d12 ' "$OUT/bench/table.txt" 2>/dev/null)
    if [ "$(echo "$d12" | grep -c .)" = 2 ] && ! echo "$d12" | grep -qE ' (failed|skipped)'; then
        ok "trainer benchmark: both d12 rows measured"
    else bad "trainer benchmark: d12 rows missing or failed (bench.log)"; fi
fi
test_finish
