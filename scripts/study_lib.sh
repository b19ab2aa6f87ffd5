# shellcheck shell=bash
# scripts/study_lib.sh: what the study and benchmark scripts share (sourced, not run).
# Each train_gpt2cu run writes into a folder of its own (-o DIR -n 0: no checkpoint, which for
# GPT-2 1.5B would be a 20 GB write); its figures come from the summary record that ends
# DIR/metrics.jsonl (scripts/run_summary.py; docs/formats.md#metrics-file), not from its
# console text.
# fresh_run_dir DIR: makes DIR empty: an earlier run's files would make the trainer refuse
# it (a run directory holding another run's logs or checkpoints), and a metrics file left
# there could be read as the new run's.
# run_summary DIR: the run's figures, tab-separated: ms/step, tokens/s, MFU (percent), J/step,
# device memory at peak (MiB), the data stall (ms per step), rounded as the trainer prints
# them; "-" for each one the record holds as null, and for all of them when the run has no
# summary record (the reader says why on stderr).
# host_peak DIR: the host memory at peak (MiB) of rank 0's process, empty if the run lacks it.
fresh_run_dir() {
    rm -rf "${1:?}"
    mkdir -p "$1"
}
run_summary() {
    local figures
    figures=$(python3 scripts/run_summary.py "$1" ms_per_step tokens_per_s mfu joules_per_step device_peak_mib \
        data_stall_ms) || figures=$(printf -- '-\t-\t-\t-\t-\t-')
    awk -F'\t' 'function f(v, fmt, scale) { return v == "-" ? v : sprintf(fmt, v * scale) }
        { printf "%s\t%s\t%s\t%s\t%s\t%s", f($1, "%.1f", 1), f($2, "%.0f", 1), f($3, "%.1f", 100), f($4, "%.1f", 1),
                 f($5, "%.0f", 1), f($6, "%.2f", 1) }' <<< "$figures"
}
host_peak() {
    python3 scripts/run_summary.py "$1" host_peak_mib 2> /dev/null | awk '$1 != "-" { printf "%.0f", $1 }'
}
