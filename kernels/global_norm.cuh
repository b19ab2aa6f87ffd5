// kernels/global_norm.cuh: the global gradient norm and the clipping factor, computed on
// the device so the update needs no host round trip. Deterministic: each tensor's
// elements (as `slabs` runs, like AdamW's: the rank's chunks under ZeRO) are summed by a
// fixed grid into per-block partials, and one block adds all partials in a fixed order.
// Under ZeRO each rank sums its own chunks and the totals are added across ranks (by the
// caller, between grad_sumsq_total and grad_norm_finish). The gradients may be scaled
// (fp16 loss scaling): *inv_scale (in device memory, so a CUDA graph of the update serves
// every scale) undoes it.
// info[INFO_SUMSQ] = sum of squares (this rank's, then the global one),
// info[INFO_NORM] = norm of grads * inv_scale,
// info[INFO_CLIP] = factor that turns the stored grads into clipped true grads:
//           inv_scale * (grad_clip / norm if norm > grad_clip > 0, else 1)
#pragma once
#include "common.cuh"
#include "step_info.cuh"

#define NORM_THREADS 512
#define NORM_MAX_BLOCKS 256  // blocks per run, at most; partials per tensor = blocks * slabs

// blocks per run of len elements: about 16 vectors per thread, fixed by the size alone
// (so the summation order, and the norm, is the same in every run)
static int grad_sumsq_blocks(size_t len) {
    size_t b = (len + (size_t)NORM_THREADS * X128::size * 16 - 1) / ((size_t)NORM_THREADS * X128::size * 16);
    return b < 1 ? 1 : b > NORM_MAX_BLOCKS ? NORM_MAX_BLOCKS : (int)b;
}

// grid (blocks, slabs): run s is g + s * stride, len elements. vec: every run starts
// 16-byte aligned and len is a multiple of X128::size (else element by element: ZeRO
// chunks of world sizes that leave them unaligned)
__global__ void grad_sumsq_kernel(float *partials, const floatX *g, size_t len, size_t stride, int vec) {
    const floatX *run = g + (size_t)blockIdx.y * stride;
    float acc = 0.0f;
    if (vec) {
        for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128::size; i < len;
             i += (size_t)gridDim.x * blockDim.x * X128::size) {
            X128 u = load128cs(run + i);
            for (int k = 0; k < X128::size; k++) { float v = to_float(u[k]); acc += v * v; }
        }
    } else {
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (size_t)gridDim.x * blockDim.x) {
            float v = to_float(run[i]);
            acc += v * v;
        }
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partials[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = acc;
}

__global__ void grad_sumsq_total_kernel(float *info, const float *partials, int nparts) {
    float v = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) v += partials[i];
    v = block_sum(v);
    if (threadIdx.x == 0) info[INFO_SUMSQ] = v;
}

__global__ void grad_norm_finish_kernel(float *info, float grad_clip, const float *inv_scale_dev) {
    const float inv_scale = *inv_scale_dev;
    float norm = sqrtf(info[INFO_SUMSQ]) * inv_scale;
    info[INFO_NORM] = norm;
    info[INFO_CLIP] = inv_scale * ((grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f);
}

// Writes grad_sumsq_blocks(len) * slabs partials at partials; returns how many.
static int grad_sumsq(float *partials, const floatX *g, int slabs, size_t len, size_t stride, cudaStream_t s) {
    int bx = grad_sumsq_blocks(len);
    int vec = len % X128::size == 0 && stride % X128::size == 0 && (uintptr_t)g % 16 == 0;
    grad_sumsq_kernel<<<dim3(bx, slabs), NORM_THREADS, 0, s>>>(partials, g, len, stride, vec);
    LAUNCH_CHECK();
    return bx * slabs;
}
static void grad_sumsq_total(float *info, const float *partials, int nparts, cudaStream_t s) {
    grad_sumsq_total_kernel<<<1, 1024, 0, s>>>(info, partials, nparts);
    LAUNCH_CHECK();
}
static void grad_norm_finish(float *info, float grad_clip, const float *inv_scale, cudaStream_t s) {
    grad_norm_finish_kernel<<<1, 1, 0, s>>>(info, grad_clip, inv_scale);
    LAUNCH_CHECK();
}
