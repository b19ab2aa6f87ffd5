#!/usr/bin/env bash
# same_kernels.sh: does the GPU trainer of this tree compile to the same device code as that
# of an older commit? No GPU needed. For a change that must not change what the GPU computes
# (a restructuring of the host code), a check that runs before any GPU is at hand:
#
#   dev/same_kernels.sh OLD_REV        e.g. dev/same_kernels.sh fafcf0f
#
# train_gpt2.cu of OLD_REV (exported with git archive) and of the working tree are compiled
# to PTX for sm_90a (the Hopper pass, which holds every kernel the other passes have and the
# wgmma ones) in each precision (BF16, FP16, FP32), and the PTX is compared symbol by symbol
# (kernels, device functions, globals; the "// .globl" comment lines, which name the next
# symbol, left out). Prints per precision the symbols only in the old or only in the new
# code and those whose code changed; exits 1 when a symbol's code changed, 0 otherwise (a
# symbol only on one side is listed for the reader to judge: a kernel no longer compiled
# in, a new one), 2 when it cannot start. The host code is not compared: same_behaviour_gpu.sh
# runs both builds on a GPU.
#   NVCC=nvcc  KEEP=DIR (the PTX files are kept there)
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# = 1 ] || { echo "usage: $0 OLD_REV" >&2; exit 2; }
git rev-parse --verify -q "$1^{commit}" > /dev/null || { echo "error: $1 is not a commit here" >&2; exit 2; }
NVCC=${NVCC:-nvcc}
command -v "$NVCC" > /dev/null || { echo "error: no $NVCC on the PATH" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/old"
git archive "$1" | tar -x -C "$W/old" || { echo "error: cannot export $1" >&2; exit 2; }

# ptx TREE PRECISION OUT: the PTX of TREE's train_gpt2.cu, split into symbols, sorted by name
ptx() {
    (cd "$1" && "$NVCC" -O3 -std=c++17 -arch=compute_90a -ptx -DFLASH_WGMMA=1 -I. -DPRECISION="$2" \
        -o "$3.ptx" train_gpt2.cu) || return 1
    python3 - "$3.ptx" "$3" << 'PY'
import re, sys
lines = [l for l in open(sys.argv[1]).read().split("\n") if not l.strip().startswith("// .globl")]
parts = re.split(r"\n(?=(?:\.visible |\.weak |\.extern )?(?:\.entry|\.func|\.global|\.const|\.shared) )", "\n".join(lines))
symbols = {}
for p in parts[1:]:
    m = re.search(r"(?:\.entry|\.func|\.global|\.const|\.shared)\s+(?:\.\w+\s+)*(?:\([^)]*\)\s*)?([\w$]+)", p)
    symbols.setdefault(m.group(1) if m else p[:80], []).append(p.strip())
with open(sys.argv[2], "w") as f:
    for name in sorted(symbols):
        for body in sorted(symbols[name]):
            f.write("== " + name + "\n" + body + "\n")
PY
}

status=0
for p in BF16 FP16 FP32; do
    if ! ptx "$W/old" $p "$W/old_$p" > "$W/old_$p.log" 2>&1; then echo "error: $1 does not compile in $p: $(tail -2 "$W/old_$p.log")"; exit 2; fi
    if ! ptx "$PWD" $p "$W/new_$p" > "$W/new_$p.log" 2>&1; then echo "error: this tree does not compile in $p: $(tail -2 "$W/new_$p.log")"; exit 2; fi
    python3 - "$W/old_$p" "$W/new_$p" $p << 'PY' || status=1
import sys
def load(path):
    d, name = {}, None
    for line in open(path):
        if line.startswith("== "):
            name = line[3:].strip()
            d[name] = d.get(name, "")
        else:
            d[name] += line
    return d
old, new, p = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
changed = sorted(n for n in set(old) & set(new) if old[n] != new[n])
print(f"{p}: {len(old)} symbols old, {len(new)} new; only old: {sorted(set(old) - set(new)) or 'none'}; "
      f"only new: {sorted(set(new) - set(old)) or 'none'}; changed: {changed or 'none'}")
sys.exit(1 if changed else 0)
PY
done
[ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$W"/old_* "$W"/new_* "$KEEP"/
exit $status
