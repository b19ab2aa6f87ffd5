#!/usr/bin/env bash
# scripts/gpu_memory_budget.sh: --max-device-memory on the GPU (docs/memory.md). For each
# row (model, micro-batch, recompute level, budget) train_gpt2cu plans its device memory
# against the budget before it touches the GPU; a run that fits trains $STEPS steps and
# reports its measured peak (cudaMemGetInfo: the GPU's use less its use before the run,
# the CUDA context left out), which must stay under the budget; a run that does not fit
# must stop before training, naming settings that fit; so must a run without a budget that
# does not fit the GPU's free memory, and a budget over the card's size is refused. Prints one
# table last: planned,
# measured peak, tokens/s, J/step, and whether the row behaved as the plan said. The measured
# figures come from the summary record of each run's metrics.jsonl ($OUT/ROW/, -n 0: no
# checkpoint; scripts/study_lib.sh); the plan, the refusals and the memory in use after setup,
# which the record does not hold, from the run's console ($OUT/ROW.log).
#
# Run from the repository root on the GPU machine: scripts/gpu_memory_budget.sh
# Binaries from $BIN (default dist/gpu/bin, scripts/gpu_bundle.sh), shards from $DATA
# (default dist/gpu/data). Logs in $OUT (default out/gpu_memory_budget).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/gpu_memory_budget}
STEPS=${STEPS:-14}
mkdir -p "$OUT"
TR="-i $DATA/tiny_shakespeare_train_*.bin -j $DATA/tiny_shakespeare_train_*.bin -v $STEPS -m 1 -s 0 -n 0 -l 1e-4"
# shellcheck source=scripts/study_lib.sh
. scripts/study_lib.sh
# name | flags (T=1024 throughout; -d is B*T: one micro-step, memory does not depend on it)
ROWS=(
    "d12_b64_r1_none|-e d12 -b 64 -r 1 --max-device-memory 139G"
    "d12_b64_r1_16G|-e d12 -b 64 -r 1 --max-device-memory 16G"
    "d12_b32_r1_16G|-e d12 -b 32 -r 1 --max-device-memory 16G"
    "d12_b4_r1_4G|-e d12 -b 4 -r 1 --max-device-memory 4G"
    "d12_b4_r0_4G|-e d12 -b 4 -r 0 --max-device-memory 4G"
    "d24_b2_r0_8G|-e d24 -b 2 -r 0 --max-device-memory 8G"
    "d24_b4_r2_8G|-e d24 -b 4 -r 2 --max-device-memory 8G"
    "d48_b16_r0_16G|-e d48 -b 16 -r 0 --max-device-memory 16G"
    "d48_b8_r1_40G|-e d48 -b 8 -r 1 --max-device-memory 40G"
    "d48_b8_r1_bf16_34G|-e d48 -b 8 -r 1 --optimizer-state bf16 --max-device-memory 34G"
    "d12_b64_r3_13G|-e d12 -b 64 -r 3 --max-device-memory 13G"
    "d48_b16_r3_bf16_24G|-e d48 -b 16 -r 3 --optimizer-state bf16 --max-device-memory 24G"
    "d48_b64_r0_nobudget|-e d48 -b 64 -r 0"
    "d12_b4_r1_200G|-e d12 -b 4 -r 1 --max-device-memory 200G"
)
printf '%-19s %8s %9s %9s %9s %10s %8s  %s\n' row budget planned peak 'in use' tokens/s J/step verdict > "$OUT/table.txt"
for row in "${ROWS[@]}"; do
    name=${row%%|*}
    flags=${row#*|}
    log="$OUT/$name.log"
    fresh_run_dir "$OUT/$name"
    # shellcheck disable=SC2086  # word lists
    timeout 300 "$BIN/train_gpt2cu" $flags -t 1024 -x "$STEPS" $TR -o "$OUT/$name" > "$log" 2>&1
    rc=$?
    budget=$(echo "$flags" | grep -oE 'max-device-memory [0-9.]+G' | awk '{print $2}')
    if grep -q "is more than" "$log"; then
        if [ $rc = 1 ] && ! grep -q '^step ' "$log"; then verdict="refused: a budget over the card's size"
        else verdict="FAIL: a budget over the card's size, but exit $rc or it trained"; fi
        printf '%-19s %8s %9s %9s %9s %10s %8s  %s\n' "$name" "$budget" - - - - - "$verdict" >> "$OUT/table.txt"
        continue
    fi
    if grep -q "this run needs" "$log"; then
        planned=$(grep -oE 'needs [0-9.]+ GiB' "$log" | awk '{print $2}')
        if [ $rc = 1 ] && ! grep -q '^step ' "$log" && grep -qE 'settings that fit|nothing fits' "$log"; then
            verdict="refused before training ($(grep -oE 'has [0-9.]+ GiB free' "$log" || echo 'plan over the budget'))"
        else verdict="FAIL: refused, but exit $rc or it trained"; fi
        printf '%-19s %8s %9s %9s %9s %10s %8s  %s\n' "$name" "$budget" "${planned}G" - - - - "$verdict" >> "$OUT/table.txt"
        continue
    fi
    # the trainer's verdict on its plan (OVER: the measured peak above the budget) and the plan
    line=$(grep 'measured peak' "$log")
    planned=$(echo "$line" | grep -oE 'planned [0-9]+' | awk '{print $2}')
    inuse=$(grep -oE 'in use after setup [0-9]+' "$log" | awk '{print $5}')
    IFS=$'\t' read -r _ tps _ jps peak _ <<< "$(run_summary "$OUT/$name")"
    if [ $rc = 0 ] && [ -n "$line" ] && ! echo "$line" | grep -q OVER; then verdict="trained, peak under the budget"
    else verdict="FAIL: exit $rc $(echo "$line" | grep -o 'OVER.*') $(grep -m1 error "$log" | cut -c1-80)"; fi
    printf '%-19s %8s %8sM %8sM %8sM %10s %8s  %s\n' "$name" "$budget" "${planned:--}" "${peak:--}" "${inuse:--}" \
        "${tps:--}" "${jps:--}" "$verdict" >> "$OUT/table.txt"
done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
cat "$OUT/table.txt"
! grep -q FAIL "$OUT/table.txt"
