#!/usr/bin/env bash
# test_readme_flags.sh: the option lists in docs/command-line.md are what the programs'
# --help prints (scripts/readme_flags.sh --check), for train_gpt2 and prepro always and
# for train_gpt2cu where ./train_gpt2cu is built; and the check itself catches a changed
# line and the rewrite repairs it (on a temporary copy of the document).
# Exit status: 0 all passed, 1 something failed, 77 something was skipped and nothing
# failed. The last line is "N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
DOC=docs/command-line.md
. dev/test/testlib.sh
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# check PROGRAM: the block equals PROGRAM --help
check() {
    local p=$1
    if scripts/readme_flags.sh --check "$p" > "$W/check_$p.log" 2>&1; then
        ok "$p: the block in $DOC equals ./$p --help"
    else
        bad "$p: the block in $DOC differs from ./$p --help (run scripts/readme_flags.sh):"
        sed 's/^/      /' "$W/check_$p.log"
    fi
}

for p in train_gpt2 prepro; do
    if [ -x "./$p" ]; then check $p
    else bad "$p: ./$p is not built (make $p)"; fi
done
if [ -x ./train_gpt2cu ]; then check train_gpt2cu
else skip "train_gpt2cu: ./train_gpt2cu is not built here (nvcc), its block is not checked"; fi

# the check must fail on a changed flag line, show it, and the rewrite must repair it
if [ -x ./train_gpt2 ]; then
    cp "$DOC" "$W/doc.md"
    sed -i '/^<!-- flags: train_gpt2 -->$/,/^<!-- end flags -->$/ s/^\(  -b, --batch-size  *\)micro-batch size B/\1the batch size/' \
        "$W/doc.md"
    if cmp -s "$DOC" "$W/doc.md"; then
        bad "negative case: no '-b, --batch-size' line to change in the train_gpt2 block"
    else
        scripts/readme_flags.sh --check --doc "$W/doc.md" train_gpt2 > "$W/neg.log" 2>&1
        rc=$?
        if [ $rc = 1 ] && grep -q '^-  -b, --batch-size  *the batch size' "$W/neg.log" &&
           grep -q '^+  -b, --batch-size  *micro-batch size B' "$W/neg.log"; then
            ok "negative case: a changed flag line fails the check (exit 1) and the diff shows it"
        else
            bad "negative case: expected exit 1 and the changed line in the diff, got exit $rc:"
            sed 's/^/      /' "$W/neg.log"
        fi
        scripts/readme_flags.sh --doc "$W/doc.md" train_gpt2 > /dev/null 2>&1
        if scripts/readme_flags.sh --check --doc "$W/doc.md" train_gpt2 > /dev/null 2>&1 &&
           cmp -s "$DOC" "$W/doc.md"; then
            ok "negative case: the rewrite restores the block, and nothing else changes"
        else
            bad "negative case: after the rewrite the copy still differs from $DOC"
        fi
    fi
    # a block without its end marker is an error, not a silent rewrite of the rest
    sed '/^<!-- end flags -->$/d' "$DOC" > "$W/open.md"
    scripts/readme_flags.sh --check --doc "$W/open.md" train_gpt2 > "$W/open.log" 2>&1
    rc=$?
    if [ $rc = 2 ]; then ok "a block without its end marker is refused (exit 2)"
    else bad "a block without its end marker: expected exit 2, got $rc"; fi
fi

test_finish
