// kernels/global_norm.cuh: the global gradient norm and the clipping factor, computed on
// the device so the update needs no host round trip. Deterministic: a fixed grid writes
// per-block partial sums of squares, one block adds them in a fixed order.
// The gradients may be scaled (fp16 loss scaling): inv_scale undoes it.
// info[0] = norm of grads * inv_scale,
// info[1] = factor that turns the stored grads into clipped true grads:
//           inv_scale * (grad_clip / norm if norm > grad_clip > 0, else 1)
#pragma once
#include "common.cuh"

#define NORM_BLOCKS 1024
#define NORM_THREADS 512

__global__ void grad_sumsq_kernel(float *partials, const floatX *g, size_t n) {
    float acc = 0.0f;
    size_t stride = (size_t)gridDim.x * blockDim.x * X128::size;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128::size; i < n; i += stride) {
        X128 u = load128cs(g + i);
        for (int k = 0; k < X128::size; k++) { float v = to_float(u[k]); acc += v * v; }
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void grad_norm_finish_kernel(float *info, const float *partials, int nparts, float grad_clip, float inv_scale) {
    float v = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) v += partials[i];
    v = block_sum(v);
    if (threadIdx.x == 0) {
        float norm = sqrtf(v) * inv_scale;
        info[0] = norm;
        info[1] = inv_scale * ((grad_clip > 0.0f && norm > grad_clip) ? grad_clip / norm : 1.0f);
    }
}

// scratch: NORM_BLOCKS floats. n: a multiple of X128::size.
static void global_norm(float *info, float *scratch, const floatX *grads, size_t n, float grad_clip, float inv_scale,
                        cudaStream_t s) {
    grad_sumsq_kernel<<<NORM_BLOCKS, NORM_THREADS, 0, s>>>(scratch, grads, n);
    LAUNCH_CHECK();
    grad_norm_finish_kernel<<<1, 1024, 0, s>>>(info, scratch, NORM_BLOCKS, grad_clip, inv_scale);
    LAUNCH_CHECK();
}
