#!/usr/bin/env bash
# test_study_tables.sh: the tables and verdicts of the speed and memory studies
# (scripts/study_speed.sh and scripts/study_memory.sh with TABLE_ONLY=1) on made-up rows,
# so that a study's scarce GPU run cannot be lost to its own bookkeeping: each target's
# verdict (met, missed, not measured), J/step left out where the timed window is under 1 s,
# PyTorch's MFU against the row's own peak, the budget rows held to their budget and to 85%
# of the fastest run without offload, the cost of each offload mode; both charts drawn
# (skipped without matplotlib); and the figures scripts/study_lib.sh reads from the summary
# record that ends a run's metrics.jsonl (scripts/run_summary.py), the reader's refusals included.
# Ends with "N passed, M failed[, K skipped]".
set -u
cd "$(dirname "$0")/../.." || exit 1
. dev/test/testlib.sh
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
HAVE_MPL=0
python3 -c 'import matplotlib' 2> /dev/null && HAVE_MPL=1

# rows FILE: stdin's lines, fields split by '|', written tab-separated
rows() { tr '|' '\t' > "$1"; }
# has WHAT FILE TEXT: ok when FILE holds the line TEXT
has() { if grep -qxF -- "$3" "$2"; then ok "$1"; else bad "$1: no line '$3' in:"; sed 's/^/      /' "$2"; fi; }
# equals WHAT GOT WANT: ok when the two strings are equal
equals() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: got '$2', want '$3'"; fi; }
# chart WHAT PNG: the chart was drawn (a PNG file), or skipped without matplotlib
chart() {
    if [ $HAVE_MPL = 0 ]; then skip "$1: matplotlib is not installed for python3"
    elif [ "$(head -c 4 "$2" 2> /dev/null | tail -c 3)" = PNG ]; then ok "$1"
    else bad "$1: $2 is not a PNG"; fi
}

# --- the speed study: every target met, J/step where the window is long enough
mkdir -p $W/s1
rows $W/s1/rows.tsv << 'EOF2'
ours|1_baseline|162.2|50512|64.8|430.1|44598|0.10|rc=0 _fp32 -b 8 -t 1024 -x 14 -x 20
pytorch|1_baseline|188.1|43541|40.0|480.0|63828|-|rc=0 --batch 8 --dtype fp32 --steps 14
ours|6_bf16|85.0|385400|33.5|60.1|23312|0.10|rc=0  -b 32 -t 1024 -x 30
pytorch|6_bf16|109.0|300538|20.0|77.0|34260|-|rc=0 --batch 32 --dtype bf16 --steps 30
ours|g_b4_t256_eager|4.5|227154|20.0|3.1|2000|0.01|rc=0  -b 4 -t 256 --cuda-graph 0 -x 400
ours|g_b4_t256_graph|3.4|301176|26.0|2.4|2000|0.01|rc=0  -b 4 -t 256 --cuda-graph 1 -x 400
ours|g_b64_t1024_eager|112.5|583617|50.0|72.0|23914|0.1|rc=0  -b 64 -t 1024 --cuda-graph 0 -x 30
ours|g_b64_t1024_graph|112.3|584000|50.0|72.0|23914|0.1|rc=0  -b 64 -t 1024 --cuda-graph 1 -x 30
pytorch|g_b64_t1024_compiled|136.1|481412|40.0|90.0|34636|-|rc=0 --batch 64 --steps 30
ours|stall_20ms_thread|31.2|525000|45.0|20.0|13000|0.11|rc=0  -b 16 -t 1024 --loader-threads 1 -x 40
EOF2
TABLE_ONLY=1 OUT=$W/s1 scripts/study_speed.sh > $W/s1/out.txt 2>&1
has "speed: the graph at B=4 T=256 met" $W/s1/out.txt "--cuda-graph 1 at B=4 T=256: 1.33x (target 1.30x): met"
has "speed: the graph at B=64 T=1024 met" $W/s1/out.txt "--cuda-graph 1 at B=64 T=1024: 1.00x (target 0.98x): met"
has "speed: the default against PyTorch compiled" $W/s1/out.txt \
    "the full default against PyTorch compiled at B=64: 1.21x (target 1.20x): met"
has "speed: the loader thread's stall" $W/s1/out.txt \
    "data stall with the loader thread, 20 ms reads: 0.11 ms a step (target < 1 ms): met"
# the last -x counts (20 steps: 10 timed x 162 ms); PyTorch's 14 steps: 4 x 188 ms < 1 s
has "speed: J/step over a window of 1.6 s kept" $W/s1/out.txt \
    "$(printf '%-8s %-24s %9s %9s %6s %8s %9s %9s' ours 1_baseline 162.2 50512 64.8 430.1 44598 0.10)"
has "speed: J/step over a window of 0.75 s left out; PyTorch's MFU from ours per token/s" $W/s1/out.txt \
    "$(printf '%-8s %-24s %9s %9s %6s %8s %9s %9s' pytorch 1_baseline 188.1 43541 55.9 - 63828 -)"
chart "speed: the chart" $W/s1/speed_study.png

# --- the speed study: a target missed, one not measured
mkdir -p $W/s2
grep -v -e g_b64_t1024_compiled -e g_b4_t256_graph $W/s1/rows.tsv > $W/s2/rows.tsv
printf 'ours\tg_b4_t256_graph\t4.0\t257166\t22.0\t2.8\t2000\t0.01\trc=0 -b 4 -t 256 --cuda-graph 1 -x 400\n' \
    >> $W/s2/rows.tsv
TABLE_ONLY=1 OUT=$W/s2 scripts/study_speed.sh > $W/s2/out.txt 2>&1
has "speed: 1.13x is a missed target" $W/s2/out.txt "--cuda-graph 1 at B=4 T=256: 1.13x (target 1.30x): missed"
has "speed: no PyTorch row is not measured" $W/s2/out.txt \
    "the full default against PyTorch compiled at B=64: - (target 1.20x): not measured"

# --- the memory study's budget verdicts and offload costs
mkdir -p $W/m
rows $W/m/rows.tsv << 'EOF2'
ours|d48|b16|baseline -b 16|1|63000|64000|9000|46000|40.0|9000|-|rc=0 -b 16 -r 0
ours|d48|off2_16G|offload 2 (16G)|1|15000|16000|40000|40000|35.0|10000|16G|rc=0 --offload 2 --max-device-memory 16G
ours|d48|off1_16G|offload 1 (16G)|1|17000|18000|40000|41000|35.0|10000|16G|rc=0 --offload 1 --max-device-memory 16G
ours|d24|b16|baseline -b 16|1|40000|41000|5000|100000|40.0|4000|-|rc=0 -b 16 -r 0
ours|d24|off2_8G|offload 2 (8G)|1|7000|7500|20000|80000|32.0|5000|8G|rc=0 -b 4 -r 1 --offload 2 --max-device-memory 8G
ours|d12|b64_r1|-b 64 -r 1|1|23914|24500|3000|580000|50.0|800|-|rc=0 -b 64 -r 1
ours|d12|off_b64_r1|offload -b 64 -r 1|1|22000|22500|6000|560000|48.0|820|-|rc=0 -b 64 -r 1 --offload 1
ours|d12|off2_b64_r1|offload 2 -b 64 -r 1|1|22100|22600|6000|570000|49.0|810|-|rc=0 -b 64 -r 1 --offload 2
pytorch|d12|torch_base|PyTorch baseline|1|34000|35000|4000|480000|40.0|900|-|rc=0 --batch 64
EOF2
TABLE_ONLY=1 OUT=$W/m scripts/study_memory.sh > $W/m/out.txt 2>&1
# budget_line MODEL ROW BUDGET_MIB PEAK UNDER_OR_OVER TOK/S SHARE FASTEST_ROW ITS_TOK/S VERDICT
budget_line() {
    local f='%s %-26s budget %5.0f MiB, peak %s MiB (%s); %s tok/s = %s of the fastest without offload'
    printf "$f (%s, %s tok/s): %s" "$@"
}
has "memory: a budget row at 87% meets it" $W/m/out.txt \
    "$(budget_line d48 'offload 2 (16G)' 16384 15000 under 40000 87.0% 'baseline -b 16' 46000 'meets 85%')"
has "memory: a row over its budget misses" $W/m/out.txt \
    "$(budget_line d48 'offload 1 (16G)' 16384 17000 OVER 41000 89.1% 'baseline -b 16' 46000 misses)"
has "memory: a row at 80% misses" $W/m/out.txt \
    "$(budget_line d24 'offload 2 (8G)' 8192 7000 under 80000 80.0% 'baseline -b 16' 100000 misses)"
has "memory: --offload 1's cost at d12" $W/m/out.txt \
    "d12 B=64 -r 1: --offload 1 costs 3.4% of tokens/s (560000 vs 580000 tok/s; J/step 820 vs 800)"
has "memory: --offload 2's cost at d12" $W/m/out.txt \
    "d12 B=64 -r 1: --offload 2 costs 1.7% of tokens/s (570000 vs 580000 tok/s; J/step 810 vs 800)"
chart "memory: the chart" $W/m/memory_study.png
# --- the figures read from the summary record that ends a run's metrics.jsonl
. scripts/study_lib.sh
mkdir -p $W/gpu_run $W/cpu_run $W/cut_run $W/resumed_run $W/no_metrics
HEADER='{"type": "run", "program": "train_gpt2cu", "build": "bf16", "resumed_from": null}'
STEP30='{"type": "step", "step": 30, "loss": 5.1, "ms": 107.1, "tokens_per_s": 611788, "skipped": 0}'
SUMMARY='{"type": "summary", "first_step": 11, "last_step": 30, "timed_steps": 20, "ms_per_step": 107.149, '\
'"tokens_per_s": 611788.4, "mfu": 0.53213, "gflops": null, "joules_per_step": 72.31, "device_peak_mib": 28137.6, '\
'"host_peak_mib": 1234.4, "data_stall_ms": 0.114, "skipped_updates": 2}'
printf '%s\n' "$HEADER" "$STEP30" "$SUMMARY" > $W/gpu_run/metrics.jsonl
equals "run_summary: ms/step, tok/s, MFU in percent, J/step, peak, stall, rounded as the trainer prints them" \
    "$(run_summary $W/gpu_run)" "$(printf '107.1\t611788\t53.2\t72.3\t28138\t0.11')"
equals "host_peak: from the summary record" "$(host_peak $W/gpu_run)" 1234
equals "the reader: fields as the file holds them, null as '-', from the file's path too" \
    "$(python3 scripts/run_summary.py $W/gpu_run/metrics.jsonl last_step timed_steps gflops skipped_updates mfu)" \
    "$(printf '30\t20\t-\t2\t0.53213')"
# the CPU trainer's record: no MFU, energy or device memory
printf '%s\n' "$HEADER" '{"type": "summary", "first_step": 2, "last_step": 6, "timed_steps": 5, '\
'"ms_per_step": 10.62, "tokens_per_s": 3011.09, "mfu": null, "gflops": 29.57, "joules_per_step": null, '\
'"device_peak_mib": null, "host_peak_mib": null, "data_stall_ms": 0.0078, "skipped_updates": 0}' \
    > $W/cpu_run/metrics.jsonl
equals "run_summary: a null figure gives '-'" "$(run_summary $W/cpu_run)" "$(printf '10.6\t3011\t-\t-\t-\t0.01')"
equals "host_peak: a null host peak gives nothing" "$(host_peak $W/cpu_run)" ""
# a run that stopped before its end: the file ends with a step; the reader names the file
printf '%s\n' "$HEADER" "$STEP30" > $W/cut_run/metrics.jsonl
python3 scripts/run_summary.py $W/cut_run ms_per_step > $W/cut.out 2> $W/cut.err
rc=$?
if [ $rc = 1 ] && [ ! -s $W/cut.out ] &&
   grep -qF "$W/cut_run/metrics.jsonl: does not end with a summary record" $W/cut.err; then
    ok "the reader: no summary record is exit 1, naming the file"
else bad "the reader on a file without a summary record: exit $rc, out '$(cat $W/cut.out)', err '$(cat $W/cut.err)'"; fi
equals "run_summary: a run without a summary record gives '-' for each" "$(run_summary $W/cut_run 2> /dev/null)" \
    "$(printf -- '-\t-\t-\t-\t-\t-')"
run_summary $W/cut_run > /dev/null 2> $W/cut_lib.err
if grep -qF "$W/cut_run/metrics.jsonl" $W/cut_lib.err; then ok "run_summary: passes on the reader's message"
else bad "run_summary on a run without a summary record said: '$(cat $W/cut_lib.err)'"; fi
# a finished run resumed later that stopped before its new end: its old summary is not the file's
printf '%s\n' "$HEADER" "$STEP30" "$SUMMARY" \
    '{"type": "run", "program": "train_gpt2cu", "build": "bf16", "resumed_from": 30}' > $W/resumed_run/metrics.jsonl
python3 scripts/run_summary.py $W/resumed_run > /dev/null 2> $W/resumed.err
rc=$?
if [ $rc = 1 ] && grep -qF 'its last record is "run"' $W/resumed.err; then
    ok "the reader: a summary before a later part is not the file's"
else bad "the reader on a summary followed by a resumed part: exit $rc, '$(cat $W/resumed.err)'"; fi
# a cut-off last line, no metrics file, an unknown field
head -c 100 $W/gpu_run/metrics.jsonl > $W/cut_line.jsonl
python3 scripts/run_summary.py $W/cut_line.jsonl > /dev/null 2> $W/cut_line.err
rc=$?
if [ $rc = 1 ] && grep -qF "$W/cut_line.jsonl: the last line is not a whole JSON record" $W/cut_line.err; then
    ok "the reader: a cut-off last line is exit 1, naming the file"
else bad "the reader on a cut-off last line: exit $rc, '$(cat $W/cut_line.err)'"; fi
python3 scripts/run_summary.py $W/no_metrics > /dev/null 2> $W/none.err
rc=$?
if [ $rc = 1 ] && grep -qF "$W/no_metrics/metrics.jsonl: no such file" $W/none.err; then
    ok "the reader: a folder without metrics.jsonl is exit 1, naming the file"
else bad "the reader on a folder without metrics.jsonl: exit $rc, '$(cat $W/none.err)'"; fi
python3 scripts/run_summary.py $W/gpu_run ms_per_step tokens_per_sec > /dev/null 2> $W/field.err
rc=$?
if [ $rc = 2 ] && grep -qF "tokens_per_sec: not a field of the summary record" $W/field.err; then
    ok "the reader: a field the record does not have is exit 2, named"
else bad "the reader with an unknown field: exit $rc, '$(cat $W/field.err)'"; fi

test_finish
