#!/usr/bin/env python3
"""hellaswag_ref.py: the PyTorch reference of the trainers' HellaSwag score (-h 1).

Loads a model (our or llm.c's checkpoint, or a Hugging Face GPT-2 directory) with
dev/gpt2_ref.py, reads a HellaSwag eval file (llm.c's format, docs/formats.md) with a
reader of its own, and scores every example: each completion runs alone, unpadded,
after the context (of context + completion, the last T+1 tokens when longer); the
answer is the completion with the lowest mean loss over its tokens, ties to the lower
index. Prints "hellaswag: correct C of N (accuracy A)" last; --choices FILE writes the
chosen completion of every example, one per line.

  /usr/bin/python3 dev/hellaswag_ref.py --load log/run/model_00000100.bin \\
      --file data/hellaswag/hellaswag_val.bin --seq-len 64
"""
import argparse
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_ref import GPT2, RefError, load_model  # noqa: E402

MAGIC, VERSION, HEADER_INTS, DELIMITER, COMPLETIONS = 20240522, 1, 256, 65535, 4


def read_eval_file(path):
    """[(label, context, [completions])] from the file; anything malformed raises RefError."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 * HEADER_INTS:
        raise RefError("%s: shorter than the header" % path)
    hd = struct.unpack_from("<%di" % HEADER_INTS, data, 0)
    if hd[0] != MAGIC or hd[1] != VERSION:
        raise RefError("%s: not a version %d HellaSwag eval file" % (path, VERSION))
    body = data[4 * HEADER_INTS:]
    words = struct.unpack("<%dH" % (len(body) // 2), body[:len(body) // 2 * 2])
    out, at = [], 0
    for i in range(hd[2]):
        if at + 6 > len(words) or words[at] != DELIMITER or words[at + 4] != COMPLETIONS:
            raise RefError("%s: example %d is malformed" % (path, i))
        end, label, p = at + words[at + 1] // 2, words[at + 3], at + 5
        parts = []
        for _ in range(1 + COMPLETIONS):
            n = words[p]
            parts.append(list(words[p + 1:p + 1 + n]))
            p += 1 + n
        if p != end:
            raise RefError("%s: example %d: its size disagrees with its parts" % (path, i))
        out.append((label, parts[0], parts[1:]))
        at = end
    if at != len(words):
        raise RefError("%s: bytes after the last example" % path)
    return out


def mean_completion_loss(model, ctx, comp, T):
    seq = (ctx + comp)[-(T + 1):]
    scored = min(len(comp), len(seq) - 1)  # the completion tokens among the kept targets
    x = torch.tensor([seq[:-1]])
    y = torch.tensor(seq[1:])
    logits, _ = model(x)
    losses = F.cross_entropy(logits[0].double(), y, reduction="none")
    return losses[-scored:].mean().item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--load", required=True, help="checkpoint or Hugging Face GPT-2 directory")
    p.add_argument("--file", required=True, help="HellaSwag eval file")
    p.add_argument("--seq-len", "-T", type=int, default=1024, help="the trainer's T (rows of T+1 tokens)")
    p.add_argument("--choices", help="write each example's chosen completion here, one per line")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    try:
        cfg, params = load_model(a.load, None)
        examples = read_eval_file(a.file)
    except (RefError, OSError) as e:
        print("hellaswag_ref: error: %s" % e, file=sys.stderr)
        return 1
    if a.seq_len < 1 or a.seq_len > cfg.maxT:
        print("hellaswag_ref: error: --seq-len must be in 1..%d" % cfg.maxT, file=sys.stderr)
        return 1
    model = GPT2(cfg, params).eval()
    correct, choices = 0, []
    with torch.no_grad():
        for label, ctx, comps in examples:
            means = [mean_completion_loss(model, ctx, c, a.seq_len) for c in comps]
            pick = min(range(COMPLETIONS), key=lambda c: (means[c], c))
            choices.append(pick)
            correct += pick == label
    if a.choices:
        with open(a.choices, "w") as f:
            f.write("".join("%d\n" % c for c in choices))
    print("hellaswag: correct %d of %d (accuracy %.4f)" % (correct, len(examples), correct / len(examples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
