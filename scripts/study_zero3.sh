#!/usr/bin/env bash
# scripts/study_zero3.sh: what -z 3 (the parameters sharded; docs/memory.md "ZeRO-3") costs and
# saves, on one GPU.
#   memory  GPT-2 1.5B (d48), T=1024, B=4, -r 3, with 4 ranks sharing this GPU through
#           --comm mpi, at -z 1, -z 2 and -z 3 (--prefetch-layers 1: two layer slots), 2 steps each: each process's own device memory
#           at peak (nvidia-smi's per-process use, sampled every 200 ms: its CUDA context
#           included) beside the planner's figure for a rank (the run's "memory plan" line).
#   speed   GPT-2 1.5B, T=1024, 524,288 tokens a step, on one GPU: the whole card's fastest run
#           (-b 16 -r 0, docs/memory.md's study; also -b 8 -r 1), the best earlier run in 8 GiB (--offload 2 -r 3 -b 2), and -z 3
#           --offload 2 (the parameters in host memory, each layer copied in ahead of use) in
#           8 GiB (-r 3 -b 8, with one and two layers gathered ahead, and -r 1 -b 2) and in 4 GiB (-r 3 -b 1); 3 steps each, the means of
#           steps 2-3: ms/step, tokens/s, J/step, device memory at peak, the share of the whole
#           card's tokens/s. Targets: 80% of the whole card in 8 GiB, 60% in 4 GiB.
#   recompute  the whole card at the 8 GiB run's -r 3 -b 8: what the recomputation costs apart
#           from the copies.
# Writes $OUT/rows.tsv and the runs' logs, prints one table last ($OUT/table.txt).
# Run from the repository root on the GPU machine; binaries from $BIN (default dist/gpu/bin,
# scripts/gpu_bundle.sh), shards from $DATA (default dist/gpu/data). PARTS (default
# "memory speed recompute"); SPEED_ROWS: the speed rows to run (default all, e.g. "whole
# z3_8g_r3b8"); TABLE_ONLY=1 prints the table of an existing $OUT/rows.tsv.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/study_zero3}
PARTS=${PARTS:-memory speed recompute}
mkdir -p "$OUT"
ROWS="$OUT/rows.tsv"
TRAIN="$DATA/tiny_shakespeare_train_*.bin"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck source=scripts/study_lib.sh
. scripts/study_lib.sh

# memory Z: 4 ranks at -z Z; one line in rows.tsv: the largest per-process peak, every rank's, the plan
memory() {
    local z=$1 dir="$OUT/memory_z$1" smi="$OUT/memory_z$1.smi"
    rm -rf "$dir"
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 200 > "$smi" 2>&1 &
    local sampler=$!
    # the whole GPU's use too (where the per-process query sees no processes, as in some containers)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$smi.total" 2>&1 &
    local total_sampler=$!
    timeout 400 mpirun --oversubscribe --bind-to none -np 4 "$BIN/train_gpt2cu" --comm mpi -z "$z" -e d48 \
        -i "$TRAIN" -j "$TRAIN" -b 4 -t 1024 -d 16384 -r 3 -x 2 -v 0 -s 0 -n 0 -l 1e-4 --max-device-memory 79G \
        --prefetch-layers 1 \
        > "$dir.log" 2>&1
    local rc=$?
    kill "$sampler" "$total_sampler" 2> /dev/null
    wait "$sampler" "$total_sampler" 2> /dev/null
    local per plan total
    total=$(awk '$1+0 > m {m = $1+0} END{print m+0}' "$smi.total")
    per=$(awk -F', *' 'NF==2 && $2+0>0 {if ($2+0 > m[$1]) m[$1]=$2+0} END{for (p in m) print m[p]}' "$smi" |
          sort -n | tr '\n' ' ')
    plan=$(grep -o 'memory plan: [0-9.]* GiB' "$dir.log" | head -1 | awk '{printf "%.0f", $3 * 1024}')
    printf 'memory\td48\tz%s\t%s\t%s\t%s\trc=%s; the GPU at peak %s MiB (4 ranks)\n' "$z" \
        "$(echo "$per" | awk '{print $NF}')" "${plan:--}" "$per" "$rc" "$total" >> "$ROWS"
    echo "memory -z $z: rc $rc, per-process peaks (MiB) $per, plan ${plan:--} MiB, the GPU at peak $total MiB"
}

# speed ROW BUDGET FLAGS...: GPT-2 1.5B on one GPU (console in $OUT/speed_ROW.log), one line in rows.tsv
speed() {
    local row=$1 budget=$2
    shift 2
    [[ -n ${SPEED_ROWS:-} && " $SPEED_ROWS " != *" $row "* ]] && return 0
    local dir="$OUT/speed_$row"
    fresh_run_dir "$dir"
    local mem=()
    [ "$budget" != - ] && mem=(--max-device-memory "$budget")
    timeout 500 "$BIN/train_gpt2cu" -e d48 -i "$TRAIN" -j "$TRAIN" -t 1024 -d 524288 -x 3 -v 0 -s 0 -n 0 -l 1e-4 \
        -o "$dir" "${mem[@]}" "$@" > "$dir.log" 2>&1
    local rc=$?
    printf 'speed\td48\t%s\t%s\t%s\trc=%s %s\n' "$row" "$budget" "$(run_summary "$dir")" "$rc" "$*" >> "$ROWS"
    echo "speed $row ($budget): rc $rc, $(tail -1 "$ROWS" | cut -f5-6) (ms/step, tok/s)"
}

[ "${TABLE_ONLY:-0}" = 1 ] && PARTS=""
[ -n "$PARTS" ] && : > "$ROWS"
[ -n "$PARTS" ] && nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader > "$OUT/gpu.txt" 2>&1
for part in $PARTS; do
    case $part in
    memory) for z in 1 2 3; do memory "$z"; done ;;
    speed)
        speed whole - -b 16 -r 0
        speed whole_b8r1 - -b 8 -r 1
        speed offload2_8g 8G --offload 2 -r 3 -b 2
        speed z3_8g_r3b8 8G -z 3 --offload 2 -r 3 -b 8 --prefetch-layers 1
        speed z3_8g_r3b8_p2 8G -z 3 --offload 2 -r 3 -b 8 --prefetch-layers 2
        speed z3_8g_r1b2 8G -z 3 --offload 2 -r 1 -b 2 --prefetch-layers 1
        speed z3_4g_r3b1 4G -z 3 --offload 2 -r 3 -b 1 --prefetch-layers 1
        ;;
    recompute) speed whole_r3b8 - -b 8 -r 3 ;;  # the 8 GiB run's recomputation on the whole card
    *) echo "unknown part '$part' (memory, speed, recompute)"; exit 1 ;;
    esac
done

{
    echo "GPU: $(cat "$OUT/gpu.txt" 2> /dev/null)"
    echo "per-rank device memory, d48 T=1024 B=4 -r 3, 4 ranks on one GPU (--comm mpi), MiB:"
    printf '%-6s %12s %12s   %s\n' stage "peak (max)" planned "every rank's peak"
    awk -F'\t' '$1=="memory" {printf "%-6s %12s %12s   %s %s\n", $3, $4, $5, $6, $7}' "$ROWS"
    echo "GPT-2 1.5B on one GPU, T=1024, 524,288 tokens a step (means of steps 2-3):"
    printf '%-12s %6s %10s %10s %8s %10s %8s  %s\n' run budget ms/step tok/s J/step "peak MiB" "x whole" flags
    awk -F'\t' '$1=="speed" && $3=="whole" {w=$6}
        $1=="speed" {r=(w>0 && $6+0>0) ? sprintf("%.1f%%", 100*$6/w) : "-"
                     printf "%-12s %6s %10s %10s %8s %10s %8s  %s\n", $3, $4, $5, $6, $8, $9, r, $11}' "$ROWS"
} | tee "$OUT/table.txt"
