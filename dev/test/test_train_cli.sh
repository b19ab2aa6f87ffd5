#!/usr/bin/env bash
# test_train_cli.sh: the CPU trainer's command line end to end: bad flags and files are
# refused with a message naming the flag or file; a short run trains (loss falls); a run
# resumed from a checkpoint repeats the uninterrupted run's losses bit for bit.
set -u
cd "$(dirname "$0")/../.."
./dev/data/tinyshakespeare.sh > /dev/null || { echo "data step failed"; exit 1; }
W=build/test_train_cli
rm -rf $W && mkdir -p $W
fails=0
passes=0
ok() { passes=$((passes + 1)); echo "ok   $1"; }
bad() { fails=$((fails + 1)); echo "FAIL $1"; }

SMALL="-e l2h2c32t32 -b 2 -t 16 -s 0 -g 4 -v 0"

# expect_error "description" "text the message must contain" args...
# Runs $TRAINER; the GPU trainer (if built) must refuse the same input before any GPU work.
expect_error() {
    local what=$1 needle=$2
    shift 2
    $TRAINER "$@" > $W/out.txt 2> $W/err.txt
    local st=$?
    if [ $st -eq 1 ] && grep -qF -- "$needle" $W/err.txt; then ok "$TRAINER: $what: $(head -c 150 $W/err.txt)"
    else bad "$TRAINER: $what (exit $st, stderr: $(cat $W/err.txt))"; fi
}
printf 'not a checkpoint' > $W/junk.bin
trainers=./train_gpt2
[ -x ./train_gpt2cu ] && trainers="$trainers ./train_gpt2cu"
for TRAINER in $trainers; do
    expect_error "negative batch size" "-b" $SMALL -b -1
    expect_error "T over max_seq_len" "exceeds" $SMALL -t 64
    expect_error "total batch not a multiple of B*T" "-d" $SMALL -d 100
    expect_error "missing training data" "no_such_dir" $SMALL -i 'no_such_dir/x_*.bin'
    expect_error "unknown descriptor/missing model" "d13" -e d13
    expect_error "unknown flag" "--bogus" --bogus 3
    expect_error "malformed number" "-x" $SMALL -x ten
    expect_error "unknown schedule" "-k" $SMALL -k sawtooth
    expect_error "resume without -o" "-y" $SMALL -y 1
    expect_error "corrupt checkpoint" "junk.bin" -e $W/junk.bin
done
if [ -x ./train_gpt2cu ]; then
    # the GPU trainer's own flags, and multi-rank settings (ranks from the environment, as a
    # scheduler would give them; refused before any GPU or network work)
    TRAINER=./train_gpt2cu
    expect_error "ZeRO stage out of range" "-z" $SMALL -z 3
    expect_error "unknown communication backend" "--comm" $SMALL --comm carrier-pigeon
    expect_error "deterministic flag out of range" "--deterministic" $SMALL --deterministic 2
    export WORLD_SIZE=2 RANK=0
    expect_error "environment launch without an NCCL id file" "GPT2_NCCL_ID_FILE" $SMALL -d 64
    expect_error "MPI backend without mpirun" "--comm mpi" $SMALL -d 64 --comm mpi
    export GPT2_NCCL_ID_FILE=$W/nccl_id
    expect_error "total batch not a multiple of B*T*ranks" "B*T*ranks" $SMALL -d 32
    export WORLD_SIZE=3
    expect_error "ZeRO slices that do not split over the ranks" "-z 1 with 3 ranks" $SMALL -d 96 -z 1
    export WORLD_SIZE=2 RANK=2
    expect_error "rank outside the world" "RANK=2" $SMALL
    unset WORLD_SIZE RANK GPT2_NCCL_ID_FILE
else
    echo "(train_gpt2cu not built: its command-line checks skipped)"
fi

# a short run: the loss must fall
./train_gpt2 $SMALL -x 15 -l 3e-3 > $W/short.txt 2>&1 || bad "short run exited non-zero"
first=$(grep -m1 '^step' $W/short.txt | awk -F'|' '{print $2}' | awk '{print $2}')
last=$(grep '^step' $W/short.txt | tail -1 | awk -F'|' '{print $2}' | awk '{print $2}')
if awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a - 0.5)}'; then ok "loss falls: $first -> $last"
else bad "loss did not fall: $first -> $last"; fi
grep -q '^sample: ' $W/short.txt && ok "prints a sample" || bad "no sample printed"

# resume: 10 steps straight vs 5 steps, checkpoint, resume to 10
ARGS="$SMALL -x 10 -n 5 -l 1e-3 --shuffle 1 -d 64"
./train_gpt2 $ARGS -o $W/full > $W/full.txt 2>&1 || bad "full run failed"
./train_gpt2 $ARGS -o $W/part > /dev/null 2>&1 || bad "partial run failed"
rm -f $W/part/model_00000010.bin $W/part/state_00000010.bin
./train_gpt2 $ARGS -o $W/part -y 1 > $W/resumed.txt 2>&1 || bad "resumed run failed"
grep -q 'resumed from .* at step 5' $W/resumed.txt && ok "resumed at step 5" || bad "did not resume at step 5"
losses() { grep '^step' "$1" | awk -F'|' '{print $1, $2, $3}' | tail -5; }
if [ -n "$(losses $W/full.txt)" ] && [ "$(losses $W/full.txt)" = "$(losses $W/resumed.txt)" ]; then ok "resumed losses and norms equal the uninterrupted run (steps 6-10)"
else bad "resume is not bit-exact:"; diff <(losses $W/full.txt) <(losses $W/resumed.txt); fi
if cmp -s $W/full/model_00000010.bin $W/part/model_00000010.bin; then ok "final checkpoints are identical"
else bad "final checkpoints differ"; fi

echo "$passes passed, $fails failed"
[ $fails -eq 0 ]
