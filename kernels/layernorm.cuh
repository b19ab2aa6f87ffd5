// kernels/layernorm.cuh: layernorm over C channels, optionally fused with the residual
// add that precedes it, and its backward.
// forward:  [res = a + b]; out = (res - mean) * rstd * w + bias; keeps mean, rstd (fp32)
// backward: dinp += dLN/dx (the residual stream's gradient accumulates here);
//           dw += sum_rows norm * dout, db += sum_rows dout, deterministic: each block
//           writes fp32 partial sums, a second kernel adds them up in a fixed order.
#pragma once
#include "common.cuh"

#define LN_EPS 1e-5f

// One warp per row. The row (after the residual add) is staged in shared memory, so
// each input is read from device memory once although the mean, the variance and the
// output each take a pass; a lane reads back only the vectors it staged, so no barrier.
// residual_out may alias nothing; when b == NULL the input is a alone.
// dynamic shared memory: (blockDim.x / 32) * C floatX
__global__ void layernorm_forward_kernel(floatX *residual_out, floatX *out, float *mean, float *rstd,
                                         const floatX *a, const floatX *b, const floatX *w, const floatX *bias,
                                         int N, int C) {
    extern __shared__ X128 ln_rows[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int row = blockIdx.x * (blockDim.x / 32) + warp;
    if (row >= N) return;
    X128 *xs = ln_rows + (size_t)warp * (C / X128::size);
    const floatX *x = a + (size_t)row * C;
    const floatX *y = b ? b + (size_t)row * C : NULL;
    floatX *r = b ? residual_out + (size_t)row * C : NULL;
    float sum = 0.0f;
    for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
        X128 u = load128cs(x + c);
        if (y) {
            // fused residual: res = a + b, rounded to floatX, is what gets normalised
            X128 v = load128cs(y + c);
            for (int k = 0; k < X128::size; k++) u[k] = from_float<floatX>(to_float(u[k]) + to_float(v[k]));
            store128(r + c, u);
        }
        xs[c / X128::size] = u;
        for (int k = 0; k < X128::size; k++) sum += to_float(u[k]);
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
        X128 u = xs[c / X128::size];
        for (int k = 0; k < X128::size; k++) { float d = to_float(u[k]) - m; var += d * d; }
    }
    float s = rsqrtf(warp_sum(var) / C + LN_EPS);
    floatX *o = out + (size_t)row * C;
    for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
        X128 u = xs[c / X128::size], wv = load128(w + c), bv = load128(bias + c), res;
        for (int k = 0; k < X128::size; k++)
            res[k] = from_float<floatX>((to_float(u[k]) - m) * s * to_float(wv[k]) + to_float(bv[k]));
        store128(o + c, res);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

#define LN_FWD_THREADS 256

static void layernorm_forward_launch(floatX *residual_out, floatX *out, float *mean, float *rstd, const floatX *a,
                                     const floatX *b, const floatX *w, const floatX *bias, int N, int C, cudaStream_t s) {
    const int rows_per_block = LN_FWD_THREADS / 32;
    size_t smem = (size_t)rows_per_block * C * sizeof(floatX);
    static size_t smem_set = 0;
    if (smem > 48 * 1024 && smem > smem_set) {
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), LN_FWD_THREADS, smem, s>>>(residual_out, out, mean, rstd, a,
                                                                                      b, w, bias, N, C);
    LAUNCH_CHECK();
}

// out = LN(inp)
static void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w,
                              const floatX *bias, int N, int C, cudaStream_t s) {
    layernorm_forward_launch(NULL, out, mean, rstd, inp, NULL, w, bias, N, C, s);
}

// residual_out = a + b; out = LN(residual_out)
static void fused_residual_layernorm_forward(floatX *residual_out, floatX *out, float *mean, float *rstd,
                                             const floatX *a, const floatX *b, const floatX *w, const floatX *bias,
                                             int N, int C, cudaStream_t s) {
    layernorm_forward_launch(residual_out, out, mean, rstd, a, b, w, bias, N, C, s);
}

// ---------------------------------------------------------------------------
// backward

#define LN_BWD_WARPS 4

// dynamic shared memory: LN_BWD_WARPS * 2C floats (per-warp dw, db accumulators). They
// are stored component-major (element k of vector j at k * C/X128::size + j), so the 32
// lanes of a warp, which own consecutive vectors, touch consecutive banks.
__global__ void layernorm_backward_kernel(floatX *dinp, float *partials, const floatX *dout, const floatX *inp,
                                          const floatX *w, const float *mean, const float *rstd, int N, int C) {
    extern __shared__ float smem[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int nvec = C / X128::size;
    float *acc_w = smem + (size_t)warp * 2 * C, *acc_b = acc_w + C;
    for (int c = lane; c < 2 * C; c += 32) acc_w[c] = 0.0f;
    __syncwarp();
    int warps_total = gridDim.x * LN_BWD_WARPS;
    for (int row = blockIdx.x * LN_BWD_WARPS + warp; row < N; row += warps_total) {
        const floatX *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
        float m = mean[row], s = rstd[row];
        float sum_dn = 0.0f, sum_dn_n = 0.0f;
        for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
            X128 xv = load128(x + c), dv = load128(d + c), wv = load128(w + c);
            for (int k = 0; k < X128::size; k++) {
                float n = (to_float(xv[k]) - m) * s, dn = to_float(wv[k]) * to_float(dv[k]);
                sum_dn += dn;
                sum_dn_n += dn * n;
            }
        }
        sum_dn = warp_sum(sum_dn) / C;
        sum_dn_n = warp_sum(sum_dn_n) / C;
        floatX *dx = dinp + (size_t)row * C;
        for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
            X128 xv = load128(x + c), dv = load128(d + c), wv = load128(w + c), g = load128(dx + c);
            for (int k = 0; k < X128::size; k++) {
                float n = (to_float(xv[k]) - m) * s, dd = to_float(dv[k]), dn = to_float(wv[k]) * dd;
                g[k] = from_float<floatX>(to_float(g[k]) + (dn - sum_dn - n * sum_dn_n) * s);
                acc_w[k * nvec + c / X128::size] += n * dd;
                acc_b[k * nvec + c / X128::size] += dd;
            }
            store128(dx + c, g);
        }
    }
    __syncthreads();
    // combine the warps in a fixed order, one partial row per block
    float *out = partials + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        int half = c < C ? 0 : C, cc = c - half;  // cc: channel; half: dw's or db's accumulator
        int idx = half + (cc % X128::size) * nvec + cc / X128::size;
        float v = 0.0f;
        for (int k = 0; k < LN_BWD_WARPS; k++) v += smem[(size_t)k * 2 * C + idx];
        out[c] = v;
    }
}

// blocks used by the backward, and the fp32 scratch it needs (floats)
// (8 blocks of 4 warps per SM: each warp's row is a chain of dependent loads and shuffles,
// so occupancy, not bandwidth, limits it; 4 blocks per SM measured 7.2 ms of layernorm)
static int layernorm_backward_blocks(int N, int num_sms) {
    int want = ceil_div(N, LN_BWD_WARPS * 4);  // at least 4 rows per warp
    int cap = num_sms * 8;
    return want < cap ? (want > 0 ? want : 1) : cap;
}
static size_t layernorm_backward_scratch_floats(int N, int C, int num_sms) {
    return (size_t)layernorm_backward_blocks(N, num_sms) * 2 * C;
}

static void layernorm_backward(floatX *dinp, floatX *dw, floatX *db, float *scratch, const floatX *dout,
                               const floatX *inp, const floatX *w, const float *mean, const float *rstd,
                               int N, int C, int num_sms, cudaStream_t s) {
    int blocks = layernorm_backward_blocks(N, num_sms);
    size_t shmem = (size_t)LN_BWD_WARPS * 2 * C * sizeof(float);
    static size_t shmem_set = 0;
    if (shmem > 48 * 1024 && shmem > shmem_set) {
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem));
        shmem_set = shmem;
    }
    layernorm_backward_kernel<<<blocks, LN_BWD_WARPS * 32, shmem, s>>>(dinp, scratch, dout, inp, w, mean, rstd, N, C);
    LAUNCH_CHECK();
    add_partial_sums(dw, db, C, scratch, blocks, 2 * C, s);  // dw: columns [0, C), db: [C, 2C)
}
