// train_gpt2.cu: the GPU trainer of GPT-2. The model lives on one GPU: parameters in
// floatX (bf16, fp16 or fp32, chosen at build time with -DPRECISION), one contiguous
// buffer in checkpoint order; gradients likewise; AdamW moments and master weights in
// fp32. The fp16 build scales the loss dynamically: the gradients are computed for
// loss * S, unscaled inside the norm/clip factor, S halves when they overflow (the update
// is then skipped) and doubles after LOSS_SCALE_WINDOW good steps.
// Each layer's forward and backward kernels live in kernels/<layer>.cuh; this file wires
// them together and runs the training loop: forward, loss, backward, clip, update, log.
// Flags and files are those of the CPU trainer (train_gpt2.c). test_gpt2.cu includes this
// file with TESTING defined and checks it against the PyTorch reference.
#include "common/util.h"
#include "common/args.h"
#include "common/checkpoint.h"
#include "common/dataloader.h"
#include "common/logger.h"
#include "common/rng.h"
#include "common/schedule.h"
#include "common/tokenizer.h"
#include "common/train_common.h"
#include <float.h>
#include <math.h>

#include "kernels/common.cuh"
#include "kernels/encoder.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/attention.cuh"
#include "kernels/gelu.cuh"
#include "kernels/classifier.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/adamw.cuh"

// Peak dense bf16 tensor throughput of an H100/H200 SXM (datasheet), the MFU denominator.
#define GPU_PEAK_FLOPS_BF16 989e12

// fp16 dynamic loss scaling
#define LOSS_SCALE_INIT 65536.0f
#define LOSS_SCALE_WINDOW 1000

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
} AdamWConfig;

// ----------------------------------------------------------------------------
// Per-phase timing (--profile 1): CUDA events around each kernel group of a training
// step, summed per category after the step's one sync. When off, nothing is recorded.

enum { PH_ENCODER, PH_LAYERNORM, PH_MATMUL, PH_ATTENTION, PH_GELU, PH_CLASSIFIER, PH_UPDATE, PH_NUM };
static const char *const PHASE_NAMES[PH_NUM] = {"encoder", "layernorm", "matmul (+bias grad)", "attention",
                                                "gelu recompute", "classifier", "grad norm + adamw"};
#define PROF_MAX_EVENTS 8192
typedef struct {
    int active, n, dropped, steps;
    cudaEvent_t ev[PROF_MAX_EVENTS];
    int cat[PROF_MAX_EVENTS / 2];
    double total_ms[PH_NUM];
} Profiler;
static Profiler g_prof;

static void prof_init(void) {
    for (int i = 0; i < PROF_MAX_EVENTS; i++) CUDA_CHECK(cudaEventCreate(&g_prof.ev[i]));
}
static void prof_begin(cudaStream_t s) {
    if (!g_prof.active) return;
    if (g_prof.n + 2 > PROF_MAX_EVENTS) { g_prof.dropped++; return; }
    CUDA_CHECK(cudaEventRecord(g_prof.ev[g_prof.n], s));
}
static void prof_end(int cat, cudaStream_t s) {
    if (!g_prof.active) return;
    if (g_prof.n + 2 > PROF_MAX_EVENTS) return;
    CUDA_CHECK(cudaEventRecord(g_prof.ev[g_prof.n + 1], s));
    g_prof.cat[g_prof.n / 2] = cat;
    g_prof.n += 2;
}
// after the step's sync: add this step's phase times (count = 0: discard, e.g. warm-up)
static void prof_collect(int count) {
    for (int i = 0; count && i < g_prof.n; i += 2) {
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, g_prof.ev[i], g_prof.ev[i + 1]));
        g_prof.total_ms[g_prof.cat[i / 2]] += ms;
    }
    if (count) g_prof.steps++;
    g_prof.n = 0;
}
// -f: 1 flash attention, 0 plain attention, -1 (default) flash where it exists: the bf16
// and fp16 builds, head sizes 64 and 128.
#define FLASH_AUTO (-1)
// Flash is the default where it exists: it passed test_gpt2cu in the bf16 and fp16 builds
// at d12 on the H200, and keeps no T x T matrix (19 GB less at d12, B=64, T=1024).
#define FLASH_DEFAULT FLASH_AUTO
static int flash_supported(const GPT2Config *c) {
    int hs = c->channels / c->num_heads;
    return PRECISION != PRECISION_FP32 && (hs == 64 || hs == 128);
}

#define PROF(cat, call) do { prof_begin(s); call; prof_end(cat, s); } while (0)

// ----------------------------------------------------------------------------
// The model on the device

typedef struct {
    // per layer (L copies unless recomputed, see gpt2_alloc)
    floatX *ln1, *qkv, *att, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    // once
    floatX *encoded, *attproj, *fcproj, *lnf, *logits;
    float *lnf_mean, *lnf_rstd, *losses;
    // backward scratch, reused by every layer
    floatX *dresidual, *dln, *datty, *dfch, *dqkv;
    floatX *attn_scratch;  // plain attention's permuted q, k, v (NULL with flash attention)
    float *lse;            // flash attention: per layer log-sum-exp (L, B, NH, T) (NULL without)
    float *flash_scratch;  // flash attention backward: rowsum(dout * out) (B, NH, T)
    float *fscratch;  // fp32 partial sums (layernorm, bias, norm)
} Activations;

typedef struct {
    GPT2Config config;
    size_t param_sizes[NUM_PARAM_TENSORS], param_offsets[NUM_PARAM_TENSORS], num_params;
    floatX *params, *param[NUM_PARAM_TENSORS];  // device, checkpoint order
    floatX *grads, *grad[NUM_PARAM_TENSORS];
    float *master;                              // fp32 master weights (NULL: none)
    float *m, *v;                               // AdamW moments
    float *info;                                // device: [0] grad norm, [1] clip factor, [2] loss, [3] val loss
    int B, T, recompute;                        // activation capacity and recompute level
    int flash;                                  // 1: flash attention (see gpt2_build)
    float loss_scale;                           // S: backward computes d(S * loss); 1 unless fp16
    int loss_scale_good_steps;                  // steps since S last changed
    Activations acts;
    size_t act_bytes, scratch_bytes;
    // batch upload: device and two pinned host copies of
    // [inputs BT | targets BT | positions BT | bucket_token BT | bucket_start BT+1]
    int *d_io, *h_io[2], nb, io_next;
    cudaEvent_t io_done[2];
    int *bucket_counts;  // host scratch, vocab_size zeros
    int num_sms;
    cudaStream_t stream;
} GPT2;

static size_t io_ints(int B, int T) { return (size_t)5 * B * T + 1; }

static void gpt2_setup_layout(GPT2 *model) {
    gpt2_param_sizes(&model->config, model->param_sizes);
    model->num_params = 0;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        model->param_offsets[i] = model->num_params;
        model->num_params += model->param_sizes[i];
    }
}

// host fp32 -> device floatX
static void upload_params(floatX *dst, const float *src, size_t n) {
    const size_t chunk = 1 << 24;
    floatX *tmp = (floatX *)xmalloc(chunk * sizeof(floatX));
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
#if PRECISION == PRECISION_FP32
        memcpy(tmp, src + i, m * sizeof(float));
#elif PRECISION == PRECISION_FP16
        for (size_t j = 0; j < m; j++) tmp[j] = __float2half_rn(src[i + j]);
#else
        for (size_t j = 0; j < m; j++) {
            uint16_t h = float_to_bf16(src[i + j]);
            memcpy(&tmp[j], &h, 2);
        }
#endif
        CUDA_CHECK(cudaMemcpy(dst + i, tmp, m * sizeof(floatX), cudaMemcpyHostToDevice));
    }
    free(tmp);
}

// device floatX -> host fp32
static void download_floatX(float *dst, const floatX *src, size_t n) {
    const size_t chunk = 1 << 24;
    floatX *tmp = (floatX *)xmalloc(chunk * sizeof(floatX));
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        CUDA_CHECK(cudaMemcpy(tmp, src + i, m * sizeof(floatX), cudaMemcpyDeviceToHost));
#if PRECISION == PRECISION_FP32
        memcpy(dst + i, tmp, m * sizeof(float));
#elif PRECISION == PRECISION_FP16
        for (size_t j = 0; j < m; j++) dst[i + j] = __half2float(tmp[j]);
#else
        for (size_t j = 0; j < m; j++) {
            uint16_t h;
            memcpy(&h, &tmp[j], 2);
            dst[i + j] = bf16_to_float(h);
        }
#endif
    }
    free(tmp);
}

// Allocates everything on the device for micro-batches of up to (B, T) and uploads the
// parameters. use_master: keep fp32 master weights (bf16 build only).
// flash: 1 = flash attention (bf16/fp16 builds; no T x T matrix kept), 0 = the plain
// attention that stores the softmax matrix.
static void gpt2_build(GPT2 *model, const float *host_params, int B, int T, int recompute, int use_master, int flash) {
    const GPT2Config *c = &model->config;
    gpt2_setup_layout(model);
    size_t n = model->num_params;
    CUDA_CHECK(cudaStreamCreate(&model->stream));
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&model->num_sms, cudaDevAttrMultiProcessorCount, dev));
    matmul_init(model->stream);

    CUDA_CHECK(cudaMalloc(&model->params, n * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&model->grads, n * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(model->grads, 0, n * sizeof(floatX)));
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        model->param[i] = model->params + model->param_offsets[i];
        model->grad[i] = model->grads + model->param_offsets[i];
    }
    upload_params(model->params, host_params, n);
    model->master = NULL;
#if PRECISION != PRECISION_FP32
    if (use_master) {
        CUDA_CHECK(cudaMalloc(&model->master, n * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(model->master, host_params, n * sizeof(float), cudaMemcpyHostToDevice));
    }
#else
    (void)use_master;
#endif
    CUDA_CHECK(cudaMalloc(&model->m, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&model->v, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(model->m, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(model->v, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&model->info, 8 * sizeof(float)));
    CUDA_CHECK(cudaMemset(model->info, 0, 8 * sizeof(float)));

    // activations
    model->B = B;
    model->T = T;
    model->recompute = recompute;
    model->flash = flash;
    model->loss_scale = PRECISION == PRECISION_FP16 ? LOSS_SCALE_INIT : 1.0f;
    model->loss_scale_good_steps = 0;
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, BT = (size_t)B * T, Vp = c->padded_vocab_size;
    size_t Lgelu = recompute >= 1 ? 1 : L, Lln = recompute >= 2 ? 1 : L;
    size_t attn_elems = attention_backward_scratch_elems(B, T, (int)C, (int)NH);
    if (attention_forward_scratch_elems(B, T, (int)C) > attn_elems) attn_elems = attention_forward_scratch_elems(B, T, (int)C);
    size_t att_bytes = L * (size_t)B * NH * T * T * sizeof(floatX), lse_bytes = 0, flash_scratch_bytes = 0;
    if (flash) {
        att_bytes = 0;
        attn_elems = 0;
        lse_bytes = L * (size_t)B * NH * T * sizeof(float);
        flash_scratch_bytes = flash_attention_backward_scratch_elems(B, T, (int)NH) * sizeof(float);
    }
    size_t fscratch = layernorm_backward_scratch_floats((int)BT, (int)C, model->num_sms);
    if (bias_grad_scratch_floats(4 * (int)C) > fscratch) fscratch = bias_grad_scratch_floats(4 * (int)C);
    if ((size_t)NORM_BLOCKS > fscratch) fscratch = NORM_BLOCKS;

    struct { void **ptr; size_t bytes; } plan[] = {
        {(void **)&model->acts.ln1, Lln * BT * C * sizeof(floatX)},
        {(void **)&model->acts.ln1_mean, L * BT * sizeof(float)},
        {(void **)&model->acts.ln1_rstd, L * BT * sizeof(float)},
        {(void **)&model->acts.qkv, L * BT * 3 * C * sizeof(floatX)},
        {(void **)&model->acts.att, att_bytes},
        {(void **)&model->acts.lse, lse_bytes},
        {(void **)&model->acts.atty, L * BT * C * sizeof(floatX)},
        {(void **)&model->acts.residual2, L * BT * C * sizeof(floatX)},
        {(void **)&model->acts.ln2, Lln * BT * C * sizeof(floatX)},
        {(void **)&model->acts.ln2_mean, L * BT * sizeof(float)},
        {(void **)&model->acts.ln2_rstd, L * BT * sizeof(float)},
        {(void **)&model->acts.fch, L * BT * 4 * C * sizeof(floatX)},
        {(void **)&model->acts.fch_gelu, Lgelu * BT * 4 * C * sizeof(floatX)},
        {(void **)&model->acts.residual3, L * BT * C * sizeof(floatX)},
        {(void **)&model->acts.encoded, BT * C * sizeof(floatX)},
        {(void **)&model->acts.attproj, BT * C * sizeof(floatX)},
        {(void **)&model->acts.fcproj, BT * C * sizeof(floatX)},
        {(void **)&model->acts.lnf, BT * C * sizeof(floatX)},
        {(void **)&model->acts.lnf_mean, BT * sizeof(float)},
        {(void **)&model->acts.lnf_rstd, BT * sizeof(float)},
        {(void **)&model->acts.logits, BT * Vp * sizeof(floatX)},
        {(void **)&model->acts.losses, BT * sizeof(float)},
        // backward / scratch
        {(void **)&model->acts.dresidual, BT * C * sizeof(floatX)},
        {(void **)&model->acts.dln, BT * C * sizeof(floatX)},
        {(void **)&model->acts.datty, BT * C * sizeof(floatX)},
        {(void **)&model->acts.dfch, BT * 4 * C * sizeof(floatX)},
        {(void **)&model->acts.dqkv, BT * 3 * C * sizeof(floatX)},
        {(void **)&model->acts.attn_scratch, attn_elems * sizeof(floatX)},
        {(void **)&model->acts.flash_scratch, flash_scratch_bytes},
        {(void **)&model->acts.fscratch, fscratch * sizeof(float)},
    };
    const int first_scratch = 22;
    model->act_bytes = model->scratch_bytes = 0;
    for (int i = 0; i < (int)(sizeof plan / sizeof plan[0]); i++) {
        size_t bytes = (plan[i].bytes + 255) / 256 * 256;
        *plan[i].ptr = NULL;
        if (bytes == 0) continue;  // not used in this configuration
        CUDA_CHECK(cudaMalloc(plan[i].ptr, bytes));
        if (i < first_scratch) model->act_bytes += bytes;
        else model->scratch_bytes += bytes;
    }
    CUDA_CHECK(cudaMalloc(&model->d_io, io_ints(B, T) * sizeof(int)));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMallocHost(&model->h_io[i], io_ints(B, T) * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&model->io_done[i], cudaEventDisableTiming));
    }
    model->io_next = 0;
    model->nb = 0;
    model->bucket_counts = (int *)xcalloc((size_t)c->vocab_size, sizeof(int));
    CUDA_CHECK(cudaDeviceSynchronize());
}

static void gpt2_free(GPT2 *model) {
    Activations *a = &model->acts;
    void *ptrs[] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->att, a->atty, a->residual2, a->ln2, a->ln2_mean,
                    a->ln2_rstd, a->fch, a->fch_gelu, a->residual3, a->encoded, a->attproj, a->fcproj, a->lnf,
                    a->lnf_mean, a->lnf_rstd, a->logits, a->losses, a->dresidual, a->dln, a->datty, a->dfch,
                    a->dqkv, a->attn_scratch, a->lse, a->flash_scratch, a->fscratch, model->params, model->grads, model->master, model->m,
                    model->v, model->info, model->d_io};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
    for (int i = 0; i < 2; i++) { cudaFreeHost(model->h_io[i]); cudaEventDestroy(model->io_done[i]); }
    free(model->bucket_counts);
    matmul_free();
    cudaStreamDestroy(model->stream);
}

// Copies a micro-batch to the device (asynchronously, from pinned memory), with the
// per-token position buckets the deterministic embedding backward uses. targets may be
// NULL. The host waits only for the copy issued two uploads earlier.
static void gpt2_upload_batch(GPT2 *model, const int *inputs, const int *targets, int B, int T) {
    int V = model->config.vocab_size;
    size_t BT = (size_t)B * T;
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) fatal("token id %d at position %zu is outside the vocabulary (%d)", inputs[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V)) fatal("target id %d at position %zu is outside the vocabulary (%d)", targets[i], i, V);
    }
    int k = model->io_next;
    model->io_next ^= 1;
    CUDA_CHECK(cudaEventSynchronize(model->io_done[k]));
    int *h = model->h_io[k];
    size_t cap = (size_t)model->B * model->T;
    memcpy(h, inputs, BT * sizeof(int));
    if (targets) memcpy(h + cap, targets, BT * sizeof(int));
    model->nb = encoder_build_buckets(inputs, (int)BT, V, model->bucket_counts, h + 2 * cap, h + 3 * cap, h + 4 * cap);
    CUDA_CHECK(cudaMemcpyAsync(model->d_io, h, io_ints(model->B, model->T) * sizeof(int), cudaMemcpyHostToDevice, model->stream));
    CUDA_CHECK(cudaEventRecord(model->io_done[k], model->stream));
}

// Forward over the uploaded inputs (B, T), B <= capacity, T == capacity T. Leaves the
// logits in acts.logits (B*T, Vp).
static void gpt2_forward(GPT2 *model, int B, int T) {
    const GPT2Config *c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    if (B > model->B || T != model->T) fatal("internal: forward with B=%d T=%d, allocated B=%d T=%d", B, T, model->B, model->T);
    cudaStream_t s = model->stream;
    Activations *a = &model->acts;
    floatX **p = model->param;
    size_t cap = (size_t)model->B * model->T, N = (size_t)B * T;
    size_t attcap = (size_t)model->B * NH * T * T;
    int r = model->recompute;
    const int *inputs = model->d_io;

    PROF(PH_ENCODER, encoder_forward(a->encoded, inputs, p[P_WTE], p[P_WPE], B, T, C, s));
    PROF(PH_LAYERNORM, layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, p[P_LN1W], p[P_LN1B], (int)N, C, s));
    for (int l = 0; l < L; l++) {
        floatX *ln1 = a->ln1 + (r >= 2 ? 0 : l * cap * C);
        floatX *qkv = a->qkv + l * cap * 3 * C, *att = a->att + l * attcap, *atty = a->atty + l * cap * C;
        floatX *residual2 = a->residual2 + l * cap * C, *ln2 = a->ln2 + (r >= 2 ? 0 : l * cap * C);
        floatX *fch = a->fch + l * cap * 4 * C, *fch_gelu = a->fch_gelu + (r >= 1 ? 0 : l * cap * 4 * C);
        floatX *residual3 = a->residual3 + l * cap * C;
        const floatX *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * cap * C;

        PROF(PH_MATMUL, matmul_forward(qkv, NULL, ln1, p[P_QKVW] + (size_t)l * 3 * C * C, p[P_QKVB] + l * 3 * C, (int)N, C, 3 * C, s));
        if (model->flash) PROF(PH_ATTENTION, flash_attention_forward(atty, a->lse + (size_t)l * model->B * NH * T, qkv, B, T, C, NH, s));
        else PROF(PH_ATTENTION, attention_forward(atty, att, qkv, a->attn_scratch, B, T, C, NH, s));
        PROF(PH_MATMUL, matmul_forward(a->attproj, NULL, atty, p[P_ATTPROJW] + (size_t)l * C * C, p[P_ATTPROJB] + l * C, (int)N, C, C, s));
        PROF(PH_LAYERNORM, fused_residual_layernorm_forward(residual2, ln2, a->ln2_mean + l * cap, a->ln2_rstd + l * cap, residual,
                                         a->attproj, p[P_LN2W] + l * C, p[P_LN2B] + l * C, (int)N, C, s));
        PROF(PH_MATMUL, matmul_forward(fch_gelu, fch, ln2, p[P_FCW] + (size_t)l * 4 * C * C, p[P_FCB] + l * 4 * C, (int)N, C, 4 * C, s));
        PROF(PH_MATMUL, matmul_forward(a->fcproj, NULL, fch_gelu, p[P_FCPROJW] + (size_t)l * C * 4 * C, p[P_FCPROJB] + l * C, (int)N, 4 * C, C, s));
        // the residual add, fused with the next layernorm (the next layer's ln1, or lnf)
        prof_begin(s);
        if (l + 1 < L) {
            floatX *ln1_next = a->ln1 + (r >= 2 ? 0 : (l + 1) * cap * C);
            fused_residual_layernorm_forward(residual3, ln1_next, a->ln1_mean + (l + 1) * cap, a->ln1_rstd + (l + 1) * cap,
                                             residual2, a->fcproj, p[P_LN1W] + (l + 1) * C, p[P_LN1B] + (l + 1) * C, (int)N, C, s);
        } else {
            fused_residual_layernorm_forward(residual3, a->lnf, a->lnf_mean, a->lnf_rstd, residual2, a->fcproj,
                                             p[P_LNFW], p[P_LNFB], (int)N, C, s);
        }
        prof_end(PH_LAYERNORM, s);
    }
    PROF(PH_MATMUL, matmul_forward(a->logits, NULL, a->lnf, p[P_WTE], NULL, (int)N, C, Vp, s));  // lm_head tied to wte
}

// Loss of the last forward over the uploaded targets: adds loss_scale * sum of the
// per-position losses to *loss_acc (device). With write_grad, the logits are replaced by
// d(S * loss_scale * sum of losses)/d(logits), ready for gpt2_backward (S: model->loss_scale).
static void gpt2_loss(GPT2 *model, float *loss_acc, float loss_scale, int write_grad, int B, int T) {
    const GPT2Config *c = &model->config;
    int N = B * T;
    size_t cap = (size_t)model->B * model->T;
    cudaStream_t s = model->stream;
    prof_begin(s);
    fused_classifier(model->acts.logits, model->acts.losses, model->d_io + cap, loss_scale * model->loss_scale, write_grad, N,
                     c->vocab_size, c->padded_vocab_size, model->stream);
    loss_accumulate(loss_acc, model->acts.losses, N, loss_scale, model->stream);
    prof_end(PH_CLASSIFIER, s);
}

// Backward of the last forward at full capacity (B, T), after gpt2_loss(write_grad=1).
// Gradients accumulate into model->grads.
static void gpt2_backward(GPT2 *model) {
    const GPT2Config *c = &model->config;
    int B = model->B, T = model->T, L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t N = (size_t)B * T, attsz = (size_t)B * NH * T * T;
    cudaStream_t s = model->stream;
    Activations *a = &model->acts;
    floatX **p = model->param, **g = model->grad;
    float *fs = a->fscratch;
    int r = model->recompute, sms = model->num_sms;

    // lm_head: dlnf = dlogits @ wte; dwte += dlogits^T @ lnf
    PROF(PH_MATMUL, matmul_backward(a->dln, g[P_WTE], NULL, fs, a->logits, a->lnf, p[P_WTE], NULL, (int)N, C, Vp, s));
    CUDA_CHECK(cudaMemsetAsync(a->dresidual, 0, N * C * sizeof(floatX), s));
    PROF(PH_LAYERNORM, layernorm_backward(a->dresidual, g[P_LNFW], g[P_LNFB], fs, a->dln, a->residual3 + (L - 1) * N * C, p[P_LNFW],
                       a->lnf_mean, a->lnf_rstd, (int)N, C, sms, s));

    // dresidual carries the gradient of the residual stream down through the layers
    for (int l = L - 1; l >= 0; l--) {
        const floatX *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * N * C;
        floatX *ln1 = a->ln1 + (r >= 2 ? 0 : l * N * C), *qkv = a->qkv + l * N * 3 * C, *atty = a->atty + l * N * C;
        floatX *att = a->att + l * attsz, *residual2 = a->residual2 + l * N * C, *ln2 = a->ln2 + (r >= 2 ? 0 : l * N * C);
        floatX *fch = a->fch + l * N * 4 * C, *fch_gelu = a->fch_gelu + (r >= 1 ? 0 : l * N * 4 * C);
        float *ln1_mean = a->ln1_mean + l * N, *ln1_rstd = a->ln1_rstd + l * N;
        float *ln2_mean = a->ln2_mean + l * N, *ln2_rstd = a->ln2_rstd + l * N;

        // recompute what forward did not keep
        if (r >= 1) PROF(PH_GELU, gelu_forward(fch_gelu, fch, (long)N * 4 * C, s));
        if (r >= 2) PROF(PH_LAYERNORM, layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p[P_LN2W] + l * C, p[P_LN2B] + l * C, (int)N, C, s));

        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        PROF(PH_MATMUL, matmul_backward(a->dfch, g[P_FCPROJW] + (size_t)l * C * 4 * C, g[P_FCPROJB] + l * C, fs, a->dresidual, fch_gelu,
                        p[P_FCPROJW] + (size_t)l * C * 4 * C, fch, (int)N, 4 * C, C, s));  // dfch includes gelu'
        PROF(PH_MATMUL, matmul_backward(a->dln, g[P_FCW] + (size_t)l * 4 * C * C, g[P_FCB] + l * 4 * C, fs, a->dfch, ln2,
                        p[P_FCW] + (size_t)l * 4 * C * C, NULL, (int)N, C, 4 * C, s));
        PROF(PH_LAYERNORM, layernorm_backward(a->dresidual, g[P_LN2W] + l * C, g[P_LN2B] + l * C, fs, a->dln, residual2, p[P_LN2W] + l * C,
                           ln2_mean, ln2_rstd, (int)N, C, sms, s));

        // attention: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        if (r >= 2) PROF(PH_LAYERNORM, layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p[P_LN1W] + l * C, p[P_LN1B] + l * C, (int)N, C, s));
        PROF(PH_MATMUL, matmul_backward(a->datty, g[P_ATTPROJW] + (size_t)l * C * C, g[P_ATTPROJB] + l * C, fs, a->dresidual, atty,
                        p[P_ATTPROJW] + (size_t)l * C * C, NULL, (int)N, C, C, s));
        if (model->flash)
            PROF(PH_ATTENTION, flash_attention_backward(a->dqkv, a->datty, qkv, atty, a->lse + (size_t)l * B * NH * T,
                                                        a->flash_scratch, B, T, C, NH, s));
        else PROF(PH_ATTENTION, attention_backward(a->dqkv, a->datty, qkv, att, a->attn_scratch, B, T, C, NH, s));
        PROF(PH_MATMUL, matmul_backward(a->dln, g[P_QKVW] + (size_t)l * 3 * C * C, g[P_QKVB] + l * 3 * C, fs, a->dqkv, ln1,
                        p[P_QKVW] + (size_t)l * 3 * C * C, NULL, (int)N, C, 3 * C, s));
        PROF(PH_LAYERNORM, layernorm_backward(a->dresidual, g[P_LN1W] + l * C, g[P_LN1B] + l * C, fs, a->dln, residual, p[P_LN1W] + l * C,
                           ln1_mean, ln1_rstd, (int)N, C, sms, s));
    }
    int cap = B * T;
    PROF(PH_ENCODER, encoder_backward(g[P_WTE], g[P_WPE], a->dresidual, model->d_io + 2 * cap, model->d_io + 3 * cap,
                     model->d_io + 4 * cap, model->nb, B, T, C, s));
}

static void gpt2_zero_grad(GPT2 *model) {
    CUDA_CHECK(cudaMemsetAsync(model->grads, 0, model->num_params * sizeof(floatX), model->stream));
}

// Global norm, clip factor and AdamW, all on the device (t counts from 1). The loss of
// the step must already be in info[2]; a non-finite loss or norm skips the update there.
static void gpt2_update(GPT2 *model, const AdamWConfig *h, int t) {
    cudaStream_t s = model->stream;
    prof_begin(s);
    global_norm(model->info, model->acts.fscratch, model->grads, model->num_params, h->grad_clip,
                1.0f / model->loss_scale, s);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        size_t off = model->param_offsets[k];
        float wd = gpt2_param_is_decayed(k) ? h->weight_decay : 0.0f;
        uint32_t seed = (uint32_t)(t * 0x9E3779B1u) ^ (uint32_t)(k * 0x85EBCA77u);
        adamw_update(model->params + off, model->master ? model->master + off : NULL, model->grads + off,
                     model->m + off, model->v + off, model->param_sizes[k], h->lr, h->beta1, h->beta2, t, h->eps, wd,
                     model->info, seed, s);
    }
    prof_end(PH_UPDATE, s);
}

#ifndef TESTING
// ----------------------------------------------------------------------------
// Sampling: row 0 of a B=1 forward holds the text so far (padded with EOT; attention is
// causal, so the padding does not change the logits at the last real position).

static void gpt2_sample(GPT2 *model, const Tokenizer *tok, const char *prompt, int gen_tokens, float temperature,
                        uint64_t *rng, Logger *lg) {
    int T = model->T, V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int *ids = (int *)xmalloc((size_t)T * sizeof(int));
    for (int i = 0; i < T; i++) ids[i] = GPT2_EOT;
    int n = 1;
    if (prompt && *prompt) {
        TokenVec tv = {0};
        tokenizer_encode(tok, (const uint8_t *)prompt, strlen(prompt), &tv);
        for (size_t i = 0; i < tv.len && n < T; i++) ids[n++] = (int)tv.data[i];
        tokenvec_free(&tv);
    }
    floatX *row = (floatX *)xmalloc((size_t)Vp * sizeof(floatX));
    float *probs = (float *)xmalloc((size_t)V * sizeof(float));
    for (int step = 0; step < gen_tokens && n < T; step++) {
        gpt2_upload_batch(model, ids, NULL, 1, T);
        gpt2_forward(model, 1, T);
        CUDA_CHECK(cudaMemcpyAsync(row, model->acts.logits + (size_t)(n - 1) * Vp, (size_t)Vp * sizeof(floatX),
                                   cudaMemcpyDeviceToHost, model->stream));
        CUDA_CHECK(cudaStreamSynchronize(model->stream));
        for (int v = 0; v < V; v++) probs[v] = to_float(row[v]);
        ids[n++] = sample_from_logits(probs, probs, V, temperature, rng);
    }
    log_sample(lg, tok, ids, n);
    free(row);
    free(probs);
    free(ids);
}

// ----------------------------------------------------------------------------
// Checkpoints: <dir>/model_<step>.bin (the model: fp32 v3 in the fp32 build, bf16 v5 in
// the bf16 build, i.e. exactly the parameters trained) and <dir>/state_<step>.bin
// (AdamW moments, fp32 master weights, step, RNG, data loader position). The state is
// written last, so a step whose state file exists has a complete checkpoint.

static void save_checkpoint(GPT2 *model, DataLoader *loader, const char *dir, int step, uint64_t rng) {
    char mp[4096], sp[4096];
    checkpoint_paths(dir, step, mp, sp, sizeof mp);
    size_t n = model->num_params;
    CUDA_CHECK(cudaStreamSynchronize(model->stream));
    float *host = (float *)xmalloc(n * sizeof(float));
    download_floatX(host, model->params, n);
    gpt2_checkpoint_write(mp, &model->config, host, PRECISION == PRECISION_BF16);
    TrainState s;
    memset(&s, 0, sizeof s);
    s.step = step;
    s.world_size = 1;
    s.rng = rng;
    s.loss_scale = model->loss_scale;
    s.loss_scale_good_steps = model->loss_scale_good_steps;
    DataLoaderPos pos = dataloader_get_pos(loader);
    memcpy(s.loader_pos, &pos, sizeof pos);
    s.loader_pos_bytes = (int)sizeof pos;
    s.n = n;
    s.m = (float *)xmalloc(n * sizeof(float));
    s.v = (float *)xmalloc(n * sizeof(float));
    CUDA_CHECK(cudaMemcpy(s.m, model->m, n * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(s.v, model->v, n * sizeof(float), cudaMemcpyDeviceToHost));
    s.master = NULL;
    if (model->master) {
        s.master = host;  // reuse the buffer
        CUDA_CHECK(cudaMemcpy(s.master, model->master, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    train_state_write(sp, &s);
    free(s.m);
    free(s.v);
    free(host);
}

static void load_checkpoint(GPT2 *model, DataLoader *loader, const char *dir, int step, uint64_t *rng) {
    char mp[4096], sp[4096];
    checkpoint_paths(dir, step, mp, sp, sizeof mp);
    GPT2Config cfg;
    float *params = gpt2_checkpoint_read(mp, &cfg);
    if (memcmp(&cfg, &model->config, sizeof cfg) != 0)
        fatal("%s holds a different model shape than -e gave; resume with the same model", mp);
    size_t n = model->num_params;
    upload_params(model->params, params, n);
    TrainState s;
    memset(&s, 0, sizeof s);
    s.world_size = 1;
    s.loader_pos_bytes = (int)sizeof(DataLoaderPos);
    s.n = n;
    s.m = (float *)xmalloc(n * sizeof(float));
    s.v = (float *)xmalloc(n * sizeof(float));
    s.master = model->master ? params : NULL;  // reuse the buffer
    train_state_read(sp, &s);
    CUDA_CHECK(cudaMemcpy(model->m, s.m, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(model->v, s.v, n * sizeof(float), cudaMemcpyHostToDevice));
    if (model->master) CUDA_CHECK(cudaMemcpy(model->master, s.master, n * sizeof(float), cudaMemcpyHostToDevice));
    DataLoaderPos pos;
    memcpy(&pos, s.loader_pos, sizeof pos);
    dataloader_set_pos(loader, pos);
    *rng = s.rng;
    if (PRECISION == PRECISION_FP16) {
        if (!(s.loss_scale > 0.0f) || !isfinite(s.loss_scale)) fatal("%s: bad loss scale %g", sp, s.loss_scale);
        model->loss_scale = s.loss_scale;
        model->loss_scale_good_steps = s.loss_scale_good_steps;
    }
    free(s.m);
    free(s.v);
    free(params);
}

// ----------------------------------------------------------------------------
// Main

static float evaluate(GPT2 *model, DataLoader *val, int max_batches, int *inputs, int *targets) {
    dataloader_reset(val);
    int64_t n = dataloader_batches_per_epoch(val);
    if (max_batches > 0 && n > max_batches) n = max_batches;
    int B = model->B, T = model->T;
    float *acc = model->info + 3;
    CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(float), model->stream));
    for (int64_t i = 0; i < n; i++) {
        dataloader_next(val, inputs, targets);
        gpt2_upload_batch(model, inputs, targets, B, T);
        gpt2_forward(model, B, T);
        gpt2_loss(model, acc, 1.0f / ((float)B * T * (float)n), 0, B, T);
    }
    float loss;
    CUDA_CHECK(cudaMemcpyAsync(&loss, acc, sizeof(float), cudaMemcpyDeviceToHost, model->stream));
    CUDA_CHECK(cudaStreamSynchronize(model->stream));
    return loss;
}

static size_t device_used_bytes(void) {
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

int main(int argc, char **argv) {
    TrainOptions o;
    train_options_defaults(&o, 1024);
    int recompute = 1, flash = FLASH_DEFAULT, master_weights = 1, zero_stage = 0, fuse_gelu = 1, profile = 0;
    float skip_loss_z = 0.0f, skip_norm_z = 0.0f;
    ArgSpec specs[TRAIN_OPTIONS_COUNT + 8];
    int nspecs = train_options_specs(&o, specs);
    specs[nspecs++] = arg_spec("-r", "--recompute", ARG_INT, &recompute, "recompute in backward: 0 none, 1 GELU, 2 GELU+layernorm");
    specs[nspecs++] = arg_spec("-f", "--flash-attention", ARG_INT, &flash, "1: flash attention (bf16/fp16 builds, head size 64 or 128), 0: attention that stores the T x T matrix, -1: flash where supported");
    specs[nspecs++] = arg_spec("-w", "--master-weights", ARG_INT, &master_weights, "1: keep fp32 master weights (bf16/fp16 builds)");
    specs[nspecs++] = arg_spec("-z", "--zero-stage", ARG_INT, &zero_stage, "ZeRO stage (single GPU: 0 only for now)");
    specs[nspecs++] = arg_spec("-sl", "--skip-loss-z", ARG_FLOAT, &skip_loss_z, "skip updates whose loss z-score exceeds this (not implemented yet; 0 only)");
    specs[nspecs++] = arg_spec("-sg", "--skip-norm-z", ARG_FLOAT, &skip_norm_z, "skip updates whose grad-norm z-score exceeds this (not implemented yet; 0 only)");
    specs[nspecs++] = arg_spec(NULL, "--fuse-gelu", ARG_INT, &fuse_gelu, "1: GELU in the cuBLASLt epilogue, 0: separate kernel");
    specs[nspecs++] = arg_spec(NULL, "--profile", ARG_INT, &profile, "1: time each phase of the step with CUDA events, print a table at the end");
    args_parse(argc, argv, specs, nspecs,
               "usage: train_gpt2cu [options]\n\nTrains GPT-2 on one NVIDIA GPU (" PRECISION_NAME " build).");

    // validate everything before any GPU work
    train_options_validate(&o);
    const int B = o.B, T = o.T;
    if (recompute < 0 || recompute > 2) fatal("-r (recompute) must be 0, 1 or 2, got %d", recompute);
    if (flash < -1 || flash > 1) fatal("-f must be -1, 0 or 1");
    if (flash == 1 && PRECISION == PRECISION_FP32) fatal("-f 1: flash attention needs the bf16 or fp16 build (make PRECISION=BF16); use -f 0");
    if (master_weights != 0 && master_weights != 1) fatal("-w must be 0 or 1");
    if (zero_stage != 0) fatal("-z %d: ZeRO needs several GPUs (multi-GPU is not implemented yet); use -z 0", zero_stage);
    if (skip_loss_z != 0 || skip_norm_z != 0) fatal("-sl/-sg: outlier skipping is not implemented yet; use 0");
    if (fuse_gelu != 0 && fuse_gelu != 1) fatal("--fuse-gelu must be 0 or 1");
    if (profile != 0 && profile != 1) fatal("--profile must be 0 or 1");
    GPT2 model;
    memset(&model, 0, sizeof model);
    GPT2Config cfg;
    float *host_params = gpt2_params_from_model_arg(o.model_arg, T, (uint64_t)o.seed, &cfg);
    model.config = cfg;
    if (flash == FLASH_AUTO) flash = flash_supported(&cfg);
    if (flash && !flash_supported(&cfg))
        fatal("-e %s: flash attention supports head sizes 64 and 128, this model's is %d; use -f 0", o.model_arg,
              cfg.channels / cfg.num_heads);
    if (cfg.channels % 8 || (cfg.channels / cfg.num_heads) % 8)
        fatal("-e %s: channels (%d) and head size (%d) must be multiples of 8 for the GPU kernels", o.model_arg,
              cfg.channels, cfg.channels / cfg.num_heads);

    TrainData data;
    train_data_open(&data, &o, cfg.vocab_size);
    const int accum = data.accum, max_steps = data.max_steps;
    AdamWConfig opt = {o.lr, 0.9f, 0.95f, 1e-8f, o.weight_decay, o.grad_clip};
    int resume_step = -1;
    if (o.resume) {
        resume_step = latest_checkpoint_step(o.out_dir);
        if (resume_step < 0) fatal("-y 1: no checkpoint (state_*.bin) found in %s", o.out_dir);
        char mp[4096], sp[4096];
        checkpoint_paths(o.out_dir, resume_step, mp, sp, sizeof mp);
        if (!file_exists(mp)) fatal("-y 1: %s has %s but not %s", o.out_dir, sp, mp);
    }

    // GPU from here on
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count < 1) fatal("no CUDA device found");
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    size_t used0 = device_used_bytes();
    g_fuse_gelu = fuse_gelu;
    gpt2_build(&model, host_params, B, T, recompute, master_weights, flash);
    free(host_params);

    double mib = 1.0 / (1024.0 * 1024.0);
    size_t np = model.num_params;
    printf("device: %s, %d SMs, %.0f MiB; precision %s\n", prop.name, prop.multiProcessorCount,
           prop.totalGlobalMem * mib, PRECISION_NAME);
    printf("model: L=%d H=%d C=%d maxT=%d V=%d (padded %d), %.2fM parameters\n", cfg.num_layers, cfg.num_heads,
           cfg.channels, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size, gpt2_num_real_params(&cfg) / 1e6);
    printf("memory: parameters %.0f MiB, gradients %.0f MiB, master weights %.0f MiB, AdamW moments %.0f MiB, "
           "activations %.0f MiB, scratch %.0f MiB, cuBLAS workspace %.0f MiB; in use after setup %.0f MiB\n",
           np * sizeof(floatX) * mib, np * sizeof(floatX) * mib, model.master ? np * 4 * mib : 0.0, np * 8 * mib,
           model.act_bytes * mib, model.scratch_bytes * mib, CUBLASLT_WORKSPACE_BYTES * mib,
           (device_used_bytes() - used0) * mib);
    printf("training: B=%d T=%d, %d micro-steps per step (%d tokens), %d steps, lr %g (%s), recompute %d, gelu %s%s\n",
           B, T, accum, o.total_batch, max_steps, o.lr, o.sched_name, recompute, g_fuse_gelu ? "fused" : "separate",
           PRECISION == PRECISION_FP16 ? ", dynamic loss scaling" : "");

    uint64_t rng = rng_seed((uint64_t)o.seed ^ 0x5eedULL);
    int start_step = 0;
    if (o.resume) {
        int step = resume_step;
        load_checkpoint(&model, &data.train, o.out_dir, step, &rng);
        start_step = step;
        printf("resumed from %s at step %d\n", o.out_dir, step);
    }
    Logger lg;
    logger_init(&lg, o.out_dir, o.resume);

    int *inputs = (int *)xmalloc((size_t)B * T * sizeof(int));
    int *targets = (int *)xmalloc((size_t)B * T * sizeof(int));
    double flops_per_step = gpt2_flops_per_token(&cfg, T) * o.total_batch;
    float loss_scale = 1.0f / ((float)B * T * accum);  // mean over positions and micro-steps
    if (o.overfit) dataloader_next(&data.train, inputs, targets);
    size_t peak_used = device_used_bytes();
    if (profile) prof_init();
    double sum_dt = 0.0;
    int timed_steps = 0;
    for (int step = start_step; step < max_steps; step++) {
        double t0 = wall_seconds();
        g_prof.active = profile;
        // forward and backward over the micro-steps, gradients accumulating
        gpt2_zero_grad(&model);
        CUDA_CHECK(cudaMemsetAsync(model.info + 2, 0, sizeof(float), model.stream));
        for (int micro = 0; micro < accum; micro++) {
            if (!o.overfit) dataloader_next(&data.train, inputs, targets);
            gpt2_upload_batch(&model, inputs, targets, B, T);
            gpt2_forward(&model, B, T);
            gpt2_loss(&model, model.info + 2, loss_scale, 1, B, T);
            gpt2_backward(&model);
        }
        // clip and update (skipped on the device if the loss or the norm is not finite)
        opt.lr = lr_at_step(&data.sched, step);
        gpt2_update(&model, &opt, step + 1);
        float info[3];
        CUDA_CHECK(cudaMemcpyAsync(info, model.info, 3 * sizeof(float), cudaMemcpyDeviceToHost, model.stream));
        CUDA_CHECK(cudaStreamSynchronize(model.stream));  // the step's one host sync
        double dt = wall_seconds() - t0;
        if (profile) { prof_collect(step > start_step); g_prof.active = 0; }
        float loss = info[2], norm = info[0];
        if (step - start_step >= 10) { sum_dt += dt; timed_steps++; }  // steady state: from the 11th step on
        logger_printf(&lg, "step %5d/%d | loss %.6f | norm %.4f | lr %.3e | %.1f ms | %.0f tok/s | MFU %.1f%%\n",
                      step + 1, max_steps, loss, norm, opt.lr, dt * 1e3, o.total_batch / dt,
                      100.0 * flops_per_step / dt / GPU_PEAK_FLOPS_BF16);
        if (!isfinite(loss) || !isfinite(norm))
            logger_printf(&lg, "warning: step %d: non-finite %s; update skipped\n", step + 1, isfinite(loss) ? "gradient norm" : "loss");
        if (PRECISION == PRECISION_FP16) {  // dynamic loss scaling
            if (!isfinite(norm) && isfinite(loss)) {
                model.loss_scale = fmaxf(model.loss_scale * 0.5f, 1.0f);
                model.loss_scale_good_steps = 0;
                logger_printf(&lg, "loss scale halved to %g\n", model.loss_scale);
            } else if (isfinite(norm) && ++model.loss_scale_good_steps >= LOSS_SCALE_WINDOW) {
                model.loss_scale = fminf(model.loss_scale * 2.0f, 16777216.0f);
                model.loss_scale_good_steps = 0;
            }
        }
        if (step == start_step) { size_t u = device_used_bytes(); if (u > peak_used) peak_used = u; }

        int last = step + 1 == max_steps;
        if (data.have_val && ((o.val_every > 0 && (step + 1) % o.val_every == 0) || last)) {
            float vl = evaluate(&model, &data.val, o.val_batches, inputs, targets);
            logger_printf(&lg, "val loss %.6f (step %d)\n", vl, step + 1);
        }
        if (o.gen_tokens > 0 && ((o.sample_every > 0 && (step + 1) % o.sample_every == 0) || last))
            gpt2_sample(&model, &data.tok, o.prompt, o.gen_tokens, o.temperature, &rng, &lg);
        if (o.out_dir && ((o.ckpt_every > 0 && (step + 1) % o.ckpt_every == 0) || last)) {
            save_checkpoint(&model, &data.train, o.out_dir, step + 1, rng);
            printf("checkpoint written: %s/model_%08d.bin\n", o.out_dir, step + 1);
        }
    }
    size_t u = device_used_bytes();
    if (u > peak_used) peak_used = u;
    if (timed_steps > 0)
        printf("mean over steps %d..%d: %.1f ms/step, %.0f tok/s, MFU %.1f%%\n", start_step + 11, max_steps,
               1e3 * sum_dt / timed_steps, o.total_batch * timed_steps / sum_dt,
               100.0 * flops_per_step * timed_steps / sum_dt / GPU_PEAK_FLOPS_BF16);
    if (profile && g_prof.steps > 0) {
        double sum = 0.0;
        printf("profile: mean ms per step over %d steps (CUDA events; excludes the first step)%s\n", g_prof.steps,
               g_prof.dropped ? " [some phases dropped: event pool full]" : "");
        for (int i = 0; i < PH_NUM; i++) {
            printf("  %-22s %8.2f ms\n", PHASE_NAMES[i], g_prof.total_ms[i] / g_prof.steps);
            sum += g_prof.total_ms[i] / g_prof.steps;
        }
        printf("  %-22s %8.2f ms\n", "sum of phases", sum);
    }
    printf("device memory in use at peak (cudaMemGetInfo, this process and context): %.0f MiB\n", (peak_used - used0) * mib);
    free(inputs);
    free(targets);
    logger_close(&lg);
    train_data_close(&data);
    gpt2_free(&model);
    return 0;
}
#endif // TESTING
