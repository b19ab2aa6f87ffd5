// gpu/generate.cuh: sampling on the GPU with a KV cache. Each layer keeps the keys and
// values of the text so far on the device, so a new token costs one position's forward
// (matmuls of one row, kernels/attention_decode.cuh's attention against the cache) instead
// of the whole text's. Used by the samples between steps and by --generate; which positions
// a call must compute is common/generate.h's kv_cache_reuse.
#pragma once
#include "../common/generate.h"
#include "../kernels/attention_decode.cuh"
#include "../kernels/encoder.cuh"
#include "../kernels/layernorm.cuh"
#include "../kernels/matmul.cuh"
#include "model.cuh"

typedef struct {
    GPT2Config config;
    floatX *const *param;  // the model's parameters on the device (checkpoint order)
    MatmulModes *modes;    // how the matmuls run: the model's
    cudaStream_t stream;
    int maxT;
    floatX *k, *v;      // (L, maxT, C): each layer's key and value of each position
    int *ids, filled;   // the text whose keys and values k and v hold (host)
    // one position's activations (device)
    floatX *x, *residual2, *ln, *qkv, *atty, *attproj, *fch, *fch_gelu, *fcproj, *logits;
    float *mean, *rstd;
    int *token;
    floatX *host_logits;  // Vp, pinned
} KVCacheGpu;

static void kv_cache_gpu_init(KVCacheGpu *kv, const GPT2Config *cfg, floatX *const *param, MatmulModes *modes,
                              cudaStream_t s, int maxT) {
    memset(kv, 0, sizeof *kv);
    kv->config = *cfg;
    kv->param = param;
    kv->modes = modes;
    kv->stream = s;
    kv->maxT = maxT;
    size_t L = cfg->num_layers, C = cfg->channels, Vp = cfg->padded_vocab_size;
    CUDA_CHECK(cudaMalloc(&kv->k, L * maxT * C * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&kv->v, L * maxT * C * sizeof(floatX)));
    floatX *buf;  // x, residual2, ln (C each), qkv (3C), atty, attproj, fcproj (C), fch, fch_gelu (4C), logits
    CUDA_CHECK(cudaMalloc(&buf, (17 * C + Vp) * sizeof(floatX)));
    kv->x = buf; kv->residual2 = buf + C; kv->ln = buf + 2 * C; kv->qkv = buf + 3 * C; kv->atty = buf + 6 * C;
    kv->attproj = buf + 7 * C; kv->fcproj = buf + 8 * C; kv->fch = buf + 9 * C; kv->fch_gelu = buf + 13 * C;
    kv->logits = buf + 17 * C;
    CUDA_CHECK(cudaMalloc(&kv->mean, 2 * sizeof(float)));
    kv->rstd = kv->mean + 1;
    CUDA_CHECK(cudaMalloc(&kv->token, sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&kv->host_logits, Vp * sizeof(floatX)));
    kv->ids = (int *)xmalloc((size_t)maxT * sizeof(int));
    kv->filled = 0;
}

static void kv_cache_gpu_free(KVCacheGpu *kv) {
    cudaFree(kv->k);
    cudaFree(kv->v);
    cudaFree(kv->x);
    cudaFree(kv->mean);
    cudaFree(kv->token);
    cudaFreeHost(kv->host_logits);
    free(kv->ids);
}

// The forward of position pos holding token: its key and value join the cache, its logits
// (Vp) are left in kv->logits. The same kernels as the training forward, at one row.
static void kv_gpu_forward_position(KVCacheGpu *kv, int token, int pos) {
    const GPT2Config *c = &kv->config;
    const int L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    floatX *const *p = kv->param;
    cudaStream_t s = kv->stream;
    CUDA_CHECK(cudaMemcpyAsync(kv->token, &token, sizeof(int), cudaMemcpyHostToDevice, s));
    encoder_forward(kv->x, kv->token, p[P_WTE], p[P_WPE] + (size_t)pos * C, 1, 1, C, s);
    layernorm_forward(kv->ln, kv->mean, kv->rstd, kv->x, p[P_LN1W], p[P_LN1B], 1, C, s);
    for (int l = 0; l < L; l++) {
        floatX *k = kv->k + (size_t)l * kv->maxT * C, *v = kv->v + (size_t)l * kv->maxT * C;
        matmul_forward(kv->modes, kv->qkv, NULL, kv->ln, p[P_QKVW] + (size_t)l * 3 * C * C, p[P_QKVB] + l * 3 * C, 1,
                       C, 3 * C, s);
        CUDA_CHECK(cudaMemcpyAsync(k + (size_t)pos * C, kv->qkv + C, C * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
        CUDA_CHECK(cudaMemcpyAsync(v + (size_t)pos * C, kv->qkv + 2 * C, C * sizeof(floatX), cudaMemcpyDeviceToDevice,
                                   s));
        attention_decode(kv->atty, kv->qkv, k, v, pos + 1, C, NH, s);
        matmul_forward(kv->modes, kv->attproj, NULL, kv->atty, p[P_ATTPROJW] + (size_t)l * C * C,
                       p[P_ATTPROJB] + l * C, 1, C, C, s);
        fused_residual_layernorm_forward(kv->residual2, kv->ln, kv->mean, kv->rstd, kv->x, kv->attproj,
                                         p[P_LN2W] + l * C, p[P_LN2B] + l * C, 1, C, s);
        matmul_forward(kv->modes, kv->fch_gelu, kv->fch, kv->ln, p[P_FCW] + (size_t)l * 4 * C * C,
                       p[P_FCB] + l * 4 * C, 1, C, 4 * C, s);
        matmul_forward(kv->modes, kv->fcproj, NULL, kv->fch_gelu, p[P_FCPROJW] + (size_t)l * C * 4 * C,
                       p[P_FCPROJB] + l * C, 1, 4 * C, C, s);
        // the residual add, fused with the next layernorm (the next layer's ln1, or lnf)
        const floatX *w = l + 1 < L ? p[P_LN1W] + (l + 1) * C : p[P_LNFW];
        const floatX *b = l + 1 < L ? p[P_LN1B] + (l + 1) * C : p[P_LNFB];
        fused_residual_layernorm_forward(kv->x, kv->ln, kv->mean, kv->rstd, kv->residual2, kv->fcproj, w, b, 1, C, s);
    }
    matmul_forward(kv->modes, kv->logits, NULL, kv->ln, p[P_WTE], NULL, 1, C, Vp, s);  // the lm_head, tied to wte
}

// NextLogitsFn with the cache: the positions it lacks, then the last one's logits to the host.
static void kv_gpu_next_logits(void *ctx, const int *ids, int n, float *logits) {
    KVCacheGpu *kv = (KVCacheGpu *)ctx;
    const int V = kv->config.vocab_size;
    for (int pos = kv_cache_reuse(kv->ids, &kv->filled, ids, n); pos < n; pos++) {
        if (ids[pos] < 0 || ids[pos] >= V) fatal("token id %d at position %d is outside the vocabulary (%d)", ids[pos],
                                                 pos, V);
        kv_gpu_forward_position(kv, ids[pos], pos);
    }
    CUDA_CHECK(cudaMemcpyAsync(kv->host_logits, kv->logits, (size_t)V * sizeof(floatX), cudaMemcpyDeviceToHost,
                               kv->stream));
    CUDA_CHECK(cudaStreamSynchronize(kv->stream));
    for (int i = 0; i < V; i++) logits[i] = to_float(kv->host_logits[i]);
}
