// gpu/model.cuh: GPT-2 on one GPU: its configuration, parameters, gradients, activations and
// stream (GPT2), and its forward, loss and backward, each a plain sequence of the kernels of
// kernels/<layer>.cuh. Parameters are floatX (bf16, fp16 or fp32, chosen at build time with
// -DPRECISION), one contiguous buffer in checkpoint order (common/checkpoint.h), or under -z 3
// wte, wpe, lnf and a few layers' slots that gpu/zero3.cuh fills ahead of use (ParamHooks);
// gradients likewise, or under ZeRO-2 and -3 two layers' slots that the backward reuses (the
// data-parallel reduction empties a slot while the layer below fills the other). The model reads its
// micro-batch from the device (DeviceBatch, filled by gpu/batch.cuh) and tells whoever consumes its gradients when a
// layer's may be written and when they are final (GradHooks: gpu/data_parallel.cuh). Its
// linear layers run as gpu/linear.cuh's table wires them (gpt2_linear_forward / _backward),
// with the model's matmul modes (GELU fusion, tuning: MatmulModes), which every matmul of
// the model reads and the trainer sets.
#pragma once
#include "../common/checkpoint.h"
#include "../kernels/common.cuh"
#include "../kernels/encoder.cuh"
#include "../kernels/layernorm.cuh"
#include "../kernels/matmul.cuh"
#include "../kernels/attention.cuh"
#include "../kernels/gelu.cuh"
#include "../kernels/classifier.cuh"
#include "activations.cuh"
#include "linear.cuh"
#include "fp8_layers.cuh"

// What the model reads of the batch on the device. A CUDA graph replays for every batch:
// there nb is the most buckets a batch can have (the encoder backward's grid) and
// bucket_count the count on the device; else nb is the batch's and bucket_count NULL.
typedef struct {
    const int *inputs, *targets, *positions, *bucket_token, *bucket_start, *bucket_count;
    int nb;
} DeviceBatch;

// What the backward tells the consumer of its gradients: before it writes layer l's (l = -1:
// wte, wpe and lnf's) and once they are final. NULL functions: nobody to tell.
typedef struct {
    void (*writable)(void *ctx, int l);
    void (*final)(void *ctx, int l);
    void *ctx;
} GradHooks;

// Under -z 3 the model holds its parameters in slots (param_slots) that their owner fills
// (gpu/zero3.cuh): before the forward or backward reads layer l's (l = -1: wte, wpe and
// lnf's) it asks for them with need(ctx, l, next); next (-1: none) is the layer it reads
// after l, which the owner may start fetching.
typedef struct {
    void (*need)(void *ctx, int l, int next);
    void *ctx;
} ParamHooks;

// the most layer slots a buffer of parameters or gradients has
#define MODEL_MAX_SLOTS 3

// What a model is built for, beyond its configuration: the micro-batch capacity (B, T), what
// its activations keep (-r), its attention, how its parameters and gradients are held
// (whole, or in layer slots that their owner fills or empties), and its GELU's fusion
typedef struct {
    int B, T;
    int recompute;      // 0 none, 1 GELU, 2 GELU and layernorms, 3 the whole block
    int flash;          // 1 flash attention, 0 plain
    int deterministic;  // every kernel sums in a fixed order
    int param_slots;    // -z 3: the layer slots of the parameters (0: every tensor whole)
    int grad_slots;     // ZeRO-2 and -3 over several ranks: 2 layer slots of gradients (0: whole)
    int fuse_gelu;      // GELU in the matmuls' epilogues (-ge: MatmulModes' first value)
    int tf32;           // the fp32 build's products with TF32 inputs (-f 1)
} GPT2Shape;

typedef struct {
    GPT2Config config;
    size_t param_sizes[NUM_PARAM_TENSORS], param_offsets[NUM_PARAM_TENSORS], num_params;
    // parameters: every tensor whole, in checkpoint order; or with param_slots (-z 3: 2, or 3
    // with --prefetch-layers 2) wte, wpe, lnf whole and the per-layer tensors' slices of that
    // many layers, layer l in slot l % param_slots (param_at), filled through param_hooks
    floatX *params, *param[NUM_PARAM_TENSORS];
    size_t param_elems;
    int param_slots;
    floatX *param_slot[MODEL_MAX_SLOTS];
    ParamHooks param_hooks;
    // gradients: every tensor whole, or with grad_slots (2: ZeRO-2 and -3 over several ranks)
    // slots laid out as the parameters' (grad_at); slot_offsets: each per-layer tensor's place in a slot
    floatX *grads, *grad[NUM_PARAM_TENSORS];
    size_t grad_elems;
    int grad_slots;
    floatX *grad_slot[MODEL_MAX_SLOTS];
    size_t slot_offsets[NUM_PARAM_TENSORS], slot_elems;
    Activations acts;
    size_t act_bytes, scratch_bytes;  // kept for the backward, and scratch
    int B, T, recompute, flash;       // the micro-batch capacity, -r, flash attention
    int deterministic;                // --deterministic (0: the flash backward may add dq with atomics)
    Fp8Layers *fp8;                   // the linear layers' FP8 state (on 0: none in FP8)
    MatmulModes modes;                // how its matmuls run (GELU fused, tuning, TF32); its FP8 layers' too
    int num_sms;
    cudaStream_t stream;
} GPT2;

// The parameter layout: each tensor's size and offset in checkpoint order; returns the total
static size_t gpt2_param_layout(const GPT2Config *c, size_t sizes[NUM_PARAM_TENSORS],
                                size_t offsets[NUM_PARAM_TENSORS]) {
    gpt2_param_sizes(c, sizes);
    size_t n = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        offsets[k] = n;
        n += sizes[k];
    }
    return n;
}

// A parameter or gradient buffer's elements: the whole model's (slots 0), or wte, wpe, lnf whole
// plus `slots` layer slots, each slot the per-layer tensors' slices at slot_offsets.
static size_t slotted_elems(const GPT2Config *c, int slots, size_t slot_offsets[NUM_PARAM_TENSORS],
                             size_t *slot_elems) {
    size_t sizes[NUM_PARAM_TENSORS], offsets[NUM_PARAM_TENSORS], n = gpt2_param_layout(c, sizes, offsets);
    if (!slots) return n;  // (the other buffer's slots, if any, keep their layout)
    size_t elems = 0;
    *slot_elems = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        int layers = gpt2_param_layers(c, k);
        if (layers == 1) elems += sizes[k];
        else { slot_offsets[k] = *slot_elems; *slot_elems += sizes[k] / layers; }
    }
    return elems + (size_t)slots * *slot_elems;
}

// Where tensor k's layer l lives in a buffer of the model's tensors (whole, or in slots)
static floatX *slotted_at(const GPT2 *m, floatX *const whole[NUM_PARAM_TENSORS], floatX *const slot[MODEL_MAX_SLOTS],
                          int slots, int k, int l) {
    int layers = gpt2_param_layers(&m->config, k);
    if (layers == 1) return whole[k];
    if (slots) return slot[l % slots] + m->slot_offsets[k];
    return whole[k] + (size_t)l * (m->param_sizes[k] / layers);
}

// Where the gradient of tensor k's layer l lives
static floatX *grad_at(const GPT2 *m, int k, int l) {
    return slotted_at(m, m->grad, m->grad_slot, m->grad_slots, k, l);
}

// Where the parameters of tensor k's layer l live (in a slot under -z 3: asked for first)
static floatX *param_at(const GPT2 *m, int k, int l) {
    return slotted_at(m, m->param, m->param_slot, m->param_slots, k, l);
}

// Before the forward or backward reads layer l's parameters (-1: wte, wpe, lnf); next: the
// layer it reads after (-1: none)
static void params_need(const GPT2 *m, int l, int next) {
    if (m->param_hooks.need) m->param_hooks.need(m->param_hooks.ctx, l, next);
}

// Points whole[k] (the one-slice tensors, or every tensor) and the slots into buf, laid out by
// slotted_elems
static void slotted_bind(GPT2 *m, floatX *buf, int slots, floatX *whole[NUM_PARAM_TENSORS],
                         floatX *slot[MODEL_MAX_SLOTS]) {
    size_t off = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        if (!slots) whole[k] = buf + m->param_offsets[k];
        else if (gpt2_param_layers(&m->config, k) == 1) { whole[k] = buf + off; off += m->param_sizes[k]; }
        else whole[k] = NULL;  // in the slots
    }
    for (int i = 0; i < MODEL_MAX_SLOTS; i++) slot[i] = i < slots ? buf + off + (size_t)i * m->slot_elems : NULL;
}

// host fp32 -> floatX on the device (or in pinned host memory)
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
        CUDA_CHECK(cudaMemcpy(dst + i, tmp, m * sizeof(floatX), cudaMemcpyDefault));  // (dst may be pinned host memory)
    }
    free(tmp);
}

// device floatX -> host fp32
static void download_floatX(float *dst, const floatX *src, size_t n) {
    const size_t chunk = 1 << 24;
    floatX *tmp = (floatX *)xmalloc(chunk * sizeof(floatX));
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        CUDA_CHECK(cudaMemcpy(tmp, src + i, m * sizeof(floatX), cudaMemcpyDefault));
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

// The activations' shape for this model at micro-batches of (B, T) (num_sms 0: planned without a GPU)
static ActShape gpt2_act_shape(const GPT2Config *c, const GPT2Shape *sh, int num_sms) {
    ActShape a = {c, sh->B, sh->T, sh->recompute, sh->flash, sh->deterministic, num_sms};
    return a;
}

// Allocates the model for micro-batches of up to (sh->B, sh->T) and uploads the parameters
// (host fp32, checkpoint order; in slots their owner fills them instead). fp8: the FP8 state
// of the linear layers (its mask 0: none).
static void gpt2_build(GPT2 *m, const GPT2Config *cfg, const float *host_params, const GPT2Shape *sh,
                       Fp8Layers *fp8) {
    memset(m, 0, sizeof *m);
    m->config = *cfg;
    m->num_params = gpt2_param_layout(cfg, m->param_sizes, m->param_offsets);
    m->B = sh->B;
    m->T = sh->T;
    m->recompute = sh->recompute;
    m->flash = sh->flash;
    m->deterministic = sh->deterministic;
    m->fp8 = fp8;
    m->modes = MATMUL_MODES_DEFAULT;
    m->modes.fuse_gelu = sh->fuse_gelu;
    m->modes.tf32 = sh->tf32;
    CUDA_CHECK(cudaStreamCreate(&m->stream));
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&m->num_sms, cudaDevAttrMultiProcessorCount, dev));
    matmul_init(m->stream);

    m->param_slots = sh->param_slots;
    m->param_elems = slotted_elems(cfg, m->param_slots, m->slot_offsets, &m->slot_elems);
    CUDA_CHECK(cudaMalloc(&m->params, m->param_elems * sizeof(floatX)));
    slotted_bind(m, m->params, m->param_slots, m->param, m->param_slot);
    if (!m->param_slots) upload_params(m->params, host_params, m->num_params);
    m->grad_slots = sh->grad_slots;
    m->grad_elems = slotted_elems(cfg, m->grad_slots, m->slot_offsets, &m->slot_elems);
    CUDA_CHECK(cudaMalloc(&m->grads, m->grad_elems * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(m->grads, 0, m->grad_elems * sizeof(floatX)));
    slotted_bind(m, m->grads, m->grad_slots, m->grad, m->grad_slot);
    ActShape a = gpt2_act_shape(cfg, sh, m->num_sms);
    activations_alloc(&m->acts, &a, &m->act_bytes, &m->scratch_bytes);
    const size_t N = (size_t)m->B * m->T;
    if (fp8) fp8_layers_lend(fp8, cfg, m->acts.logits, N * cfg->padded_vocab_size * sizeof(floatX), m->acts.dfch,
                             N * 4 * cfg->channels * sizeof(floatX));
    CUDA_CHECK(cudaDeviceSynchronize());
}

static void gpt2_free(GPT2 *m) {
    activations_free(&m->acts);
    cudaFree(m->params);
    cudaFree(m->grads);
    matmul_free();
    cudaStreamDestroy(m->stream);
}

static void gpt2_zero_grad(GPT2 *m) {
    CUDA_CHECK(cudaMemsetAsync(m->grads, 0, m->grad_elems * sizeof(floatX), m->stream));
}

static BlockActs gpt2_block_acts(const GPT2 *m, int l) {
    return block_acts(&m->acts, &m->config, m->B, m->T, m->recompute, l);
}

// Layer l's linear layer of this kind (LINEAR_*, wired by LINEAR_SITES; b: layer l's
// activations; the lm_head's l and b are not read), its forward over N rows at FP8 site `site`
// (-1: in the build's precision). --fp8-layers auto times the layers through this too.
static void gpt2_linear_forward_at(GPT2 *m, int kind, int l, const BlockActs *b, int N, int site) {
    const LinearSite *ls = &LINEAR_SITES[kind];
    const Activations *a = &m->acts;
    linear_forward(&m->modes, site >= 0 ? &m->fp8->f8 : NULL, site, linear_buffer(a, b, ls->out),
                   linear_buffer(a, b, ls->out_pre_gelu), linear_buffer(a, b, ls->inp), param_at(m, ls->weight, l),
                   ls->bias == LINEAR_NONE ? NULL : param_at(m, ls->bias, l), N, linear_c(&m->config, kind),
                   linear_oc(&m->config, kind), m->stream);
}

// Its backward at full capacity. flash: the model's attention is flash attention, whose
// backward sums qkv's bias gradient (LINEAR_DBIAS_FLASH).
static void gpt2_linear_backward_at(GPT2 *m, int kind, int l, const BlockActs *b, int site, int flash) {
    const LinearSite *ls = &LINEAR_SITES[kind];
    const Activations *a = &m->acts;
    const int own_dbias = ls->bias != LINEAR_NONE && (ls->dbias == LINEAR_DBIAS_OWN ||
                                                      (ls->dbias == LINEAR_DBIAS_FLASH && !flash));
    linear_backward(&m->modes, site >= 0 ? &m->fp8->f8 : NULL, site, linear_buffer(a, b, ls->dinp),
                    grad_at(m, ls->weight, l), own_dbias ? grad_at(m, ls->bias, l) : NULL, a->fscratch,
                    linear_buffer(a, b, ls->dout), linear_buffer(a, b, ls->inp), param_at(m, ls->weight, l),
                    linear_buffer(a, b, ls->inp_pre_gelu), m->B * m->T, linear_c(&m->config, kind),
                    linear_oc(&m->config, kind), m->stream);
}

// The same in FP8 where the layer has a site, as the model runs them
static void gpt2_linear_forward(GPT2 *m, int kind, int l, const BlockActs *b, int N) {
    gpt2_linear_forward_at(m, kind, l, b, N, fp8_site(m->fp8, kind, l));
}
static void gpt2_linear_backward(GPT2 *m, int kind, int l, const BlockActs *b) {
    gpt2_linear_backward_at(m, kind, l, b, fp8_site(m->fp8, kind, l), m->flash);
}

// Layer l from its layernormed input b->ln1 up to the MLP's GELU output: attention, its
// projection and residual add with ln2, the fc matmul. The forward continues with the fc
// projection; -r 3's backward runs this again to recompute the block.
static void gpt2_block_forward(GPT2 *m, int l, const BlockActs *b, int B, int T) {
    const int C = m->config.channels, NH = m->config.num_heads, N = B * T;
    cudaStream_t s = m->stream;
    Activations *a = &m->acts;
    gpt2_linear_forward(m, LINEAR_QKV, l, b, N);
    if (m->flash) flash_attention_forward(b->atty, b->lse, b->qkv, B, T, C, NH, s);
    else attention_forward(&m->modes, b->atty, b->att, b->qkv, a->attn_scratch, B, T, C, NH, s);
    gpt2_linear_forward(m, LINEAR_ATTPROJ, l, b, N);
    fused_residual_layernorm_forward(b->residual2, b->ln2, b->ln2_mean, b->ln2_rstd, b->residual, a->attproj,
                                     param_at(m, P_LN2W, l), param_at(m, P_LN2B, l), N, C, s);
    gpt2_linear_forward(m, LINEAR_FC, l, b, N);
}

// Forward over the batch's inputs (B, T), B <= capacity, T == capacity T. Leaves the logits
// in acts.logits (B*T, Vp).
static void gpt2_forward(GPT2 *m, const DeviceBatch *batch, int B, int T) {
    const GPT2Config *c = &m->config;
    const int L = c->num_layers, C = c->channels, N = B * T;
    if (B > m->B || T != m->T) fatal("internal: forward with B=%d T=%d, allocated B=%d T=%d", B, T, m->B, m->T);
    cudaStream_t s = m->stream;
    Activations *a = &m->acts;
    floatX **p = m->param;

    params_need(m, -1, 0);
    params_need(m, 0, 1);
    encoder_forward(a->encoded, batch->inputs, p[P_WTE], p[P_WPE], B, T, C, s);
    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, param_at(m, P_LN1W, 0), param_at(m, P_LN1B, 0), N,
                      C, s);
    for (int l = 0; l < L; l++) {
        BlockActs b = gpt2_block_acts(m, l);
        params_need(m, l, l + 1 < L ? l + 1 : -1);
        gpt2_block_forward(m, l, &b, B, T);
        gpt2_linear_forward(m, LINEAR_FCPROJ, l, &b, N);
        // the residual add, fused with the next layernorm (the next layer's ln1, or lnf)
        if (l + 1 < L) {
            BlockActs next = gpt2_block_acts(m, l + 1);
            params_need(m, l + 1, -1);  // its ln1
            fused_residual_layernorm_forward(b.residual3, next.ln1, next.ln1_mean, next.ln1_rstd, b.residual2,
                                             a->fcproj, param_at(m, P_LN1W, l + 1), param_at(m, P_LN1B, l + 1), N, C, s);
        } else {
            fused_residual_layernorm_forward(b.residual3, a->lnf, a->lnf_mean, a->lnf_rstd, b.residual2, a->fcproj,
                                             p[P_LNFW], p[P_LNFB], N, C, s);
        }
    }
    gpt2_linear_forward(m, LINEAR_HEAD, -1, NULL, N);  // the lm_head, tied to wte
}

// Loss of the last forward over the batch's targets: adds loss_scale * the sum of the
// per-position losses to *loss_acc (device). With write_grad the logits are replaced by
// d(grad_scale * loss_scale * sum of losses)/d(logits), ready for gpt2_backward (grad_scale:
// the fp16 build's loss scale S, 1 in the others).
static void gpt2_loss(GPT2 *m, const DeviceBatch *batch, float *loss_acc, float loss_scale, float grad_scale,
                      int write_grad, int B, int T) {
    const GPT2Config *c = &m->config;
    const int N = B * T;
    fused_classifier(m->acts.logits, m->acts.losses, batch->targets, loss_scale * grad_scale, write_grad, N,
                     c->vocab_size, c->padded_vocab_size, m->stream);
    loss_accumulate(loss_acc, m->acts.losses, N, loss_scale, m->stream);
}

static void grads_writable(const GradHooks *h, int l) {
    if (h && h->writable) h->writable(h->ctx, l);
}
static void grads_final(const GradHooks *h, int l) {
    if (h && h->final) h->final(h->ctx, l);
}

// The backward of layer l needs what the forward did not keep (the recompute level): -r 3
// the whole block from its input, -r 2 the layernorm outputs and the GELU, -r 1 the GELU.
static void gpt2_recompute_layer(GPT2 *m, int l, const BlockActs *b) {
    const int r = m->recompute, C = m->config.channels, N = m->B * m->T;
    cudaStream_t s = m->stream;
    if (r >= 2)
        layernorm_forward(b->ln1, b->ln1_mean, b->ln1_rstd, b->residual, param_at(m, P_LN1W, l), param_at(m, P_LN1B, l), N, C,
                          s);
    if (r >= 3) gpt2_block_forward(m, l, b, m->B, m->T);
    if (r == 1 || r == 2) gelu_forward(b->fch_gelu, b->fch, (long)N * 4 * C, s);
    if (r == 2)
        layernorm_forward(b->ln2, b->ln2_mean, b->ln2_rstd, b->residual2, param_at(m, P_LN2W, l), param_at(m, P_LN2B, l), N, C,
                          s);
}

// The MLP's backward, residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))): from the
// gradient of residual3 in dresidual to that of residual2, there too.
static void gpt2_mlp_backward(GPT2 *m, int l, const BlockActs *b) {
    const int C = m->config.channels, N = m->B * m->T;
    cudaStream_t s = m->stream;
    Activations *a = &m->acts;
    float *fs = a->fscratch;
    gpt2_linear_backward(m, LINEAR_FCPROJ, l, b);  // (dfch includes gelu')
    gpt2_linear_backward(m, LINEAR_FC, l, b);
    layernorm_backward(a->dresidual, grad_at(m, P_LN2W, l), grad_at(m, P_LN2B, l), grad_at(m, P_ATTPROJB, l), fs,
                       a->dln, b->residual2, param_at(m, P_LN2W, l), b->ln2_mean, b->ln2_rstd, N, C, m->num_sms, s);
}

// The attention's backward, residual2 = residual + attproj(attention(qkv(ln1(residual)))), up
// to the gradient of ln1's output in dln (the ln1 backward follows).
static void gpt2_attention_backward(GPT2 *m, int l, const BlockActs *b) {
    const int C = m->config.channels, NH = m->config.num_heads, B = m->B, T = m->T, N = B * T;
    cudaStream_t s = m->stream;
    Activations *a = &m->acts;
    float *fs = a->fscratch;
    gpt2_linear_backward(m, LINEAR_ATTPROJ, l, b);
    // The qkv bias gradient, in thirds with flash attention: q's is a pass over dq; k's is
    // zero (a bias on every key adds the same q.b to a whole row of scores, which softmax
    // ignores; the rows of dS sum to zero), left as zero_grad left it; v's is the column
    // sum of datty, which the attention backward reads anyway. (With plain attention the qkv
    // layer's backward sums it whole: LINEAR_DBIAS_FLASH.)
    floatX *dqkvb = grad_at(m, P_QKVB, l);
    if (m->flash)
        flash_attention_backward(a->dqkv, dqkvb + 2 * C, a->datty, b->qkv, b->atty, b->lse, a->flash_scratch, B, T, C,
                                 NH, m->deterministic, s);
    else attention_backward(&m->modes, a->dqkv, a->datty, b->qkv, b->att, a->attn_scratch, B, T, C, NH, s);
    gpt2_linear_backward(m, LINEAR_QKV, l, b);
    if (m->flash) bias_backward(dqkvb, fs, a->dqkv, N, C, 3 * C, s);
}

// Backward of the last forward at full capacity (B, T), after gpt2_loss(write_grad=1).
// Gradients accumulate into the model's gradients. Each layernorm backward also sums the
// columns of the dresidual it leaves: that is the bias gradient of the linear layer whose
// output gradient dresidual is next (lnf and ln1: the fcproj below; ln2: attproj), so those
// two layers skip their bias passes.
static void gpt2_backward(GPT2 *m, const DeviceBatch *batch, const GradHooks *hooks) {
    const GPT2Config *c = &m->config;
    const int B = m->B, T = m->T, L = c->num_layers, C = c->channels, N = B * T;
    cudaStream_t s = m->stream;
    Activations *a = &m->acts;
    floatX **p = m->param, **g = m->grad;
    float *fs = a->fscratch;

    // lm_head: dlnf = dlogits @ wte; dwte += dlogits^T @ lnf
    params_need(m, -1, L - 1);
    grads_writable(hooks, -1);
    gpt2_linear_backward(m, LINEAR_HEAD, -1, NULL);
    CUDA_CHECK(cudaMemsetAsync(a->dresidual, 0, (size_t)N * C * sizeof(floatX), s));
    grads_writable(hooks, L - 1);  // lnf's backward writes the fcproj bias gradient of layer L - 1
    layernorm_backward(a->dresidual, g[P_LNFW], g[P_LNFB], grad_at(m, P_FCPROJB, L - 1), fs, a->dln,
                       a->residual3 + (size_t)(L - 1) * N * C, p[P_LNFW], a->lnf_mean, a->lnf_rstd, N, C, m->num_sms, s);

    // dresidual carries the gradient of the residual stream down through the layers
    for (int l = L - 1; l >= 0; l--) {
        BlockActs b = gpt2_block_acts(m, l);
        params_need(m, l, l - 1);
        grads_writable(hooks, l);
        gpt2_recompute_layer(m, l, &b);
        gpt2_mlp_backward(m, l, &b);
        gpt2_attention_backward(m, l, &b);
        // ln1's backward also writes the fcproj bias gradient of layer l - 1 (layer 0: the encoder is below)
        floatX *dbias_below = NULL;
        if (l > 0) {
            grads_writable(hooks, l - 1);
            dbias_below = grad_at(m, P_FCPROJB, l - 1);
        }
        layernorm_backward(a->dresidual, grad_at(m, P_LN1W, l), grad_at(m, P_LN1B, l), dbias_below, fs, a->dln,
                           b.residual, param_at(m, P_LN1W, l), b.ln1_mean, b.ln1_rstd, N, C, m->num_sms, s);
        grads_final(hooks, l);  // layer l's gradients are final: sent while layer l - 1 runs
    }
    encoder_backward(g[P_WTE], g[P_WPE], a->dresidual, batch->positions, batch->bucket_token, batch->bucket_start,
                     batch->nb, batch->bucket_count, B, T, C, s);
    grads_final(hooks, -1);
}
