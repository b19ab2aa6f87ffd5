#!/usr/bin/env bash
# gpu_attention.sh: run THERE (the GPU machine), after scripts/gpu_carry.sh here. The flash
# attention kernels in one call: the wgmma building blocks (test_wgmma), the kernel tests
# in bf16 and fp16 (every tile variant, fresh seeds), the variants' timing beside PyTorch
# SDPA on the same shapes (dev/bench_attention.py). With TRAIN_BENCH=1 and every test
# passing, also GPT-2 124M B=64 -r 0 beside the PyTorch baseline (scripts/bench_gpu.sh,
# d12 only). Summary last; logs in $OUT.
#   run(command="bash scripts/gpu_attention.sh", carry=[".carry"])
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_attention}
BIN=.carry/bin
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
S="$OUT/summary.txt"
: > "$S"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> "$S" 2>&1
echo "HGMMA instructions in test_attention: $(cuobjdump --dump-sass $BIN/test_attention 2>/dev/null | grep -c HGMMA)" >> "$S"
ok=1
for p in "" _fp16; do
    timeout 60 $BIN/test_wgmma$p > "$OUT/wgmma$p.log" 2>&1
    rc=$?; [ $rc = 0 ] || ok=0
    echo "test_wgmma$p rc=$rc" >> "$S"; grep -E "err|failed" "$OUT/wgmma$p.log" >> "$S"
    timeout 240 $BIN/test_attention$p > "$OUT/attention$p.log" 2>&1
    rc=$?; [ $rc = 0 ] || ok=0
    echo "test_attention$p rc=$rc: $(tail -1 "$OUT/attention$p.log")" >> "$S"
    # the first failing checks, with their case and variant lines
    grep -E "^(case|variant)|FAIL" "$OUT/attention$p.log" | grep -B2 FAIL | head -20 >> "$S"
done
timeout 150 python3 dev/bench_attention.py $BIN/test_attention > "$OUT/bench_attention.log" 2>&1
if [ "${TRAIN_BENCH:-0}" = 1 ] && [ $ok = 1 ]; then
    CU=$BIN/train_gpt2cu CU_R=0 D24_BATCHES="" STEPS=30 BUDGET_S=200 OUT="$OUT/bench" \
        timeout 230 bash scripts/bench_gpu.sh > /dev/null 2>&1
fi
echo "==== summary"; cat "$S"
echo "==== attention timing"; grep -E "^VARIANT|^(shape|B=|  )" "$OUT/bench_attention.log" | grep -v "^  *$"
[ -f "$OUT/bench/table.txt" ] && { echo "==== trainer benchmark"; cat "$OUT/bench/table.txt"; }
exit 0
