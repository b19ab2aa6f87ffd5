// gpu/fp8_layers.cuh: --fp8 1, which of GPT-2's linear layers run their matmuls in FP8
// (kernels/fp8_linear.cuh) and their state: each such layer is a "site" (layer l's four at
// 4l + SITE_*, the lm_head at 4L) with its weight's FP8 copies and its operands' scales.
// The model's linear layers go through linear_forward / linear_backward, which take the FP8
// path where the site has one and the shape allows it, else the build's precision; the
// optimizer casts the weights again after every update (fp8_layers_cast_weights).
#pragma once
#include "../common/checkpoint.h"
#include "../kernels/fp8_linear.cuh"
#include "../kernels/matmul.cuh"
#include "settings.cuh"

enum { SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FCPROJ, SITES_PER_LAYER };

typedef struct {
    int mask;  // FP8_LAYERS_* (0: no FP8: the rest is empty)
    int num_layers;
    Fp8Linear f8;
} Fp8Layers;

// The sites' weight shapes (OC x C; 0 x 0 for a layer not in FP8); returns their count
static int fp8_site_shapes(const GPT2Config *c, int mask, int *oc, int *cc) {
    int L = c->num_layers, C = c->channels, n = SITES_PER_LAYER * L + 1;
    const int block_oc[SITES_PER_LAYER] = {3 * C, C, 4 * C, C}, block_c[SITES_PER_LAYER] = {C, C, C, 4 * C};
    for (int i = 0; i < n; i++) {
        int head = i == n - 1, on = mask & (head ? FP8_LAYERS_HEAD : FP8_LAYERS_BLOCKS);
        oc[i] = !on ? 0 : head ? c->padded_vocab_size : block_oc[i % SITES_PER_LAYER];
        cc[i] = !on ? 0 : head ? C : block_c[i % SITES_PER_LAYER];
    }
    return n;
}

// bytes of each FP8 operand buffer at micro-batches of N rows: N x C codes, or 64 rows of
// the widest operand (the lm_head's gradient) where that is more, so no chunk is too thin
static size_t fp8_buffer_bytes(const GPT2Config *c, size_t N) {
    size_t a = N * c->channels, b = (size_t)64 * c->padded_vocab_size;
    return a > b ? a : b;
}

// device bytes of --fp8's state for micro-batches of up to N rows (0 without --fp8)
static size_t fp8_plan_bytes(const GPT2Config *c, int mask, size_t N) {
    if (!mask) return 0;
    int *oc = (int *)xmalloc((SITES_PER_LAYER * c->num_layers + 1) * sizeof(int));
    int *cc = (int *)xmalloc((SITES_PER_LAYER * c->num_layers + 1) * sizeof(int));
    int n = fp8_site_shapes(c, mask, oc, cc);
    size_t b = fp8_linear_bytes(n, oc, cc, fp8_buffer_bytes(c, N));
    free(oc);
    free(cc);
    return b;
}

// The FP8 state of the settings' layers for micro-batches of up to N rows (nothing without --fp8)
static void fp8_layers_init(Fp8Layers *f, const GPT2Config *c, const GpuSettings *s, size_t N) {
    memset(f, 0, sizeof *f);
    f->mask = s->fp8_mask;
    f->num_layers = c->num_layers;
    if (!f->mask) return;
    int n = SITES_PER_LAYER * c->num_layers + 1, *oc = (int *)xmalloc(n * sizeof(int));
    int *cc = (int *)xmalloc(n * sizeof(int));
    fp8_site_shapes(c, f->mask, oc, cc);
    fp8_linear_init(&f->f8, n, oc, cc, fp8_buffer_bytes(c, N), s->fp8_delayed);
    free(oc);
    free(cc);
}

static void fp8_layers_free(Fp8Layers *f) {
    if (f->mask) fp8_linear_free(&f->f8);
    memset(f, 0, sizeof *f);
}

// layer l's site `which` (l < 0: the lm_head), or -1 where that layer is not in FP8 (f NULL: none is)
static int fp8_site(const Fp8Layers *f, int l, int which) {
    if (!f || !f->mask) return -1;
    if (l < 0) return f->mask & FP8_LAYERS_HEAD ? SITES_PER_LAYER * f->num_layers : -1;
    return f->mask & FP8_LAYERS_BLOCKS ? SITES_PER_LAYER * l + which : -1;
}

// Every FP8 layer's weight to its FP8 copies; after each change of the parameters
static void fp8_layers_cast_weights(Fp8Layers *f, const GPT2Config *c, floatX *const *param, cudaStream_t s) {
    if (!f->mask) return;
    const int L = c->num_layers, C = c->channels;
    const int tensor[SITES_PER_LAYER] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};
    const size_t per_layer[SITES_PER_LAYER] = {(size_t)3 * C * C, (size_t)C * C, (size_t)4 * C * C, (size_t)4 * C * C};
    for (int l = 0; l < L; l++)
        for (int w = 0; w < SITES_PER_LAYER; w++) {
            int site = fp8_site(f, l, w);
            if (site >= 0) fp8_linear_weight(&f->f8, site, param[tensor[w]] + l * per_layer[w], s);
        }
    if (fp8_site(f, -1, 0) >= 0) fp8_linear_weight(&f->f8, fp8_site(f, -1, 0), param[P_WTE], s);
}

// A linear layer's forward and backward (kernels/matmul.cuh's arguments), in FP8 where its
// site is (site >= 0) and the shape allows, else in the build's precision
static void linear_forward(Fp8Layers *f, int site, floatX *out, floatX *pre_gelu, const floatX *inp,
                           const floatX *weight, const floatX *bias, int N, int C, int OC, cudaStream_t s) {
    if (site >= 0 && fp8_linear_fits(&f->f8, site, N))
        fp8_linear_forward(&f->f8, site, out, pre_gelu, inp, bias, N, s);
    else
        matmul_forward(out, pre_gelu, inp, weight, bias, N, C, OC, s);
}

static void linear_backward(Fp8Layers *f, int site, floatX *dinp, floatX *dweight, floatX *dbias, float *scratch,
                            const floatX *dout, const floatX *inp, const floatX *weight, const floatX *pre_gelu, int N,
                            int C, int OC, cudaStream_t s) {
    if (site >= 0 && fp8_linear_fits(&f->f8, site, N)) {
        if (dbias) bias_backward(dbias, scratch, dout, N, OC, OC, s);
        fp8_linear_backward(&f->f8, site, dinp, dweight, dout, inp, pre_gelu, N, s);
    } else {
        matmul_backward(dinp, dweight, dbias, scratch, dout, inp, weight, pre_gelu, N, C, OC, s);
    }
}
