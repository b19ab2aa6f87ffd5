#!/usr/bin/env bash
# scripts/bench_multigpu.sh: data-parallel scaling on one machine of several GPUs, in one
# run. With NCCL (NVLink multicast off):
#   GPT-2 124M, B=64, T=1024, total batch 524288 tokens, $STEPS steps, on 1, 2, 4, 8 GPUs
#   (those the machine has) at ZeRO 0, 1, 2, 3: tokens/s, per-GPU tokens/s as a fraction of
#   the 1-GPU run (the scaling efficiency), peak memory per GPU (rank 0's own figure and
#   nvidia-smi's maximum over the GPUs), and the last step's loss beside the 1-GPU run
#   (which reaches the same total batch through 8 micro-steps);
#   GPT-2 1.5B (d48) at ZeRO-1 at the largest micro-batch of $D48_BATCHES that runs.
# Needs ./train_gpt2cu (or CU=...) built with MPI, data/tinyshakespeare (or DATA=glob).
# Prints the table last; logs and each run's folder (its metrics.jsonl, whose summary record
# the table reads) under $OUT (default out/bench_multigpu).
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-out/bench_multigpu}
CU=${CU:-./train_gpt2cu}
STEPS=${STEPS:-30}
DATA=${DATA:-"data/tinyshakespeare/tiny_shakespeare_train_*.bin"}
D48_BATCHES=${D48_BATCHES-"16 8 4"}
mkdir -p "$OUT"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$NGPU" -ge 1 ] || { echo "no GPU found (nvidia-smi -L)" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TABLE="$OUT/table.tsv"
printf '%s\t' model GPUs ZeRO B ms/step tokens/s 'per-GPU vs 1 GPU' 'peak MiB (rank 0)' 'nvidia-smi max MiB' > "$TABLE"
echo 'last loss' >> "$TABLE"
COMMON=(-i "$DATA" -j "" -t 1024 -x "$STEPS" -v 0 -s 0 -g 0 -l 6e-4 -c 0.1 -k constant -r 0)

run() {  # NAME NP ARGS...: one run (mpirun for NP > 1) into $OUT/NAME, nvidia-smi sampled meanwhile
    local name=$1 np=$2; shift 2
    rm -rf "${OUT:?}/$name"
    set -- "$@" -o "$OUT/$name" -n 0
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/$name.smi" 2>/dev/null &
    local smi=$!
    if [ "$np" = 1 ]; then timeout 300 "$CU" "$@" > "$OUT/$name.log" 2>&1
    else timeout 300 mpirun -np "$np" --bind-to none -x NCCL_NVLS_ENABLE "$CU" "$@" > "$OUT/$name.log" 2>&1; fi
    local rc=$?
    kill $smi 2>/dev/null; wait $smi 2>/dev/null
    return $rc
}
# row NAME MODEL NP ZERO B BASE_TOKS: the run's figures from its metrics.jsonl (its summary
# record, scripts/run_summary.py, and its last step's loss)
row() {
    local dir="$OUT/$1" tok ms mem loss eff smi
    read -r ms tok mem <<< "$(python3 scripts/run_summary.py "$dir" ms_per_step tokens_per_s device_peak_mib \
                                2> /dev/null)"
    tok=${tok%.*} mem=${mem%.*}
    loss=$(python3 -c 'import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "step"]
print(steps[-1]["loss"] if steps else "-")' "$dir/metrics.jsonl" 2> /dev/null)
    smi=$(sort -n "$OUT/$1.smi" 2>/dev/null | tail -1)
    eff=-
    [ -n "$tok" ] && [ "$tok" != - ] && [ -n "$6" ] &&
        eff=$(awk -v t="$tok" -v n="$3" -v b="$6" 'BEGIN{printf "%.1f%%", 100 * t / n / b}')
    [ -z "$ms" ] && ms=failed tok=-
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$2" "$3" "$4" "$5" "$ms" "$tok" "$eff" "${mem:--}" \
        "${smi:--}" "${loss:--}" >> "$TABLE"
    echo "$tok"
}

base=""
for np in 1 2 4 8; do
    [ "$np" -gt "$NGPU" ] && break
    for z in 0 1 2 3; do
        [ "$np" = 1 ] && [ "$z" != 0 ] && continue
        name="d12_np${np}_z$z"
        echo "== $name"
        run "$name" "$np" "${COMMON[@]}" -e d12 -b 64 -d 524288 -z "$z"
        t=$(row "$name" d12 "$np" "$z" 64 "$base")
        [ "$np" = 1 ] && base=$t
    done
done
np=$NGPU; [ "$np" -gt 8 ] && np=8
for b in $D48_BATCHES; do
    name="d48_np${np}_z1_b$b"
    echo "== $name"
    total=$((b * 1024 * np)); [ $total -lt 524288 ] && total=$(( (524288 / total) * total ))
    run "$name" "$np" "${COMMON[@]}" -e d48 -b "$b" -d "$total" -z 1 -x 12
    rc=$?
    row "$name" d48 "$np" 1 "$b" "" > /dev/null
    [ $rc = 0 ] && break
done
echo
awk -F'\t' '{ for (i = 1; i <= NF; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n[NR] = NF }
     END { for (r = 1; r <= NR; r++) for (i = 1; i <= n[r]; i++)
               if (i < n[r]) printf("%-" w[i] "s  ", c[r, i]); else print c[r, i] }' \
    "$TABLE" | tee "$OUT/table.txt"
