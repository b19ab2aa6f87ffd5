#!/usr/bin/env python3
"""Compares our C tokenizer (build/tokenize) with tiktoken's "gpt2" encoding, token for token.

Corpora:
  (a) Tiny Shakespeare, from $LLMC_DATA_MIRROR/tinyshakespeare/input.txt (default
      ../shared/data relative to the repository root); skipped with a message if absent;
  (b) a mixed multi-script sample written below;
  (c) random strings from a fresh seed (printed; pass --seed N to repeat a run):
      raw random bytes (mostly invalid UTF-8), and random valid code points from all planes.
Every input is also decoded back by our decoder and must give the same bytes.

tiktoken cannot encode invalid UTF-8, so for raw bytes the reference is built from
tiktoken's own pieces: decode with errors="surrogateescape", replace each escaped byte by a
private-use character (class "other", like an invalid byte in our tokenizer), split that
string with tiktoken's pattern (enc._pat_str, `regex` module), check that BPE of those
pieces equals enc.encode_ordinary of the string (this validates the split against tiktoken
itself), then BPE the original bytes of each piece with enc._encode_single_piece.

Usage: python3 dev/test/test_tokenizer.py [--seed N] [--tokenize build/tokenize]
Needs: pip install tiktoken regex; build/tokenize built (see dev/tokenize.c).
"""
import argparse
import os
import random
import struct
import subprocess
import sys
import time
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiktoken_offline import REPO, gpt2_encoding  # noqa: E402

import regex  # noqa: E402

MIXED = "\n".join([
    "Plain English: the quick brown fox doesn't jump; it's lazy. We'll see, they've said, I'd go, you're right, I'm here.",
    "UPPER CASE CONTRACTIONS: IT'S, WE'LL, THEY'VE, I'D, YOU'RE, I'M, DON'T. Mixed: It'S and We'Ll, o'clock, rock 'n' roll.",
    "Quotes: 'single', \"double\", ‘curly’, “curly”, «guillemets», „German“ and a lone ' apostrophe ''s.",
    "Français: élève, garçon, où, déjà, Noël, cœur, ça coûte 12,50 € — très cher !",
    "Deutsch: Straße, Größe, Übermäßig, Fußgängerübergänge. Español: ¿Qué tal? ¡Muy bien! niño, año.",
    "Tiếng Việt: Xin chào, tôi tên là Nguyễn. Polski: zażółć gęślą jaźń. Čeština: příliš žluťoučký kůň.",
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю. Українська: ґанок, їжак, є.",
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. ΑΒΓΔ αβγδ ς.",
    "العربية: مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥٦٧٨٩٠ — עברית: שלום עולם, מה שלומך? ״ציטוט״",
    "हिन्दी: नमस्ते दुनिया, आप कैसे हैं? ०१२३४५६७८९ বাংলা: আমি ভালো আছি। ০১২৩ தமிழ்: வணக்கம் ௧௨௩",
    "中文：你好，世界！我们今天去北京。繁體字：學習與發展。日本語：こんにちは、世界。カタカナとひらがな。漢字。",
    "한국어: 안녕하세요, 세계! 반갑습니다. ᄀᄁᄂ ㄱㄴㄷ",
    "ไทย: สวัสดีครับ โลกนี้สวยงาม ๑๒๓๔๕ ລາວ: ສະບາຍດີ ແຂມ: សួស្តី ភាសាខ្មែរ",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵🇺🇸 ❤️ 🧑🏿‍💻 #️⃣ 1️⃣ ©️ ™",
    "Math & symbols: ∀x ∈ ℝ, ∑ᵢ xᵢ² ≤ ∞; ½ ¾ ⅓ Ⅻ ⓵ ² ³ µ ° ± × ÷ → ⇒ ≠ ≈ √π",
    "Digits of many scripts: 0123456789 ٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ०१२३ ০১২৩ ੦੧੨੩ ๐๑๒๓ ០១២៣ 𝟎𝟏𝟐𝟑 ①②③ 一二三 〇",
    "Numbers: 3.14159 1,000,000 12345678901234567890 0x1F 1e-9 -42 +7 100% $19.99 #1",
    "code: def f(x):\n    return x**2 + 1  # comment\n\tif (a != b && c <= d) { y = a->b; }\n",
    "    int main(void) {\r\n        printf(\"%d\\n\", 42);\r\n    }\r\n",
    "URLs: https://example.com/path?q=a+b&x=1#frag user@mail.example.org C:\\Users\\x\\file.txt",
    "Whitespace:  two  spaces,   three,\t\ttabs,\u00a0nbsp\u00a0\u00a0two,\u3000ideographic\u3000space,\u2003em\u2002en\u2009thin\u200azero\u200bwidth.",
    "Line seps:\u2028para\u2029next\u0085nel\x0bvt\x0cff end.",
    "Long runs:" + " " * 40 + "x" + "\n" * 7 + "y" + "\t \t " * 5 + "z" + "=" * 70 + "-" * 33 + "." * 12,
    "trailing spaces   \n   leading spaces\n\n\n\nblank lines above \r\n\r\n crlf",
    "Combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0352a\u0353l\u0354g\u0355o \u1100\u1161\u11a8",
    "Other planes: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐌰𐌱𐌲 𓀀𓀁 𠀀𠀁 \U00031350 \U000e0041 \U000f0000 \U0010fffd",
    "Unicode 16 letters: \u1c89\u1c8a \ua7cb\ua7cc \U00016d40\U00016d41 \U000105c0 \U00011380 \U0001e5d0 digits \U00016d70\U00016d71",
    "Private use & specials: \ue000\uf8ff \ufeff\ufffd \uffff \x00\x01\x7f end",
    "Number+letter byte merges (a token spans the boundary, so the classes matter): ۶水 ৶水 ߈談 ୶沴",
    "Mixed runs: abc123def ４５６ａｂｃ x²y³ H₂O 3rd 2nd 1st 4th ½cup 10km/h 5'11\" it's'",
    "   ",
])


def run_records(tokenize, texts):
    """Encodes many byte strings with one call of build/tokenize --records."""
    payload = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    p = subprocess.run([tokenize, "--records", "--dir", os.path.join(REPO, "data", "gpt2")],
                       input=payload, capture_output=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {tokenize} --records exited {p.returncode}: {p.stderr.decode(errors='replace')}")
    out, pos, res = p.stdout, 0, []
    for _ in texts:
        (n,) = struct.unpack_from("<I", out, pos)
        pos += 4
        res.append(list(struct.unpack_from(f"<{n}I", out, pos)))
        pos += 4 * n
    if pos != len(out):
        sys.exit("FAIL: --records output has trailing bytes")
    return res


def run_decode(tokenize, tokens):
    p = subprocess.run([tokenize, "--decode", "--binary", "--dir", os.path.join(REPO, "data", "gpt2")],
                       input=struct.pack(f"<{len(tokens)}I", *tokens), capture_output=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {tokenize} --decode exited {p.returncode}: {p.stderr.decode(errors='replace')}")
    return p.stdout


def first_mismatch(ours, ref):
    n = min(len(ours), len(ref))
    for i in range(n):
        if ours[i] != ref[i]:
            return i
    return n if len(ours) != len(ref) else -1


class Checker:
    def __init__(self, enc):
        self.enc = enc
        self.failures = 0

    def compare(self, name, text_bytes, ours, ref):
        i = first_mismatch(ours, ref)
        if i < 0:
            return True
        self.failures += 1
        if self.failures <= 5:
            dec = self.enc.decode_single_token_bytes
            ctx_ref = ref[max(0, i - 5): i + 6]
            ctx_ours = ours[max(0, i - 5): i + 6]
            print(f"MISMATCH in {name} at token {i} (ours {len(ours)} tokens, tiktoken {len(ref)})")
            print(f"  input ({len(text_bytes)} bytes): {text_bytes[:300]!r}{'...' if len(text_bytes) > 300 else ''}")
            print(f"  tiktoken: {ctx_ref} = {[dec(t) for t in ctx_ref]}")
            print(f"  ours:     {ctx_ours} = {[dec(t) for t in ctx_ours if t < self.enc.n_vocab]}")
        return False


def reference_for_bytes(enc, pat, b):
    """tiktoken's tokens for arbitrary bytes b (see the module docstring); None to skip."""
    s = b.decode("utf-8", errors="surrogateescape")
    # Characters whose class differs between the `regex` module's Unicode version and
    # tiktoken's (letters/numbers added after Unicode 14) would make the split disagree with
    # tiktoken's; such strings are skipped (only random raw bytes can hit this, rarely).
    for ch in s:
        if ord(ch) > 0x7F and not 0xDC80 <= ord(ch) <= 0xDCFF and unicodedata.category(ch) == "Cn" \
                and regex.match(r"[\p{L}\p{N}]", ch):
            return None
    chars, raw = [], []
    pos = 0
    for ch in s:  # map every character of s back to its original bytes
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            chars.append("\ue000")
            raw.append(bytes([ord(ch) - 0xDC00]))
        else:
            chars.append(ch)
            raw.append(ch.encode("utf-8"))
    s2 = "".join(chars)
    starts = [0]
    for r in raw:
        starts.append(starts[-1] + len(r))
    assert starts[-1] == len(b)
    pieces_tokens, raw_tokens = [], []
    for m in pat.finditer(s2):
        pieces_tokens += enc._encode_single_piece(m.group().encode("utf-8"))
        raw_tokens += enc._encode_single_piece(b[starts[m.start()]:starts[m.end()]])
    if pieces_tokens != enc.encode_ordinary(s2):
        raise AssertionError(f"regex split of {s2!r} does not reproduce tiktoken's tokens: fix the test")
    return raw_tokens


def random_code_point(rng):
    while True:
        r = rng.random()
        if r < 0.25:
            cp = rng.choice(b" \t\n\r'sdmtlvreLSDMT0123456789aZ!?.,-=_").__int__()
        elif r < 0.35:
            cp = rng.choice([0xA0, 0x85, 0x2028, 0x2029, 0x3000, 0x2003, 0x1680, 0x200B, 0xFEFF, 0x0B, 0x0C])
        elif r < 0.55:
            cp = rng.randrange(0x80, 0x800)
        elif r < 0.75:
            cp = rng.randrange(0x800, 0x10000)
        else:
            cp = rng.randrange(0x10000, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF:
            return cp


def random_valid_string(rng):
    n = rng.choice([1, 2, 3, 5, 8, 20, 60, 200])
    return "".join(chr(random_code_point(rng)) for _ in range(n))


def random_raw_bytes(rng):
    n = rng.choice([1, 2, 3, 5, 8, 20, 60, 200])
    out = bytearray()
    while len(out) < n:
        r = rng.random()
        if r < 0.45:
            out.append(rng.randrange(256))
        elif r < 0.65:
            out += rng.choice([b" ", b"  ", b"\n", b"'", b"'s", b"'ll", b"a", b"Zz", b"7", b"!", b"\t", b"\r\n"])
        elif r < 0.8:
            out += chr(random_code_point(rng)).encode("utf-8")
        else:  # a truncated or damaged multi-byte sequence
            e = bytearray(chr(random_code_point(rng)).encode("utf-8"))
            if len(e) > 1:
                if rng.random() < 0.5:
                    e = e[:rng.randrange(1, len(e))]
                else:
                    e[rng.randrange(1, len(e))] = rng.randrange(256)
            out += e
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--tokenize", default=os.path.join(REPO, "build", "tokenize"))
    ap.add_argument("--count", type=int, default=10000, help="random strings of each kind")
    args = ap.parse_args()
    if not os.path.exists(args.tokenize):
        sys.exit(f"FAIL: {args.tokenize} not found: build it first (gcc -O3 -march=native -fopenmp "
                 f"-Icommon dev/tokenize.c -o build/tokenize)")
    t0 = time.time()
    enc = gpt2_encoding()
    pat = regex.compile(enc._pat_str)
    chk = Checker(enc)
    compared = 0
    all_inputs, all_tokens = [], []

    # (a) Tiny Shakespeare
    mirror = os.environ.get("LLMC_DATA_MIRROR", os.path.join(REPO, "..", "shared", "data"))
    ts = os.path.join(mirror, "tinyshakespeare", "input.txt")
    if os.path.exists(ts):
        data = open(ts, "rb").read()
        ours = run_records(args.tokenize, [data])[0]
        ref = enc.encode_ordinary(data.decode("utf-8"))
        chk.compare("tinyshakespeare", data, ours, ref)
        compared += len(ref)
        all_inputs.append(data)
        all_tokens += ours
        print(f"(a) Tiny Shakespeare: {len(data)} bytes, {len(ref)} tokens compared")
    else:
        print(f"(a) SKIPPED: Tiny Shakespeare not found at {ts} (set LLMC_DATA_MIRROR)")

    # (b) mixed sample: whole, and line by line
    texts = [MIXED] + MIXED.split("\n")
    texts_b = [t.encode("utf-8") for t in texts]
    ours_list = run_records(args.tokenize, texts_b)
    n_b = 0
    for i, (t, tb, ours) in enumerate(zip(texts, texts_b, ours_list)):
        ref = enc.encode_ordinary(t)
        chk.compare(f"mixed sample part {i}", tb, ours, ref)
        n_b += len(ref)
        all_inputs.append(tb)
        all_tokens += ours
    compared += n_b
    print(f"(b) mixed sample: {len(texts)} strings, {len(MIXED.encode())} bytes, {n_b} tokens compared")

    # (c) random strings
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"(c) random strings, seed {seed} (rerun with --seed {seed})")
    rng = random.Random(seed)
    valid = [random_valid_string(rng) for _ in range(args.count)]
    valid_b = [v.encode("utf-8") for v in valid]
    ours_list = run_records(args.tokenize, valid_b)
    n_c1 = 0
    for i, (v, vb, ours) in enumerate(zip(valid, valid_b, ours_list)):
        ref = enc.encode_ordinary(v)
        chk.compare(f"random valid string {i}", vb, ours, ref)
        n_c1 += len(ref)
        all_inputs.append(vb)
        all_tokens += ours
    raw = [random_raw_bytes(rng) for _ in range(args.count)]
    ours_list = run_records(args.tokenize, raw)
    n_c2 = skipped = invalid = 0
    for i, (b, ours) in enumerate(zip(raw, ours_list)):
        ref = reference_for_bytes(enc, pat, b)
        all_inputs.append(b)
        all_tokens += ours
        if ref is None:
            skipped += 1
            continue
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            invalid += 1
        chk.compare(f"random raw bytes {i}", b, ours, ref)
        n_c2 += len(ref)
    compared += n_c1 + n_c2
    print(f"    {len(valid)} strings of random code points: {n_c1} tokens compared")
    print(f"    {len(raw)} strings of random bytes ({invalid} not valid UTF-8, {skipped} skipped): "
          f"{n_c2} tokens compared")

    # round trip through our decoder: decode(encode(x)) == x for every input above
    back = run_decode(args.tokenize, all_tokens)
    joined = b"".join(all_inputs)
    if back != joined:
        chk.failures += 1
        i = next((k for k in range(min(len(back), len(joined))) if back[k] != joined[k]), min(len(back), len(joined)))
        print(f"MISMATCH: decode(encode(x)) != x at byte {i}: {back[max(0, i - 20):i + 20]!r} vs {joined[max(0, i - 20):i + 20]!r}")
    else:
        print(f"round trip: decode(encode(x)) == x for all {len(all_inputs)} inputs ({len(joined)} bytes)")

    print(f"total: {compared} tokens compared with tiktoken, {chk.failures} mismatches, {time.time() - t0:.1f} s")
    if chk.failures:
        print("FAIL")
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
