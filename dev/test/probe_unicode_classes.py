#!/usr/bin/env python3
"""Probes, for every code point, the character class that tiktoken's gpt2 splitting implies,
and compares it with common/unicode_tables.h (and, for the record, with utf8proc and the
`regex` module when they are present). Not part of the test suite: it takes a few minutes.

Two probes are exact, whatever BPE does with the bytes of X:
  X + "'s"          ends with the token "'s" (338) unless X is "other" (then "'" joins X's
                    run and the text ends with the token "s", 82);
  "\\n\\n" + X + "a"  starts with the token "\\n\\n" (628) iff X is white space (a white space
                    run followed by a letter leaves its last character alone; if X is not
                    white space the run is "\\n\\n" itself and splits as "\\n", "\\n").
So tiktoken's sets of white space and of letters-or-numbers are measured exactly. Letter vs
number is only visible through BPE merges, so the third probe compares our tokens with
tiktoken's on  "a" + X + "b1" + X + "2 " + X + "!" + X + "  " + X + X  for every X.

Usage: python3 dev/test/probe_unicode_classes.py [--tokenize build/tokenize]
"""
import argparse
import ctypes
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiktoken_offline import REPO, gpt2_encoding  # noqa: E402


def load_table():
    path = os.path.join(REPO, "common", "unicode_tables.h")
    src = open(path).read()

    def array(name):
        body = src[src.index(name + "TOKUNI_NRANGES] = {"):]
        body = body[body.index("{") + 1: body.index("}")]
        return [int(x, 0) for x in body.replace("\n", " ").split(",") if x.strip()]

    starts, classes = array("tokuni_range_start["), array("tokuni_range_class[")
    cls = [0] * 0x110000
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else 0x110000
        cls[s:e] = [classes[k]] * (e - s)
    return cls


def run_records(tokenize, texts):
    payload = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    p = subprocess.run([tokenize, "--records", "--dir", os.path.join(REPO, "data", "gpt2")],
                       input=payload, capture_output=True, check=True)
    out, pos, res = p.stdout, 0, []
    for _ in texts:
        (n,) = struct.unpack_from("<I", out, pos)
        res.append(list(struct.unpack_from(f"<{n}I", out, pos + 4)))
        pos += 4 + 4 * n
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenize", default=os.path.join(REPO, "build", "tokenize"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    t0 = time.time()
    enc = gpt2_encoding()
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    a = enc.encode_ordinary_batch([chr(c) + "'s" for c in cps], num_threads=args.threads)
    b = enc.encode_ordinary_batch(["\n\n" + chr(c) + "a" for c in cps], num_threads=args.threads)
    tk_ws, tk_ln = set(), set()
    for c, ta, tb in zip(cps, a, b):
        assert ta[-1] in (338, 82) and tb[0] in (628, 198), hex(c)
        if tb[0] == 628:
            tk_ws.add(c)
        elif ta[-1] == 338:
            tk_ln.add(c)
    del a, b
    print(f"tiktoken implies: {len(tk_ln)} letters-or-numbers, {len(tk_ws)} white space "
          f"({time.time() - t0:.0f} s)")

    ours = load_table()
    our_ws = {c for c in cps if ours[c] == 3}
    our_ln = {c for c in cps if ours[c] in (1, 2)}
    bad = (our_ws ^ tk_ws) | (our_ln ^ tk_ln)
    print(f"common/unicode_tables.h: {len(our_ln)} letters-or-numbers, {len(our_ws)} white space; "
          f"code points classed differently from tiktoken: {len(bad)} {[hex(c) for c in sorted(bad)[:10]]}")

    try:
        u = ctypes.CDLL("libutf8proc.so.2")
        u.utf8proc_version.restype = ctypes.c_char_p
        up_ln = {c for c in cps if u.utf8proc_category(c) in (1, 2, 3, 4, 5, 9, 10, 11)}
        d = up_ln ^ tk_ln
        print(f"utf8proc {u.utf8proc_version().decode()}: letters-or-numbers differ from tiktoken on "
              f"{len(d)} code points, e.g. {[hex(c) for c in sorted(d)[:6]]}")
    except OSError:
        print("utf8proc: libutf8proc.so.2 not found, not compared")
    try:
        import regex
        rg = regex.compile(r"[\p{L}\p{N}]")
        rg_ln = {c for c in cps if rg.match(chr(c))}
        d = rg_ln ^ tk_ln
        print(f"regex module {regex.__version__}: letters-or-numbers differ from tiktoken on {len(d)} "
              f"code points, e.g. {[hex(c) for c in sorted(d)[:6]]}")
    except ImportError:
        pass

    texts = ["a" + x + "b1" + x + "2 " + x + "!" + x + "  " + x + x for x in map(chr, cps)]
    ref = enc.encode_ordinary_batch(texts, num_threads=args.threads)
    got = run_records(args.tokenize, [t.encode("utf-8") for t in texts])
    diff = [c for c, r, g in zip(cps, ref, got) if r != g]
    print(f"context probe: our tokens differ from tiktoken's for {len(diff)} of {len(cps)} code points "
          f"{[hex(c) for c in diff[:10]]} ({time.time() - t0:.0f} s)")
    sys.exit(1 if bad or diff else 0)


if __name__ == "__main__":
    main()
