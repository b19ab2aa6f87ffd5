#!/usr/bin/env bash
# test_generate.sh: generation with the KV cache, on the CPU trainer (TRAINER= names another
# program with the same options, e.g. a GPU build; TS= the folder of the Tiny Shakespeare
# shards). A small model is trained for a few steps on Tiny Shakespeare; then, from its
# checkpoint and from a random model:
#   - greedy generation (--top-k 1) with the cache gives the same tokens as without it
#     (--kv-cache 0: the whole text's forward for each token), and so does sampling with a
#     temperature, --top-p and a seed;
#   - generation beyond the context slides the window, says so, and still agrees;
#   - a prompt longer than the context keeps its last tokens and says so;
#   - the samples printed during training are the same with and without the cache;
#   - a missing model file and a malformed --kv-cache are refused with a message naming them.
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
agree sampled_trained -e "$MODEL" --prompt "First Citizen:" -g 60 --temperature 0.8 --top-p 0.9 --seed 7
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

# training-time samples: the same text with and without the cache
for c in 1 0; do
    "$TRAINER" -e l2h2c64t64 -b 4 -t 64 -x 2 -v 0 -s 2 -g 24 --top-k 1 --kv-cache $c "${DATA[@]}" -o "$W/s$c" \
        > "$W/s$c.log" 2>&1
done
s1=$(grep '^sample:' "$W/s1/main.log" 2> /dev/null)
s0=$(grep '^sample:' "$W/s0/main.log" 2> /dev/null)
if [ -n "$s1" ] && [ "$s1" = "$s0" ]; then ok "training-time samples: the same with and without the cache ($(echo "$s1" | wc -l) samples)"
else bad "training-time samples differ or are missing: '$s1' against '$s0'"; fi

# refusals
"$TRAINER" --generate -e "$W/no_such_model.bin" -g 4 > "$W/missing.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "no_such_model.bin" "$W/missing.log"; then ok "a missing -e file is refused, naming it"
else bad "a missing -e file: exit $rc, $(tail -1 "$W/missing.log")"; fi
"$TRAINER" --generate -e l2h2c64t64 --kv-cache 2 > "$W/kv2.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q -- "--kv-cache must be 0 or 1" "$W/kv2.log"; then ok "--kv-cache 2 is refused"
else bad "--kv-cache 2: exit $rc, $(tail -1 "$W/kv2.log")"; fi
test_finish
