#!/usr/bin/env bash
# test_model_alone.sh: gpu/model.cuh stands alone. The headers it pulls in (nvcc -M) are
# kernels, the model's own modules (activations, FP8 layers) and the file formats of
# common/ (the checkpoint's layout, util, fp8), never the trainer's settings, options, data,
# logging or run directory; then build/test_model_alone checks its host-side layout. The
# last line is "N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
. dev/test/testlib.sh
NVCC=${NVCC:-nvcc}
allowed='^(kernels/[a-z0-9_]+\.cuh|gpu/(model|activations|linear|fp8_layers)\.cuh|common/(checkpoint|crc32c|outlier|util|fp8|test_hooks)\.h)$'
# the repository's own headers that compiling the model reads, as paths from the root
if deps=$("$NVCC" -M -x cu -std=c++17 -I. gpu/model.cuh 2>&1); then
    deps=$(echo "$deps" | tr ' \\' '\n\n' | grep -E '\.(cuh|h)$' | grep -v '^/' |
        python3 -c 'import os, sys; print("\n".join(sorted({os.path.normpath(l.strip()) for l in sys.stdin if l.strip()})))')
    stray=$(echo "$deps" | grep -v -E "$allowed")
    if [ -n "$deps" ] && [ -z "$stray" ]; then ok "gpu/model.cuh pulls in $(echo "$deps" | wc -l) headers, none of the run machinery"
    else bad "gpu/model.cuh pulls in headers beyond the model's: ${stray:-none listed}"; fi
else bad "nvcc -M gpu/model.cuh failed: $(echo "$deps" | tail -3)"; fi
# negative case: the same check on the trainer, which does pull in the settings
tdeps=$("$NVCC" -M -x cu -std=c++17 -I. gpu/trainer.cuh 2>/dev/null | tr ' \\' '\n\n' | grep -E '\.(cuh|h)$' |
    python3 -c 'import os, sys; print("\n".join(sorted({os.path.normpath(l.strip()) for l in sys.stdin if l.strip()})))')
if echo "$tdeps" | grep -v -E "$allowed" | grep -q "gpu/settings.cuh"; then ok "negative case: the check finds gpu/settings.cuh behind gpu/trainer.cuh"
else bad "the check does not see gpu/settings.cuh behind gpu/trainer.cuh"; fi
if [ -x build/test_model_alone ]; then
    if out=$(./build/test_model_alone 2>&1); then ok "build/test_model_alone: $(echo "$out" | tail -1)"
    else bad "build/test_model_alone: $(echo "$out" | grep -i fail | head -3)"; fi
else bad "build/test_model_alone is not built (make build/test_model_alone)"; fi
test_finish
