#!/usr/bin/env bash
# test_data_scripts.sh: tests of the data steps for the larger datasets
# (dev/data/tinystories.sh, dev/data/fineweb.sh, dev/data/to_jsonl.py,
# dev/data/python_source.sh), without a
# network. Everything happens under build/test_data_scripts/:
#   - to_jsonl.py: --help, bad records reported with file and index, --skip-bad, --strip
#   - python_source.sh on a small folder: the files it keeps and the tokens; bad arguments
#   - a fake TinyStories archive (two JSON files) in a mirror directory: the shards have
#     the right header, val holds exactly the stories of data00.json, and all the tokens
#     equal those of ./build/tokenize for the same stories (an end-of-text token before
#     each); a second run is a no-op; an unpacked mirror and --val-tokens work
#   - fake FineWeb parquet files (when pyarrow is installed, else skipped): continuous
#     train shard numbering across files, the same token check, a second run is a no-op,
#     a smaller --files removes the extra shards, resuming after a failed download
#   - with no mirror and no network, both scripts fail with a clear message
#   - the project scripts around them: make quickstart builds only what quickstart.sh
#     runs; quickstart.sh trains on the GPU only where train_gpt2cu builds or is built; make test checks the dependencies before it builds anything; install_deps.sh
#     names what is missing (and how to install it) when it cannot install; every .PHONY
#     name has a rule and a line in make help; .ci/run runs make test and nothing else
# ("no network" is simulated: LLMC_HF_BASE points the downloads at a closed local port)
# Usage (from anywhere): dev/test/test_data_scripts.sh   Final line: "N passed, M failed, K skipped";
# exit 1 if any failed, else 77 if any were skipped (run_all.sh's code for skipped), else 0.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
T=build/test_data_scripts
rm -rf "$T"
mkdir -p "$T"
PYTHON="${PYTHON:-python3}"
NO_NET=http://127.0.0.1:9   # the discard port: connection refused at once
HF="$NO_NET/datasets"
HFW="$HF/HuggingFaceFW"

. dev/test/testlib.sh
# check NAME COMMAND...: ok when the command succeeds, else FAIL and its output
check() {
    local name="$1"; shift
    if "$@" >"$T/check.log" 2>&1; then ok "$name"; else bad "$name"; sed 's/^/      /' "$T/check.log"; fi
}
# run NAME ARGS...: runs a command quietly, its output in $T/NAME.log; returns its status
run() {
    local name="$1"; shift
    "$@" >"$T/$name.log" 2>&1
}
# log_has NAME TEXT: the log of run NAME contains TEXT
log_has() { grep -qF -- "$2" "$T/$1.log"; }
show() { sed 's/^/      /' "$T/$1.log" | tail -n 15; }

for target in prepro build/tokenize; do
    if [ ! -x "$target" ]; then
        echo "building $target"
        make "$target" >"$T/make.log" 2>&1 || { cat "$T/make.log"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
    fi
done
HAVE_PYARROW=0
"$PYTHON" -c 'import pyarrow.parquet' 2>/dev/null && HAVE_PYARROW=1

cat >"$T/helper.py" <<'PYEOF'
"""Fake inputs and shard checks for test_data_scripts.sh."""
import glob, json, os, struct, subprocess, sys

EOT = 50256
STORIES = [
    ["\n\nLily and Ben went to the park. \"Look!\" said Lily.\nThey saw a big red ball.  ",
     "Once upon a time, there was a little cat named Tom. Tom liked milk.",
     "  Café, naïve, 東京, emoji 🐈 and a tab\there.\n\n\nThe end.",
     "It's 3:45pm -- they'd 've gone 12345 times...",
     ""],
    ["Sam had a toy car. He played with it every day.\n",
     "The sun was hot. Mia ate ice cream <|endoftext|> and smiled.",
     "x" * 3000 + " the end"],
]
FINEWEB = [
    ["Posted by someone on 20th April 2012\nStraight from the source...",
     "Quantum mechanics describes nature at small scales. " * 40,
     "Über die Brücke; Ελληνικά; русский; 中文; العربية"],
    ["The second file starts here.\r\nWith CRLF line ends.\r\n",
     "   leading and trailing spaces stay   ",
     "Numbers 1 22 333 4444 55555 and symbols !@#$%^&*()"],
]

def make_tinystories(d):
    os.makedirs(d, exist_ok=True)
    for i, stories in enumerate(STORIES):
        recs = [{"story": s, "instruction": {"words": ["a", "b"]}, "source": "GPT-4"} for s in stories]
        with open(os.path.join(d, f"data{i:02d}.json"), "w", encoding="utf-8") as f:
            json.dump(recs, f, ensure_ascii=(i == 0))

def make_fineweb(d):
    import pyarrow as pa, pyarrow.parquet as pq
    os.makedirs(d, exist_ok=True)
    for i, docs in enumerate(FINEWEB):
        t = pa.table({"text": docs, "id": [f"<urn:{i}:{k}>" for k in range(len(docs))],
                      "token_count": [len(x) for x in docs]})
        pq.write_table(t, os.path.join(d, f"{i:03d}_00000.parquet"), row_group_size=2)

PYSRC = {"a/one.py": "def f(x):\n    return x + 1\n", "b/copy.py": "def f(x):\n    return x + 1\n",
         "b/two.py": "print('hé')\n\n\nclass C:\n    pass\n", "b/empty.py": "  \n", "b/notes.txt": "not python"}

def make_pysrc(d):
    for name, text in PYSRC.items():
        os.makedirs(os.path.dirname(os.path.join(d, name)), exist_ok=True)
        open(os.path.join(d, name), "w", encoding="utf-8").write(text)
    open(os.path.join(d, "b/latin1.py"), "wb").write(b"s = '\xe9'\n")  # not UTF-8: left out

def make_bad_parquet(path):
    import pyarrow as pa, pyarrow.parquet as pq
    pq.write_table(pa.table({"text": ["fine", None, "also fine"]}), path)

def tokenize_docs(docs):
    """Tokens of each document, from ./build/tokenize --records."""
    blob = b"".join(struct.pack("<I", len(b)) + b for b in (d.encode("utf-8") for d in docs))
    out = subprocess.run(["./build/tokenize", "--records", "--dir", "data/gpt2"], input=blob,
                         stdout=subprocess.PIPE, check=True).stdout
    res, p = [], 0
    for _ in docs:
        (n,) = struct.unpack_from("<I", out, p); p += 4
        res.append(list(struct.unpack_from(f"<{n}I", out, p))); p += 4 * n
    assert p == len(out), "trailing output from build/tokenize --records"
    return res

def read_shard(path):
    data = open(path, "rb").read()
    assert len(data) >= 1024, f"{path}: shorter than the header"
    h = struct.unpack("<256i", data[:1024])
    assert h[0] == 20240520, f"{path}: magic {h[0]}"
    assert h[1] == 1, f"{path}: version {h[1]}"
    assert len(data) == 1024 + 2 * h[2], f"{path}: header says {h[2]} tokens, file has {len(data)} bytes"
    return list(struct.unpack(f"<{h[2]}H", data[1024:]))

def stream(docs):
    out = []
    for toks in tokenize_docs(docs):
        out += [EOT] + toks
    return out

def check(out_dir, name, val, sets):
    """sets: the documents of each input file, in order. val: 'first' (val = the first
    file), an int (the first N tokens) or 0 (no val shard)."""
    val_path = f"{out_dir}/{name}_val_000000.bin"
    train = sorted(glob.glob(f"{out_dir}/{name}_train_*.bin"))
    assert train, f"no train shards in {out_dir}"
    nums = [int(p.rsplit("_", 1)[1][:6]) for p in train]
    assert nums == list(range(len(train))), f"train shards not numbered 0..{len(train)-1}: {nums}"
    got_val = read_shard(val_path) if os.path.exists(val_path) else []
    got_train = []
    for p in train:
        got_train += read_shard(p)
    per_file = [stream(docs) for docs in sets]
    want = [t for s in per_file for t in s]
    n_val = len(per_file[0]) if val == "first" else int(val)
    assert len(got_val) == n_val, f"val has {len(got_val)} tokens, expected {n_val}"
    assert len(got_val) + len(got_train) == len(want), \
        f"{len(got_val)}+{len(got_train)} tokens, expected {len(want)}"
    assert got_val + got_train == want, "the tokens differ from build/tokenize's"
    print(f"{len(got_val)} val + {len(got_train)} train tokens in {len(train)} train shards: as expected")
    return len(train)

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make_tinystories": make_tinystories(sys.argv[2])
    elif cmd == "make_fineweb": make_fineweb(sys.argv[2])
    elif cmd == "make_bad_parquet": make_bad_parquet(sys.argv[2])
    elif cmd == "check_tinystories":
        sets = [[s.strip() for s in f] for f in STORIES]
        check(sys.argv[2], "tinystories", sys.argv[3], sets)
    elif cmd == "make_pysrc": make_pysrc(sys.argv[2])
    elif cmd == "check_pysrc":  # sorted paths; the copy, the blank file and the non-UTF-8 one left out
        check(sys.argv[2], "pysrc", sys.argv[3], [[PYSRC["a/one.py"], PYSRC["b/two.py"]]])
    elif cmd == "check_fineweb":
        nfiles = int(sys.argv[4])
        n = check(sys.argv[2], "fineweb", sys.argv[3], FINEWEB[:nfiles])
        if len(sys.argv) > 5:
            assert n == int(sys.argv[5]), f"{n} train shards, expected {sys.argv[5]}"
    else: sys.exit("unknown command " + cmd)
PYEOF
H() { "$PYTHON" "$T/helper.py" "$@"; }

# ---- to_jsonl.py -------------------------------------------------------------------------
check "to_jsonl.py --help" "$PYTHON" dev/data/to_jsonl.py --help
printf '[{"story": " a\\n"}, {"story": 7}, {"text": "x"}, "str", {"story": "b"}]' >"$T/bad.json"
if run tj_bad "$PYTHON" dev/data/to_jsonl.py --field story -o "$T/bad.jsonl" "$T/bad.json"; then
    bad "to_jsonl.py fails on bad JSON records"; show tj_bad
elif log_has tj_bad "bad.json:1: \"story\" is a number" && log_has tj_bad "bad.json:2: no \"story\" field" &&
     log_has tj_bad "bad.json:3: a string, not an object" && [ ! -e "$T/bad.jsonl" ]; then
    ok "to_jsonl.py reports bad JSON records by file and index, writes nothing"
else
    bad "to_jsonl.py bad-record messages"; show tj_bad
fi
printf '{"text": "one"}\n\n{"text": 2}\nnot json\n{"text": "  two "}\n' >"$T/bad.jsonl_in.jsonl"
if run tj_skip "$PYTHON" dev/data/to_jsonl.py --skip-bad --strip -o "$T/skip.jsonl" "$T/bad.jsonl_in.jsonl" &&
   log_has tj_skip "bad.jsonl_in.jsonl:3:" && log_has tj_skip "bad.jsonl_in.jsonl:4: invalid JSON" &&
   [ "$(cat "$T/skip.jsonl")" = $'{"text": "one"}\n{"text": "two"}' ]; then
    ok "to_jsonl.py --skip-bad --strip on JSONL (line numbers in the messages)"
else
    bad "to_jsonl.py --skip-bad --strip on JSONL"; show tj_skip; cat "$T/skip.jsonl" 2>/dev/null
fi
if [ "$HAVE_PYARROW" = 1 ]; then
    H make_bad_parquet "$T/bad.parquet"
    if ! run tj_pq "$PYTHON" dev/data/to_jsonl.py "$T/bad.parquet" &&
       log_has tj_pq "bad.parquet:1: \"text\" is null"; then
        ok "to_jsonl.py reports a null parquet value by row"
    else
        bad "to_jsonl.py on a parquet file with a null"; show tj_pq
    fi
else
    skip "to_jsonl.py parquet checks: pyarrow is not installed (python3 -m pip install pyarrow)"
fi

# ---- python_source.sh ------------------------------------------------------------------------
H make_pysrc "$T/pysrc_in"
if run pysrc dev/data/python_source.sh --out "$T/pysrc" --val-tokens 5 "$T/pysrc_in" &&
   log_has pysrc "2 files" && H check_pysrc "$T/pysrc" 5 >"$T/pysrc_check.log" 2>&1; then
    ok "python_source.sh: .py files in path order, copies, blank and non-UTF-8 files left out, the tokens right"
else
    bad "python_source.sh on a small folder"; show pysrc; cat "$T/pysrc_check.log" 2>/dev/null
fi
if ! run pysrc_mb dev/data/python_source.sh --out "$T/pysrc_x" --max-mb 1x "$T/pysrc_in" &&
   log_has pysrc_mb "--max-mb must be a positive integer, got '1x'" &&
   ! run pysrc_dir dev/data/python_source.sh --out "$T/pysrc_x" "$T/no_such_folder" &&
   log_has pysrc_dir "no_such_folder' is not a folder" &&
   ! run pysrc_pp env PREPRO="$T/no_prepro" dev/data/python_source.sh --out "$T/pysrc_x" "$T/pysrc_in" &&
   log_has pysrc_pp "no_prepro is not an executable file" && [ ! -e "$T/pysrc_x" ]; then
    ok "python_source.sh refuses a bad --max-mb, a missing folder and a missing PREPRO, writing nothing"
else
    bad "python_source.sh bad arguments"; show pysrc_mb; show pysrc_dir; show pysrc_pp
fi

# ---- TinyStories ----------------------------------------------------------------------------
M="$T/mirror"
H make_tinystories "$T/ts_json"
mkdir -p "$M/tinystories"
tar -czf "$M/tinystories/TinyStories_all_data.tar.gz" -C "$T/ts_json" data00.json data01.json
TS="$T/out_ts"
if run ts1 env LLMC_DATA_MIRROR="$M" LLMC_HF_BASE="$NO_NET" dev/data/tinystories.sh --out-dir "$TS"; then
    ok "tinystories.sh from a mirrored archive"
    check "tinystories shards: header, val = data00.json, tokens = build/tokenize's" \
        H check_tinystories "$TS" first
    if [ ! -e "$TS/work" ]; then ok "tinystories.sh removes its work directory"
    else bad "tinystories.sh left $TS/work"; fi
    before=$(stat -c %Y "$TS"/tinystories_*.bin | tr '\n' ' ')
    sleep 1
    if run ts2 env LLMC_DATA_MIRROR="$M" LLMC_HF_BASE="$NO_NET" dev/data/tinystories.sh --out-dir "$TS" &&
       log_has ts2 "up to date" && [ "$(stat -c %Y "$TS"/tinystories_*.bin | tr '\n' ' ')" = "$before" ]; then
        ok "tinystories.sh a second time: up to date, nothing rewritten"
    else
        bad "tinystories.sh a second time"; show ts2
    fi
else
    bad "tinystories.sh from a mirrored archive"; show ts1
fi
M2="$T/mirror_unpacked"
mkdir -p "$M2/tinystories"
cp "$T"/ts_json/data*.json "$M2/tinystories/"
if run ts3 env LLMC_DATA_MIRROR="$M2" LLMC_HF_BASE="$NO_NET" dev/data/tinystories.sh --out-dir "$T/out_ts2" \
       --val-tokens 10; then
    check "tinystories.sh from unpacked JSON, --val-tokens 10" H check_tinystories "$T/out_ts2" 10
else
    bad "tinystories.sh from unpacked JSON"; show ts3
fi
mkdir -p "$T/empty"
if run ts4 env LLMC_DATA_MIRROR="$T/empty" LLMC_HF_BASE="$NO_NET" dev/data/tinystories.sh --out-dir "$T/out_ts3"; then
    bad "tinystories.sh without a source must fail"; show ts4
elif log_has ts4 "error: cannot download $HF/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz" &&
     log_has ts4 "LLMC_DATA_MIRROR"; then
    ok "tinystories.sh without mirror or network: non-zero exit, clear message"
else
    bad "tinystories.sh without a source: unclear message"; show ts4
fi

# ---- FineWeb ---------------------------------------------------------------------------------
if [ "$HAVE_PYARROW" = 1 ]; then
    H make_fineweb "$M/fineweb/sample/10BT"
    FW="$T/out_fw"
    # shards of 150 tokens make several from tiny files; prepro refuses them unless told
    printf '#!/bin/sh\nexec ./prepro --allow-small-shards 1 "$@"\n' >"$T/prepro_small_shards"
    chmod +x "$T/prepro_small_shards"
    fw() { env LLMC_DATA_MIRROR="$M" LLMC_HF_BASE="$NO_NET" PREPRO="$T/prepro_small_shards" dev/data/fineweb.sh \
               --out-dir "$FW" --val-tokens 40 --shard-tokens 150 "$@"; }
    if run fw1 fw --files 2; then
        ok "fineweb.sh --files 2 from mirrored parquet files"
        check "fineweb shards: continuous numbering, val 40, tokens = build/tokenize's" \
            H check_fineweb "$FW" 40 2
        before=$(stat -c %Y "$FW"/fineweb_*.bin | tr '\n' ' ')
        sleep 1
        if run fw2 fw --files 2 && log_has fw2 "up to date" &&
           [ "$(stat -c %Y "$FW"/fineweb_*.bin | tr '\n' ' ')" = "$before" ]; then
            ok "fineweb.sh a second time: up to date, nothing rewritten"
        else
            bad "fineweb.sh a second time"; show fw2
        fi
        if run fw3 fw --files 1; then
            check "fineweb.sh --files 1 after 2: the second file's shards are gone" H check_fineweb "$FW" 40 1
        else
            bad "fineweb.sh --files 1 after 2"; show fw3
        fi
        # a third file that cannot be had: fails clearly, keeps the two done, and resumes
        if run fw4 fw --files 3; then
            bad "fineweb.sh --files 3 must fail (no 002_00000.parquet, no network)"; show fw4
        elif log_has fw4 "error: cannot download $HFW/fineweb/resolve/main/sample/10BT/002_00000.parquet" &&
             log_has fw4 "LLMC_DATA_MIRROR"; then
            ok "fineweb.sh with a missing file and no network: non-zero exit, clear message"
            check "fineweb.sh: the files done before the failure are kept" H check_fineweb "$FW" 40 2
        else
            bad "fineweb.sh with a missing file: unclear message"; show fw4
        fi
        cp "$M/fineweb/sample/10BT/000_00000.parquet" "$M/fineweb/sample/10BT/002_00000.parquet"
        if run fw5 fw --files 3 && log_has fw5 "[3/3] 002_00000.parquet" && ! log_has fw5 "[1/3]"; then
            ok "fineweb.sh resumes with the third file only"
        else
            bad "fineweb.sh resume"; show fw5
        fi
        rm -f "$M/fineweb/sample/10BT/002_00000.parquet"
    else
        bad "fineweb.sh --files 2 from mirrored parquet files"; show fw1
    fi
    if run fw6 env LLMC_DATA_MIRROR="$T/empty" LLMC_HF_BASE="$NO_NET" dev/data/fineweb.sh --out-dir "$T/out_fw2" \
           --edu --files 1; then
        bad "fineweb.sh without a source must fail"; show fw6
    elif log_has fw6 "error: cannot download $HFW/fineweb-edu/resolve/main/sample/10BT/000_00000.parquet" &&
         log_has fw6 "LLMC_DATA_MIRROR"; then
        ok "fineweb.sh --edu without mirror or network: non-zero exit, clear message"
    else
        bad "fineweb.sh without a source: unclear message"; show fw6
    fi
else
    skip "fineweb.sh: pyarrow is not installed (python3 -m pip install pyarrow)"
fi

# ---- make and the project scripts -------------------------------------------------------
# (make -n -B prints every command of a target and its prerequisites and runs none of them)
if make -n -B quickstart >"$T/quickstart.log" 2>&1 && grep -q -- "-o train_gpt2 " "$T/quickstart.log" &&
   grep -q -- "-o prepro " "$T/quickstart.log" && grep -q "scripts/quickstart.sh" "$T/quickstart.log" &&
   ! grep -q -- "-o test_gpt2 \|build/tokenize\|build/san" "$T/quickstart.log"; then
    ok "make quickstart builds train_gpt2 and prepro only"
else
    bad "make quickstart's prerequisites"; show quickstart
fi
# quickstart.sh's choice of trainer, in a copy of the script beside stub trainers, data step,
# Makefile and nvidia-smi: GPU only where a GPU answers and train_gpt2cu builds or is built
Q="$T/qs"
mkdir -p "$Q/scripts" "$Q/dev/data" "$Q/fakebin"
cp scripts/quickstart.sh "$Q/scripts/"
printf '#!/bin/sh\n' > "$Q/dev/data/tinyshakespeare.sh"
printf '#!/bin/sh\necho "GPU 0: stub"\n' > "$Q/fakebin/nvidia-smi"
printf '#!/bin/sh\necho "trainer: cpu"\n' > "$Q/train_gpt2"
printf 'train_gpt2cu:\n\t$(NVCC) && printf "#!/bin/sh\\necho trainer: gpu\\n" > $@ && chmod +x $@\n' > "$Q/Makefile"
touch "$Q/train_gpt2.cu"
chmod +x "$Q/dev/data/tinyshakespeare.sh" "$Q/fakebin/nvidia-smi" "$Q/train_gpt2"
# quickstart_case NAME WANT [NOTE] -- ENV...: runs the copy with ENV, expects trainer WANT and NOTE's words
quickstart_case() {
    local name=$1 want=$2 note=$3; shift 4
    rm -f "$Q/train_gpt2cu"
    [ "$name" = "built, no nvcc" ] && cp "$Q/train_gpt2" "$Q/train_gpt2cu" && sed -i 's/cpu/gpu/' "$Q/train_gpt2cu"
    local out; out=$(cd "$Q" && env "$@" ./scripts/quickstart.sh 2>&1)
    if printf '%s\n' "$out" | grep -qx "trainer: $want" && { [ -z "$note" ] || printf '%s\n' "$out" | grep -q "$note"; }
    then ok "quickstart.sh, $name: the $want run${note:+ (says: $note)}"
    else bad "quickstart.sh, $name: expected the $want run${note:+ and '$note'}"; printf '%s\n' "$out" | sed 's/^/      /'
    fi
}
mkdir -p "$Q/nogpu"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' > "$Q/nogpu/nvidia-smi"
chmod +x "$Q/nogpu/nvidia-smi"
quickstart_case "no GPU" cpu "" -- PATH="$ROOT/$Q/nogpu:$PATH" NVCC=true
quickstart_case "GPU and nvcc" gpu "" -- PATH="$ROOT/$Q/fakebin:$PATH" NVCC=true
quickstart_case "built, no nvcc" gpu "" -- PATH="$ROOT/$Q/fakebin:$PATH" NVCC=no-such-nvcc
quickstart_case "GPU, no nvcc" cpu "nvcc is not on the PATH" -- PATH="$ROOT/$Q/fakebin:$PATH" NVCC=no-such-nvcc
quickstart_case "GPU, build fails" cpu "did not build" -- PATH="$ROOT/$Q/fakebin:$PATH" NVCC=false
if make -n -B test >"$T/make_test.log" 2>&1 &&
   head -n 1 "$T/make_test.log" | grep -q "scripts/install_deps.sh --ensure" &&
   grep -q -- "-o train_gpt2 " "$T/make_test.log" && grep -q "run_all.sh" "$T/make_test.log"; then
    ok "make test: scripts/install_deps.sh --ensure before anything is built, then the build and run_all.sh"
else
    bad "make test's first step is not the dependency check"; show make_test
fi
# a missing MPI compiler (MPICC names one that does not exist) as a user who cannot install
if run deps_check env MPICC=no-such-mpicc ./scripts/install_deps.sh --check; then
    bad "install_deps.sh --check passes with MPICC=no-such-mpicc"; show deps_check
elif log_has deps_check "no-such-mpicc (apt: libopenmpi-dev)"; then
    ok "install_deps.sh --check names what is missing: $(grep no-such-mpicc "$T/deps_check.log")"
else
    bad "install_deps.sh --check with MPICC=no-such-mpicc"; show deps_check
fi
as_user=()
if [ "$(id -u)" = 0 ]; then
    command -v setpriv > /dev/null && as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
if [ "$(id -u)" = 0 ] && [ ${#as_user[@]} = 0 ]; then
    skip "install_deps.sh --ensure as a user: no setpriv to drop root with"
elif run deps_user "${as_user[@]}" env MPICC=no-such-mpicc ./scripts/install_deps.sh --ensure; then
    bad "install_deps.sh --ensure as a user passes with MPICC=no-such-mpicc"; show deps_user
elif log_has deps_user "no-such-mpicc (apt: libopenmpi-dev)" &&
     log_has deps_user "error: installing them needs root; run: sudo ./scripts/install_deps.sh" &&
     log_has deps_user "apt-get install -y"; then
    ok "install_deps.sh --ensure as a user: names what is missing and the command to install it, exit 1"
else
    bad "install_deps.sh --ensure as a user with MPICC=no-such-mpicc"; show deps_user
fi
phony=$(sed -n '/^\.PHONY:/,/[^\\]$/p' Makefile | sed 's/^\.PHONY://; s/\\$//' | tr -s ' \n' '  ')
make help >"$T/help.log" 2>&1
missing=""
for t in $phony; do
    grep -q "^$t:" Makefile && grep -q "^  $t " "$T/help.log" || missing+=" $t"
done
if [ -n "$phony" ] && [ -z "$missing" ]; then
    ok "every .PHONY name has a rule and a line in make help ($(echo $phony | wc -w) names)"
else
    bad "the .PHONY names without a rule or a make help line:$missing"
fi
if [ "$(grep -vE '^[[:space:]]*(#|$|set |cd )' .ci/run)" = "make test" ]; then
    ok ".ci/run runs make test and nothing else"
else
    bad ".ci/run runs more than make test:"; grep -vE '^[[:space:]]*(#|$|set |cd )' .ci/run | sed 's/^/      /'
fi

test_finish
