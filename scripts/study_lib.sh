# scripts/study_lib.sh: what the study scripts share (sourced, not run).
# run_summary LOG: the figures a train_gpt2cu run printed, tab-separated: ms/step, tokens/s
# and MFU of the step meter's mean, J/step, device memory at peak (MiB), the data stall
# (ms per step); "-" for each one the log lacks. host_peak LOG: the host memory at peak
# (MiB) of rank 0's process, empty if the log lacks it.
run_summary() {
    local log=$1 mean ms tps mfu jps peak stall
    mean=$(grep -oE 'mean over steps [^:]*: [0-9.]+ ms/step, [0-9]+ tok/s, MFU [0-9.]+%' "$log" | head -1)
    ms=$(echo "$mean" | grep -oE '[0-9.]+ ms/step' | awk '{print $1}')
    tps=$(echo "$mean" | grep -oE '[0-9]+ tok/s' | awk '{print $1}')
    mfu=$(echo "$mean" | grep -oE 'MFU [0-9.]+' | awk '{print $2}')
    jps=$(grep -oE '[0-9.]+ J/step' "$log" | head -1 | awk '{print $1}')
    peak=$(grep -oE 'used at peak.*: [0-9]+ MiB' "$log" | head -1 | grep -oE '[0-9]+ MiB$' | awk '{print $1}')
    stall=$(grep -oE 'data: [0-9.]+ ms per step' "$log" | head -1 | awk '{print $2}')
    printf '%s\t%s\t%s\t%s\t%s\t%s' "${ms:--}" "${tps:--}" "${mfu:--}" "${jps:--}" "${peak:--}" "${stall:--}"
}
host_peak() {
    # the number before " MiB", not the line's first: the label holds a "0" ("rank 0's")
    grep -oE 'host memory at peak[^:]*: [0-9]+ MiB' "$1" | head -1 | grep -oE '[0-9]+ MiB$' | awk '{print $1}'
}
