#!/usr/bin/env python3
"""Encoding speed of our tokenizer (build/tokenize --bench) beside tiktoken's, on Tiny
Shakespeare: 1 thread and all threads. tiktoken runs encode_ordinary on the whole text and
encode_ordinary_batch(num_threads=all) on the same chunks our parallel encoder uses (cut at
safe points by the rule of tokenizer_safe_split in common/tokenizer.h). MB = 1e6 bytes.

Usage: python3 dev/bench_tokenizer.py [--file FILE] [--threads N] [--repeat N]
"""
import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "test"))
from tiktoken_offline import REPO, gpt2_encoding  # noqa: E402


def safe_split(b, n, i):  # mirrors tokenizer_safe_split
    if i == 0 or i >= n or b[i - 1] != 0x0A:
        return False
    if b[i] == 0x0A:
        return i + 1 < n and 0x20 < b[i + 1] < 0x7F
    return i >= 2 and 0x20 < b[i] < 0x7F and 0x20 < b[i - 2] < 0x7F


def chunks(b, nthreads):  # mirrors make_chunks/encode_parallel in dev/tokenize.c
    n = len(b)
    target = max(1 << 16, n // (nthreads * 8) + 1)
    cuts, pos = [0], 0
    while pos < n:
        nxt = n
        if pos + target < n:
            nxt = pos + target
            while nxt < n and not safe_split(b, n, nxt):
                nxt += 1
        cuts.append(nxt)
        pos = nxt
    return [b[cuts[i]:cuts[i + 1]] for i in range(len(cuts) - 1)]


def best_of(repeat, fn):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main():
    mirror = os.environ.get("LLMC_DATA_MIRROR", os.path.join(REPO, "..", "shared", "data"))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", default=os.path.join(mirror, "tinyshakespeare", "input.txt"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tokenize", default=os.path.join(REPO, "build", "tokenize"))
    args = ap.parse_args()
    if not os.path.exists(args.file):
        sys.exit(f"error: {args.file} not found (set LLMC_DATA_MIRROR or pass --file)")
    if not os.path.exists(args.tokenize):
        sys.exit(f"error: {args.tokenize} not found: build it first")

    p = subprocess.run([args.tokenize, "--dir", os.path.join(REPO, "data", "gpt2"), "--bench", args.file,
                        "--threads", str(args.threads), "--repeat", str(args.repeat)],
                       capture_output=True, text=True)
    m = re.search(r"RESULT bytes=(\d+) tokens=(\d+) threads=(\d+) chunks=(\d+) mbps_1=([\d.]+) "
                  r"mbps_n=([\d.]+) equal=(\d)", p.stdout)
    if p.returncode != 0 or not m:
        sys.exit(f"error: {args.tokenize} --bench failed: {p.stdout}{p.stderr}")
    nbytes, ntok, _, nchunks, ours1, oursn, equal = m.groups()

    enc = gpt2_encoding()
    data = open(args.file, "rb").read()
    text = data.decode("utf-8")
    parts = [c.decode("utf-8") for c in chunks(data, args.threads)]
    t1, ref = best_of(args.repeat, lambda: enc.encode_ordinary(text))
    tn, batch = best_of(args.repeat, lambda: enc.encode_ordinary_batch(parts, num_threads=args.threads))
    joined = [t for b in batch for t in b]
    mb = len(data) / 1e6

    print(f"{os.path.basename(os.path.dirname(args.file)) or args.file}: {len(data)} bytes, {len(ref)} tokens; "
          f"{args.threads} threads, {len(parts)} chunks; best of {args.repeat}; MB/s (1 MB = 1e6 bytes)")
    print(f"{'encoder':<44}{'1 thread':>10}{f'{args.threads} threads':>12}")
    print(f"{'ours (common/tokenizer.h, build/tokenize)':<44}{float(ours1):>10.2f}{float(oursn):>12.2f}")
    print(f"{'tiktoken ' + __import__('tiktoken').__version__ + ' encode_ordinary(_batch)':<44}"
          f"{mb / t1:>10.2f}{mb / tn:>12.2f}")
    ok = int(ntok) == len(ref) and equal == "1" and joined == ref and int(nchunks) == len(parts)
    print("token counts agree; chunked results equal whole-text results" if ok else
          f"WARNING: results disagree (ours {ntok} tokens, equal={equal}, chunks {nchunks} vs {len(parts)}; "
          f"tiktoken {len(ref)} tokens, chunked equal={joined == ref})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
