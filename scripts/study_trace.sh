#!/usr/bin/env bash
# scripts/study_trace.sh: what --trace and --memory-trace cost and what they show, on the GPU.
#   1. the cost: GPT-2 124M (d12) at B=64, T=1024, 524,288 tokens a step, -r 0, 10 steps three
#      times: untraced, with --trace of steps 5-8, with --memory-trace of step 5. Each traced
#      run's steps 5-8 and its untraced steps (2-4, 9-10) against the same steps of the
#      untraced run (step times from metrics.jsonl).
#   2. the pictures of README and docs/performance.md: the timeline and the memory of one d12
#      B=64 step (the traced runs above), and of GPT-2 1.5B (d48) with --offload 2 -b 4 -r 1
#      under --max-device-memory 16G at 65,536 tokens a step (16 micro-steps, so that one
#      step's picture stays readable), drawn by scripts/plot_trace.py.
# Writes $OUT (default out/study_trace): the runs' folders and logs, trace_*.json,
# mem_*.json, timeline_*.png, memory_*.png, and table.txt, the table printed last.
# Run from the repository root on the GPU machine; binaries from $BIN (default dist/gpu/bin,
# scripts/gpu_bundle.sh), shards from $DATA (default dist/gpu/data).
set -u
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-dist/gpu/bin}
DATA=${DATA:-dist/gpu/data}
OUT=${OUT:-out/study_trace}
mkdir -p "$OUT"
# shellcheck source=scripts/study_lib.sh
. scripts/study_lib.sh
TR="-i $DATA/tiny_shakespeare_train_*.bin -j $DATA/tiny_shakespeare_train_*.bin -t 1024 -v 0 -s 0 -n 0 -l 1e-4"
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader > "$OUT/gpu.txt" 2>&1

# train NAME FLAGS...: one run into $OUT/NAME (console in $OUT/NAME.log)
train() {
    local name=$1
    shift
    fresh_run_dir "$OUT/$name"
    # shellcheck disable=SC2086  # word lists
    timeout 300 "$BIN/train_gpt2cu" $TR -o "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $?, $(grep -E '^mean over' "$OUT/$name.log")"
}

D12="-e d12 -b 64 -d 524288 -r 0 -x 10"
# shellcheck disable=SC2086
train d12_plain $D12
# shellcheck disable=SC2086
train d12_trace $D12 --trace "$OUT/trace_d12.json" --trace-steps 5:8
# shellcheck disable=SC2086
train d12_mem $D12 --memory-trace "$OUT/mem_d12.json" --trace-steps 5:5
# shellcheck disable=SC2086
train d48_off2 -e d48 -b 4 -d 65536 -r 1 --offload 2 --max-device-memory 16G -x 5 --trace "$OUT/trace_d48.json" \
    --memory-trace "$OUT/mem_d48.json"

for m in d12 d48; do
    python3 scripts/plot_trace.py "$OUT/trace_$m.json" -o "$OUT/timeline_$m.png" > "$OUT/plot_$m.log" 2>&1 ||
        echo "timeline $m: not drawn ($(tail -1 "$OUT/plot_$m.log"))"
    python3 scripts/plot_trace.py --memory "$OUT/mem_$m.json" -o "$OUT/memory_$m.png" >> "$OUT/plot_$m.log" 2>&1 ||
        echo "memory $m: not drawn ($(tail -1 "$OUT/plot_$m.log"))"
    python3 scripts/plot_trace.py --validate "$OUT/trace_$m.json" "$OUT/mem_$m.json" >> "$OUT/plot_$m.log" 2>&1
done

python3 - "$OUT" << 'PYEOF' | tee "$OUT/table.txt"
import json, os, sys
out = sys.argv[1]
def steps(name):
    path = os.path.join(out, name, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    return {r["step"]: r["ms"] for r in map(json.loads, open(path)) if r.get("type") == "step"}
def summary(name):
    path = os.path.join(out, name, "metrics.jsonl")
    recs = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    return recs[-1] if recs and recs[-1].get("type") == "summary" else {}
base = steps("d12_plain")
traced, untraced = [5, 6, 7, 8], [2, 3, 4, 9, 10]
mean = lambda d, ks: sum(d[k] for k in ks) / len(ks) if d and all(k in d for k in ks) else None
print("GPT-2 124M, B=64, T=1024, 524,288 tokens a step, -r 0; ms a step (metrics.jsonl)")
print("%-34s %14s %14s %16s %16s" % ("run", "steps 5-8", "vs untraced", "steps 2-4,9-10", "vs untraced"))
b5, b2 = mean(base, traced), mean(base, untraced)
for name, label in (("d12_plain", "untraced"), ("d12_trace", "--trace of steps 5-8"),
                    ("d12_mem", "--memory-trace of step 5")):
    s = steps(name)
    t5, t2 = mean(s, traced), mean(s, untraced)
    f = lambda v: "-" if v is None else "%.2f" % v
    r = lambda v, w: "-" if v is None or w is None else "%+.2f%%" % (100 * (v / w - 1))
    print("%-34s %14s %14s %16s %16s" % (label, f(t5), r(t5, b5), f(t2), r(t2, b2)))
for name in ("d12_mem", "d48_off2"):
    s = summary(name)
    m = os.path.join(out, "mem_%s.json" % name.split("_")[0])
    peak = json.load(open(m))["peak_bytes"] / 2**20 if os.path.exists(m) else None
    print("%s: the run's device peak %s MiB, the memory trace's %s MiB" % (name, s.get("device_peak_mib"),
          "-" if peak is None else "%.0f" % peak))
PYEOF
