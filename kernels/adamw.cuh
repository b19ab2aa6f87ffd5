// kernels/adamw.cuh: fused AdamW over the elements of one parameter tensor that this rank
// updates.
//   g = grad * clip;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   w -= lr * (m / bc1 / (sqrt(v / bc2) + eps) + wd * w)
// w is the fp32 master weight when master != NULL (bf16/fp16 builds), written back to the
// floatX parameter with stochastic rounding; in the fp32 build the parameter is w.
// The elements come as `slabs` runs of `len` (one run per layer under ZeRO: this rank's
// chunk of each layer's slice; one run of the whole tensor without ZeRO): run s starts at
// params + s * stride, at grads + s * grad_stride (stride, or len for ZeRO-2's compact
// gradient shard) and at m/v/master + s * len (the rank's compact state).
// The update is skipped on the device by common/update_rule.h's rule (a non-finite or
// outlier loss or gradient norm; info's INFO_NORM, INFO_CLIP and INFO_LOSS slots,
// kernels/step_info.cuh), so the host never waits for it.
// What changes from step to step (learning rate, bias corrections, outlier limits, the
// rounding seed) the kernel reads from an AdamWStep in device memory, so that a CUDA graph
// of the update (--cuda-graph 1), captured once, serves every step.
// The moments m and v are fp32, or bf16 (--optimizer-state bf16: half the memory), kept
// unbiased by stochastic rounding; the state file holds them as fp32 either way.
#pragma once
#include "common.cuh"
#include "step_info.cuh"
#include "../common/checkpoint.h"  // float_to_bf16, bf16_to_float: the moments on the host
#include "../common/update_rule.h"

// V consecutive elements of T from src to dst, as 16-byte accesses when V elements make
// whole 16-byte vectors (the launcher checks the alignment), one by one otherwise; one side
// is the thread's register array, the other device memory
template <int V, typename T>
__device__ __forceinline__ void copy_run(T *dst, const T *src) {
    if constexpr ((V * sizeof(T)) % 16 == 0) {
#pragma unroll
        for (int i = 0; i < (int)(V * sizeof(T) / 16); i++)
            reinterpret_cast<int4 *>(dst)[i] = reinterpret_cast<const int4 *>(src)[i];
    } else {
#pragma unroll
        for (int i = 0; i < V; i++) dst[i] = src[i];
    }
}

// V moments of type MT at src into fp32
template <int V, typename MT>
__device__ __forceinline__ void load_moments(float *dst, const MT *src) {
    if constexpr (std::is_same<MT, float>::value) {
        copy_run<V>(dst, src);
    } else {
        alignas(16) MT t[V];
        copy_run<V>(t, src);
#pragma unroll
        for (int k = 0; k < V; k++) dst[k] = __bfloat162float(t[k]);
    }
}

// V fp32 moments into MT at dst; bf16 with stochastic rounding on the noise of `key`
template <int V, typename MT>
__device__ __forceinline__ void store_moments(MT *dst, const float *src, size_t index0, uint32_t key) {
    if constexpr (std::is_same<MT, float>::value) {
        copy_run<V>(dst, src);
    } else {
        alignas(16) MT t[V];
#pragma unroll
        for (int k = 0; k < V; k++) stochastic_round(src[k], &t[k], hash_u32((uint32_t)(index0 + k), key));
        copy_run<V>(dst, t);
    }
}

// The update's values that change from step to step, written by the host before each
// update (adamw_step_upload) and read on the device
typedef struct {
    float lr, bc1, bc2;        // learning rate; bias corrections 1 - beta1^t, 1 - beta2^t
    float max_loss, max_norm;  // outlier limits (0: none)
    float inv_scale;           // 1 / the loss scale the gradients carry (fp16)
    uint32_t seed;             // the step's rounding-noise seed (each tensor xors in its own)
} AdamWStep;

// the pinned host copy, the device copy, and the event after which the host copy is free
typedef struct {
    AdamWStep *host, *dev;
    cudaEvent_t sent;
} AdamWStepBuf;

static void adamw_step_init(AdamWStepBuf *b) {
    CUDA_CHECK(cudaMallocHost(&b->host, sizeof(AdamWStep)));
    CUDA_CHECK(cudaMalloc(&b->dev, sizeof(AdamWStep)));
    CUDA_CHECK(cudaMemset(b->dev, 0, sizeof(AdamWStep)));
    CUDA_CHECK(cudaEventCreateWithFlags(&b->sent, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(b->sent, 0));
}

static void adamw_step_free(AdamWStepBuf *b) {
    if (!b->host) return;
    cudaFreeHost(b->host);
    cudaFree(b->dev);
    cudaEventDestroy(b->sent);
    memset(b, 0, sizeof *b);
}

// Step t's values (t counts from 1) to the device, on stream s, before the update's kernels
static void adamw_step_upload(AdamWStepBuf *b, float lr, float beta1, float beta2, int t, float max_loss,
                              float max_norm, float inv_scale, cudaStream_t s) {
    CUDA_CHECK(cudaEventSynchronize(b->sent));  // the last step's copy has read the host copy
    AdamWStep *h = b->host;
    h->lr = lr;
    h->bc1 = 1.0f - powf(beta1, (float)t);
    h->bc2 = 1.0f - powf(beta2, (float)t);
    h->max_loss = max_loss;
    h->max_norm = max_norm;
    h->inv_scale = inv_scale;
    h->seed = (uint32_t)(t * 0x9E3779B1u);
    CUDA_CHECK(cudaMemcpyAsync(b->dev, h, sizeof(AdamWStep), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaEventRecord(b->sent, s));
}

// grid (ceil(len / (V * blockDim.x)), slabs); each thread updates V consecutive elements
// (V = X128::size where every run is 16-byte aligned: one 16-byte access per tensor instead
// of V scalar ones; 1 otherwise). seed_index0: the index within the tensor of the run's
// first element at s = 0 (the rounding noise hashes the index within the tensor, so a
// sharded run rounds every element exactly as an unsharded one, whatever V). Run s's
// parameters start at params + s * param_stride (stride in the model's tensors, the chunk
// length in -z 3's compact shard).
template <int V, typename MT>
__global__ void adamw_kernel(floatX *params, size_t param_stride, float *master, const floatX *grads,
                             size_t grad_stride, MT *m, MT *v, size_t len, size_t stride, size_t seed_index0,
                             float beta1, float beta2, float eps, float wd, const float *info, const AdamWStep *st,
                             uint32_t tensor_seed) {
    size_t j = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (j >= len) return;
    float norm = info[INFO_NORM], clip = info[INFO_CLIP], loss = info[INFO_LOSS];
    const float lr = st->lr, bc1 = st->bc1, bc2 = st->bc2, max_loss = st->max_loss, max_norm = st->max_norm;
    const uint32_t seed = st->seed ^ tensor_seed;
    if (update_rule(loss, norm, max_loss, max_norm) != UPDATE_APPLIED) return;
    size_t p = (size_t)blockIdx.y * stride + j, q = (size_t)blockIdx.y * len + j;
    floatX *param = params + (size_t)blockIdx.y * param_stride + j;
    alignas(16) floatX gr[V], pr[V];
    alignas(16) float mm[V], vv[V], ww[V];
    copy_run<V>(gr, grads + (size_t)blockIdx.y * grad_stride + j);
    load_moments<V>(mm, m + q);
    load_moments<V>(vv, v + q);
    if (master) copy_run<V>(ww, master + q);
    else copy_run<V>(pr, param);
#pragma unroll
    for (int k = 0; k < V; k++) {
        float g = to_float(gr[k]) * clip;
        mm[k] = beta1 * mm[k] + (1.0f - beta1) * g;
        vv[k] = beta2 * vv[k] + (1.0f - beta2) * g * g;
        float w = master ? ww[k] : to_float(pr[k]);
        w -= lr * ((mm[k] / bc1) / (sqrtf(vv[k] / bc2) + eps) + wd * w);
        ww[k] = w;
        stochastic_round(w, &pr[k], hash_u32((uint32_t)(seed_index0 + p + k), seed));
    }
    // the moments' noise: other streams than the parameter's (seeds differ in their high bits)
    store_moments<V>(m + q, mm, seed_index0 + p, seed ^ 0x68E31DA4u);
    store_moments<V>(v + q, vv, seed_index0 + p, seed ^ 0xB5297A4Du);
    if (master) copy_run<V>(master + q, ww);
    copy_run<V>(param, pr);
}

template <typename MT>
static void adamw_launch(floatX *params, size_t param_stride, float *master, const floatX *grads, size_t grad_stride,
                         MT *m, MT *v, int slabs, size_t len, size_t stride, size_t seed_index0, float beta1,
                         float beta2, float eps, float wd, const float *info, const AdamWStep *st,
                         uint32_t tensor_seed, cudaStream_t s) {
    constexpr int V = X128::size;
    const bool aligned16 =
        ((uintptr_t)params | (uintptr_t)master | (uintptr_t)grads | (uintptr_t)m | (uintptr_t)v) % 16 == 0;
    if (aligned16 && len % V == 0 && stride % V == 0 && grad_stride % V == 0 && param_stride % V == 0) {
        dim3 grid(ceil_div((long)(len / V), 256), slabs);
        adamw_kernel<V, MT><<<grid, 256, 0, s>>>(params, param_stride, master, grads, grad_stride, m, v, len, stride, seed_index0,
                                                 beta1, beta2, eps, wd, info, st, tensor_seed);
    } else {
        dim3 grid(ceil_div((long)len, 512), slabs);
        adamw_kernel<1, MT><<<grid, 512, 0, s>>>(params, param_stride, master, grads, grad_stride, m, v, len, stride, seed_index0,
                                                 beta1, beta2, eps, wd, info, st, tensor_seed);
    }
    LAUNCH_CHECK();
}

// m and v: fp32, or bf16 when moments_bf16; each points at the run's first moment. st: the
// step's values (adamw_step_upload); tensor_seed: the tensor's part of the rounding seed
static void adamw_update(floatX *params, size_t param_stride, float *master, const floatX *grads, size_t grad_stride,
                         void *m, void *v, int moments_bf16, int slabs, size_t len, size_t stride, size_t seed_index0,
                         float beta1, float beta2, float eps, float wd, const float *info, const AdamWStep *st,
                         uint32_t tensor_seed, cudaStream_t s) {
    if (moments_bf16)
        adamw_launch(params, param_stride, master, grads, grad_stride, (__nv_bfloat16 *)m, (__nv_bfloat16 *)v, slabs,
                     len, stride, seed_index0, beta1, beta2, eps, wd, info, st, tensor_seed, s);
    else
        adamw_launch(params, param_stride, master, grads, grad_stride, (float *)m, (float *)v, slabs, len, stride,
                     seed_index0, beta1, beta2, eps, wd, info, st, tensor_seed, s);
}

// Bytes of one moment on the device.
static size_t adamw_moment_bytes(int moments_bf16) { return moments_bf16 ? 2 : 4; }

// n moments between host fp32 and the optimizer state (fp32, or bf16 rounded to nearest: a
// state written from bf16 moments reads back bit for bit); the state may be on the device or
// in mapped host memory (kernels/offload.cuh), hence cudaMemcpyDefault
static void adamw_moments_upload(void *dst, const float *src, size_t n, int moments_bf16) {
    if (!moments_bf16) {
        CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDefault));
        return;
    }
    uint16_t *tmp = (uint16_t *)xmalloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) tmp[i] = float_to_bf16(src[i]);
    CUDA_CHECK(cudaMemcpy(dst, tmp, n * sizeof(uint16_t), cudaMemcpyDefault));
    free(tmp);
}

static void adamw_moments_download(float *dst, const void *src, size_t n, int moments_bf16) {
    if (!moments_bf16) {
        CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(float), cudaMemcpyDefault));
        return;
    }
    uint16_t *tmp = (uint16_t *)xmalloc(n * sizeof(uint16_t));
    CUDA_CHECK(cudaMemcpy(tmp, src, n * sizeof(uint16_t), cudaMemcpyDefault));
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(tmp[i]);
    free(tmp);
}

// ZeRO-2: shard[i] += chunk[i] (a layer's reduce-scattered gradient chunk added to the
// rank's accumulated gradient shard), fp32 arithmetic, one rounding
__global__ void grad_shard_accumulate_kernel(floatX *shard, const floatX *chunk, size_t n) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128::size;
    if (i >= n) return;
    X128 a = load128(shard + i), b = load128(chunk + i);
    for (int k = 0; k < X128::size; k++) a[k] = from_float<floatX>(to_float(a[k]) + to_float(b[k]));
    store128(shard + i, a);
}
// the same element by element, for chunks that are not 16-byte aligned
__global__ void grad_shard_accumulate_scalar_kernel(floatX *shard, const floatX *chunk, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) shard[i] = from_float<floatX>(to_float(shard[i]) + to_float(chunk[i]));
}

static void grad_shard_accumulate(floatX *shard, const floatX *chunk, size_t n, cudaStream_t s) {
    if (n % X128::size == 0 && (uintptr_t)shard % 16 == 0 && (uintptr_t)chunk % 16 == 0)
        grad_shard_accumulate_kernel<<<ceil_div((long)(n / X128::size), 256), 256, 0, s>>>(shard, chunk, n);
    else
        grad_shard_accumulate_scalar_kernel<<<ceil_div((long)n, 256), 256, 0, s>>>(shard, chunk, n);
    LAUNCH_CHECK();
}
