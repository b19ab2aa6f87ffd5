// gpu/activations.cuh: the GPT-2 model's activation buffers, listed once (ACTIVATIONS) with
// their element type, size rule and kind: kept by the forward for the backward, or scratch
// reused by every layer. The Activations struct, the sizes the memory plan counts, the
// allocation and the freeing all come from that one table. Per-layer buffers hold L copies,
// except those the recompute level (-r) keeps for one layer only and fills again in the
// backward: -r 1 the GELU output, -r 2 the layernorm outputs too, -r 3 everything of the
// block but its output residual3 and the layernorms' statistics.
#pragma once
#include "../common/checkpoint.h"
#include "../kernels/common.cuh"
#include "../kernels/attention.cuh"
#include "../kernels/layernorm.cuh"
#include "../kernels/matmul.cuh"
#include "../kernels/global_norm.cuh"

enum { ACT_KEPT, ACT_SCRATCH };

// X(name, element type, kind, copies, elements of a copy). The sizes are expressions over the
// locals of activation_sizes: L, BT (tokens of a micro-batch), C, Vp, and the layer copies
// L_ln, L_gelu, L_blk that the recompute level keeps (L: one per layer); an entry of 0
// elements is not allocated.
#define ACTIVATIONS(X)                                                                             \
    X(ln1, floatX, ACT_KEPT, L_ln, BT * C)                                                          \
    X(ln1_mean, float, ACT_KEPT, L, BT)                                                             \
    X(ln1_rstd, float, ACT_KEPT, L, BT)                                                             \
    X(qkv, floatX, ACT_KEPT, L_blk, BT * 3 * C)                                                     \
    X(att, floatX, ACT_KEPT, L_blk, att_elems)  /* plain attention's softmax */                     \
    X(lse, float, ACT_KEPT, L_blk, lse_elems)   /* flash attention's log-sum-exp */                 \
    X(atty, floatX, ACT_KEPT, L_blk, BT * C)                                                        \
    X(residual2, floatX, ACT_KEPT, L_blk, BT * C)                                                   \
    X(ln2, floatX, ACT_KEPT, L_ln, BT * C)                                                          \
    X(ln2_mean, float, ACT_KEPT, L, BT)                                                             \
    X(ln2_rstd, float, ACT_KEPT, L, BT)                                                             \
    X(fch, floatX, ACT_KEPT, L_blk, BT * 4 * C)                                                     \
    X(fch_gelu, floatX, ACT_KEPT, L_gelu, BT * 4 * C)                                               \
    X(residual3, floatX, ACT_KEPT, L, BT * C)                                                       \
    X(encoded, floatX, ACT_KEPT, 1, BT * C)                                                         \
    X(attproj, floatX, ACT_KEPT, 1, BT * C)                                                         \
    X(fcproj, floatX, ACT_KEPT, 1, BT * C)                                                          \
    X(lnf, floatX, ACT_KEPT, 1, BT * C)                                                             \
    X(lnf_mean, float, ACT_KEPT, 1, BT)                                                             \
    X(lnf_rstd, float, ACT_KEPT, 1, BT)                                                             \
    X(logits, floatX, ACT_KEPT, 1, BT * Vp)                                                         \
    X(losses, float, ACT_KEPT, 1, BT)                                                               \
    X(dresidual, floatX, ACT_SCRATCH, 1, BT * C)                                                    \
    X(dln, floatX, ACT_SCRATCH, 1, BT * C)                                                          \
    X(datty, floatX, ACT_SCRATCH, 1, BT * C)                                                        \
    X(dfch, floatX, ACT_SCRATCH, 1, BT * 4 * C)                                                     \
    X(dqkv, floatX, ACT_SCRATCH, 1, BT * 3 * C)                                                     \
    X(attn_scratch, floatX, ACT_SCRATCH, 1, attn_elems) /* plain attention's permuted q, k, v */    \
    X(flash_scratch, float, ACT_SCRATCH, 1, flash_elems) /* flash backward's rowsum(dout * out) */  \
    X(fscratch, float, ACT_SCRATCH, 1, fscratch_elems)  /* fp32 partial sums: layernorm, bias, norm */

#define ACT_MEMBER(name, type, kind, copies, elems) type *name;
typedef struct {
    ACTIVATIONS(ACT_MEMBER)
} Activations;
#undef ACT_MEMBER

#define ACT_ENUM(name, type, kind, copies, elems) ACT_##name,
enum { ACTIVATIONS(ACT_ENUM) ACT_COUNT };
#undef ACT_ENUM

// each buffer's name, kind and field, in the table's order (the allocation order)
typedef struct {
    const char *name;
    int kind;
    size_t field;  // offset in Activations
} ActBuffer;
#define ACT_DESC(name, type, kind, copies, elems) {#name, kind, offsetof(Activations, name)},
static const ActBuffer ACT_BUFFERS[ACT_COUNT] = {ACTIVATIONS(ACT_DESC)};
#undef ACT_DESC

// What the buffers' sizes depend on. num_sms 0: no GPU is asked (the memory plan), and
// layernorm's scratch takes its bound on an H100/H200 (ACT_PLAN_NUM_SMS).
typedef struct {
    const GPT2Config *cfg;
    int B, T, recompute, flash, deterministic, num_sms;
} ActShape;
#define ACT_PLAN_NUM_SMS 132

// Bytes of each buffer (0: not used in this configuration), rounded up to cudaMalloc's
// 256-byte alignment; copies (if not NULL): how many slices each holds (L: one per layer).
static void activation_sizes(const ActShape *a, size_t bytes[ACT_COUNT], size_t copies[ACT_COUNT] = NULL) {
    const GPT2Config *c = a->cfg;
    const size_t L = c->num_layers, C = c->channels, NH = c->num_heads, BT = (size_t)a->B * a->T;
    const size_t Vp = c->padded_vocab_size, B = a->B, T = a->T;
    const size_t L_gelu = a->recompute >= 1 ? 1 : L, L_ln = a->recompute >= 2 ? 1 : L;
    const size_t L_blk = a->recompute >= 3 ? 1 : L;
    size_t attn_elems = attention_backward_scratch_elems(a->B, a->T, (int)C, (int)NH);
    if (attention_forward_scratch_elems(a->B, a->T, (int)C) > attn_elems)
        attn_elems = attention_forward_scratch_elems(a->B, a->T, (int)C);
    size_t att_elems = B * NH * T * T, lse_elems = 0, flash_elems = 0;  // a layer's
    if (a->flash) {
        att_elems = attn_elems = 0;
        lse_elems = B * NH * T;
        flash_elems = flash_attention_backward_scratch_elems(a->B, a->T, (int)C, (int)NH, a->deterministic);
    }
    size_t fscratch_elems = a->num_sms ? layernorm_backward_scratch_floats((int)BT, (int)C, a->num_sms)
                                       : layernorm_backward_scratch_bound((int)BT, (int)C, ACT_PLAN_NUM_SMS);
    if (bias_grad_scratch_floats(4 * (int)C) > fscratch_elems) fscratch_elems = bias_grad_scratch_floats(4 * (int)C);
    size_t norm_partials = 0;  // grad_sumsq: at most NORM_MAX_BLOCKS per run, a run per slice at most
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) norm_partials += (size_t)NORM_MAX_BLOCKS * gpt2_param_layers(c, k);
    if (norm_partials > fscratch_elems) fscratch_elems = norm_partials;
#define ACT_SIZE(name, type, kind, n, elems)                                  \
    bytes[ACT_##name] = ((size_t)(n) * (elems) * sizeof(type) + 255) / 256 * 256; \
    if (copies) copies[ACT_##name] = (size_t)(n);
    ACTIVATIONS(ACT_SIZE)
#undef ACT_SIZE
}

// Allocates every buffer of a->sizes (NULL where 0 bytes); adds the bytes to *kept and *scratch.
static void activations_alloc(Activations *acts, const ActShape *a, size_t *kept, size_t *scratch) {
    size_t bytes[ACT_COUNT];
    activation_sizes(a, bytes);
    *kept = *scratch = 0;
    for (int i = 0; i < ACT_COUNT; i++) {
        void **ptr = (void **)((char *)acts + ACT_BUFFERS[i].field);
        *ptr = NULL;
        if (bytes[i] == 0) continue;
        CUDA_CHECK(cudaMalloc(ptr, bytes[i]));
        (ACT_BUFFERS[i].kind == ACT_SCRATCH ? *scratch : *kept) += bytes[i];
    }
}

static void activations_free(Activations *acts) {
    for (int i = 0; i < ACT_COUNT; i++) {
        void **ptr = (void **)((char *)acts + ACT_BUFFERS[i].field);
        cudaFree(*ptr);
        *ptr = NULL;
    }
}

// Layer l's activations: its own slices of the per-layer buffers, or the one shared slot of
// those the recompute level keeps for one layer only.
typedef struct {
    floatX *ln1, *qkv, *att, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *lse, *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    const floatX *residual;  // the block's input: the layer below's residual3, or the embeddings
} BlockActs;

static BlockActs block_acts(const Activations *a, const GPT2Config *c, int B, int T, int recompute, int l) {
    size_t C = c->channels, NH = c->num_heads, cap = (size_t)B * T, r = recompute;
    size_t lg = r >= 1 ? 0 : l, ll = r >= 2 ? 0 : l, lb = r >= 3 ? 0 : l;
    BlockActs b;
    b.ln1 = a->ln1 + ll * cap * C;
    b.qkv = a->qkv + lb * cap * 3 * C;
    b.att = a->att ? a->att + lb * B * NH * T * T : NULL;
    b.atty = a->atty + lb * cap * C;
    b.residual2 = a->residual2 + lb * cap * C;
    b.ln2 = a->ln2 + ll * cap * C;
    b.fch = a->fch + lb * cap * 4 * C;
    b.fch_gelu = a->fch_gelu + lg * cap * 4 * C;
    b.residual3 = a->residual3 + (size_t)l * cap * C;
    b.lse = a->lse ? a->lse + lb * B * NH * T : NULL;
    b.ln1_mean = a->ln1_mean + (size_t)l * cap;
    b.ln1_rstd = a->ln1_rstd + (size_t)l * cap;
    b.ln2_mean = a->ln2_mean + (size_t)l * cap;
    b.ln2_rstd = a->ln2_rstd + (size_t)l * cap;
    b.residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * cap * C;
    return b;
}
