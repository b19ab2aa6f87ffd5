// kernels/fp8.cuh: the GPU side of FP8 linear layers: casts of floatX tensors to FP8 codes
// (E4M3 for weights and activations, E5M2 for gradients) with a per-tensor scale, the
// scale update, and the FP8 matmul through cuBLASLt (fp32 accumulation, floatX output).
// The formats and the scale recipe are common/fp8.h's; the casts here use the hardware
// conversion (cvt.rn.satfinite), which the tests hold to fp8.h's encoder bit for bit.
//
// Why the pieces look as they do:
// - cuBLASLt's FP8 kernels on Hopper take only the "TN" layout: op(A) = A^T, op(B) = B, so
//   both operands are stored with the reduction dimension k contiguous. The forward
//   (out = inp W^T) is TN as stored; the backward's dinp = dout W and dweight = dout^T inp
//   need W, inp and dout with the other dimension contiguous, hence the transposing cast.
// - Each cast also reduces the tensor's amax (of the unscaled input) into a device float:
//   the cast reads the tensor anyway, so delayed scaling gets next step's amax for free
//   instead of another pass over memory. The max is an atomicMax on the float's bits:
//   non-negative floats order like their bit patterns, and NaN's bits lie above inf's, so
//   an overflowed tensor leaves a non-finite amax for the scale update to pass over.
// - Scales live in device memory and are updated by a one-thread kernel, so a step's
//   scaling needs no host synchronisation.
// Current scaling: fp8_quantize with out = NULL (amax only), fp8_update_scale with H = 1,
// then the cast. Delayed scaling: point the cast's amax at this step's slot of an amax
// history (zeroed first) and update the scale from the whole history after the step.
#pragma once
#include <cuda_fp8.h>
#include "common.cuh"
#include "matmul.cuh"
#include "../common/fp8.h"

#define FP8_THREADS 256

// x times the scale, with an infinite x made NaN: the conversion saturates infinities to
// the format's max, which would hide an overflowed tensor from the step's finiteness check
// (the update is skipped on a non-finite norm); a NaN code carries it through the matmul
__device__ __forceinline__ float fp8_scaled(float x, float s) { return isinf(x) ? __int_as_float(0x7fc00000) : x * s; }

// 4 floats times the scale as 4 codes, the first in the lowest byte
template <int F>
__device__ __forceinline__ uint32_t fp8x4(const float *f, float s) {
    constexpr __nv_fp8_interpretation_t I = F == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2;
    uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(fp8_scaled(f[0], s), fp8_scaled(f[1], s)), __NV_SATFINITE, I);
    uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(fp8_scaled(f[2], s), fp8_scaled(f[3], s)), __NV_SATFINITE, I);
    return lo | (hi << 16);
}
template <int F>
__device__ __forceinline__ uint8_t fp8x1(float f, float s) {
    return __nv_cvt_float_to_fp8(fp8_scaled(f, s), __NV_SATFINITE, F == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
}

// |x|'s bits, which order like |x| itself (NaN above inf)
__device__ __forceinline__ unsigned abs_bits(float x) { return __float_as_uint(fabsf(x)); }

// max of m over the block (blockDim.x a multiple of 32), then into *amax: one atomic per block
__device__ __forceinline__ void amax_block_atomic(unsigned m, float *amax) {
    __shared__ unsigned warp_max[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    m = __reduce_max_sync(0xffffffffu, m);
    if (lane == 0) warp_max[warp] = m;
    __syncthreads();
    if (warp == 0) {
        m = lane < (int)(blockDim.x / 32) ? warp_max[lane] : 0u;
        m = __reduce_max_sync(0xffffffffu, m);
        if (lane == 0 && m) atomicMax(reinterpret_cast<unsigned *>(amax), m);
    }
}

// out[i] = fp8(inp[i] * *scale); the first nvec * X128::size elements 16 bytes at a time
template <int F>
__global__ void __launch_bounds__(FP8_THREADS)
fp8_quantize_kernel(uint8_t *out, float *amax, const floatX *inp, const float *scale, size_t n, size_t nvec) {
    constexpr int V = X128::size;
    const float s = out ? *scale : 0.0f;
    const size_t stride = (size_t)gridDim.x * blockDim.x, t0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned m = 0;
    for (size_t i = t0; i < nvec; i += stride) {
        X128 x = load128cs(inp + i * V);
        float f[V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            f[k] = to_float(x[k]);
            m = max(m, abs_bits(f[k]));
        }
        if (out) {
            if constexpr (V == 8) {
                *reinterpret_cast<uint2 *>(out + i * V) = make_uint2(fp8x4<F>(f, s), fp8x4<F>(f + 4, s));
            } else {
                *reinterpret_cast<uint32_t *>(out + i * V) = fp8x4<F>(f, s);
            }
        }
    }
    for (size_t i = nvec * V + t0; i < n; i += stride) {
        float f = to_float(inp[i]);
        m = max(m, abs_bits(f));
        if (out) out[i] = fp8x1<F>(f, s);
    }
    if (amax) amax_block_atomic(m, amax);
}

// Transposing cast: inp (rows x cols, row-major) -> out (cols x rows) through a 64 x 64
// tile in shared memory. A thread reads 8 consecutive elements of a row (16-byte loads, a
// warp 4 full 128-byte rows) and writes their codes down a column of the transposed tile;
// then each thread writes 16 codes of one output row (a warp: 8 rows of 64 bytes). The
// tile's 16-byte chunks are permuted by output row (an XOR swizzle) so that the column
// writes spread over the banks (2-way conflicts instead of 8) while every chunk stays
// 16-byte aligned for the row reads.
#define FP8T_TILE 64

__device__ __forceinline__ int fp8t_at(int c, int r) {
    return c * FP8T_TILE + ((((r >> 4) ^ (c >> 3)) & 3) << 4) + (r & 15);
}

// out_rows (optional): the row-major codes too (rows x cols, ld cols), from the same read, for
// a tensor that is wanted both ways (a weight: the forward's W and the backward's W^T; an
// output gradient: dinp's g and dweight's g^T): one pass over the bf16 tensor instead of two.
template <int F>
__global__ void __launch_bounds__(FP8_THREADS)
fp8_quantize_transpose_kernel(uint8_t *out, uint8_t *out_rows, float *amax, const floatX *inp, size_t ld,
                              const float *scale, int rows, int cols, int vec_in, int vec_out, int vec_rows) {
    constexpr int V = X128::size;
    __shared__ __align__(16) uint8_t tile[FP8T_TILE * FP8T_TILE];
    const int r0 = blockIdx.y * FP8T_TILE, c0 = blockIdx.x * FP8T_TILE;
    const float s = *scale;
    unsigned m = 0;
#pragma unroll
    for (int p = 0; p < FP8T_TILE * FP8T_TILE / 8 / FP8_THREADS; p++) {
        int t = p * FP8_THREADS + threadIdx.x, lr = t / 8, lc = (t % 8) * 8, r = r0 + lr, c = c0 + lc;
        const floatX *src = inp + (size_t)r * ld + c;
        float f[8];
        if (vec_in && r < rows && c + 8 <= cols) {
#pragma unroll
            for (int v = 0; v < 8; v += V) {
                X128 x = load128cs(src + v);
#pragma unroll
                for (int k = 0; k < V; k++) f[v + k] = to_float(x[k]);
            }
        } else {
            for (int k = 0; k < 8; k++) f[k] = r < rows && c + k < cols ? to_float(src[k]) : 0.0f;
        }
        uint32_t w[2];
#pragma unroll
        for (int k = 0; k < 8; k += 4) {
            w[k / 4] = fp8x4<F>(f + k, s);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                tile[fp8t_at(lc + k + j, lr)] = (uint8_t)(w[k / 4] >> (8 * j));
                m = max(m, abs_bits(f[k + j]));
            }
        }
        if (out_rows && r < rows) {
            uint8_t *dst = out_rows + (size_t)r * cols + c;
            if (vec_rows && c + 8 <= cols) {
                *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
            } else {
                for (int k = 0; k < 8 && c + k < cols; k++) dst[k] = (uint8_t)(w[k / 4] >> (8 * (k % 4)));
            }
        }
    }
    __syncthreads();
    const int lc = threadIdx.x / 4, q = threadIdx.x % 4, c = c0 + lc, r = r0 + 16 * q;
    if (c < cols && r < rows) {
        const uint8_t *src = tile + fp8t_at(lc, 16 * q);
        uint8_t *dst = out + (size_t)c * rows + r;
        if (vec_out && r + 16 <= rows) {
            *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
        } else {
            for (int i = 0; i < 16 && r + i < rows; i++) dst[i] = src[i];
        }
    }
    if (amax) amax_block_atomic(m, amax);
}

__global__ void fp8_update_scale_kernel(float *scale, float *deq, const float *amax_hist, int H, float fmax,
                                        int margin) {
    float s = fp8_scale_from_amax(fp8_amax_history_max(amax_hist, H), fmax, margin, *scale);
    *scale = s;
    *deq = fp8_dequant_factor(s);
}

static int fp8_aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

// out (n codes) = fp8(inp * *scale), saturating; *amax = max(*amax, max |inp|) unless amax
// is NULL (the caller zeroes it where a fresh amax is wanted). out == NULL: the amax only
// (scale unused).
static void fp8_quantize(uint8_t *out, float *amax, const floatX *inp, const float *scale, size_t n, Fp8Format f,
                         cudaStream_t s) {
    const int V = X128::size;
    int vec = fp8_aligned(inp, 16) && (!out || fp8_aligned(out, V));
    size_t nvec = vec ? n / V : 0, work = nvec + (n - nvec * V);
    int blocks = (int)((work + FP8_THREADS - 1) / FP8_THREADS);
    blocks = blocks < 1 ? 1 : blocks > 2048 ? 2048 : blocks;  // grid-stride beyond: fewer amax atomics
    if (f == FP8_E4M3) fp8_quantize_kernel<FP8_E4M3><<<blocks, FP8_THREADS, 0, s>>>(out, amax, inp, scale, n, nvec);
    else fp8_quantize_kernel<FP8_E5M2><<<blocks, FP8_THREADS, 0, s>>>(out, amax, inp, scale, n, nvec);
    LAUNCH_CHECK();
}

// out (cols x rows codes) = fp8(inp^T * *scale) for inp (rows x cols, row-major, rows ld
// elements apart: with ld > cols a column block of a wider tensor); amax as fp8_quantize.
// out_rows (NULL: none) also gets the codes as inp lies (rows x cols, cols apart).
static void fp8_quantize_both_ld(uint8_t *out, uint8_t *out_rows, float *amax, const floatX *inp, size_t ld,
                                 const float *scale, int rows, int cols, Fp8Format f, cudaStream_t s) {
    int vec_in = fp8_aligned(inp, 16) && (ld * sizeof(floatX)) % 16 == 0;
    int vec_out = fp8_aligned(out, 16) && rows % 16 == 0;
    int vec_rows = out_rows && fp8_aligned(out_rows, 8) && cols % 8 == 0;
    dim3 grid(ceil_div(cols, FP8T_TILE), ceil_div(rows, FP8T_TILE));
    if (f == FP8_E4M3)
        fp8_quantize_transpose_kernel<FP8_E4M3><<<grid, FP8_THREADS, 0, s>>>(out, out_rows, amax, inp, ld, scale,
                                                                            rows, cols, vec_in, vec_out, vec_rows);
    else
        fp8_quantize_transpose_kernel<FP8_E5M2><<<grid, FP8_THREADS, 0, s>>>(out, out_rows, amax, inp, ld, scale,
                                                                            rows, cols, vec_in, vec_out, vec_rows);
    LAUNCH_CHECK();
}

static void fp8_quantize_transpose_ld(uint8_t *out, float *amax, const floatX *inp, size_t ld, const float *scale,
                                      int rows, int cols, Fp8Format f, cudaStream_t s) {
    fp8_quantize_both_ld(out, NULL, amax, inp, ld, scale, rows, cols, f, s);
}

// the same for a whole tensor (ld = cols)
static void fp8_quantize_transpose(uint8_t *out, float *amax, const floatX *inp, const float *scale, int rows,
                                   int cols, Fp8Format f, cudaStream_t s) {
    fp8_quantize_both_ld(out, NULL, amax, inp, (size_t)cols, scale, rows, cols, f, s);
}

// out_rows (rows x cols codes) and out (its transpose) from one read of inp (rows x cols)
static void fp8_quantize_both(uint8_t *out_rows, uint8_t *out, float *amax, const floatX *inp, const float *scale,
                              int rows, int cols, Fp8Format f, cudaStream_t s) {
    fp8_quantize_both_ld(out, out_rows, amax, inp, (size_t)cols, scale, rows, cols, f, s);
}

// *scale (and *deq = 1 / *scale, for the matmul) from the largest finite amax of the H
// entries of amax_hist, by fp8.h's recipe; *scale keeps its value where that gives none
static void fp8_update_scale(float *scale, float *deq, const float *amax_hist, int H, Fp8Format f, int margin,
                             cudaStream_t s) {
    fp8_update_scale_kernel<<<1, 1, 0, s>>>(scale, deq, amax_hist, H, fp8_format_max(f), margin);
    LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------
// FP8 matmul through cuBLASLt. What cuBLASLt's FP8 kernels require (cuBLAS documentation,
// cublasLtMatmul(), "To use tensor- or block-scaled FP8 kernels"): the TN layout on Ada and
// Hopper, CUBLAS_COMPUTE_32F with an fp32 scale type, pointers and dimensions that allow
// 16-byte alignment ("Tensor Core Usage": op(A)'s and op(B)'s k * 1 byte, lda, ldb, m and
// ldd * sizeof(D) multiples of 16 bytes, A, B, C/D 16-byte aligned); and the operand types
// E4M3 x E4M3, E4M3 x E5M2 or E5M2 x E4M3 (no E5M2 x E5M2). With a bf16 D, C is bf16 and
// so is the bias. The scale pointers are device floats of the compute type.

static const char *fp8_format_name(Fp8Format f) { return f == FP8_E4M3 ? "E4M3" : "E5M2"; }

// Why cuBLASLt would refuse this call, or NULL: checked before anything reaches the GPU
// (a refusal names what to change instead of a bare cuBLAS status).
static const char *matmul_fp8_refusal(const void *D, const void *A, Fp8Format fa, const void *B, Fp8Format fb,
                                      int m, int n, int k, int lda, int ldb, int ldd) {
    static char why[256];
    if (PRECISION != PRECISION_BF16) {
        snprintf(why, sizeof why, "FP8 matmuls write bf16; this is a %s build", PRECISION_NAME);
    } else if ((fa != FP8_E4M3 && fa != FP8_E5M2) || (fb != FP8_E4M3 && fb != FP8_E5M2)) {
        snprintf(why, sizeof why, "unknown FP8 format (A %d, B %d)", (int)fa, (int)fb);
    } else if (fa == FP8_E5M2 && fb == FP8_E5M2) {
        snprintf(why, sizeof why, "E5M2 x E5M2 is not offered by cuBLASLt: one operand must be E4M3");
    } else if (m <= 0 || n <= 0 || k <= 0 || m % 16 || n % 16 || k % 16) {
        snprintf(why, sizeof why, "m, n and k must be positive multiples of 16");
    } else if (lda < k || ldb < k || ldd < m) {
        snprintf(why, sizeof why, "leading dimensions too small (lda %d and ldb %d need >= k, ldd %d >= m)", lda, ldb,
                 ldd);
    } else if (lda % 16 || ldb % 16 || ((size_t)ldd * sizeof(floatX)) % 16) {
        snprintf(why, sizeof why, "leading dimensions lda=%d ldb=%d ldd=%d must be multiples of 16 bytes", lda, ldb,
                 ldd);
    } else if (!A || !B || !D) {
        snprintf(why, sizeof why, "a NULL operand (A %p, B %p, D %p)", A, B, D);
    } else if (!fp8_aligned(A, 16) || !fp8_aligned(B, 16) || !fp8_aligned(D, 16)) {
        snprintf(why, sizeof why, "A, B and D must be 16-byte aligned (A %p, B %p, D %p)", A, B, D);
    } else {
        return NULL;
    }
    return why;
}

// FP8 tensor cores: compute capability 8.9 (Ada) and up (device_caps: a test cap counts); asked once
static void fp8_require_device(void) {
    static int ok = 0;
    if (ok) return;
    const DeviceCaps *caps = device_caps();
    if (!caps) fatal("FP8 matmuls: no GPU answered for its compute capability");
    if (caps->cc < 89)
        fatal("FP8 matmuls need a GPU of compute capability 8.9 or newer; this one is %d.%d", caps->cc / 10,
              caps->cc % 10);
    ok = 1;
}

// FP8 plans whose heuristic choice cuBLASLt refused at the call (matmul_fp8 then runs another
// candidate); test_fp8 reports it
static int g_fp8_fallbacks = 0;

static void lt_call_create_fp8(LtCall *c, Fp8Format fa, const float *a_deq, Fp8Format fb, const float *b_deq,
                               const floatX *bias, int m, int n, int k, int lda, int ldb, int ldd, int fast_accum,
                               cublasLtEpilogue_t epi, const floatX *aux, int ldaux) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (aux) {  // (its type: D's, bf16)
        int64_t ld = ldaux;
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias) {
        cudaDataType_t bt = CUBLAS_FLOATX;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (a_deq)
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_deq, sizeof a_deq));
    if (b_deq)
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_deq, sizeof b_deq));
    int8_t fast = fast_accum ? 1 : 0;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    cudaDataType_t ta = fa == FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
    cudaDataType_t tb = fb == FP8_E4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->la, ta, k, m, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->lb, tb, k, n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->ld, CUBLAS_FLOATX, m, n, ldd));
}

// D (m x n, col-major, ld ldd) = epi(a_deq * b_deq * A^T B [+ bias] [+ beta * D])   (TN)
// A: k x m col-major FP8 codes of format fa (row-major: m rows of k codes, lda >= k apart),
// B: k x n likewise (n rows of k codes); a_deq, b_deq: device floats, the dequantization
// factors (1 / scale; NULL: 1); bias: m floatX or NULL. fast_accum: cuBLASLt's FP8 fast
// accumulation (the tensor cores' partial sums are not promoted to fp32 now and then:
// faster, less accurate); modes: whether a shape's first call times cuBLASLt's candidates
// (its tune, as for every matmul of kernels/matmul.cuh). In the trainer's row-major terms,
// with m = OC, n = N, k = C: out (N, OC) = inp (N, C) W^T is A = W (OC x C), B = inp (N x C),
// D = out.
// With an epilogue (matmul_fp8_epi): CUBLASLT_EPILOGUE_GELU_AUX_BIAS or GELU_AUX, D = gelu(..)
// and aux (m x n, ld ldaux, bf16) = the GELU's input, as the bf16 forward fuses it; or DGELU,
// D = (..) * gelu'(aux), as the bf16 dinp fuses it. Returns 0 when cuBLASLt offers no
// algorithm for that epilogue (nothing ran: the caller runs the separate kernel).
static int matmul_fp8_epi(const MatmulModes *modes, floatX *D, const uint8_t *A, Fp8Format fa, const float *a_deq,
                          const uint8_t *B, Fp8Format fb, const float *b_deq, const floatX *bias, int m, int n, int k,
                          int lda, int ldb, int ldd, float beta, int fast_accum, cublasLtEpilogue_t epi,
                          const floatX *aux, int ldaux, cudaStream_t s) {
    const char *why = matmul_fp8_refusal(D, A, fa, B, fb, m, n, k, lda, ldb, ldd);
    if (why) fatal("FP8 matmul %s x %s, m=%d n=%d k=%d: %s", fp8_format_name(fa), fp8_format_name(fb), m, n, k, why);
    fp8_require_device();
    LtCall c;
    lt_call_create_fp8(&c, fa, a_deq, fb, b_deq, bias, m, n, k, lda, ldb, ldd, fast_accum, epi, aux, ldaux);
    MatmulPlan key;
    memset(&key, 0, sizeof key);
    key.m = m; key.n = n; key.k = k; key.ta = 1; key.tb = 0; key.lda = lda; key.ldb = ldb; key.ldd = ldd;
    key.epi = (int)epi;
    key.has_bias = bias != NULL;
    key.beta_nonzero = beta != 0.0f;
    key.variant = 1 + (int)fa + 2 * (int)fb + 4 * (fast_accum != 0);
    MatmulPlan *plan = matmul_plan_choose(&key, &c, D, A, B, beta, modes->tune, s);
    if (!plan->ok && aux) {
        lt_call_destroy(&c);
        return 0;
    }
    if (!plan->ok)
        fatal("cuBLASLt offers no algorithm for the FP8 matmul %s x %s, m=%d n=%d k=%d%s%s on this GPU",
              fp8_format_name(fa), fp8_format_name(fb), m, n, k, bias ? ", bias" : "",
              fast_accum ? ", fast accumulation" : "");
    float alpha = 1.0f;
    cublasStatus_t st = cublasLtMatmul(g_cublaslt, c.desc, &alpha, A, c.la, B, c.lb, &beta, D, c.ld, D, c.ld,
                                       &plan->algo, g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, s);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
        // the heuristic's choice refused at the call (it launched nothing, so D is untouched):
        // the plan keeps the first of its other candidates that runs
        cublasLtMatmulHeuristicResult_t h[MATMUL_TUNE_CANDIDATES];
        int na = lt_call_heuristic(&c, h, MATMUL_TUNE_CANDIDATES, operand_alignment(A), operand_alignment(B),
                                   operand_alignment(D));
        int ran = -1;
        const cublasLtMatmulAlgo_t refused = plan->algo;
        for (int i = 0; i < na && st == CUBLAS_STATUS_NOT_SUPPORTED; i++) {
            if (memcmp(&h[i].algo, &refused, sizeof refused) == 0) continue;  // the one just refused
            st = cublasLtMatmul(g_cublaslt, c.desc, &alpha, A, c.la, B, c.lb, &beta, D, c.ld, D, c.ld, &h[i].algo,
                                g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, s);
            if (st == CUBLAS_STATUS_SUCCESS) { plan->algo = h[i].algo; ran = i; }
        }
        // Said once per plan (later calls find the candidate that ran; none running is the
        // fatal error below): it tells what cuBLASLt would not run. The plan is shared by every
        // layer of this shape, so the layers before this one ran the first choice in this step;
        // a run resumed later repeats that in its first step, so after a fallback a resume is
        // not bit-exact.
        if (ran >= 0) {
            g_fp8_fallbacks++;
            fprintf(stderr, "note: cuBLASLt refused its first choice for the FP8 matmul %s x %s, m=%d n=%d k=%d; "
                    "candidate %d of %d runs it\n", fp8_format_name(fa), fp8_format_name(fb), m, n, k, ran + 1, na);
        }
    }
    if (st != CUBLAS_STATUS_SUCCESS && aux) {  // an epilogue no candidate runs: the caller's kernel instead
        plan->ok = 0;
        lt_call_destroy(&c);
        return 0;
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        fatal("cuBLASLt refused the FP8 matmul %s x %s, m=%d n=%d k=%d lda=%d ldb=%d ldd=%d%s%s beta=%g "
              "(A, B, D aligned to %u, %u, %u bytes, the factors to %u, %u, the bias to %u): cuBLAS status %d",
              fp8_format_name(fa), fp8_format_name(fb), m, n, k, lda, ldb, ldd, bias ? ", bias" : "",
              fast_accum ? ", fast accumulation" : "", beta, operand_alignment(A), operand_alignment(B),
              operand_alignment(D), a_deq ? operand_alignment(a_deq) : 0, b_deq ? operand_alignment(b_deq) : 0,
              bias ? operand_alignment(bias) : 0, (int)st);
    lt_call_destroy(&c);
    return 1;
}

static void matmul_fp8(const MatmulModes *modes, floatX *D, const uint8_t *A, Fp8Format fa, const float *a_deq,
                       const uint8_t *B, Fp8Format fb, const float *b_deq, const floatX *bias, int m, int n, int k,
                       int lda, int ldb, int ldd, float beta, int fast_accum, cudaStream_t s) {
    matmul_fp8_epi(modes, D, A, fa, a_deq, B, fb, b_deq, bias, m, n, k, lda, ldb, ldd, beta, fast_accum,
                   bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, NULL, 0, s);
}
