// kernels/attention.cuh: causal multi-head self-attention, the entry points the model calls.
// Two ways: the plain one (attention_plain.cuh: attention_forward/backward, T x T matrices
// through cuBLAS; -f 0, and the FP32 build) and flash attention (the default in the bf16 and
// fp16 builds), fused kernels that never store the (T, T) matrix:
//   forward:  out (B, T, C), lse (B, NH, T) fp32 (natural log of the row sums of exp(s))
//   backward: dqkv (B, T, 3C), written entirely (no accumulation into it)
// qkv is (B, T, 3C) holding q | k | v, each (NH, hs) per position; out is (B, T, C).
// The flash kernels come in three forms, each in its own file: mma.sync (attention_mma.cuh,
// any GPU from sm_80 on), wgmma (attention_sm90.cuh) and warp-specialised wgmma
// (attention_sm90_ws.cuh), the last two for a 9.0 GPU running the build's sm_90a code. This
// file chooses among them per GPU, head size and --deterministic, and sizes the backward's
// scratch for that choice, so that the model sees one forward and one backward. Head size 64
// or 128. The FP32 build has the plain path only: the flash launchers exit there.
#pragma once
#include "attention_plain.cuh"
#include "attention_mma.cuh"
#include "attention_sm90.cuh"
#include "attention_sm90_ws.cuh"

// Whether the backward adds dq with atomics: --deterministic 0 on the mma.sync kernels. The
// wgmma backward (head size 64 or 128 on a 9.0 GPU, build with sm_90a) is deterministic and
// the faster in both modes. Without a GPU to ask (a memory plan), the atomic one: the larger
// scratch.
static int flash_attention_atomic_dq(int hs, int deterministic) {
    return !deterministic && !((hs == 64 || hs == 128) && flash_wgmma_runs_here());
}

// atomic_dq: with room for the atomic-dq backward's dq accumulator
static size_t flash_backward_scratch_elems_for(int B, int T, int C, int NH, int atomic_dq) {
    size_t rows = (size_t)B * NH * T;
    return flash_dq_acc_offset(rows, C) + (atomic_dq ? (size_t)B * T * C : 0);
}
static size_t flash_attention_backward_scratch_elems(int B, int T, int C, int NH, int deterministic) {
    return flash_backward_scratch_elems_for(B, T, C, NH, flash_attention_atomic_dq(C / NH, deterministic));
}

#if PRECISION != PRECISION_FP32

namespace flash {

// the warp-specialised wgmma forward where the build's sm_90a code runs, else the mma.sync one
template <int HS>
static void forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int NH, cudaStream_t s) {
#if FLASH_WGMMA
    if constexpr (HS == 64 || HS == 128)
        if (flash_wgmma_runs_here()) return flash90ws::forward<HS>(out, lse, qkv, B, T, NH, s);
#endif
    forward_cfg<HS, Cfg<HS>::FWD_NW, Cfg<HS>::FWD_BN, Cfg<HS>::FWD_MT>(out, lse, qkv, B, T, NH, s);
}

// deterministic: 1 the deterministic backward (bitwise-reproducible), 0 the atomic-dq one
// where that is the faster (the mma.sync kernels)
template <int HS>
static void backward(floatX *dqkv, floatX *dbias_v, const floatX *dout, const floatX *qkv, const floatX *out,
                     const float *lse, float *scratch, int B, int T, int NH, int deterministic, cudaStream_t s) {
#if FLASH_WGMMA
    // the wgmma backward is deterministic and faster than the atomic-dq one: both modes take it
    if constexpr (HS == 64 || HS == 128)
        if (flash_wgmma_runs_here())
            return flash90ws::backward<HS>(dqkv, dbias_v, dout, qkv, out, lse, scratch, B, T, NH, s);
#endif
    using Cf = Cfg<HS>;
    const DeviceCaps *caps = device_caps();
    if (deterministic)
        backward_cfg<HS, Cf::KV_NW, Cf::KV_BM, Cf::KV_KT, Cf::DQ_NW, Cf::DQ_BN, Cf::DQ_MT>(dqkv, dbias_v, dout, qkv,
                                                                                      out, lse, scratch, B, T, NH, s);
    else if (!caps || dkdv_smem<HS, Cf::AKV_NW, Cf::AKV_BM, Cf::AKV_KT, true>() <= (size_t)caps->smem_optin)
        backward_atomic_cfg<HS, Cf::AKV_NW, Cf::AKV_BM, Cf::AKV_KT>(dqkv, dbias_v, dout, qkv, out, lse, scratch, B,
                                                                   T, NH, s);
    else  // (sm_86, sm_89 at hs = 128)
        backward_atomic_cfg<HS, Cf::AKV_SMALL_NW, Cf::AKV_BM, Cf::AKV_KT>(dqkv, dbias_v, dout, qkv, out, lse,
                                                                         scratch, B, T, NH, s);
}

}  // namespace flash

static void flash_attention_forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH,
                                    cudaStream_t s) {
    int hs = C / NH;
    if (hs == 64) flash::forward<64>(out, lse, qkv, B, T, NH, s);
    else if (hs == 128) flash::forward<128>(out, lse, qkv, B, T, NH, s);
    else { fprintf(stderr, "error: flash attention supports head size 64 or 128, not %d\n", hs); fatal_exit(); }
}

// deterministic: 1 the deterministic backward (bitwise-reproducible), 0 the atomic-dq backward
// where flash_attention_atomic_dq takes it. scratch: flash_attention_backward_scratch_elems(B,
// T, C, NH, deterministic) floats, for the same deterministic. dbias_v (C), if not NULL, gets
// the column sums of dout added: the gradient of the bias of v (the qkv layer's last third).
static void flash_attention_backward(floatX *dqkv, floatX *dbias_v, const floatX *dout, const floatX *qkv,
                                     const floatX *out, const float *lse, float *scratch, int B, int T, int C, int NH,
                                     int deterministic, cudaStream_t s) {
    int hs = C / NH;
    if (C / X128::size * BWD_DOT_R > 1024) {
        fprintf(stderr, "error: flash attention backward supports C up to %d, not %d\n", 1024 * X128::size / BWD_DOT_R,
                C);
        fatal_exit();
    }
    if (hs == 64) flash::backward<64>(dqkv, dbias_v, dout, qkv, out, lse, scratch, B, T, NH, deterministic, s);
    else if (hs == 128) flash::backward<128>(dqkv, dbias_v, dout, qkv, out, lse, scratch, B, T, NH, deterministic, s);
    else { fprintf(stderr, "error: flash attention supports head size 64 or 128, not %d\n", hs); fatal_exit(); }
}

#else  // FP32 build: no flash kernels (the tensor-core path is bf16/fp16); use attention_forward/backward

static void flash_attention_forward(floatX *, float *, const floatX *, int, int, int, int, cudaStream_t) {
    fprintf(stderr, "error: flash attention is not built for fp32; use the plain attention path\n");
    fatal_exit();
}
static void flash_attention_backward(floatX *, floatX *, const floatX *, const floatX *, const floatX *, const float *,
                                     float *, int, int, int, int, int, cudaStream_t) {
    fprintf(stderr, "error: flash attention is not built for fp32; use the plain attention path\n");
    fatal_exit();
}

#endif  // PRECISION != PRECISION_FP32
