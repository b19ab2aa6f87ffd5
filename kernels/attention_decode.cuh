// kernels/attention_decode.cuh: attention for the step of generation (gpu/generate.cuh): each
// row's query at its position pos[b] over the keys and values of positions 0..pos[b] in the
// KV cache, the new position's key and value appended to the cache as they are read from the
// step's qkv rows. fp32 arithmetic on floatX inputs, as the training kernels do; head sizes
// that are multiples of 8 up to 256.
// The positions come from device memory, so one launch (one node of the step's CUDA graph)
// serves every length: the grid covers the whole context and the blocks past a row's length
// return at once. A long text is split into chunks of DECODE_SPLIT positions, a block each
// (flash-decoding): otherwise a row at batch 1 is a dozen blocks on a GPU of 132 SMs. Each
// block writes its chunk's maximum, sum and unnormalised output; the last block of a head to
// finish (a counter per head) adds them up in chunk order, so the result does not depend on
// which finished first.
#pragma once
#include "common.cuh"
#include "pdl.cuh"

#define DECODE_THREADS 128
#define DECODE_SPLIT 256
#define DECODE_MAX_HS 256

// grid (NH, B, ceil(maxT / DECODE_SPLIT)). qkv: (B, 3C), this step's rows; kc, vc: this layer's
// cache, (B, maxT, C); out: (B, C). part: (B, NH, splits, hs + 2) floats; count: B * NH ints,
// zero before the first launch and left zero by every launch.
__global__ void __launch_bounds__(DECODE_THREADS)
attention_decode_kernel(floatX *out, const floatX *qkv, floatX *kc, floatX *vc, const int *pos, int maxT, int C,
                        int hs, float scale, float *part, int *count) {
    __shared__ float qs[DECODE_MAX_HS];
    __shared__ float score[DECODE_SPLIT];
    __shared__ float acc_w[DECODE_THREADS / 32][DECODE_MAX_HS];
    __shared__ int last;
    pdl_trigger();
    pdl_wait();
    const int h = blockIdx.x, b = blockIdx.y, sp = blockIdx.z, NH = gridDim.x, splits = gridDim.z;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, nwarps = DECODE_THREADS / 32;
    const int p = pos[b], n = p + 1, nsplit = (n + DECODE_SPLIT - 1) / DECODE_SPLIT;
    if (sp >= nsplit) return;
    const int t0 = sp * DECODE_SPLIT, t1 = min(n, t0 + DECODE_SPLIT);
    const floatX *row = qkv + (size_t)b * 3 * C + h * hs;
    floatX *k = kc + (size_t)b * maxT * C + h * hs, *v = vc + (size_t)b * maxT * C + h * hs;
    if (p >= t0 && p < t1)  // the new position joins the cache (seen by this block after the barrier)
        for (int i = tid; i < hs; i += DECODE_THREADS) {
            k[(size_t)p * C + i] = row[C + i];
            v[(size_t)p * C + i] = row[2 * C + i];
        }
    for (int i = tid; i < hs; i += DECODE_THREADS) qs[i] = to_float(row[i]);
    __syncthreads();
    // scores: a thread per position, reading its key row in 16-byte pieces
    float m = -INFINITY;
    for (int t = t0 + tid; t < t1; t += DECODE_THREADS) {
        const floatX *kt = k + (size_t)t * C;
        float s = 0.0f;
        for (int i = 0; i < hs; i += X128::size) {
            X128 kv = load128(kt + i);
            for (int j = 0; j < X128::size; j++) s += qs[i + j] * to_float(kv[j]);
        }
        s *= scale;
        score[t - t0] = s;
        m = fmaxf(m, s);
    }
    m = block_max(m);
    float sum = 0.0f;
    for (int t = t0 + tid; t < t1; t += DECODE_THREADS) {
        float e = expf(score[t - t0] - m);
        score[t - t0] = e;
        sum += e;
    }
    sum = block_sum(sum);  // (its barriers also make every score visible below)
    // the weighted values: a warp per position, each lane holding up to 8 dimensions
    float acc[DECODE_MAX_HS / 32];
    for (int j = 0; j < DECODE_MAX_HS / 32; j++) acc[j] = 0.0f;
    for (int t = t0 + warp; t < t1; t += nwarps) {
        const floatX *vt = v + (size_t)t * C;
        const float pt = score[t - t0];
        for (int j = 0; j * 32 + lane < hs; j++) acc[j] += pt * to_float(vt[j * 32 + lane]);
    }
    for (int j = 0; j * 32 + lane < hs; j++) acc_w[warp][j * 32 + lane] = acc[j];
    __syncthreads();
    floatX *o = out + (size_t)b * C + h * hs;
    if (nsplit == 1) {
        for (int i = tid; i < hs; i += DECODE_THREADS) {
            float a = 0.0f;
            for (int w = 0; w < nwarps; w++) a += acc_w[w][i];
            o[i] = from_float<floatX>(a / sum);
        }
        return;
    }
    // a chunk of several: this chunk's part, then the last block of the head adds them up
    const int stride = hs + 2;
    float *mine = part + (((size_t)b * NH + h) * splits + sp) * stride;
    for (int i = tid; i < hs; i += DECODE_THREADS) {
        float a = 0.0f;
        for (int w = 0; w < nwarps; w++) a += acc_w[w][i];
        mine[2 + i] = a;
    }
    if (tid == 0) {
        mine[0] = m;
        mine[1] = sum;
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&count[b * NH + h], 1) == nsplit - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float *first = part + ((size_t)b * NH + h) * splits * stride;
    float M = -INFINITY;
    for (int c = 0; c < nsplit; c++) M = fmaxf(M, __ldcg(first + c * stride));
    float L = 0.0f;
    for (int c = 0; c < nsplit; c++) L += __ldcg(first + c * stride + 1) * expf(__ldcg(first + c * stride) - M);
    for (int i = tid; i < hs; i += DECODE_THREADS) {
        float a = 0.0f;
        for (int c = 0; c < nsplit; c++) a += __ldcg(first + c * stride + 2 + i) * expf(__ldcg(first + c * stride) - M);
        o[i] = from_float<floatX>(a / L);
    }
    if (tid == 0) count[b * NH + h] = 0;  // for the next launch
}

// The scratch attention_decode needs for B rows of a context of maxT: part floats, count ints
static size_t attention_decode_part_floats(int B, int maxT, int C, int NH) {
    return (size_t)B * NH * ((maxT + DECODE_SPLIT - 1) / DECODE_SPLIT) * (C / NH + 2);
}

// out (B, C) = attention of each row's query (the first C of its qkv row) over its cache rows
// 0..pos[b], after the row's key and value join the cache at pos[b]
static void attention_decode(floatX *out, const floatX *qkv, floatX *kc, floatX *vc, const int *pos, int B, int maxT,
                             int C, int NH, float *part, int *count, int pdl, cudaStream_t s) {
    const int hs = C / NH;
    if (hs > DECODE_MAX_HS || hs % X128::size)
        fatal("generation: head size %d: the decode attention handles multiples of %d up to %d", hs, X128::size,
              DECODE_MAX_HS);
    dim3 grid(NH, B, (maxT + DECODE_SPLIT - 1) / DECODE_SPLIT);
    launch_pdl(attention_decode_kernel, grid, dim3(DECODE_THREADS), 0, s, pdl, out, qkv, kc, vc, pos, maxT, C, hs,
               1.0f / sqrtf((float)hs), part, count);
}
