#!/usr/bin/env bash
# shellcheck disable=SC2086  # $R, $D, $BIN and $MPIRUN are lists of words on purpose (whole file)
# test_multirank_gpu.sh: the data-parallel trainer on ONE GPU (run on the GPU machine):
# several ranks share the GPU through the MPI host-memory backend (--comm mpi). Checks
#   - the collectives themselves (test_comm, 1/2/4 ranks);
#   - an N-rank run (N = 2, 4) matches the 1-rank run with the same total batch (through
#     gradient accumulation) within bf16 tolerance, at ZeRO 0, 1, 2 and 3;
#   - ZeRO-1 and ZeRO-2 match ZeRO-0 within bf16 tolerance (the gradients are the same
#     rank-ordered sums, but the gradient norm is summed in another order: each rank's
#     chunks, then across ranks, so the clip factor differs in its last bits);
#   - ZeRO-3 repeats ZeRO-2 bit for bit (the same gradient sums into the same shards, the
#     same parameters, only gathered layer by layer); at one rank -z 3 repeats -z 0 and
#     -z 3 --offload 2 (the parameters in host memory) repeats --offload 2;
#   - a run repeats itself bit for bit; a 2-rank run resumed from its step-10 checkpoint
#     repeats the uninterrupted run (ZeRO 0, 1, 2, 3); the model files of a ZeRO-1 and a
#     ZeRO-3 run load in a single-GPU run and give the same validation loss.
# (kill -9 at random moments under ZeRO-3: scripts/gpu_check.sh's KILL_VARIANTS=bf16x2z3)
# Expects BIN (default dist/gpu/bin: train_gpt2cu, test_comm; scripts/gpu_bundle.sh builds them)
# and DATA (default dist/gpu/data: the Tiny Shakespeare shards).
# QUICK=1: only 2 ranks at ZeRO 1, 2 and 3 against 1 rank, ZeRO-3 against ZeRO-2, the ZeRO-0, 1
# and 3 resumes and the model file checks (about two minutes).
# Logs in $OUT (default out/multirank); ends with "N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/multirank}
mkdir -p "$OUT"
W=$(mktemp -d)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN="mpirun --oversubscribe --bind-to none -np"
. dev/test/testlib.sh

Q=${QUICK:-0}
for n in 1 2 4; do
    [ "$Q" = 1 ] && continue
    timeout 120 $MPIRUN $n $BIN/test_comm --backend mpi > "$W/comm$n.log" 2>&1
    rc=$?
    res=$(grep -E "passed, .* failed" "$W/comm$n.log" | tail -1)
    if [ $rc = 0 ]; then ok "test_comm --backend mpi, $n rank(s): $res"
    else bad "test_comm --backend mpi, $n rank(s): rc=$rc $res"; fi
done

D="-i $DATA/tiny_shakespeare_train_*.bin -j $DATA/tiny_shakespeare_val_*.bin"
# FLAGS: extra trainer options for every run (e.g. FLAGS="--offload 1")
R="$D -e l4h4c256t256 -t 256 -b 8 -d 8192 -l 1e-3 -u 2 -c 0.1 -m 2 -s 0 -g 0 ${FLAGS:-}"
# train NAME RANKS ARGS...: one run, its output in $W/NAME.log
train() {
    local name=$1 n=$2; shift 2
    if [ "$n" = 1 ]; then timeout 180 $BIN/train_gpt2cu "$@" > "$W/$name.log" 2>&1
    else timeout 180 $MPIRUN "$n" $BIN/train_gpt2cu --comm mpi "$@" > "$W/$name.log" 2>&1; fi
    local rc=$?
    [ $rc = 0 ] || bad "$name: exit $rc: $(grep -m1 -E 'error' "$W/$name.log")"
}
steps() { grep -E '^step' "$W/$1.log" | awk -F'|' '{print $1 $2 $3}'; }
losses() { grep -E '^step' "$W/$1.log" | awk -F'|' '{print $2}' | awk '{print $2}'; }
same() {  # same A B WHAT: step lines (loss, norm) identical
    if [ -n "$(steps "$1")" ] && [ "$(steps "$1")" = "$(steps "$2")" ]; then
        ok "$3: bit-exact ($(steps "$1" | wc -l) steps)"
    else bad "$3: not bit-exact"; diff <(steps "$1") <(steps "$2") | head -6; fi
}
close() {  # close A B TOL WHAT: per-step losses within TOL
    local d
    d=$(paste <(losses "$1") <(losses "$2") |
        awk 'BEGIN{m=-1} NF==2{x=$1-$2; if (x<0) x=-x; if (x>m) m=x} END{print m}')
    if [ -n "$d" ] && awk -v d="$d" -v t="$3" 'BEGIN{exit !(d >= 0 && d <= t)}'; then ok "$4: max |loss diff| $d <= $3"
    else bad "$4: max |loss diff| $d (tolerance $3)"; fi
}

train r1 1 $R -x 12 -v 4
# one rank: -z 3 gathers from a shard that is the whole model (on the device; with --offload 2
# in pinned host memory, copied in layer by layer); the arithmetic is -z 0's
train r1z3 1 $R -x 12 -v 4 -z 3
same r1 r1z3 "1 rank: -z 3 == -z 0"
train r1o2 1 $R -x 12 -v 4 --offload 2
train r1z3o2 1 $R -x 12 -v 4 -z 3 --offload 2
same r1o2 r1z3o2 "1 rank: -z 3 --offload 2 (parameters in host memory) == --offload 2"
train r1z3o2p1 1 $R -x 12 -v 4 -z 3 --offload 2 --prefetch-layers 1
same r1o2 r1z3o2p1 "1 rank: -z 3 --offload 2 --prefetch-layers 1 == --offload 2"
grep -m1 '^memory:' "$W/r1z3o2.log" | sed 's/^/     /'
if [ "$Q" = 1 ]; then
    for z in 1 2 3; do
        train r2z$z 2 $R -x 12 -v 4 -z $z
        close r1 r2z$z 2e-2 "2 ranks ZeRO-$z vs 1 rank (accumulation 4 vs 2)"
    done
    same r2z2 r2z3 "2 ranks: ZeRO-3 == ZeRO-2"
    train r2z3p1 2 $R -x 12 -v 4 -z 3 --prefetch-layers 1
    same r2z2 r2z3p1 "2 ranks: ZeRO-3 with one layer gathered ahead (two slots) == ZeRO-2"
else
for z in 0 1 2 3; do
    train r2z$z 2 $R -x 12 -v 4 -z $z
    train r4z$z 4 $R -x 12 -v 4 -z $z
done
same r2z2 r2z3 "2 ranks: ZeRO-3 == ZeRO-2 (the same sums, the parameters gathered layer by layer)"
same r4z2 r4z3 "4 ranks: ZeRO-3 == ZeRO-2"
train r4z3p1 4 $R -x 12 -v 4 -z 3 --prefetch-layers 1
same r4z2 r4z3p1 "4 ranks: ZeRO-3 with one layer gathered ahead (two slots) == ZeRO-2"
grep -m1 '^data parallel' "$W/r4z3.log" | sed 's/^/     /'
for z in 0 1 2 3; do
    close r1 r2z$z 2e-2 "2 ranks ZeRO-$z vs 1 rank (accumulation 4 vs 2)"
    close r1 r4z$z 2e-2 "4 ranks ZeRO-$z vs 1 rank (accumulation 4 vs 1)"
done
close r2z0 r2z1 2e-2 "2 ranks: ZeRO-1 vs ZeRO-0"
close r2z0 r2z2 2e-2 "2 ranks: ZeRO-2 vs ZeRO-0 (gradients summed per micro-step)"
close r4z0 r4z1 2e-2 "4 ranks: ZeRO-1 vs ZeRO-0"
same r4z1 r4z2 "4 ranks, one micro-step: ZeRO-2 == ZeRO-1 (the same sums, the same norm)"
grep -m1 '^data parallel' "$W/r4z2.log" | sed 's/^/     /'
train r2z1_again 2 $R -x 12 -v 4 -z 1
same r2z1 r2z1_again "2 ranks ZeRO-1, run twice: deterministic"
fi  # QUICK

# --deterministic 0 under ZeRO-2: the matmul tuning pass before step 1 sends its
# gradients like a micro-step; the first step must not see them
train r2z2nd 2 $R -x 12 -v 4 -z 2 --deterministic 0
close r1 r2z2nd 2e-2 "2 ranks ZeRO-2 --deterministic 0 vs 1 rank"

# resume under ZeRO: 20 straight (checkpoints at 10 and 20) vs resumed from step 10
ZS="0 1 2 3"; [ "$Q" = 1 ] && ZS="0 1 3"
for z in $ZS; do
    train full$z 2 $R -x 20 -v 10 -z $z -n 10 -o "$W/full$z"
    mkdir -p "$W/part$z"
    cp "$W/full$z"/*_00000010* "$W/part$z/"
    train part$z 2 $R -x 20 -v 10 -z $z -n 10 -o "$W/part$z" -y 1
    a=$(steps full$z | tail -10); b=$(steps part$z)
    if [ -n "$a" ] && [ "$a" = "$b" ]; then ok "2 ranks ZeRO-$z: resumed steps 11-20 repeat the uninterrupted run"
    else bad "2 ranks ZeRO-$z: resume not bit-exact"; diff <(echo "$a") <(echo "$b") | head -6; fi
done
ls "$W/full1" | tr '\n' ' ' | sed 's/^/     files: /'; echo

# the model files of the ZeRO-1 and ZeRO-3 runs, in one process: the same validation loss on the same tokens
for z in 1 3; do
    train load$z 1 $D -e "$W/full$z/model_00000020.bin" -t 256 -b 16 -d 4096 -x 1 -l 0 -m 2 -v 1 -s 0 -g 0
    va=$(grep '^val loss' "$W/full$z.log" | tail -1 | awk '{print $3}')
    vb=$(grep '^val loss' "$W/load$z.log" | tail -1 | awk '{print $3}')
    if [ -n "$va" ] && [ -n "$vb" ] && awk -v a="$va" -v b="$vb" 'BEGIN{d=a-b; if (d<0) d=-d; exit !(d < 1e-2)}'; then
        ok "ZeRO-$z model file loads in a 1-GPU run: val loss $vb vs the 2-rank run's $va"
    else bad "ZeRO-$z model file in a 1-GPU run: val loss '$vb' vs '$va'"; fi
done

# -z 3 and the work between steps: with several ranks sampling is off (rank 0 cannot gather
# alone), HellaSwag-style evaluation runs the same number of forwards on every rank; at one
# rank a sample goes through the training forward (no whole model for the KV cache)
train z3sample 2 $R -x 2 -v 2 -z 3 -s 2 -g 8
if grep -q 'sampling: off with -z 3' "$W/z3sample.log"; then ok "2 ranks -z 3: sampling off, said so"
else bad "2 ranks -z 3 with -s: no 'sampling: off' line"; fi
train z3sample1 1 $R -x 2 -v 2 -z 3 --offload 2 -s 2 -g 8
if [ "$(grep -c '^sample: ' "$W/z3sample1.log")" -ge 1 ]; then
    ok "1 rank -z 3 --offload 2 with -s: $(grep -c '^sample: ' "$W/z3sample1.log") sample(s) written"
else bad "1 rank -z 3 --offload 2 with -s: no sample line"; fi

for f in "$W"/*.log; do echo "######## $(basename "$f")"; cat "$f"; done > "$OUT/multirank_logs.txt"
test_finish
