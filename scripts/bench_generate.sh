#!/usr/bin/env bash
# scripts/bench_generate.sh: generation speed on one GPU, train_gpt2cu --generate against
# Hugging Face transformers' generate() with its KV cache, on the same weights. For each model
# of MODELS (default "d12 d48": GPT-2 124M and 1.5B): transformers builds a GPT2LMHeadModel of
# that shape from random weights (seed 1) and saves it in bf16; export_hf --import turns it
# into our checkpoint. Then GEN (default 256) tokens greedily at batch 1 from the end-of-text
# token: transformers (bf16 on the GPU, SDPA attention, use_cache, never stopping early), ours
# with the KV cache, and ours without it (--kv-cache 0: the training forward over the whole
# text per token; d12 only), each timed after a warm-up run. Tokens/s over the whole
# generation. Prints a table last; logs in $OUT (default out/bench_generate).
# Run from the repository root on the GPU machine, binaries from $BIN (default dist/gpu/bin).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
OUT=${OUT:-out/bench_generate}
MODELS=${MODELS:-d12 d48}
GEN=${GEN:-256}
mkdir -p "$OUT"
: > "$OUT/rows.tsv"
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt" 2>&1

for m in $MODELS; do
    rm -rf "$OUT/${m}_hf"
    timeout 900 python3 - "$m" "$OUT/${m}_hf" "$GEN" > "$OUT/${m}_hf.log" 2>&1 << 'PYEOF'
import sys, time
import torch
import transformers
name, path, gen = sys.argv[1], sys.argv[2], int(sys.argv[3])
layers, heads, channels = {"d12": (12, 12, 768), "d24": (24, 16, 1024), "d36": (36, 20, 1280),
                           "d48": (48, 25, 1600)}[name]
torch.manual_seed(1)
cfg = transformers.GPT2Config(n_layer=layers, n_head=heads, n_embd=channels, n_positions=1024, vocab_size=50257)
model = transformers.GPT2LMHeadModel(cfg).to(torch.bfloat16)
model.save_pretrained(path)
model = transformers.GPT2LMHeadModel.from_pretrained(path, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
model = model.cuda().eval()
ids = torch.tensor([[50256]], device="cuda")
def run():
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=gen, min_new_tokens=gen,
                         do_sample=False, use_cache=True, pad_token_id=50256)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t
with torch.no_grad():
    run()
    out, dt = run()
n = out.shape[1] - ids.shape[1]
print("transformers %s: %d tokens in %.3f s: %.1f tokens/s" % (transformers.__version__, n, dt, n / dt))
print("first tokens:", out[0, 1:17].tolist())
PYEOF
    tps=$(grep -oE '[0-9.]+ tokens/s' "$OUT/${m}_hf.log" | head -1 | awk '{print $1}')
    printf 'transformers generate() (KV cache)\t%s\t%s\n' "$m" "${tps:--}" >> "$OUT/rows.tsv"
    ckpt="$OUT/${m}.bin"
    "$BIN/export_hf" --import "$OUT/${m}_hf" "$ckpt" --dtype bf16 > "$OUT/${m}_import.log" 2>&1 ||
        { echo "$m: export_hf --import failed ($(tail -1 "$OUT/${m}_import.log"))"; continue; }
    for c in 1 0; do
        [ $c = 0 ] && [ "$m" != d12 ] && continue
        for run in warm timed; do
            timeout 600 "$BIN/train_gpt2cu" --generate -e "$ckpt" -g "$GEN" --top-k 1 --kv-cache $c \
                > "$OUT/${m}_ours_kv${c}_$run.log" 2>&1
        done
        tps=$(grep -oE '[0-9.]+ tokens/s' "$OUT/${m}_ours_kv${c}_timed.log" | head -1 | awk '{print $1}')
        printf 'train_gpt2cu --generate%s\t%s\t%s\n' "$([ $c = 0 ] && echo ' --kv-cache 0')" "$m" "${tps:--}" \
            >> "$OUT/rows.tsv"
    done
    rm -rf "$OUT/${m}_hf" "$ckpt"  # 3 GB each at 1.5B
done

{
    echo "generation at batch 1, $GEN tokens greedy from the end-of-text token, bf16, $(cat "$OUT/gpu.txt")"
    printf '%-40s %-6s %12s\n' program model tokens/s
    while IFS=$'\t' read -r prog model tps; do printf '%-40s %-6s %12s\n' "$prog" "$model" "$tps"; done < "$OUT/rows.tsv"
} | tee "$OUT/table.txt"
