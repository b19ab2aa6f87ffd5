// kernels/layernorm.cuh: layernorm over C channels, optionally fused with the residual
// add that precedes it, and its backward.
// forward:  [res = a + b]; out = (res - mean) * rstd * w + bias; keeps mean, rstd (fp32)
// backward: dinp += dLN/dx (the residual stream's gradient accumulates here);
//           dw += sum_rows norm * dout, db += sum_rows dout, deterministic: each block
//           writes fp32 partial sums, a second kernel adds them up in a fixed order.
#pragma once
#include "common.cuh"

#define LN_EPS 1e-5f

// one warp per row; residual_out may alias nothing; when b == NULL the input is a alone
__global__ void layernorm_forward_kernel(floatX *residual_out, floatX *out, float *mean, float *rstd,
                                         const floatX *a, const floatX *b, const floatX *w, const floatX *bias,
                                         int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const floatX *x = a + (size_t)row * C;
    if (b) {
        // fused residual: write res = a + b, then normalise the stored (rounded) values
        const floatX *y = b + (size_t)row * C;
        floatX *r = residual_out + (size_t)row * C;
        for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
            X128 u = load128(x + c), v = load128(y + c), o;
            for (int k = 0; k < X128::size; k++) o[k] = from_float<floatX>(to_float(u[k]) + to_float(v[k]));
            store128(r + c, o);
        }
        x = r;  // this lane reads back only what it wrote itself
    }
    float sum = 0.0f;
    for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
        X128 u = load128(x + c);
        for (int k = 0; k < X128::size; k++) sum += to_float(u[k]);
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
        X128 u = load128(x + c);
        for (int k = 0; k < X128::size; k++) { float d = to_float(u[k]) - m; var += d * d; }
    }
    float s = rsqrtf(warp_sum(var) / C + LN_EPS);
    floatX *o = out + (size_t)row * C;
    for (int c = lane * X128::size; c < C; c += 32 * X128::size) {
        X128 u = load128(x + c), wv = load128(w + c), bv = load128(bias + c), r;
        for (int k = 0; k < X128::size; k++)
            r[k] = from_float<floatX>((to_float(u[k]) - m) * s * to_float(wv[k]) + to_float(bv[k]));
        store128(o + c, r);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// out = LN(inp)
static void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w,
                              const floatX *bias, int N, int C, cudaStream_t s) {
    const int threads = 256, rows_per_block = threads / 32;
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), threads, 0, s>>>(NULL, out, mean, rstd, inp, NULL, w, bias, N, C);
    LAUNCH_CHECK();
}

// residual_out = a + b; out = LN(residual_out)
static void fused_residual_layernorm_forward(floatX *residual_out, floatX *out, float *mean, float *rstd,
                                             const floatX *a, const floatX *b, const floatX *w, const floatX *bias,
                                             int N, int C, cudaStream_t s) {
    const int threads = 256, rows_per_block = threads / 32;
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), threads, 0, s>>>(residual_out, out, mean, rstd, a, b, w, bias, N, C);
    LAUNCH_CHECK();
}

// plain residual add (used when no layernorm follows)
__global__ void residual_forward_kernel(floatX *out, const floatX *a, const floatX *b, long n) {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * X128::size;
    if (i >= n) return;
    X128 u = load128(a + i), v = load128(b + i), o;
    for (int k = 0; k < X128::size; k++) o[k] = from_float<floatX>(to_float(u[k]) + to_float(v[k]));
    store128(out + i, o);
}

// ---------------------------------------------------------------------------
// backward

#define LN_BWD_WARPS 4

// dynamic shared memory: LN_BWD_WARPS * 2C floats (per-warp dw, db accumulators)
__global__ void layernorm_backward_kernel(floatX *dinp, float *partials, const floatX *dout, const floatX *inp,
                                          const floatX *w, const float *mean, const float *rstd, int N, int C) {
    extern __shared__ float smem[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
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
                acc_w[c + k] += n * dd;
                acc_b[c + k] += dd;
            }
            store128(dx + c, g);
        }
    }
    __syncthreads();
    // combine the warps in a fixed order, one partial row per block
    float *out = partials + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        float v = 0.0f;
        for (int k = 0; k < LN_BWD_WARPS; k++) v += smem[(size_t)k * 2 * C + c];
        out[c] = v;
    }
}

// dw[c] += sum over blocks of partials[blk][c], db likewise (fixed order)
__global__ void layernorm_param_grad_kernel(floatX *dw, floatX *db, const float *partials, int nblocks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= 2 * C) return;
    float v = 0.0f;
    for (int k = 0; k < nblocks; k++) v += partials[(size_t)k * 2 * C + c];
    floatX *dst = c < C ? dw + c : db + (c - C);
    *dst = from_float<floatX>(to_float(*dst) + v);
}

// blocks used by the backward, and the fp32 scratch it needs (floats)
static int layernorm_backward_blocks(int N, int num_sms) {
    int want = ceil_div(N, LN_BWD_WARPS * 4);  // at least 4 rows per warp
    int cap = num_sms * 4;
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
    layernorm_param_grad_kernel<<<ceil_div(2 * C, 256), 256, 0, s>>>(dw, db, scratch, blocks, C);
    LAUNCH_CHECK();
}
