// gpu/generate.cuh: generation on the GPU, the decoder. B rows (texts) advance together one
// position a step; each layer keeps the keys and values of every row's text on the device (the
// KV cache), so a step costs one position's forward per row. A step needs nothing from the
// host: each row's text, position and random stream live on the device (kernels/decode_step.cuh),
// the draw is a kernel (kernels/sample.cuh), and the drawn tokens stream back through mapped
// host memory. So one CUDA graph, captured once, replays every step whatever the positions,
// and the host queues steps ahead of the GPU instead of waiting on each.
// The forward of a step: at most DECODE_LINEAR_MAX_ROWS rows, the linear layers are
// kernels/decode_linear.cuh's matrix-vector products (the layernorm in their prologue, the
// bias, GELU and residual add in their epilogue; the weights read at the memory's bandwidth);
// more rows, cuBLAS as in training with the layernorm kernels between. The kernels are
// launched with programmatic dependent launch, so each starts reading its weights while the
// one before it finishes.
// Used by --generate and the samples printed during training; which tokens each row draws
// when is decoder_plan's (the same rules on the host, so the host knows where each token
// lands without asking the device).
#pragma once
#include "../common/generate.h"
#include "../kernels/attention_decode.cuh"
#include "../kernels/decode_linear.cuh"
#include "../kernels/decode_step.cuh"
#include "../kernels/layernorm.cuh"
#include "../kernels/matmul.cuh"
#include "model.cuh"

typedef struct {
    int graph;  // each step replayed from one CUDA graph (else launched kernel by kernel)
    int pdl;    // programmatic dependent launch between the step's kernels (compute capability 9.0 on)
} DecoderModes;

typedef struct {
    GPT2Config config;
    floatX *const *param;  // the model's parameters on the device (checkpoint order)
    MatmulModes *modes;    // how cuBLAS's matmuls run (more rows than the matrix-vector kernels take)
    DecoderModes dm;
    cudaStream_t stream;
    int B, maxT, gen;  // rows, their context, tokens each draws
    float temperature, top_p;
    int top_k;
    floatX *kc, *vc;  // (L, B, maxT, C): each layer's keys and values of each row's positions
    // the step's activations, B rows each
    floatX *x, *x2, *ln, *qkv, *atty, *proj, *fch, *fch_gelu, *logits;
    float *mean, *rstd, *attn_part, *sample_scratch;
    int *attn_count;
    DecodeRows rows;  // on the device (emit: mapped host memory, host_emit its host address)
    int *host_emit;
    cudaGraphExec_t graph;
    int kernels;  // launched per step
    long steps;   // taken
} Decoder;

static int decoder_uses_matvec(int B) { return B <= DECODE_LINEAR_MAX_ROWS; }

// B rows of maxT positions drawing gen tokens each, sampled at temperature, top_k, top_p
static void decoder_init(Decoder *d, const GPT2Config *cfg, floatX *const *param, MatmulModes *modes,
                         DecoderModes dm, cudaStream_t s, int B, int maxT, int gen, float temperature, int top_k,
                         float top_p) {
    memset(d, 0, sizeof *d);
    d->config = *cfg;
    d->param = param;
    d->modes = modes;
    d->dm = dm;
    d->stream = s;
    d->B = B;
    d->maxT = maxT;
    d->gen = gen;
    d->temperature = temperature;
    d->top_k = top_k;
    d->top_p = top_p;
    const size_t L = cfg->num_layers, C = cfg->channels, Vp = cfg->padded_vocab_size, V = cfg->vocab_size;
    const size_t cache = L * B * maxT * C * sizeof(floatX);
    if (cudaMalloc(&d->kc, cache) != cudaSuccess || cudaMalloc(&d->vc, cache) != cudaSuccess)
        fatal("generation: the KV cache of %d row(s) of %d positions (2 x %.1f MiB) does not fit in the GPU's "
              "memory: fewer rows (--num-samples, --prompts) or a shorter context", B, maxT, cache / 1048576.0);
    floatX *buf;  // x, x2, ln, atty, proj (C each), qkv (3C), fch, fch_gelu (4C), logits (Vp): per row
    CUDA_CHECK(cudaMalloc(&buf, (size_t)B * (16 * C + Vp) * sizeof(floatX)));
    floatX *p = buf;
    d->x = p; p += B * C;
    d->x2 = p; p += B * C;
    d->ln = p; p += B * C;
    d->atty = p; p += B * C;
    d->proj = p; p += B * C;
    d->qkv = p; p += B * 3 * C;
    d->fch = p; p += B * 4 * C;
    d->fch_gelu = p; p += B * 4 * C;
    d->logits = p;
    CUDA_CHECK(cudaMalloc(&d->mean, 2 * B * sizeof(float)));
    d->rstd = d->mean + B;
    CUDA_CHECK(cudaMalloc(&d->attn_part,
                          attention_decode_part_floats(B, maxT, (int)C, cfg->num_heads) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d->attn_count, (size_t)B * cfg->num_heads * sizeof(int)));
    CUDA_CHECK(cudaMemset(d->attn_count, 0, (size_t)B * cfg->num_heads * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&d->sample_scratch, (size_t)B * V * sizeof(float)));
    int *ints;  // hist (B x maxT), n, pos, left (B each)
    CUDA_CHECK(cudaMalloc(&ints, (size_t)B * (maxT + 3) * sizeof(int)));
    d->rows.hist = ints;
    d->rows.n = ints + (size_t)B * maxT;
    d->rows.pos = d->rows.n + B;
    d->rows.left = d->rows.pos + B;
    CUDA_CHECK(cudaMalloc(&d->rows.rng, B * sizeof(uint64_t)));
    CUDA_CHECK(cudaHostAlloc(&d->host_emit, (size_t)(gen > 0 ? gen : 1) * B * sizeof(int), cudaHostAllocMapped));
    CUDA_CHECK(cudaHostGetDevicePointer(&d->rows.emit, d->host_emit, 0));
}

static void decoder_free(Decoder *d) {
    if (d->graph) cudaGraphExecDestroy(d->graph);
    cudaFree(d->kc);
    cudaFree(d->vc);
    cudaFree(d->x);
    cudaFree(d->mean);
    cudaFree(d->attn_part);
    cudaFree(d->attn_count);
    cudaFree(d->sample_scratch);
    cudaFree(d->rows.hist);
    cudaFree(d->rows.rng);
    cudaFreeHost(d->host_emit);
}

// One step's kernels on the stream: each row's position through the model, then its draw
static void decoder_step_kernels(Decoder *d) {
    const GPT2Config *c = &d->config;
    const int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    // (the cuBLAS path launches plainly: its matmuls do not take part in the early starts)
    const int B = d->B, T = d->maxT, pdl = d->dm.pdl && decoder_uses_matvec(B);
    floatX *const *p = d->param;
    cudaStream_t s = d->stream;
    const size_t layer_cache = (size_t)B * T * C;
    int k = 0;
    decode_embed(d->x, &d->rows, p[P_WTE], p[P_WPE], B, T, C, pdl, s);
    k++;
    int ld;  // of the logits' rows
    if (decoder_uses_matvec(B)) {
        for (int l = 0; l < L; l++) {
            decode_linear(d->qkv, d->x, p[P_QKVW] + (size_t)l * 3 * C * C, p[P_QKVB] + l * 3 * C, B, C, 3 * C,
                          DECODE_IN_LAYERNORM, p[P_LN1W] + l * C, p[P_LN1B] + l * C, DECODE_OUT_PLAIN, pdl, s);
            attention_decode(d->atty, d->qkv, d->kc + l * layer_cache, d->vc + l * layer_cache, d->rows.pos, B, T, C,
                             NH, d->attn_part, d->attn_count, pdl, s);
            decode_linear(d->x, d->atty, p[P_ATTPROJW] + (size_t)l * C * C, p[P_ATTPROJB] + l * C, B, C, C,
                          DECODE_IN_PLAIN, NULL, NULL, DECODE_OUT_RESIDUAL, pdl, s);
            decode_linear(d->fch_gelu, d->x, p[P_FCW] + (size_t)l * 4 * C * C, p[P_FCB] + l * 4 * C, B, C, 4 * C,
                          DECODE_IN_LAYERNORM, p[P_LN2W] + l * C, p[P_LN2B] + l * C, DECODE_OUT_GELU, pdl, s);
            decode_linear(d->x, d->fch_gelu, p[P_FCPROJW] + (size_t)l * C * 4 * C, p[P_FCPROJB] + l * C, B, 4 * C, C,
                          DECODE_IN_PLAIN, NULL, NULL, DECODE_OUT_RESIDUAL, pdl, s);
            k += 5;
        }
        // the lm_head (tied to wte) over the real vocabulary only, after the final layernorm
        decode_linear(d->logits, d->x, p[P_WTE], NULL, B, C, V, DECODE_IN_LAYERNORM, p[P_LNFW], p[P_LNFB],
                      DECODE_OUT_PLAIN, pdl, s);
        k++;
        ld = V;
    } else {  // as the training forward, at B rows (its kernel counts in k are cuBLAS's calls)
        layernorm_forward(d->ln, d->mean, d->rstd, d->x, p[P_LN1W], p[P_LN1B], B, C, s);
        k++;
        for (int l = 0; l < L; l++) {
            matmul_forward(d->modes, d->qkv, NULL, d->ln, p[P_QKVW] + (size_t)l * 3 * C * C, p[P_QKVB] + l * 3 * C, B,
                           C, 3 * C, s);
            attention_decode(d->atty, d->qkv, d->kc + l * layer_cache, d->vc + l * layer_cache, d->rows.pos, B, T, C,
                             NH, d->attn_part, d->attn_count, pdl, s);
            matmul_forward(d->modes, d->proj, NULL, d->atty, p[P_ATTPROJW] + (size_t)l * C * C, p[P_ATTPROJB] + l * C,
                           B, C, C, s);
            fused_residual_layernorm_forward(d->x2, d->ln, d->mean, d->rstd, d->x, d->proj, p[P_LN2W] + l * C,
                                             p[P_LN2B] + l * C, B, C, s);
            matmul_forward(d->modes, d->fch_gelu, d->fch, d->ln, p[P_FCW] + (size_t)l * 4 * C * C,
                           p[P_FCB] + l * 4 * C, B, C, 4 * C, s);
            matmul_forward(d->modes, d->proj, NULL, d->fch_gelu, p[P_FCPROJW] + (size_t)l * C * 4 * C,
                           p[P_FCPROJB] + l * C, B, 4 * C, C, s);
            // the residual add, fused with the next layernorm (the next layer's ln1, or lnf)
            const floatX *w = l + 1 < L ? p[P_LN1W] + (l + 1) * C : p[P_LNFW];
            const floatX *bias = l + 1 < L ? p[P_LN1B] + (l + 1) * C : p[P_LNFB];
            fused_residual_layernorm_forward(d->x, d->ln, d->mean, d->rstd, d->x2, d->proj, w, bias, B, C, s);
            k += 7;
        }
        matmul_forward(d->modes, d->logits, NULL, d->ln, p[P_WTE], NULL, B, C, Vp, s);
        k++;
        ld = Vp;
    }
    decode_sample(&d->rows, d->logits, ld, V, B, T, d->gen, d->temperature, d->top_k, d->top_p, d->sample_scratch,
                  pdl, s);
    d->kernels = k + 1;
}

// Queues the next step: with graphs on, the graph (captured at the first step that needs it)
// replayed. More rows than the matrix-vector kernels take run cuBLAS, which picks its
// algorithms outside a capture: their first step is launched kernel by kernel.
static void decoder_step(Decoder *d) {
    if (d->dm.graph && (d->steps > 0 || decoder_uses_matvec(d->B))) {
        if (!d->graph) {
            cudaGraph_t g;
            CUDA_CHECK(cudaStreamBeginCapture(d->stream, cudaStreamCaptureModeThreadLocal));
            decoder_step_kernels(d);
            CUDA_CHECK(cudaStreamEndCapture(d->stream, &g));
            CUDA_CHECK(cudaGraphInstantiate(&d->graph, g, 0));
            CUDA_CHECK(cudaGraphDestroy(g));
        }
        CUDA_CHECK(cudaGraphLaunch(d->graph, d->stream));
    } else {
        decoder_step_kernels(d);
    }
    d->steps++;
}

// ---------------------------------------------------------------------------
// The host's side: the rows' texts in, their tokens out as the steps finish.

// Which row draws its i-th token at which step: the rows' rules (kernels/decode_step.cuh) on
// lengths alone, which do not depend on the tokens drawn. at[s * B + b] = i, or -1 when row b
// draws nothing at step s. Returns the steps until every row has drawn gen tokens; *slides:
// how often a row's text filled the context, over all rows.
static long decoder_plan(const int *len, int B, int maxT, int gen, int **at, int *slides) {
    long steps = 0, cap = 0;
    *at = NULL;
    *slides = 0;
    int *n = (int *)xmalloc(3 * (size_t)B * sizeof(int)), *pos = n + B, *left = pos + B;
    int busy = 0;
    for (int b = 0; b < B; b++) {
        n[b] = len[b];
        pos[b] = 0;
        left[b] = gen;
        busy += gen > 0;
    }
    while (busy) {
        if (steps == cap) {
            cap = cap ? 2 * cap : 64;
            *at = (int *)realloc(*at, (size_t)cap * B * sizeof(int));
            if (!*at) fatal("out of host memory planning the generation's steps");
        }
        for (int b = 0; b < B; b++) {
            int *a = *at + steps * B + b;
            *a = -1;
            if (pos[b] < n[b] - 1) { pos[b]++; continue; }
            if (left[b] == 0) continue;
            *a = gen - left[b];
            if (--left[b] == 0) busy--;
            if (n[b] == maxT) {
                n[b] = (maxT + 1) / 2;
                pos[b] = 0;
                (*slides)++;
            } else {
                pos[b] = n[b]++;
            }
        }
        steps++;
    }
    free(n);
    return steps;
}

// What a generation hands back per token as it comes: row b's i-th token
typedef void (*DecoderTokenFn)(void *ctx, int b, int i, int token);

#define DECODER_AHEAD 16  // steps queued ahead of the one whose tokens the host reads

// Runs the rows' texts ids[b][0..len[b]) (each at most maxT, starting with the end-of-text
// token) to gen drawn tokens each, with each row's random stream rng[b] (left where the draws
// leave it). on_token sees every token in the order of the steps. Returns the steps taken;
// *first_s: the wall time until row 0's first token, *slides as decoder_plan's.
static long decoder_generate(Decoder *d, int *const *ids, const int *len, uint64_t *rng, DecoderTokenFn on_token,
                             void *ctx, double *first_s, int *slides) {
    const int B = d->B, T = d->maxT;
    int *at;
    const long steps = decoder_plan(len, B, T, d->gen, &at, slides);
    int *host = (int *)xmalloc((size_t)B * (T + 3) * sizeof(int));
    for (int b = 0; b < B; b++) {
        if (len[b] < 1 || len[b] > T) fatal("generation: row %d has %d tokens, outside 1..%d", b, len[b], T);
        memcpy(host + (size_t)b * T, ids[b], len[b] * sizeof(int));
        for (int i = len[b]; i < T; i++) host[(size_t)b * T + i] = GPT2_EOT;
        host[(size_t)B * T + b] = len[b];      // n
        host[(size_t)B * T + B + b] = 0;       // pos
        host[(size_t)B * T + 2 * B + b] = d->gen;  // left
    }
    cudaStream_t s = d->stream;
    CUDA_CHECK(cudaMemcpyAsync(d->rows.hist, host, (size_t)B * (T + 3) * sizeof(int), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(d->rows.rng, rng, B * sizeof(uint64_t), cudaMemcpyHostToDevice, s));
    cudaEvent_t done[DECODER_AHEAD];
    for (int e = 0; e < DECODER_AHEAD; e++) CUDA_CHECK(cudaEventCreateWithFlags(&done[e], cudaEventDisableTiming));
    const double t0 = wall_seconds();
    *first_s = 0;
    // reads step r's tokens once its event has passed
    auto read_step = [&](long r) {
        CUDA_CHECK(cudaEventSynchronize(done[r % DECODER_AHEAD]));
        for (int b = 0; b < B; b++) {
            const int i = at[r * B + b];
            if (i < 0) continue;
            if (b == 0 && i == 0) *first_s = wall_seconds() - t0;
            on_token(ctx, b, i, ((volatile int *)d->host_emit)[(size_t)i * B + b]);
        }
    };
    for (long r = 0; r < steps; r++) {
        if (r >= DECODER_AHEAD) read_step(r - DECODER_AHEAD);
        decoder_step(d);
        CUDA_CHECK(cudaEventRecord(done[r % DECODER_AHEAD], s));
    }
    for (long r = steps > DECODER_AHEAD ? steps - DECODER_AHEAD : 0; r < steps; r++) read_step(r);
    CUDA_CHECK(cudaMemcpy(rng, d->rows.rng, B * sizeof(uint64_t), cudaMemcpyDeviceToHost));
    for (int e = 0; e < DECODER_AHEAD; e++) CUDA_CHECK(cudaEventDestroy(done[e]));
    free(host);
    free(at);
    return steps;
}

// ---------------------------------------------------------------------------
// --generate and the samples between steps through the decoder

// The bytes of weights one step reads: every parameter but the position embedding (one row
// of it), the token embedding once more as the lm_head, less its padded rows
static double decoder_weight_bytes(const GPT2Config *c) {
    size_t sizes[NUM_PARAM_TENSORS];
    gpt2_param_sizes(c, sizes);
    double n = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) n += k == P_WPE ? c->channels : sizes[k];
    n += (double)c->vocab_size * c->channels - (double)(c->padded_vocab_size - c->vocab_size) * c->channels;
    return n * sizeof(floatX);
}

// --generate with the KV cache: every row (common/generate.h's) at once
static void generate_text_gpu(const Tokenizer *tok, const TrainOptions *o, const GPT2Config *cfg,
                              floatX *const *param, MatmulModes *modes, DecoderModes dm, cudaStream_t s) {
    const int maxT = cfg->max_seq_len;
    GenerateRows g = generate_rows_open(tok, o, maxT);
    Decoder d;
    decoder_init(&d, cfg, param, modes, dm, s, g.rows, maxT, o->gen_tokens, o->temperature, o->top_k, o->top_p);
    generate_header(o, &g, maxT, "on");
    double first_s;
    int slides;
    const double t0 = wall_seconds();
    const long steps = decoder_generate(&d, g.ids, g.len, g.rng, generate_on_token, &g, &first_s, &slides);
    const double dt = wall_seconds() - t0;
    generate_finish(o, &g, maxT, dt, first_s, slides);
    // the steady steps: those after row 0's first token (its prompt's positions and the graph's
    // capture before)
    const long steady = steps - g.len[0];
    if (steady > 0) {
        const double step_s = (dt - first_s) / steady, bytes = decoder_weight_bytes(cfg);
        const int pdl = dm.pdl && decoder_uses_matvec(g.rows);
        printf("generate: %d row%s a step, %s of %d kernels%s; %.1f us a step after the first token: the weights "
               "(%.0f MB) read at %.0f GB/s\n", g.rows, g.rows == 1 ? "" : "s",
               dm.graph ? "each step one CUDA graph" : "each step launched kernel by kernel", d.kernels,
               pdl ? " with programmatic dependent launch" : "", 1e6 * step_s, bytes / 1e6, bytes / step_s / 1e9);
    }
    decoder_free(&d);
    generate_rows_free(&g);
}

static void sample_collect(void *ctx, int b, int i, int token) { ((int *)ctx)[i] = token; }

// A sample between steps (common/sampling.h's sample_text) through the decoder at one row:
// the same tokens for the same *rng, which it leaves where the draws leave it
static void sample_text_gpu(const Tokenizer *tok, const TrainOptions *o, int maxT, uint64_t *rng, Logger *lg,
                            const GPT2Config *cfg, floatX *const *param, MatmulModes *modes, DecoderModes dm,
                            cudaStream_t s) {
    int *ids = (int *)xmalloc((size_t)maxT * sizeof(int));
    int gen, n = sample_start(tok, o, maxT, ids, &gen);
    Decoder d;
    decoder_init(&d, cfg, param, modes, dm, s, 1, maxT, gen, o->temperature, o->top_k, o->top_p);
    double first_s;
    int slides;
    decoder_generate(&d, &ids, &n, rng, sample_collect, ids + n, &first_s, &slides);
    log_sample(lg, tok, ids, n + gen);
    decoder_free(&d);
    free(ids);
}
