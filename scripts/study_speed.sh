#!/usr/bin/env bash
# scripts/study_speed.sh: the speed study (docs/performance.md). GPT-2 124M (d12), T=1024, one
# GPU, one technique added per row, each a measured run, with PyTorch's equivalent beside it:
#    row               train_gpt2cu                                  PyTorch (dev/train_gpt2_torch.py)
#    baseline          fp32 build, true fp32 matmuls, plain          eager fp32, math attention,
#                      attention, separate GELU, B=8, no loader      B=8, reads in the loop
#                      thread, no prefetch, no graph
#    larger batch      B=32                                          B=32
#    loader thread     --loader-threads 1                            DataLoader workers
#    async transfer    --prefetch 1                                  pinned, non-blocking copies
#    CUDA graph        --cuda-graph 1                                torch.compile reduce-overhead
#    bf16              the bf16 build                                autocast bf16
#    fp16              the fp16 build (loss scaling)                 autocast fp16, GradScaler
#    fused kernels     flash attention, GELU in the matmul epilogue  SDPA flash attention
#    full default      the bf16 build's defaults at B=32             torch.compile, bf16, flash
# Then the targets of --cuda-graph 1 (d12 at B=4 T=256 and at B=64 T=1024, eager against
# graph) and of the loader thread (reads throttled to 20 ms a batch by a test hook: the
# per-step stall without and with the thread).
# Each run: 14 steps of one micro-step, more where 14 would time less than the 1 s that
# J/step needs (20 for the fp32 baseline at B=8, 30 for rows 6-9 and at B=64, 400 at B=4
# T=256, 40 for the loader rows); means over the steps after the 10th (ms/step, tokens/s,
# MFU, J/step), the device memory at peak, the time a step waited for its batch, from the
# summary record of each train_gpt2cu run's metrics.jsonl (scripts/study_lib.sh). Prints one
# table last ($OUT/table.txt) and draws $OUT/speed_study.png (scripts/plot_speed_study.py).
#
# Run from the repository root on the GPU machine: scripts/study_speed.sh
# Binaries from $BIN (default dist/gpu/bin, scripts/gpu_bundle.sh), shards from $DATA
# (default dist/gpu/data). TORCH=0 leaves PyTorch out; WARM=0 skips the compile warm-up.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/study_speed}
TORCH=${TORCH:-1}
STEPS=14
mkdir -p "$OUT"
ROWS="$OUT/rows.tsv"
[ "${TABLE_ONLY:-0}" = 1 ] || : > "$ROWS"
export PYTHONUNBUFFERED=1
SHARDS="$DATA/tiny_shakespeare_train_*.bin"
TR="-i $SHARDS -j $SHARDS -v 0 -s 0 -n 0 -l 1e-4 -x $STEPS"

# shellcheck source=scripts/study_lib.sh
. scripts/study_lib.sh

# ours ROW BUILD_SUFFIX B T FLAGS...: one train_gpt2cu run (console in $OUT/ours_ROW.log, metrics in
# $OUT/ours_ROW/), one line in rows.tsv
ours() {
    local row=$1 sfx=$2 b=$3 t=$4
    shift 4
    local dir="$OUT/ours_$row"
    fresh_run_dir "$dir"
    # shellcheck disable=SC2086  # word lists
    timeout 300 "$BIN/train_gpt2cu$sfx" -e d12 $TR -o "$dir" -b "$b" -t "$t" -d $((b * t)) "$@" > "$dir.log" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\t%s\n' ours "$row" "$(run_summary "$dir")" "rc=$rc $sfx -b $b -t $t $*" >> "$ROWS"
    echo "ours $row: rc $rc, $(tail -1 "$ROWS" | cut -f3-4)"
}

# torch ROW ARGS...: one dev/train_gpt2_torch.py run
torch_row() {
    local row=$1
    shift
    [ "$TORCH" = 1 ] || return 0
    local log="$OUT/torch_$row.log"
    # shellcheck disable=SC2086
    timeout 400 python3 dev/train_gpt2_torch.py --model d12 --seq-len 1024 --steps $STEPS --data "$SHARDS" "$@" \
        > "$log" 2>&1
    local rc=$?
    python3 - "$log" "$row" "rc=$rc $*" >> "$ROWS" << 'PYEOF'
import json, sys
log, row, cmd = sys.argv[1:]
s = {}
for line in open(log, errors="replace"):
    if line.startswith("SUMMARY "):
        s = json.loads(line[8:])
g = lambda k: str(s.get(k, "-"))
print("\t".join(["pytorch", row, g("ms_per_step"), g("tokens_per_s"), g("mfu_pct"), g("joules_per_step"),
                 g("max_reserved_MiB"), "-", cmd]))
PYEOF
    echo "torch $row: rc $rc, $(tail -1 "$ROWS" | cut -f3-4)"
}

# PyTorch's compiled settings (the rows add the loader options, which the compiled graphs do not see)
C5="--batch 32 --dtype fp32 --attention math --compile reduce-overhead"
C6="--batch 32 --dtype bf16 --attention math --compile reduce-overhead"
C7="--batch 32 --dtype fp16 --attention math --compile reduce-overhead"
C8="--batch 32 --dtype bf16 --attention flash --compile reduce-overhead"
C9="--batch 32 --dtype bf16 --attention flash --compile full"
CG="--batch 64 --dtype bf16 --attention flash --compile full"
# torch.compile's first run of a setting compiles for a minute or more: each compiled setting
# runs 2 steps first, three at a time, filling the on-disk caches, so that its timed row starts
# from them and the whole study fits in 10 minutes. WARM=0 leaves this out.
warm_torch() {
    [ "$TORCH" = 1 ] && [ "${WARM:-1}" = 1 ] || return 0
    local i=0 c
    for c in "$C5" "$C6" "$C7" "$C8" "$C9" "$CG"; do
        # shellcheck disable=SC2086
        timeout 300 python3 dev/train_gpt2_torch.py --model d12 --seq-len 1024 --steps 2 --warmup-steps 1 \
            --data "$SHARDS" $c > "$OUT/warm_$i.log" 2>&1 &
        i=$((i + 1))
        [ $((i % 3)) = 0 ] && wait
    done
    wait
    echo "PyTorch's compile caches warmed at ${SECONDS} s"
}

if [ "${TABLE_ONLY:-0}" != 1 ]; then  # else: the table and chart of an existing $OUT/rows.tsv
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader > "$OUT/gpu.txt" 2>&1
warm_torch
BASE="-f 0 --flash-attention 0 -ge 0 --loader-threads 0 --prefetch 0 --cuda-graph 0"
# (20 steps at B=8: the 10 timed steps last more than the energy counter's 1 s)
ours 1_baseline _fp32 8 1024 $BASE -x 20
torch_row 1_baseline --batch 8 --dtype fp32 --attention math --compile none --loader-workers 0 --pin-memory 0 \
    --steps 20
ours 2_larger_batch _fp32 32 1024 $BASE
torch_row 2_larger_batch --batch 32 --dtype fp32 --attention math --compile none --loader-workers 0 --pin-memory 0
L="-f 0 --flash-attention 0 -ge 0 --loader-threads 1"
ours 3_loader_thread _fp32 32 1024 $L --prefetch 0 --cuda-graph 0
torch_row 3_loader_thread --batch 32 --dtype fp32 --attention math --compile none --loader-workers 2 --pin-memory 0
ours 4_async_transfer _fp32 32 1024 $L --prefetch 1 --cuda-graph 0
torch_row 4_async_transfer --batch 32 --dtype fp32 --attention math --compile none --loader-workers 2 --pin-memory 1
ours 5_cuda_graph _fp32 32 1024 $L --prefetch 1 --cuda-graph 1
torch_row 5_cuda_graph $C5 --loader-workers 2 --pin-memory 1
# from here a step takes under 150 ms: 30 steps, so that the energy counter's window (the
# 20 steps after the 10th) lasts more than 1 s
G="--flash-attention 0 -ge 0 --loader-threads 1 --prefetch 1 --cuda-graph 1"
ours 6_bf16 "" 32 1024 $G -x 30
torch_row 6_bf16 $C6 --loader-workers 2 --pin-memory 1 --steps 30
ours 7_fp16 _fp16 32 1024 $G -x 30
torch_row 7_fp16 $C7 --loader-workers 2 --pin-memory 1 --steps 30
ours 8_fused_kernels "" 32 1024 --flash-attention 1 -ge 1 --loader-threads 1 --prefetch 1 --cuda-graph 1 -x 30
torch_row 8_fused_kernels $C8 --loader-workers 2 --pin-memory 1 --steps 30
ours 9_full_default "" 32 1024 -x 30
torch_row 9_full_default $C9 --steps 30
# --cuda-graph 1 where launches dominate, and where they do not (the default otherwise)
# (400 steps at B=4 T=256: the timed window lasts more than 1 s even at 3 ms a step)
ours g_b4_t256_eager "" 4 256 --cuda-graph 0 -x 400
ours g_b4_t256_graph "" 4 256 --cuda-graph 1 -x 400
ours g_b64_t1024_eager "" 64 1024 --cuda-graph 0 -x 30
ours g_b64_t1024_graph "" 64 1024 --cuda-graph 1 -x 30
torch_row g_b64_t1024_compiled $CG --steps 30
# the loader thread against reads throttled to 20 ms a batch (GPT2_TEST_READ_DELAY_MS), at
# B=16 (about 30 ms a step: longer than a read, so a thread reading ahead can hide it), 40
# steps (the first batch waits for its read either way)
GPT2_TEST_READ_DELAY_MS=20 ours stall_20ms_no_thread "" 16 1024 --loader-threads 0 -x 40
GPT2_TEST_READ_DELAY_MS=20 ours stall_20ms_thread "" 16 1024 --loader-threads 1 -x 40
fi

python3 - "$ROWS" << 'PYEOF' | tee "$OUT/table.txt"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
num = lambda v: float(v) if v not in ("-", "", "None") else None
by = {(r[0], r[1]): r for r in rows}
# One MFU for both programs: the trainer's figure is against the peak of the row's arithmetic
# (true fp32: 67 TFLOP/s; bf16 and fp16: 989), PyTorch's script divides by the bf16 peak
# always. A PyTorch row gets the trainer's MFU per token/s of the same row (same model, same
# arithmetic) times its own tokens/s.
same = {"g_b64_t1024_compiled": "g_b64_t1024_eager"}
for r in rows:
    o = by.get(("ours", same.get(r[1], r[1])))
    if r[0] == "pytorch" and o and num(o[3]) and num(o[4]) and num(r[3]):
        r[4] = "%.1f" % (num(o[4]) * num(r[3]) / num(o[3]))
# J/step over a timed window shorter than 1 s is the energy counter's granularity, not a
# figure (on an H200 at its 700 W limit, 4 steps of 112 ms read 800 W, 30 steps of 31 ms 743 W)
def steps(r):
    f = r[8].split()
    for flag in ("-x", "--steps"):
        if flag in f:
            return int(f[len(f) - 1 - f[::-1].index(flag) + 1])
    return 14
for r in rows:
    if num(r[2]) and num(r[2]) * (steps(r) - 10) < 1000:
        r[5] = "-"
print("GPT-2 124M (d12), one micro-step per step, means over the steps after the 10th")
print("MFU against the peak of the row's arithmetic (fp32 67, bf16/fp16 989 TFLOP/s), for both programs")
print("%-8s %-24s %9s %9s %6s %8s %9s %9s" % ("program", "row", "ms/step", "tok/s", "MFU %", "J/step", "peak MiB",
                                              "stall ms"))
for r in rows:
    print("%-8s %-24s %9s %9s %6s %8s %9s %9s" % tuple(r[:8]))
print("several GPUs, several nodes: not in this study (one GPU); scripts/bench_multigpu.sh on a machine with several")
def ratio(a, b):
    x, y = by.get(a), by.get(b)
    return num(x[3]) / num(y[3]) if x and y and num(x[3]) and num(y[3]) else None
# at B=64 no change is expected: the target is no loss beyond the noise between runs (2%)
for what, a, b, need in (("--cuda-graph 1 at B=4 T=256", ("ours", "g_b4_t256_graph"), ("ours", "g_b4_t256_eager"), 1.3),
                         ("--cuda-graph 1 at B=64 T=1024", ("ours", "g_b64_t1024_graph"),
                          ("ours", "g_b64_t1024_eager"), 0.98),
                         ("the full default against PyTorch compiled at B=64", ("ours", "g_b64_t1024_eager"),
                          ("pytorch", "g_b64_t1024_compiled"), 1.2)):
    x = ratio(a, b)
    print("%s: %s (target %.2fx): %s" % (what, "%.2fx" % x if x else "-", need,
                                          "met" if x and x >= need else "missed" if x else "not measured"))
st = by.get(("ours", "stall_20ms_thread"))
if st:
    s = num(st[7])
    print("data stall with the loader thread, 20 ms reads: %s ms a step (target < 1 ms): %s"
          % (st[7], "met" if s is not None and s < 1 else "missed"))
PYEOF
python3 scripts/plot_speed_study.py "$ROWS" "$OUT/speed_study.png" || echo "chart: not drawn (see above)"
