#!/usr/bin/env bash
# tinyshakespeare.sh: the data step for the default dataset. Puts Tiny Shakespeare
# (1,115,394 bytes, from the char-rnn repository) at data/tinyshakespeare/input.txt and
# tokenizes it with ./prepro into
#   data/tinyshakespeare/tiny_shakespeare_val_000000.bin    (the first 32768 tokens)
#   data/tinyshakespeare/tiny_shakespeare_train_000000.bin  (the rest)
# following llm.c's convention: a new document (end-of-text token) after every "\n\n".
#
# The text comes from $LLMC_DATA_MIRROR/tinyshakespeare/input.txt when that exists
# (LLMC_DATA_MIRROR defaults to ../shared/data next to the repository, when that
# directory exists), else it is downloaded from the public address. Does nothing when
# the shards exist and are newer than ./prepro and the input. PREPRO=path overrides the
# tokenizer binary. Run from anywhere; paths are relative to the repository root.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

URL="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SIZE=1115394
OUT=data/tinyshakespeare
INPUT="$OUT/input.txt"
NAME=tiny_shakespeare
TRAIN="$OUT/${NAME}_train_000000.bin"
VAL="$OUT/${NAME}_val_000000.bin"
source dev/data/common.sh
file_size() { wc -c < "$1" | tr -d ' '; }

ensure_prepro

# up to date?
if [ -f "$TRAIN" ] && [ -f "$VAL" ] && [ -f "$INPUT" ] &&
   [ "$TRAIN" -nt "$PREPRO" ] && [ "$VAL" -nt "$PREPRO" ] &&
   [ "$TRAIN" -nt "$INPUT" ] && [ "$VAL" -nt "$INPUT" ]; then
    echo "tinyshakespeare.sh: $TRAIN and $VAL are up to date"
    exit 0
fi

mkdir -p "$OUT"
if [ ! -f "$INPUT" ] || [ "$(file_size "$INPUT")" != "$SIZE" ]; then
    MIRRORED="${LLMC_DATA_MIRROR:-}/tinyshakespeare/input.txt"
    if [ -n "${LLMC_DATA_MIRROR:-}" ] && [ -f "$MIRRORED" ]; then
        echo "tinyshakespeare.sh: copying $MIRRORED"
        [ "$(file_size "$MIRRORED")" = "$SIZE" ] ||
            die "$MIRRORED has $(file_size "$MIRRORED") bytes, expected $SIZE: not Tiny Shakespeare?"
        cp "$MIRRORED" "$INPUT.tmp"
        chmod u+w "$INPUT.tmp"
    else
        echo "tinyshakespeare.sh: downloading $URL"
        rm -f "$INPUT.tmp"
        if command -v curl >/dev/null 2>&1; then
            curl -fsSL --retry 2 --connect-timeout 20 -o "$INPUT.tmp" "$URL" || rm -f "$INPUT.tmp"
        elif command -v wget >/dev/null 2>&1; then
            wget -q -T 20 -O "$INPUT.tmp" "$URL" || rm -f "$INPUT.tmp"
        else
            die "neither curl nor wget is installed to download $URL"
        fi
        [ -f "$INPUT.tmp" ] || die "cannot download $URL (no network?). Put the file at
  \$LLMC_DATA_MIRROR/tinyshakespeare/input.txt (LLMC_DATA_MIRROR is '${LLMC_DATA_MIRROR:-unset}') or at $INPUT"
    fi
    got="$(file_size "$INPUT.tmp")"
    [ "$got" = "$SIZE" ] || { rm -f "$INPUT.tmp"; die "the Tiny Shakespeare text has $got bytes, expected $SIZE"; }
    mv "$INPUT.tmp" "$INPUT"
fi

"$PREPRO" --input "$INPUT" --format text --text-docs blank-lines \
    --out-dir "$OUT" --name "$NAME" --val-tokens 32768
