// sampling.h: drawing tokens from a model: the distribution cut to --top-k / --top-p at a
// --temperature, the seeded draw, and the samples printed during training (their fit in
// the context, the prompt's tokens). --generate's loop is common/generate.h.
#ifndef COMMON_SAMPLING_H
#define COMMON_SAMPLING_H
#include "train_options.h"
#include "checkpoint.h"
#include "logger.h"
#include "rng.h"
#include "tokenizer.h"
#include <float.h>
#include <math.h>

// How a sample fits its context of maxT tokens: the end-of-text token that starts it, the
// prompt's last *keep tokens, then *gen generated ones. Of the maxT - 1 positions after the
// start token, the prompt leaves room for -g tokens, or for half of them (rounded up) if -g
// asks for more, so that every sample generates something: a longer prompt keeps its last
// tokens, those the generated ones follow. -g beyond what is left is cut to it.
static inline void sample_fit(int prompt_len, int gen_tokens, int maxT, int *keep, int *gen) {
    int room = maxT > 1 ? maxT - 1 : 0, half = (room + 1) / 2;
    int reserve = gen_tokens < half ? gen_tokens : half;
    *keep = prompt_len < room - reserve ? prompt_len : room - reserve;
    *gen = gen_tokens < room - *keep ? gen_tokens : room - *keep;
}

static inline TokenVec prompt_tokens(const Tokenizer *tok, const char *prompt) {
    TokenVec tv = {0};
    if (prompt && *prompt) tokenizer_encode(tok, (const uint8_t *)prompt, strlen(prompt), &tv);
    return tv;
}

// Samples start from GPT-2's end-of-text token and print through its tokenizer, so a
// model whose vocabulary does not hold GPT-2's tokens cannot be sampled. When the run
// samples, says once what sample_fit will cut: a prompt too long for the context of maxT
// tokens (-t), and a -g beyond what the context leaves.
static inline int sampling_possible(const GPT2Config *cfg, const TrainOptions *o, const Tokenizer *tok, int maxT,
                                    int quiet) {
    if (cfg->vocab_size <= GPT2_EOT) {
        if (!quiet) printf("sampling: off: the model's vocabulary (%d tokens) does not hold GPT-2's (%d)\n",
                           cfg->vocab_size, GPT2_EOT + 1);
        return 0;
    }
    if (quiet || o->gen_tokens == 0 || o->sample_every == 0) return 1;
    TokenVec tv = prompt_tokens(tok, o->prompt);
    int keep, gen;
    sample_fit((int)tv.len, o->gen_tokens, maxT, &keep, &gen);
    if (keep < (int)tv.len)
        printf("sampling: --prompt is %zu tokens, too long for the samples' context (-t %d tokens, one of them the "
               "start token) with room to generate: samples start from its last %d tokens\n", tv.len, maxT, keep);
    if (gen < o->gen_tokens)
        printf("sampling: -g %d is more than the context (-t %d) leaves after the start token%s: samples generate "
               "%d tokens\n", o->gen_tokens, maxT, keep ? " and the prompt" : "", gen);
    tokenvec_free(&tv);
    return 1;
}

// Fills logits[0..V) with the model's logits for the token after ids[0..n); ids has maxT
// entries, those past n hold the end-of-text token.
typedef void (*NextLogitsFn)(void *model, const int *ids, int n, float *logits);

// Draws an index from probs (n entries summing to ~1) with coin in [0,1): the first whose
// cumulative probability exceeds the coin. Where rounding leaves the total at or below the
// coin, the last index of non-zero probability (not index n - 1, which a cut distribution
// may have dropped); n - 1 if there is none. kernels/sample.cuh draws the same way.
static inline int sample_index(const float *probs, int n, float coin) {
    float cdf = 0.0f;
    int last = n - 1;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) return i;
        if (probs[i] > 0.0f) last = i;
    }
    return last;
}

typedef struct {
    float p;
    int id;
} TokenProb;

// Most likely first; ties to the lower id, so the choice is the same on every machine.
static inline int cmp_token_prob(const void *a, const void *b) {
    const TokenProb *x = (const TokenProb *)a, *y = (const TokenProb *)b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

// Keeps in probs[0..V) the top_k most likely tokens (0: all) and, of those, the fewest
// whose probabilities reach top_p (1: all), renormalised; the others become 0.
static inline void truncate_distribution(float *probs, int V, int top_k, float top_p) {
    TokenProb *t = (TokenProb *)xmalloc((size_t)V * sizeof(TokenProb));
    for (int v = 0; v < V; v++) t[v] = (TokenProb){probs[v], v};
    qsort(t, (size_t)V, sizeof *t, cmp_token_prob);
    int keep = top_k > 0 && top_k < V ? top_k : V;
    double cum = 0.0;
    for (int i = 0; i < keep; i++) {
        cum += t[i].p;
        if (cum >= top_p) { keep = i + 1; break; }
    }
    double kept = 0.0;
    for (int i = 0; i < keep; i++) kept += t[i].p;
    for (int v = 0; v < V; v++) probs[v] = 0.0f;
    for (int i = 0; i < keep; i++) probs[t[i].id] = (float)(t[i].p / kept);
    free(t);
}

// Softmax of logits[0..V) at the given temperature into probs (may be the same array),
// cut to top_k / top_p (0 and 1: nothing cut), then a draw from it.
static inline int sample_from_logits(const float *logits, float *probs, int V, float temperature, int top_k,
                                     float top_p, uint64_t *rng) {
    float maxv = -FLT_MAX, sum = 0.0f, temp = temperature > 1e-4f ? temperature : 1e-4f;
    for (int v = 0; v < V; v++) maxv = fmaxf(maxv, logits[v]);
    for (int v = 0; v < V; v++) {
        probs[v] = expf((logits[v] - maxv) / temp);
        sum += probs[v];
    }
    for (int v = 0; v < V; v++) probs[v] /= sum;
    if ((top_k > 0 && top_k < V) || top_p < 1.0f) truncate_distribution(probs, V, top_k, top_p);
    return sample_index(probs, V, rng_uniform(rng));
}

// Prints "sample: <text>" for ids[1..n) (ids[0] is the end-of-text token that starts it).
static inline void log_sample(Logger *lg, const Tokenizer *tok, const int *ids, int n) {
    logger_printf(lg, "sample: ");
    for (int i = 1; i < n; i++) {
        size_t len;
        const uint8_t *bytes = tokenizer_token_bytes(tok, (uint32_t)ids[i], &len);
        if (bytes) logger_printf(lg, "%.*s", (int)len, (const char *)bytes);
    }
    logger_printf(lg, "\n");
}

// A sample's start: ids[0..maxT) the end-of-text token, then after the first the prompt's
// kept tokens (sample_fit); returns their count n, and in *gen the tokens to draw after them.
static inline int sample_start(const Tokenizer *tok, const TrainOptions *o, int maxT, int *ids, int *gen) {
    for (int i = 0; i < maxT; i++) ids[i] = GPT2_EOT;
    TokenVec tv = prompt_tokens(tok, o->prompt);
    int keep, n = 1;
    sample_fit((int)tv.len, o->gen_tokens, maxT, &keep, gen);
    for (size_t i = tv.len - (size_t)keep; i < tv.len; i++) ids[n++] = (int)tv.data[i];
    tokenvec_free(&tv);
    return n;
}

// A sample between steps: from the start token and --prompt, -g tokens drawn through
// next_logits with *rng (within the context of maxT in all: sample_fit), printed as text.
static inline void sample_text(const Tokenizer *tok, const TrainOptions *o, int maxT, int V, uint64_t *rng, Logger *lg,
                               NextLogitsFn next_logits, void *model) {
    int *ids = (int *)xmalloc((size_t)maxT * sizeof(int));
    int gen, n = sample_start(tok, o, maxT, ids, &gen);
    float *probs = (float *)xmalloc((size_t)V * sizeof(float));
    for (int step = 0; step < gen; step++) {
        next_logits(model, ids, n, probs);
        ids[n++] = sample_from_logits(probs, probs, V, o->temperature, o->top_k, o->top_p, rng);
    }
    log_sample(lg, tok, ids, n);
    free(probs);
    free(ids);
}
#endif // COMMON_SAMPLING_H
