// kernels/attention_decode.cuh: attention for one new position against a KV cache, the
// step of generation (gpu/generate.cuh): the query of position n-1 over the keys and values
// of positions 0..n-1, each head in one block. fp32 arithmetic on floatX inputs, as the
// training kernels do; any head size up to 256.
#pragma once
#include "common.cuh"

#define DECODE_THREADS 256
#define DECODE_MAX_HS 256

// q: the head's part of the position's qkv row; k, v: (n, C) rows of the cache. Shared
// memory: the query (hs floats), the n scores, then each warp's partial output (hs floats).
__global__ void attention_decode_kernel(floatX *out, const floatX *q, const floatX *k, const floatX *v, int n, int C,
                                        int hs, float scale) {
    extern __shared__ float smem[];
    const int h = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    float *qs = smem, *score = smem + hs, *part = score + n;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) qs[i] = to_float(q[h * hs + i]);
    __syncthreads();
    // scores: a warp per position, its lanes across the head's dimensions
    for (int t = warp; t < n; t += nwarps) {
        const floatX *kt = k + (size_t)t * C + h * hs;
        float s = 0.0f;
        for (int i = lane; i < hs; i += 32) s += qs[i] * to_float(kt[i]);
        s = warp_sum(s);
        if (lane == 0) score[t] = s * scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int t = threadIdx.x; t < n; t += blockDim.x) m = fmaxf(m, score[t]);
    m = block_max(m);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        float e = expf(score[t] - m);
        score[t] = e;
        sum += e;
    }
    sum = block_sum(sum);  // (its barriers also make every score visible below)
    // the weighted values: a warp per position again, each lane holding up to 8 dimensions
    float acc[DECODE_MAX_HS / 32];
    for (int j = 0; j < DECODE_MAX_HS / 32; j++) acc[j] = 0.0f;
    for (int t = warp; t < n; t += nwarps) {
        const floatX *vt = v + (size_t)t * C + h * hs;
        const float p = score[t];
        for (int j = 0; j * 32 + lane < hs; j++) acc[j] += p * to_float(vt[j * 32 + lane]);
    }
    for (int j = 0; j * 32 + lane < hs; j++) part[warp * hs + j * 32 + lane] = acc[j];
    __syncthreads();
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < nwarps; w++) o += part[w * hs + i];
        out[h * hs + i] = from_float<floatX>(o / sum);
    }
}

// out (C) = attention of q (the first C of a position's qkv) over k, v (n rows of C each)
static void attention_decode(floatX *out, const floatX *q, const floatX *k, const floatX *v, int n, int C, int NH,
                             cudaStream_t s) {
    const int hs = C / NH;
    if (hs > DECODE_MAX_HS) fatal("generation: head size %d is above the %d the decode attention handles", hs,
                                  DECODE_MAX_HS);
    const size_t smem = ((size_t)hs + n + (size_t)(DECODE_THREADS / 32) * hs) * sizeof(float);
    static size_t smem_allowed = 48 * 1024;
    if (smem > smem_allowed) {
        int dev, optin;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        if (smem > (size_t)optin)
            fatal("generation: a text of %d positions needs %zu bytes of shared memory in the decode attention, more "
                  "than this GPU's %d", n, smem, optin);
        CUDA_CHECK(cudaFuncSetAttribute(attention_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
        smem_allowed = (size_t)optin;
    }
    attention_decode_kernel<<<NH, DECODE_THREADS, smem, s>>>(out, q, k, v, n, C, hs, 1.0f / sqrtf((float)hs));
    LAUNCH_CHECK();
}
