#!/usr/bin/env bash
# scripts/bench_gpu.sh: the GPU speed benchmark (docs/performance.md: What is measured, How to reproduce), in one run.
# Runs train_gpt2cu and the PyTorch baseline (dev/train_gpt2_torch.py) one after the other
# on the same GPU:
#   GPT-2 124M (d12), B=64, T=1024, bf16: train_gpt2cu at -r $CU_R (default 0 1 2), and PyTorch
#     (torch.compile of the whole model);
#   GPT-2 350M (d24), T=1024, at the largest B of $D24_BATCHES (default "64 32 16") that
#     runs: train_gpt2cu at -r 0, PyTorch with --compile blocks (each block compiled once
#     and shared by all layers: the whole-model compile of 24 layers outlasts the time budget).
# Each run is $STEPS steps (default 30); the figures are the means over steps 11..N (the
# first 10 hold the compile and warm-up): train_gpt2cu's from the summary record that ends
# its run's metrics.jsonl ($W/NAME/, scripts/study_lib.sh), PyTorch's from its SUMMARY line.
# Peak memory: train_gpt2cu's own (cudaMemGetInfo, this process), PyTorch's
# max_memory_reserved (and max_memory_allocated); the maximum of nvidia-smi memory.used
# sampled every 200 ms during each run is a cross-check (whole GPU, CUDA context included);
# the same samples give the mean SM clock and board power while the run held the GPU. J/step:
# the board's energy counter (NVML) over the timed steps, as each program measures it ("-": not
# available on that machine).
#
# Run from the repository root on the GPU machine:   scripts/bench_gpu.sh
# Needs ./train_gpt2cu (built with make train_gpt2cu if absent or unrunnable) and
# data/tinyshakespeare/*.bin (copied from $DATA, default dist/gpu/data, else made with make
# data, if absent). A new run starts only while less than $BUDGET_S seconds (default 210)
# have passed. Full logs: $OUT (default out/bench_gpu) as all_logs.txt and logs.tar.gz; the
# table, printed last, is also $OUT/table.txt.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-out/bench_gpu}
STEPS=${STEPS:-30}
BUDGET_S=${BUDGET_S:-210}
D24_BATCHES=${D24_BATCHES-"64 32 16"}  # set empty to skip d24
CU_R=${CU_R:-"0 1 2"}                  # recompute levels of train_gpt2cu to time at d12
# FLAGS: extra train_gpt2cu options (e.g. FLAGS="--flash-attention 1")
# CU_ALT: other train_gpt2cu options timed as well at each d12 -r of CU_R, in rows named
#   train_gpt2cu_r<r>_alt (e.g. CU_ALT="--deterministic 0")
T=1024
CU=${CU:-./train_gpt2cu}
DATA=${DATA:-dist/gpu/data}
mkdir -p "$OUT"
W=$(mktemp -d)
START=$(date +%s)
export PYTHONUNBUFFERED=1
# shellcheck source=scripts/study_lib.sh
. scripts/study_lib.sh
TABLE="$W/table.tsv"
printf '%s\t' program model B ms/step tokens/s MFU J/step 'peak device memory' 'nvidia-smi max used' > "$TABLE"
echo 'mean SM clock, power (power-capped share of samples)' >> "$TABLE"

nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm,clocks.max.sm,driver_version --format=csv \
    > "$W/00_gpu.log" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' >> "$W/00_gpu.log" 2>&1
cat "$W/00_gpu.log"

if ! $CU -h > /dev/null 2>&1; then
    echo "./train_gpt2cu missing or does not run here: building it"
    make train_gpt2cu > "$W/00_build.log" 2>&1 || { echo "build failed"; tail -20 "$W/00_build.log"; }
fi
if ! ls data/tinyshakespeare/tiny_shakespeare_train_*.bin > /dev/null 2>&1; then
    if ls "$DATA"/tiny_shakespeare_train_*.bin > /dev/null 2>&1; then
        # a GPU host without compiler or network gets them from scripts/gpu_bundle.sh
        mkdir -p data/tinyshakespeare && cp "$DATA"/*.bin data/tinyshakespeare/
    else
        echo "no Tiny Shakespeare shards: make data"
        make data > "$W/00_data.log" 2>&1 || { echo "make data failed"; tail -20 "$W/00_data.log"; }
    fi
fi

left() { echo $((BUDGET_S - ($(date +%s) - START))); }

# whether the board's power limit is holding the clock down (the field's name depends on
# the driver; none: not sampled)
CAP_FIELD=""
for f in clocks_event_reasons.sw_power_cap clocks_throttle_reasons.sw_power_cap; do
    if nvidia-smi --help-query-gpu 2>/dev/null | grep -q "$f"; then CAP_FIELD=",$f"; break; fi
done

# run NAME LIMIT_S CMD...: runs CMD with its output in $W/NAME.log, sampling nvidia-smi
run() {
    local name=$1 lim=$2; shift 2
    local l; l=$(left)
    [ "$lim" -gt "$l" ] && lim=$l
    if [ "$lim" -lt 20 ]; then
        echo "skipped $name: time budget spent" | tee "$W/$name.log"
        return 99
    fi
    echo "== $name (limit ${lim}s): $*"
    nvidia-smi --query-gpu=memory.used,clocks.sm,power.draw$CAP_FIELD --format=csv,noheader,nounits -lms 200 \
        > "$W/$name.smi" 2>/dev/null &
    local smi=$!
    local t0; t0=$(date +%s)
    { echo "\$ $*"; timeout "$lim" "$@"; echo "exit status $?"; } > "$W/$name.log" 2>&1
    local rc; rc=$(tail -1 "$W/$name.log" | awk '{print $3}')
    kill "$smi" 2> /dev/null; wait "$smi" 2> /dev/null
    echo "   exit $rc after $(( $(date +%s) - t0 ))s"
    return "$rc"
}

smi_max() { awk -F', *' '$1 > m { m = $1 } END { print (m == "" ? "?" : m " MiB") }' "$W/$1.smi" 2>/dev/null; }
# mean SM clock and board power over the samples from the first one whose memory in use
# reaches 90% of the run's maximum (training allocates it at its first step: start-up and
# PyTorch's compile are left out) to the last one above 10% (the exit is left out), and the
# share of those samples in which the power limit was capping the clock
smi_clock_power() {
    awk -v capf="$CAP_FIELD" -F', *' '{ m[NR] = $1; c[NR] = $2; p[NR] = $3; cap[NR] = ($4 == "Active")
                                        if ($1 > mx) mx = $1 }
        END { for (i = 1; i <= NR && m[i] < 0.9 * mx; i++);
              for (j = NR; j > i && m[j] <= mx / 10; j--);
              for (k = i; k <= j; k++) { n++; sc += c[k]; sp += p[k]; sa += cap[k] }
              if (n && mx > 0) printf("%.0f MHz, %.0f W%s", sc / n, sp / n,
                                      capf != "" ? sprintf(", power-capped %.0f%%", 100 * sa / n) : "")
              else print "?" }' "$W/$1.smi" 2>/dev/null
}

# rows from each program's own end-of-run figures
row_skipped() { printf '%s\t%s\t%s\tskipped (time)\t-\t-\t-\t-\t-\t-\n' "$1" "$2" "$3" >> "$TABLE"; }
row_cu() {  # NAME MODEL B
    local ms tok mfu joules mem
    if grep -q '^skipped' "$W/$1.log"; then row_skipped "$@"; return; fi
    # J/step: the board's energy counter over the same steps ("-": not measured)
    IFS=$'\t' read -r ms tok mfu joules mem _ <<< "$(run_summary "$W/$1")"
    if [ "$ms" = - ]; then
        printf '%s\t%s\t%s\tfailed\t-\t-\t-\t-\t%s\t-\n' "$1" "$2" "$3" "$(smi_max "$1")" >> "$TABLE"
        return
    fi
    [ "$mfu" = - ] || mfu="$mfu%"
    [ "$mem" = - ] || mem="$mem MiB"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$ms" "$tok" "$mfu" "$joules" "$mem" \
        "$(smi_max "$1")" "$(smi_clock_power "$1")" >> "$TABLE"
}
row_torch() {  # NAME MODEL B
    local log="$W/$1.log" s
    if grep -q '^skipped' "$log"; then row_skipped "$@"; return; fi
    s=$(grep -E '^SUMMARY ' "$log" | tail -1 | sed 's/^SUMMARY //')
    if [ -z "$s" ]; then
        printf '%s\t%s\t%s\tfailed\t-\t-\t-\t-\t%s\t-\n' "$1" "$2" "$3" "$(smi_max "$1")" >> "$TABLE"
        return
    fi
    echo "$s" | python3 -c 'import json, sys
d = json.load(sys.stdin)
print("%s\t%s\t%s\t%s\t%s\t%s%%\t%s\t%s MiB reserved (%s allocated)" % (sys.argv[1], d["model"], d["B"],
      d["ms_per_step"], d["tokens_per_s"], d["mfu_pct"], d.get("joules_per_step", "-"), d["max_reserved_MiB"],
      d["max_allocated_MiB"]))' "$1" \
        | sed "s/\$/\t$(smi_max "$1")\t$(smi_clock_power "$1")/" >> "$TABLE"
}

# cu_run NAME FLAGS...: train_gpt2cu within 60 s, its metrics in $W/NAME/
cu_run() {
    local name=$1
    shift
    fresh_run_dir "$W/$name"
    run "$name" 60 "$CU" -o "$W/$name" "$@"
}

# shellcheck disable=SC2206  # FLAGS is a list of options
CU_COMMON=(-t "$T" -x "$STEPS" -j "" -v 0 -s 0 -g 0 -n 0 -l 6e-4 -c 0.1 -k constant ${FLAGS:-})
TORCH=(python3 dev/train_gpt2_torch.py --seq-len "$T" --steps "$STEPS")

# 1. GPT-2 124M, B=64
for r in $CU_R; do
    cu_run "train_gpt2cu_r$r" -e d12 -b 64 -r "$r" "${CU_COMMON[@]}"
    row_cu "train_gpt2cu_r$r" d12 64
    if [ -n "${CU_ALT:-}" ]; then
        # shellcheck disable=SC2086  # CU_ALT is a list of options
        cu_run "train_gpt2cu_r${r}_alt" -e d12 -b 64 -r $r "${CU_COMMON[@]}" $CU_ALT
        row_cu "train_gpt2cu_r${r}_alt" d12 64
    fi
done
run pytorch_d12 170 "${TORCH[@]}" --model d12 --batch 64 --compile full
row_torch pytorch_d12 d12 64

# 2. GPT-2 350M at the largest batch that runs
for b in $D24_BATCHES; do
    cu_run "train_gpt2cu_r0_d24_b$b" -e d24 -b "$b" -r 0 "${CU_COMMON[@]}"
    rc=$?
    row_cu "train_gpt2cu_r0_d24_b$b" d24 "$b"
    [ $rc = 0 ] || [ $rc = 99 ] && break
done
for b in $D24_BATCHES; do
    run "pytorch_d24_b$b" 150 "${TORCH[@]}" --model d24 --batch "$b" --compile blocks
    rc=$?
    row_torch "pytorch_d24_b$b" d24 "$b"
    [ $rc = 0 ] || [ $rc = 99 ] && break
done

# the logs as two files, whatever the number of runs: one to read, one to unpack
for f in "$W"/*.log; do echo "######## $(basename "$f")"; cat "$f"; done > "$OUT/all_logs.txt"
tar czf "$OUT/logs.tar.gz" -C "$W" .
echo "total $(( $(date +%s) - START ))s"
echo
echo "GPU benchmark: mean over steps 11..$STEPS, T=$T, bf16 ($(head -2 "$W/00_gpu.log" | tail -1 | cut -d, -f1))"
[ -n "${CU_ALT:-}" ] && echo "(rows *_alt: train_gpt2cu with $CU_ALT)"
# aligned columns (the GPU machine has no column(1))
awk -F'\t' '{ for (i = 1; i <= NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n[NR] = NF }
     END { for (r = 1; r <= NR; r++) for (i = 1; i <= n[r]; i++)
               if (i < n[r]) printf("%-" w[i] "s  ", c[r, i]); else print c[r, i] }' \
    "$TABLE" | tee "$OUT/table.txt"
