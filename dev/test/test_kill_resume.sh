#!/usr/bin/env bash
# test_kill_resume.sh: training survives kill -9 at any moment. A small run is made once
# without interruption (the reference). Each trial then starts the same run with -y 1 in
# an empty directory, kills it with SIGKILL after a random delay (some within start-up,
# most during training, where every step writes a checkpoint, so many kills land inside a
# checkpoint write) and restarts it with -y 1 until a run finishes. A trial passes when
# its final model and state files are byte-identical to the reference's, its main.log
# holds exactly the reference's lines (step lines without their timing fields) and no
# *.tmp file is left.
#
#   TRAINER=./train_gpt2 EXTRA_FLAGS= TRIALS=10 KILL_SEED=N ./dev/test/test_kill_resume.sh
#   LAUNCH="mpirun --oversubscribe -np 2" TRAINER=.../train_gpt2cu EXTRA_FLAGS="--comm mpi" ...
#                                           (several ranks: every process of the launch is killed)
#
# It relies on three behaviours of -y 1: with no checkpoint in -o it starts fresh; a
# resume cuts main.log back to its checkpoint; a newest checkpoint that is incomplete or
# corrupt is skipped for the newest intact one.
set -u
cd "$(dirname "$0")/../.." || exit 1
TRAINER=${TRAINER:-./train_gpt2}
LAUNCH=${LAUNCH:-}
EXTRA_FLAGS=${EXTRA_FLAGS:-}
TRIALS=${TRIALS:-10}
MAX_RESTARTS=${MAX_RESTARTS:-30}
KILL_SEED=${KILL_SEED:-$$}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
STEPS=20
LAST=$(printf '%08d' $STEPS)
# checkpoint every step; evaluation and a sample every 10 steps, so that the log holds
# every kind of line a resume must reproduce
ARGS="-e l2h2c32t16 -b 2 -t 16 -x $STEPS -n 1 -v 10 -m 2 -s 10 -g 8 --shuffle 1"

[ -x "$TRAINER" ] || { echo "error: $TRAINER is not built (make train_gpt2)"; exit 1; }
./dev/data/tinyshakespeare.sh > /dev/null || { echo "error: the data step failed"; exit 1; }
mkdir -p build
# a directory of its own, so that two runs at once (two checkouts' tests) do not collide
W=$(mktemp -d build/test_kill_resume.XXXXXX)

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# run_until MS CMD...: CMD under setsid (an SID of its own), every process of which (a launcher's
# ranks too: they outlive a killed mpirun otherwise) gets SIGKILL after MS ms unless it has
# ended; returns 137 when the kill came (whatever status a launcher made of its ranks'
# deaths), CMD's exit status otherwise
run_until() {
    local ms=$1 fired=$W/kill_fired sidf=$W/kill_sid
    shift
    rm -f "$fired" "$sidf"
    # the SID from its leader itself: setsid forks (and $! is not the leader) when it leads
    # its process group, as under job control
    setsid -w bash -c 'echo $$ > "$0"; exec "$@"' "$sidf" "$@" &
    local pid=$!
    (sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"; touch "$fired"
     pkill -KILL -s "$(cat "$sidf" 2> /dev/null || echo $pid)") &
    local killer=$!
    wait $pid 2> /dev/null  # (the shell's notice of a killed job: not the run's output)
    local rc=$?
    kill $killer 2> /dev/null
    wait $killer 2> /dev/null
    pkill -KILL -s "$(cat "$sidf" 2> /dev/null || echo $pid)" 2> /dev/null  # ranks a killed launcher left
    [ -f "$fired" ] && return 137
    return $rc
}

# main.log without the timing fields: step lines keep step, loss, norm and lr
normalized_log() { awk -F'|' '/^step /{ print $1 "|" $2 "|" $3 "|" $4; next } { print }' "$1"; }

# The first line where two files differ, described; nothing when they are equal.
first_difference() {
    awk 'NR == FNR { ref[++n] = $0; next }
         { m++; if (m > n || ref[m] != $0) { printf "line %d: expected \"%s\", got \"%s\"", m,
                                                     m <= n ? ref[m] : "(end of file)", $0; bad = 1; exit } }
         END { if (!bad && m < n) printf "line %d: expected \"%s\", got the end of the file", m + 1, ref[m + 1] }' \
        "$1" "$2"
}

# The state records main.log's and metrics.jsonl's lengths at its step (header slots 14-15
# and 67-68), which differ from run to run with the width of the timing fields; those and
# the checksum over them (slot 251) are compared apart, through the log they point into.
same_state() {
    cmp -s -n 56 "$1" "$2" && cmp -s -i 64 -n 204 "$1" "$2" && cmp -s -i 276 -n 728 "$1" "$2" &&
        cmp -s -i 1008 "$1" "$2"
}
logged_at_checkpoint() {
    head -c "$(od -An -t d8 -j 56 -N 8 "$1/state_$LAST.bin" | tr -d ' ')" "$1/main.log" | normalized_log -
}

t0=$(now_ms)
$LAUNCH $TRAINER $ARGS $EXTRA_FLAGS -o $W/ref > $W/ref.out 2>&1 || {
    echo "error: the reference run failed:"; tail -5 $W/ref.out; exit 1; }
ref_ms=$(( $(now_ms) - t0 ))
normalized_log $W/ref/main.log > $W/ref.log
echo "reference run: $STEPS steps in $ref_ms ms (${LAUNCH:+$LAUNCH }$TRAINER $ARGS${EXTRA_FLAGS:+ $EXTRA_FLAGS});" \
    "KILL_SEED=$KILL_SEED"
RANDOM=$KILL_SEED

# A kill delay in ms: a quarter within the first half second (start-up: tokenizer, data
# checks, resume), the rest within three quarters of the reference run's length, so that
# most runs are killed even when the machine was busier during the reference. The window
# grows by a tenth with each kill of the trial ($1): on a machine that has become slower
# than during the reference, restarts still get through.
kill_delay_ms() {
    local window=$(( ref_ms * 3 / 4 * (10 + $1) / 10 + 1 ))
    if (( RANDOM % 4 == 0 )); then echo $(( 1 + RANDOM % 500 ))
    else echo $(( 1 + (RANDOM * 32768 + RANDOM) % window )); fi
}

. dev/test/testlib.sh
for ((trial = 1; trial <= TRIALS; trial++)); do
    d=$W/trial$trial
    mkdir -p $d
    kills=0
    in_write=0
    delays=""
    why=""
    while :; do
        ms=$(kill_delay_ms $kills)
        run_until "$ms" $LAUNCH $TRAINER $ARGS $EXTRA_FLAGS -o $d -y 1 >> $d.out 2>&1
        rc=$?
        [ $rc -eq 0 ] && break
        # 137: killed (also when the signal came as the run was ending on its own: the next
        # -y 1 finds out whether it had finished)
        if [ $rc -ne 137 ]; then
            why="a run exited with status $rc: $(grep -m1 '^error' $d.out)"
            break
        fi
        kills=$((kills + 1))
        delays="$delays $ms"
        ls $d/*.tmp > /dev/null 2>&1 && in_write=$((in_write + 1))
        if [ $kills -ge $MAX_RESTARTS ]; then
            why="no run finished in $MAX_RESTARTS restarts"
            break
        fi
    done
    if [ -z "$why" ]; then
        for f in model_$LAST.bin state_$LAST.bin; do
            [ -f $d/$f ] || { why="$f is missing"; break; }
        done
    fi
    if [ -z "$why" ] && ! cmp -s $W/ref/model_$LAST.bin $d/model_$LAST.bin; then
        why="model_$LAST.bin differs from the reference's: $(cmp $W/ref/model_$LAST.bin $d/model_$LAST.bin)"
    fi
    if [ -z "$why" ] && ! same_state $W/ref/state_$LAST.bin $d/state_$LAST.bin; then
        why="state_$LAST.bin differs from the reference's (header slots 14-15, 67-68 and 251 aside)"
    fi
    if [ -z "$why" ] && [ "$(logged_at_checkpoint $W/ref)" != "$(logged_at_checkpoint $d)" ]; then
        why="state_$LAST.bin's main.log length does not end the log where the reference's does"
    fi
    if [ -z "$why" ]; then
        normalized_log $d/main.log > $d.log
        diff=$(first_difference $W/ref.log $d.log)
        [ -n "$diff" ] && why="main.log differs from the reference's at $diff"
    fi
    if [ -z "$why" ]; then
        tmp=$(find $d -name '*.tmp' | tr '\n' ' ')
        [ -n "$tmp" ] && why="temporary files left: $tmp"
    fi
    what="trial $trial: $kills kills${delays:+ (after$delays ms; $in_write inside a checkpoint write)}"
    if [ -z "$why" ]; then
        ok "$what"
        rm -rf $d $d.out $d.log
    else
        bad "$what: $why"
        echo "    (the runs' output: $d.out; the run directory: $d, its older checkpoints removed)"
        # keep the newest few checkpoints to look at; the rest only take disk space
        ls $d | grep -E '^(model|state)_[0-9]{8}\.bin$' | sort -t_ -k2 | head -n -6 | sed "s|^|$d/|" | xargs -r rm -f
    fi
done

echo "total $(( ($(now_ms) - t0) / 1000 )) s"
if [ $TEST_FAILED -eq 0 ]; then rm -rf $W; else echo "(kept: $W)"; fi
test_finish
