#!/usr/bin/env bash
# bench_cpu.sh: CPU trainer step time for GPT-2 124M (d12) at B=4, T=64, with our SGEMM
# and with OpenBLAS (if installed), on OMP_NUM_THREADS threads (default 2). Prints the
# median step time over steps 2..N (the first step pays for page faults).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${OMP_NUM_THREADS:-2}
steps=${STEPS:-8}
mkdir -p build
make -s train_gpt2
./dev/data/tinyshakespeare.sh > /dev/null
variants="ours"
if [ -f /usr/include/x86_64-linux-gnu/cblas.h ] || [ -f /usr/include/cblas.h ]; then
    make -s build/train_gpt2_blas
    variants="ours openblas"
fi
printf "load average before: %s\n" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-10s %8s %14s %10s\n" variant threads "median s/step" "GFLOP/s"
for v in $variants; do
    bin=./train_gpt2
    [ $v = openblas ] && bin=./build/train_gpt2_blas
    log=build/bench_cpu_$v.log
    policy=; [ $v = openblas ] && policy=PASSIVE  # idle OpenMP threads must not spin against OpenBLAS threads
    OMP_WAIT_POLICY=${policy:-ACTIVE} OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads $bin -e d12 -b 4 -t 64 -x $steps -v 0 -s 0 -g 0 > $log
    grep '^step' $log | tail -n +2 | awk -F'|' '{print $5, $7}' | sort -n | \
        awk -v v=$v -v t=$threads '{ms[NR]=$1; gf[NR]=$3} END {m=int((NR+1)/2); printf "%-10s %8d %14.3f %10.1f\n", v, t, ms[m]/1000, gf[m]}'
done
printf "load average after: %s\n" "$(cut -d' ' -f1-3 /proc/loadavg)"
