#!/usr/bin/env bash
# test_prepro.sh: tests of dev/data/prepro.c. Builds it with AddressSanitizer and
# UBSan into build/, writes its inputs and outputs under build/test_prepro/, and checks:
#   - JSONL with escapes, \uXXXX, surrogate pairs, raw UTF-8, other fields, blank lines
#     (tokens equal tiktoken's gpt2 encoding of Python's json.loads of each line)
#   - malformed JSONL lines fail with the file name and line number
#   - output is byte-identical for 1 and 2 threads and with or without cutting long
#     documents into pieces (Tiny Shakespeare and a synthetic text full of cut traps),
#     and equal to tiktoken
#   - Tiny Shakespeare in llm.c's convention equals a Python reference of it; with
#     --text-docs blank-lines a line of spaces, tabs or \r is blank too (CRLF files)
#   - train shard splitting, stale shard removal, --val-fraction, error exits (bad flag
#     values, a directory given as --input, as build/tokenize's input or as vocab.bpe)
#   - inputs refused before any shard is in place, leaving the output directory as it was:
#     no text at all, or too few tokens for a val and a train part of 2 tokens each
#   - inputs accepted however many shards close before the split is known to be good: one
#     document without a safe cut longer than the val shard and two train shards, many
#     documents without text before the first text (tokens equal build/tokenize's)
# The tiktoken comparisons need python3 with tiktoken (dev/test/tiktoken_offline.py
# loads it without a network); without it they are skipped. Tiny Shakespeare comes from
# data/tinyshakespeare/input.txt or $LLMC_DATA_MIRROR (default ../shared/data).
# Usage (from anywhere): dev/test/test_prepro.sh   Final line: "N passed, M failed, K skipped";
# exit 1 if any failed, else 77 if any were skipped (run_all.sh's code for skipped), else 0.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
T=build/test_prepro
BIN=build/prepro_asan
rm -rf "$T"
mkdir -p "$T"
echo "building $BIN"
gcc -std=c11 -O1 -g -fopenmp -Wall -Wextra -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -o "$BIN" dev/data/prepro.c || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }

. dev/test/testlib.sh

# run NAME ARGS...: runs prepro quietly, its output in $T/NAME.log; returns its status
run() {
    local name="$1"; shift
    "$BIN" "$@" >"$T/$name.log" 2>&1
}

HAVE_TIKTOKEN=0
if python3 -c "import sys; sys.path.insert(0, 'dev/test'); import tiktoken_offline, tiktoken" 2>/dev/null; then
    HAVE_TIKTOKEN=1
fi

# Python helper: reads shards, builds reference token streams.
cat >"$T/check.py" <<'PYEOF'
import glob, json, re, struct, sys, os
sys.path.insert(0, "dev/test")
EOT = 50256

def read_shard(path):
    data = open(path, "rb").read()
    assert len(data) >= 1024, f"{path}: short"
    h = struct.unpack("<256i", data[:1024])
    assert h[0] == 20240520 and h[1] == 1, f"{path}: bad header {h[:3]}"
    n = h[2]
    assert len(data) == 1024 + 2 * n, f"{path}: count {n} vs size {len(data)}"
    return list(struct.unpack(f"<{n}H", data[1024:]))

def shards(d, name):
    val = sorted(glob.glob(f"{d}/{name}_val_*.bin"))
    train = sorted(glob.glob(f"{d}/{name}_train_*.bin"))
    return val, train

def all_tokens(d, name):
    val, train = shards(d, name)
    out = []
    for p in val + train:
        out += read_shard(p)
    return out

def enc():
    import tiktoken_offline
    return tiktoken_offline.gpt2_encoding()

def ref_jsonl(path):
    e = enc()
    out = []
    for line in open(path, "rb"):
        s = line.decode("utf-8")
        if not s.strip():
            continue
        out.append(EOT)
        out += e.encode_ordinary(json.loads(s)["text"])
    return out

def ref_text(path, mode):
    e = enc()
    text = open(path, "rb").read().decode("utf-8")
    if mode == "whole":
        return [EOT] + e.encode_ordinary(text)
    # a document ends after each blank line (spaces, tabs and \r count as blank), each
    # keeping its separator: on text without such lines, llm.c's text.split("\n\n")
    # (dev/data/tinyshakespeare.py), separators added back
    ends = [m.end() for m in re.finditer(r"\n[ \t\r]*\n", text)] + [len(text)]
    out = []
    for a, b in zip([0] + ends[:-1], ends):
        out.append(EOT)
        out += e.encode_ordinary(text[a:b])
    return out

def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))

cmd = sys.argv[1]
if cmd == "count_eot":  # dir name expected
    toks = all_tokens(sys.argv[2], sys.argv[3])
    n = toks.count(EOT)
    if n != int(sys.argv[4]):
        sys.exit(f"{n} end-of-text tokens, expected {sys.argv[4]}")
elif cmd in ("ref_jsonl", "ref_text"):  # input dir name [mode]
    got = all_tokens(sys.argv[3], sys.argv[4])
    want = ref_jsonl(sys.argv[2]) if cmd == "ref_jsonl" else ref_text(sys.argv[2], sys.argv[5])
    if got != want:
        i = first_diff(got, want)
        sys.exit(f"tokens differ from the reference at {i} (got {len(got)}, want {len(want)}): "
                 f"{got[max(0,i-3):i+4]} vs {want[max(0,i-3):i+4]}")
elif cmd == "counts":  # dir name -> "val train nshards"
    val, train = shards(sys.argv[2], sys.argv[3])
    nv = sum(len(read_shard(p)) for p in val)
    nt = sum(len(read_shard(p)) for p in train)
    print(nv, nt, len(train))
elif cmd == "sizes":  # dir name -> each shard's token count, val first
    val, train = shards(sys.argv[2], sys.argv[3])
    print(" ".join(str(len(read_shard(p))) for p in val + train))
elif cmd == "ref_tokenize":  # input dir name text|jsonl: against build/tokenize, document by document
    import array, subprocess
    def tokenize(data):
        out = subprocess.run(["build/tokenize", "--binary"], input=data, capture_output=True, check=True).stdout
        return list(array.array("I", out))
    if sys.argv[5] == "text":
        docs = [open(sys.argv[2], "rb").read()]
    else:
        docs = [json.loads(l)["text"].encode() for l in open(sys.argv[2], "rb") if l.strip()]
    want = []
    for d in docs:
        want += [EOT] + tokenize(d)
    got = all_tokens(sys.argv[3], sys.argv[4])
    if got != want:
        i = first_diff(got, want)
        sys.exit(f"tokens differ from build/tokenize's at {i} (got {len(got)}, want {len(want)})")
elif cmd == "same_stream":  # dir1 name1 dir2 name2
    a = all_tokens(sys.argv[2], sys.argv[3])
    b = all_tokens(sys.argv[4], sys.argv[5])
    if a != b:
        sys.exit(f"token streams differ at {first_diff(a, b)}")
elif cmd == "tricky":  # write a synthetic text full of places where a naive cut is wrong
    import random
    r = random.Random(1234)
    frags = ["word", "Word", " word", "  word", "\n", "\n\n", "\n\n\n", " \n", "  \n", "\t\n",
             "\r\n", "x\n", ".\n", "!\n", "'s", "'s\n", "'ll", " 's", "123", " 456", "7\n", "\u00e9",
             "\u00e9\n", " caf\u00e9", "\u4e2d\u6587", "\u4e2d\n", "\U0001F600", "\U0001F600\n",
             "\u00a0", "\u00a0\n", "\u3000\n", " ", "   ", "...", "--\n", "\"quoted\"\n", "(x)\n",
             "\u2028", "\u0085\n", "a\u0301\n", "\u0663\u0664\n", " \u00bd\n", "_\n", "~\n"]
    out = []
    size = 0
    while size < int(sys.argv[3]):
        f = r.choice(frags)
        out.append(f)
        size += len(f.encode())
    open(sys.argv[2], "wb").write("".join(out).encode("utf-8"))
else:
    sys.exit("unknown command " + cmd)
PYEOF
py() { python3 "$T/check.py" "$@"; }

# ---------------------------------------------------------------------------------------
# JSONL: escapes and unicode
J="$T/good.jsonl"
{
    printf '%s\n' '{"text": "Hello, world!\n"}'
    printf '%s' '{"id": 7, "meta": {"a": [1, -2.5e-3, 0, true, false, null, "x\"y", {}], "b": []}, '
    printf '%s\n' '"text": "caf\u00e9 na\u00EFve \u4e2d\u6587 \ud83d\ude00 tab\there \\ slash\/ quote\" \b\f\r end"}'
    printf '%s\n' '{"text": "raw UTF-8: café 日本語 😀 ünïcödé"}'
    printf '\n'
    printf '%s\r\n' '  {"\u0074ext" : "escaped key, CRLF line" , "other": "x"}  '
    printf '%s\n' '{"text": ""}'
    printf '%s\n' '{"text": "first", "text": "the last one wins"}'
    printf '%s' '{"text":"nul \u0000 inside, no final newline"}'
} >"$J"
if run jsonl_good --input "$J" --format jsonl --out-dir "$T/jg" --name j --val-tokens 0 \
    && py count_eot "$T/jg" j 7 >"$T/jsonl_good.check" 2>&1; then
    ok "jsonl: parses escapes, unicode, other fields, blank lines (7 documents)"
else
    bad "jsonl: parse (see $T/jsonl_good.log, $T/jsonl_good.check)"
fi
if [ "$HAVE_TIKTOKEN" = 1 ]; then
    if py ref_jsonl "$J" "$T/jg" j >"$T/jsonl_ref.check" 2>&1; then
        ok "jsonl: tokens equal tiktoken(json.loads(line)['text']) with end-of-text tokens"
    else
        bad "jsonl: tokens vs tiktoken: $(cat "$T/jsonl_ref.check")"
    fi
else
    skip "jsonl: tokens vs tiktoken (python3 tiktoken not available)"
fi

# ---------------------------------------------------------------------------------------
# JSONL: malformed lines fail naming the file and the line
bad_line() { # description, line content (printf %s), expected text in the message
    local f="$T/bad.jsonl"
    {
        printf '%s\n' '{"text": "fine"}' '{"text": "also fine"}' ''
        printf '%s\n' "$2"
        printf '%s\n' '{"text": "after"}'
    } >"$f"
    if run bad_jsonl --input "$f" --format jsonl --out-dir "$T/jb" --name b --val-tokens 0; then
        bad "jsonl: $1 accepted"
    elif [ -e "$T/jb" ]; then
        bad "jsonl: $1: the refused run left $T/jb: $(ls -A "$T/jb")"
    elif grep -q "^error: .*$f:4: .*$3" "$T/bad_jsonl.log"; then
        ok "jsonl: $1 -> $(grep -m1 '^error:' "$T/bad_jsonl.log" | sed "s|$f|bad.jsonl|")"
    else
        bad "jsonl: $1: message lacks '$f:4:' or '$3': $(cat "$T/bad_jsonl.log")"
    fi
}
bad_line "unterminated string" '{"text": "abc}' "unterminated string"
bad_line "unpaired high surrogate" '{"text": "\ud800 x"}' "surrogate"
bad_line "unpaired low surrogate" '{"text": "\udc00"}' "surrogate"
bad_line "unknown escape" '{"text": "\q"}' "escape"
bad_line "bad \\u hex" '{"text": "\u12g4"}' "hex"
bad_line "missing text field" '{"txt": "no text"}' "no \"text\" field"
bad_line "text not a string" '{"text": 5}' "not a string"
bad_line "trailing garbage" '{"text": "a"} x' "extra characters"
bad_line "not an object" '["text", "a"]' "not a JSON object"
bad_line "trailing comma" '{"text": "a",}' "string key"
bad_line "raw control character" "$(printf '{"text": "tab\there"}')" "control character"
bad_line "invalid UTF-8" "$(printf '{"text": "bad \xff byte"}')" "invalid UTF-8"
bad_line "overlong UTF-8" "$(printf '{"text": "\xc0\xaf"}')" "invalid UTF-8"
bad_line "bad number" '{"n": 01, "text": "a"}' "expected ','"
bad_line "bad literal" '{"n": nul, "text": "a"}' "invalid value"

# ---------------------------------------------------------------------------------------
# --text-docs blank-lines: a line holding only spaces, tabs or \r is blank (CRLF files)
printf 'First para.\r\nline two\r\n\r\nSecond\r\n\nThird\n \t\r\nFourth\r\n\r\n' >"$T/crlf.txt"
if run crlf --input "$T/crlf.txt" --text-docs blank-lines --out-dir "$T/crlf" --name c --val-tokens 0 &&
   py count_eot "$T/crlf" c 5 >"$T/crlf.check" 2>&1; then
    ok "blank-lines: \\r\\n\\r\\n, \\r\\n\\n and a line of spaces, tabs and \\r end documents (5, the last empty)"
else
    bad "blank-lines with CRLF: $(cat "$T/crlf.log" "$T/crlf.check")"
fi
if [ "$HAVE_TIKTOKEN" = 1 ]; then
    if py ref_text "$T/crlf.txt" "$T/crlf" c blank-lines >"$T/crlf_ref.check" 2>&1; then
        ok "blank-lines with CRLF equals the Python reference (tiktoken)"
    else
        bad "blank-lines with CRLF vs reference: $(cat "$T/crlf_ref.check")"
    fi
fi

# ---------------------------------------------------------------------------------------
# threads and cuts: identical output
TS="data/tinyshakespeare/input.txt"
if [ ! -f "$TS" ]; then
    M="${LLMC_DATA_MIRROR:-../shared/data}/tinyshakespeare/input.txt"
    [ -f "$M" ] && TS="$M"
fi
if [ -f "$TS" ]; then
    run ts_whole1 --input "$TS" --out-dir "$T/w1" --name ts --threads 1 --chunk-bytes 0
    run ts_whole2 --input "$TS" --out-dir "$T/w2" --name ts --threads 2 --chunk-bytes 1000
    if cmp -s "$T/w1/ts_val_000000.bin" "$T/w2/ts_val_000000.bin" &&
       cmp -s "$T/w1/ts_train_000000.bin" "$T/w2/ts_train_000000.bin"; then
        ok "Tiny Shakespeare as one document: 1 thread uncut == 2 threads cut every ~1000 bytes"
    else
        bad "Tiny Shakespeare as one document: thread/cut outputs differ (see $T/ts_whole*.log)"
    fi
    run ts_llmc1 --input "$TS" --out-dir "$T/l1" --name tiny_shakespeare --text-docs blank-lines --threads 1
    run ts_llmc2 --input "$TS" --out-dir "$T/l2" --name tiny_shakespeare --text-docs blank-lines --threads 2 \
        --chunk-bytes 64
    if cmp -s "$T/l1/tiny_shakespeare_val_000000.bin" "$T/l2/tiny_shakespeare_val_000000.bin" \
        && cmp -s "$T/l1/tiny_shakespeare_train_000000.bin" "$T/l2/tiny_shakespeare_train_000000.bin"; then
        ok "Tiny Shakespeare (llm.c documents): 1 thread == 2 threads:" \
           "val/train/shards $(py counts "$T/l1" tiny_shakespeare)"
    else
        bad "Tiny Shakespeare (llm.c documents): 1 and 2 threads differ"
    fi
    if [ "$HAVE_TIKTOKEN" = 1 ]; then
        if py ref_text "$TS" "$T/l1" tiny_shakespeare blank-lines >"$T/ts_ref.check" 2>&1; then
            ok "Tiny Shakespeare (llm.c documents) equals the Python reference (split on \\n\\n, tiktoken)"
        else
            bad "Tiny Shakespeare vs reference: $(cat "$T/ts_ref.check")"
        fi
        if py ref_text "$TS" "$T/w2" ts whole >"$T/ts_ref2.check" 2>&1; then
            ok "Tiny Shakespeare as one document, cut every ~1000 bytes, equals tiktoken"
        else
            bad "Tiny Shakespeare (one document, cut) vs tiktoken: $(cat "$T/ts_ref2.check")"
        fi
    fi
    # train shard splitting and stale shard removal
    run ts_split --input "$TS" --out-dir "$T/l1" --name split --text-docs blank-lines --shard-tokens 100000 \
        --allow-small-shards 1
    read -r sv st sn < <(py counts "$T/l1" split)
    if [ "$sn" = $(((st + 99999) / 100000)) ] && [ "$sn" -ge 2 ] &&
       py same_stream "$T/l1" split "$T/l1" tiny_shakespeare; then
        ok "--shard-tokens 100000: $sn train shards, the same token stream"
    else
        bad "--shard-tokens 100000: val/train/shards $sv $st $sn, or the token stream differs"
    fi
    run ts_split2 --input "$TS" --out-dir "$T/l1" --name split --text-docs blank-lines
    if [ "$(py counts "$T/l1" split | cut -d' ' -f3)" = 1 ] && grep -q "removed stale" "$T/ts_split2.log"; then
        ok "a rerun with bigger shards removes the stale train shards"
    else
        bad "stale shards: $(py counts "$T/l1" split)"
    fi
    run ts_frac --input "$TS" --out-dir "$T/f" --name f --text-docs blank-lines --val-fraction 0.1 --threads 2
    read -r nv nt _ < <(py counts "$T/f" f)
    want=$(python3 -c "print(int(0.1 * ($nv + $nt) + 0.5))")
    if [ "$nv" = "$want" ] && [ "$nv" -gt 0 ] && py same_stream "$T/f" f "$T/l1" tiny_shakespeare; then
        ok "--val-fraction 0.1: $nv val tokens of $((nv + nt))"
    else
        bad "--val-fraction 0.1: $nv val tokens, expected $want"
    fi
else
    skip "Tiny Shakespeare checks (no input.txt found)"
fi

# synthetic text full of cut traps: whitespace runs, unicode spaces and letters, digits,
# contractions next to newlines
py tricky "$T/tricky.txt" 300000
run tricky1 --input "$T/tricky.txt" --out-dir "$T/t1" --name t --threads 1 --chunk-bytes 0 --val-tokens 100
run tricky2 --input "$T/tricky.txt" --out-dir "$T/t2" --name t --threads 2 --chunk-bytes 16 --val-tokens 100
if cmp -s "$T/t1/t_train_000000.bin" "$T/t2/t_train_000000.bin" &&
   cmp -s "$T/t1/t_val_000000.bin" "$T/t2/t_val_000000.bin"; then
    ok "synthetic cut traps: uncut 1 thread == cut every ~16 bytes, 2 threads"
else
    bad "synthetic cut traps: outputs differ (see $T/tricky*.log)"
fi
if [ "$HAVE_TIKTOKEN" = 1 ]; then
    if py ref_text "$T/tricky.txt" "$T/t2" t whole >"$T/tricky_ref.check" 2>&1; then
        ok "synthetic cut traps equal tiktoken"
    else
        bad "synthetic cut traps vs tiktoken: $(cat "$T/tricky_ref.check")"
    fi
fi
# JSONL with long documents that get cut, 1 vs 2 threads
python3 -c "
import json
t = open('$T/tricky.txt', encoding='utf-8').read()
with open('$T/long.jsonl', 'w') as f:
    for i in range(0, len(t), 40000): f.write(json.dumps({'text': t[i:i+40000]}) + '\n')
"
LONG=(--input "$T/long.jsonl" --format jsonl --name t --val-tokens 100)
run long1 "${LONG[@]}" --out-dir "$T/lj1" --threads 1 --chunk-bytes 0
run long2 "${LONG[@]}" --out-dir "$T/lj2" --threads 2 --chunk-bytes 100
if cmp -s "$T/lj1/t_train_000000.bin" "$T/lj2/t_train_000000.bin" &&
   cmp -s "$T/lj1/t_val_000000.bin" "$T/lj2/t_val_000000.bin"; then
    ok "jsonl long documents: uncut 1 thread == cut, 2 threads"
else
    bad "jsonl long documents: outputs differ"
fi

# standard input and a pipe give the same shards as the file
PIECES=(--format jsonl --name t --threads 2 --chunk-bytes 100 --val-tokens 100)
cat "$T/long.jsonl" | "$BIN" --input - "${PIECES[@]}" --out-dir "$T/lj3" > "$T/stdin.log" 2>&1
mkfifo "$T/fifo" && (cat "$T/long.jsonl" > "$T/fifo" &)
"$BIN" --input "$T/fifo" "${PIECES[@]}" --out-dir "$T/lj4" > "$T/fifo.log" 2>&1
if cmp -s "$T/lj1/t_train_000000.bin" "$T/lj3/t_train_000000.bin" &&
   cmp -s "$T/lj1/t_val_000000.bin" "$T/lj3/t_val_000000.bin" \
   && cmp -s "$T/lj1/t_train_000000.bin" "$T/lj4/t_train_000000.bin"; then
    ok "--input - (stdin) and a named pipe give the same shards as the file"
else
    bad "stdin/pipe input differs: $(tail -2 "$T/stdin.log") $(tail -2 "$T/fifo.log")"
fi

# ---------------------------------------------------------------------------------------
# errors
if run err_input --input "$T/does_not_exist.txt" --out-dir "$T/e" --name e; then
    bad "a missing input was accepted"
elif grep -q "^error: .*does_not_exist.txt" "$T/err_input.log"; then ok "missing input: $(cat "$T/err_input.log")"
else bad "missing input message: $(cat "$T/err_input.log")"; fi
printf 'tiny' >"$T/tiny.txt"
if run err_val --input "$T/tiny.txt" --out-dir "$T/e" --name e; then
    bad "an input smaller than --val-tokens was accepted"
elif grep -q "^error: .*tiny.txt has only" "$T/err_val.log" && [ ! -e "$T/e" ]; then
    ok "input smaller than --val-tokens: clean error, no files left"
else
    bad "input smaller than --val-tokens: $(cat "$T/err_val.log"); files: $(ls "$T/e")"
fi
if run err_fmt --input "$T/tiny.txt" --format xml --out-dir "$T/e" --name e; then bad "--format xml accepted"
else ok "bad --format: $(cat "$T/err_fmt.log")"; fi

# refused flag values: exit 1 and an "error: " line that contains the given text
refused() {  # description, expected text, prepro arguments after --input/--out-dir/--name
    local what="$1" want="$2"
    shift 2
    run refused --input "$T/tiny.txt" --out-dir "$T/r" --name r --val-tokens 0 "$@"
    local rc=$?
    if [ $rc = 1 ] && grep -q "^error: .*$want" "$T/refused.log" && [ ! -e "$T/r" ]; then
        ok "$what: $(grep -m1 '^error:' "$T/refused.log")"
    else
        bad "$what: exit code $rc (expected 1), no '$want' or files written: $(cat "$T/refused.log")"
    fi
}
# the OpenMP runtime died with SIGSEGV on this many threads
refused "--threads 70000" "--threads" --threads 70000
refused "--threads 100000" "--threads" --threads 100000
refused "--threads 4097" "--threads .* 4096" --threads 4097
refused "--threads -1" "--threads" --threads -1
# one-token shards: a file (fsynced) for every token
refused "--shard-tokens 1" "--shard-tokens 1 .*--allow-small-shards 1" --shard-tokens 1
refused "--shard-tokens 1048575" "--shard-tokens" --shard-tokens 1048575
refused "--allow-small-shards 2" "--allow-small-shards" --shard-tokens 10 --allow-small-shards 2
refused "--val-fraction nan" "--val-fraction" --val-tokens -1 --val-fraction nan
refused "--val-fraction -0.5" "--val-fraction" --val-tokens -1 --val-fraction -0.5
refused "--val-fraction 1" "--val-fraction" --val-tokens -1 --val-fraction 1
if run small_ok --input "$T/tiny.txt" --out-dir "$T/s" --name s --val-tokens 0 --shard-tokens 1 \
       --allow-small-shards 1 && [ "$(ls "$T/s" | wc -l)" = 2 ]; then
    ok "--shard-tokens 1 --allow-small-shards 1: two one-token shards for 'tiny'"
else
    bad "--shard-tokens 1 --allow-small-shards 1: $(cat "$T/small_ok.log"); files: $(ls "$T/s")"
fi
# inputs refused before any shard is in place: the output directory stays as it was (not
# created when it was missing), no temporary left
snapshot() {  # the names and checksums of a directory's files; nothing if it does not exist
    [ -e "$1" ] && (cd "$1" && ls -A && find . -type f -exec cksum {} + | sort)
}
refused_input() {  # description, expected text, output directory, prepro arguments
    local what="$1" want="$2" dir="$3"
    shift 3
    local before
    before=$(snapshot "$dir")
    run refused_input --out-dir "$dir" "$@"
    local rc=$? after
    after=$(snapshot "$dir")
    if [ $rc = 1 ] && grep -q "^error: .*$want" "$T/refused_input.log" && [ "$after" = "$before" ] &&
       { [ -n "$before" ] || [ ! -e "$dir" ]; }; then
        ok "$what: $(grep -m1 '^error:' "$T/refused_input.log" | sed "s|$T/||g")"
    else
        bad "$what: exit code $rc (expected 1), no '$want', or the output changed:" \
            "$(cat "$T/refused_input.log"); before: $(echo $before); after: $(echo $after)"
    fi
}
: >"$T/empty.txt"
printf '\n  \n\n' >"$T/blank.jsonl"
printf '{"text": ""}\n{"text": ""}\n' >"$T/empty_texts.jsonl"
refused_input "an empty input" "empty.txt is empty" "$T/n1" --input "$T/empty.txt" --name n --val-tokens 0
refused_input "empty standard input" "standard input holds no text" "$T/n2" --input - --name n --val-tokens 0 \
    </dev/null
refused_input "JSONL of blank lines only" "blank.jsonl holds no text" "$T/n3" --input "$T/blank.jsonl" \
    --format jsonl --name n --val-tokens 0
refused_input "JSONL of empty texts" "empty_texts.jsonl holds no text" "$T/n4/sub" \
    --input "$T/empty_texts.jsonl" --format jsonl --name n --val-tokens 0 --shard-tokens 1 --allow-small-shards 1
# tiny.txt is 2 tokens (end-of-text, "tiny"): neither split leaves 2 train tokens
refused_input "--val-fraction 0.99999" "tiny.txt has only 2 tokens.* 0 are left for training" "$T/n5" \
    --input "$T/tiny.txt" --name n --val-fraction 0.99999
refused_input "--val-tokens = all the tokens" "tiny.txt has only 2 tokens" "$T/n6" --input "$T/tiny.txt" --name n \
    --val-tokens 2
refused_input "--val-fraction 0.5 of 2 tokens: a 1-token val shard" "val shard of 1 tokens" "$T/n7" \
    --input "$T/tiny.txt" --name n --val-fraction 0.5
refused "--val-tokens 1" "--val-tokens 1: a val shard needs at least 2" --val-tokens 1
# into a directory that holds an earlier run's shards: they stay, nothing is added
printf 'one two three four five' >"$T/five.txt"
if run five --input "$T/five.txt" --out-dir "$T/n8" --name n --val-tokens 2 && [ "$(py counts "$T/n8" n)" = "2 4 1" ]; then
    ok "6 tokens, --val-tokens 2: val 2 and train 4 tokens"
else
    bad "6 tokens, --val-tokens 2: $(cat "$T/five.log")"
fi
refused_input "a refused run beside earlier shards" "tiny.txt has only" "$T/n8" --input "$T/tiny.txt" --name n \
    --val-tokens 2 --shard-tokens 1 --allow-small-shards 1
if run threads_max --input "$T/tricky.txt" --out-dir "$T/m" --name t --threads 4096 --chunk-bytes 16 \
       --val-tokens 100 && cmp -s "$T/t1/t_train_000000.bin" "$T/m/t_train_000000.bin"; then
    ok "--threads 4096, the most allowed: the same shards as 1 thread"
else
    bad "--threads 4096: $(tail -3 "$T/threads_max.log")"
fi

# a directory where a file is expected
mkdir -p "$T/a_dir"
if run dir_input --input "$T/a_dir" --out-dir "$T/d" --name d; then
    bad "--input DIR accepted"
elif grep -q "^error: .*a_dir is a directory" "$T/dir_input.log"; then
    ok "--input DIR: $(cat "$T/dir_input.log")"
else
    bad "--input DIR: $(cat "$T/dir_input.log")"
fi
mkdir -p "$T/tok_dir/vocab.bpe"
cp data/gpt2/encoder.json "$T/tok_dir/"
if run dir_bpe --input "$T/tiny.txt" --out-dir "$T/d" --name d --tokenizer-dir "$T/tok_dir"; then
    bad "a vocab.bpe that is a directory was accepted"
elif grep -q "^error: .*vocab.bpe is a directory" "$T/dir_bpe.log"; then
    ok "--tokenizer-dir whose vocab.bpe is a directory: $(cat "$T/dir_bpe.log")"
else
    bad "--tokenizer-dir whose vocab.bpe is a directory: $(cat "$T/dir_bpe.log")"
fi
[ -x build/tokenize ] || make -s build/tokenize >"$T/make_tokenize.log" 2>&1
# build/tokenize has the same thread limit as prepro
if ./build/tokenize --bench "$T/tiny.txt" --threads 70000 >"$T/tok_threads.log" 2>&1; then
    bad "build/tokenize --threads 70000 accepted"
elif grep -q "^error: --threads 70000: .*4096" "$T/tok_threads.log"; then
    ok "build/tokenize --threads 70000: $(cat "$T/tok_threads.log")"
else
    bad "build/tokenize --threads 70000: $(cat "$T/tok_threads.log")"
fi
if ./build/tokenize "$T/a_dir" >"$T/tok_dir.log" 2>&1; then
    bad "build/tokenize DIR accepted"
elif [ $? = 1 ] && grep -q "^error: .*a_dir is a directory" "$T/tok_dir.log"; then
    ok "build/tokenize DIR: $(cat "$T/tok_dir.log")"
else
    bad "build/tokenize DIR: $(cat "$T/tok_dir.log" "$T/make_tokenize.log" 2>/dev/null)"
fi

# shards close before the split is known to be good (a val shard and 2 train tokens): at
# most the val shard and two train shards may wait for it, however the tokens come
python3 -c "print('a' * 3000, end='')" >"$T/no_cut.txt"  # 750 tokens, one piece
if run no_cut --input "$T/no_cut.txt" --out-dir "$T/nc" --name n --val-tokens 100 --shard-tokens 100 \
       --allow-small-shards 1 --chunk-bytes 64 --threads 2 &&
   [ "$(py sizes "$T/nc" n)" = "100 100 100 100 100 100 100 51" ] &&
   py ref_tokenize "$T/no_cut.txt" "$T/nc" n text >"$T/no_cut.check" 2>&1; then
    ok "a document without a safe cut spanning the val shard and 7 train shards: build/tokenize's tokens"
else
    bad "a document without a safe cut spanning 8 shards: sizes $(py sizes "$T/nc" n 2>&1);" \
        "$(tail -2 "$T/no_cut.log") $(cat "$T/no_cut.check" 2>/dev/null)"
fi
{ printf '{"text": ""}\n%.0s' 1 2 3 4 5; printf '{"text": "hello world"}\n'; } >"$T/eot_first.jsonl"
if run eot_first --input "$T/eot_first.jsonl" --format jsonl --out-dir "$T/ef" --name e --val-tokens 2 \
       --shard-tokens 1 --allow-small-shards 1 &&
   [ "$(py sizes "$T/ef" e)" = "2 1 1 1 1 1 1" ] &&
   py ref_tokenize "$T/eot_first.jsonl" "$T/ef" e jsonl >"$T/eot_first.check" 2>&1; then
    ok "5 documents without text before the first text, one-token shards: build/tokenize's tokens"
else
    bad "documents without text before the first text: sizes $(py sizes "$T/ef" e 2>&1);" \
        "$(tail -2 "$T/eot_first.log") $(cat "$T/eot_first.check" 2>/dev/null)"
fi

test_finish
