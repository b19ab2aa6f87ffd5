// kernels/gelu.cuh: GELU, tanh approximation (as GPT-2 and PyTorch approximate='tanh').
// Used when the GELU is not fused into the matmul epilogue, and to recompute the GELU
// output in backward (-r 1).
// forward:  out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// backward: dinp = dout * gelu'(x), written (dinp may alias dout)
#pragma once
#include "common.cuh"

#define GELU_SCALING 0.7978845608028654f  // sqrt(2/pi)

__device__ __forceinline__ float gelu_f(float x) {
    float u = GELU_SCALING * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float gelu_grad_f(float x) {
    float u = GELU_SCALING * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALING * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void gelu_forward_kernel(floatX *out, const floatX *inp, long n) {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * X128::size;
    if (i >= n) return;
    X128 x = load128(inp + i), o;
    for (int k = 0; k < X128::size; k++) o[k] = from_float<floatX>(gelu_f(to_float(x[k])));
    store128(out + i, o);
}

__global__ void gelu_backward_kernel(floatX *dinp, const floatX *inp, const floatX *dout, long n) {
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * X128::size;
    if (i >= n) return;
    X128 x = load128(inp + i), d = load128(dout + i), o;
    for (int k = 0; k < X128::size; k++) o[k] = from_float<floatX>(gelu_grad_f(to_float(x[k])) * to_float(d[k]));
    store128(dinp + i, o);
}

// n must be a multiple of X128::size
static void gelu_forward(floatX *out, const floatX *inp, long n, cudaStream_t s) {
    gelu_forward_kernel<<<ceil_div(n / X128::size, 256), 256, 0, s>>>(out, inp, n);
    LAUNCH_CHECK();
}
static void gelu_backward(floatX *dinp, const floatX *inp, const floatX *dout, long n, cudaStream_t s) {
    gelu_backward_kernel<<<ceil_div(n / X128::size, 256), 256, 0, s>>>(dinp, inp, dout, n);
    LAUNCH_CHECK();
}
