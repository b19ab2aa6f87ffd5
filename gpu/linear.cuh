// gpu/linear.cuh: GPT-2's linear layers. One layer's forward and backward (linear_forward,
// linear_backward): in FP8 (kernels/fp8_linear.cuh) where the layer is an FP8 site and the
// shape allows, else in the build's precision (kernels/matmul.cuh). And the model's linear
// layers as one table, a row per kind (every block's qkv, attproj, fc and fcproj; the
// lm_head): its tensors, its shape, the activations it reads and writes and who sums its bias
// gradient. The training model's layers are wired from the table alone: the FP8 sites take
// their shapes and weights from it (gpu/fp8_layers.cuh, which comes after this file: the
// layer needs only the FP8 state's kernels), and the forward, the backward and
// --fp8-layers auto's timing run each layer through gpt2_linear_forward / _backward, which
// live in gpu/model.cuh beside the GPT2 whose buffers they read. (Sampling's KV cache,
// gpu/generate.cuh, runs one row through buffers of its own.)
#pragma once
#include "../common/checkpoint.h"
#include "../kernels/matmul.cuh"
#include "../kernels/fp8_linear.cuh"
#include "activations.cuh"

// the kinds of linear layer; a block has the first LINEAR_BLOCK_KINDS, the model one lm_head
enum { LINEAR_QKV, LINEAR_ATTPROJ, LINEAR_FC, LINEAR_FCPROJ, LINEAR_HEAD, LINEAR_KINDS };
#define LINEAR_BLOCK_KINDS 4
static const char *const LINEAR_KIND_NAMES[LINEAR_KINDS] = {"qkv", "attproj", "fc", "fcproj", "head"};

#define LINEAR_NONE (-1)  // no bias tensor, no buffer
#define LINEAR_VOCAB 0    // an OC of the padded vocabulary, not a multiple of the channels

// Who sums a layer's bias gradient (the column sums of its output gradient)
enum {
    LINEAR_DBIAS_OWN,        // its own backward, in a pass over the output gradient
    // the layernorm backward that leaves the output gradient (the residual stream's) sums its
    // columns anyway: attproj's is ln2's, fcproj's the next layer's ln1 or lnf
    LINEAR_DBIAS_LAYERNORM,
    // with flash attention, the attention backward's path (gpt2_attention_backward); with
    // plain attention its own backward
    LINEAR_DBIAS_FLASH,
};

// A kind of linear layer as the model wires it: out (N, OC) = inp (N, C) weight^T + bias. The
// tensors are P_* (common/checkpoint.h); the buffers ACT_* (gpu/activations.cuh), a per-layer
// buffer meaning layer l's slice of it.
typedef struct {
    int weight, bias;   // bias LINEAR_NONE: none
    int oc, c;          // OC and C in channels (oc LINEAR_VOCAB: the padded vocabulary)
    int dbias;          // who sums the bias gradient: LINEAR_DBIAS_*
    int inp, out;       // the forward's
    int out_pre_gelu;   // where GELU follows the matmul: its input (the forward writes out = gelu of it)
    int dout, dinp;     // the backward reads out's gradient, writes inp's
    int inp_pre_gelu;   // where inp is a GELU's output: that GELU's input (dinp *= its derivative there)
} LinearSite;

// (the lm_head is tied to wte; the loss leaves the logits' gradient in the logits)
#define NONE LINEAR_NONE
static const LinearSite LINEAR_SITES[LINEAR_KINDS] = {
    //            weight        bias          OC            C   bias gradient
    //            forward: inp, out, out's pre-GELU         backward: dout, dinp, inp's pre-GELU
    /* qkv */     {P_QKVW,      P_QKVB,       3,            1,  LINEAR_DBIAS_FLASH,
                   ACT_ln1,      ACT_qkv,      NONE,         ACT_dqkv,      ACT_dln,   NONE},
    /* attproj */ {P_ATTPROJW,  P_ATTPROJB,   1,            1,  LINEAR_DBIAS_LAYERNORM,
                   ACT_atty,     ACT_attproj,  NONE,         ACT_dresidual, ACT_datty, NONE},
    /* fc */      {P_FCW,       P_FCB,        4,            1,  LINEAR_DBIAS_OWN,
                   ACT_ln2,      ACT_fch_gelu, ACT_fch,      ACT_dfch,      ACT_dln,   NONE},
    /* fcproj */  {P_FCPROJW,   P_FCPROJB,    1,            4,  LINEAR_DBIAS_LAYERNORM,
                   ACT_fch_gelu, ACT_fcproj,   NONE,         ACT_dresidual, ACT_dfch,  ACT_fch},
    /* head */    {P_WTE,       NONE,         LINEAR_VOCAB, 1,  LINEAR_DBIAS_OWN,
                   ACT_lnf,      ACT_logits,   NONE,         ACT_logits,    ACT_dln,   NONE},
};
#undef NONE

static int linear_oc(const GPT2Config *c, int kind) {
    const int oc = LINEAR_SITES[kind].oc;
    return oc == LINEAR_VOCAB ? c->padded_vocab_size : oc * c->channels;
}
static int linear_c(const GPT2Config *c, int kind) { return LINEAR_SITES[kind].c * c->channels; }

// Activation buffer id (ACT_*; LINEAR_NONE: NULL) as a layer's linear layers use it: the
// layer's slice (b: block_acts') of a per-layer buffer, else the buffer every layer shares
static floatX *linear_buffer(const Activations *a, const BlockActs *b, int id) {
    switch (id) {
    case LINEAR_NONE: return NULL;
    case ACT_ln1: return b->ln1;
    case ACT_qkv: return b->qkv;
    case ACT_atty: return b->atty;
    case ACT_ln2: return b->ln2;
    case ACT_fch: return b->fch;
    case ACT_fch_gelu: return b->fch_gelu;
    case ACT_attproj: return a->attproj;
    case ACT_fcproj: return a->fcproj;
    case ACT_lnf: return a->lnf;
    case ACT_logits: return a->logits;
    case ACT_dresidual: return a->dresidual;
    case ACT_dln: return a->dln;
    case ACT_datty: return a->datty;
    case ACT_dfch: return a->dfch;
    case ACT_dqkv: return a->dqkv;
    }
    fatal("internal: activation buffer %d is not one of the linear layers'", id);
}

// A linear layer's forward and backward (kernels/matmul.cuh's arguments), in FP8 where its
// site is (site >= 0, of the FP8 state f8) and the shape allows, else in the build's precision
static void linear_forward(MatmulModes *modes, Fp8Linear *f8, int site, floatX *out, floatX *pre_gelu,
                           const floatX *inp, const floatX *weight, const floatX *bias, int N, int C, int OC,
                           cudaStream_t s) {
    if (site >= 0 && fp8_linear_fits(f8, site, N))
        fp8_linear_forward(f8, modes, site, out, pre_gelu, inp, weight, bias, N, s);
    else
        matmul_forward(modes, out, pre_gelu, inp, weight, bias, N, C, OC, s);
}

static void linear_backward(MatmulModes *modes, Fp8Linear *f8, int site, floatX *dinp, floatX *dweight,
                            floatX *dbias, float *scratch, const floatX *dout, const floatX *inp,
                            const floatX *weight, const floatX *pre_gelu, int N, int C, int OC, cudaStream_t s) {
    if (site >= 0 && fp8_linear_fits(f8, site, N)) {
        fp8_linear_backward(f8, modes, site, dinp, dweight, dbias, scratch, dout, weight, inp, pre_gelu, N, s);
    } else {
        matmul_backward(modes, dinp, dweight, dbias, scratch, dout, inp, weight, pre_gelu, N, C, OC, s);
    }
}
