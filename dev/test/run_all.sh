#!/usr/bin/env bash
# run_all.sh: the whole CPU test suite, run by `make test` (which builds everything first).
# Each test is one command; its output is shown, and the last line counts them.
# PYTHON is the python with tiktoken, PYTHON_TORCH the one with PyTorch.
set -u
cd "$(dirname "$0")/../.."
if ! ./scripts/install_deps.sh --check; then
    echo "some test dependencies are missing: running scripts/install_deps.sh"
    ./scripts/install_deps.sh || exit 1
fi
PYTHON=${PYTHON:-python3}
PYTHON_TORCH=${PYTHON_TORCH:-}
if [ -z "$PYTHON_TORCH" ]; then
    for p in python3 /usr/bin/python3; do
        if $p -c 'import torch' 2>/dev/null; then PYTHON_TORCH=$p; break; fi
    done
fi
if [ -z "$PYTHON_TORCH" ]; then
    echo "error: no python with PyTorch found (apt-get install python3-torch)" >&2
    exit 1
fi

passed=0
failed=0
failed_names=()
run() {
    local name=$1
    shift
    echo
    echo "=== $name: $*"
    local t0=$(date +%s)
    if "$@"; then
        passed=$((passed + 1))
        echo "=== $name: ok ($(( $(date +%s) - t0 )) s)"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        echo "=== $name: FAILED ($(( $(date +%s) - t0 )) s)"
    fi
}

REF=build/ref_small
# unit tests (AddressSanitizer + UBSan builds)
run checkpoint-io ./build/san/test_checkpoint
run dataloader ./build/san/test_dataloader
run tokenizer-unit ./build/san/test_tokenizer_unit
run sgemm ./build/test_sgemm
run sgemm-sanitized ./build/san/test_sgemm
run energy-reader env LD_LIBRARY_PATH=build/fake_nvml ./build/san/test_energy
# multi-process logic, 1 to 3 ranks on this machine's CPUs
for np in 1 2 3; do
    run "distributed-np$np" mpirun --allow-run-as-root --oversubscribe -np $np ./build/test_distributed
done
# the NCCL id exchange of environment launches (built where nvcc is)
if [ -x build/test_nccl_id_file ]; then run nccl-id-file ./build/test_nccl_id_file
else echo "(build/test_nccl_id_file not built: no nvcc)"; fi
# the tokenizer against tiktoken
run tokenizer-vs-tiktoken $PYTHON dev/test/test_tokenizer.py
run unicode-tables-current $PYTHON dev/gen_unicode_tables.py --check
# the per-kernel step table from Nsight Compute's CSV (dev/PERF.md)
run ncu-step $PYTHON dev/test/test_ncu_step.py
# data preparation
run prepro ./dev/test/test_prepro.sh
run data-scripts ./dev/test/test_data_scripts.sh
# the PyTorch reference checks itself, then writes the small-shape reference
run reference-selfcheck $PYTHON_TORCH dev/test/test_gpt2_ref.py
run reference-small $PYTHON_TORCH dev/gpt2_ref.py --layers 2 --heads 4 --channels 64 --max-seq-len 64 \
    --batch 4 --seq-len 32 --seed 1234 --out-dir $REF
# the CPU trainer against the reference
run test_gpt2-small ./test_gpt2 --ref-dir $REF
run test_gpt2-small-sanitized ./build/san/test_gpt2 --ref-dir $REF
# the CPU trainer's command line: bad input, training, bit-exact resume
run train-cli ./dev/test/test_train_cli.sh

echo
if [ $failed -gt 0 ]; then echo "failed: ${failed_names[*]}"; fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
