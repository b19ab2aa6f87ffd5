// kernels/encoder.cuh: token + position embedding, its kernels and their launchers.
// forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
// backward: dwpe[t,:] += sum_b dout[b,t,:]; dwte[v,:] += sum over positions holding v.
// The backward is deterministic with no atomics: it takes the batch's positions grouped
// by token id (buckets; gpu/batch.cuh builds them on the host while the batch is still
// there), and one thread block sums one token's positions in a fixed order.
#pragma once
#include "common.cuh"

__global__ void encoder_forward_kernel(floatX *out, const int *inp, const floatX *wte, const floatX *wpe,
                                       int B, int T, int C) {
    int vecs = C / X128::size;
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)B * T * vecs) return;
    int bt = (int)(idx / vecs), c = (int)(idx % vecs) * X128::size;
    int t = bt % T;
    X128 a = load128(wte + (size_t)inp[bt] * C + c), p = load128(wpe + (size_t)t * C + c), o;
    for (int k = 0; k < X128::size; k++) o[k] = from_float<floatX>(to_float(a[k]) + to_float(p[k]));
    store128(out + (size_t)bt * C + c, o);
}

static void encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T, int C,
                            cudaStream_t s) {
    long n = (long)B * T * (C / X128::size);
    encoder_forward_kernel<<<ceil_div(n, 256), 256, 0, s>>>(out, inp, wte, wpe, B, T, C);
    LAUNCH_CHECK();
}

// grid (nb, ceil(C / (32 * X128::size))): block (i, j) sums bucket i over channel tile j.
// With nb_dev, grid.x is an upper bound and the count is *nb_dev (a CUDA graph replays one
// launch for batches of any bucket count): the blocks beyond it return at once.
// Token frequencies are skewed (a newline or a comma can hold thousands of a batch's
// positions), so a block's ENC_BWD_GROUPS warps walk interleaved positions of the bucket
// and are then added in a fixed order: the longest bucket, not the average, sets the time.
#define ENC_BWD_GROUPS 16

__global__ void __launch_bounds__(32 * ENC_BWD_GROUPS)
encoder_backward_wte_kernel(floatX *dwte, const floatX *dout, const int *positions, const int *bucket_token,
                            const int *bucket_start, const int *nb_dev, int C) {
    constexpr int V = X128::size, TILE = 32 * V;
    __shared__ float part[ENC_BWD_GROUPS][TILE];
    int b = blockIdx.x;
    if (nb_dev && b >= *nb_dev) return;  // the whole block: before any __syncthreads
    int c = blockIdx.y * TILE + threadIdx.x * V;
    float acc[V];
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    if (c < C) {
        int p1 = bucket_start[b + 1];
#pragma unroll 4
        for (int p = bucket_start[b] + threadIdx.y; p < p1; p += ENC_BWD_GROUPS) {
            X128 d = load128(dout + (size_t)positions[p] * C + c);
            for (int k = 0; k < V; k++) acc[k] += to_float(d[k]);
        }
    }
    for (int k = 0; k < V; k++) part[threadIdx.y][threadIdx.x * V + k] = acc[k];
    __syncthreads();
    for (int t = threadIdx.y * 32 + threadIdx.x; t < TILE; t += 32 * ENC_BWD_GROUPS) {
        int col = blockIdx.y * TILE + t;
        if (col >= C) continue;
        float v = 0.0f;
        for (int g = 0; g < ENC_BWD_GROUPS; g++) v += part[g][t];
        floatX *w = dwte + (size_t)bucket_token[b] * C + col;
        *w = from_float<floatX>(to_float(*w) + v);
    }
}

__global__ void encoder_backward_wpe_kernel(floatX *dwpe, const floatX *dout, int B, int T, int C) {
    int vecs = C / X128::size;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * vecs) return;
    int t = idx / vecs, c = (idx % vecs) * X128::size;
    float acc[X128::size];
    for (int k = 0; k < X128::size; k++) acc[k] = 0.0f;
    for (int b = 0; b < B; b++) {
        X128 d = load128(dout + ((size_t)b * T + t) * C + c);
        for (int k = 0; k < X128::size; k++) acc[k] += to_float(d[k]);
    }
    X128 g = load128(dwpe + (size_t)t * C + c);
    for (int k = 0; k < X128::size; k++) g[k] = from_float<floatX>(to_float(g[k]) + acc[k]);
    store128(dwpe + (size_t)t * C + c, g);
}

// nb: number of buckets (host value), or with nb_dev (the count on the device) an upper
// bound; positions/bucket_* are device copies of the host arrays
static void encoder_backward(floatX *dwte, floatX *dwpe, const floatX *dout, const int *positions,
                             const int *bucket_token, const int *bucket_start, int nb, const int *nb_dev, int B,
                             int T, int C, cudaStream_t s) {
    dim3 grid(nb, ceil_div(C, 32 * X128::size));
    encoder_backward_wte_kernel<<<grid, dim3(32, ENC_BWD_GROUPS), 0, s>>>(dwte, dout, positions, bucket_token,
                                                                          bucket_start, nb_dev, C);
    LAUNCH_CHECK();
    encoder_backward_wpe_kernel<<<ceil_div((long)T * (C / X128::size), 256), 256, 0, s>>>(dwpe, dout, B, T, C);
    LAUNCH_CHECK();
}
