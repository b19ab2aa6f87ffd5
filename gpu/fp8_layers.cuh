// gpu/fp8_layers.cuh: --fp8 1, which of GPT-2's linear layers run their matmuls in FP8
// (kernels/fp8_linear.cuh) and their state: each such layer is a "site" (layer l's four at
// 4l + its kind, LINEAR_*, the lm_head at 4L) with its weight's FP8 copies and its operands'
// scales; the sites' shapes and weights are gpu/linear.cuh's table's. The linear layers take
// the FP8 path where they have a site (linear_forward / linear_backward, gpu/linear.cuh); the
// trainer casts the weights again after every update (fp8_layers_cast_weights).
#pragma once
#include "../common/checkpoint.h"
#include "../kernels/fp8_linear.cuh"
#include "linear.cuh"

// --fp8-layers: which linear layers run in FP8 (a mask; 0: none)
// one bit per kind of linear layer (1 << LINEAR_*: every block's four, the lm_head); AUTO:
// chosen at start-up by timing each kind both ways at the run's shapes (gpu/fp8_auto.cuh)
enum {
    FP8_QKV = 1 << LINEAR_QKV, FP8_ATTPROJ = 1 << LINEAR_ATTPROJ, FP8_FC = 1 << LINEAR_FC,
    FP8_FCPROJ = 1 << LINEAR_FCPROJ, FP8_HEAD = 1 << LINEAR_HEAD,
    FP8_LAYERS_BLOCKS = 15, FP8_LAYERS_HEAD = 16, FP8_LAYERS_ALL = 31, FP8_LAYERS_AUTO = 32
};

// sites of a model of L layers: every block's four, then the lm_head
static int fp8_site_count(const GPT2Config *c) { return LINEAR_BLOCK_KINDS * c->num_layers + 1; }

typedef struct {
    int on;         // --fp8 1 (0: the rest is empty)
    int mask;       // the kinds of layer in FP8 (FP8_QKV ... FP8_HEAD): the setting's, or auto's choice
    int auto_pick;  // --fp8-layers auto: mask was chosen by timing (gpu/fp8_auto.cuh)
    int num_layers, delayed;
    int cast;       // --fp8-weights cast: no weight copies kept, each cast just before its matmul
    size_t N;       // rows of a micro-batch at most
    void *lent[2];         // the memory the blocks' layers and the lm_head cast into (fp8_layers_lend)
    size_t lent_bytes[2];
    Fp8Linear f8;
} Fp8Layers;

// The sites' weight shapes (OC x C; 0 x 0 for a layer not in FP8); returns their count.
// mask: FP8_* bits (FP8_LAYERS_AUTO: every kind, the most it may choose)
static int fp8_site_shapes(const GPT2Config *c, int mask, int *oc, int *cc) {
    const int n = fp8_site_count(c);
    if (mask & FP8_LAYERS_AUTO) mask = FP8_LAYERS_ALL;
    for (int i = 0; i < n; i++) {
        const int kind = i == n - 1 ? LINEAR_HEAD : i % LINEAR_BLOCK_KINDS, on = mask & (1 << kind);
        oc[i] = on ? linear_oc(c, kind) : 0;
        cc[i] = on ? linear_c(c, kind) : 0;
    }
    return n;
}

// bytes of each of the lm_head's own operand buffers at micro-batches of N rows: none where
// the memory it borrows (the MLP gradient's, 8 N C bytes in three) holds 64 rows of its
// gradient (N x Vp), else 64 rows of it, so that no chunk is too thin
static size_t fp8_head_buffer_bytes(const GPT2Config *c, size_t N) {
    const size_t rows = (size_t)64 * c->padded_vocab_size;
    return 8 * N * c->channels / 3 >= rows ? 0 : rows;
}

// device bytes of --fp8's state at micro-batches of N rows (0 without --fp8; auto: every
// kind, the most it may choose); cast: one weight buffer in place of the copies
static size_t fp8_plan_bytes(const GPT2Config *c, int mask, int cast, size_t N) {
    if (!mask) return 0;
    int *oc = (int *)xmalloc(fp8_site_count(c) * sizeof(int)), *cc = (int *)xmalloc(fp8_site_count(c) * sizeof(int));
    int n = fp8_site_shapes(c, mask, oc, cc);
    size_t b = fp8_linear_bytes(n, oc, cc, mask & (FP8_HEAD | FP8_LAYERS_AUTO) ? fp8_head_buffer_bytes(c, N) : 0, cast);
    free(oc);
    free(cc);
    return b;
}

// (Re)builds the FP8 state for the kinds of layer in mask (FP8_* bits; 0: none, every
// layer in bf16): the sites' weight copies, scales and buffers
static void fp8_layers_build(Fp8Layers *f, const GPT2Config *c, int mask) {
    fp8_linear_free(&f->f8);
    f->mask = mask;
    int n = fp8_site_count(c), *oc = (int *)xmalloc(n * sizeof(int));
    int *cc = (int *)xmalloc(n * sizeof(int));
    fp8_site_shapes(c, mask, oc, cc);
    fp8_linear_init(&f->f8, n, oc, cc, mask & FP8_HEAD ? fp8_head_buffer_bytes(c, f->N) : 0, f->delayed, f->cast);
    for (int r = 0; r < 2; r++)
        if (f->lent[r]) fp8_linear_lend(&f->f8, f->lent[r], f->lent_bytes[r], LINEAR_BLOCK_KINDS * c->num_layers, !r);
    free(oc);
    free(cc);
}

// The FP8 state of the settings' layers (mask: s->fp8_mask, 0 without --fp8; auto: every kind
// until fp8_auto_choose has chosen) for micro-batches of up to N rows; delayed: delayed
// scaling; cast: weights cast per matmul. Built by fp8_layers_lend, which gives it its memory.
static void fp8_layers_init(Fp8Layers *f, const GPT2Config *c, int mask, int delayed, int cast, size_t N) {
    memset(f, 0, sizeof *f);
    f->cast = cast > 0;
    f->N = N;
    f->on = mask != 0;
    f->auto_pick = (mask & FP8_LAYERS_AUTO) != 0;
    f->num_layers = c->num_layers;
    f->delayed = delayed;
    f->mask = f->auto_pick ? FP8_LAYERS_ALL : mask;
}

static void fp8_layers_free(Fp8Layers *f) {
    fp8_linear_free(&f->f8);
    memset(f, 0, sizeof *f);
}

// The FP8 layers borrow their operand buffers, and are built here. The blocks' layers cast
// their operands into the logits' memory (logits_bytes): no block runs between the lm_head's
// forward, which writes the logits, and its backward, which reads their gradient; it holds
// every operand of a block whole (12 N C bytes against the logits' 2 N Vp). The lm_head casts
// into the MLP gradient's scratch (dfch, 8 N C bytes), which only the blocks' backward uses
// (with buffers of its own where that is under 64 rows of its gradient: small micro-batches).
static void fp8_layers_lend(Fp8Layers *f, const GPT2Config *c, void *logits, size_t logits_bytes, void *dfch,
                            size_t dfch_bytes) {
    f->lent[0] = logits;
    f->lent_bytes[0] = logits_bytes;
    f->lent[1] = dfch;
    f->lent_bytes[1] = dfch_bytes;
    if (f->on) fp8_layers_build(f, c, f->mask);
}

// The kinds of layer (FP8_* bits) a checkpoint's FP8 state (fp8_linear_state_get's floats,
// which begin with every site's weight shape) was written for; -1 where its shapes are not
// those of some choice of kinds of this model
static int fp8_layers_mask_of_state(const GPT2Config *c, const float *state, size_t n) {
    const int sites = fp8_site_count(c);
    if (n < 2 * (size_t)sites) return -1;
    int *oc = (int *)xmalloc(sites * sizeof(int)), *cc = (int *)xmalloc(sites * sizeof(int)), found = -1;
    for (int mask = 0; mask <= FP8_LAYERS_ALL && found < 0; mask++) {
        fp8_site_shapes(c, mask, oc, cc);
        int same = 1;
        for (int i = 0; i < sites && same; i++) same = state[2 * i] == (float)oc[i] && state[2 * i + 1] == (float)cc[i];
        if (same) found = mask;
    }
    free(oc);
    free(cc);
    return found;
}

// "qkv,fc,head" for FP8_* bits ("none" for 0): the --fp8-layers that gives the same layers
static const char *fp8_kinds_text(int mask, char *buf, size_t cap) {
    buf[0] = 0;
    for (int k = 0; k < LINEAR_KINDS; k++)
        if (mask & (1 << k))
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? "," : "", LINEAR_KIND_NAMES[k]);
    if (!buf[0]) snprintf(buf, cap, "none");
    return buf;
}

// The site of layer l's linear layer of this kind (LINEAR_*; the lm_head's l is ignored), or
// -1 where that layer is not in FP8 (f NULL: none is)
static int fp8_site(const Fp8Layers *f, int kind, int l) {
    if (!f || !f->on || !(f->mask & (1 << kind))) return -1;
    return kind == LINEAR_HEAD ? LINEAR_BLOCK_KINDS * f->num_layers : LINEAR_BLOCK_KINDS * l + kind;
}

// On resume, the FP8 state a checkpoint holds (state: n floats of fp8_linear_state_get; path
// for the messages, which rank 0 prints: verbose). Under --fp8-layers auto the layers the
// run chose at its start come back (the state's site shapes say which), whatever this
// start's timing chose. Returns 1 when the scales are back (the caller casts the weights
// again with them); without them delayed scaling starts afresh, and says so.
static int fp8_layers_resume(Fp8Layers *f, const GPT2Config *c, const float *state, size_t n, const char *path,
                             int verbose) {
    const size_t want = f->on ? fp8_linear_state_floats(&f->f8) : 0;
    const int chosen = want && n == want ? fp8_layers_mask_of_state(c, state, want) : -1;
    if (f->auto_pick && chosen >= 0 && chosen != f->mask) {
        char was[64], now[64];
        if (verbose)
            printf("fp8 auto: %s was written with FP8 in %s (this start's timing chose %s): resuming with %s\n", path,
                   fp8_kinds_text(chosen, was, sizeof was), fp8_kinds_text(f->mask, now, sizeof now), was);
        fp8_layers_build(f, c, chosen);
    }
    if (want && n == want && fp8_linear_state_set(&f->f8, state)) return 1;
    if (want && f->delayed && verbose)
        printf("note: %s holds no FP8 scaling state of this run's layers; the first step scales itself, so the run "
               "continues close to, not bit for bit as, the one that wrote it\n", path);
    return 0;
}

// Every FP8 layer's weight to its FP8 copies; after each change of the parameters
static void fp8_layers_cast_weights(Fp8Layers *f, const GPT2Config *c, floatX *const *param, cudaStream_t s) {
    if (!f->on) return;
    for (int l = 0; l < c->num_layers; l++)
        for (int k = 0; k < LINEAR_BLOCK_KINDS; k++) {
            const int site = fp8_site(f, k, l);
            const size_t layer_elems = (size_t)linear_oc(c, k) * linear_c(c, k);
            if (site >= 0) fp8_linear_weight(&f->f8, site, param[LINEAR_SITES[k].weight] + l * layer_elems, s);
        }
    const int head = fp8_site(f, LINEAR_HEAD, 0);
    if (head >= 0) fp8_linear_weight(&f->f8, head, param[LINEAR_SITES[LINEAR_HEAD].weight], s);
}
