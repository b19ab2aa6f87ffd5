#!/usr/bin/env bash
# tinystories.sh: the data step for TinyStories (Eldan & Li, 2023). Takes the archive
# TinyStories_all_data.tar.gz of the Hugging Face dataset roneneldan/TinyStories (JSON
# files data00.json ... data49.json, each an array of objects whose "story" field is one
# story), turns the stories into JSONL with dev/data/to_jsonl.py (white space stripped at
# both ends, as llama2.c's TinyStories script does) and tokenizes them with ./prepro into
#   data/tinystories/tinystories_val_000000.bin     every story of the first JSON file
#   data/tinystories/tinystories_train_%06d.bin     the stories of the other files, in
#                                                   shards of 100M tokens
# Files are taken in name order, stories in file order; every story is a document (the
# end-of-text token 50256 before each).
#
# The val split: llm.c's convention is that the first shard of the data is val; for
# TinyStories that is the first JSON file (data00.json), the whole of it. prepro can only
# split off the first N tokens, so this script first tokenizes data00.json alone to count
# its tokens N (a few seconds) and then gives prepro --val-tokens N: val is exactly the
# stories of data00.json, train exactly the rest. --val-tokens N overrides this (the
# first N tokens, cutting a story in two where N falls inside one).
#
# Where the archive comes from, first match wins:
#   1. $LLMC_DATA_MIRROR/tinystories/TinyStories_all_data.tar.gz  (read in place)
#   2. $LLMC_DATA_MIRROR/tinystories/data*.json                    (an unpacked mirror)
#   3. OUT/TinyStories_all_data.tar.gz, downloaded earlier
#   4. a download (resumable: curl -C -) from
#      https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main/TinyStories_all_data.tar.gz
#      into OUT/TinyStories_all_data.tar.gz (about 1.5 GB; HF_TOKEN, when set, is sent)
# LLMC_DATA_MIRROR defaults to ../shared/data next to the repository when that exists.
# Needs about 5x the archive's size of free disk while it runs (the unpacked JSON and
# the JSONL are deleted at the end unless --keep).
#
# Does nothing when the shards of an earlier run are there and newer than ./prepro
# (a stamp file OUT/.tinystories.done records the run); --force redoes it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

ARCHIVE=TinyStories_all_data.tar.gz
HF_BASE="${LLMC_HF_BASE:-https://huggingface.co}"   # LLMC_HF_BASE: for tests
URL="$HF_BASE/datasets/roneneldan/TinyStories/resolve/main/$ARCHIVE"
OUT=data/tinystories
NAME=tinystories
VAL_TOKENS=auto
KEEP=0
FORCE=0
source dev/data/common.sh

usage() {
    cat <<EOF
usage: dev/data/tinystories.sh [--out-dir DIR] [--val-tokens N] [--keep] [--force]

Downloads (or takes from \$LLMC_DATA_MIRROR/tinystories/) TinyStories_all_data.tar.gz
and tokenizes it into DIR/${NAME}_val_000000.bin (the stories of data00.json) and
DIR/${NAME}_train_%06d.bin (the rest, 100M tokens a shard). See the comment at the top
of this script for the details.

  --out-dir DIR    output directory (default $OUT)
  --val-tokens N   val = the first N tokens instead of the whole first JSON file
  --keep           keep the unpacked JSON files and the JSONL in DIR/work/
  --force          redo the tokenization even when the shards are up to date
  -h, --help       this text
Environment: LLMC_DATA_MIRROR (local mirror, default ../shared/data), PREPRO (default
./prepro), PYTHON (default python3), HF_TOKEN (sent to Hugging Face when set).
EOF
}


while [ $# -gt 0 ]; do
    case "$1" in
        --out-dir) [ $# -ge 2 ] || die "--out-dir needs a value"; OUT="$2"; shift 2 ;;
        --val-tokens) [ $# -ge 2 ] || die "--val-tokens needs a value"; VAL_TOKENS="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --force) FORCE=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument '$1'" ;;
    esac
done
case "$VAL_TOKENS" in
    auto) ;;
    ''|*[!0-9]*) die "--val-tokens must be a non-negative integer, not '$VAL_TOKENS'" ;;
esac
MIRROR_DIR="${LLMC_DATA_MIRROR:+$LLMC_DATA_MIRROR/tinystories}"

ensure_prepro
require_python

VAL="$OUT/${NAME}_val_000000.bin"
TRAIN0="$OUT/${NAME}_train_000000.bin"
STAMP="$OUT/.$NAME.done"
WORK="$OUT/work"
SIGNATURE="val_tokens=$VAL_TOKENS"

# up to date?
if [ "$FORCE" = 0 ] && [ -f "$STAMP" ] && [ -f "$TRAIN0" ] && [ "$STAMP" -nt "$PREPRO" ] &&
   [ "$(cat "$STAMP")" = "$SIGNATURE" ] && { [ "$VAL_TOKENS" = 0 ] || [ -f "$VAL" ]; }; then
    say "$OUT/${NAME}_{val,train}_*.bin are up to date ($STAMP; --force redoes them)"
    exit 0
fi
rm -f "$STAMP"
mkdir -p "$OUT"

# partial_note FILE: a sentence about a kept partial download, when there is one
partial_note() {
    if [ -s "$1" ]; then echo " The partial download $1 is resumed next time."; fi
}

# download URL DEST: resumable download into DEST (DEST.part while incomplete)
download() {
    local url="$1" dest="$2"
    command -v curl >/dev/null 2>&1 || die "curl is not installed to download $url"
    say "downloading $url"
    local auth=()
    [ -n "${HF_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $HF_TOKEN")
    if ! curl -fL --retry 3 --retry-delay 5 --connect-timeout 20 -C - "${auth[@]}" \
            -o "$dest.part" "$url"; then
        die "cannot download $url (no network?). Put $ARCHIVE (or its unpacked data*.json)
  in \$LLMC_DATA_MIRROR/tinystories/ (LLMC_DATA_MIRROR is '${LLMC_DATA_MIRROR:-unset}'),
  or at $dest.$(partial_note "$dest.part")"
    fi
    mv "$dest.part" "$dest"
}

# find the JSON files
rm -rf "$WORK"
mkdir -p "$WORK"
if [ -n "$MIRROR_DIR" ] && [ -f "$MIRROR_DIR/$ARCHIVE" ]; then
    TARBALL="$MIRROR_DIR/$ARCHIVE"
elif [ -n "$MIRROR_DIR" ] && compgen -G "$MIRROR_DIR/data*.json" >/dev/null; then
    TARBALL=""
    say "using the unpacked JSON files in $MIRROR_DIR/"
    ln -s "$(cd "$MIRROR_DIR" && pwd)" "$WORK/json"
else
    TARBALL="$OUT/$ARCHIVE"
    [ -f "$TARBALL" ] || download "$URL" "$TARBALL"
fi
if [ -n "$TARBALL" ]; then
    say "unpacking $TARBALL into $WORK/json/"
    mkdir -p "$WORK/json"
    tar -xzf "$TARBALL" -C "$WORK/json" ||
        die "cannot unpack $TARBALL: truncated or not a .tar.gz? (delete it to download it again)"
fi
JSONS=()
while IFS= read -r f; do JSONS+=("$f"); done < <(find -L "$WORK/json" -type f -name 'data*.json' | LC_ALL=C sort)
[ "${#JSONS[@]}" -gt 0 ] || die "no data*.json files in ${TARBALL:-$MIRROR_DIR}: not the TinyStories archive?"
say "${#JSONS[@]} JSON files, ${JSONS[0]##*/} ... ${JSONS[${#JSONS[@]}-1]##*/}"

# the token count of the first file = the val split
if [ "$VAL_TOKENS" = auto ]; then
    [ "${#JSONS[@]}" -ge 2 ] || die "only one JSON file: with all of it as val no train tokens would be left (give --val-tokens N)"
    "$PYTHON" dev/data/to_jsonl.py --field story --strip -o "$WORK/first.jsonl" "${JSONS[0]}"
    "$PREPRO" --input "$WORK/first.jsonl" --format jsonl --out-dir "$WORK/count" --name first \
        --val-tokens 0 --shard-tokens 2000000000 >"$WORK/count.log" ||
        { cat "$WORK/count.log" >&2; die "tokenizing ${JSONS[0]} failed"; }
    n=$(od -An -t d4 -j 8 -N 4 "$WORK/count/first_train_000000.bin" | tr -d ' ')
    { [ -n "$n" ] && [ "$n" -gt 0 ]; } || die "cannot read the token count of $WORK/count/first_train_000000.bin"
    VAL_N=$n
    say "val = the $VAL_N tokens of ${JSONS[0]##*/}"
    rm -rf "$WORK/count"
    mv "$WORK/first.jsonl" "$WORK/all.jsonl"
    if [ "${#JSONS[@]}" -ge 2 ]; then
        "$PYTHON" dev/data/to_jsonl.py --field story --strip "${JSONS[@]:1}" >>"$WORK/all.jsonl" ||
            die "converting the JSON files to JSONL failed (see above)"
    fi
else
    VAL_N=$VAL_TOKENS
    "$PYTHON" dev/data/to_jsonl.py --field story --strip -o "$WORK/all.jsonl" "${JSONS[@]}" ||
        die "converting the JSON files to JSONL failed (see above)"
fi

"$PREPRO" --input "$WORK/all.jsonl" --format jsonl --out-dir "$OUT" --name "$NAME" \
    --val-tokens "$VAL_N" --shard-tokens 100000000

if [ "$KEEP" = 0 ]; then
    rm -rf "$WORK"
else
    say "kept $WORK/"
fi
echo "$SIGNATURE" >"$STAMP"
say "done: $OUT/${NAME}_{val,train}_*.bin"
