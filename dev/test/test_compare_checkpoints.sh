#!/usr/bin/env bash
# test_compare_checkpoints.sh: dev/compare_checkpoints.py on real checkpoints of the CPU
# trainer. Two runs with the same flags are identical; the state header slots that follow the
# log files' lengths (and the CRC over them) are left out, and no other slot is; a different
# learning rate, a flipped byte of the optimizer state, a state shard in one run only and a
# changed loss in metrics.jsonl are differences named in the verdict; changed timings are
# not; a missing file or a bad command line exits 2 naming the file.
set -u
cd "$(dirname "$0")/../.." || exit 1
[ -x ./train_gpt2 ] || { echo "error: ./train_gpt2 is not built (make train_gpt2)"; exit 1; }
./dev/data/tinyshakespeare.sh > /dev/null || { echo "error: the data step failed"; exit 1; }
# shellcheck disable=SC1091  # testlib.sh (ok, bad, test_finish) is checked on its own
. dev/test/testlib.sh
mkdir -p build
W=$(mktemp -d build/test_compare_checkpoints.XXXXXX)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
CMP="python3 dev/compare_checkpoints.py"
ARGS="-e l2h2c32t32 -b 2 -t 16 -x 6 -v 3 -m 2 -s 0 -n 3 --seed 7"
S=00000006

train() {  # train DIR FLAGS...: a run into $W/DIR
    local d=$1
    shift
    # shellcheck disable=SC2086  # ARGS is a list of flags
    ./train_gpt2 $ARGS "$@" -o "$W/$d" > "$W/$d.txt" 2>&1 || bad "run $d: exit $?: $(tail -1 "$W/$d.txt")"
}
# compare A B: the comparator on step 6 of $W/A and $W/B; sets rc and out (stdout and stderr)
compare() {
    out=$($CMP "$W/$1" "$W/$2" "${3:-6}" 2>&1)
    rc=$?
}
# expect RC WHAT NEEDLE: the last compare exited RC and its last line holds NEEDLE
expect() {
    local last
    last=$(printf '%s\n' "$out" | tail -1)
    if [ "$rc" = "$1" ] && [[ "$last" == *"$3"* ]]; then ok "$2: exit $rc: ${last:0:160}"
    else
        bad "$2: expected exit $1 and '$3' in the last line; exit $rc, output:"
        printf '%s\n' "$out" | sed 's/^/      /'
    fi
}
# poke FILE SLOT VALUE: one int32 of a header, written in place (nothing recomputed)
poke() {
    python3 -c 'import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(4 * int(sys.argv[2]))
    f.write(struct.pack("<i", int(sys.argv[3])))' "$@"
}
peek() {
    python3 -c 'import struct, sys
with open(sys.argv[1], "rb") as f:
    f.seek(4 * int(sys.argv[2]))
    print(struct.unpack("<i", f.read(4))[0])' "$@"
}
variant() {  # variant NAME: a fresh copy of run b to change
    rm -rf "${W:?}/$1"
    cp -r "$W/b" "$W/$1"
}

train a
train b
compare a b
expect 0 "two runs with the same flags" "identical: step 6"
# the log-length slots of two real runs differ only as the step lines' timings happen to;
# set them apart for sure, and the CRC with them, in a copy
variant logs
st=$W/logs/state_$S.bin
for slot in 14 67; do poke "$st" $slot $(( $(peek "$st" $slot) + 1000 )); done
poke "$st" 15 7
poke "$st" 68 9
poke "$st" 251 12345
compare a logs
expect 0 "main.log and metrics.jsonl lengths and the CRC (slots 14..15, 67..68, 251) changed" "identical: step 6"
# every other header slot counts: the skipped-updates counter, one that nothing reads
for slot in 13 16 100; do
    variant "slot$slot"
    poke "$W/slot$slot/state_$S.bin" $slot $(( $(peek "$W/slot$slot/state_$S.bin" $slot) + 1 ))
    compare a "slot$slot"
    expect 1 "state header slot $slot changed" "state_$S.bin: header slot [$slot]"
done
# the CRC slot of the model file is compared: there nothing legitimately differs
variant modelcrc
poke "$W/modelcrc/model_$S.bin" 251 12345
compare a modelcrc
expect 1 "the model file's CRC slot changed" "model_$S.bin: header slot [251]"
# one byte of the first moments
variant body
python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(1024 + 4 * 1000 + 3)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x01]))' "$W/body/state_$S.bin"
compare a body
expect 1 "one bit of the state body flipped" "state_$S.bin: first differing byte in AdamW m[1000]"

train lr -l 1e-3
compare a lr
expect 1 "a run with another -l" "model_$S.bin"
if printf '%s\n' "$out" | grep -q "^state_$S.bin: DIFFERENT: .*setting peak lr (-l)"; then
    ok "the state's -l setting slot is named among the differences"
else bad "the state's -l setting slot not named: $(printf '%s\n' "$out" | grep "^state_")"; fi

# a shard of a ZeRO run (state_<step>.rank<r>.bin): compared when in both, a difference when in one
variant shard
cp "$W/b/state_$S.bin" "$W/shard/state_$S.rank1.bin"
variant shard2
cp "$W/b/state_$S.bin" "$W/shard2/state_$S.rank1.bin"
compare shard shard2
expect 0 "a rank-1 shard in both" "identical: step 6"
if printf '%s\n' "$out" | grep -q "^state_$S.rank1.bin: identical"; then ok "the rank-1 shard is compared"
else bad "the rank-1 shard has no line of its own"; fi
compare a shard
expect 1 "a rank-1 shard in one run only" "state_$S.rank1.bin: in $W/shard only"

# metrics.jsonl: a loss is a difference, a timing is not
variant loss
sed -i -E '/"step": 4,/ s/"loss": [0-9.]+/"loss": 1.5/' "$W/loss/metrics.jsonl"
compare a loss
expect 1 "step 4's loss changed in metrics.jsonl" "metrics.jsonl step records: at step 4: loss"
variant timing
sed -i -E 's/"ms": [0-9.]+/"ms": 99.5/; s/"elapsed_s": [0-9.]+/"elapsed_s": 3.25/' "$W/timing/metrics.jsonl"
compare a timing
expect 0 "ms and elapsed_s changed in metrics.jsonl" "identical: step 6"
variant val
sed -i -E '/"type": "val", "step": 3,/ s/"val_loss": [0-9.]+/"val_loss": 2.5/' "$W/val/metrics.jsonl"
compare a val
expect 1 "step 3's validation loss changed" "metrics.jsonl val records: at step 3: val_loss"
# the checkpoint of step 3 covers the records up to step 3 only
variant later
sed -i -E '/"step": 5,/ s/"loss": [0-9.]+/"loss": 1.5/' "$W/later/metrics.jsonl"
compare a later 3
expect 0 "a loss after the compared step (5 against step 3's checkpoint)" "identical: step 3"

# what cannot be compared
variant nostate
rm "$W/nostate/state_$S.bin"
compare a nostate
expect 2 "a missing state file" "$W/nostate/state_$S.bin is missing"
compare a b 7
expect 2 "a step without a checkpoint" "model_00000007.bin is missing"
out=$($CMP "$W/a" 2>&1); rc=$?
expect 2 "a bad command line" "usage:"

rm -rf "$W"
test_finish
