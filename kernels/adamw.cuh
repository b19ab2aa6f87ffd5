// kernels/adamw.cuh: fused AdamW over one parameter tensor.
//   g = grad * clip;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   w -= lr * (m / bc1 / (sqrt(v / bc2) + eps) + wd * w)
// w is the fp32 master weight when master != NULL (bf16 build), written back to the
// floatX parameter with stochastic rounding; in the fp32 build the parameter is w.
// The update is skipped on the device when the step's loss or gradient norm is not
// finite (info: [0] norm, [1] clip factor, [2] loss), so the host never waits for it.
#pragma once
#include "common.cuh"

__global__ void adamw_kernel(floatX *params, float *master, const floatX *grads, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float bc1, float bc2, float eps, float wd,
                             const float *info, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float norm = info[0], clip = info[1], loss = info[2];
    if (!isfinite(norm) || !isfinite(loss)) return;
    float g = to_float(grads[i]) * clip;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float w = master ? master[i] : to_float(params[i]);
    w -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * w);
    if (master) master[i] = w;
    stochastic_round(w, &params[i], hash_u32((uint32_t)i, seed));
}

// master fp32 <- floatX params (once, at start)
__global__ void copy_to_float_kernel(float *dst, const floatX *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_float(src[i]);
}

static void adamw_update(floatX *params, float *master, const floatX *grads, float *m, float *v, size_t n,
                         float lr, float beta1, float beta2, int t, float eps, float wd, const float *info,
                         uint32_t seed, cudaStream_t s) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<ceil_div((long)n, 512), 512, 0, s>>>(params, master, grads, m, v, n, lr, beta1, beta2, bc1, bc2,
                                                        eps, wd, info, seed);
    LAUNCH_CHECK();
}
