// checkpoint.h: the GPT-2 model shape and parameter layout (the one place that defines
// it), model descriptors (d12 ...), and the readers/writers of the model checkpoint,
// the reference debug state and the training state. Formats: SPEC.md §3 and README.
// Every reader validates magic, version, sizes and file length and stops with a
// message naming the file; writers replace files atomically.
#ifndef COMMON_CHECKPOINT_H
#define COMMON_CHECKPOINT_H
#include "util.h"
#include <math.h>

#define CKPT_MAGIC 20240326
#define CKPT_VERSION_FP32 3
#define CKPT_VERSION_BF16 5
#define DEBUG_STATE_MAGIC 20240327
#define STATE_MAGIC 20241202
#define STATE_VERSION 1
#define HEADER_INTS 256
#define NUM_PARAM_TENSORS 16

typedef struct {
    int max_seq_len;        // maxT
    int vocab_size;         // V (50257 for GPT-2)
    int padded_vocab_size;  // Vp: V rounded up to a multiple of 128
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB
};

static const char *const GPT2_PARAM_NAMES[NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// Element counts of each tensor, in file order. Weights are (out_features, in_features).
static inline void gpt2_param_sizes(const GPT2Config *c, size_t sizes[NUM_PARAM_TENSORS]) {
    size_t Vp = (size_t)c->padded_vocab_size, C = (size_t)c->channels;
    size_t L = (size_t)c->num_layers, maxT = (size_t)c->max_seq_len;
    sizes[P_WTE] = Vp * C;
    sizes[P_WPE] = maxT * C;
    sizes[P_LN1W] = L * C;
    sizes[P_LN1B] = L * C;
    sizes[P_QKVW] = L * 3 * C * C;
    sizes[P_QKVB] = L * 3 * C;
    sizes[P_ATTPROJW] = L * C * C;
    sizes[P_ATTPROJB] = L * C;
    sizes[P_LN2W] = L * C;
    sizes[P_LN2B] = L * C;
    sizes[P_FCW] = L * 4 * C * C;
    sizes[P_FCB] = L * 4 * C;
    sizes[P_FCPROJW] = L * C * 4 * C;
    sizes[P_FCPROJB] = L * C;
    sizes[P_LNFW] = C;
    sizes[P_LNFB] = C;
}

static inline size_t gpt2_num_params(const GPT2Config *c) {
    size_t sizes[NUM_PARAM_TENSORS], n = 0;
    gpt2_param_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) n += sizes[i];
    return n;
}

// Parameters without the zero padding rows of wte: the N of the MFU formula.
static inline size_t gpt2_num_real_params(const GPT2Config *c) {
    return gpt2_num_params(c) - (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels;
}

// Weight decay applies to the 2-D weight matrices only, never to biases or layernorms.
static inline int gpt2_param_is_decayed(int tensor) {
    return tensor == P_WTE || tensor == P_WPE || tensor == P_QKVW || tensor == P_ATTPROJW ||
           tensor == P_FCW || tensor == P_FCPROJW;
}

// Slices per tensor: the per-layer tensors hold num_layers equal slices, wte, wpe and
// lnf one (ZeRO shards every slice, see common/distributed.h).
static inline int gpt2_param_layers(const GPT2Config *c, int tensor) {
    return (tensor == P_WTE || tensor == P_WPE || tensor == P_LNFW || tensor == P_LNFB) ? 1 : c->num_layers;
}

// Training FLOPs per token, forward + backward (PaLM convention, SPEC §7), for sequence T.
static inline double gpt2_flops_per_token(const GPT2Config *c, int T) {
    return 6.0 * (double)gpt2_num_real_params(c) +
           12.0 * c->num_layers * (double)T * c->channels;
}

// Returns NULL if the shape is usable, else a description of what is wrong.
static inline const char *gpt2_config_problem(const GPT2Config *c) {
    if (c->num_layers < 1 || c->num_layers > 1024) return "num_layers must be in 1..1024";
    if (c->num_heads < 1) return "num_heads must be positive";
    if (c->channels < 1 || c->channels > 65536) return "channels must be in 1..65536";
    if (c->channels % c->num_heads) return "channels must be divisible by num_heads";
    if (c->max_seq_len < 1 || c->max_seq_len > 1 << 20) return "max_seq_len must be in 1..1048576";
    if (c->vocab_size < 1 || c->vocab_size > 1 << 24) return "vocab_size out of range";
    if (c->padded_vocab_size < c->vocab_size) return "padded_vocab_size is below vocab_size";
    return NULL;
}

static inline int round_up_128(int v) { return (v + 127) / 128 * 128; }

// Model descriptors for training from random init:
//   d12, d24, d36, d48          GPT-2 124M, 350M, 774M, 1558M shapes (maxT 1024)
//   l<L>h<H>c<C>[t<maxT>]       any shape, e.g. l4h4c256t256
// Returns 1 and fills c if desc is a descriptor, 0 if it is not one (e.g. a file path).
static inline int gpt2_config_from_descriptor(const char *desc, GPT2Config *c) {
    int L = 0, H = 0, C = 0, maxT = 1024, used = 0;
    if (!strcmp(desc, "d12")) { L = 12; H = 12; C = 768; }
    else if (!strcmp(desc, "d24")) { L = 24; H = 16; C = 1024; }
    else if (!strcmp(desc, "d36")) { L = 36; H = 20; C = 1280; }
    else if (!strcmp(desc, "d48")) { L = 48; H = 25; C = 1600; }
    else {
        const char *p = desc;
        if (sscanf(p, "l%dh%dc%d%n", &L, &H, &C, &used) != 3) return 0;
        p += used;
        if (*p == 't') {
            if (sscanf(p, "t%d%n", &maxT, &used) != 1) return 0;
            p += used;
        }
        if (*p) return 0;
    }
    c->num_layers = L;
    c->num_heads = H;
    c->channels = C;
    c->max_seq_len = maxT;
    c->vocab_size = 50257;
    c->padded_vocab_size = round_up_128(c->vocab_size);
    return 1;
}

// ---------------------------------------------------------------------------
// bf16 conversion (round to nearest even; NaN stays NaN)

static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// ---------------------------------------------------------------------------
// Model checkpoint

static inline void header_to_config(const int *h, GPT2Config *c) {
    c->max_seq_len = h[2];
    c->vocab_size = h[3];
    c->num_layers = h[4];
    c->num_heads = h[5];
    c->channels = h[6];
    c->padded_vocab_size = h[7];
}

// Reads a checkpoint (fp32 or bf16); returns the parameters as a malloc'd fp32 array.
static inline float *gpt2_checkpoint_read(const char *path, GPT2Config *cfg) {
    FILE *f = xfopen(path, "rb");
    int64_t fsize = xfile_size(f, path);
    if (fsize < (int64_t)(HEADER_INTS * sizeof(int)))
        fatal("%s is not a model checkpoint: %lld bytes, shorter than the 1024-byte header",
              path, (long long)fsize);
    int h[HEADER_INTS];
    xfread(h, sizeof(int), HEADER_INTS, f, path);
    if (h[0] != CKPT_MAGIC)
        fatal("%s is not a model checkpoint: magic %d, expected %d", path, h[0], CKPT_MAGIC);
    if (h[1] != CKPT_VERSION_FP32 && h[1] != CKPT_VERSION_BF16)
        fatal("%s: checkpoint version %d is not supported (3 = fp32, 5 = bf16)", path, h[1]);
    header_to_config(h, cfg);
    const char *problem = gpt2_config_problem(cfg);
    if (problem) fatal("%s: bad model shape in header: %s", path, problem);
    size_t n = gpt2_num_params(cfg);
    size_t elem = h[1] == CKPT_VERSION_FP32 ? 4 : 2;
    int64_t expect = (int64_t)(HEADER_INTS * sizeof(int)) + (int64_t)(n * elem);
    if (fsize != expect)
        fatal("%s: file is %lld bytes but its header implies %lld (%zu parameters of %zu bytes)%s",
              path, (long long)fsize, (long long)expect, n, elem,
              fsize < expect ? ": truncated" : "");
    float *params = (float *)xmalloc(n * sizeof(float));
    if (elem == 4) {
        xfread(params, sizeof(float), n, f, path);
    } else {
        uint16_t *tmp = (uint16_t *)xmalloc(n * sizeof(uint16_t));
        xfread(tmp, sizeof(uint16_t), n, f, path);
        for (size_t i = 0; i < n; i++) params[i] = bf16_to_float(tmp[i]);
        free(tmp);
    }
    fclose(f);
    return params;
}

static inline void config_to_header(const GPT2Config *c, int version, int *h) {
    memset(h, 0, HEADER_INTS * sizeof(int));
    h[0] = CKPT_MAGIC;
    h[1] = version;
    h[2] = c->max_seq_len;
    h[3] = c->vocab_size;
    h[4] = c->num_layers;
    h[5] = c->num_heads;
    h[6] = c->channels;
    h[7] = c->padded_vocab_size;
}

// Writes fp32 params (n = gpt2_num_params) as version 3, or as bf16 version 5.
static inline void gpt2_checkpoint_write(const char *path, const GPT2Config *cfg, const float *params, int as_bf16) {
    int h[HEADER_INTS];
    config_to_header(cfg, as_bf16 ? CKPT_VERSION_BF16 : CKPT_VERSION_FP32, h);
    size_t n = gpt2_num_params(cfg);
    AtomicFile a = atomic_open(path);
    xfwrite(h, sizeof(int), HEADER_INTS, a.f, a.tmp_path);
    if (!as_bf16) {
        xfwrite(params, sizeof(float), n, a.f, a.tmp_path);
    } else {
        const size_t chunk = 1 << 20;
        uint16_t *tmp = (uint16_t *)xmalloc(chunk * sizeof(uint16_t));
        for (size_t i = 0; i < n; i += chunk) {
            size_t m = n - i < chunk ? n - i : chunk;
            for (size_t j = 0; j < m; j++) tmp[j] = float_to_bf16(params[i + j]);
            xfwrite(tmp, sizeof(uint16_t), m, a.f, a.tmp_path);
        }
        free(tmp);
    }
    atomic_commit(&a);
}

// ---------------------------------------------------------------------------
// Debug state: the reference activations and gradients of one batch (SPEC §3).
// Version 2: header [2]=B [3]=T; x, y, logits (B,T,V), loss, grads (checkpoint order).
// Version 3 (ours) adds header [4]=V, [5]=nsteps and appends losses[nsteps] (the loss
// before each of nsteps AdamW steps on the batch) and hparams[8] = {lr, beta1, beta2,
// eps, weight_decay, grad_clip, 0, 0}.

typedef struct {
    int B, T, V, nsteps;
    int *x, *y;
    float *logits, loss, *grads;
    float *losses;      // nsteps values (NULL for version 2)
    float hparams[8];
} DebugState;

static inline void debug_state_read(const char *path, const GPT2Config *cfg, DebugState *d) {
    FILE *f = xfopen(path, "rb");
    int64_t fsize = xfile_size(f, path);
    if (fsize < (int64_t)(HEADER_INTS * sizeof(int))) fatal("%s is too short to be a debug state", path);
    int h[HEADER_INTS];
    xfread(h, sizeof(int), HEADER_INTS, f, path);
    if (h[0] != DEBUG_STATE_MAGIC) fatal("%s is not a debug state: magic %d, expected %d", path, h[0], DEBUG_STATE_MAGIC);
    if (h[1] != 2 && h[1] != 3) fatal("%s: debug state version %d is not supported (2 or 3)", path, h[1]);
    memset(d, 0, sizeof *d);
    d->B = h[2];
    d->T = h[3];
    d->V = h[1] == 3 ? h[4] : cfg->vocab_size;
    d->nsteps = h[1] == 3 ? h[5] : 0;
    if (d->B < 1 || d->T < 1 || d->T > cfg->max_seq_len || d->V != cfg->vocab_size || d->nsteps < 0 || d->nsteps > 100000)
        fatal("%s: header (B=%d T=%d V=%d steps=%d) does not fit the model (maxT=%d V=%d)",
              path, d->B, d->T, d->V, d->nsteps, cfg->max_seq_len, cfg->vocab_size);
    size_t BT = (size_t)d->B * d->T, np = gpt2_num_params(cfg);
    int64_t expect = (int64_t)(HEADER_INTS * 4) + (int64_t)(4 * (2 * BT + BT * d->V + 1 + np));
    if (h[1] == 3) expect += 4 * (d->nsteps + 8);
    if (fsize != expect)
        fatal("%s: file is %lld bytes, expected %lld for this model and header", path, (long long)fsize, (long long)expect);
    d->x = (int *)xmalloc(BT * sizeof(int));
    d->y = (int *)xmalloc(BT * sizeof(int));
    d->logits = (float *)xmalloc(BT * d->V * sizeof(float));
    d->grads = (float *)xmalloc(np * sizeof(float));
    xfread(d->x, sizeof(int), BT, f, path);
    xfread(d->y, sizeof(int), BT, f, path);
    xfread(d->logits, sizeof(float), BT * d->V, f, path);
    xfread(&d->loss, sizeof(float), 1, f, path);
    xfread(d->grads, sizeof(float), np, f, path);
    if (h[1] == 3) {
        d->losses = (float *)xmalloc((size_t)(d->nsteps + 1) * sizeof(float));
        xfread(d->losses, sizeof(float), (size_t)d->nsteps, f, path);
        xfread(d->hparams, sizeof(float), 8, f, path);
    }
    fclose(f);
    for (size_t i = 0; i < BT; i++)
        if (d->x[i] < 0 || d->x[i] >= d->V || d->y[i] < 0 || d->y[i] >= d->V)
            fatal("%s: token id out of range at position %zu", path, i);
}

// The error measure of SPEC §6 for comparing a tensor with the reference: max |a - ref|
// over max |ref| (the max abs error itself in *max_abs_err). A NaN in a propagates.
static inline double rel_error(const float *a, const float *ref, size_t n, double *max_abs_err) {
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d <= err)) err = d;
        if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    }
    if (max_abs_err) *max_abs_err = err;
    return scale > 0 ? err / scale : err;
}

static inline void debug_state_free(DebugState *d) {
    free(d->x); free(d->y); free(d->logits); free(d->grads); free(d->losses);
}

// ---------------------------------------------------------------------------
// Training state, for resuming bit-exactly (our own format; README "File formats").
// header 256 int32: [0]=STATE_MAGIC [1]=STATE_VERSION [2]=step (steps completed)
//   [3]=has_master [4]=world_size [5]=rank [6]=loader_pos_bytes [7]=loss_scale_good_steps
//   [8..9]=num_params (int64) [10..11]=rng state (uint64) [12]=loss_scale (float bits)
//   [32..63]=data loader position (raw bytes of the loader's POD position struct)
// then m[n], v[n] (fp32 AdamW moments) and, if has_master, master[n] (fp32 weights).
// n is this rank's number of optimizer elements (a shard under ZeRO).

#define STATE_LOADER_POS_MAX 128

typedef struct {
    int step, world_size, rank;
    uint64_t rng;
    float loss_scale;
    int loss_scale_good_steps;
    uint8_t loader_pos[STATE_LOADER_POS_MAX];
    int loader_pos_bytes;
    size_t n;
    float *m, *v, *master;  // master may be NULL
} TrainState;

static inline void train_state_write(const char *path, const TrainState *s) {
    if (s->loader_pos_bytes > STATE_LOADER_POS_MAX) fatal("internal: data loader position too large");
    int h[HEADER_INTS];
    memset(h, 0, sizeof h);
    h[0] = STATE_MAGIC;
    h[1] = STATE_VERSION;
    h[2] = s->step;
    h[3] = s->master != NULL;
    h[4] = s->world_size;
    h[5] = s->rank;
    h[6] = s->loader_pos_bytes;
    h[7] = s->loss_scale_good_steps;
    int64_t n = (int64_t)s->n;
    memcpy(&h[8], &n, 8);
    memcpy(&h[10], &s->rng, 8);
    memcpy(&h[12], &s->loss_scale, 4);
    memcpy(&h[32], s->loader_pos, (size_t)s->loader_pos_bytes);
    AtomicFile a = atomic_open(path);
    xfwrite(h, sizeof(int), HEADER_INTS, a.f, a.tmp_path);
    xfwrite(s->m, sizeof(float), s->n, a.f, a.tmp_path);
    xfwrite(s->v, sizeof(float), s->n, a.f, a.tmp_path);
    if (s->master) xfwrite(s->master, sizeof(float), s->n, a.f, a.tmp_path);
    atomic_commit(&a);
}

// Reads into s, whose n, m, v (and master, if the run keeps one) are already allocated by
// the caller; every mismatch with the current run is an error naming the file.
static inline void train_state_read(const char *path, TrainState *s) {
    FILE *f = xfopen(path, "rb");
    int64_t fsize = xfile_size(f, path);
    if (fsize < HEADER_INTS * 4) fatal("%s is too short to be a training state", path);
    int h[HEADER_INTS];
    xfread(h, sizeof(int), HEADER_INTS, f, path);
    if (h[0] != STATE_MAGIC) fatal("%s is not a training state: magic %d, expected %d", path, h[0], STATE_MAGIC);
    if (h[1] != STATE_VERSION) fatal("%s: training state version %d is not supported (expected %d)", path, h[1], STATE_VERSION);
    int64_t n;
    memcpy(&n, &h[8], 8);
    if (n != (int64_t)s->n) fatal("%s holds %lld optimizer elements, this run has %zu: different model or rank count", path, (long long)n, s->n);
    if (h[4] != s->world_size || h[5] != s->rank)
        fatal("%s was written by rank %d of %d; this process is rank %d of %d: resume with the same number of ranks", path, h[5], h[4], s->rank, s->world_size);
    if ((h[3] != 0) != (s->master != NULL)) fatal("%s: master weights %s in the file but %s by this run", path, h[3] ? "present" : "absent", s->master ? "needed" : "not used");
    if (h[6] != s->loader_pos_bytes) fatal("%s: data loader position has %d bytes, expected %d", path, h[6], s->loader_pos_bytes);
    if (h[2] < 0) fatal("%s: negative step %d", path, h[2]);
    int64_t expect = HEADER_INTS * 4 + (int64_t)4 * n * (h[3] ? 3 : 2);
    if (fsize != expect) fatal("%s is %lld bytes, expected %lld%s", path, (long long)fsize, (long long)expect, fsize < expect ? " (truncated)" : "");
    s->step = h[2];
    s->loss_scale_good_steps = h[7];
    memcpy(&s->rng, &h[10], 8);
    memcpy(&s->loss_scale, &h[12], 4);
    memcpy(s->loader_pos, &h[32], (size_t)h[6]);
    xfread(s->m, sizeof(float), s->n, f, path);
    xfread(s->v, sizeof(float), s->n, f, path);
    if (s->master) xfread(s->master, sizeof(float), s->n, f, path);
    fclose(f);
}

#endif // COMMON_CHECKPOINT_H
