#!/usr/bin/env bash
# scripts/study_memory.sh: the memory study (docs/memory.md). GPT-2 1.5B (d48), 350M (d24)
# and 124M (d12) at T=1024 and 524,288 tokens per step, one technique at a time:
#   baseline (the largest micro-batch tried), gradient accumulation (a smaller -b, more
#   micro-steps), recomputation -r 1/2/3, bf16 AdamW moments, ZeRO-1/2 over 2 and 4 ranks
#   (--comm mpi, the ranks sharing this GPU: memory only, one micro-step), the optimizer
#   state in host memory (--offload 1: updated in place over PCIe; --offload 2: staged through
#   the copy engines), and the runs that must fit a budget
#   (--max-device-memory 16G for d48, 8G for d24, 4G for d12: the measured peak must stay
#   under it, at 85% or more of the tokens/s of the fastest run without offload).
# Beside them, where PyTorch has the technique (dev/train_gpt2_torch.py): its baseline,
# accumulation, activation checkpointing, foreach AdamW, FSDP at world size 1 and FSDP's
# CPU offload.
# Each row's figures: the trainer's device peak (cudaMemGetInfo, less the GPU's use before
# the run), the process's device memory seen by nvidia-smi (CUDA context included: the one
# figure per rank when ranks share the GPU, and the one PyTorch's rows have), host memory
# at peak (VmHWM / ru_maxrss), tokens/s, MFU and J/step over the steps after the warm-up
# (the first step: each holds 10 micro-steps or more; d12 at B=64 has 8, so 10 steps there),
# the trainer's figures from the summary record of its run's metrics.jsonl (scripts/study_lib.sh).
# Writes $OUT/rows.tsv (one line per run, appended: PARTS may run in separate calls), prints
# the table and the budget verdicts, and draws $OUT/memory_study.png (scripts/plot_memory_study.py).
#
# Run from the repository root on the GPU machine: scripts/study_memory.sh
# Binaries from $BIN (default dist/gpu/bin, scripts/gpu_bundle.sh), shards from $DATA
# (default dist/gpu/data). PARTS (default "d48 d24 d12 zero torch"): which groups of rows
# (PARTS=budget: only the rows of the budget verdicts and the offload cost, planned at about
# 5 minutes; PARTS=cards: the settings --max-device-memory names for 24G and 12G, about 6);
# TABLE_ONLY=1 prints the table of an existing $OUT/rows.tsv.
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/study_memory}
PARTS=${PARTS:-d48 d24 d12 zero torch}
mkdir -p "$OUT"
ROWS="$OUT/rows.tsv"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
TOKENS=524288
TR="-i $DATA/tiny_shakespeare_train_*.bin -j $DATA/tiny_shakespeare_train_*.bin -t 1024 -v 0 -s 0 -n 0 -l 1e-4"

# the largest device memory of any one process while $1 runs in the background (nvidia-smi)
poll_start() {
    : > "$1"
    (while :; do
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits >> "$1" 2> /dev/null
        sleep 0.2
    done) &
    POLL=$!
}
poll_stop() {
    kill "$POLL" 2> /dev/null
    wait "$POLL" 2> /dev/null
    awk -F', *' '$2 + 0 > m { m = $2 + 0 } END { print m + 0 }' "$1"
}
# shellcheck source=scripts/study_lib.sh
. scripts/study_lib.sh

# ours MODEL ROW TECHNIQUE RANKS STEPS FLAGS...: one run of train_gpt2cu (console in
# $OUT/MODEL_ROW.log, metrics in $OUT/MODEL_ROW/), one line in rows.tsv
ours() {
    local model=$1 row=$2 tech=$3 ranks=$4 steps=$5
    shift 5
    local dir="$OUT/${model}_$row" d=$TOKENS
    [ "$ranks" -gt 1 ] && d=0  # set below: one micro-step per rank
    fresh_run_dir "$dir"
    poll_start "$OUT/poll.txt"
    if [ "$ranks" = 1 ]; then
        # shellcheck disable=SC2086  # word lists
        timeout 400 "$BIN/train_gpt2cu" -e "$model" $TR -o "$dir" -d $d -x "$steps" "$@" > "$dir.log" 2>&1
    else
        local b
        b=$(echo "$*" | grep -oE -- '-b [0-9]+' | awk '{print $2}')
        d=$((b * 1024 * ranks))
        # shellcheck disable=SC2086
        timeout 400 mpirun --oversubscribe --bind-to none -np "$ranks" "$BIN/train_gpt2cu" --comm mpi -e "$model" $TR \
            -o "$dir" -d $d -x "$steps" "$@" > "$dir.log" 2>&1
    fi
    local rc=$?
    local smi peak host tps mfu jps
    smi=$(poll_stop "$OUT/poll.txt")
    IFS=$'\t' read -r _ tps mfu jps peak _ <<< "$(run_summary "$dir")"
    host=$(host_peak "$dir")
    [ "$ranks" -gt 1 ] && { peak="-"; tps="-"; mfu="-"; jps="-"; }  # the GPU is shared: nvidia-smi's per process
    local budget
    budget=$(echo "$*" | grep -oE -- '--max-device-memory [0-9]+G' | awk '{print $2}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' ours "$model" "$row" "$tech" "$ranks" "${peak:--}" \
        "${smi:--}" "${host:--}" "${tps:--}" "${mfu:--}" "${jps:--}" "${budget:--}" "rc=$rc $*" >> "$ROWS"
    echo "ours $model $row: rc $rc, peak ${peak:--} MiB, nvidia-smi ${smi} MiB, host ${host:--} MiB, ${tps:--} tok/s"
}

# torch MODEL ROW TECHNIQUE ARGS...: one run of dev/train_gpt2_torch.py (3 steps, the first untimed)
torch_row() {
    local model=$1 row=$2 tech=$3
    shift 3
    local log="$OUT/torch_${model}_$row.log"
    poll_start "$OUT/poll.txt"
    # shellcheck disable=SC2086
    timeout 500 python3 dev/train_gpt2_torch.py --model "$model" --seq-len 1024 --steps 3 --warmup-steps 1 \
        --data "$DATA/tiny_shakespeare_train_*.bin" "$@" > "$log" 2>&1
    local rc=$? smi
    smi=$(poll_stop "$OUT/poll.txt")
    python3 - "$log" "$model" "$row" "$tech" "$smi" "rc=$rc $*" >> "$ROWS" << 'PYEOF'
import json, sys
log, model, row, tech, smi, cmd = sys.argv[1:]
s = {}
for line in open(log, errors="replace"):
    if line.startswith("SUMMARY "):
        s = json.loads(line[8:])
g = lambda k: str(s.get(k, "-"))
print("\t".join(["pytorch", model, row, tech, "1", g("max_reserved_MiB"), smi, g("host_peak_MiB"),
                 g("tokens_per_s"), g("mfu_pct"), g("joules_per_step"), "-", cmd]))
PYEOF
    echo "torch $model $row: rc $rc, $(tail -1 "$ROWS" | cut -f6-11)"
}

if [ "${TABLE_ONLY:-0}" != 1 ]; then
    nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader > "$OUT/gpu.txt" 2>&1
    for part in $PARTS; do
        case $part in
        d48)
            # B=16 is the baseline (63 GiB; B=32 needs 103 GiB and is no faster per token)
            ours d48 b16 "baseline -b 16" 1 2 -b 16 -r 0
            ours d48 b4 "accumulation -b 4" 1 2 -b 4 -r 0
            ours d48 b4_r1 "-b 4 -r 1" 1 2 -b 4 -r 1
            ours d48 b4_r3 "-b 4 -r 3" 1 2 -b 4 -r 3
            ours d48 b4_bf16 "-b 4 bf16 moments" 1 2 -b 4 -r 0 --optimizer-state bf16
            ours d48 off_b2 "offload -b 2 (16G)" 1 2 -b 2 -r 0 --offload 1 --max-device-memory 16G
            ours d48 off_b4_r1 "offload -b 4 -r 1 (16G)" 1 2 -b 4 -r 1 --offload 1 --max-device-memory 16G
            ours d48 off_b16_r3 "offload -b 16 -r 3 (16G)" 1 2 -b 16 -r 3 --offload 1 --max-device-memory 16G
            ours d48 off2_b4_r1 "offload 2 -b 4 -r 1 (16G)" 1 2 -b 4 -r 1 --offload 2 --max-device-memory 16G
            ;;
        d24)
            ours d24 b32 "baseline -b 32" 1 3 -b 32 -r 0
            ours d24 b8 "accumulation -b 8" 1 3 -b 8 -r 0
            ours d24 b8_r1 "-b 8 -r 1" 1 3 -b 8 -r 1
            ours d24 b8_r2 "-b 8 -r 2" 1 3 -b 8 -r 2
            ours d24 b8_r3 "-b 8 -r 3" 1 3 -b 8 -r 3
            ours d24 b8_bf16 "-b 8 bf16 moments" 1 3 -b 8 -r 0 --optimizer-state bf16
            ours d24 off_b8_r1 "offload -b 8 -r 1 (8G)" 1 3 -b 8 -r 1 --offload 1 --max-device-memory 8G
            ours d24 off2_b8_r1 "offload 2 -b 8 -r 1 (8G)" 1 3 -b 8 -r 1 --offload 2 --max-device-memory 8G
            ;;
        d12)
            ours d12 b64 "baseline -b 64" 1 12 -b 64 -r 0
            ours d12 b64_r1 "-b 64 -r 1" 1 12 -b 64 -r 1
            ours d12 off_b64_r1 "offload -b 64 -r 1" 1 12 -b 64 -r 1 --offload 1
            ours d12 off2_b64_r1 "offload 2 -b 64 -r 1" 1 12 -b 64 -r 1 --offload 2
            ours d12 off_b8_r1 "offload -b 8 -r 1 (4G)" 1 3 -b 8 -r 1 --offload 1 --max-device-memory 4G
            ours d12 off2_b8 "offload 2 -b 8 (4G)" 1 3 -b 8 -r 0 --offload 2 --max-device-memory 4G
            ours d12 b4 "-b 4 (4G)" 1 3 -b 4 -r 0 --max-device-memory 4G
            ;;
        budget)
            # only what the budget verdicts and the offload cost need (about 8 minutes on an
            # H100, more than one 5-minute run: PARTS="budget" timed out after d24's rows, and
            # the d12 rows came from PARTS=d12): each model's fastest configuration without offload
            # (as measured in the full parts), its budget rows, and d12 at B=64 with each mode
            ours d48 b16 "baseline -b 16" 1 2 -b 16 -r 0
            ours d48 off_b4_r1 "offload -b 4 -r 1 (16G)" 1 2 -b 4 -r 1 --offload 1 --max-device-memory 16G
            ours d48 off2_b4_r1 "offload 2 -b 4 -r 1 (16G)" 1 2 -b 4 -r 1 --offload 2 --max-device-memory 16G
            ours d24 b32 "baseline -b 32" 1 3 -b 32 -r 0
            ours d24 off_b8_r1 "offload -b 8 -r 1 (8G)" 1 3 -b 8 -r 1 --offload 1 --max-device-memory 8G
            ours d24 off2_b8_r1 "offload 2 -b 8 -r 1 (8G)" 1 3 -b 8 -r 1 --offload 2 --max-device-memory 8G
            ours d12 b64 "baseline -b 64" 1 12 -b 64 -r 0
            ours d12 b64_r1 "-b 64 -r 1" 1 12 -b 64 -r 1
            ours d12 off_b64_r1 "offload -b 64 -r 1" 1 12 -b 64 -r 1 --offload 1
            ours d12 off2_b64_r1 "offload 2 -b 64 -r 1" 1 12 -b 64 -r 1 --offload 2
            ours d12 off_b8_r1 "offload -b 8 -r 1 (4G)" 1 3 -b 8 -r 1 --offload 1 --max-device-memory 4G
            ours d12 off2_b8 "offload 2 -b 8 (4G)" 1 3 -b 8 -r 0 --offload 2 --max-device-memory 4G
            ;;
        cards)
            # the settings --max-device-memory names for 24 and 12 GiB cards (RTX 3090/4090, L4,
            # A10; RTX 3060/4070), measured under that budget, each beside its model's
            # whole-card baseline: the same GPU, so tokens/s are this GPU's, not the smaller card's
            ours d12 b64 "baseline -b 64" 1 12 -b 64 -r 0
            ours d12 c24_b32 "-b 32 (24G)" 1 5 -b 32 -r 0 --max-device-memory 24G
            ours d12 c24_r1 "-b 64 -r 1 (24G)" 1 12 -b 64 -r 1 --max-device-memory 24G
            ours d12 c12_b16 "-b 16 (12G)" 1 5 -b 16 -r 0 --max-device-memory 12G
            ours d12 c12_b32_r2 "-b 32 -r 2 (12G)" 1 5 -b 32 -r 2 --max-device-memory 12G
            ours d24 b32 "baseline -b 32" 1 3 -b 32 -r 0
            ours d24 c24_b16 "-b 16 (24G)" 1 3 -b 16 -r 0 --max-device-memory 24G
            ours d24 c24_off2_r1 "offload 2 -b 32 -r 1 (24G)" 1 3 -b 32 -r 1 --offload 2 --max-device-memory 24G
            ours d24 c12_b8_r1 "-b 8 -r 1 (12G)" 1 3 -b 8 -r 1 --max-device-memory 12G
            ours d24 c12_off2_b16_r2 "offload 2 -b 16 -r 2 (12G)" 1 3 -b 16 -r 2 --offload 2 --max-device-memory 12G
            ours d48 b16 "baseline -b 16" 1 2 -b 16 -r 0
            ours d48 c24_off2_b4 "offload 2 -b 4 (24G)" 1 2 -b 4 -r 0 --offload 2 --max-device-memory 24G
            ours d48 c12_off2_b2 "offload 2 -b 2 (12G)" 1 2 -b 2 -r 0 --offload 2 --max-device-memory 12G
            ;;
        zero)
            for model in d24 d48; do
                b=8
                [ $model = d48 ] && b=4
                ours $model "r1_z0_n1" "-b $b, 1 rank" 1 1 -b $b -r 0 -d $((b * 1024))
                for n in 2 4; do
                    for z in 1 2; do ours $model "z${z}_n$n" "ZeRO-$z, $n ranks" $n 1 -b $b -r 0 -z $z; done
                done
            done
            ;;
        torch)
            # accumulation to the same 524,288 tokens per step; B as ours where it fits
            torch_row d24 b8 "baseline -b 8" --batch 8 --grad-accum 64 --compile blocks
            torch_row d24 b8_ckpt "-b 8 checkpointing" --batch 8 --grad-accum 64 --compile blocks --checkpoint blocks
            torch_row d24 b8_foreach "-b 8 foreach AdamW" --batch 8 --grad-accum 64 --compile blocks --optimizer foreach
            torch_row d24 b8_fsdp "-b 8 FSDP" --batch 8 --grad-accum 64 --compile none --fsdp plain
            torch_row d24 b8_fsdp_off "-b 8 FSDP CPU offload" --batch 8 --grad-accum 64 --compile none --fsdp offload
            torch_row d48 b4_ckpt "-b 4 checkpointing" --batch 4 --grad-accum 128 --compile blocks --checkpoint blocks
            # FSDP's CPU offload moves every unit's parameters and gradients over PCIe each micro-step: at
            # 128 micro-steps a step takes minutes, so this row runs 65,536 tokens a step (its host AdamW
            # step then weighs 8 times more per token than at 524,288)
            torch_row d48 b4_fsdp_off "-b 4 FSDP CPU offload, ckpt, 65k tok/step" --batch 4 --grad-accum 16 \
                --compile none --fsdp offload --checkpoint blocks
            ;;
        *) echo "unknown part '$part' (d48 d24 d12 zero torch budget cards)"; exit 1 ;;
        esac
    done
fi

# the table and the verdicts
python3 - "$ROWS" << 'PYEOF' | tee "$OUT/table.txt"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
num = lambda v: float(v) if v not in ("-", "", "None") else None
print("T=1024, 524,288 tokens per step (ZeRO rows: memory only, one micro-step, ranks sharing one GPU)")
print("%-8s %-5s %-38s %5s %10s %10s %9s %9s %6s %8s" % ("program", "model", "row", "ranks", "peak MiB",
      "smi MiB", "host MiB", "tok/s", "MFU %", "J/step"))
for r in rows:
    if not r[12].startswith("rc=0"):
        # a failed run's figures (nvidia-smi's until it died) are not a result
        print("%-8s %-5s %-38s %5s %s" % (r[0], r[1], r[3][:38], r[4], "failed (%s; its log says why)"
                                          % r[12].split()[0]))
        continue
    print("%-8s %-5s %-38s %5s %10s %10s %9s %9s %6s %8s" % (r[0], r[1], r[3][:38], r[4], r[5], r[6], r[7], r[8],
                                                                r[9], r[10]))
print()
# each budget row against the fastest run of ours without offload on the same model
for model in ("d48", "d24", "d12"):
    plain = [r for r in rows if r[0] == "ours" and r[1] == model and "--offload" not in r[12] and num(r[8])]
    if not plain:
        continue
    best = max(plain, key=lambda r: num(r[8]))
    for r in rows:
        if r[0] != "ours" or r[1] != model or r[11] == "-":
            continue
        budget = float(r[11].rstrip("G")) * 1024
        peak, tps = num(r[5]), num(r[8])
        ok_mem = peak is not None and peak <= budget
        ratio = tps / num(best[8]) if tps else None
        print("%s %-26s budget %5.0f MiB, peak %s MiB (%s); %s tok/s = %s of the fastest without offload (%s, %s "
              "tok/s): %s" % (model, r[3], budget, r[5], "under" if ok_mem else "OVER", r[8],
                              "%.1f%%" % (100 * ratio) if ratio else "-", best[3], best[8],
                              "meets 85%" if ratio and ratio >= 0.85 and ok_mem else "misses"))
off = [r for r in rows if r[0] == "ours" and r[2] == "b64_r1" and r[1] == "d12" and num(r[8])]
for mode, name in (("1", "off_b64_r1"), ("2", "off2_b64_r1")):
    on = [r for r in rows if r[0] == "ours" and r[2] == name and num(r[8])]
    if on and off:
        cost = 1 - num(on[-1][8]) / num(off[-1][8])
        print("d12 B=64 -r 1: --offload %s costs %.1f%% of tokens/s (%s vs %s tok/s; J/step %s vs %s)"
              % (mode, 100 * cost, on[-1][8], off[-1][8], on[-1][10], off[-1][10]))
PYEOF
python3 scripts/plot_memory_study.py "$ROWS" "$OUT/memory_study.png" || echo "chart: not drawn (see above)"
