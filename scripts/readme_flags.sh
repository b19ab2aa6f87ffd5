#!/usr/bin/env bash
# readme_flags.sh: keeps the option lists in docs/command-line.md equal to the programs'
# own --help. The document holds one block per program between two marker lines:
#
#   <!-- flags: train_gpt2 -->
#   ```
#   (the lines after "Options:" in ./train_gpt2 --help)
#   ```
#   <!-- end flags -->
#
# Usage (from anywhere; paths are relative to the repository root):
#   scripts/readme_flags.sh [PROGRAM...]          rewrite the blocks of PROGRAM (default:
#                                                 every block whose program is built)
#   scripts/readme_flags.sh --check [PROGRAM...]  compare only: exit 1 and print the diff
#                                                 when a block differs from --help
#   scripts/readme_flags.sh --print PROGRAM       print PROGRAM's option list
# Options:
#   --doc FILE    the document (default docs/command-line.md)
#   --bin DIR     where the programs are (default: the repository root)
# Exit codes: 0 done (or equal), 1 a block differs (--check), 2 usage or a missing
# program, block or marker.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DOC=docs/command-line.md
BIN=.
mode="write"
progs=()
while [ $# -gt 0 ]; do
    case "$1" in
        --check) mode=check ;;
        --print) mode=print ;;
        --doc) DOC=${2:?--doc needs a file}; shift ;;
        --bin) BIN=${2:?--bin needs a directory}; shift ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "readme_flags.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
        *) progs+=("$1") ;;
    esac
    shift
done

die() { echo "readme_flags.sh: $*" >&2; exit 2; }

# option_list PROGRAM: the lines after "Options:" in PROGRAM --help, trailing blanks cut
option_list() {
    local exe="$BIN/$1" out
    [ -x "$exe" ] || die "$exe is not built (make $1)"
    out=$("$exe" --help 2>&1) || die "$exe --help failed: $(printf '%s\n' "$out" | tail -n 1)"
    printf '%s\n' "$out" | awk '
        found { sub(/[ \t]+$/, ""); print; next }
        /^Options:[ \t]*$/ { found = 1 }
        END { if (!found) exit 3 }' || die "$exe --help prints no 'Options:' line"
}

if [ $mode = print ]; then
    [ ${#progs[@]} = 1 ] || die "--print takes one program"
    option_list "${progs[0]}"
    exit 0
fi

[ -f "$DOC" ] || die "$DOC not found"
# the programs with a block in the document, in order
mapfile -t in_doc < <(sed -n 's/^<!-- flags: \([A-Za-z0-9_./-]*\) -->$/\1/p' "$DOC")
if [ ${#progs[@]} = 0 ]; then
    for p in "${in_doc[@]}"; do
        if [ -x "$BIN/$p" ]; then progs+=("$p")
        else echo "readme_flags.sh: $BIN/$p is not built: its block is left as it is" >&2; fi
    done
    [ ${#progs[@]} -gt 0 ] || die "none of the programs with a block in $DOC is built"
fi

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for p in "${progs[@]}"; do
    printf '%s\n' "${in_doc[@]}" | grep -qxF -- "$p" || die "$DOC has no block '<!-- flags: $p -->'"
    option_list "$p" > "$W/$p.flags"
done

# the document with the chosen programs' blocks replaced
awk -v dir="$W" -v list="${progs[*]}" '
    BEGIN { n = split(list, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
    inside { if ($0 == "<!-- end flags -->") { print; inside = 0 } ; next }
    {
        print
        if (match($0, /^<!-- flags: [A-Za-z0-9_.\/-]+ -->$/)) {
            p = substr($0, 13, length($0) - 16)
            if (p in want) {
                print "```"
                f = dir "/" p ".flags"
                while ((getline line < f) > 0) print line
                close(f)
                print "```"
                inside = 1
                start = NR
            }
        }
    }
    END { if (inside) { printf "line %d: a flags block without its <!-- end flags --> line\n", start > "/dev/stderr"; exit 3 } }
' "$DOC" > "$W/doc.new" || die "$DOC: a block is not closed"

if [ $mode = check ]; then
    if diff -u --label "$DOC" --label "$DOC (from --help)" "$DOC" "$W/doc.new"; then
        echo "readme_flags.sh: $DOC matches --help of: ${progs[*]}"
        exit 0
    fi
    echo "readme_flags.sh: $DOC differs from --help (above); run scripts/readme_flags.sh ${progs[*]}" >&2
    exit 1
fi
if cmp -s "$DOC" "$W/doc.new"; then
    echo "readme_flags.sh: $DOC already matches --help of: ${progs[*]}"
else
    cat "$W/doc.new" > "$DOC"
    echo "readme_flags.sh: rewrote the blocks of ${progs[*]} in $DOC"
fi
