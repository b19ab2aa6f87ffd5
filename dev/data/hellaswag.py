#!/usr/bin/env python3
"""hellaswag.py: builds the HellaSwag eval file that the trainers' -h 1 reads (llm.c's
format, docs/formats.md) from HellaSwag's validation JSONL, with our tokenizer
(build/tokenize, GPT-2's BPE).

  python3 dev/data/hellaswag.py hellaswag_val.jsonl      # -> data/hellaswag/hellaswag_val.bin

The JSONL is HellaSwag's own file (10,042 examples, from the HellaSwag authors'
repository, data/hellaswag_val.jsonl); download it yourself. Each line is an object
with "ctx" (the context), "endings" (four completions) and "label" (the right one,
0..3). As in GPT-2's evaluation, a completion is scored as the text " " + ending after
the context. A bad line is reported as FILE:LINE and nothing is written. Standard
library only.
"""
import argparse
import json
import os
import struct
import subprocess
import sys

MAGIC = 20240522
VERSION = 1
HEADER_INTS = 256
DELIMITER = 65535
COMPLETIONS = 4
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def fail(msg):
    print(f"hellaswag.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_example(line):
    """(context, [4 completions], label) from one JSONL line, or a string saying what is wrong."""
    try:
        ex = json.loads(line)
    except json.JSONDecodeError as e:
        return f"not JSON ({e})"
    if not isinstance(ex, dict):
        return "not an object"
    ctx, endings, label = ex.get("ctx"), ex.get("endings"), ex.get("label")
    if not isinstance(ctx, str) or not ctx:
        return '"ctx" is missing, empty or not a string'
    if (not isinstance(endings, list) or len(endings) != COMPLETIONS
            or not all(isinstance(e, str) and e for e in endings)):
        return f'"endings" is not a list of {COMPLETIONS} non-empty strings'
    if isinstance(label, str) and label.isdigit():  # some copies store it as text
        label = int(label)
    if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < COMPLETIONS:
        return f'"label" is not 0..{COMPLETIONS - 1}'
    return ctx, [" " + e for e in endings], label


def read_examples(path, limit):
    """The examples of the JSONL (the first `limit`, 0: all), every line checked."""
    examples, problems = [], []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if limit and len(examples) >= limit:
                    break
                if line.strip():
                    ex = parse_example(line)
                    if isinstance(ex, str):
                        problems.append(f"{path}:{n}: {ex}")
                    else:
                        examples.append(ex)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    except UnicodeDecodeError as e:
        fail(f"{path} is not UTF-8 text ({e})")
    if problems:
        for p in problems[:20]:
            print(f"hellaswag.py: {p}", file=sys.stderr)
        fail(f"{len(problems)} bad line(s) in {path}; nothing written")
    if not examples:
        fail(f"{path} holds no examples")
    if len(examples) > 65535:
        fail(f"{len(examples)} examples: the eval file numbers them in 16 bits (at most 65535; use --limit)")
    return examples


def tokenize_all(texts, tokenizer):
    """Token lists of texts, through build/tokenize --records."""
    if not os.path.exists(tokenizer):
        print(f"hellaswag.py: {tokenizer} is missing, building it with 'make build/tokenize'")
        if subprocess.run(["make", "-s", "-C", ROOT, "build/tokenize"]).returncode != 0:
            fail("cannot build build/tokenize: run 'make build/tokenize'")
    data = b"".join(struct.pack("<I", len(b)) + b for b in (t.encode("utf-8") for t in texts))
    r = subprocess.run([tokenizer, "--dir", os.path.join(ROOT, "data", "gpt2"), "--binary", "--records"],
                       input=data, capture_output=True)
    if r.returncode != 0:
        fail(f"{tokenizer} failed: {r.stderr.decode(errors='replace').strip()}")
    out, pos, toks = r.stdout, 0, []
    for _ in texts:
        (count,) = struct.unpack_from("<I", out, pos)
        toks.append(list(struct.unpack_from(f"<{count}I", out, pos + 4)))
        pos += 4 + 4 * count
    if pos != len(out):
        fail(f"{tokenizer} wrote {len(out) - pos} unexpected bytes")
    return toks


def build_stream(examples, toks):
    """The examples as llm.c's uint16 stream, and the longest example in bytes."""
    stream, longest, t = [], 0, iter(toks)
    for idx, (_, _, label) in enumerate(examples):
        ctx = next(t)
        ex = [DELIMITER, 0, idx, label, COMPLETIONS, len(ctx)] + ctx
        for _ in range(COMPLETIONS):
            comp = next(t)
            ex += [len(comp)] + comp
        if not ctx or any(v >= DELIMITER for v in ex[2:]):
            fail(f"example {idx}: empty context or a token id >= {DELIMITER}")
        nbytes = 2 * len(ex)
        if nbytes > 65535:
            fail(f"example {idx} takes {nbytes} bytes; the format's size field holds at most 65535")
        ex[1] = nbytes
        longest = max(longest, nbytes)
        stream += ex
    return stream, longest


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("jsonl", help="HellaSwag's validation JSONL (hellaswag_val.jsonl)")
    p.add_argument("-o", "--output", default=os.path.join("data", "hellaswag", "hellaswag_val.bin"),
                   help="the eval file to write (replaced atomically)")
    p.add_argument("--limit", type=int, default=0, help="only the first N examples (0: all)")
    p.add_argument("--tokenize", default=os.path.join(ROOT, "build", "tokenize"), help="our tokenizer's binary")
    a = p.parse_args()
    if a.limit < 0:
        fail("--limit must be >= 0")
    examples = read_examples(a.jsonl, a.limit)
    texts = []
    for ctx, endings, _ in examples:
        texts += [ctx] + endings
    stream, longest = build_stream(examples, tokenize_all(texts, a.tokenize))
    header = [MAGIC, VERSION, len(examples), longest] + [0] * (HEADER_INTS - 4)
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    tmp = a.output + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        f.write(struct.pack(f"<{len(stream)}H", *stream))
    os.replace(tmp, a.output)
    labels = [0] * COMPLETIONS
    for _, _, label in examples:
        labels[label] += 1
    print(f"hellaswag.py: wrote {len(examples)} examples to {a.output} ({os.path.getsize(a.output)} bytes; "
          f"longest example {longest} bytes; labels {labels})")


if __name__ == "__main__":
    main()
