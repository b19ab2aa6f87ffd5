#!/usr/bin/env bash
# scripts/study_fp8.sh: FP8 against bf16 on one binary (the bf16 build's --fp8; docs/fp8.md).
#   speed   bf16 against --fp8 1 (its defaults: the layers --fp8-layers auto chooses, delayed
#           scaling, the weights' FP8 copies kept or cast per matmul as --fp8-weights auto
#           decides) at T=1024: GPT-2 124M (d12) at B=64, also --fp8-layers all and
#           --fp8-scaling current, and PyTorch compiled in bf16 beside them; GPT-2 350M (d24)
#           at B=16 -r 1; GPT-2 1.5B (d48) at B=8 -r 1, also --fp8-weights kept. 20 steps
#           each, means over the steps after the 10th (a window of more than 1 s, which J/step
#           needs): tokens/s, MFU (bf16's peak as the denominator for both), J/step, device
#           memory at peak (train_gpt2cu's from the summary record of its run's metrics.jsonl,
#           scripts/study_lib.sh), the layers FP8 ran. Targets: --fp8 1 at least 1.03x bf16's
#           tokens/s at d12, 1.2x at d24, 1.3x at d48, peak memory at most bf16's + 2%.
#   curve   from one initial model (the same seed) and one data order, bf16 and every linear
#           layer in FP8 (--fp8-layers all) with delayed scaling (and at d12 current scaling):
#           d12 B=16 T=1024 for 1000 steps, d24 B=16 T=1024 for 300 steps, validation every
#           100 (d24: 50) steps. The final validation losses compared (FP8 within 1% of
#           bf16), the skipped updates counted (FP8 no more than bf16), the four curves drawn
#           in one picture ($OUT/fp8_loss.png, scripts/plot_metrics.py).
#   shapes  build/bench_fp8: every matmul of a d12 step in bf16 and in FP8, time, energy and
#           the floor at FP8's peak; each layer whole through the trainer's functions.
# Writes $OUT/rows.tsv and the runs' logs, prints one table last ($OUT/table.txt).
#
# Run from the repository root on the GPU machine: scripts/study_fp8.sh
# Binaries from $BIN (default dist/gpu/bin, scripts/gpu_bundle.sh), shards from $DATA
# (default dist/gpu/data). The curves train on CURVE_DATA's shards (NAME_train_*.bin, NAME_val_*.bin;
# default $DATA/tiny_shakespeare, which d12's 1000 steps see 50 times over: build a larger corpus
# with dev/data/python_source.sh and pass CURVE_DATA=data/pysrc/pysrc); CURVE_MODELS (default
# "d12 d24") which models' curves run.
# PARTS (default "speed curve shapes"); TORCH=0 leaves PyTorch out;
# TABLE_ONLY=1 prints the table of an existing $OUT/rows.tsv.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/study_fp8}
PARTS=${PARTS:-speed curve shapes}
TORCH=${TORCH:-1}
mkdir -p "$OUT"
ROWS="$OUT/rows.tsv"
export PYTHONUNBUFFERED=1
TRAIN="$DATA/tiny_shakespeare_train_*.bin"
CURVE_DATA=${CURVE_DATA:-$DATA/tiny_shakespeare}
CURVE_MODELS=${CURVE_MODELS:-d12 d24}
# shellcheck source=scripts/study_lib.sh
. scripts/study_lib.sh

# speed MODEL ROW B FLAGS...: 20 steps of one micro-step (console in $OUT/speed_MODEL_ROW.log,
# metrics in $OUT/speed_MODEL_ROW/), one line in rows.tsv
speed() {
    local model=$1 row=$2 b=$3
    shift 3
    local dir="$OUT/speed_${model}_$row"
    fresh_run_dir "$dir"
    # shellcheck disable=SC2086  # word lists
    timeout 300 "$BIN/train_gpt2cu" -e "$model" -i "$TRAIN" -j "$TRAIN" -b "$b" -t 1024 -d $((b * 1024)) -x 20 \
        -v 0 -s 0 -n 0 -l 1e-4 -o "$dir" "$@" > "$dir.log" 2>&1
    local rc=$? layers
    # what --fp8 1 ran in FP8 (auto's choice) and how it kept the weights, from the run's start line
    layers=$(sed -n 's/^fp8: \([a-z,]*\) in FP8.*weights \([a-z]*\).*/\1 (weights \2)/p' "$dir.log" | head -1)
    printf 'speed\t%s\t%s\t%s\t%s\n' "$model" "$row" "$(run_summary "$dir")" \
        "rc=$rc -b $b $*${layers:+; FP8: $layers}" >> "$ROWS"
    echo "speed $model $row: rc $rc, $(tail -1 "$ROWS" | cut -f4-5) (ms/step, tok/s)${layers:+, FP8: $layers}"
}

# curve MODEL ROW STEPS VAL_EVERY FLAGS...: a training run whose metrics.jsonl is kept
curve() {
    local model=$1 row=$2 steps=$3 every=$4
    shift 4
    local dir="$OUT/curve_${model}_$row"
    rm -rf "$dir"
    # shellcheck disable=SC2086
    timeout 400 "$BIN/train_gpt2cu" -e "$model" -i "${CURVE_DATA}_train_*.bin" -j "${CURVE_DATA}_val_*.bin" \
        -b 16 -t 1024 -d 16384 -x "$steps" -v "$every" -s 0 -n 0 -l 6e-4 -u 50 -o "$dir" "$@" > "$dir.log" 2>&1
    local rc=$?
    CURVE_DATA=$CURVE_DATA python3 - "$dir/metrics.jsonl" "$model" "$row" "rc=$rc $*" >> "$ROWS" << 'PYEOF'
import json, os, sys
path, model, row, cmd = sys.argv[1:]
val, skipped = "-", 0
try:
    for line in open(path):
        r = json.loads(line)
        if r.get("type") == "val" and r.get("val_loss") is not None:
            val = "%.4f" % r["val_loss"]
        if r.get("type") == "step":
            skipped += r.get("skipped") or 0
except OSError:
    pass
print("\t".join(["curve", model, row, val, str(skipped), "-", "-", "-", "-", cmd + " on " + os.environ["CURVE_DATA"]]))
PYEOF
    echo "curve $model $row: rc $rc, final val loss $(tail -1 "$ROWS" | cut -f4)"
}

torch_speed() {
    [ "$TORCH" = 1 ] || return 0
    local log="$OUT/speed_d12_torch.log"
    timeout 400 python3 dev/train_gpt2_torch.py --model d12 --seq-len 1024 --steps 20 --batch 64 --dtype bf16 \
        --attention flash --compile full --data "$TRAIN" > "$log" 2>&1
    local rc=$?
    python3 - "$log" "rc=$rc" >> "$ROWS" << 'PYEOF'
import json, sys
log, cmd = sys.argv[1:]
s = {}
for line in open(log, errors="replace"):
    if line.startswith("SUMMARY "):
        s = json.loads(line[8:])
g = lambda k: str(s.get(k, "-"))
print("\t".join(["speed", "d12", "pytorch_compiled_bf16", g("ms_per_step"), g("tokens_per_s"), g("mfu_pct"),
                 g("joules_per_step"), g("max_reserved_MiB"), "-", cmd]))
PYEOF
    echo "speed d12 pytorch: rc $rc, $(tail -1 "$ROWS" | cut -f4-5) (ms/step, tok/s)"
}

[ "${TABLE_ONLY:-0}" = 1 ] && PARTS=""  # the table and chart of an existing $OUT/rows.tsv
[ -n "$PARTS" ] && : > "$ROWS"
[ -n "$PARTS" ] && nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for part in $PARTS; do
    case $part in
    speed)
        speed d12 bf16 64
        speed d12 fp8 64 --fp8 1
        speed d12 fp8_all 64 --fp8 1 --fp8-layers all
        speed d12 fp8_current 64 --fp8 1 --fp8-scaling current
        torch_speed
        speed d24 bf16 16 -r 1
        speed d24 fp8 16 -r 1 --fp8 1
        speed d48 bf16 8 -r 1
        speed d48 fp8 8 -r 1 --fp8 1
        speed d48 fp8_kept 8 -r 1 --fp8 1 --fp8-weights kept
        ;;
    curve)
        if [[ " $CURVE_MODELS " == *" d12 "* ]]; then
            curve d12 bf16 1000 100
            curve d12 fp8 1000 100 --fp8 1 --fp8-layers all --fp8-scaling current
            curve d12 fp8_delayed 1000 100 --fp8 1 --fp8-layers all --fp8-scaling delayed
        fi
        if [[ " $CURVE_MODELS " == *" d24 "* ]]; then
            curve d24 bf16 300 50
            curve d24 fp8 300 50 --fp8 1 --fp8-layers all --fp8-scaling delayed
        fi
        ;;
    shapes)
        timeout 300 "$BIN/bench_fp8" > "$OUT/bench_fp8.log" 2>&1
        echo "bench_fp8: exit $? ($OUT/bench_fp8.log)"
        ;;
    *) echo "unknown part '$part' (speed curve shapes)"; exit 1 ;;
    esac
done

python3 - "$ROWS" << 'PYEOF' | tee "$OUT/table.txt"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
num = lambda v: float(v) if v not in ("-", "", "None") else None
by = {(r[0], r[1], r[2]): r for r in rows}
speed = [r for r in rows if r[0] == "speed"]
if speed:
    print("speed, T=1024, one micro-step per step, means over the steps after the 10th")
    print("%-5s %-16s %9s %9s %6s %8s %9s  %s" % ("model", "row", "ms/step", "tok/s", "MFU %", "J/step", "peak MiB",
                                                  "FP8 layers"))
    for r in speed:
        print("%-5s %-16s %9s %9s %6s %8s %9s  %s" % (tuple(r[1:8]) + (r[9].split("; FP8: ")[1] if "; FP8: " in r[9]
                                                                        else "-",)))
    def fig(model, row, col):
        r = by.get(("speed", model, row))
        return num(r[col]) if r else None
    verdict = lambda ok, have: "met" if ok else "missed" if have else "not measured"
    # the default --fp8 1 (auto layers, delayed scaling, weights kept or cast as auto decides)
    for model, b, target in (("d12", 64, 1.03), ("d24", 16, 1.2), ("d48", 8, 1.3)):
        a, base = fig(model, "fp8", 4), fig(model, "bf16", 4)
        x = a / base if a and base else None
        print("%s B=%d --fp8 1 against bf16: %s tokens/s (target %.2fx): %s" % (model, b, "%.3fx" % x if x else "-",
                                                                            target, verdict(x and x >= target, x)))
        a, base = fig(model, "fp8", 7), fig(model, "bf16", 7)
        x = a / base - 1 if a and base else None
        print("%s B=%d --fp8 1 peak memory against bf16: %s (target at most +2%%): %s"
              % (model, b, "%+.1f%%" % (100 * x) if x is not None else "-", verdict(x is not None and x <= 0.02,
                                                                                     x is not None)))
curve = [r for r in rows if r[0] == "curve"]
if curve:
    print()
    print("loss curves, B=16 T=1024, one initial model and data order, on %s" % curve[0][9].split(" on ")[-1])
    for model in ("d12", "d24"):
        for row in ("fp8", "fp8_delayed"):
            b, f = by.get(("curve", model, "bf16")), by.get(("curve", model, row))
            if not b or not f:
                continue
            vb, vf = num(b[3]), num(f[3])
            rel = (vf - vb) / vb if vb and vf else None
            ok = rel is not None and abs(rel) <= 0.01 and int(f[4]) <= int(b[4])
            print("%s: final val loss bf16 %s, %s %s (%s); skipped updates bf16 %s, %s %s: %s"
                  % (model, b[3], row, f[3], "%+.2f%%" % (100 * rel) if rel is not None else "-", b[4], row, f[4],
                     "within 1%, no more skips" if ok else "MISSED"))
PYEOF
if ls "$OUT"/curve_*/metrics.jsonl > /dev/null 2>&1; then
    dirs=""
    labels=""
    for m in d12 d24; do
        for p in bf16 fp8 fp8_delayed; do
            [ -f "$OUT/curve_${m}_$p/metrics.jsonl" ] || continue
            dirs="$dirs $OUT/curve_${m}_$p"
            labels="$labels${labels:+,}$m $p"
        done
    done
    # shellcheck disable=SC2086
    python3 scripts/plot_metrics.py $dirs -o "$OUT/fp8_loss.png" --labels "$labels" ||
        echo "chart: not drawn (see above)"
fi
