#!/usr/bin/env bash
# same_plans.sh: does a new train_gpt2cu plan device memory exactly as an old one did? No GPU
# needed: each run stops at --max-device-memory's verdict (a plan over the budget, with the
# settings that fit) or, within the budget, at the missing GPU; the two binaries' output and
# exit status must be byte for byte the same for every setting:
#
#   dev/test/same_plans.sh OLD_BINARY NEW_BINARY
#
# (e.g. a train_gpt2cu built at the old commit and one at the new). Settings: GPT-2 124M and
# 350M (MODELS="d12 d24", -e descriptors), budgets 4G 8G 16G 40G, and 14 combinations of
# -b, -r, -z, --offload, --optimizer-state, --fp8, --cuda-graph and -d: 112 settings.
# Prints each setting that differs with the start of its diff, then "N settings: S same,
# D different"; exits 1 when one differs, 2 when it cannot start.
set -u
cd "$(dirname "$0")/../.." || exit 2
[ $# = 2 ] && [ -x "$1" ] && [ -x "$2" ] || { echo "usage: $0 OLD_BINARY NEW_BINARY (two train_gpt2cu executables)" >&2; exit 2; }
OLD=$1 NEW=$2
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
EXTRAS=("-b 8 -r 1" "-b 16 -r 0" "-b 4 -r 3 -z 3 --offload 2" "-b 8 -r 2 --offload 1"
        "-b 32 -r 1 --optimizer-state bf16" "-b 8 -r 1 --fp8 1" "-b 8 -r 1 --fp8 1 --fp8-weights kept"
        "-b 8 -r 1 --fp8 1 --fp8-weights cast" "-b 1 -r 3 -d 524288" "-b 64 -r 0 -d -1" "-b 8 -r 1 --cuda-graph 1"
        "-b 2 -r 1 -z 1" "-b 16 -r 1 -z 3 --prefetch-layers 1" "-b 4 -r 2 --offload 2 -d 65536")
n=0 same=0
for model in ${MODELS:-d12 d24}; do
    for mem in 4G 8G 16G 40G; do
        for extra in "${EXTRAS[@]}"; do
            # shellcheck disable=SC2206  # each extra is a list of flags
            args=(-e "$model" -t 1024 $extra --max-device-memory "$mem" -o "$W/run" -i "$W/no_shards_*.bin")
            for side in old new; do
                bin=$OLD
                [ $side = new ] && bin=$NEW
                "$bin" "${args[@]}" > "$W/$side.txt" 2>&1
                echo "exit $?" >> "$W/$side.txt"
                rm -rf "$W/run"
            done
            n=$((n + 1))
            if cmp -s "$W/old.txt" "$W/new.txt"; then same=$((same + 1))
            else echo "DIFFERENT: ${args[*]}"; diff "$W/old.txt" "$W/new.txt" | head -6; fi
        done
    done
done
echo "$n settings: $same same, $((n - same)) different"
[ $same = $n ]
