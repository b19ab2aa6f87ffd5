#!/usr/bin/env bash
# test_trace.sh: --trace and --memory-trace on the CPU trainer. A short run traces two steps and the work after
# them (evaluation, sample, checkpoint); the file parses as a trace-event JSON, its spans
# nest on the host's main thread, each traced step's span encloses the time metrics.jsonl
# gives the step (one clock reads both), its phases (batch, forward, backward per micro-step,
# then update) lie inside it in that order without overlapping, and scripts/plot_trace.py
# --validate accepts it. How much of a step the phases cover depends on the machine's load, so
# it is not asserted. Bad --trace-steps and
# unwritable --trace paths are refused before any training; the default window is the two
# steps after the first. --memory-trace samples one step at its start and after each phase of
# each micro-step, and its peak is the memory line's total. The last line is "N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
. dev/test/testlib.sh
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
[ -x ./train_gpt2 ] || { echo "./train_gpt2 is not built (make train_gpt2)"; exit 1; }
TS=data/tinyshakespeare
[ -f "$TS/tiny_shakespeare_val_000000.bin" ] || ./dev/data/tinyshakespeare.sh > /dev/null 2>&1 ||
    { echo "error: the Tiny Shakespeare shards are missing (make data)"; exit 1; }
RUN=(-e l2h2c64t64 -b 4 -t 32 -i "$TS/tiny_shakespeare_train_*.bin" -j "$TS/tiny_shakespeare_val_*.bin" -m 2)

# checks TRACE METRICS FIRST LAST: prints one line per problem, nothing when all hold
check_trace() {
    python3 - "$@" << 'EOF'
import json, sys
path, metrics, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
try:
    d = json.load(open(path))
except Exception as e:
    print(f"not JSON: {e}"); sys.exit()
ev = d.get("traceEvents")
if not isinstance(ev, list):
    print("no traceEvents list"); sys.exit()
if d.get("otherData", {}).get("steps") != [first, last]:
    print(f"otherData.steps is {d.get('otherData', {}).get('steps')}, expected {[first, last]}")
spans = [e for e in ev if e.get("ph") == "X"]
host = sorted((e for e in spans if e["pid"] == 0 and e["tid"] == 0), key=lambda e: (e["ts"], -e["dur"]))
# nesting: each span lies inside the innermost open span or after it has ended
stack = []
for e in host:
    while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
        stack.pop()
    if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1e-3:
        print(f"{e['name']} at {e['ts']} overlaps {stack[-1]['name']} without nesting")
    stack.append(e)
ms = {}
for line in open(metrics):
    r = json.loads(line)
    if r.get("type") == "step":
        ms[r["step"]] = r["ms"]
steps = [e for e in host if e["cat"] == "step"]
if [e["args"]["step"] for e in steps] != list(range(first, last + 1)):
    print(f"step spans {[e['args']['step'] for e in steps]}, expected {first}..{last}")
for s in steps:
    n = s["args"]["step"]
    # the step's timer starts after its span opens and stops before it closes
    if s["dur"] / 1e3 < ms[n] * (1 - 1e-5) - 2e-3:
        print(f"step {n}: span {s['dur'] / 1e3:.3f} ms, shorter than metrics.jsonl's {ms[n]:.3f} ms")
    inside = [e for e in host if e["cat"] == "phase" and e["ts"] >= s["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3]
    order = [e["name"] for e in inside]
    micro = len(order) // 3
    if micro < 1 or order != ["batch", "forward", "backward"] * micro + ["update"]:
        print(f"step {n}: phases {order}, expected batch, forward, backward per micro-step, then update")
    for a, b in zip(inside, inside[1:]):
        if b["ts"] < a["ts"] + a["dur"] - 1e-3:
            print(f"step {n}: {b['name']} begins before {a['name']} ends")
between = {e["name"] for e in host if e["cat"] == "between"}
if between != {"evaluation", "sample", "checkpoint"}:
    print(f"the work between steps: {sorted(between)}, expected evaluation, sample, checkpoint")
EOF
}

./train_gpt2 "${RUN[@]}" -x 4 -v 3 -s 3 -g 4 -n 3 -o "$W/run" --trace "$W/t.json" --trace-steps 2:3 > "$W/run.log" 2>&1
rc=$?
problems=$(check_trace "$W/t.json" "$W/run/metrics.jsonl" 2 3)
if [ $rc = 0 ] && [ -z "$problems" ]; then
    ok "steps 2..3 traced: valid JSON, nested spans, step spans enclose metrics.jsonl's times, phases in order inside the steps, work between steps"
else bad "the trace of steps 2..3 (exit $rc): ${problems:-$(tail -2 "$W/run.log")}"; fi
if grep -q "^trace of steps 2..3 written: $W/t.json" "$W/run.log"; then ok "the run says where the trace went"
else bad "no 'trace of steps 2..3 written' line: $(grep -i trace "$W/run.log" | head -2)"; fi
if [ -f scripts/plot_trace.py ]; then
    if out=$(python3 scripts/plot_trace.py --validate "$W/t.json" 2>&1); then ok "plot_trace.py --validate: $out"
    else bad "plot_trace.py --validate refuses the trace: $out"; fi
fi

# the default window: the two steps after the first (the CPU trainer's warm-up)
./train_gpt2 "${RUN[@]}" -x 5 -v 0 -s 0 --trace "$W/d.json" > "$W/d.log" 2>&1
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["otherData"]["steps"] != [2, 3])' "$W/d.json"
then ok "without --trace-steps: steps 2..3"
else bad "without --trace-steps: $(head -c 300 "$W/d.json")"; fi
# a run shorter than the window traces its last steps
./train_gpt2 "${RUN[@]}" -x 1 -v 0 -s 0 --trace "$W/one.json" > "$W/one.log" 2>&1
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["otherData"]["steps"] != [1, 1])' "$W/one.json"
then ok "a one-step run traces step 1"
else bad "a one-step run: $(tail -2 "$W/one.log")"; fi

# --memory-trace: the step's samples, the CPU trainer's arrays, a peak equal to its memory line
./train_gpt2 "${RUN[@]}" -x 4 -d 256 -v 0 -s 0 --memory-trace "$W/m.json" --trace-steps 3 > "$W/m.log" 2>&1
rc=$?
problems=$(python3 - "$W/m.json" "$W/m.log" << 'EOF'
import json, re, sys
d = json.load(open(sys.argv[1]))
line = next(l for l in open(sys.argv[2]) if l.startswith("memory: parameters"))
printed = sum(float(x) for x in re.findall(r"([0-9]+) MiB", line))
at = [s["at"] for s in d["samples"]]
want = ["start of step"] + [f"after {p} (micro-step {m})" for m in (1, 2) for p in ("batch", "forward", "backward")] + \
       ["after update (micro-step 2)"]
out = []
if d["step"] != 3: out.append(f"step {d['step']}, expected 3")
if at != want: out.append(f"samples {at}")
if abs(d["peak_bytes"] / 2**20 - printed) > 2: out.append(f"peak {d['peak_bytes'] / 2**20:.1f} MiB, memory line {printed} MiB")
if {a["category"] for a in d["allocations"]} != {"parameters", "gradients", "optimizer state", "activations (kept)"}:
    out.append(f"categories {sorted({a['category'] for a in d['allocations']})}")
print("; ".join(out))
EOF
)
if [ $rc = 0 ] && [ -z "$problems" ] && python3 scripts/plot_trace.py --validate "$W/m.json" > "$W/mv.txt" 2>&1; then
    ok "--memory-trace of step 3: a sample at its start and after each phase of both micro-steps, the memory line's peak: $(cat "$W/mv.txt")"
else bad "--memory-trace (exit $rc): ${problems:-$(tail -2 "$W/m.log") $(cat "$W/mv.txt")}"; fi

# refusals, before any step
refused() {  # WHAT EXPECTED_TEXT ARGS...
    local what=$1 want=$2
    shift 2
    ./train_gpt2 "${RUN[@]}" -x 3 -v 0 -s 0 "$@" > "$W/r.log" 2>&1
    local rc=$?
    if [ $rc != 0 ] && grep -qF -- "$want" "$W/r.log" && ! grep -q "^step " "$W/r.log"; then ok "$what refused: $(grep -m1 error "$W/r.log")"
    else bad "$what: exit $rc, $(tail -2 "$W/r.log")"; fi
}
refused "--trace into a missing folder" "--trace $W/nope/t.json: cannot write it" --trace "$W/nope/t.json"
refused "--trace naming a directory" "that is a directory" --trace "$W"
refused "--trace-steps 3:2" "--trace-steps must be FIRST or FIRST:LAST" --trace "$W/x.json" --trace-steps 3:2
refused "--trace-steps abc" "--trace-steps must be FIRST or FIRST:LAST" --trace "$W/x.json" --trace-steps abc
refused "--trace-steps beyond the run" "--trace-steps 4:5: this run trains steps 1 to 3" --trace "$W/x.json" \
    --trace-steps 4:5
refused "--trace-steps without --trace" "give --trace FILE.json" --trace-steps 2
refused "--memory-trace into a missing folder" "--memory-trace $W/nope/m.json: cannot write it" \
    --memory-trace "$W/nope/m.json"
refused "--trace and --memory-trace to one file" "name the same file" --trace "$W/same.json" --memory-trace "$W/same.json"
test_finish
