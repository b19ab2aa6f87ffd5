#!/usr/bin/env bash
# run_all.sh: the whole test suite, run by `make test` (which installs the dependencies and
# builds the programs first). Each test is one command; its output is shown. A test that
# exits 0 passed, 77 skipped (all it could check passed, something could not be checked
# here), anything else failed. The last line is "N passed, M failed, K skipped".
# PYTHON is the python with tiktoken, PYTHON_TORCH the one with PyTorch, HAVE_NVCC=1 where
# the CUDA programs can be compiled (default: nvcc on the PATH).
#   run_all.sh --self-test   checks this script's own counting
set -u
cd "$(dirname "$0")/../.."

passed=0
failed=0
skipped=0
failed_names=()
SKIP=77  # the exit code automake's test harness uses for "skipped"

run() {
    local name=$1
    shift
    echo
    echo "=== $name: $*"
    local t0 rc
    t0=$(date +%s)
    "$@"
    rc=$?
    local took="$(( $(date +%s) - t0 )) s"
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        echo "=== $name: ok ($took)"
    elif [ $rc -eq $SKIP ]; then
        skipped=$((skipped + 1))
        echo "=== $name: skipped ($took)"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        echo "=== $name: FAILED, exit code $rc ($took)"
    fi
}

# skip NAME REASON: a test this machine cannot run
skip() {
    echo
    echo "=== $1: skipped ($2)"
    skipped=$((skipped + 1))
}

# setup NAME COMMAND...: work that tests need, not a test: counted only when it fails
setup() {
    local name=$1
    shift
    echo
    echo "=== $name (setup): $*"
    if "$@"; then
        echo "=== $name (setup): done"
    else
        failed=$((failed + 1))
        failed_names+=("$name")
        echo "=== $name (setup): FAILED; the tests that need it fail too"
    fi
}

summary() {
    echo
    if [ $failed -gt 0 ]; then echo "failed: ${failed_names[*]}"; fi
    echo "$passed passed, $failed failed, $skipped skipped"
    [ $failed -eq 0 ]
}

if [ "${1:-}" = --self-test ]; then
    out=$( (run pass true; run fail false; run skip-77 sh -c "exit $SKIP"; skip no-tool "absent"
            setup setup-ok true; setup setup-fails false; summary) 2>&1)
    rc=$?
    want="1 passed, 2 failed, 2 skipped"
    if [ "$(printf '%s\n' "$out" | tail -n 1)" = "$want" ] && [ $rc -ne 0 ] &&
       printf '%s\n' "$out" | grep -qx "failed: fail setup-fails"; then
        echo "ok    counting: $want, non-zero exit, failed names listed"
        exit 0
    fi
    echo "FAIL  counting: expected a last line '$want', a non-zero exit and 'failed: fail setup-fails'; got:"
    printf '%s\n' "$out" | sed 's/^/      /'
    exit 1
fi

PYTHON=${PYTHON:-python3}
PYTHON_TORCH=${PYTHON_TORCH:-}
if [ -z "$PYTHON_TORCH" ]; then
    for p in python3 /usr/bin/python3; do
        if $p -c 'import torch' 2>/dev/null; then PYTHON_TORCH=$p; break; fi
    done
fi
if [ -z "$PYTHON_TORCH" ]; then
    echo "error: no python with PyTorch found (run scripts/install_deps.sh)" >&2
    exit 1
fi
if [ -z "${HAVE_NVCC:-}" ]; then
    HAVE_NVCC=0
    command -v "${NVCC:-nvcc}" > /dev/null && HAVE_NVCC=1
fi

REF=build/ref_small
run run_all-counting "$0" --self-test
# unit tests (AddressSanitizer + UBSan builds)
run checkpoint-io ./build/san/test_checkpoint
run dataloader ./build/san/test_dataloader
run dataloader-tsan ./build/tsan/test_dataloader
run tokenizer-unit ./build/san/test_tokenizer_unit
run sgemm ./build/test_sgemm
run sgemm-sanitized ./build/san/test_sgemm
run energy-reader env LD_LIBRARY_PATH=build/fake_nvml ./build/san/test_energy
run loss-scaler ./build/san/test_loss_scaler
run step-rules ./build/san/test_step_rules
run rng ./build/san/test_rng
run sampling ./build/san/test_sampling
run run-dir-unit ./build/san/test_run_dir
run hellaswag-unit ./build/san/test_hellaswag
run memory-budget ./build/san/test_memory_budget
run update-pieces ./build/san/test_update_pieces
run export-hf-unit ./build/san/test_export_hf
run fuzz-readers ./build/san/fuzz_readers
# multi-process logic, 1 to 3 ranks on this machine's CPUs
for np in 1 2 3; do
    run "distributed-np$np" mpirun --allow-run-as-root --oversubscribe -np $np ./build/test_distributed
done
# the Makefile's choice of GPU code by the machine's GPU (GPU_ARCH), with stand-ins for
# nvidia-smi and nvcc
run gpu-arch ./dev/test/test_gpu_arch.sh
# every CUDA program compiles (no GPU needed): each precision for one GPU (sm_90a, Hopper's
# wgmma kernels included), and bf16 for every GPU in one binary (GPU_ARCH=all: sm_80, sm_86,
# sm_89, sm_90a and PTX); and the NCCL id exchange of environment launches runs without a
# GPU. The compiles have the machine to themselves here; each one's time is on its ok line.
for build in FP32:90a FP16:90a BF16:all; do
    p=${build%:*} arch=${build#*:}
    if [ "$HAVE_NVCC" = 1 ]; then
        run "cuda-compile-$p-$arch" make --no-print-directory -j"$(nproc)" GPU_ARCH="$arch" "cuda-$p"
    else skip "cuda-compile-$p-$arch" "no nvcc"; fi
done
if [ "$HAVE_NVCC" = 1 ]; then run nccl-id-file ./build/test_nccl_id_file
else skip nccl-id-file "no nvcc"; fi
# the FP8 encoder against CUDA's, the scale recipe and the FP8 matmul's refusals (CPU only)
if [ "$HAVE_NVCC" = 1 ]; then run fp8-host ./build/test_fp8_host
else skip fp8-host "no nvcc"; fi
# the model header on its own: the headers it pulls in, its layout (CPU only)
if [ "$HAVE_NVCC" = 1 ]; then run model-alone ./dev/test/test_model_alone.sh
else skip model-alone "no nvcc"; fi
# the tokenizer against tiktoken
run tokenizer-vs-tiktoken $PYTHON dev/test/test_tokenizer.py
run unicode-tables-current $PYTHON dev/gen_unicode_tables.py --check
# the per-kernel step table from Nsight Compute's CSV (docs/performance-notes.md)
run ncu-step $PYTHON dev/test/test_ncu_step.py
# the metrics file's checker and plotter
run plot-metrics $PYTHON dev/test/test_plot_metrics.py
run plot-trace $PYTHON dev/test/test_plot_trace.py
# the speed and memory studies' tables, verdicts and charts, on made-up rows
run study-tables ./dev/test/test_study_tables.sh
# data preparation
run prepro ./dev/test/test_prepro.sh
run data-scripts ./dev/test/test_data_scripts.sh
# the PyTorch reference checks itself, then writes the small-shape reference
run reference-selfcheck $PYTHON_TORCH dev/test/test_gpt2_ref.py
setup reference-small $PYTHON_TORCH dev/gpt2_ref.py --layers 2 --heads 4 --channels 64 --max-seq-len 64 \
    --batch 4 --seq-len 32 --seed 1234 --out-dir $REF
# the CPU trainer against the reference
run test_gpt2-small ./test_gpt2 --ref-dir $REF
run test_gpt2-small-sanitized ./build/san/test_gpt2 --ref-dir $REF
# the Hugging Face export and import against PyTorch (needs ./test_gpt2)
run export-hf $PYTHON_TORCH dev/test/test_export_hf.py
# the CPU trainer's command line: bad input, training, bit-exact resume
run train-cli ./dev/test/test_train_cli.sh
run kill-resume ./dev/test/test_kill_resume.sh
# the run directory: one run at a time, an earlier run kept, a full disk, long paths, prompts
run run-dir ./dev/test/test_run_dir.sh
# the run directory under injected faults: failed and torn writes, kills, damaged checkpoints
run fault-inject $PYTHON dev/test/fault_inject.py
# --trace: the timeline of a few steps, on the CPU trainer
run trace ./dev/test/test_trace.sh
# --generate and sampling with the KV cache, cached against uncached
run generate ./dev/test/test_generate.sh
# the checkpoint comparator of dev/test/same_behaviour_gpu.sh, on the CPU trainer's checkpoints
run compare-checkpoints ./dev/test/test_compare_checkpoints.sh
# the HellaSwag evaluation (-h 1) end to end, against PyTorch's answers
run hellaswag env PYTHON_TORCH=$PYTHON_TORCH ./dev/test/test_hellaswag.sh
# the option lists in docs/command-line.md against the programs' --help
run readme-flags ./dev/test/test_readme_flags.sh

summary
