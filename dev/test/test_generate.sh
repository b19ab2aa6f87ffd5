#!/usr/bin/env bash
# test_generate.sh: generation with the KV cache, on the CPU trainer (TRAINER= names another
# program with the same options, e.g. a GPU build; TS= the folder of the Tiny Shakespeare
# shards). A small model is trained for a few steps on Tiny Shakespeare; then, from its
# checkpoint and from a random model:
#   - greedy generation (--top-k 1) with the cache gives the same tokens as without it
#     (--kv-cache 0: the whole text's forward for each token), and so does sampling with a
#     temperature, --top-k and a seed, and (the CPU trainer) with --top-p;
#   - generation beyond the context slides the window, says so, and still agrees;
#   - a prompt longer than the context keeps its last tokens and says so;
#   - a prompt that fills the context (maxT - 1 tokens after the start token, or more): the
#     first token is drawn from all maxT of them, as a full forward over the kept prompt;
#   - a model whose context holds one token generates, each token from the one before;
#   - the samples printed during training are the same with and without the cache;
#   - several texts at once (--num-samples, --prompts): each sample is the text generated
#     alone with its seed (--seed + its row), with and without the cache;
#   - a trainer with --decode-graph (the GPU's): the step replayed from a CUDA graph gives the
#     same text as its kernels launched one by one;
#   - a missing model file, a malformed --kv-cache, --num-samples 0, a missing or empty
#     --prompts file and --num-samples outside --generate are refused with a message naming them.
# The last line is "N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
. dev/test/testlib.sh
TRAINER=${TRAINER:-./train_gpt2}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
[ -x "$TRAINER" ] || { echo "$TRAINER is not built (make train_gpt2)"; exit 1; }
TS=${TS:-data/tinyshakespeare}
[ -f "$TS/tiny_shakespeare_val_000000.bin" ] || ./dev/data/tinyshakespeare.sh > /dev/null 2>&1 ||
    { echo "error: the Tiny Shakespeare shards are missing (make data)"; exit 1; }
DATA=(-i "$TS/tiny_shakespeare_train_*.bin" -j "$TS/tiny_shakespeare_val_*.bin")

# text GEN_LOG: the generated text, between the two "----" lines
text() { sed -n '/^----$/,/^----$/p' "$1"; }
# agree NAME FLAGS...: generation with and without the cache, the same text
agree() {
    local name=$1
    shift
    "$TRAINER" --generate --kv-cache 1 "$@" > "$W/$name.1" 2>&1
    local rc1=$?
    "$TRAINER" --generate --kv-cache 0 "$@" > "$W/$name.0" 2>&1
    local rc0=$?
    local n
    n=$(text "$W/$name.1" | wc -c)
    if [ $rc1 = 0 ] && [ $rc0 = 0 ] && [ "$n" -gt 12 ] && [ "$(text "$W/$name.1")" = "$(text "$W/$name.0")" ]; then
        ok "$name: the same $n bytes of text with and without the KV cache ($(grep -m1 'tokens/s' "$W/$name.1" |
            sed 's/^generate: //'))"
    else
        bad "$name: exit $rc1 / $rc0; with the cache: $(text "$W/$name.1" | head -c 200 | tr '\n' ' ') ... without: $(
            text "$W/$name.0" | head -c 200 | tr '\n' ' ') $(tail -1 "$W/$name.1")"
    fi
}

# a model that has seen some Shakespeare: 40 steps of a 4-layer GPT-2 with a 128-token context
"$TRAINER" -e l4h4c128t128 -b 8 -t 128 -x 40 -l 3e-3 -v 0 -s 0 -n -1 "${DATA[@]}" -o "$W/run" > "$W/train.log" 2>&1
MODEL=$W/run/model_00000040.bin
if [ -f "$MODEL" ]; then ok "trained a small model for the checks ($(grep -E '^step +40' "$W/train.log" | cut -c1-40))"
else bad "training the small model failed: $(tail -2 "$W/train.log" | tr '\n' ' ')"; fi

agree greedy_trained -e "$MODEL" --prompt "ROMEO:" -g 60 --top-k 1
agree sampled_trained -e "$MODEL" --prompt "First Citizen:" -g 60 --temperature 0.8 --top-k 40 --seed 7
# --top-p 0.9 over this model's near-flat distribution keeps thousands of tokens, each of
# probability ~1e-4: a logit's last bit can move the cut by one token and the renormalised
# cumulative sum under the coin by as much. The CPU's two paths share their arithmetic; the
# GPU's decoder sums its products in another order than the training forward, so there the
# same seed gives the same text only where the draws' margins exceed that (decoder against
# decoder, batched against alone and graph against plain, below, stay exact)
if "$TRAINER" --help 2>&1 | grep -q -- "--decode-graph"; then
    echo "note  sampled_topp: --top-p over a near-flat distribution, cached against uncached: the CPU trainer's check"
else
    agree sampled_topp -e "$MODEL" --prompt "First Citizen:" -g 60 --temperature 0.8 --top-p 0.9 --seed 7
fi
agree greedy_random -e l2h4c64t64 --prompt "Hello" -g 40 --top-k 1
# beyond the context (128): the window slides twice
agree slide -e "$MODEL" --prompt "KING:" -g 200 --top-k 1
if grep -q "filled the context (128 tokens) 2 time(s)" "$W/slide.1"; then ok "-g beyond the context: the window slid, and it says so"
else bad "-g beyond the context: no slide reported: $(tail -2 "$W/slide.1" | tr '\n' ' ')"; fi
LONG=$(python3 -c "print('to be or not to be ' * 60)")
"$TRAINER" --generate -e "$MODEL" --prompt "$LONG" -g 4 > "$W/long.log" 2>&1
if [ $? = 0 ] && grep -q "more than the context holds (128, one of them the start token): generation starts from its last 127" "$W/long.log"
then ok "a prompt longer than the context: its last 127 tokens kept, and said"
else bad "a long prompt: $(head -3 "$W/long.log" | tr '\n' ' ')"; fi

# The full context, against a full forward. A 16-position model learns one sentence by heart
# (-a 1 on a shard of it alone, after the start token), so its next token after the
# first 15 words depends on all 16 positions: the last word alone, or the same words at other
# positions, lead elsewhere. Its copy with 32 positions (wpe padded with zero rows, which
# positions below 16 never read) has room for the 16 tokens and so draws its first greedy
# token from their full forward; the 16-position model's first must be that token, after
# these 15 words and after a longer prompt that ends with them. Its copy with 1 position
# (wpe's row 0) holds only the start token: its first token is the one after the start token
# alone, the 16-position model's after an empty prompt.
# resize_wpe IN OUT T: the checkpoint IN with wpe cut or zero-padded to T rows (no checksum)
resize_wpe() {
    python3 - "$@" << 'PY'
import struct, sys
src, dst, t2 = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = open(src, "rb").read()
h = list(struct.unpack("<256i", b[:1024]))
assert h[0] == 20240326 and h[1] in (3, 5), "a checkpoint, fp32 or bf16"
es = 4 if h[1] == 3 else 2
t, c, vp = h[2], h[6], h[7]
wpe = 1024 + es * vp * c
rows = b[wpe:wpe + es * t * c][:es * t2 * c] + bytes(es * c * max(0, t2 - t))
h[2], h[250], h[251] = t2, 0, 0
open(dst, "wb").write(struct.pack("<256i", *h) + b[1024:wpe] + rows + b[wpe + es * t * c:])
PY
}
# gen1 NAME MODEL KV PROMPT: one greedy token; its text in $W/NAME.txt, the log in $W/NAME.log
gen1() {
    "$TRAINER" --generate -e "$2" --kv-cache "$3" --prompt "$4" -g 1 --top-k 1 > "$W/$1.log" 2>&1
    local rc=$?
    text "$W/$1.log" > "$W/$1.txt"
    return $rc
}
SENTENCE="the king went to the sea and the queen went to the castle of the north"
mkdir -p "$W/ctx"
python3 - "$W/ctx/ctx_train_000000.bin" data/gpt2/encoder.json "$SENTENCE" << 'PY'
import json, struct, sys
vocab = json.load(open(sys.argv[2]))
ids = [50256] + [vocab["\u0120" + w] for w in sys.argv[3].split()]  # each " word" one token
toks = ids * 4
open(sys.argv[1], "wb").write(struct.pack("<256i", 20240520, 1, len(toks), *[0] * 253) +
                              struct.pack("<%dH" % len(toks), *toks))
PY
"$TRAINER" -e l2h2c64t16 -b 1 -t 16 -x 40 -l 3e-3 -a 1 -v 0 -s 0 -n -1 --seed 5 -i "$W/ctx/ctx_train_*.bin" -j "" \
    -o "$W/t16" > "$W/t16.log" 2>&1
M16=$W/t16/model_00000040.bin
if [ -f "$M16" ] && resize_wpe "$M16" "$W/t32.bin" 32 && resize_wpe "$M16" "$W/t1.bin" 1; then
    ok "a 16-position model that knows a sentence ($(grep -E '^step +40' "$W/t16.log" | cut -c1-30)), and its" \
        "copies with 32 and 1 positions"
else bad "the 16-position model or its copies: $(tail -2 "$W/t16.log" | tr '\n' ' ')"; fi
P15=" ${SENTENCE% *}"
gen1 ref "$W/t32.bin" 1 "$P15"
if grep -q "after a prompt of 15, context 32" "$W/ref.log" && [ "$(wc -c < "$W/ref.txt")" -gt 60 ]; then
    ok "the full forward over the 15 words, from the 32-position model: '$(sed -n 2p "$W/ref.txt")'"
else bad "the 32-position model: $(head -3 "$W/ref.log" | tr '\n' ' ')"; fi
for kv in 1 0; do
    gen1 "full$kv" "$M16" $kv "$P15"
    rc=$?
    if [ $rc = 0 ] && grep -q "after a prompt of 15, context 16" "$W/full$kv.log" && cmp -s "$W/full$kv.txt" "$W/ref.txt"
    then ok "--kv-cache $kv: a prompt of maxT - 1 tokens: the first token is the full forward's"
    else bad "--kv-cache $kv: a prompt of maxT - 1 tokens: exit $rc, '$(tr '\n' ' ' < "$W/full$kv.txt")' against" \
        "'$(tr '\n' ' ' < "$W/ref.txt")'"; fi
    gen1 "over$kv" "$M16" $kv " once upon a time in$P15"
    rc=$?
    if [ $rc = 0 ] && grep -q "prompt is 20 tokens, .*generation starts from its last 15" "$W/over$kv.log" &&
        cmp -s "$W/over$kv.txt" "$W/ref.txt"
    then ok "--kv-cache $kv: a prompt of 20 tokens keeps its last 15, and the first token is the full forward's"
    else bad "--kv-cache $kv: a prompt of 20 tokens: exit $rc, $(head -1 "$W/over$kv.log"), '$(tr '\n' ' ' < \
        "$W/over$kv.txt")' against '$(tr '\n' ' ' < "$W/ref.txt")'"; fi
done
# beyond the full context: the window slides 5 times, the same with and without the cache
agree slide_full -e "$M16" --prompt "$P15" -g 40 --top-k 1
gen1 start "$M16" 1 ""
for kv in 1 0; do
    gen1 "one$kv" "$W/t1.bin" $kv "hello"
    rc=$?
    if [ $rc = 0 ] && grep -q "holds one token, the start token: --prompt (1 token) is not used" "$W/one$kv.log" &&
        [ -s "$W/start.txt" ] && cmp -s "$W/one$kv.txt" "$W/start.txt"
    then ok "--kv-cache $kv: a 1-position model: the first token is the one after the start token"
    else bad "--kv-cache $kv: a 1-position model: exit $rc, '$(tr '\n' ' ' < "$W/one$kv.txt")' against" \
        "'$(tr '\n' ' ' < "$W/start.txt")' $(tail -1 "$W/one$kv.log")"; fi
done
agree one_position -e "$W/t1.bin" -g 12 --top-k 1
agree one_position_descriptor -e l1h1c64t1 -g 12 --top-k 1

# training-time samples: the same text with and without the cache
for c in 1 0; do
    "$TRAINER" -e l2h2c64t64 -b 4 -t 64 -x 2 -v 0 -s 2 -g 24 --top-k 1 --kv-cache $c "${DATA[@]}" -o "$W/s$c" \
        > "$W/s$c.log" 2>&1
done
s1=$(grep '^sample:' "$W/s1/main.log" 2> /dev/null)
s0=$(grep '^sample:' "$W/s0/main.log" 2> /dev/null)
if [ -n "$s1" ] && [ "$s1" = "$s0" ]; then ok "training-time samples: the same with and without the cache ($(echo "$s1" | wc -l) samples)"
else bad "training-time samples differ or are missing: '$s1' against '$s0'"; fi

# several texts at once: sample r of a batch is the text generated alone with --seed + r
# sample LOG R: the text of sample R (from 1) of a batched run's log
sample() { awk -v r="$2" '/^---- sample /{on = ($3 == r); next} /^----$/{on = 0} on' "$1"; }
printf 'ROMEO:\nKING:\n' > "$W/prompts.txt"
for kv in 1 0; do
    "$TRAINER" --generate -e "$MODEL" --prompts "$W/prompts.txt" --num-samples 2 -g 30 --top-p 0.9 --seed 11 \
        --kv-cache $kv > "$W/batch$kv.log" 2>&1
    rc=$?
    same=0
    for r in 1 2 3 4; do
        p=$([ $r -le 2 ] && echo "ROMEO:" || echo "KING:")
        "$TRAINER" --generate -e "$MODEL" --prompt "$p" -g 30 --top-p 0.9 --seed $((10 + r)) --kv-cache $kv \
            > "$W/alone$kv.$r.log" 2>&1
        [ -n "$(sample "$W/batch$kv.log" $r)" ] &&
            [ "$(sample "$W/batch$kv.log" $r)" = "$(text "$W/alone$kv.$r.log" | sed '1d;$d')" ] && same=$((same + 1))
    done
    if [ $rc = 0 ] && [ $same = 4 ] && grep -q "4 samples (2 prompts x 2)" "$W/batch$kv.log"; then
        ok "--kv-cache $kv: --prompts (2 lines) x --num-samples 2: each of the 4 samples is its text generated alone"
    else bad "--kv-cache $kv: batched samples: exit $rc, $same of 4 equal to their text alone: $(tail -2 \
        "$W/batch$kv.log" | tr '\n' ' ')"; fi
done
"$TRAINER" --generate -e "$MODEL" --prompt "KING:" -g 200 --top-k 1 --num-samples 3 > "$W/batch_slide.log" 2>&1
if [ $? = 0 ] && [ "$(sample "$W/batch_slide.log" 3)" = "$(text "$W/slide.1" | sed '1d;$d')" ] &&
    grep -q "texts filled the context (128 tokens) 6 time(s)" "$W/batch_slide.log"
then ok "--num-samples 3 beyond the context: each text slid twice, and the third is the text alone"
else bad "--num-samples 3 beyond the context: $(tail -2 "$W/batch_slide.log" | tr '\n' ' ')"; fi

# the GPU's step from a CUDA graph against its kernels one by one
if "$TRAINER" --help 2>&1 | grep -q -- "--decode-graph"; then
    for args in "--prompt ROMEO: -g 60 --top-k 1" "--prompt KING: -g 200 --temperature 0.8 --top-p 0.9 --seed 3" \
                "--prompts $W/prompts.txt --num-samples 3 -g 40 --top-k 40 --seed 5"; do
        # shellcheck disable=SC2086  # $args: the options as words
        "$TRAINER" --generate -e "$MODEL" $args --decode-graph 1 > "$W/graph1.log" 2>&1
        rc1=$?
        # shellcheck disable=SC2086
        "$TRAINER" --generate -e "$MODEL" $args --decode-graph 0 > "$W/graph0.log" 2>&1
        rc0=$?
        a=$(sed -n '/^----/,/^----$/p' "$W/graph1.log")
        if [ $rc1 = 0 ] && [ $rc0 = 0 ] && [ "$(echo "$a" | wc -c)" -gt 40 ] &&
            [ "$a" = "$(sed -n '/^----/,/^----$/p' "$W/graph0.log")" ]
        then ok "--decode-graph 1 and 0 ($args): the same text ($(grep -m1 'kernels' "$W/graph1.log" |
            sed 's/^generate: //'))"
        else bad "--decode-graph 1 and 0 ($args): exit $rc1 / $rc0, the texts differ: $(tail -1 "$W/graph1.log")"; fi
    done
else echo "note  --decode-graph is the GPU trainer's: checked with TRAINER= a GPU build"; fi

# refusals
"$TRAINER" --generate -e l2h2c64t64 --num-samples 0 > "$W/ns0.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q -- "--num-samples must be >= 1" "$W/ns0.log"; then ok "--num-samples 0 is refused"
else bad "--num-samples 0: exit $rc, $(tail -1 "$W/ns0.log")"; fi
"$TRAINER" --generate -e l2h2c64t64 --prompts "$W/no_such_prompts.txt" > "$W/np.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "no_such_prompts.txt" "$W/np.log"; then ok "a missing --prompts file is refused, naming it"
else bad "a missing --prompts file: exit $rc, $(tail -1 "$W/np.log")"; fi
: > "$W/empty.txt"
"$TRAINER" --generate -e l2h2c64t64 --prompts "$W/empty.txt" > "$W/ep.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "empty.txt holds no prompt" "$W/ep.log"; then ok "an empty --prompts file is refused"
else bad "an empty --prompts file: exit $rc, $(tail -1 "$W/ep.log")"; fi
"$TRAINER" -e l2h2c64t64 -x 1 --num-samples 2 "${DATA[@]}" > "$W/nst.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q -- "--num-samples and --prompts are --generate's" "$W/nst.log"
then ok "--num-samples in training is refused"
else bad "--num-samples in training: exit $rc, $(tail -1 "$W/nst.log")"; fi
"$TRAINER" --generate -e "$W/no_such_model.bin" -g 4 > "$W/missing.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "no_such_model.bin" "$W/missing.log"; then ok "a missing -e file is refused, naming it"
else bad "a missing -e file: exit $rc, $(tail -1 "$W/missing.log")"; fi
"$TRAINER" --generate -e l2h2c64t64 --kv-cache 2 > "$W/kv2.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q -- "--kv-cache must be 0 or 1" "$W/kv2.log"; then ok "--kv-cache 2 is refused"
else bad "--kv-cache 2: exit $rc, $(tail -1 "$W/kv2.log")"; fi
test_finish
