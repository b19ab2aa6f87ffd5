#!/usr/bin/env bash
# scripts/study_optimizer_state.sh: what --optimizer-state bf16 (AdamW's moments in bf16,
# stochastically rounded) costs against fp32 moments (docs/memory.md). GPT-2 124M (d12) at
# B=$B, T=1024 from one initial model (--seed) on one data order for $STEPS steps, once with
# each moment type, one after the other on the same GPU: the train and validation losses (metrics.jsonl), the
# speed, J/step and the device memory. Before that (STEP_ERRORS=0 skips it), test_gpt2cu's
# 10 AdamW steps against PyTorch with each moment type in each build, which sets the
# tests' tolerance. Prints one table last; the two runs' metrics.jsonl are in $OUT/fp32
# and $OUT/bf16 for scripts/plot_metrics.py.
#
# Run from the repository root on the GPU machine: scripts/study_optimizer_state.sh
# Binaries from $BIN (default dist/gpu/bin), shards from $DATA (default dist/gpu/data).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/study_optimizer_state}
STEPS=${STEPS:-500}
B=${B:-16}
rm -rf "$OUT/fp32" "$OUT/bf16"
mkdir -p "$OUT"
# 1. test_gpt2cu's 10 AdamW steps against PyTorch (fp32 moments) with each moment type, in
# each build: the largest error of a step's loss, beside the test's tolerance
if [ "${STEP_ERRORS:-1}" = 1 ]; then
    python3 dev/gpt2_ref.py --layers 2 --heads 4 --channels 128 --max-seq-len 64 --batch 4 --seq-len 32 \
        --out-dir "$OUT/ref_small" --device cuda > "$OUT/ref.log" 2>&1
    python3 dev/gpt2_ref.py --model d12 --batch 4 --seq-len 64 --out-dir "$OUT/ref_d12" --device cuda >> "$OUT/ref.log" 2>&1
    for shape in small d12; do
        for build in bf16 fp32 fp16; do
            exe=$BIN/test_gpt2cu
            [ $build != bf16 ] && exe=${exe}_$build
            for st in fp32 bf16; do
                "$exe" --ref-dir "$OUT/ref_$shape" --optimizer-state $st > "$OUT/t_${build}_${shape}_$st.log" 2>&1
                rc=$?
                e=$(grep '^step' "$OUT/t_${build}_${shape}_$st.log" | sed 's/.*abs err \([^ ]*\).*/\1/' | sort -g | tail -1)
                tol=$(grep '^step' "$OUT/t_${build}_${shape}_$st.log" | grep -o 'tol [0-9e.+-]*' | tail -1)
                echo "test_gpt2cu $build $shape, $st moments: exit $rc, largest step-loss error ${e:--} ($tol)"
            done
        done
    done | tee "$OUT/step_errors.txt"
fi
# 2. the loss curves
for st in fp32 bf16; do
    # shellcheck disable=SC2086  # word lists
    timeout 400 "$BIN/train_gpt2cu" -e d12 -b "$B" -t 1024 -x "$STEPS" -l 6e-4 -u 50 -q 0.1 -c 0.1 -v 50 -m 8 \
        -s 0 -n 0 -i "$DATA/tiny_shakespeare_train_*.bin" -j "$DATA/tiny_shakespeare_val_*.bin" --seed 7 \
        --optimizer-state $st -o "$OUT/$st" > "$OUT/$st.log" 2>&1
    echo "$st: exit $?"
done
# the table: final val loss, the largest gap between the runs' validation losses, speed,
# energy, memory
python3 - "$OUT" "$STEPS" << 'PYEOF' | tee "$OUT/table.txt"
import json, re, sys
out, steps = sys.argv[1], int(sys.argv[2])
rows = {}
for st in ("fp32", "bf16"):
    val, train, summary = {}, {}, {}
    for line in open(f"{out}/{st}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("type") == "val":
            val[r["step"]] = r["val_loss"]
        elif r.get("type") == "step":
            train[r["step"]] = r["loss"]
        elif r.get("type") == "summary":  # the run's figures (docs/formats.md#metrics-file)
            summary = r
    log = open(f"{out}/{st}.log").read()
    moments = re.search(r"AdamW moments ([0-9]+) MiB", log)  # the start-of-run breakdown only
    rows[st] = (val, train, summary, moments)
common = sorted(set(rows["fp32"][0]) & set(rows["bf16"][0]))
gap = max(abs(rows["fp32"][0][s] - rows["bf16"][0][s]) for s in common)
last = 50
tail = {st: sum(rows[st][1][s] for s in range(steps - last + 1, steps + 1)) / last for st in rows}
print(f"d12 B=16 T=1024, {steps} steps, same init and data; val every 50 steps (8 batches)")
print(f"{'moments':8} {'final val':>10} {'train, last {0}'.format(last):>15} {'ms/step':>8} {'tokens/s':>9} "
      f"{'J/step':>7} {'moments MiB':>11} {'peak MiB':>9}")
for st in ("fp32", "bf16"):
    val, train, summary, moments = rows[st]
    def fig(name, fmt):
        v = summary.get(name)
        return "-" if v is None else format(v, fmt)
    print(f"{st:8} {val[max(val)]:10.4f} {tail[st]:15.4f} {fig('ms_per_step', '.1f'):>8} "
          f"{fig('tokens_per_s', '.0f'):>9} {fig('joules_per_step', '.1f'):>7} "
          f"{moments.group(1) if moments else '-':>11} {fig('device_peak_mib', '.0f'):>9}")
f, b = rows["fp32"][0][max(common)], rows["bf16"][0][max(common)]
print(f"final val loss: bf16 - fp32 = {b - f:+.4f} ({100 * (b - f) / f:+.2f}%); largest gap over the "
      f"{len(common)} evaluations {gap:.4f}")
PYEOF
