#!/usr/bin/env bash
# test_gpu_arch.sh: the Makefile's choice of GPU code (GPU_ARCH), without a GPU or nvcc: a
# stand-in nvidia-smi says which GPU this machine has, a stand-in nvcc records its flags.
# Checks: the build for each GPU (9.0 -> sm_90a with the wgmma kernels, 8.9, 8.6, 8.0, a
# newer one its own number); no GPU -> every architecture in one binary plus PTX; a GPU below
# 8.0 refused by name, but only by a make that builds GPU code; GPU_ARCH by hand, and below
# 8.0 refused; nvidia-smi asked once, and not at all for CPU programs; a build for one
# GPU_ARCH rebuilt for another, and for the first again, never reused.
set -u
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=dev/test/testlib.sh
. dev/test/testlib.sh
W=$(mktemp -d)
DIR=build/cuda_GpuArchTest  # a precision folder of this test's own (the stand-in "precision")
trap 'rm -rf "$W" "$DIR"' EXIT
mkdir -p "$W/bin"
cat > "$W/bin/nvidia-smi" << 'EOF'
#!/bin/sh
echo call >> "$SMI_LOG"
if [ -n "$SMI_OUT" ]; then echo "$SMI_OUT"; else echo "No devices were found"; exit 6; fi
EOF
cat > "$W/bin/nvcc" << 'EOF'
#!/bin/sh
echo "$*" >> "$NVCC_LOG"
while [ $# -gt 0 ]; do
    if [ "$1" = -o ]; then touch "$2"; fi
    shift
done
EOF
chmod +x "$W/bin/nvidia-smi" "$W/bin/nvcc"
export SMI_LOG=$W/smi.log NVCC_LOG=$W/nvcc.log

# mk SMI_OUT ARGS...: make with this machine's GPU as SMI_OUT says ("" none); output in $W/out
mk() {
    local smi=$1
    shift
    : > "$SMI_LOG"
    env -u GPU_ARCH -u MAKEFLAGS -u MAKELEVEL SMI_OUT="$smi" PATH="$W/bin:$PATH" \
        make --no-print-directory NVCC=nvcc "$@" > "$W/out" 2>&1
}
# gencode SMI_OUT ARGS...: the -gencode flags and FLASH_WGMMA of build/test_attention's nvcc
gencode() {
    mk "$@" -n build/test_attention || { echo "make failed: $(tail -1 "$W/out")"; return; }
    grep -m1 'test_attention.cu' "$W/out" | grep -oE -- '-gencode [^ ]+|-DFLASH_WGMMA=[01]' | tr '\n' ' ' |
        sed 's/ $//'
}
# expect_code WHAT SMI_OUT WANT [GPU_ARCH=...]
expect_code() {
    local what=$1 smi=$2 want=$3
    shift 3
    local got
    got=$(gencode "$smi" "$@")
    if [ "$got" = "$want" ]; then ok "$what: $want"; else bad "$what: got '$got', want '$want'"; fi
}

one() { echo "-gencode arch=compute_$1,code=sm_$1 -DFLASH_WGMMA=$2"; }
ALL="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 -gencode arch=compute_89,code=sm_89"
ALL="$ALL -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=compute_80 -DFLASH_WGMMA=1"
expect_code "H100 (9.0)" "9.0, NVIDIA H100 80GB HBM3" "$(one 90a 1)"
expect_code "L4 (8.9)" "8.9, NVIDIA L4" "$(one 89 0)"
expect_code "RTX 3090 (8.6)" "8.6, NVIDIA GeForce RTX 3090" "$(one 86 0)"
expect_code "A100 (8.0)" "8.0, NVIDIA A100-SXM4-80GB" "$(one 80 0)"
expect_code "a newer GPU (12.0)" "12.0, NVIDIA GeForce RTX 5090" "$(one 120 0)"
expect_code "no GPU" "" "$ALL"
expect_code "GPU_ARCH=all on an H100" "9.0, NVIDIA H100 80GB HBM3" "$ALL" GPU_ARCH=all
expect_code "GPU_ARCH=86 on an H100" "9.0, NVIDIA H100 80GB HBM3" "$(one 86 0)" GPU_ARCH=86
expect_code "GPU_ARCH=90 (no wgmma)" "" "$(one 90 0)" GPU_ARCH=90
expect_code "GPU_ARCH=all on a T4" "7.5, Tesla T4" "$ALL" GPU_ARCH=all

# refused SMI_OUT TEXT... -- ARGS...: make fails, its output holding every TEXT
refused() {
    local smi=$1 what
    shift
    local needles=()
    while [ "$1" != -- ]; do needles+=("$1"); shift; done
    shift
    what="make $* with '${smi:-no GPU}'"
    if mk "$smi" "$@"; then bad "$what: not refused"; return; fi
    local n
    for n in "${needles[@]}"; do
        grep -qF -- "$n" "$W/out" || { bad "$what: the message lacks '$n': $(tail -1 "$W/out")"; return; }
    done
    ok "$what: refused ($(grep -o '\*\*\* .*' "$W/out" | head -c 160))"
}
refused "7.5, Tesla T4" "Tesla T4" "7.5" "8.0" "GPU_ARCH=all" -- -n build/test_attention
refused "" "GPU_ARCH=75" "8.0" -- -n GPU_ARCH=75 build/test_attention
refused "" "GPU_ARCH=sm80" "sm80" -- -n GPU_ARCH=sm80 build/test_attention
if mk "7.5, Tesla T4" -n train_gpt2 && [ ! -s "$SMI_LOG" ]; then
    ok "a T4 machine builds the CPU programs, without asking nvidia-smi"
else
    bad "make -n train_gpt2 on a T4 machine: exit or nvidia-smi asked: $(tail -1 "$W/out")"
fi
mk "8.6, NVIDIA A10" -n cuda build/test_comm build/bench_fp8
calls=$(wc -l < "$SMI_LOG")
if [ "$calls" -eq 1 ]; then ok "nvidia-smi asked once for several GPU programs"
else bad "nvidia-smi asked $calls times for several GPU programs"; fi

# build ARCH: the test folder's test_wgmma for GPU_ARCH=ARCH; prints "compiled" or "reused"
build() {
    : > "$NVCC_LOG"
    mk "" GPU_ARCH="$1" "$DIR/test_wgmma" || { echo "make failed: $(tail -1 "$W/out")"; return; }
    if [ -s "$NVCC_LOG" ]; then echo compiled; else echo reused; fi
}
rm -rf "$DIR"
steps="$(build 90a) $(build 90a) $(build 86) $(build 86) $(build 90a) $(build all)"
want="compiled reused compiled reused compiled compiled"
if [ "$steps" = "$want" ]; then ok "GPU_ARCH 90a, 90a, 86, 86, 90a, all: $want"
else bad "GPU_ARCH 90a, 90a, 86, 86, 90a, all: got '$steps', want '$want'"; fi
test_finish
