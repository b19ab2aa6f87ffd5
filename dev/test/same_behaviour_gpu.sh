#!/usr/bin/env bash
# same_behaviour_gpu.sh: does a new train_gpt2cu compute exactly what an old one did? Run it
# on the GPU host from the repository root, with two folders of binaries built from the two
# commits (scripts/gpu_bundle.sh's names: train_gpt2cu, train_gpt2cu_fp16, train_gpt2cu_fp32):
#
#   OLD=dist/old/bin NEW=dist/gpu/bin dev/test/same_behaviour_gpu.sh
#
# (on the build machine, at the old commit `DIST=dist/old scripts/gpu_bundle.sh`, at the new
# one `scripts/gpu_bundle.sh`; relative paths are from the repository root).
# For each mode below the old and the new binary train with the same flags into two run
# directories: GPT-2 124M from the same random start (-e d12 --seed 7), B=4 T=256, 20 steps on
# the Tiny Shakespeare shards, validation at 10 and 20, a checkpoint at 20. Then
# dev/compare_checkpoints.py compares step 20: model and state files byte for byte (less the
# slots that hold the log files' lengths), and metrics.jsonl's losses, norms, validation and
# HellaSwag records. A mode is identical, DIFFERENT (the first differing item is named),
# FAILED (a run exited non-zero or left no checkpoint) or skipped.
#   bf16 fp16 fp32    each build, default flags
#   r0 r1 r2 r3       -r 0..3 (bf16, as are the rest)
#   offload1 offload2 --offload 1, --offload 2
#   bf16-moments      --optimizer-state bf16
#   cuda-graph        --cuda-graph 1
#   fp8 fp8-delayed   --fp8 1 --fp8-layers all, --fp8-scaling current; the same, delayed
#   fp8-auto          --fp8 1 (the layers chosen by timing at start-up: the two binaries may
#                     choose differently, and the run's first lines say what each chose)
#   zero1 zero2 zero3 2 ranks sharing the GPU (mpirun, --comm mpi), -z 1 / -z 2 / -z 3, -d 4096
#                     (2 micro-steps a rank)
#   zero3-offload2    -z 3 --offload 2 on one rank (the model in host memory)
#   hellaswag         -h 1 --hellaswag-file $DATA/hellaswag_like.bin (skipped without it)
#   accum             -r 1 -d 2048 --deterministic 1 (2 micro-steps)
# Then the timing part: GPT-2 124M at B=64 T=1024 -r 0, 30 steps, old and new alternating for
# ROUNDS rounds; the mean "ms" of steps 11..30 of each run's metrics.jsonl, the ratio new/old
# and whether it is within 1%, J/step where both print it. Timing is reported, never judged.
# Ends with a table of the modes and "N identical, M different, K failed, J skipped"; exits 1
# when a mode differed or failed, 2 when it cannot start.
#   DATA=dist/gpu/data  the shards (and hellaswag_like.bin)
#   OUT=out/same_behaviour  every run's directory and console log, compare.txt per mode,
#                     summary.txt; a mode's checkpoints are deleted once found identical
#                     (a d12 run leaves 1.7 GB) unless KEEP=1
#   MODES="bf16 zero2"  a subset; QUICK=1: bf16 fp16 fp32 r3 offload2 zero2
#   TIMING=0          no timing part; ROUNDS=3 its rounds
#   RUN_TIMEOUT=600   seconds a run may take
#   MPIRUN="mpirun --oversubscribe --bind-to none -np"  the 2-rank launcher, given N first
# dev/test/same_behaviour_gpu.sh --self-test: the script against stand-in trainers (shell
# scripts that copy a fixture checkpoint) on any machine, no GPU needed.
set -u
cd "$(dirname "$0")/../.." || exit 2
ME=dev/test/same_behaviour_gpu.sh
ALL_MODES="bf16 fp16 fp32 r0 r1 r2 r3 offload1 offload2 bf16-moments cuda-graph fp8 fp8-delayed fp8-auto zero1 zero2 zero3 zero3-offload2 hellaswag accum"
QUICK_MODES="bf16 fp16 fp32 r3 offload2 zero2"
STEP=20

# ---------------------------------------------------------------------------------------
# --self-test: stand-in trainers write run directories from a small fixture checkpoint (the
# real layouts, tiny sizes), a stand-in launcher runs the ranks one after the other, and
# the script runs on them as it would on the GPU host; its verdicts, tables and exit
# statuses are checked.
self_test() {
    # shellcheck disable=SC1091  # testlib.sh (ok, bad, test_finish) is checked on its own
    . dev/test/testlib.sh
    local W
    W=$(mktemp -d)
    python3 - "$W/fixture" <<'EOF' || { echo "error: cannot write the fixture"; exit 1; }
import os, random, struct, sys
d = sys.argv[1]
os.makedirs(d)
rnd = random.Random(5)
L, C, maxT, V, Vp = 1, 8, 16, 20, 128
n = Vp * C + maxT * C + 2 * L * C + L * 3 * C * C + L * 3 * C + L * C * C + L * C + 2 * L * C + \
    L * 4 * C * C + L * 4 * C + L * C * 4 * C + L * C + 2 * C
h = [0] * 256
h[:8] = [20240326, 5, maxT, V, L, 1, C, Vp]
h[250], h[251] = 0x43524332, 12345
with open(os.path.join(d, "model.bin"), "wb") as f:
    f.write(struct.pack("<256i", *h) + bytes(rnd.getrandbits(8) for _ in range(2 * n)))
h = [0] * 256
h[:7] = [20241202, 3, 20, 1, 1, 0, 72]
h[8] = n
h[250], h[251] = 0x43524332, 54321
with open(os.path.join(d, "state.bin"), "wb") as f:
    f.write(struct.pack("<256i", *h) + bytes(rnd.getrandbits(8) for _ in range(4 * (3 * n + 256))))
EOF
    # the stand-in trainer: $1 is old or new, then train_gpt2cu's flags. Losses follow the
    # flags (the -o path left out), so that both sides of a mode agree; main.log's length
    # varies as a real one's does, and the state's length slots and CRC with it; the new side
    # ends metrics.jsonl with a summary record. With SELF_TEST_BREAK=1 the new side differs
    # in three modes and fails in one.
    cat > "$W/fake_trainer" <<'EOF'
#!/usr/bin/env bash
side=$1
shift
fixture=$(dirname "$0")/fixture
out="" steps=20 batch=4 ckpt=-1 hs=0 key=""
while [ $# -gt 0 ]; do
    case $1 in
    -o) out=$2; shift ;;
    -x) steps=$2; key="$key $1 $2"; shift ;;
    -b) batch=$2; key="$key $1 $2"; shift ;;
    -n) ckpt=$2; key="$key $1 $2"; shift ;;
    -h) hs=$2; key="$key $1 $2"; shift ;;
    *) key="$key $1" ;;
    esac
    shift
done
rank=${OMPI_COMM_WORLD_RANK:-0}
brk=0
[ "$side" = new ] && [ "${SELF_TEST_BREAK:-0}" = 1 ] && brk=1
if [ $brk = 1 ] && [[ "$key" == *"--fp8-scaling delayed"* ]]; then
    echo "step     1/$steps | loss 10.9"
    echo "error: stand-in failure" >&2
    exit 3
fi
mkdir -p "$out"
base=$(( $(printf '%s' "$key" | cksum | cut -d' ' -f1) % 1000 ))
tag=$(printf '%08d' "$steps")
# shellcheck disable=SC2059  # the format is the four bytes, escaped
poke() { printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($3 & 255)) $(($3 >> 8 & 255)) $(($3 >> 16 & 255)) \
    $(($3 >> 24 & 255)))" | dd of="$1" bs=4 seek="$2" conv=notrunc status=none; }
if [ "$rank" != 0 ]; then
    if [ "$ckpt" != 0 ] && ! { [ $brk = 1 ] && [[ "$key" == *"-z 2"* ]]; }; then
        cp "$fixture/state.bin" "$out/state_$tag.rank$rank.bin"
        poke "$out/state_$tag.rank$rank.bin" 5 "$rank"
    fi
    exit 0
fi
rm -f "$out/metrics.jsonl"
echo "{\"type\": \"run\", \"program\": \"train_gpt2cu\", \"git\": \"$side$RANDOM\"}" >> "$out/metrics.jsonl"
for ((s = 1; s <= steps; s++)); do
    loss=$(awk -v s=$s -v b=$base 'BEGIN { printf "%.6f", 11 - s / 10 - b / 10000 }')
    [ $brk = 1 ] && [[ "$key" == *"--cuda-graph 1"* ]] && [ $s = 7 ] && loss=1.234567
    if [ "$batch" = 64 ]; then  # the timing runs: warm-up steps slow, then old 200.5, new 201.5 on average
        [ "$side" = new ] && ms=$(( s <= 10 ? 900 : 201 + s % 2 ))
        [ "$side" = old ] && ms=$(( s <= 10 ? 900 : 200 + s % 2 ))
    else ms=$RANDOM; fi
    echo "{\"type\": \"step\", \"step\": $s, \"loss\": $loss, \"norm\": 1.5, \"lr\": 0.0003, \"ms\": $ms, \"tokens_per_s\": $RANDOM, \"mfu\": null, \"tokens\": $((s * 1024)), \"skipped\": 0, \"elapsed_s\": $RANDOM}" >> "$out/metrics.jsonl"
    echo "step $s/$steps | loss $loss | norm 1.5 | $ms ms" | tee -a "$out/main.log"
    if [ $((s % 10)) = 0 ]; then
        echo "{\"type\": \"val\", \"step\": $s, \"val_loss\": 9.$base}" >> "$out/metrics.jsonl"
        [ "$hs" = 1 ] && echo "{\"type\": \"hellaswag\", \"step\": $s, \"accuracy\": 0.25, \"correct\": 500, \"examples\": 2000}" >> "$out/metrics.jsonl"
    fi
done
if [ "$ckpt" != 0 ]; then
    cp "$fixture/model.bin" "$out/model_$tag.bin"
    cp "$fixture/state.bin" "$out/state_$tag.bin"
    poke "$out/state_$tag.bin" 14 "$(wc -c < "$out/main.log")"
    poke "$out/state_$tag.bin" 67 "$(wc -c < "$out/metrics.jsonl")"
    poke "$out/state_$tag.bin" 251 "$RANDOM"
    if [ $brk = 1 ] && [[ "$key" == *"-r 2"* ]]; then
        printf 'x' | dd of="$out/state_$tag.bin" bs=1 seek=2000 conv=notrunc status=none
    fi
fi
# a record of a type the comparison leaves out, from one side only
[ "$side" = new ] && echo "{\"type\": \"summary\", \"ms_per_step\": $RANDOM}" >> "$out/metrics.jsonl"
[ "$batch" = 64 ] && echo "energy over steps 11..$steps (NVML board counter): $([ "$side" = old ] && echo 150.0 || echo 151.5) J/step, 700 W mean"
exit 0
EOF
    # the launcher: "N program args...": the ranks one after the other, rank 0 last
    cat > "$W/fake_mpirun" <<'EOF'
#!/usr/bin/env bash
n=$1
shift
rc=0
for ((r = n - 1; r >= 0; r--)); do OMPI_COMM_WORLD_RANK=$r "$@" || rc=$?; done
exit $rc
EOF
    local side b
    for side in old new; do
        mkdir -p "$W/$side"
        for b in train_gpt2cu train_gpt2cu_fp16 train_gpt2cu_fp32; do
            printf '#!/bin/sh\nexec "%s/fake_trainer" %s "$@"\n' "$W" "$side" > "$W/$side/$b"
        done
    done
    mkdir -p "$W/data"
    : > "$W/data/tiny_shakespeare_train_000000.bin"
    : > "$W/data/tiny_shakespeare_val_000000.bin"
    chmod +x "$W/fake_trainer" "$W/fake_mpirun" "$W"/old/* "$W"/new/*
    local out rc o base
    indent() { sed 's/^/      /'; }
    # has TEXT...: each line (a fixed string) is in $out
    has() {
        local t
        for t; do
            if ! grep -qF -- "$t" <<< "$out"; then
                bad "expected a line with '$t'; the output:"
                indent <<< "$out"
                return 1
            fi
        done
        return 0
    }
    base=(env OLD="$W/old" NEW="$W/new" DATA="$W/data" MPIRUN="$W/fake_mpirun" RUN_TIMEOUT=60)

    o=$W/out_all
    out=$("${base[@]}" OUT="$o" SELF_TEST_BREAK=1 ROUNDS=2 bash "$ME" 2>&1)
    rc=$?
    echo "$out" > "$W/all.txt"
    if [ $rc = 1 ] && [ "$(tail -1 <<< "$out")" = "15 identical, 3 different, 1 failed, 1 skipped" ]; then
        ok "every mode, the new side broken in 4 modes: exit 1, '$(tail -1 <<< "$out")'"
    else bad "every mode: exit $rc, last line '$(tail -1 <<< "$out")'"; indent <<< "$out"; fi
    has "r2 " "DIFFERENT: state_00000020.bin: first differing byte in AdamW m[" &&
        ok "a state byte changed: DIFFERENT, the state file and region named"
    has "DIFFERENT: metrics.jsonl step records: at step 7: loss" &&
        ok "a loss changed: DIFFERENT, metrics.jsonl's step 7 named"
    has "DIFFERENT: state_00000020.rank1.bin: in $o/zero2/old only" &&
        ok "a rank-1 shard missing: DIFFERENT, the shard named"
    has "FAILED to run: new exited 3: error: stand-in failure" && ok "a run that fails: FAILED, exit code and last line"
    has "skipped: no $W/data/hellaswag_like.bin" && ok "no HellaSwag file: skipped"
    if grep -qE '^bf16 +20 steps +[0-9.]+ +identical$' <<< "$out"; then ok "bf16: 20 steps, final loss, identical"
    else bad "no line 'bf16  20 steps  LOSS  identical'"; fi
    if [ "$(grep -cE '^[a-z0-9-]+ +\| [0-9.-]+ +\| [0-9.-]+ +\| (yes|NO|failed|skipped)' <<< "$out")" = 20 ]; then
        ok "the table: 20 rows"
    else bad "the table does not have 20 rows"; fi
    if grep -qE '^fp8-delayed +\| [0-9.]+ +\| - +\| failed' <<< "$out"; then ok "table row: fp8-delayed failed"
    else bad "no table row 'fp8-delayed | LOSS | - | failed'"; fi
    if grep -qE '^cuda-graph +\| ([0-9.]+) +\| ([0-9.]+) +\| NO' <<< "$out" &&
        grep -qE '^zero1 +\| [0-9.]+ +\| [0-9.]+ +\| yes' <<< "$out"; then ok "table rows: cuda-graph NO, zero1 yes"
    else bad "table rows for cuda-graph and zero1"; fi
    has "mean  | 200.50 | 201.50" "new/old 1.0050: within 1%" "J/step: old 150.0, new 151.5" &&
        ok "timing: means over steps 11..30 (warm-up left out), ratio, J/step"
    if [ -f "$o/r2/new/state_00000020.bin" ] && [ ! -e "$o/bf16/old/state_00000020.bin" ] &&
        [ -f "$o/bf16/old/metrics.jsonl" ] && [ -s "$o/bf16/new.log" ] && [ -s "$o/bf16/compare.txt" ] &&
        [ -s "$o/summary.txt" ]; then
        ok "checkpoints kept where different, deleted where identical; logs, compare.txt, summary.txt written"
    else bad "files under $o: $(cd "$o" && find . -type f | sort | head -20 | tr '\n' ' ')"; fi

    : > "$W/data/hellaswag_like.bin"
    out=$("${base[@]}" OUT="$W/out_quick" QUICK=1 TIMING=0 bash "$ME" 2>&1)
    rc=$?
    if [ $rc = 0 ] && [ "$(tail -1 <<< "$out")" = "6 identical, 0 different, 0 failed, 0 skipped" ] &&
        ! grep -q 'ms/step' <<< "$out"; then ok "QUICK=1 TIMING=0: exit 0, 6 identical, no timing"
    else bad "QUICK=1 TIMING=0: exit $rc:"; indent <<< "$out"; fi
    out=$("${base[@]}" OUT="$W/out_hs" MODES="hellaswag accum" TIMING=0 bash "$ME" 2>&1)
    rc=$?
    if [ $rc = 0 ] && [ "$(tail -1 <<< "$out")" = "2 identical, 0 different, 0 failed, 0 skipped" ] &&
        grep -q '"type": "hellaswag"' "$W/out_hs/hellaswag/old/metrics.jsonl" &&
        grep -q 'hellaswag records: identical: 2 records' "$W/out_hs/hellaswag/compare.txt"; then
        ok "MODES=\"hellaswag accum\" with the HellaSwag file: 2 identical, HellaSwag records compared"
    else bad "MODES=\"hellaswag accum\": exit $rc:"; indent <<< "$out"; fi
    out=$("${base[@]}" OUT="$W/out_bad" MODES="bf16 r9" bash "$ME" 2>&1)
    rc=$?
    if [ $rc = 2 ] && grep -q "unknown mode 'r9'" <<< "$out"; then ok "an unknown mode: exit 2, named"
    else bad "MODES=r9: exit $rc: $out"; fi
    out=$(env OLD="$W/none" NEW="$W/new" DATA="$W/data" OUT="$W/out_bad" bash "$ME" 2>&1)
    rc=$?
    if [ $rc = 2 ] && grep -q "$W/none" <<< "$out"; then ok "OLD not a folder: exit 2, named"
    else bad "OLD=none: exit $rc: $out"; fi
    rm -rf "$W"
    test_finish
}
[ "${1:-}" = --self-test ] && self_test
if [ $# -gt 0 ]; then
    echo "usage: OLD=DIR NEW=DIR [DATA=DIR] [OUT=DIR] [MODES=...|QUICK=1] [TIMING=0] $ME" >&2
    echo "       $ME --self-test" >&2
    exit 2
fi

# ---------------------------------------------------------------------------------------
OLD=${OLD:-}
NEW=${NEW:-}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/same_behaviour}
QUICK=${QUICK:-0}
TIMING=${TIMING:-1}
ROUNDS=${ROUNDS:-3}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
KEEP=${KEEP:-0}
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none -np}
read -r -a LAUNCHER <<< "$MPIRUN"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -n "${MODES:-}" ]; then :
elif [ "$QUICK" = 1 ]; then MODES=$QUICK_MODES
else MODES=$ALL_MODES; fi

die() { echo "error: $*" >&2; exit 2; }
for v in OLD NEW; do
    [ -n "${!v}" ] || die "$v is not set: OLD=DIR NEW=DIR $ME (folders holding train_gpt2cu, _fp16, _fp32)"
    [ -d "${!v}" ] || die "$v=${!v} is not a folder"
done
ls "$DATA"/tiny_shakespeare_train_*.bin "$DATA"/tiny_shakespeare_val_*.bin > /dev/null 2>&1 ||
    die "no Tiny Shakespeare shards in DATA=$DATA (scripts/gpu_bundle.sh puts them in dist/gpu/data)"
[[ "$ROUNDS" =~ ^[0-9]+$ ]] || die "ROUNDS=$ROUNDS is not a number"

# mode_setup MODE: what the mode runs: BUILD (the binary's suffix), RANKS, EXTRA (its flags
# after the common ones), SKIP (why it cannot run here, or empty); fails for an unknown mode
mode_setup() {
    BUILD="" RANKS=1 EXTRA=() SKIP=""
    case $1 in
    bf16) ;;
    fp16 | fp32) BUILD=_$1 ;;
    r0 | r1 | r2 | r3) EXTRA=(-r "${1#r}") ;;
    offload1 | offload2) EXTRA=(--offload "${1#offload}") ;;
    bf16-moments) EXTRA=(--optimizer-state bf16) ;;
    cuda-graph) EXTRA=(--cuda-graph 1) ;;
    fp8) EXTRA=(--fp8 1 --fp8-scaling current --fp8-layers all) ;;
    fp8-delayed) EXTRA=(--fp8 1 --fp8-scaling delayed --fp8-layers all) ;;
    fp8-auto) EXTRA=(--fp8 1) ;;
    zero3-offload2) EXTRA=(-z 3 --offload 2) ;;
    # 4096 tokens a step: 2 micro-steps of B*T on each of 2 ranks, so that ZeRO-2 also
    # reduces gradients between micro-steps of one step
    zero1 | zero2 | zero3)
        RANKS=2 EXTRA=(--comm mpi -z "${1#zero}" -d 4096)
        command -v "${LAUNCHER[0]}" > /dev/null || SKIP="no ${LAUNCHER[0]} for 2 ranks"
        ;;
    hellaswag)
        EXTRA=(-h 1 --hellaswag-file "$DATA/hellaswag_like.bin")
        [ -f "$DATA/hellaswag_like.bin" ] || SKIP="no $DATA/hellaswag_like.bin (scripts/gpu_bundle.sh makes it)"
        ;;
    accum) EXTRA=(-r 1 -d 2048 --deterministic 1) ;;
    *) return 1 ;;
    esac
}
for m in $MODES; do
    mode_setup "$m" || die "unknown mode '$m' (modes: $ALL_MODES)"
done

mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# the shard globs are the trainer's to expand: one -i however many shards there are
COMMON=(-i "$DATA/tiny_shakespeare_train_*.bin" -j "$DATA/tiny_shakespeare_val_*.bin" -e d12 -b 4 -t 256
        -x "$STEP" -v 10 -m 2 -s 0 -n "$STEP" --seed 7)

# train SIDE_LOG RUN_DIR RANKS BINARY FLAGS...: one run (under the launcher when RANKS > 1),
# its command line and console output in SIDE_LOG; returns its exit status (124: timed out)
train() {
    local log=$1 dir=$2 ranks=$3
    shift 3
    local cmd=("$@" -o "$dir")
    [ "$ranks" -gt 1 ] && cmd=("${LAUNCHER[@]}" "$ranks" "${cmd[@]}")
    # an earlier run's files would be compared as this one's, and its metrics.jsonl appended to
    rm -rf "$dir"
    echo "+ ${cmd[*]}" > "$log"
    timeout "$RUN_TIMEOUT" "${cmd[@]}" >> "$log" 2>&1
}
# steps_and_loss METRICS: "N LOSS": how many step records up to step $STEP, the last one's loss as written
steps_and_loss() {
    python3 - "$1" "$STEP" <<'EOF' 2> /dev/null || echo "0 -"
import json, sys
recs = []
for line in open(sys.argv[1]):
    r = json.loads(line, parse_float=str)
    if r.get("type") == "step" and r["step"] <= int(sys.argv[2]):
        recs.append(r)
print(len(recs), recs[-1]["loss"] if recs else "-")
EOF
}
# mean_ms METRICS FIRST LAST: the mean "ms" of the step records FIRST..LAST, empty unless all are there
mean_ms() {
    python3 - "$@" <<'EOF' 2> /dev/null
import json, sys
first, last = int(sys.argv[2]), int(sys.argv[3])
ms = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") == "step" and first <= r["step"] <= last and r.get("ms") is not None:
        ms[r["step"]] = r["ms"]
if len(ms) == last - first + 1:
    print("%.2f" % (sum(ms.values()) / len(ms)))
EOF
}
# why_failed SIDE LOG RC: the exit status and the last line of the console
why_failed() {
    local what="exited $3"
    [ "$3" = 124 ] && what="timed out after $RUN_TIMEOUT s"
    printf '%s %s: %s' "$1" "$what" "$(grep -v '^[[:space:]]*$' "$2" | tail -1 | cut -c1-200)"
}

note "same_behaviour_gpu.sh: OLD=$OLD NEW=$NEW DATA=$DATA OUT=$OUT"
if command -v nvidia-smi > /dev/null; then
    note "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
fi
for v in OLD NEW; do
    [ -f "${!v}/../BUILD_INFO" ] && note "$v: $(tr '\n' ' ' < "${!v}/../BUILD_INFO")"
done
[ "$(cd "$OLD" && pwd -P)" = "$(cd "$NEW" && pwd -P)" ] &&
    note "note: OLD and NEW are the same folder: this checks that each mode repeats itself"
note "common flags: ${COMMON[*]}"

names=() old_loss=() new_loss=() status=()
n_same=0 n_diff=0 n_fail=0 n_skip=0
for m in $MODES; do
    mode_setup "$m"
    names+=("$m")
    md=$OUT/$m
    rm -rf "$md"
    mkdir -p "$md"
    ol=- nl=- steps=-
    if [ -n "$SKIP" ]; then
        verdict="skipped: $SKIP"
        st=skipped
    else
        note "== $m: train_gpt2cu$BUILD${EXTRA[*]:+ ${EXTRA[*]}}$([ "$RANKS" -gt 1 ] && echo " ($RANKS ranks)")"
        rc_old=0 rc_new=0
        for side in old new; do
            dirvar=${side^^}
            bin=${!dirvar}/train_gpt2cu$BUILD
            if [ ! -x "$bin" ]; then
                echo "no executable $bin" > "$md/$side.log"
                printf -v "rc_$side" 127
                continue
            fi
            train "$md/$side.log" "$md/$side" "$RANKS" "$bin" "${COMMON[@]}" "${EXTRA[@]}"
            printf -v "rc_$side" '%d' $?
        done
        read -r steps ol <<< "$(steps_and_loss "$md/old/metrics.jsonl")"
        read -r _ nl <<< "$(steps_and_loss "$md/new/metrics.jsonl")"
        if [ "$rc_old" != 0 ] || [ "$rc_new" != 0 ]; then
            st=failed
            verdict="FAILED to run: "
            [ "$rc_old" != 0 ] && verdict+=$(why_failed old "$md/old.log" "$rc_old")
            [ "$rc_old" != 0 ] && [ "$rc_new" != 0 ] && verdict+="; "
            [ "$rc_new" != 0 ] && verdict+=$(why_failed new "$md/new.log" "$rc_new")
        else
            python3 dev/compare_checkpoints.py "$md/old" "$md/new" $STEP > "$md/compare.txt" 2>&1
            rc=$?
            last=$(tail -1 "$md/compare.txt")
            case $rc in
            0) st=identical verdict=identical ;;
            1) st=different verdict=$last ;;
            *) st=failed verdict="FAILED to compare: ${last#error: }" ;;
            esac
            if [ $st = identical ] && [ "$KEEP" != 1 ]; then
                rm -f "$md"/old/model_*.bin "$md"/old/state_*.bin "$md"/new/model_*.bin "$md"/new/state_*.bin
            fi
        fi
    fi
    case $st in
    identical) n_same=$((n_same + 1)) ;;
    different) n_diff=$((n_diff + 1)) ;;
    failed) n_fail=$((n_fail + 1)) ;;
    skipped) n_skip=$((n_skip + 1)) ;;
    esac
    status+=("$st") old_loss+=("$ol") new_loss+=("$nl")
    note "$(printf '%-13s %-9s %-10s %s' "$m" "$([ "$steps" = - ] && echo - || echo "$steps steps")" "$ol" "$verdict")"
done

if [ "$TIMING" = 1 ] && [ "$ROUNDS" -gt 0 ]; then
    note "== timing: GPT-2 124M B=64 T=1024 -r 0, 30 steps, mean ms/step over steps 11..30 of metrics.jsonl"
    # the validation shard is shorter than one B=64 T=1024 batch; -v 0 never evaluates, and
    # the train shard stands in for it
    TFLAGS=(-i "$DATA/tiny_shakespeare_train_*.bin" -j "$DATA/tiny_shakespeare_train_*.bin"
            -e d12 -b 64 -t 1024 -x 30 -r 0 -v 0 -s 0 -n 0)
    note "flags: ${TFLAGS[*]}"
    rm -rf "$OUT/timing"
    mkdir -p "$OUT/timing"
    rows=() sum_old=0 sum_new=0 n_old=0 n_new=0 j_old=() j_new=()
    for ((r = 1; r <= ROUNDS; r++)); do
        row="$r"
        for side in old new; do
            dirvar=${side^^}
            t=$OUT/timing/${side}_$r
            train "$t.log" "$t" 1 "${!dirvar}/train_gpt2cu" "${TFLAGS[@]}"
            rc=$?
            ms=$(mean_ms "$t/metrics.jsonl" 11 30)
            if [ $rc = 0 ] && [ -n "$ms" ]; then
                row+=" | $ms"
                if [ $side = old ]; then sum_old=$(awk -v a="$sum_old" -v b="$ms" 'BEGIN { print a + b }'); n_old=$((n_old + 1))
                else sum_new=$(awk -v a="$sum_new" -v b="$ms" 'BEGIN { print a + b }'); n_new=$((n_new + 1)); fi
            else
                row+=" | - ($(why_failed "$side" "$t.log" "$rc"))"
            fi
            j=$(grep -oE '[0-9.]+ J/step' "$t.log" | tail -1 | cut -d' ' -f1)
            if [ -n "$j" ]; then
                if [ $side = old ]; then j_old+=("$j"); else j_new+=("$j"); fi
            fi
        done
        rows+=("$row")
    done
    note "round | old ms/step | new ms/step"
    for row in "${rows[@]}"; do note "$row"; done
    if [ $n_old -gt 0 ] && [ $n_new -gt 0 ]; then
        mo=$(awk -v s="$sum_old" -v n=$n_old 'BEGIN { printf "%.2f", s / n }')
        mn=$(awk -v s="$sum_new" -v n=$n_new 'BEGIN { printf "%.2f", s / n }')
        note "mean  | $mo | $mn"
        note "$(awk -v o="$mo" -v n="$mn" 'BEGIN { r = n / o; d = r - 1
            printf "new/old %.4f: %s", r, (d <= 0.01 && d >= -0.01) ? "within 1%" : sprintf("NOT within 1%% (%+.2f%%)", 100 * d) }')"
    else
        note "mean: not enough timed runs (old $n_old, new $n_new of $ROUNDS)"
    fi
    if [ ${#j_old[@]} -gt 0 ] && [ ${#j_new[@]} -gt 0 ]; then
        ja=$(printf '%s\n' "${j_old[@]}" | awk '{ s += $1 } END { printf "%.1f", s / NR }')
        jb=$(printf '%s\n' "${j_new[@]}" | awk '{ s += $1 } END { printf "%.1f", s / NR }')
        note "$(awk -v a="$ja" -v b="$jb" 'BEGIN { printf "J/step: old %.1f, new %.1f (new/old %.4f)", a, b, b / a }')"
    else
        note "J/step: not printed by both (old ${#j_old[@]}, new ${#j_new[@]} of $ROUNDS runs)"
    fi
fi

note "logs in $OUT"
note ""
note "$(printf '%-13s | %-14s | %-14s | %s' mode "old final loss" "new final loss" "identical?")"
for i in "${!names[@]}"; do
    case ${status[$i]} in
    identical) yn=yes ;;
    different) yn=NO ;;
    *) yn=${status[$i]} ;;
    esac
    note "$(printf '%-13s | %-14s | %-14s | %s' "${names[$i]}" "${old_loss[$i]}" "${new_loss[$i]}" "$yn")"
done
note "$n_same identical, $n_diff different, $n_fail failed, $n_skip skipped"
[ $n_diff -eq 0 ] && [ $n_fail -eq 0 ]
