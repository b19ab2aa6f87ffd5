#!/usr/bin/env bash
# test_hellaswag.sh: the HellaSwag evaluation (-h 1) end to end on a HellaSwag-like set
# written here: dev/data/hellaswag.py builds the eval file and refuses bad JSONL; the CPU
# trainer's answers equal the PyTorch reference's (dev/hellaswag_ref.py) example by
# example, also when rows are cut to their last T+1 tokens and when examples span
# batches; an untrained model is near chance (25%), a model trained on the right endings
# answers nearly all; the score reaches main.log and metrics.jsonl; bad files and flags
# are refused with a message naming them (by the GPU trainer too, when built).
# PYTHON_TORCH: a python with PyTorch (default: the first of python3, /usr/bin/python3).
set -u
cd "$(dirname "$0")/../.."
W=build/test_hellaswag
rm -rf $W && mkdir -p $W
. dev/test/testlib.sh
PYTHON=${PYTHON:-python3}
if [ -z "${PYTHON_TORCH:-}" ]; then
    for p in python3 /usr/bin/python3; do
        if $p -c 'import torch' 2> /dev/null; then PYTHON_TORCH=$p; break; fi
    done
fi
[ -n "${PYTHON_TORCH:-}" ] || { echo "FAIL no python with PyTorch (run scripts/install_deps.sh)"; exit 1; }

TR="./train_gpt2"
MODEL="-e l2h2c128t32 -t 32"

# --- the data script
$PYTHON dev/test/hellaswag_like.py $W/val.jsonl 400 7
if $PYTHON dev/data/hellaswag.py $W/val.jsonl -o $W/val.bin > $W/prep.txt 2>&1 &&
   grep -q "wrote 400 examples" $W/prep.txt; then ok "hellaswag.py: $(tail -1 $W/prep.txt)"
else bad "hellaswag.py on a good file: $(cat $W/prep.txt)"; fi
head -c 1000 $W/val.jsonl > $W/cut.jsonl  # the last line is cut mid-object
printf '{"ctx": "A man.", "endings": ["a.", "b.", "c."], "label": 0}\n' > $W/three.jsonl
printf '{"ctx": "A man.", "endings": ["a.", "b.", "c.", "d."], "label": 4}\n' > $W/label.jsonl
for case in "cut:not JSON" "three:endings" "label:label"; do
    f=${case%%:*}
    $PYTHON dev/data/hellaswag.py $W/$f.jsonl -o $W/$f.bin > $W/out.txt 2>&1
    st=$?
    if [ $st -eq 1 ] && grep -q "$f.jsonl:[0-9]*: .*${case#*:}" $W/out.txt && [ ! -e $W/$f.bin ]; then
        ok "hellaswag.py refuses $f.jsonl: $(head -1 $W/out.txt)"
    else bad "hellaswag.py on $f.jsonl (exit $st, wrote $(ls $W/$f.bin 2> /dev/null)): $(cat $W/out.txt)"; fi
done

# --- an untrained model: chance, and the reference's answers
# accuracy from the trainer's line "hellaswag accuracy A (C/N, step S)"
accuracy() { grep -o "hellaswag accuracy [0-9.]*" "$1" | tail -1 | awk '{print $3}'; }
GPT2_TEST_HELLASWAG_CHOICES=$W/untrained.ours $TR $MODEL -b 4 -x 1 -l 0 -v 1 -m 1 -s 0 -h 1 \
    --hellaswag-file $W/val.bin -o $W/untrained > $W/untrained.txt 2>&1 ||
    bad "untrained run: $(tail -3 $W/untrained.txt)"
acc=$(accuracy $W/untrained.txt)
# 400 examples at p = 0.25: one standard deviation is 0.022, the bounds are 4.5 of them
if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a > 0.15 && a < 0.35) }'; then
    ok "untrained model near chance: accuracy $acc of 400"
else bad "untrained model: accuracy '$acc', expected 0.15..0.35"; fi
# compare: NAME MODEL T (the trainer wrote $W/NAME.ours)
compare() {
    $PYTHON_TORCH dev/hellaswag_ref.py --load "$2" --file $W/val.bin -T "$3" --choices $W/$1.ref > $W/$1.ref.txt 2>&1
    local diff
    diff=$(paste -d' ' $W/$1.ours $W/$1.ref | awk '$1 != $2' | wc -l)
    if [ -s $W/$1.ours ] && [ "$(wc -l < $W/$1.ours)" = 400 ] && [ "$diff" = 0 ]; then
        ok "$1: all 400 answers equal PyTorch's ($(tail -1 $W/$1.ref.txt))"
    else bad "$1: $diff of 400 answers differ from PyTorch's ($(tail -1 $W/$1.ref.txt))"; fi
}
compare untrained $W/untrained/model_00000001.bin 32
# rows cut to T+1 = 9 tokens (every example is longer), and B = 3 (examples span batches)
GPT2_TEST_HELLASWAG_CHOICES=$W/cut.ours $TR -e $W/untrained/model_00000001.bin -t 8 -b 3 -x 1 -l 0 -v 1 -m 1 -s 0 \
    -h 1 --hellaswag-file $W/val.bin > $W/cut.txt 2>&1 || bad "cut run: $(tail -3 $W/cut.txt)"
if grep -q "400 examples are longer than T+1 = 9 tokens" $W/cut.txt; then ok "cut rows are reported"
else bad "cut rows: no report in $(grep hellaswag $W/cut.txt)"; fi
compare cut $W/untrained/model_00000001.bin 8

# --- a model trained on the right endings of the first 24 examples answers them: four
# copies of those texts, each in its own order, so every one is in some training window
$PYTHON dev/data/hellaswag.py $W/val.jsonl --limit 24 -o $W/mem.bin > /dev/null || bad "hellaswag.py --limit 24"
$PYTHON - $W/val.jsonl $W/mem.txt << 'EOF'
import json, random, sys
exs = [json.loads(l) for l in open(sys.argv[1])][:24]
docs, rng, out = [e["ctx"] + " " + e["endings"][e["label"]] for e in exs], random.Random(1), []
for _ in range(4):
    rng.shuffle(docs)
    out += docs
open(sys.argv[2], "w").write("\n\n".join(out))
EOF
./prepro --input $W/mem.txt --text-docs blank-lines --out-dir $W/mem --name mem --val-tokens 0 \
    --shard-tokens 8192 --allow-small-shards 1 > /dev/null || bad "prepro of the right endings"
$TR $MODEL -b 4 -i "$W/mem/mem_train_*.bin" -j "" -x 300 -l 1e-3 -u 10 -k constant -c 0 -v 300 -s 0 -h 1 \
    --hellaswag-file $W/mem.bin -o $W/mem_run > $W/mem_run.txt 2>&1 || bad "memorising run: $(tail -3 $W/mem_run.txt)"
acc=$(accuracy $W/mem_run.txt)
if [ -n "$acc" ] && awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }'; then
    ok "a model trained on the right endings: accuracy $acc of 24"
else bad "memorised: accuracy '$acc', expected >= 0.9 ($(grep -E 'step +300|hellaswag' $W/mem_run.txt))"; fi
if grep -q '"type": "hellaswag", "step": 300, "accuracy": ' $W/mem_run/metrics.jsonl &&
   grep -q "hellaswag accuracy $acc" $W/mem_run/main.log; then ok "the score is in metrics.jsonl and main.log"
else bad "the score is missing from metrics.jsonl or main.log"; fi

# --- bad input is refused before training
expect_error() {
    local what=$1 needle=$2
    shift 2
    "$@" > $W/out.txt 2> $W/err.txt
    local st=$?
    if [ $st -eq 1 ] && grep -qF -- "$needle" $W/err.txt; then ok "$1: $what: $(head -c 160 $W/err.txt)"
    else bad "$1: $what (exit $st, stderr: $(cat $W/err.txt))"; fi
}
printf 'not an eval file' > $W/junk.bin
head -c 3000 $W/val.bin > $W/truncated.bin
trainers=./train_gpt2
[ -x ./train_gpt2cu ] && trainers="$trainers ./train_gpt2cu"
for t in $trainers; do
    SMALL="$MODEL -b 2 -x 1 -s 0"
    expect_error "no eval file" "no_such.bin" $t $SMALL -h 1 --hellaswag-file $W/no_such.bin
    expect_error "-h 1 with -v 0" "-v" $t $SMALL -h 1 -v 0 --hellaswag-file $W/val.bin
    expect_error "-h 2" "-h must be 0 or 1" $t $SMALL -h 2
done
# the file itself is read with the data (the GPU trainer reads it after its GPU setup)
expect_error "a file that is not an eval file" "junk.bin: 16 bytes, shorter than the 1024-byte header" $TR $MODEL \
    -b 2 -x 1 -h 1 --hellaswag-file $W/junk.bin
expect_error "a truncated eval file" "(truncated?)" $TR $MODEL -b 2 -x 1 -h 1 \
    --hellaswag-file $W/truncated.bin
# a model of 1000 tokens (a checkpoint written here): the eval file's ids are outside it
$PYTHON - $W/small_vocab.bin << 'EOF'
import random, struct, sys
L, H, C, T, V, Vp = 1, 1, 8, 16, 1000, 1024
n = Vp * C + T * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C
h = [20240326, 3, T, V, L, H, C, Vp] + [0] * 248
random.seed(1)
params = [random.gauss(0, 0.02) for _ in range(n)]
open(sys.argv[1], "wb").write(struct.pack("<256i", *h) + struct.pack("<%df" % n, *params))
EOF
expect_error "token ids outside the model's vocabulary" "outside the model's vocabulary (1000)" $TR \
    -e $W/small_vocab.bin -t 16 -b 2 -x 1 --check-data 0 -j "" -h 1 --hellaswag-file $W/val.bin

test_finish
