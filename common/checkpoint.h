// checkpoint.h: the GPT-2 model shape and parameter layout (the one place that defines
// it), model descriptors (d12 ...), and the readers/writers of the model checkpoint,
// the reference debug state and the training state. Formats: docs/formats.md.
// Every reader validates magic, version, sizes and file length and stops with a
// message naming the file; writers replace files atomically.
#ifndef COMMON_CHECKPOINT_H
#define COMMON_CHECKPOINT_H
#include "util.h"
#include "crc32c.h"
#include "outlier.h"
#include <math.h>

#define CKPT_MAGIC 20240326
#define CKPT_VERSION_FP32 3
#define CKPT_VERSION_BF16 5
#define DEBUG_STATE_MAGIC 20240327
#define STATE_MAGIC 20241202
// version 2 and up always carry the checksum and the fields [13..31], [64]; version 1 (older
// writers) has neither and is still read; version 3 adds the FP8 scaling state
#define STATE_VERSION 3
#define HEADER_INTS 256
#define NUM_PARAM_TENSORS 16

// The checksum of our model and training-state files lives in two header slots that
// llm.c's formats leave zero, so llm.c reads our files and we read its files (which have
// no checksum: their sizes and values are still checked). With the tag present, the CRC
// is CRC-32C of the whole file computed with the CRC slot set to zero.
#define CKSUM_TAG_SLOT 250
#define CKSUM_SLOT 251
#define CKSUM_TAG 0x43524332  // "2CRC"

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

// Training FLOPs per token, forward + backward (PaLM convention, docs/performance.md), for sequence T.
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

// One "<letter><digits>" part of a descriptor: at most 9 digits, so no overflow.
static inline int desc_number(const char **p, char letter, int *out) {
    const char *q = *p;
    if (*q++ != letter) return 0;
    int v = 0, digits = 0;
    for (; *q >= '0' && *q <= '9' && digits < 9; q++, digits++) v = v * 10 + (*q - '0');
    if (!digits || (*q >= '0' && *q <= '9')) return 0;
    *out = v;
    *p = q;
    return 1;
}

// Model descriptors for training from random init:
//   d12, d24, d36, d48          GPT-2 124M, 350M, 774M, 1558M shapes (maxT 1024)
//   l<L>h<H>c<C>[t<maxT>]       any shape, e.g. l4h4c256t256
// Returns 1 and fills c if desc is a descriptor, 0 if it is not one (e.g. a file path).
static inline int gpt2_config_from_descriptor(const char *desc, GPT2Config *c) {
    int L = 0, H = 0, C = 0, maxT = 1024;
    if (!strcmp(desc, "d12")) { L = 12; H = 12; C = 768; }
    else if (!strcmp(desc, "d24")) { L = 24; H = 16; C = 1024; }
    else if (!strcmp(desc, "d36")) { L = 36; H = 20; C = 1280; }
    else if (!strcmp(desc, "d48")) { L = 48; H = 25; C = 1600; }
    else {
        // letters and plain digits only: sscanf's %d would take "l 2h 2c 64" or "l+2h2c64"
        const char *p = desc;
        if (!desc_number(&p, 'l', &L) || !desc_number(&p, 'h', &H) || !desc_number(&p, 'c', &C)) return 0;
        if (*p == 't' && !desc_number(&p, 't', &maxT)) return 0;
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

// The CRC-32C of a file of our formats from its header and body (the CRC slot as zero).
static inline uint32_t header_body_crc(const int *h, const void *body, size_t body_bytes) {
    int hz[HEADER_INTS];
    memcpy(hz, h, sizeof hz);
    hz[CKSUM_SLOT] = 0;
    return crc32c_update(crc32c_update(0, hz, sizeof hz), body, body_bytes);
}

// A header's checksum against the body read with it: NULL if it matches or the file has
// none (llm.c's files), else a description of the mismatch.
static inline const char *checksum_problem(const int *h, const void *body, size_t body_bytes) {
    if (h[CKSUM_TAG_SLOT] != CKSUM_TAG) return NULL;
    return header_body_crc(h, body, body_bytes) == (uint32_t)h[CKSUM_SLOT] ? NULL :
           "checksum mismatch: the file is corrupt (its bytes changed after it was written)";
}

// The first non-finite value of x, or -1.
static inline int64_t first_non_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (int64_t)i;
    return -1;
}

// Stops naming the file and tensor if a loaded parameter is NaN or infinite: training
// from such weights only produces skipped steps.
static inline void check_params_finite(const char *path, const GPT2Config *cfg, const float *params) {
    size_t sizes[NUM_PARAM_TENSORS], off = 0;
    gpt2_param_sizes(cfg, sizes);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        int64_t i = first_non_finite(params + off, sizes[k]);
        if (i >= 0) fatal("%s: parameter %s holds a non-finite value (%g) at element %lld: the file is corrupt", path,
                          GPT2_PARAM_NAMES[k], params[off + i], (long long)i);
        off += sizes[k];
    }
}

// Whether the first n bytes of a file of fsize bytes begin as a safetensors file does: a
// little-endian header length that the file holds, then the header's '{'.
static inline int looks_like_safetensors(const uint8_t *b, size_t n, int64_t fsize) {
    if (n < 9 || b[8] != '{') return 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
    return hlen >= 2 && hlen <= (uint64_t)fsize - 8;
}

// Reads a checkpoint (fp32 or bf16); returns the parameters as a malloc'd fp32 array.
// The checksum (when the file has one) and the values' finiteness are checked.
static inline float *gpt2_checkpoint_read(const char *path, GPT2Config *cfg) {
    const char *kind = not_regular_file(path);
    if (kind)
        fatal("%s is %s: a model checkpoint is a regular file", path, kind);
    FILE *f = xfopen(path, "rb");
    int64_t fsize = xfile_size(f, path);
    int h[HEADER_INTS] = {0};
    size_t head = fsize < (int64_t)sizeof h ? (size_t)fsize : sizeof h;
    xfread(h, 1, head, f, path);
    // Hugging Face's weights are read from their directory, which holds the config too
    if (h[0] != CKPT_MAGIC && looks_like_safetensors((const uint8_t *)h, head, fsize)) {
        const char *slash = strrchr(path, '/');
        int n = slash ? (slash == path ? 1 : (int)(slash - path)) : 1;
        const char *dir = slash ? path : ".";
        fatal("%s is a safetensors file, not a model checkpoint: -e takes its directory, %.*s (the Hugging Face "
              "model, with config.json); build/export_hf --import %.*s OUT.bin converts it", path, n, dir, n, dir);
    }
    if (fsize < (int64_t)sizeof h)
        fatal("%s is not a model checkpoint: %lld bytes, shorter than the 1024-byte header",
              path, (long long)fsize);
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
        problem = checksum_problem(h, params, n * sizeof(float));
    } else {
        uint16_t *tmp = (uint16_t *)xmalloc(n * sizeof(uint16_t));
        xfread(tmp, sizeof(uint16_t), n, f, path);
        problem = checksum_problem(h, tmp, n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) params[i] = bf16_to_float(tmp[i]);
        free(tmp);
    }
    fclose(f);
    if (problem) fatal("%s: %s", path, problem);
    check_params_finite(path, cfg, params);
    return params;
}

// The checksum a file of ours holds in its header (0 for a file without one).
static inline uint32_t header_checksum(const int *h) {
    return h[CKSUM_TAG_SLOT] == CKSUM_TAG ? (uint32_t)h[CKSUM_SLOT] : 0u;
}

// Streams header and body into an atomic file (common/util.h), tagging the header and
// computing the checksum on the way; cw_finish rewrites the header with it. The caller
// commits the file: a checkpoint commits its two files in the order that keeps it whole.
typedef struct {
    AtomicFile *a;
    int h[HEADER_INTS];
    uint32_t crc;
} ChecksummedWriter;

static inline void cw_open(ChecksummedWriter *w, AtomicFile *a, const int *header) {
    memcpy(w->h, header, sizeof w->h);
    w->h[CKSUM_TAG_SLOT] = CKSUM_TAG;
    w->h[CKSUM_SLOT] = 0;
    w->a = a;
    atomic_write(a, w->h, sizeof(int), HEADER_INTS);
    w->crc = crc32c_update(0, w->h, sizeof w->h);
}

static inline void cw_write(ChecksummedWriter *w, const void *data, size_t size, size_t count) {
    atomic_write(w->a, data, size, count);
    w->crc = crc32c_update(w->crc, data, size * count);
}

// Returns the checksum written.
static inline uint32_t cw_finish(ChecksummedWriter *w) {
    w->h[CKSUM_SLOT] = (int)w->crc;
    errno = 0;
    if (fflush(w->a->f) != 0)  // (seeking would flush, and name the wrong call when that fails)
        fatal("cannot write %s: %s", w->a->tmp_path, errno ? strerror(errno) : "write error (disk full?)");
    if (fseeko(w->a->f, 0, SEEK_SET) != 0) fatal("cannot seek in %s: %s", w->a->tmp_path, strerror(errno));
    atomic_write(w->a, w->h, sizeof(int), HEADER_INTS);
    return w->crc;
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

// Writes fp32 params (n = gpt2_num_params) as version 3, or as bf16 version 5, into a,
// uncommitted; returns the file's checksum (a training state records it, to tie itself to
// this model file).
static inline uint32_t gpt2_checkpoint_write_to(AtomicFile *a, const GPT2Config *cfg, const float *params,
                                                int as_bf16) {
    int h[HEADER_INTS];
    config_to_header(cfg, as_bf16 ? CKPT_VERSION_BF16 : CKPT_VERSION_FP32, h);
    size_t n = gpt2_num_params(cfg);
    ChecksummedWriter w;
    cw_open(&w, a, h);
    if (!as_bf16) {
        cw_write(&w, params, sizeof(float), n);
    } else {
        const size_t chunk = 1 << 20;
        uint16_t *tmp = (uint16_t *)xmalloc(chunk * sizeof(uint16_t));
        for (size_t i = 0; i < n; i += chunk) {
            size_t m = n - i < chunk ? n - i : chunk;
            for (size_t j = 0; j < m; j++) tmp[j] = float_to_bf16(params[i + j]);
            cw_write(&w, tmp, sizeof(uint16_t), m);
        }
        free(tmp);
    }
    return cw_finish(&w);
}

// The same into the file at path, replaced atomically.
static inline uint32_t gpt2_checkpoint_write(const char *path, const GPT2Config *cfg, const float *params,
                                             int as_bf16) {
    AtomicFile a = atomic_open(path);
    uint32_t crc = gpt2_checkpoint_write_to(&a, cfg, params, as_bf16);
    atomic_commit(&a);
    return crc;
}

// ---------------------------------------------------------------------------
// Debug state: the reference activations and gradients of one batch (docs/formats.md).
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
    if (h[0] != DEBUG_STATE_MAGIC)
        fatal("%s is not a debug state: magic %d, expected %d", path, h[0], DEBUG_STATE_MAGIC);
    if (h[1] != 2 && h[1] != 3) fatal("%s: debug state version %d is not supported (2 or 3)", path, h[1]);
    memset(d, 0, sizeof *d);
    d->B = h[2];
    d->T = h[3];
    d->V = h[1] == 3 ? h[4] : cfg->vocab_size;
    d->nsteps = h[1] == 3 ? h[5] : 0;
    if (d->B < 1 || d->T < 1 || d->T > cfg->max_seq_len || d->V != cfg->vocab_size || d->nsteps < 0 ||
        d->nsteps > 100000)
        fatal("%s: header (B=%d T=%d V=%d steps=%d) does not fit the model (maxT=%d V=%d)",
              path, d->B, d->T, d->V, d->nsteps, cfg->max_seq_len, cfg->vocab_size);
    size_t BT = (size_t)d->B * d->T, np = gpt2_num_params(cfg);
    int64_t expect = (int64_t)(HEADER_INTS * 4) + (int64_t)(4 * (2 * BT + BT * d->V + 1 + np));
    if (h[1] == 3) expect += 4 * (d->nsteps + 8);
    if (fsize != expect)
        fatal("%s: file is %lld bytes, expected %lld for this model and header", path, (long long)fsize,
              (long long)expect);
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

// The error measure of docs/testing.md for comparing a tensor with the reference: max |a - ref|
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
// Training state, for resuming bit-exactly (our own format; docs/formats.md).
// header 256 int32: [0]=STATE_MAGIC [1]=STATE_VERSION [2]=step (steps completed)
//   [3]=has_master [4]=world_size [5]=rank [6]=loader_pos_bytes [7]=loss_scale_good_steps
//   [8..9]=num_params (int64) [10..11]=rng state (uint64) [12]=loss_scale (float bits)
//   [13]=consecutive skipped updates [14..15]=bytes of main.log at this step (int64)
//   [16]=the model file's checksum [17..31]=the run's settings (common/run_state.h)
//   [32..63]=data loader position (raw bytes of the loader's POD position struct)
//   [64]=updates skipped in all (AdamW's step count is the step less these)
//   [65..66]=values held in the loss and gradient-norm windows of -sl / -sg (common/outlier.h)
//   [67..68]=bytes of metrics.jsonl at this step (int64)
//   [69]=floats of the FP8 state at the end (version 3; 0 without --fp8)
//   [250..251]=checksum tag and CRC-32C (files without the tag: [13..31] unrecorded)
// then m[n], v[n] (fp32 AdamW moments), if has_master master[n] (fp32 weights), from
// version 2 the two windows, OUTLIER_WINDOW floats each (loss, then norm; oldest first),
// and in version 3 the FP8 scaling state ([69] floats, the GPU trainer's to read).
// n is this rank's number of optimizer elements (a shard under ZeRO).

#define STATE_LOADER_POS_MAX 128
#define STATE_SETTINGS 15

typedef struct {
    int step, world_size, rank;
    uint64_t rng;
    float loss_scale;
    int loss_scale_good_steps;
    uint8_t loader_pos[STATE_LOADER_POS_MAX];
    int loader_pos_bytes;
    size_t n;
    float *m, *v, *master;  // master may be NULL
    // recorded by this version's writer; has_ext = 0 when read from an older file
    int has_ext, skipped_in_a_row, skipped_total;
    int64_t log_bytes;    // main.log's length when the checkpoint was written
    int64_t json_bytes;   // metrics.jsonl's length then
    uint32_t model_crc;   // checksum of model_<step>.bin, which this state belongs to
    int32_t settings[STATE_SETTINGS];
    RecentValues recent_loss, recent_norm;  // -sl / -sg's windows
    // --fp8's delayed scaling (amax histories, scales): fp8_n floats; written when fp8_n > 0,
    // read into a buffer train_state_read allocates (NULL, 0 when the file has none)
    int fp8_n;
    float *fp8;
} TrainState;

// The most FP8 scaling floats a state may hold (a sanity bound on header slot 69)
#define STATE_FP8_MAX (1 << 24)

// Bytes of a state file of n elements: version 1 has no windows, versions 1-2 no FP8 state.
static inline int64_t train_state_bytes(int version, int64_t n, int has_master, int fp8_n) {
    return HEADER_INTS * 4 + (int64_t)4 * n * (has_master ? 3 : 2) + (version >= 2 ? 4 * 2 * OUTLIER_WINDOW : 0) +
           (version >= 3 ? (int64_t)4 * fp8_n : 0);
}

// Writes s into a, uncommitted (the run directory commits it after the model file).
static inline void train_state_write_to(AtomicFile *a, const TrainState *s) {
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
    h[13] = s->skipped_in_a_row;
    memcpy(&h[14], &s->log_bytes, 8);
    h[16] = (int)s->model_crc;
    memcpy(&h[17], s->settings, sizeof s->settings);
    memcpy(&h[32], s->loader_pos, (size_t)s->loader_pos_bytes);
    h[64] = s->skipped_total;
    h[65] = s->recent_loss.count;
    h[66] = s->recent_norm.count;
    memcpy(&h[67], &s->json_bytes, 8);
    h[69] = s->fp8_n;
    ChecksummedWriter w;
    cw_open(&w, a, h);
    cw_write(&w, s->m, sizeof(float), s->n);
    cw_write(&w, s->v, sizeof(float), s->n);
    if (s->master) cw_write(&w, s->master, sizeof(float), s->n);
    cw_write(&w, s->recent_loss.values, sizeof(float), OUTLIER_WINDOW);
    cw_write(&w, s->recent_norm.values, sizeof(float), OUTLIER_WINDOW);
    if (s->fp8_n > 0) cw_write(&w, s->fp8, sizeof(float), (size_t)s->fp8_n);
    cw_finish(&w);
}

static inline void train_state_write(const char *path, const TrainState *s) {
    AtomicFile a = atomic_open(path);
    train_state_write_to(&a, s);
    atomic_commit(&a);
}

// Reads a state file's header and checks what it says on its own: magic, version, the
// step against the one its name gives (expect_step; -1: not checked) and the file's
// length. Returns NULL, or a description of the problem (in why).
static inline const char *train_state_header_problem(const char *path, int expect_step, int *h, char *why, size_t cap) {
    const char *kind = not_regular_file(path);
    if (kind) { snprintf(why, cap, "it is %s, not a regular file", kind); return why; }
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(why, cap, "cannot open it: %s", strerror(errno)); return why; }
    struct stat st;
    size_t got = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) ? fread(h, sizeof(int), HEADER_INTS, f) : 0;
    fclose(f);
    int64_t n;
    memcpy(&n, &h[8], 8);
    if (got != HEADER_INTS) snprintf(why, cap, "not a regular file of at least the 1024-byte header");
    else if (h[0] != STATE_MAGIC) snprintf(why, cap, "not a training state: magic %d, expected %d", h[0], STATE_MAGIC);
    else if (h[1] < 1 || h[1] > STATE_VERSION)
        snprintf(why, cap, "training state version %d is not supported (1 to %d)", h[1], STATE_VERSION);
    else if (h[1] >= 2 && h[CKSUM_TAG_SLOT] != CKSUM_TAG)
        snprintf(why, cap, "the checksum tag of a version %d state is missing: the file is corrupt", h[1]);
    else if (h[2] < 0 || (expect_step >= 0 && h[2] != expect_step))
        snprintf(why, cap, "its header says step %d, its name step %d (a renamed file?)", h[2], expect_step);
    else if (n < 0 || n > ((int64_t)1 << 40) || h[6] < 0 || h[6] > STATE_LOADER_POS_MAX)
        snprintf(why, cap, "header holds impossible sizes");
    else if (h[1] >= 2 && (h[65] < 0 || h[65] > OUTLIER_WINDOW || h[66] < 0 || h[66] > OUTLIER_WINDOW))
        snprintf(why, cap, "header holds impossible outlier window counts");
    else if (h[1] >= 3 && (h[69] < 0 || h[69] > STATE_FP8_MAX))
        snprintf(why, cap, "header holds an impossible FP8 state size (%d floats)", h[69]);
    else if ((int64_t)st.st_size != train_state_bytes(h[1], n, h[3], h[1] >= 3 ? h[69] : 0))
        snprintf(why, cap, "%lld bytes, its header implies %lld%s", (long long)st.st_size,
                 (long long)train_state_bytes(h[1], n, h[3], h[1] >= 3 ? h[69] : 0),
                 (int64_t)st.st_size < train_state_bytes(h[1], n, h[3], h[1] >= 3 ? h[69] : 0) ? " (truncated)" : "");
    else return NULL;
    return why;
}

// Reads into s, whose n, m, v (and master, if the run keeps one) are already allocated by
// the caller; every mismatch with the current run is an error naming the file.
static inline void train_state_read(const char *path, TrainState *s) {
    int h[HEADER_INTS];
    char why[256];
    if (train_state_header_problem(path, -1, h, why, sizeof why)) fatal("%s: %s", path, why);
    int64_t n;
    memcpy(&n, &h[8], 8);
    if (n != (int64_t)s->n)
        fatal("%s holds %lld optimizer elements, this run has %zu: different model or rank count", path, (long long)n,
              s->n);
    if (h[4] != s->world_size || h[5] != s->rank)
        fatal("%s was written by rank %d of %d; this process is rank %d of %d: resume with the same number of ranks",
              path, h[5], h[4], s->rank, s->world_size);
    if ((h[3] != 0) != (s->master != NULL))
        fatal("%s: master weights %s in the file but %s by this run", path, h[3] ? "present" : "absent",
              s->master ? "needed" : "not used");
    if (h[6] != s->loader_pos_bytes)
        fatal("%s: data loader position has %d bytes, expected %d", path, h[6], s->loader_pos_bytes);
    FILE *f = xfopen(path, "rb");
    if (fseeko(f, HEADER_INTS * 4, SEEK_SET) != 0) fatal("cannot seek in %s: %s", path, strerror(errno));
    xfread(s->m, sizeof(float), s->n, f, path);
    xfread(s->v, sizeof(float), s->n, f, path);
    if (s->master) xfread(s->master, sizeof(float), s->n, f, path);
    memset(&s->recent_loss, 0, sizeof s->recent_loss);
    memset(&s->recent_norm, 0, sizeof s->recent_norm);
    if (h[1] >= 2) {
        xfread(s->recent_loss.values, sizeof(float), OUTLIER_WINDOW, f, path);
        xfread(s->recent_norm.values, sizeof(float), OUTLIER_WINDOW, f, path);
        s->recent_loss.count = h[65];
        s->recent_norm.count = h[66];
    }
    s->fp8_n = h[1] >= 3 ? h[69] : 0;
    s->fp8 = NULL;
    if (s->fp8_n > 0) {
        s->fp8 = (float *)xmalloc((size_t)s->fp8_n * sizeof(float));
        xfread(s->fp8, sizeof(float), (size_t)s->fp8_n, f, path);
    }
    fclose(f);
    if (h[CKSUM_TAG_SLOT] == CKSUM_TAG) {
        int hz[HEADER_INTS];
        memcpy(hz, h, sizeof hz);
        hz[CKSUM_SLOT] = 0;
        uint32_t crc = crc32c_update(0, hz, sizeof hz);
        crc = crc32c_update(crc, s->m, s->n * sizeof(float));
        crc = crc32c_update(crc, s->v, s->n * sizeof(float));
        if (s->master) crc = crc32c_update(crc, s->master, s->n * sizeof(float));
        if (h[1] >= 2) {
            crc = crc32c_update(crc, s->recent_loss.values, sizeof s->recent_loss.values);
            crc = crc32c_update(crc, s->recent_norm.values, sizeof s->recent_norm.values);
        }
        if (s->fp8_n > 0) crc = crc32c_update(crc, s->fp8, (size_t)s->fp8_n * sizeof(float));
        if (crc != (uint32_t)h[CKSUM_SLOT]) fatal("%s: checksum mismatch: the file is corrupt", path);
    }
    int64_t bad = first_non_finite(s->m, s->n);
    if (bad < 0) bad = first_non_finite(s->v, s->n);
    if (bad < 0 && s->master) bad = first_non_finite(s->master, s->n);
    if (bad < 0 && (first_non_finite(s->recent_loss.values, (size_t)s->recent_loss.count) >= 0 ||
                    first_non_finite(s->recent_norm.values, (size_t)s->recent_norm.count) >= 0))
        fatal("%s: an outlier window holds a non-finite value: the file is corrupt", path);
    if (bad >= 0) fatal("%s: the optimizer state holds a non-finite value (element %lld): the file is corrupt", path,
                        (long long)bad);
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] < 0.0f) fatal("%s: AdamW's second moment is negative at element %zu: the file is corrupt", path, i);
    s->step = h[2];
    s->loss_scale_good_steps = h[7];
    memcpy(&s->rng, &h[10], 8);
    memcpy(&s->loss_scale, &h[12], 4);
    memcpy(s->loader_pos, &h[32], (size_t)h[6]);
    s->has_ext = h[CKSUM_TAG_SLOT] == CKSUM_TAG;
    s->skipped_in_a_row = s->has_ext ? h[13] : 0;
    s->skipped_total = s->has_ext ? h[64] : 0;
    memcpy(&s->log_bytes, &h[14], 8);
    memcpy(&s->json_bytes, &h[67], 8);
    if (!s->has_ext) s->log_bytes = -1;
    if (h[1] < 2) s->json_bytes = -1;
    s->model_crc = (uint32_t)h[16];
    memcpy(s->settings, &h[17], sizeof s->settings);
}

// Streams a file of ours and checks its checksum without stopping: NULL if it matches or
// the file has none, else why (for choosing which checkpoint to resume from).
// f: open at its start, closed here. Sets *tagged when the file carries a checksum.
static inline const char *stream_checksum_problem(FILE *f, int *tagged, char *why, size_t cap) {
    int h[HEADER_INTS];
    *tagged = 0;
    if (fread(h, sizeof(int), HEADER_INTS, f) != HEADER_INTS) {
        fclose(f);
        snprintf(why, cap, "shorter than its header");
        return why;
    }
    if (h[CKSUM_TAG_SLOT] != CKSUM_TAG) { fclose(f); return NULL; }
    *tagged = 1;
    int hz[HEADER_INTS];
    memcpy(hz, h, sizeof hz);
    hz[CKSUM_SLOT] = 0;
    uint32_t crc = crc32c_update(0, hz, sizeof hz);
    const size_t chunk = 1 << 22;
    uint8_t *buf = (uint8_t *)xmalloc(chunk);
    size_t got;
    while ((got = fread(buf, 1, chunk, f)) > 0) crc = crc32c_update(crc, buf, got);
    int err = ferror(f);
    fclose(f);
    free(buf);
    if (err) { snprintf(why, cap, "read error"); return why; }
    if (crc != (uint32_t)h[CKSUM_SLOT]) {
        snprintf(why, cap, "checksum mismatch: the file is corrupt");
        return why;
    }
    return NULL;
}

static inline const char *file_checksum_problem(const char *path, char *why, size_t cap) {
    const char *kind = not_regular_file(path);
    if (kind) { snprintf(why, cap, "it is %s, not a regular file", kind); return why; }
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(why, cap, "cannot open it: %s", strerror(errno)); return why; }
    int tagged;
    return stream_checksum_problem(f, &tagged, why, cap);
}

// Checks a model checkpoint without stopping: its header, length and checksum. Returns
// NULL or why; *crc gets its checksum (0 for a file without one).
static inline const char *model_file_problem(const char *path, uint32_t *crc, char *why, size_t cap) {
    const char *kind = not_regular_file(path);
    if (kind) { snprintf(why, cap, "it is %s, not a regular file", kind); return why; }
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(why, cap, "cannot open it: %s", strerror(errno)); return why; }
    int h[HEADER_INTS];
    struct stat st;
    size_t got = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) ? fread(h, sizeof(int), HEADER_INTS, f) : 0;
    fclose(f);
    GPT2Config c;
    if (got != HEADER_INTS) { snprintf(why, cap, "not a regular file of at least the 1024-byte header"); return why; }
    header_to_config(h, &c);
    if (h[0] != CKPT_MAGIC || (h[1] != CKPT_VERSION_FP32 && h[1] != CKPT_VERSION_BF16) || gpt2_config_problem(&c)) {
        snprintf(why, cap, "not a model checkpoint (bad magic, version or shape)");
        return why;
    }
    int64_t expect = HEADER_INTS * 4 + (int64_t)gpt2_num_params(&c) * (h[1] == CKPT_VERSION_FP32 ? 4 : 2);
    if ((int64_t)st.st_size != expect) {
        snprintf(why, cap, "%lld bytes, its header implies %lld%s", (long long)st.st_size, (long long)expect,
                 (int64_t)st.st_size < expect ? " (truncated)" : "");
        return why;
    }
    *crc = header_checksum(h);
    return file_checksum_problem(path, why, cap);
}

#endif // COMMON_CHECKPOINT_H
