#!/usr/bin/env bash
# test_run_dir.sh: what a run directory (-o) guarantees, end to end on the CPU trainer (and
# the GPU trainer's refusals, checked before any GPU work, where ./train_gpt2cu is built):
# one run at a time (a second run into a busy -o is refused naming the holder's pid; a lock
# left by a killed run blocks nothing); an earlier run's checkpoints and logs are neither cut
# nor mixed in silently (refused without -y 1 or --overwrite 1; --overwrite 1 removes them
# and says so; -y 1 over model files without a state keeps the logs, over an interrupted
# first checkpoint starts them over); a log write that fails (a full file system: the file
# size limit, with SIGXFSZ ignored) stops the run naming the file and the step -y 1 resumes
# from, with that checkpoint intact; a prompt longer than the context keeps its last tokens
# and -g beyond the context is capped, each said once at start; an -o too long for the path
# buffers is refused at start; a refused decimal is printed as given; -y 1 warns about a
# model whose state is missing.
set -u
cd "$(dirname "$0")/../.."
./dev/data/tinyshakespeare.sh > /dev/null || { echo "data step failed"; exit 1; }
W=build/test_run_dir
rm -rf $W && mkdir -p $W
. dev/test/testlib.sh
export OMP_NUM_THREADS=1  # the models here are tiny: threads only cost time
SMALL="-e l2h2c32t32 -b 2 -t 16 -s 0 -g 4 -v 0"
trainers=./train_gpt2
[ -x ./train_gpt2cu ] && trainers="$trainers ./train_gpt2cu"

# refused "description" "text the message must contain"... -- args...: exit 1 and stderr
# holding every text
refused() {
    local what=$1
    shift
    local needles=()
    while [ "$1" != -- ]; do needles+=("$1"); shift; done
    shift
    "$@" > $W/out.txt 2> $W/err.txt
    local st=$? n
    for n in "${needles[@]}"; do
        if ! grep -qF -- "$n" $W/err.txt; then
            bad "$what: stderr lacks '$n' (exit $st): $(head -c 400 $W/err.txt)"
            return
        fi
    done
    if [ $st -eq 1 ]; then ok "$what: $(head -c 200 $W/err.txt)"
    else bad "$what: exit $st, expected 1: $(head -c 300 $W/err.txt)"; fi
}
runs_in() { grep -c '"type": "run"' "$1/metrics.jsonl"; }
step_lines() { grep -c '^step ' "$1/main.log"; }

# --- one run at a time ------------------------------------------------------------
./train_gpt2 $SMALL -x 1000000 -n 0 -o $W/busy > $W/busy.txt 2>&1 &
busy=$!
trap 'kill -KILL $busy 2> /dev/null' EXIT  # never left running, whatever ends this script
for _ in $(seq 300); do [ -s $W/busy/metrics.jsonl ] && break; sleep 0.1; done
for T in $trainers; do
    refused "$T: a second run into a busy -o (-y 1)" "$W/busy" "pid $busy" -- $T $SMALL -x 2 -o $W/busy -y 1
    refused "$T: a second run into a busy -o (no -y)" "in use by another run" "pid $busy" -- $T $SMALL -x 2 -o $W/busy
done
if kill -0 $busy 2> /dev/null && [ "$(runs_in $W/busy)" = 1 ]; then
    ok "the refused runs wrote nothing into the busy run's metrics.jsonl"
else bad "the busy run: $(runs_in $W/busy) run records, or it stopped: $(tail -2 $W/busy.txt)"; fi
kill -KILL $busy
wait $busy 2> /dev/null
if [ -f $W/busy/.lock ] && ./train_gpt2 $SMALL -x 2 -o $W/busy -y 1 > $W/after_kill.txt 2>&1; then
    ok "the lock of a killed run blocks nothing (its lock file stays, a run with -y 1 goes ahead)"
else bad "after the holder was killed: $(tail -2 $W/after_kill.txt)"; fi

# --- an earlier run is neither cut nor mixed in silently ----------------------------
./train_gpt2 $SMALL -x 4 -n 2 -o $W/old > /dev/null 2>&1 || bad "the first run into $W/old failed"
before=$(cd $W/old && md5sum main.log metrics.jsonl model_* state_*)
for T in $trainers; do
    refused "$T: a new run into a run's -o" "$W/old" "-y 1" "--overwrite 1" "main.log" "model_00000002.bin" \
        -- $T $SMALL -x 4 -o $W/old
done
[ "$before" = "$(cd $W/old && md5sum main.log metrics.jsonl model_* state_*)" ] &&
    ok "the refused runs left the earlier run's logs and checkpoints as they were" ||
    bad "the refused runs changed $W/old"
./train_gpt2 $SMALL -x 3 -n 0 -o $W/old --overwrite 1 > $W/overwrite.txt 2>&1
if [ $? = 0 ] && grep -q "^--overwrite 1: removed 6 file(s) of an earlier run from $W/old: main.log" $W/overwrite.txt &&
   [ -z "$(ls $W/old | grep -E '^(model|state)_')" ] && [ "$(step_lines $W/old)" = 3 ] && [ "$(runs_in $W/old)" = 1 ]
then ok "--overwrite 1 removes the earlier checkpoints and logs, says so, and the logs hold the new run only"
else bad "--overwrite 1: $(head -2 $W/overwrite.txt); files: $(ls $W/old | tr '\n' ' ')"; fi
refused "logs alone are an earlier run too" "its logs" -- ./train_gpt2 $SMALL -x 2 -o $W/old
refused "--overwrite 1 with -y 1" "give one of them" -- ./train_gpt2 $SMALL -x 2 -o $W/old --overwrite 1 -y 1
refused "--overwrite 1 without -o" "--overwrite 1 needs -o" -- ./train_gpt2 $SMALL -x 2 --overwrite 1
# -y 1 over model files whose states are gone: nothing to resume, and a fresh start would
# overwrite them: refused, the models untouched
./train_gpt2 $SMALL -x 4 -n 2 -o $W/models > /dev/null 2>&1
rm $W/models/state_*
before=$(cd $W/models && md5sum model_* main.log)
refused "-y 1 over model files whose states were removed" "holds 2 model file(s) but no training state" \
    "--overwrite 1" -- ./train_gpt2 $SMALL -x 4 -n 2 -l 1e-3 -o $W/models -y 1
[ "$before" = "$(cd $W/models && md5sum model_* main.log)" ] && ok "the earlier run's models and log are unchanged" ||
    bad "-y 1 changed the models without states"
# -y 1 after a run stopped while writing its first checkpoint: the logs start over
./train_gpt2 $SMALL -x 2 -n 1 -o $W/cut > /dev/null 2>&1
rm $W/cut/state_* $W/cut/model_00000002.bin
head -c 1500 $W/cut/model_00000001.bin > $W/cut/state_00000001.bin.tmp
./train_gpt2 $SMALL -x 2 -n 0 -o $W/cut -y 1 > $W/cut.txt 2>&1
if [ $? = 0 ] && grep -q "the first, of step 1, was not finished" $W/cut.txt && [ "$(step_lines $W/cut)" = 2 ] &&
   [ "$(runs_in $W/cut)" = 1 ]; then
    ok "-y 1 after an interrupted first checkpoint starts fresh with fresh logs"
else bad "-y 1 after an interrupted first checkpoint: $(grep -- '-y 1' $W/cut.txt); $(step_lines $W/cut) step lines"; fi

# --- a log write that fails stops the run; the newest checkpoint stays ---------------
# a model of 1,000 tokens (checkpoint 37 KB, state 76 KB) under a 128 KiB file size limit:
# the checkpoints fit, metrics.jsonl outgrows it after some 500 steps
python3 - $W/small_vocab.bin << 'EOF'
import struct, sys, random
L, H, C, T, V, Vp = 1, 1, 8, 16, 1000, 1024
n = Vp*C + T*C + L*(2*C + 3*C*C + 3*C + C*C + C + 2*C + 4*C*C + 4*C + 4*C*C + C) + 2*C
h = [20240326, 3, T, V, L, H, C, Vp] + [0] * 248
random.seed(1)
w = [random.gauss(0, 0.02) for _ in range(n)]
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%df" % n, *w))
EOF
python3 -c 'import struct, sys
ids = [1, 2, 3, 4, 5] * 400
h = [20240520, 1, len(ids)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(ids), *ids))' $W/five_000.bin
FULL=(-e $W/small_vocab.bin -b 2 -t 8 -v 0 -i "$W/five_*.bin" -j "" -o $W/full)
(trap '' XFSZ; ulimit -f 128; ./train_gpt2 "${FULL[@]}" -x 3000 -n 100 > /dev/null 2> $W/full_err.txt)
st=$?
at=$(sed -n 's/.*the checkpoint of step \([0-9]*\) in .* is intact: -y 1 resumes from it.*/\1/p' $W/full_err.txt)
if [ $st = 1 ] && grep -q "cannot write $W/full/metrics.jsonl: File too large" $W/full_err.txt && [ -n "$at" ]; then
    ok "a full file system stops the run at the failed write: $(cat $W/full_err.txt)"
else bad "writing past the file size limit: exit $st: $(cat $W/full_err.txt)"; fi
./train_gpt2 "${FULL[@]}" -x $((at + 50)) -n 100 -y 1 > $W/full_resume.txt 2>&1
if [ -n "$at" ] && grep -q "resumed from $W/full at step $at" $W/full_resume.txt &&
   ! grep -q warning $W/full_resume.txt &&
   ${PYTHON:-python3} scripts/plot_metrics.py --validate $W/full > /dev/null 2>&1; then
    ok "-y 1 resumes from step $at, the checkpoint the message named, intact; metrics.jsonl is valid again"
else bad "resuming after the full file system: $(grep -E 'resumed|warning|error' $W/full_resume.txt | head -3)"; fi

# --- nothing of a run is lost: -nk, --overwrite 1, -y 1, a renamed -o, links, full disks --
flip_middle() {  # flips one byte in the middle of a file
    python3 -c 'import os, sys
p = sys.argv[1]; n = os.path.getsize(p)
with open(p, "r+b") as f:
    f.seek(n // 2); b = f.read(1); f.seek(n // 2); f.write(bytes([b[0] ^ 1]))' "$1"
}
# -nk 1 with the newest checkpoint corrupt: it is set aside, never counted; the intact ones stay
./train_gpt2 $SMALL -x 20 -n 10 -o $W/nk > /dev/null 2>&1
flip_middle $W/nk/state_00000020.bin
./train_gpt2 $SMALL -x 18 -n 5 -nk 1 -o $W/nk -y 1 > $W/nk1.txt 2>&1
st=$?
./train_gpt2 $SMALL -x 25 -o $W/nk -y 1 > $W/nk2.txt 2>&1
if [ $st = 0 ] && [ $? = 0 ] && grep -q "resumed from $W/nk at step 18" $W/nk2.txt &&
   [ -f $W/nk/state_00000020.bin.corrupt ] && [ -f $W/nk/state_00000025.bin ]; then
    ok "-nk 1 past a corrupt newer checkpoint keeps the intact ones; -y 1 resumes from step 18"
else bad "-nk 1 past a corrupt checkpoint: $(grep -E 'error|resumed' $W/nk1.txt $W/nk2.txt | head -3);" \
    "$(ls $W/nk | tr '\n' ' ')"; fi
# --overwrite 1 removes nothing before every start-up check has passed
./train_gpt2 $SMALL -x 2 -n 1 -o $W/ow > /dev/null 2>&1
before=$(cd $W/ow && md5sum main.log metrics.jsonl model_* state_*)
refused "--overwrite 1 with a -i that matches nothing" "nosuch" -- \
    ./train_gpt2 $SMALL -x 2 -o $W/ow --overwrite 1 -i 'data/nosuch_*.bin'
refused "--overwrite 1 with --trace-steps past -x" "--trace-steps" -- \
    ./train_gpt2 $SMALL -x 2 -o $W/ow --overwrite 1 --trace $W/t.json --trace-steps 5
refused "--overwrite 1 with -e naming a checkpoint in -o" "would remove" "the model -e names" -- \
    ./train_gpt2 $SMALL -e $W/ow/model_00000002.bin -x 2 -o $W/ow --overwrite 1
if [ -x ./train_gpt2cu ] && ! nvidia-smi > /dev/null 2>&1; then
    refused "./train_gpt2cu --overwrite 1 on a machine without a GPU" "CUDA" -- \
        ./train_gpt2cu $SMALL -x 2 -o $W/ow --overwrite 1
fi
[ "$before" = "$(cd $W/ow && md5sum main.log metrics.jsonl model_* state_*)" ] &&
    ok "the refused --overwrite 1 runs left the earlier run as it was" || bad "a refused --overwrite 1 changed $W/ow"
# --overwrite 1 removes the run's own files only: never a user's of a similar name
mkdir -p $W/mine/model_archive.bin $W/mine/state_old.bin
for f in model_best.bin "model_ finetuned.bin" state_of_the_art.bin model_1.bin model_00000002.bin.bak notes.txt \
         state_old.bin/inside.txt; do echo mine > "$W/mine/$f"; done
ln -s ../elsewhere $W/mine/model_link.bin
users=$(cd $W/mine && find . | sort && cat model_best.bin "model_ finetuned.bin" state_of_the_art.bin | md5sum)
./train_gpt2 $SMALL -x 2 -o $W/mine > $W/mine1.txt 2>&1 ||
    bad "a directory of user files is no earlier run: $(tail -1 $W/mine1.txt)"
run_files='^\./(model|state)_0000000[23]\.bin$|^\./(main\.log|metrics\.jsonl|\.lock)$'
./train_gpt2 $SMALL -x 3 -o $W/mine --overwrite 1 > $W/mine2.txt 2>&1
if [ $? = 0 ] && grep -q "removed 4 file(s)" $W/mine2.txt && [ -f $W/mine/state_00000003.bin ] &&
   [ "$users" = "$(cd $W/mine && find . | grep -vE "$run_files" | sort &&
                   cat model_best.bin "model_ finetuned.bin" state_of_the_art.bin | md5sum)" ]; then
    ok "--overwrite 1 removed the earlier run's 4 files and none of the user's 10 files, directories and links"
else bad "--overwrite 1 beside user files: $(head -c 300 $W/mine2.txt); $(ls $W/mine | tr '\n' ' ')"; fi
# a renamed live run keeps writing into its own directory, not into its successor
./train_gpt2 $SMALL -x 60 -n 20 -o $W/live > $W/live_old.txt 2>&1 &
live=$!
for _ in $(seq 300); do [ -s $W/live/metrics.jsonl ] && break; sleep 0.05; done
mv $W/live $W/live_old
./train_gpt2 $SMALL -x 12 -n 5 -o $W/live > $W/live_new.txt 2>&1
wait $live
if [ "$(ls $W/live | grep -c '^state_')" = 3 ] && [ -f $W/live/state_00000012.bin ] && [ "$(runs_in $W/live)" = 1 ] &&
   [ -f $W/live_old/state_00000060.bin ] && ! ls $W/live | grep -q 00000020; then
    ok "a renamed live run's checkpoints stay in its directory; the new run's -o holds its own only"
else bad "a renamed live run: $(ls $W/live | tr '\n' ' ') / $(ls $W/live_old | tr '\n' ' ')"; fi
# the lock file is never followed through a symbolic link
mkdir -p $W/lnk && echo mine > $W/precious.txt && ln -s ../precious.txt $W/lnk/.lock
refused "a .lock that is a symbolic link" ".lock is a symbolic link" -- ./train_gpt2 $SMALL -x 2 -o $W/lnk
[ "$(cat $W/precious.txt)" = mine ] && ok "the link's target is untouched" || bad "the .lock link's target was written"
# a checkpoint write that fails (the file size limit) leaves no temporary, names what is intact
(trap '' XFSZ; ulimit -f 2048; ./train_gpt2 $SMALL -x 4 -n 2 -o $W/fsz > /dev/null 2> $W/fsz_err.txt)
st=$?
if [ $st = 1 ] && grep -q "cannot write $W/fsz/model_00000002.bin.tmp" $W/fsz_err.txt &&
   grep -q "holds no checkpoint of this run yet" $W/fsz_err.txt && ! ls $W/fsz | grep -q tmp; then
    ok "a failed checkpoint write removes its temporary: $(tr '\n' ' ' < $W/fsz_err.txt)"
else bad "a failed checkpoint write: exit $st: $(cat $W/fsz_err.txt); $(ls $W/fsz | tr '\n' ' ')"; fi
# --trace and --memory-trace never name an input or a run's file; a finished run traces nothing
refused "--trace naming the run's metrics.jsonl" "a training run's file" -- \
    ./train_gpt2 $SMALL -x 2 -o $W/nk -y 1 --trace $W/nk/metrics.jsonl
refused "--memory-trace naming a -j shard" "a validation shard (-j)" -- \
    ./train_gpt2 $SMALL -x 2 --memory-trace data/tinyshakespeare/tiny_shakespeare_val_000000.bin
./train_gpt2 $SMALL -x 25 -o $W/nk -y 1 --trace $W/finished.json > $W/finished.txt 2>&1
[ $? = 0 ] && grep -q "no step left to train" $W/finished.txt && [ ! -e $W/finished.json ] &&
    ok "--trace on a finished run says so and writes nothing" ||
    bad "--trace on a finished run: $(tail -2 $W/finished.txt)"
# a bad token met under --check-data 0 stops the run naming the checkpoint it resumes from
python3 -c 'import struct, sys
for name, bad in (("a", False), ("b", True)):
    ids = [(i * 7919) % 50000 for i in range(400)]
    if bad: ids[300] = 60000
    h = [20240520, 1, len(ids)] + [0] * 253
    open(sys.argv[1] + name + ".bin", "wb").write(struct.pack("<256i", *h) + struct.pack("<%dH" % len(ids), *ids))' \
    $W/badtok_
./train_gpt2 $SMALL -x 20 -n 2 -i "$W/badtok_*.bin" -j "" --check-data 0 -o $W/badtok > /dev/null 2> $W/badtok.txt
st=$?
if [ $st = 1 ] && grep -q "badtok_b.bin" $W/badtok.txt &&
   grep -q "^note: the checkpoint of step [0-9]* in $W/badtok is intact: -y 1 resumes from it" $W/badtok.txt; then
    ok "a bad token under --check-data 0 names the checkpoint to resume from: $(tr '\n' ' ' < $W/badtok.txt)"
else bad "a bad token under --check-data 0: exit $st: $(cat $W/badtok.txt)"; fi
refused "an empty -o" "-o: an empty directory name" -- ./train_gpt2 $SMALL -x 2 -o ""
# a dangling symbolic link as -o
ln -s $W/nowhere $W/dangling
refused "a dangling symbolic link as -o" "symbolic link" -- ./train_gpt2 $SMALL -x 2 -o $W/dangling

# --- samples: a long prompt keeps its last tokens, -g is capped at the context ----------
PROMPT="BEGIN $(for i in $(seq 12); do printf 'the cat sat on the mat. '; done)THE END"
./train_gpt2 $SMALL -x 2 -s 1 --prompt "$PROMPT" > $W/prompt.txt 2>&1
if [ "$(grep -c 'too long for the samples.*last 11 tokens' $W/prompt.txt)" = 1 ] &&
   [ "$(grep -c '^sample: ' $W/prompt.txt)" = 2 ] && [ "$(grep '^sample: ' $W/prompt.txt | grep -c 'THE END')" = 2 ] &&
   ! grep '^sample: ' $W/prompt.txt | grep -q BEGIN; then
    ok "a prompt over the context: said once, each sample starts from its last 11 tokens"
else bad "a prompt over the context: $(grep -E '^sampling|^sample' $W/prompt.txt | head -3)"; fi
./train_gpt2 $SMALL -x 1 -s 1 -g 1000000 > $W/cap.txt 2>&1
if grep -q "^sampling: -g 1000000 is more than the context (-t 16) leaves .*: samples generate 15 tokens" $W/cap.txt &&
   [ "$(grep -c '^sampling' $W/cap.txt)" = 1 ]; then ok "-g 1000000 is capped at the context, said once"
else bad "-g 1000000: $(grep -E '^sampling' $W/cap.txt | head -3)"; fi

# --- an -o too long for the path buffers is refused at start ------------------------------
long_dir() {  # a relative path of exactly $1 characters, in parts of at most 200
    python3 -c 'import sys
n, p = int(sys.argv[1]), sys.argv[2]
while len(p) < n:
    p += "/" + "d" * min(200, n - len(p) - 1)
print(p)' "$1" "$W/long"
}
for T in $trainers; do
    refused "$T: a 4,085-character -o" "-o: the directory name is 4085 characters" -- \
        $T $SMALL -x 1 -o "$(long_dir 4085)"
done
[ ! -d "$(long_dir 4085)" ] && ! grep -q '^step' $W/out.txt && ok "the refused -o was not created, nothing trained" ||
    bad "the refused -o: created, or it trained"
d=$(long_dir 4000)
./train_gpt2 $SMALL -x 1 -o "$d" > $W/long.txt 2>&1
[ $? = 0 ] && [ -s "$d/metrics.jsonl" ] && [ -f "$d/state_00000001.bin" ] && ok "a 4,000-character -o runs" ||
    bad "a 4,000-character -o: $(tail -2 $W/long.txt)"

# --- a refused decimal as given; -y 1 names a model whose state is missing -------------
for T in $trainers; do
    refused "$T: --top-p 1.0000001" "--top-p must be in (0, 1], got 1.0000001" -- $T $SMALL --top-p 1.0000001
done
./train_gpt2 $SMALL -x 4 -n 2 -o $W/orphan > /dev/null 2>&1
rm $W/orphan/state_00000004.bin
./train_gpt2 $SMALL -x 4 -n 2 -o $W/orphan -y 1 > $W/orphan.txt 2>&1
if grep -q "warning: -y 1: skipping the checkpoint of step 4: $W/orphan/state_00000004.bin is missing" $W/orphan.txt &&
   grep -q "resumed from $W/orphan at step 2" $W/orphan.txt; then
    ok "-y 1 warns about the model of step 4 without its state and resumes at step 2"
else bad "-y 1 with a model newer than the newest state: $(grep -E 'warning|resumed' $W/orphan.txt | head -3)"; fi

test_finish
