// kernels/attention_plain.cuh: causal multi-head self-attention the plain way, the path of
// -f 0 and of the FP32 build (whose floatX the tensor-core flash kernels do not take): the
// scores and probabilities are materialised (B, NH, T, T), the products go through cuBLAS
// strided batched GEMMs, the causal softmax and its backward are kernels here.
//   forward:  att = softmax_causal(q k^T / sqrt(hs)); out = att v     (att kept for backward)
//   backward: from dout, att and qkv: dqkv (written)
// qkv is (B, T, 3C) holding q | k | v, each (NH, hs) per position; out is (B, T, C).
#pragma once
#include "common.cuh"
#include "matmul.cuh"

// The layout changes below move 16-byte chunks: hs must be a multiple of X128::size.
// idx enumerates (b, h, t, chunk) in (B, NH, T, hs) order.
__device__ __forceinline__ void head_coords(long idx, int T, int NH, int hs, int &b, int &h, int &t, int &i) {
    int chunks = hs / X128::size;
    i = (int)(idx % chunks) * X128::size;
    t = (int)((idx / chunks) % T);
    h = (int)((idx / ((long)chunks * T)) % NH);
    b = (int)(idx / ((long)chunks * T * NH));
}

// (B, T, 3, NH, hs) -> q, k, v each (B, NH, T, hs)
__global__ void attention_permute_kernel(floatX *q, floatX *k, floatX *v, const floatX *qkv, int B, int T, int NH,
                                         int hs) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)B * NH * T * (hs / X128::size)) return;
    int b, h, t, i;
    head_coords(idx, T, NH, hs, b, h, t, i);
    int C = NH * hs;
    const floatX *src = qkv + ((size_t)b * T + t) * 3 * C + h * hs + i;
    size_t dst = (size_t)idx * X128::size;
    store128(q + dst, load128(src));
    store128(k + dst, load128(src + C));
    store128(v + dst, load128(src + 2 * C));
}

// inverse: dq, dk, dv (B, NH, T, hs) -> dqkv (B, T, 3C)
__global__ void attention_unpermute_qkv_kernel(floatX *dqkv, const floatX *dq, const floatX *dk, const floatX *dv,
                                               int B, int T, int NH, int hs) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)B * NH * T * (hs / X128::size)) return;
    int b, h, t, i;
    head_coords(idx, T, NH, hs, b, h, t, i);
    int C = NH * hs;
    floatX *dst = dqkv + ((size_t)b * T + t) * 3 * C + h * hs + i;
    size_t src = (size_t)idx * X128::size;
    store128(dst, load128(dq + src));
    store128(dst + C, load128(dk + src));
    store128(dst + 2 * C, load128(dv + src));
}

// y (B, NH, T, hs) <-> out (B, T, C); dir 0: y -> out, 1: out -> y
__global__ void attention_heads_kernel(floatX *y, floatX *out, int B, int T, int NH, int hs, int dir) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)B * NH * T * (hs / X128::size)) return;
    int b, h, t, i;
    head_coords(idx, T, NH, hs, b, h, t, i);
    size_t o = ((size_t)b * T + t) * NH * hs + h * hs + i, yi = (size_t)idx * X128::size;
    if (dir == 0) store128(out + o, load128(y + yi));
    else store128(y + yi, load128(out + o));
}

// in place over rows of (B*NH*T, T): row t keeps softmax over columns 0..t, zero beyond
__global__ void softmax_causal_forward_kernel(floatX *att, int rows, int T) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int t = row % T;
    floatX *a = att + (size_t)row * T;
    float maxv = -INFINITY;
    for (int j = lane; j <= t; j += 32) maxv = fmaxf(maxv, to_float(a[j]));
    maxv = warp_max(maxv);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) sum += expf(to_float(a[j]) - maxv);
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += 32)
        a[j] = from_float<floatX>(j <= t ? expf(to_float(a[j]) - maxv) * inv : 0.0f);
}

// in place: datt -> d(scores) = att * (datt - sum_j att_j datt_j), zero above the diagonal
__global__ void softmax_causal_backward_kernel(floatX *datt, const floatX *att, int rows, int T) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int t = row % T;
    floatX *d = datt + (size_t)row * T;
    const floatX *a = att + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32) dot += to_float(a[j]) * to_float(d[j]);
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32)
        d[j] = from_float<floatX>(j <= t ? to_float(a[j]) * (to_float(d[j]) - dot) : 0.0f);
}

// The same two kernels for T <= 1024 with T a multiple of X128::size: each row is read
// once, 16 bytes at a time, only its causal part, and kept in registers.
#define SOFTMAX_VEC_CHUNKS (1024 / (32 * X128::size))  // 16-byte chunks per lane

__global__ void softmax_causal_forward_vec_kernel(floatX *att, int rows, int T) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int t = row % T;
    floatX *a = att + (size_t)row * T;
    float v[SOFTMAX_VEC_CHUNKS][X128::size];
    float maxv = -INFINITY;
#pragma unroll
    for (int i = 0; i < SOFTMAX_VEC_CHUNKS; i++) {
        int c = (lane + 32 * i) * X128::size;
        if (c <= t) {
            X128 x = load128(a + c);
#pragma unroll
            for (int k = 0; k < X128::size; k++) {
                v[i][k] = c + k <= t ? to_float(x[k]) : -INFINITY;
                maxv = fmaxf(maxv, v[i][k]);
            }
        } else {
#pragma unroll
            for (int k = 0; k < X128::size; k++) v[i][k] = -INFINITY;
        }
    }
    maxv = warp_max(maxv);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < SOFTMAX_VEC_CHUNKS; i++)
#pragma unroll
        for (int k = 0; k < X128::size; k++) {
            int c = (lane + 32 * i) * X128::size + k;
            v[i][k] = c <= t ? expf(v[i][k] - maxv) : 0.0f;
            sum += v[i][k];
        }
    float inv = 1.0f / warp_sum(sum);
#pragma unroll
    for (int i = 0; i < SOFTMAX_VEC_CHUNKS; i++) {
        int c = (lane + 32 * i) * X128::size;
        if (c < T) {
            X128 o;
#pragma unroll
            for (int k = 0; k < X128::size; k++) o[k] = from_float<floatX>(v[i][k] * inv);
            store128(a + c, o);
        }
    }
}

__global__ void softmax_causal_backward_vec_kernel(floatX *datt, const floatX *att, int rows, int T) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= rows) return;
    int t = row % T;
    floatX *d = datt + (size_t)row * T;
    const floatX *a = att + (size_t)row * T;
    float av[SOFTMAX_VEC_CHUNKS][X128::size], dv[SOFTMAX_VEC_CHUNKS][X128::size];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < SOFTMAX_VEC_CHUNKS; i++) {
        int c = (lane + 32 * i) * X128::size;
        if (c <= t) {
            X128 x = load128(a + c), y = load128(d + c);
#pragma unroll
            for (int k = 0; k < X128::size; k++) {
                bool in = c + k <= t;
                av[i][k] = in ? to_float(x[k]) : 0.0f;
                dv[i][k] = in ? to_float(y[k]) : 0.0f;
                dot += av[i][k] * dv[i][k];
            }
        } else {
#pragma unroll
            for (int k = 0; k < X128::size; k++) av[i][k] = dv[i][k] = 0.0f;
        }
    }
    dot = warp_sum(dot);
#pragma unroll
    for (int i = 0; i < SOFTMAX_VEC_CHUNKS; i++) {
        int c = (lane + 32 * i) * X128::size;
        if (c < T) {
            X128 o;
#pragma unroll
            for (int k = 0; k < X128::size; k++) o[k] = from_float<floatX>(av[i][k] * (dv[i][k] - dot));
            store128(d + c, o);
        }
    }
}

static int softmax_vec_ok(int T) { return T <= 1024 && T % X128::size == 0; }

// batched column-major GEMM over B*NH heads: C = alpha op(A) op(B) + beta C
static void batched_gemm(cublasComputeType_t compute, floatX *Cm, const floatX *A, const floatX *Bm, int m, int n,
                         int k, int ta, int tb, int lda, long sa, int ldb, long sb, int ldc, long sc, int batch,
                         float alpha) {
    float beta = 0.0f;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(g_cublas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            m, n, k, &alpha, A, CUBLAS_FLOATX, lda, sa, Bm, CUBLAS_FLOATX, ldb, sb,
                                            &beta, Cm, CUBLAS_FLOATX, ldc, sc, batch, compute,
                                            CUBLAS_GEMM_DEFAULT));
}

// scratch: 4 * B*T*C floatX (q, k, v, y)
static size_t attention_forward_scratch_elems(int B, int T, int C) { return (size_t)4 * B * T * C; }
// scratch: 8 * B*T*C floatX (q, k, v, dy, dq, dk, dv) + B*NH*T*T floatX (datt)
static size_t attention_backward_scratch_elems(int B, int T, int C, int NH) {
    return (size_t)8 * B * T * C + (size_t)B * NH * T * T;
}

// modes: the products' compute type (-f 1: TF32 in the fp32 build)
static void attention_forward(const MatmulModes *modes, floatX *out, floatX *att, const floatX *qkv, floatX *scratch,
                              int B, int T, int C, int NH, cudaStream_t s) {
    const cublasComputeType_t compute = matmul_compute_type(modes);
    int hs = C / NH;
    size_t n = (size_t)B * T * C;
    floatX *q = scratch, *k = q + n, *v = k + n, *y = v + n;
    attention_permute_kernel<<<ceil_div(n / X128::size, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    LAUNCH_CHECK();
    float scale = 1.0f / sqrtf((float)hs);
    long sq = (long)T * hs, sa = (long)T * T;
    // scores (row-major T x T per head) = q k^T * scale
    batched_gemm(compute, att, k, q, T, T, hs, 1, 0, hs, sq, hs, sq, T, sa, B * NH, scale);
    int rows = B * NH * T;
    if (softmax_vec_ok(T)) softmax_causal_forward_vec_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(att, rows, T);
    else softmax_causal_forward_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(att, rows, T);
    LAUNCH_CHECK();
    // y = att v
    batched_gemm(compute, y, v, att, hs, T, T, 0, 0, hs, sq, T, sa, hs, sq, B * NH, 1.0f);
    attention_heads_kernel<<<ceil_div(n / X128::size, 256), 256, 0, s>>>(y, out, B, T, NH, hs, 0);
    LAUNCH_CHECK();
}

static void attention_backward(const MatmulModes *modes, floatX *dqkv, const floatX *dout, const floatX *qkv,
                               const floatX *att, floatX *scratch, int B, int T, int C, int NH, cudaStream_t s) {
    const cublasComputeType_t compute = matmul_compute_type(modes);
    int hs = C / NH;
    size_t n = (size_t)B * T * C;
    floatX *q = scratch, *k = q + n, *v = k + n, *dy = v + n, *dq = dy + n, *dk = dq + n, *dv = dk + n;
    floatX *datt = dv + n;
    attention_permute_kernel<<<ceil_div(n / X128::size, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    LAUNCH_CHECK();
    attention_heads_kernel<<<ceil_div(n / X128::size, 256), 256, 0, s>>>(dy, (floatX *)dout, B, T, NH, hs, 1);
    LAUNCH_CHECK();
    float scale = 1.0f / sqrtf((float)hs);
    long sq = (long)T * hs, sa = (long)T * T;
    int batch = B * NH;
    // datt = dy v^T
    batched_gemm(compute, datt, v, dy, T, T, hs, 1, 0, hs, sq, hs, sq, T, sa, batch, 1.0f);
    // dv = att^T dy
    batched_gemm(compute, dv, dy, att, hs, T, T, 0, 1, hs, sq, T, sa, hs, sq, batch, 1.0f);
    int rows = batch * T;
    if (softmax_vec_ok(T)) softmax_causal_backward_vec_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(datt, att, rows, T);
    else softmax_causal_backward_kernel<<<ceil_div(rows, 8), 256, 0, s>>>(datt, att, rows, T);
    LAUNCH_CHECK();
    // dq = dscores k * scale; dk = dscores^T q * scale
    batched_gemm(compute, dq, k, datt, hs, T, T, 0, 0, hs, sq, T, sa, hs, sq, batch, scale);
    batched_gemm(compute, dk, q, datt, hs, T, T, 0, 1, hs, sq, T, sa, hs, sq, batch, scale);
    attention_unpermute_qkv_kernel<<<ceil_div(n / X128::size, 256), 256, 0, s>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    LAUNCH_CHECK();
}
