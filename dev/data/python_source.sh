#!/usr/bin/env bash
# python_source.sh: a corpus of Python source files, for runs that need more tokens than
# Tiny Shakespeare's 300K and a machine that cannot download (README, Data). Collects the
# .py files under the given folders (default: the installed Python's standard library and
# site-packages), in sorted path order, each file one document, files of more than 1 MB and
# byte-identical copies left out, up to --max-mb megabytes of text; tokenizes them with
# ./prepro ($PREPRO if set) into
#   OUT/pysrc_val_000000.bin     the first 1,048,576 tokens (--val-tokens)
#   OUT/pysrc_train_%06d.bin     the rest, in shards of 100M tokens
# What it holds depends on the machine's installed packages: a measurement made with it
# names the machine it was built on.
#
#   dev/data/python_source.sh [--out data/pysrc] [--max-mb 80] [--val-tokens N] [FOLDER...]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTDIR=data/pysrc
MAX_MB=80
VAL_TOKENS=1048576
FOLDERS=()
while [ $# -gt 0 ]; do
    case $1 in
    --out) OUTDIR=${2:?--out needs a folder}; shift 2 ;;
    --max-mb) MAX_MB=${2:?--max-mb needs a number}; shift 2 ;;
    --val-tokens) VAL_TOKENS=${2:?--val-tokens needs a number}; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "python_source.sh: unknown option '$1' (see --help)" >&2; exit 1 ;;
    *) [ -d "$1" ] || { echo "python_source.sh: '$1' is not a folder" >&2; exit 1; }
       FOLDERS+=("$1"); shift ;;
    esac
done
case $MAX_MB in '' | *[!0-9]* | 0) echo "python_source.sh: --max-mb must be a positive integer, got '$MAX_MB'" >&2
                                    exit 1 ;; esac
if [ ${#FOLDERS[@]} = 0 ]; then
    mapfile -t FOLDERS < <(python3 -c 'import sysconfig as s; p = s.get_paths()
print("\n".join(sorted({p["stdlib"], p["purelib"], p["platlib"]})))')
fi
if [ -n "${PREPRO:-}" ]; then  # (scripts/gpu_bundle.sh puts one in dist/gpu/bin)
    [ -x "$PREPRO" ] || { echo "python_source.sh: PREPRO=$PREPRO is not an executable file" >&2; exit 1; }
else
    PREPRO=./prepro
    make -s prepro
fi
mkdir -p "$OUTDIR"
JSONL="$OUTDIR/pysrc.jsonl"
python3 - "$MAX_MB" "$JSONL" "${FOLDERS[@]}" << 'PYEOF'
import hashlib, json, os, sys
limit, out, folders = int(sys.argv[1]) << 20, sys.argv[2], sys.argv[3:]
paths = sorted({os.path.join(d, f) for top in folders for d, _, fs in os.walk(top) for f in fs if f.endswith(".py")})
seen, total, n = set(), 0, 0
with open(out + ".tmp", "w") as o:
    for p in paths:
        try:
            if os.path.getsize(p) > 1 << 20:
                continue
            text = open(p, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        h = hashlib.sha256(text.encode()).digest()
        if not text.strip() or h in seen:
            continue
        seen.add(h)
        o.write(json.dumps({"text": text}) + "\n")
        total += len(text.encode())
        n += 1
        if total >= limit:
            break
os.replace(out + ".tmp", out)
print("python_source.sh: %d files, %.1f MB of text from %d .py files under %s" % (n, total / 1e6, len(paths),
                                                                                 " ".join(folders)))
if total == 0:
    sys.exit("python_source.sh: no readable .py file found")
PYEOF
"$PREPRO" --input "$JSONL" --format jsonl --out-dir "$OUTDIR" --name pysrc --val-tokens "$VAL_TOKENS"
rm -f "$JSONL"
ls -l "$OUTDIR"/pysrc_*.bin
