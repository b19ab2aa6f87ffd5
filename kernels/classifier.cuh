// kernels/classifier.cuh: the softmax + cross-entropy of the output layer and its gradient
// in one kernel, in place over the logits (no separate probabilities tensor).
// For each row (position) of logits (N, Vp), over the V real columns only:
//   loss[row] = logsumexp(logits) - logits[target]
//   with write_grad: logits[row, :] <- (softmax(logits) - onehot(target)) * dloss (dloss > 0),
//   and the padded columns V..Vp-1 <- 0.
// The max and the sum of exponentials are computed in one online pass over a row.
#pragma once
#include "common.cuh"

// Instruction count is what limits this kernel once the row is read once (Nsight Compute:
// docs/performance-notes.md, "Classifier"), so each logit costs as few as possible: the exponentials are base 2
// through the hardware unit (ex2_approx) with log2(e) folded into one fma, the running max is
// updated once per 8-vector, and the gradient's 1/sum and dloss are folded into the
// exponent's offset, leaving one fma and one ex2 per logit; the target's entry is fixed up
// afterwards by the thread that stored it.
//
// One row by the whole block: *loss = its loss, and with write_grad its gradient (dloss > 0)
// written to dst. src holds the row's logits, in device or shared memory; dst may be src.
__device__ void classifier_row(const floatX *src, floatX *dst, float *loss, int tgt, float dloss, int write_grad,
                               int V, int Vp) {
    const float LOG2E = 1.4426950408889634f, LN2 = 0.6931471805599453f;
    // per thread: m = max of the logits, s = sum of 2^(log2(e) * (logit - m))
    float m = -INFINITY, s = 0.0f;
    int vecV = V / X128::size * X128::size;
    for (int c = threadIdx.x * X128::size; c < vecV; c += blockDim.x * X128::size) {
        X128 u = load128(src + c);
        float v[X128::size], vm = -INFINITY;
        for (int k = 0; k < X128::size; k++) { v[k] = to_float(u[k]); vm = fmaxf(vm, v[k]); }
        if (vm > m) { s *= ex2_approx((m - vm) * LOG2E); m = vm; }  // (m = -inf: 2^-inf = 0)
        const float mb = m * LOG2E;
        for (int k = 0; k < X128::size; k++) s += ex2_approx(fmaf(v[k], LOG2E, -mb));
    }
    for (int c = vecV + threadIdx.x; c < V; c += blockDim.x) {
        float v = to_float(src[c]);
        if (v > m) { s *= ex2_approx((m - v) * LOG2E); m = v; }
        s += ex2_approx((v - m) * LOG2E);
    }
    float gm = block_max(m);
    float gs = block_sum(m == -INFINITY ? 0.0f : s * ex2_approx((m - gm) * LOG2E));
    float lse = gm + log2f(gs) * LN2;  // natural log-sum-exp of the row
    const float xt = to_float(src[tgt]);
    if (threadIdx.x == 0) *loss = lse - xt;
    if (!write_grad) return;
    __syncthreads();  // src[tgt] read above before any thread overwrites it (dst == src)
    // softmax * dloss = 2^(log2(e) * logit - off)
    const float off = lse * LOG2E - log2f(dloss);
    for (int c = threadIdx.x * X128::size; c < Vp; c += blockDim.x * X128::size) {
        X128 u = load128(src + c), o;
        if (c + X128::size <= V) {
            for (int k = 0; k < X128::size; k++)
                o[k] = from_float<floatX>(ex2_approx(fmaf(to_float(u[k]), LOG2E, -off)));
        } else {  // the last real columns, and the padding (zero)
            for (int k = 0; k < X128::size; k++)
                o[k] = from_float<floatX>(c + k < V ? ex2_approx(fmaf(to_float(u[k]), LOG2E, -off)) : 0.0f);
        }
        store128(dst + c, o);
    }
    // minus the one-hot: the thread that stored the target's vector (so after that store)
    if (threadIdx.x == (tgt / X128::size) % blockDim.x)
        dst[tgt] = from_float<floatX>(ex2_approx(fmaf(xt, LOG2E, -off)) - dloss);
}

// Streaming form, for rows too long to stage: one block per row, the logits read twice
// from device memory (the second read partly from L2). 512 threads: blocks of 1024, with
// fewer rows in flight so that the second read would hit L2, were slower
// (docs/performance-notes.md, "Classifier").
#define CLASSIFIER_THREADS 512
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
fused_classifier_kernel(floatX *logits, float *losses, const int *targets, float dloss, int write_grad, int V, int Vp) {
    int row = blockIdx.x;
    floatX *x = logits + (size_t)row * Vp;
    classifier_row(x, x, losses + row, targets[row], dloss, write_grad, V, Vp);
}

// Staged form: one block per SM walks rows blockIdx.x, + gridDim.x, ..., each row copied
// whole into shared memory (cp.async) while the block works on the previous one, so the
// logits are read from device memory once and the copy engine never waits on the
// reductions. (Staging without the second buffer, two single-row blocks per SM, measured
// slower than the streaming form: each block's load, reduce and write phases left the
// memory system idle in turn.) Dynamic shared memory: 2 * Vp floatX.
#define CLASSIFIER_STAGED_THREADS 1024
__global__ void __launch_bounds__(CLASSIFIER_STAGED_THREADS, 1)
fused_classifier_staged_kernel(floatX *logits, float *losses, const int *targets, float dloss, int write_grad, int N,
                               int V, int Vp) {
    extern __shared__ __align__(16) unsigned char classifier_smem[];
    floatX *rows = reinterpret_cast<floatX *>(classifier_smem);
    const int nvec = Vp / X128::size;
    auto stage = [&](int r, int b) {  // row r into buffer b, as one commit group (empty past N)
        if (r < N) {
            const floatX *g = logits + (size_t)r * Vp;
            floatX *sh = rows + (size_t)b * Vp;
            for (int c = threadIdx.x; c < nvec; c += blockDim.x) cp_async16(sh + c * X128::size, g + c * X128::size);
        }
        cp_async_commit();
    };
    int row = blockIdx.x;
    stage(row, 0);
    for (int i = 0; row < N; i++, row += gridDim.x) {
        stage(row + gridDim.x, (i + 1) & 1);  // into the buffer the previous row freed
        cp_async_wait<1>();                   // this row landed (the next may be in flight)
        __syncthreads();
        classifier_row(rows + (size_t)(i & 1) * Vp, logits + (size_t)row * Vp, losses + row, targets[row], dloss,
                       write_grad, V, Vp);
        __syncthreads();  // every thread is done with this buffer before it is restaged
    }
}

// losses (N) fp32. write_grad: overwrite logits with dlogits scaled by dloss (> 0). The staged
// kernel where two rows fit in one block's shared memory (bf16/fp16 at GPT-2's Vp: 201 KB),
// else the streaming one.
static void fused_classifier(floatX *logits, float *losses, const int *targets, float dloss, int write_grad,
                             int N, int V, int Vp, cudaStream_t s) {
    if (write_grad && !(dloss > 0.0f)) {  // the kernel folds log2(dloss) into its exponent
        fprintf(stderr, "error: fused_classifier: the loss gradient's scale must be > 0 (got %g)\n", dloss);
        fatal_exit();
    }
    static int num_sms = 0, smem_max = 0, smem_set = 0;
    if (!num_sms) {
        int dev;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    size_t smem = 2 * (size_t)Vp * sizeof(floatX);
    if (Vp % X128::size == 0 && smem + 1024 <= (size_t)smem_max) {  // (1 KB: the reductions' static arrays)
        if ((int)smem > smem_set) {
            CUDA_CHECK(cudaFuncSetAttribute(fused_classifier_staged_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            (int)smem));
            smem_set = (int)smem;
        }
        int grid = N < num_sms ? N : num_sms;
        fused_classifier_staged_kernel<<<grid, CLASSIFIER_STAGED_THREADS, smem, s>>>(logits, losses, targets, dloss,
                                                                                    write_grad, N, V, Vp);
    } else {
        fused_classifier_kernel<<<N, CLASSIFIER_THREADS, 0, s>>>(logits, losses, targets, dloss, write_grad, V, Vp);
    }
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
