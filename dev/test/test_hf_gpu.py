"""test_hf_gpu.py: an exported model in Hugging Face transformers, on the GPU host.

Loads DIR (written by build/export_hf) with GPT2LMHeadModel.from_pretrained, computes the
mean loss of the first B x T batch of a token shard (the batch train_gpt2cu's validation
reads first, -m 1), compares it with the loss train_gpt2cu printed for that batch, and
checks that generate() runs. Prints one line per check and "N passed, M failed".

  python3 dev/test/test_hf_gpu.py DIR SHARD B T OUR_LOSS [--rtol 1e-2]
"""
import argparse
import struct
import sys

import numpy as np
import torch
from transformers import GPT2LMHeadModel

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("shard")
ap.add_argument("B", type=int)
ap.add_argument("T", type=int)
ap.add_argument("our_loss", type=float)
ap.add_argument("--rtol", type=float, default=1e-2, help="relative tolerance (bf16 checkpoints: 1e-2)")
a = ap.parse_args()

passed = failed = 0


def check(ok, what):
    global passed, failed
    passed += ok
    failed += not ok
    print("%s %s" % ("ok  " if ok else "FAIL", what))


with open(a.shard, "rb") as f:
    header = struct.unpack("<256i", f.read(1024))
    if header[0] != 20240520 or header[1] != 1:
        sys.exit("error: %s is not a uint16 token shard" % a.shard)
    n = a.B * a.T + 1
    tokens = np.frombuffer(f.read(2 * n), dtype=np.uint16).astype(np.int64)
if len(tokens) < n:
    sys.exit("error: %s holds fewer than B*T+1 tokens" % a.shard)
dev = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT2LMHeadModel.from_pretrained(a.dir, torch_dtype=torch.float32).to(dev).eval()
x = torch.tensor(tokens[:-1].reshape(a.B, a.T), device=dev)
y = torch.tensor(tokens[1:].reshape(a.B, a.T), device=dev)
with torch.no_grad():
    logits = model(x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item()
rel = abs(loss - a.our_loss) / abs(a.our_loss)
check(rel <= a.rtol, "transformers' loss %.6f vs train_gpt2cu's %.6f: relative %.2e (tolerance %.0e)"
      % (loss, a.our_loss, rel, a.rtol))
with torch.no_grad():
    out = model.generate(x[:1, :8], max_new_tokens=16, do_sample=False, pad_token_id=50256)
check(out.shape == (1, 24), "generate: 16 new tokens after an 8-token prompt (%s)" % (tuple(out.shape),))
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
