#!/usr/bin/env bash
# fineweb.sh: the data step for the 10B-token samples of FineWeb and FineWeb-Edu
# (Hugging Face datasets HuggingFaceFW/fineweb and HuggingFaceFW/fineweb-edu, folder
# sample/10BT/: parquet files 000_00000.parquet, 001_00000.parquet, ... with the
# document in the column "text"). Tokenizes them with ./prepro into
#   data/fineweb10B/fineweb_val_000000.bin        the first 100M tokens (llm.c's
#                                                 convention: the first shard is val)
#   data/fineweb10B/fineweb_train_%06d.bin        the rest, 100M tokens a shard
# (with --edu: data/edu_fineweb10B/edu_fineweb_*.bin). Files are taken in order, rows in
# file order, every row a document (the end-of-text token 50256 before each).
#
# It works one parquet file at a time so that the disk holds only one parquet file and
# its JSONL besides the shards: get the file (from the mirror, or a resumable download),
# convert it to JSONL with dev/data/to_jsonl.py (needs pyarrow, installed with
# 'python3 -m pip install pyarrow' when missing), tokenize it with prepro into OUT/work/,
# move the shards into OUT numbering the train shards on from the previous file's, then
# delete the JSONL and the downloaded parquet file (--keep-parquet keeps it).
# prepro numbers every run's shards from 000000 and cannot read a pipe, so each file's
# shards are renumbered here; the catch is that the last train shard of each parquet
# file is a partial one (< 100M tokens), so there are up to N-1 more shards than a
# single run would make. The token stream (all shards in order) is the same.
#
# Resumable and idempotent: OUT/.progress lists the parquet files done and their shards;
# a second run skips them (and says "up to date" when all are done). Changing --edu,
# --val-tokens or --shard-tokens starts over; a smaller --files removes the shards of
# the files beyond it. --force starts over.
#
# Where parquet file F comes from: $LLMC_DATA_MIRROR/fineweb/sample/10BT/F (fineweb-edu
# with --edu) when it exists, else OUT/raw/F, else a download from
# https://huggingface.co/datasets/HuggingFaceFW/fineweb/resolve/main/sample/10BT/F
# (about 2.1 GB each; HF_TOKEN, when set, is sent). LLMC_DATA_MIRROR defaults to
# ../shared/data next to the repository when that exists.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

HF_BASE="${LLMC_HF_BASE:-https://huggingface.co}"   # LLMC_HF_BASE: for tests
EDU=0
FILES=""
OUT=""
VAL_TOKENS=100000000
SHARD_TOKENS=100000000
KEEP_PARQUET=0
FORCE=0
source dev/data/common.sh

usage() {
    cat <<EOF
usage: dev/data/fineweb.sh [--edu] [--files N] [--out-dir DIR] [--val-tokens N]
                           [--shard-tokens N] [--keep-parquet] [--force]

Downloads (or takes from \$LLMC_DATA_MIRROR/fineweb/sample/10BT/) the parquet files of
FineWeb's sample/10BT and tokenizes them, one file at a time, into
DIR/fineweb_val_000000.bin and DIR/fineweb_train_%06d.bin. See the comment at the top
of this script for the details.

  --edu              FineWeb-Edu (HuggingFaceFW/fineweb-edu) instead of FineWeb
  --files N          the first N parquet files (default: all, 15 for FineWeb, 14 for
                     FineWeb-Edu; each is about 0.7B tokens)
  --out-dir DIR      output directory (default data/fineweb10B, with --edu
                     data/edu_fineweb10B)
  --val-tokens N     the first N tokens go to the val shard (default 100000000)
  --shard-tokens N   tokens per train shard (default 100000000)
  --keep-parquet     keep downloaded parquet files in DIR/raw/
  --force            start over even when shards of an earlier run are there
  -h, --help         this text
Environment: LLMC_DATA_MIRROR (local mirror, default ../shared/data), PREPRO (default
./prepro), PYTHON (default python3), HF_TOKEN (sent to Hugging Face when set).
EOF
}

need_int() {
    case "$2" in ''|*[!0-9]*) die "$1 must be a non-negative integer, not '$2'" ;; esac
}

while [ $# -gt 0 ]; do
    case "$1" in
        --edu) EDU=1; shift ;;
        --files) [ $# -ge 2 ] || die "--files needs a value"; FILES="$2"; shift 2 ;;
        --out-dir) [ $# -ge 2 ] || die "--out-dir needs a value"; OUT="$2"; shift 2 ;;
        --val-tokens) [ $# -ge 2 ] || die "--val-tokens needs a value"; VAL_TOKENS="$2"; shift 2 ;;
        --shard-tokens) [ $# -ge 2 ] || die "--shard-tokens needs a value"; SHARD_TOKENS="$2"; shift 2 ;;
        --keep-parquet) KEEP_PARQUET=1; shift ;;
        --force) FORCE=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'" ;;
    esac
done

if [ "$EDU" = 1 ]; then
    DATASET=fineweb-edu; NAME=edu_fineweb; ALL_FILES=14; OUT="${OUT:-data/edu_fineweb10B}"
else
    DATASET=fineweb; NAME=fineweb; ALL_FILES=15; OUT="${OUT:-data/fineweb10B}"
fi
FILES="${FILES:-$ALL_FILES}"
need_int --files "$FILES"
need_int --val-tokens "$VAL_TOKENS"
need_int --shard-tokens "$SHARD_TOKENS"
# prepro's own floor (smaller shards only multiply files); tests reach below it through PREPRO
[ "$SHARD_TOKENS" -ge 1048576 ] || [ -n "${PREPRO:-}" ] || die "--shard-tokens must be at least 1048576"
[ "$FILES" -ge 1 ] || die "--files must be at least 1"
[ "$SHARD_TOKENS" -ge 1 ] || die "--shard-tokens must be positive"
[ "$FILES" -le "$ALL_FILES" ] ||
    say "warning: --files $FILES: sample/10BT of $DATASET is known to have $ALL_FILES files"
MIRROR_DIR="${LLMC_DATA_MIRROR:+$LLMC_DATA_MIRROR/$DATASET/sample/10BT}"
URL_DIR="$HF_BASE/datasets/HuggingFaceFW/$DATASET/resolve/main/sample/10BT"

ensure_prepro
require_python

PROGRESS="$OUT/.progress"
WORK="$OUT/work"
CONFIG="config dataset=$DATASET val_tokens=$VAL_TOKENS shard_tokens=$SHARD_TOKENS"
train_path() { printf '%s/%s_train_%06d.bin' "$OUT" "$NAME" "$1"; }
parquet_name() { printf '%03d_00000.parquet' "$1"; }

# remove_train_from K: removes train shards K, K+1, ... (until one is missing)
remove_train_from() {
    local k="$1"
    while [ -f "$(train_path "$k")" ]; do rm -f "$(train_path "$k")"; k=$((k + 1)); done
}

mkdir -p "$OUT"
# read the progress of earlier runs: lines "FILE FIRST_SHARD NUM_SHARDS TOKENS"
DONE_FILES=()
DONE_NEXT=()   # the next train shard number after each file
if [ "$FORCE" = 0 ] && [ -f "$PROGRESS" ] && [ "$(head -n 1 "$PROGRESS")" = "$CONFIG" ]; then
    while read -r f first count _; do
        DONE_FILES+=("$f"); DONE_NEXT+=($((first + count)))
    done < <(tail -n +2 "$PROGRESS")
    # trust it only when the shards it names are there
    if [ "${#DONE_FILES[@]}" -gt 0 ]; then
        last=$(( ${DONE_NEXT[${#DONE_NEXT[@]}-1]} - 1 ))
        if { [ "$VAL_TOKENS" -gt 0 ] && [ ! -f "$OUT/${NAME}_val_000000.bin" ]; } ||
           { [ "$last" -ge 0 ] && [ ! -f "$(train_path "$last")" ]; }; then
            say "shards named in $PROGRESS are missing: starting over"
            DONE_FILES=(); DONE_NEXT=()
        fi
    fi
fi
if [ "${#DONE_FILES[@]}" = 0 ]; then
    # start over: no shard of an earlier run may stay
    rm -f "$OUT/${NAME}_val_000000.bin" "$OUT"/"${NAME}"_train_*.bin
    echo "$CONFIG" >"$PROGRESS"
fi
# the files done must be the first ones, in order
for i in "${!DONE_FILES[@]}"; do
    [ "${DONE_FILES[$i]}" = "$(parquet_name "$i")" ] || die "$PROGRESS is not in order; rerun with --force"
done
if [ "${#DONE_FILES[@]}" -gt "$FILES" ]; then
    say "--files $FILES: removing the shards of the ${#DONE_FILES[@]} - $FILES files beyond it"
    remove_train_from "${DONE_NEXT[$((FILES - 1))]}"
    DONE_FILES=("${DONE_FILES[@]:0:$FILES}"); DONE_NEXT=("${DONE_NEXT[@]:0:$FILES}")
    { echo "$CONFIG"; head -n $((FILES + 1)) "$PROGRESS" | tail -n +2; } >"$PROGRESS.tmp"
    mv "$PROGRESS.tmp" "$PROGRESS"
fi
if [ "${#DONE_FILES[@]}" = "$FILES" ]; then
    say "$OUT/${NAME}_{val,train}_*.bin are up to date: $FILES parquet files ($PROGRESS; --force redoes them)"
    exit 0
fi

if ! "$PYTHON" -c 'import pyarrow.parquet' 2>/dev/null; then
    say "pyarrow (needed to read parquet) is missing: running '$PYTHON -m pip install pyarrow'"
    "$PYTHON" -m pip install pyarrow ||
        die "cannot install pyarrow; install it yourself ('$PYTHON -m pip install pyarrow', in a
  virtual environment if pip refuses, then PYTHON=/path/to/venv/bin/python) and rerun"
fi

# partial_note FILE: a sentence about a kept partial download, when there is one
partial_note() {
    if [ -s "$1" ]; then echo " The partial download $1 is resumed next time."; fi
}

# get_parquet F: prints the path of parquet file F, downloading it when needed
get_parquet() {
    local f="$1"
    if [ -n "$MIRROR_DIR" ] && [ -f "$MIRROR_DIR/$f" ]; then
        echo "$MIRROR_DIR/$f"; return
    fi
    local dest="$OUT/raw/$f" url="$URL_DIR/$f"
    if [ ! -f "$dest" ]; then
        command -v curl >/dev/null 2>&1 || die "curl is not installed to download $url"
        mkdir -p "$OUT/raw"
        say "downloading $url" >&2
        local auth=()
        [ -n "${HF_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $HF_TOKEN")
        if ! curl -fL --retry 3 --retry-delay 5 --connect-timeout 20 -C - "${auth[@]}" \
                -o "$dest.part" "$url" >&2; then
            die "cannot download $url (no network, or no such file?). Put the parquet files
  in \$LLMC_DATA_MIRROR/$DATASET/sample/10BT/ (LLMC_DATA_MIRROR is '${LLMC_DATA_MIRROR:-unset}'),
  or at $dest.$(partial_note "$dest.part")"
        fi
        mv "$dest.part" "$dest"
    fi
    echo "$dest"
}

next=0
[ "${#DONE_NEXT[@]}" -gt 0 ] && next=${DONE_NEXT[${#DONE_NEXT[@]}-1]}
for ((i = ${#DONE_FILES[@]}; i < FILES; i++)); do
    f=$(parquet_name "$i")
    say "[$((i + 1))/$FILES] $f"
    pq=$(get_parquet "$f")
    rm -rf "$WORK"
    mkdir -p "$WORK"
    "$PYTHON" dev/data/to_jsonl.py --field text -o "$WORK/part.jsonl" "$pq" ||
        die "converting $pq to JSONL failed (see above); a truncated download? delete $pq and rerun"
    val=0
    [ "$i" = 0 ] && val=$VAL_TOKENS
    "$PREPRO" --input "$WORK/part.jsonl" --format jsonl --out-dir "$WORK" --name part \
        --val-tokens "$val" --shard-tokens "$SHARD_TOKENS" || die "prepro failed on $pq"
    rm -f "$WORK/part.jsonl"
    if [ "$i" = 0 ]; then
        if [ "$val" -gt 0 ]; then mv "$WORK/part_val_000000.bin" "$OUT/${NAME}_val_000000.bin"
        else rm -f "$OUT/${NAME}_val_000000.bin"; fi
    fi
    first=$next
    tokens=0
    for ((k = 0; ; k++)); do
        src=$(printf '%s/part_train_%06d.bin' "$WORK" "$k")
        [ -f "$src" ] || break
        tokens=$((tokens + $(od -An -t d4 -j 8 -N 4 "$src" | tr -d ' ')))
        mv "$src" "$(train_path "$next")"
        next=$((next + 1))
    done
    [ "$next" -gt "$first" ] || die "prepro wrote no train shards for $pq"
    echo "$f $first $((next - first)) $tokens" >>"$PROGRESS"
    say "$f: train shards $first..$((next - 1)), $tokens tokens"
    rm -rf "$WORK"
    if [ "$KEEP_PARQUET" = 0 ] && [ "$pq" = "$OUT/raw/$f" ]; then rm -f "$pq"; fi
done
# shards of an earlier, larger run would be picked up by the glob
remove_train_from "$next"
say "done: $OUT/${NAME}_{val,train}_*.bin, $next train shards from $FILES parquet files"
