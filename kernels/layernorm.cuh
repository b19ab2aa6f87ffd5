// kernels/layernorm.cuh: layernorm over C channels, optionally fused with the residual
// add that precedes it, and its backward.
// forward:  [res = a + b]; out = (res - mean) * rstd * w + bias; keeps mean, rstd (fp32)
// backward: dinp += dLN/dx (the residual stream's gradient accumulates here);
//           dw += sum_rows norm * dout, db += sum_rows dout, [dsum += sum_rows dinp],
//           deterministic: each block writes fp32 partial sums, a second kernel adds
//           them up in a fixed order.
#pragma once
#include "common.cuh"

#define LN_EPS 1e-5f

// One warp per row, whose vectors (after the residual add) are read from device memory once
// although the mean, the variance and the output each take a pass over them: in registers
// when VPL > 0 (C == 32 * VPL * X128::size: every lane holds VPL vectors, and issues all of
// its loads before the first add), else staged in shared memory, where a lane reads back
// only the vectors it staged, so no barrier.
// residual_out may alias nothing; when b == NULL the input is a alone.
// dynamic shared memory (VPL == 0): (blockDim.x / 32) * C floatX
template <int VPL>
__global__ void layernorm_forward_kernel(floatX *residual_out, floatX *out, float *mean, float *rstd,
                                         const floatX *a, const floatX *b, const floatX *w, const floatX *bias,
                                         int N, int C) {
    constexpr int V = X128::size;
    extern __shared__ X128 ln_rows[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int row = blockIdx.x * (blockDim.x / 32) + warp;
    if (row >= N) return;
    X128 *xs = ln_rows + (size_t)warp * (C / V);
    X128 reg[VPL > 0 ? VPL : 1];
    // this lane's vectors are lane, lane + 32, ... of the row: nv of them
    const int nv = VPL > 0 ? VPL : (C / V - lane + 31) / 32;
    auto at = [&](int i) -> X128 & {
        if constexpr (VPL > 0) return reg[i];
        else return xs[lane + 32 * i];
    };
    const floatX *x = a + (size_t)row * C;
    const floatX *y = b ? b + (size_t)row * C : NULL;
    floatX *r = b ? residual_out + (size_t)row * C : NULL;
    float sum = 0.0f;
    if constexpr (VPL > 0) {
        X128 yv[VPL];
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            reg[i] = load128cs(x + (lane + 32 * i) * V);
            if (y) yv[i] = load128cs(y + (lane + 32 * i) * V);
        }
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            if (y) {  // fused residual: res = a + b, rounded to floatX, is what gets normalised
                for (int k = 0; k < V; k++) reg[i][k] = from_float<floatX>(to_float(reg[i][k]) + to_float(yv[i][k]));
                store128(r + (lane + 32 * i) * V, reg[i]);
            }
            for (int k = 0; k < V; k++) sum += to_float(reg[i][k]);
        }
    } else {
        for (int i = 0; i < nv; i++) {
            const int c = (lane + 32 * i) * V;
            X128 u = load128cs(x + c);
            if (y) {
                X128 v = load128cs(y + c);
                for (int k = 0; k < V; k++) u[k] = from_float<floatX>(to_float(u[k]) + to_float(v[k]));
                store128(r + c, u);
            }
            at(i) = u;
            for (int k = 0; k < V; k++) sum += to_float(u[k]);
        }
    }
    float m = warp_sum(sum) / C;
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < nv; i++) {
        const X128 u = at(i);
        for (int k = 0; k < V; k++) { float d = to_float(u[k]) - m; var += d * d; }
    }
    float s = rsqrtf(warp_sum(var) / C + LN_EPS);
    floatX *o = out + (size_t)row * C;
#pragma unroll
    for (int i = 0; i < nv; i++) {
        const int c = (lane + 32 * i) * V;
        X128 u = at(i), wv = load128(w + c), bv = load128(bias + c), res;
        for (int k = 0; k < V; k++)
            res[k] = from_float<floatX>((to_float(u[k]) - m) * s * to_float(wv[k]) + to_float(bv[k]));
        store128(o + c, res);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

#define LN_FWD_THREADS 256

template <int VPL>
static void layernorm_forward_cfg(floatX *residual_out, floatX *out, float *mean, float *rstd, const floatX *a,
                                  const floatX *b, const floatX *w, const floatX *bias, int N, int C, cudaStream_t s) {
    const int rows_per_block = LN_FWD_THREADS / 32;
    size_t smem = VPL > 0 ? 0 : (size_t)rows_per_block * C * sizeof(floatX);
    static size_t smem_set = 0;
    const DeviceCaps *caps = device_caps();
    if (caps && smem > (size_t)caps->smem_optin)  // (C > 6336 in bf16, 3168 in fp32 on sm_86/sm_89)
        fatal("layernorm forward: C=%d needs %zu bytes of shared memory per block; this GPU (compute capability "
              "%d.%d) allows %d", C, smem, caps->cc / 10, caps->cc % 10, caps->smem_optin);
    if (smem > 48 * 1024 && smem > smem_set) {
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_forward_kernel<VPL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        smem_set = smem;
    }
    layernorm_forward_kernel<VPL><<<ceil_div(N, rows_per_block), LN_FWD_THREADS, smem, s>>>(residual_out, out, mean,
                                                                                            rstd, a, b, w, bias, N, C);
    LAUNCH_CHECK();
}

// the row in registers for GPT-2's widths up to 1280 (C = 768, 1024, 1280), else in shared memory
static void layernorm_forward_launch(floatX *residual_out, floatX *out, float *mean, float *rstd, const floatX *a,
                                     const floatX *b, const floatX *w, const floatX *bias, int N, int C,
                                     cudaStream_t s) {
    const int per_lane = C % (32 * X128::size) == 0 ? C / (32 * X128::size) : 0;
    if (per_lane == 3) layernorm_forward_cfg<3>(residual_out, out, mean, rstd, a, b, w, bias, N, C, s);
    else if (per_lane == 4) layernorm_forward_cfg<4>(residual_out, out, mean, rstd, a, b, w, bias, N, C, s);
    else if (per_lane == 5) layernorm_forward_cfg<5>(residual_out, out, mean, rstd, a, b, w, bias, N, C, s);
    else layernorm_forward_cfg<0>(residual_out, out, mean, rstd, a, b, w, bias, N, C, s);
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

// A block works on LN_BWD_ROWS rows at a time, thread t on the 16-byte vector t of each
// (blockDim: C / X128::size threads rounded up to whole warps), so the per-channel sums
// (dw, db, and dsum) stay in the thread's registers over all of the block's rows; the two
// per-row reductions go through shared memory, double-buffered: one barrier per row group.
// The next row group's inputs (inp, dout, and dinp, which is read, added to and written)
// are copied into shared memory (cp.async) while this one is worked on: each thread copies
// and reads back only its own vectors, so that needs no barrier. (Loading them into
// registers at the top of each group left the memory idle during the reductions: 2.5 TB/s.)
// Each block writes one fp32 partial row [dw | db | dsum]; add_partial_sums adds them up
// in a fixed order: deterministic. dsum (with_sum): column sums of the updated dinp, the
// bias gradient of the linear layer that takes dinp as its output gradient (attproj,
// fcproj), which would otherwise need a pass of its own over dinp.
// (The previous form, a warp per row with per-warp dw/db accumulators in shared memory,
// had no room for a third accumulator at 8 blocks per SM.)
// dynamic shared memory: 2 buffers x LN_BWD_ROWS rows x 3 tensors x blockDim.x X128
#define LN_BWD_ROWS 2

__global__ void layernorm_backward_kernel(floatX *dinp, float *partials, const floatX *dout, const floatX *inp,
                                          const floatX *w, const float *mean, const float *rstd, int N, int C,
                                          int with_sum) {
    constexpr int V = X128::size, R = LN_BWD_ROWS;
    extern __shared__ X128 ln_stage[];
    __shared__ float red[2][R][32][2];
    const int t = threadIdx.x, lane = t % 32, warp = t / 32, nwarps = blockDim.x / 32, nt = blockDim.x;
    const bool owns = t < C / V;
    const int c = t * V;
    // this thread's slot for tensor k (0 inp, 1 dout, 2 dinp) of row r in buffer b
    auto slot = [&](int b, int r, int k) { return ln_stage + ((b * R + r) * 3 + k) * nt + t; };
    auto stage_rows = [&](int row0, int b) {
        for (int r = 0; r < R; r++) {
            const int row = row0 + r;
            if (owns && row < N) {
                cp_async16(slot(b, r, 0), inp + (size_t)row * C + c);
                cp_async16(slot(b, r, 1), dout + (size_t)row * C + c);
                cp_async16(slot(b, r, 2), dinp + (size_t)row * C + c);
            }
        }
        cp_async_commit();
    };
    float aw[V], ab[V], ar[V];
    for (int k = 0; k < V; k++) aw[k] = ab[k] = ar[k] = 0.0f;
    const X128 wv = owns ? load128(w + c) : X128::zeros();
    const int step = gridDim.x * R;
    int buf = 0;
    stage_rows(blockIdx.x * R, 0);
    for (int row0 = blockIdx.x * R; row0 < N; row0 += step, buf ^= 1) {
        stage_rows(row0 + step, buf ^ 1);  // (an empty group past the end)
        float m[R], s[R];
        for (int r = 0; r < R; r++) {
            m[r] = row0 + r < N ? mean[row0 + r] : 0.0f;
            s[r] = row0 + r < N ? rstd[row0 + r] : 0.0f;
        }
        cp_async_wait<1>();  // this group's rows landed
        for (int r = 0; r < R; r++) {
            float sum_dn = 0.0f, sum_dn_n = 0.0f;
            if (owns && row0 + r < N) {
                const X128 xv = *slot(buf, r, 0), dv = *slot(buf, r, 1);
                for (int k = 0; k < V; k++) {
                    float n = (to_float(xv[k]) - m[r]) * s[r], dn = to_float(wv[k]) * to_float(dv[k]);
                    sum_dn += dn;
                    sum_dn_n += dn * n;
                }
            }
            sum_dn = warp_sum(sum_dn);
            sum_dn_n = warp_sum(sum_dn_n);
            if (lane == 0) { red[buf][r][warp][0] = sum_dn; red[buf][r][warp][1] = sum_dn_n; }
        }
        __syncthreads();  // (the other buffer's readers are past this barrier's twin: no second one)
        for (int r = 0; r < R; r++) {
            const int row = row0 + r;
            if (!owns || row >= N) continue;
            float sum_dn = 0.0f, sum_dn_n = 0.0f;
            for (int i = 0; i < nwarps; i++) { sum_dn += red[buf][r][i][0]; sum_dn_n += red[buf][r][i][1]; }
            sum_dn /= C;
            sum_dn_n /= C;
            const X128 xv = *slot(buf, r, 0), dv = *slot(buf, r, 1);
            X128 g = *slot(buf, r, 2);
            for (int k = 0; k < V; k++) {
                float n = (to_float(xv[k]) - m[r]) * s[r], dd = to_float(dv[k]), dn = to_float(wv[k]) * dd;
                g[k] = from_float<floatX>(to_float(g[k]) + (dn - sum_dn - n * sum_dn_n) * s[r]);
                aw[k] += n * dd;
                ab[k] += dd;
                ar[k] += to_float(g[k]);  // the rounded value: what a pass over dinp would read
            }
            store128(dinp + (size_t)row * C + c, g);
        }
    }
    cp_async_wait<0>();
    if (!owns) return;
    const int M = with_sum ? 3 * C : 2 * C;
    float *out = partials + (size_t)blockIdx.x * M + c;
    for (int k = 0; k < V; k++) {
        out[k] = aw[k];
        out[C + k] = ab[k];
        if (with_sum) out[2 * C + k] = ar[k];
    }
}

// the largest C the backward takes: one thread per 16-byte vector, at most 1024 threads a
// block, whose staged rows (and the kernel's red array) fit this GPU's shared memory: on
// sm_86 and sm_89 C up to 4096 in bf16, 2048 in fp32
static int layernorm_backward_max_channels(void) {
    int threads = 1024;
    const DeviceCaps *caps = device_caps();
    if (caps) {
        const int fit = (caps->smem_optin - (int)sizeof(float[2][LN_BWD_ROWS][32][2])) /  // (red)
                        (2 * LN_BWD_ROWS * 3 * 16) / 32 * 32;
        if (fit < threads) threads = fit;
    }
    return threads * X128::size;
}
static void layernorm_backward_check(int C) {
    if (C % X128::size != 0 || C > layernorm_backward_max_channels())
        fatal("layernorm backward: C=%d; this GPU and build take a multiple of %d up to %d", C, X128::size,
              layernorm_backward_max_channels());
}

// threads of a backward block, blocks used, and the fp32 scratch it needs (floats): as many
// blocks as fit on the SMs at once (registers bound them: 7 per SM at C = 768 in bf16), at
// most 8 per SM (each block's partial row is 3C floats of traffic)
static int layernorm_backward_threads(int C) { return ceil_div(C / X128::size, 32) * 32; }
static size_t layernorm_backward_smem(int C) {
    return (size_t)2 * LN_BWD_ROWS * 3 * layernorm_backward_threads(C) * 16;
}
static int layernorm_backward_blocks(int N, int C, int num_sms) {
    static int per_sm = 0, for_threads = -1;
    const int threads = layernorm_backward_threads(C);
    if (threads != for_threads) {
        layernorm_backward_check(C);
        size_t smem = layernorm_backward_smem(C);
        if (smem > 48 * 1024)
            CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, layernorm_backward_kernel, threads, smem));
        for_threads = threads;
    }
    int want = ceil_div(N, LN_BWD_ROWS * 4);  // at least 4 row groups per block
    int cap = num_sms * (per_sm < 1 ? 1 : per_sm > 8 ? 8 : per_sm);
    return want < cap ? (want > 0 ? want : 1) : cap;
}
static size_t layernorm_backward_scratch_floats(int N, int C, int num_sms) {
    return (size_t)layernorm_backward_blocks(N, C, num_sms) * 3 * C;
}
// the same without a GPU (memory planning): at most 8 blocks per SM
static size_t layernorm_backward_scratch_bound(int N, int C, int num_sms) {
    int want = ceil_div(N, LN_BWD_ROWS * 4);
    return (size_t)(want < num_sms * 8 ? (want > 0 ? want : 1) : num_sms * 8) * 3 * C;
}
// dinp += dLN/dinp; dw, db += the layernorm's parameter gradients; dsum (may be NULL) +=
// the column sums of the updated dinp (the bias gradient of the layer dinp feeds)
static void layernorm_backward(floatX *dinp, floatX *dw, floatX *db, floatX *dsum, float *scratch, const floatX *dout,
                               const floatX *inp, const floatX *w, const float *mean, const float *rstd,
                               int N, int C, int num_sms, cudaStream_t s) {
    layernorm_backward_check(C);
    int blocks = layernorm_backward_blocks(N, C, num_sms), threads = layernorm_backward_threads(C);
    layernorm_backward_kernel<<<blocks, threads, layernorm_backward_smem(C), s>>>(dinp, scratch, dout, inp, w, mean,
                                                                                  rstd, N, C, dsum != NULL);
    LAUNCH_CHECK();
    add_partial_sums(dw, db, dsum, C, scratch, blocks, dsum ? 3 * C : 2 * C, s);
}
