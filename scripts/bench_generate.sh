#!/usr/bin/env bash
# scripts/bench_generate.sh: generation speed and tokens on one GPU, train_gpt2cu --generate
# against Hugging Face transformers' generate() on the same weights. For each model of MODELS
# (default "d12 d48": GPT-2 124M and 1.5B) transformers builds a GPT2LMHeadModel of that shape
# from random weights (seed 1) and saves it in bf16; export_hf --import turns it into our
# checkpoint. Then GEN (default 256) tokens greedily from the end-of-text token at each batch
# of BATCHES (default "1 8 64"; --num-samples N: N copies of the one prompt), each run timed
# after a warm-up run:
#   - transformers, bf16 on the GPU, SDPA attention, its dynamic KV cache, never stopping early;
#   - transformers with its static cache and torch.compile (batch 1, the models of COMPILED,
#     default all; "-" when it cannot run);
#   - ours (the decoder: each step one CUDA graph); at batch 1 also --decode-graph 0 (its
#     kernels launched one by one) and, at d12, --kv-cache 0 (the training forward over the
#     whole text for each token).
# Tokens/s over the whole generation; ours also prints its step's kernels, its time after the
# first token and the weights' GB/s (bytes of weights read a step / time a step).
# The tokens: ours (bf16) against ours with --kv-cache 0 (the full forward, d12) and against
# transformers, as the first position where the greedy texts part (or "same"); with
# FP32_CHECK=1 (default) also at d12 the fp32 build against transformers in fp32.
# Prints a table last; logs in $OUT (default out/bench_generate).
# Run from the repository root on the GPU machine, binaries from $BIN (default dist/gpu/bin).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
OUT=${OUT:-out/bench_generate}
MODELS=${MODELS:-d12 d48}
GEN=${GEN:-256}
BATCHES=${BATCHES:-1 8 64}
FP32_CHECK=${FP32_CHECK:-1}
COMPILED=${COMPILED:-$MODELS}  # the models transformers also runs with its static cache and torch.compile
mkdir -p "$OUT"
: > "$OUT/rows.tsv"
: > "$OUT/tokens.txt"
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt" 2>&1

# hf NAME DIR DTYPE MODE BATCH LOG: transformers' generate() on the model in DIR (saved there
# first when DIR does not exist); MODE dynamic or compiled; its tokens of row 0 into LOG.ids
hf() {
    timeout 900 python3 - "$@" > "$6" 2>&1 << 'PYEOF'
import os, sys, time
import torch
import transformers
name, path, dtype, mode, batch, log = sys.argv[1:7]
batch, gen = int(batch), int(os.environ["GEN"])
dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
if not os.path.exists(path):
    layers, heads, channels = {"d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280),
                               "d48": (48, 25, 1600)}[name]
    torch.manual_seed(1)
    cfg = transformers.GPT2Config(n_layer=layers, n_head=heads, n_embd=channels, n_positions=1024, vocab_size=50257)
    transformers.GPT2LMHeadModel(cfg).to(torch.bfloat16).save_pretrained(path)
model = transformers.GPT2LMHeadModel.from_pretrained(path, torch_dtype=dt, attn_implementation="sdpa").cuda().eval()
kw = {}
if mode == "compiled":
    model.generation_config.cache_implementation = "static"
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
ids = torch.full((batch, 1), 50256, device="cuda")
def run():
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=gen, min_new_tokens=gen,
                         do_sample=False, use_cache=True, pad_token_id=50256, **kw)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t
with torch.no_grad():
    run()
    out, dt_s = run()
n = (out.shape[1] - ids.shape[1]) * batch
print("transformers %s %s %s batch %d: %d tokens in %.3f s: %.1f tokens/s" % (transformers.__version__, dtype, mode,
                                                                           batch, n, dt_s, n / dt_s))
open(log + ".ids", "w").write(" ".join(str(t) for t in out[0, 1:].tolist()) + "\n")
PYEOF
}

# ours LOG ARGS...: train_gpt2cu --generate, a warm-up run then the timed one into LOG
ours() {
    local log=$1
    shift
    timeout 600 "$@" > "$log.warm" 2>&1
    timeout 600 "$@" > "$log" 2>&1
}
tps() { grep -m1 -oE '[0-9.]+ tokens/s' "$1" 2> /dev/null | awk '{print $1}'; }
# step LOG: "us a step, GB/s, kernels" from our decoder's line
step() {
    sed -nE 's/.* of ([0-9]+) kernels.*; ([0-9.]+) us a step .* at ([0-9]+) GB\/s.*/\2\t\3\t\1/p' "$1" 2> /dev/null |
        head -1
}
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:--}" "${5:--	-	-}" >> "$OUT/rows.tsv"; }
# parted NAME A B: where two greedy texts part (the generated text of our logs, or transformers'
# token ids decoded with data/gpt2/encoder.json): "same" or the first token position that differs
parted() {
    python3 - "$@" >> "$OUT/tokens.txt" 2>&1 << 'PYEOF'
import json, sys
name, a, b = sys.argv[1:4]
vocab = {v: k for k, v in json.load(open("data/gpt2/encoder.json")).items()}
byte_of = {}
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for x in range(256):
    if x not in bs:
        bs.append(x); cs.append(256 + n); n += 1
byte_of = {chr(c): x for x, c in zip(bs, cs)}
def tokens(path):
    if path.endswith(".ids"):
        return [bytes(byte_of[ch] for ch in vocab[int(t)]) for t in open(path).read().split()]
    text = open(path, "rb").read()
    start = text.index(b"----\n") + 5
    return [text[start:text.index(b"\n----\n", start)]]
def parts(x, y):
    if len(x) == 1 and len(y) == 1:  # two texts
        a, b = x[0], y[0]
        n = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)
        if n is None and len(a) == len(b): return "same %d bytes" % len(a)
        return "part at byte %d" % (n if n is not None else min(len(a), len(b)))
    if len(x) > 1 and len(y) > 1:
        for i, (p, q) in enumerate(zip(x, y)):
            if p != q: return "part at token %d" % i
        return "same %d tokens" % min(len(x), len(y))
    if len(x) == 1: x, y = y, x
    text, pos = y[0], 0  # token list x against text y
    for i, t in enumerate(x):
        if text[pos:pos + len(t)] != t: return "part at token %d" % i
        pos += len(t)
    return "same %d tokens" % len(x)
print("%s: %s" % (name, parts(tokens(a), tokens(b))))
PYEOF
}

export GEN
for m in $MODELS; do
    dir="$OUT/${m}_hf"
    rm -rf "$dir"
    for b in $BATCHES; do
        hf "$m" "$dir" bf16 dynamic "$b" "$OUT/${m}_hf_b$b.log"
        row "transformers generate()" "$m" "$b" "$(tps "$OUT/${m}_hf_b$b.log")"
    done
    if [[ " $COMPILED " == *" $m "* ]]; then
        hf "$m" "$dir" bf16 compiled 1 "$OUT/${m}_hfc_b1.log"
        row "transformers, static cache + compile" "$m" 1 "$(tps "$OUT/${m}_hfc_b1.log")"
    fi
    ckpt="$OUT/${m}.bin"
    "$BIN/export_hf" --import "$dir" "$ckpt" --dtype bf16 > "$OUT/${m}_import.log" 2>&1 ||
        { echo "$m: export_hf --import failed ($(tail -1 "$OUT/${m}_import.log"))"; continue; }
    G=("$BIN/train_gpt2cu" --generate -e "$ckpt" -g "$GEN" --top-k 1)
    for b in $BATCHES; do
        ours "$OUT/${m}_ours_b$b.log" "${G[@]}" --num-samples "$b"
        row "train_gpt2cu --generate" "$m" "$b" "$(tps "$OUT/${m}_ours_b$b.log")" "$(step "$OUT/${m}_ours_b$b.log")"
    done
    ours "$OUT/${m}_plain_b1.log" "${G[@]}" --decode-graph 0
    row "  --decode-graph 0" "$m" 1 "$(tps "$OUT/${m}_plain_b1.log")" "$(step "$OUT/${m}_plain_b1.log")"
    if [ "$m" = d12 ]; then
        ours "$OUT/${m}_kv0_b1.log" "${G[@]}" --kv-cache 0
        row "  --kv-cache 0" "$m" 1 "$(tps "$OUT/${m}_kv0_b1.log")"
        parted "$m bf16, ours against ours --kv-cache 0" "$OUT/${m}_ours_b1.log" "$OUT/${m}_kv0_b1.log"
    fi
    parted "$m bf16, ours against transformers" "$OUT/${m}_hf_b1.log.ids" "$OUT/${m}_ours_b1.log"
    if [ "$m" = d12 ] && [ "$FP32_CHECK" = 1 ]; then
        hf "$m" "$dir" fp32 dynamic 1 "$OUT/${m}_hf32.log"
        "$BIN/export_hf" --import "$dir" "$OUT/${m}_32.bin" --dtype fp32 > "$OUT/${m}_import32.log" 2>&1
        timeout 600 "$BIN/train_gpt2cu_fp32" --generate -e "$OUT/${m}_32.bin" -g "$GEN" --top-k 1 \
            > "$OUT/${m}_ours32.log" 2>&1
        parted "$m fp32, ours (fp32 build) against transformers (fp32)" "$OUT/${m}_hf32.log.ids" "$OUT/${m}_ours32.log"
        rm -f "$OUT/${m}_32.bin"
    fi
    rm -rf "$dir" "$ckpt"  # 3 GB each at 1.5B
done

{
    echo "generation, $GEN tokens greedy from the end-of-text token, bf16, $(cat "$OUT/gpu.txt")"
    printf '%-38s %-5s %5s %11s %9s %7s %8s\n' program model batch tokens/s "us/step" "GB/s" kernels
    while IFS=$'\t' read -r prog model b t us gbs k; do
        printf '%-38s %-5s %5s %11s %9s %7s %8s\n' "$prog" "$model" "$b" "$t" "$us" "$gbs" "$k"
    done < "$OUT/rows.tsv"
    echo "tokens:"
    sed 's/^/  /' "$OUT/tokens.txt"
} | tee "$OUT/table.txt"
