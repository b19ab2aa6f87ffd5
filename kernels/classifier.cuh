// kernels/classifier.cuh: the softmax + cross-entropy of the output layer and its gradient
// in one kernel, in place over the logits (no separate probabilities tensor).
// For each row (position) of logits (N, Vp), over the V real columns only:
//   loss[row] = logsumexp(logits) - logits[target]
//   with dloss != 0: logits[row, :] <- (softmax(logits) - onehot(target)) * dloss,
//   and the padded columns V..Vp-1 <- 0.
// One block per row; the max and the sum of exponentials are computed in one online pass.
#pragma once
#include "common.cuh"

// 512 threads (measured on the H200, d12 B=64: 5.9-6.0 ms per step; blocks of 1024, with
// fewer rows in flight so that the second read would hit L2, measured 6.9 ms)
#define CLASSIFIER_THREADS 512

__global__ void __launch_bounds__(CLASSIFIER_THREADS)
fused_classifier_kernel(floatX *logits, float *losses, const int *targets, float dloss, int write_grad, int V, int Vp) {
    int row = blockIdx.x;
    floatX *x = logits + (size_t)row * Vp;
    // online max / sum of exp per thread
    float m = -INFINITY, s = 0.0f;
    int vecV = V / X128::size * X128::size;
    for (int c = threadIdx.x * X128::size; c < vecV; c += blockDim.x * X128::size) {
        X128 u = load128(x + c);
        for (int k = 0; k < X128::size; k++) {
            float v = to_float(u[k]);
            if (v > m) { s = s * expf(m - v) + 1.0f; m = v; }
            else s += expf(v - m);
        }
    }
    for (int c = vecV + threadIdx.x; c < V; c += blockDim.x) {
        float v = to_float(x[c]);
        if (v > m) { s = s * expf(m - v) + 1.0f; m = v; }
        else s += expf(v - m);
    }
    float gm = block_max(m);
    float gs = block_sum(m == -INFINITY ? 0.0f : s * expf(m - gm));
    int tgt = targets[row];
    float lse = gm + logf(gs);
    if (threadIdx.x == 0) losses[row] = lse - to_float(x[tgt]);
    if (!write_grad) return;
    __syncthreads();  // x[tgt] read above before any thread overwrites it
    float inv = 1.0f / gs;
    for (int c = threadIdx.x * X128::size; c < Vp; c += blockDim.x * X128::size) {
        X128 u = load128(x + c), o;
        for (int k = 0; k < X128::size; k++) {
            int col = c + k;
            float p = col < V ? expf(to_float(u[k]) - gm) * inv : 0.0f;
            float g = (p - (col == tgt ? 1.0f : 0.0f)) * dloss;
            o[k] = from_float<floatX>(col < V ? g : 0.0f);
        }
        store128(x + c, o);
    }
}

// losses (N) fp32. write_grad: overwrite logits with dlogits scaled by dloss.
static void fused_classifier(floatX *logits, float *losses, const int *targets, float dloss, int write_grad,
                             int N, int V, int Vp, cudaStream_t s) {
    fused_classifier_kernel<<<N, CLASSIFIER_THREADS, 0, s>>>(logits, losses, targets, dloss, write_grad, V, Vp);
    LAUNCH_CHECK();
}

// *acc += scale * sum(losses[0..N)), one block, fixed order (deterministic)
__global__ void loss_accumulate_kernel(float *acc, const float *losses, int N, float scale) {
    float v = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) v += losses[i];
    v = block_sum(v);
    if (threadIdx.x == 0) *acc += v * scale;
}

static void loss_accumulate(float *acc, const float *losses, int N, float scale, cudaStream_t s) {
    loss_accumulate_kernel<<<1, 1024, 0, s>>>(acc, losses, N, scale);
    LAUNCH_CHECK();
}
