// common/generate.h: text generation from a trained model, written once for both trainers:
// the KV cache's bookkeeping (which positions of a text a cache already holds) and the
// --generate mode: its rows (each prompt of --prompt or --prompts, --num-samples times), -g
// tokens each (printed as they come when there is one row), tokens/s at the end. The CPU
// trainer supplies the model's next-token logits (NextLogitsFn) and the rows run one after
// another; the GPU trainer runs them together (gpu/generate.cuh).
#ifndef COMMON_GENERATE_H
#define COMMON_GENERATE_H

#include "train_common.h"

// A KV cache holds the keys and values of cached[0..*filled). Sampling asks for the logits
// after a text that extends it by one token, so only the new position needs computing; a
// text that differs earlier (a new sample, a slid window) is recomputed from the first
// difference. Records the new text and returns the first position to compute: always at
// most n - 1, since the logits wanted are the last position's.
static inline int kv_cache_reuse(int *cached, int *filled, const int *ids, int n) {
    int keep = 0;
    while (keep < *filled && keep < n - 1 && cached[keep] == ids[keep]) keep++;
    for (int i = keep; i < n; i++) cached[i] = ids[i];
    *filled = n;
    return keep;
}

static inline void generate_print_token(const Tokenizer *tok, int id) {
    size_t len;
    const uint8_t *bytes = tokenizer_token_bytes(tok, (uint32_t)id, &len);
    if (bytes) fwrite(bytes, 1, len, stdout);
    fflush(stdout);
}

// --generate's start, the same in both trainers: the model of -e (its parameters, fp32 on
// the host, returned) and the tokenizer; a vocabulary without GPT-2's tokens is refused.
static inline float *generate_open(const TrainOptions *o, GPT2Config *cfg, Tokenizer *tok) {
    float *params = gpt2_params_from_model_arg(o->model_arg, 1, (uint64_t)o->seed, cfg);
    tokenizer_init(tok, o->tokenizer_dir);
    if (cfg->vocab_size <= GPT2_EOT)
        fatal("--generate: the model's vocabulary (%d tokens) does not hold GPT-2's (%d)", cfg->vocab_size, GPT2_EOT + 1);
    print_model_banner(cfg);
    return params;
}

// --generate's texts, the rows: each prompt (--prompt, or every line of --prompts) continued
// --num-samples times. A row starts with the end-of-text token and its prompt's tokens (the
// last maxT - 1 of them when the prompt is longer, which is said) and draws -g tokens with the
// random stream of --seed + r (row r), so a row is the same text generated alone or in a batch.
typedef struct {
    int rows, prompts;
    int **ids, *len;    // each row's text so far (maxT entries each)
    uint64_t *rng;      // each row's random stream
    int **out;          // each row's drawn tokens (-g each)
    const Tokenizer *tok;
} GenerateRows;

// The prompts' texts: --prompt, or the lines of --prompts (a last line without its newline
// counts; a "\r" before a newline is dropped)
static inline char **generate_prompts(const TrainOptions *o, int *count) {
    char **p;
    if (!(o->prompts_file && *o->prompts_file)) {
        p = (char **)xmalloc(sizeof(char *));
        p[0] = xstrdup(o->prompt);
        *count = 1;
        return p;
    }
    size_t len;
    char *text = (char *)xread_file(o->prompts_file, &len);
    int n = 0;
    for (size_t i = 0; i < len; i++) n += text[i] == '\n';
    n += len > 0 && text[len - 1] != '\n';
    if (n == 0) fatal("--prompts %s holds no prompt (one a line)", o->prompts_file);
    p = (char **)xmalloc((size_t)n * sizeof(char *));
    char *line = text;
    for (int k = 0; k < n; k++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r') line[l - 1] = 0;
        p[k] = xstrdup(line);
        line = nl ? nl + 1 : line + l;
    }
    free(text);
    *count = n;
    return p;
}

static inline GenerateRows generate_rows_open(const Tokenizer *tok, const TrainOptions *o, int maxT) {
    GenerateRows g;
    memset(&g, 0, sizeof g);
    g.tok = tok;
    char **prompt = generate_prompts(o, &g.prompts);
    g.rows = g.prompts * o->num_samples;
    g.ids = (int **)xmalloc((size_t)g.rows * sizeof(int *));
    g.out = (int **)xmalloc((size_t)g.rows * sizeof(int *));
    g.len = (int *)xmalloc((size_t)g.rows * sizeof(int));
    g.rng = (uint64_t *)xmalloc((size_t)g.rows * sizeof(uint64_t));
    for (int k = 0; k < g.prompts; k++) {
        TokenVec tv = prompt_tokens(tok, prompt[k]);
        size_t keep = tv.len < (size_t)maxT - 1 ? tv.len : (size_t)maxT - 1;
        char which[64] = "--prompt";
        if (o->prompts_file && *o->prompts_file) snprintf(which, sizeof which, "--prompts' line %d", k + 1);
        if (keep == 0 && tv.len > 0)
            printf("generate: the model's context holds one token, the start token: %s (%zu token%s) is not used\n",
                   which, tv.len, tv.len == 1 ? "" : "s");
        else if (keep < tv.len)
            printf("generate: %s is %zu tokens, more than the context holds (%d, one of them the start token): "
                   "generation starts from its last %zu\n", which, tv.len, maxT, keep);
        for (int s = 0; s < o->num_samples; s++) {
            const int r = k * o->num_samples + s;
            int *ids = g.ids[r] = (int *)xmalloc((size_t)maxT * sizeof(int));
            g.out[r] = (int *)xmalloc((size_t)(o->gen_tokens > 0 ? o->gen_tokens : 1) * sizeof(int));
            int n = 0;
            ids[n++] = GPT2_EOT;
            for (size_t i = tv.len - keep; i < tv.len; i++) ids[n++] = (int)tv.data[i];
            g.len[r] = n;
            g.rng[r] = rng_seed((uint64_t)(o->seed + r) ^ 0x6e657874ULL);
        }
        tokenvec_free(&tv);
        free(prompt[k]);
    }
    free(prompt);
    return g;
}

static inline void generate_rows_free(GenerateRows *g) {
    for (int r = 0; r < g->rows; r++) {
        free(g->ids[r]);
        free(g->out[r]);
    }
    free(g->ids);
    free(g->out);
    free(g->len);
    free(g->rng);
}

// What the run does, and with one row its prompt, whose drawn tokens then follow as they come
static inline void generate_header(const TrainOptions *o, const GenerateRows *g, int maxT, const char *how) {
    if (g->rows == 1)
        printf("generate: %d tokens after a prompt of %d, context %d, temperature %g, top-k %d, top-p %g, seed %d, "
               "KV cache %s\n", o->gen_tokens, g->len[0] - 1, maxT, o->temperature, o->top_k, o->top_p, o->seed, how);
    else
        printf("generate: %d samples (%d prompt%s x %d) of %d tokens, context %d, temperature %g, top-k %d, top-p "
               "%g, seeds %d..%d, KV cache %s\n", g->rows, g->prompts, g->prompts == 1 ? "" : "s", o->num_samples,
               o->gen_tokens, maxT, o->temperature, o->top_k, o->top_p, o->seed, o->seed + g->rows - 1, how);
    if (g->rows > 1) return;
    printf("----\n");
    for (int i = 1; i < g->len[0]; i++) generate_print_token(g->tok, g->ids[0][i]);
}

// A drawn token: row r's i-th, printed at once when there is one row (DecoderTokenFn's shape)
static inline void generate_on_token(void *ctx, int r, int i, int token) {
    GenerateRows *g = (GenerateRows *)ctx;
    g->out[r][i] = token;
    if (g->rows == 1) generate_print_token(g->tok, token);
}

// The end: with several rows each one's text, then the speed over dt seconds (the first token
// after first_s, the prompt's forward with it) and how often a text slid
static inline void generate_finish(const TrainOptions *o, const GenerateRows *g, int maxT, double dt, double first_s,
                                   int slides) {
    if (g->rows > 1)
        for (int r = 0; r < g->rows; r++) {
            printf("---- sample %d of %d (prompt %d, seed %d)\n", r + 1, g->rows, r / o->num_samples + 1,
                   o->seed + r);
            for (int i = 1; i < g->len[r]; i++) generate_print_token(g->tok, g->ids[r][i]);
            for (int i = 0; i < o->gen_tokens; i++) generate_print_token(g->tok, g->out[r][i]);
            printf("\n");
        }
    printf("%s----\n", g->rows == 1 ? "\n" : "");
    const long total = (long)g->rows * o->gen_tokens;
    if (total > 0 && g->rows == 1)
        printf("generate: %d tokens in %.2f s: %.1f tokens/s (the first, with the prompt's forward, %.1f ms; then "
               "%.2f ms a token)\n", o->gen_tokens, dt, o->gen_tokens / dt, 1e3 * first_s,
               o->gen_tokens > 1 ? 1e3 * (dt - first_s) / (o->gen_tokens - 1) : 0.0);
    else if (total > 0)
        printf("generate: %d samples x %d tokens = %ld tokens in %.2f s: %.1f tokens/s\n", g->rows, o->gen_tokens,
               total, dt, total / dt);
    const int half = (maxT + 1) / 2;
    if (slides)
        printf("generate: the text%s filled the context (%d token%s) %d time(s); each time generation went on from "
               "its newest %d token%s\n", g->rows > 1 ? "s" : "", maxT, maxT == 1 ? "" : "s", slides, half,
               half == 1 ? "" : "s");
}

// Row r's -g tokens through next_logits, one at a time. Each token is drawn from the whole
// text so far, up to a full context of maxT tokens; a new token that finds the context full
// slides the window: the newest half of the text, the new token included, stays and
// generation continues from it (recomputed once). A context of one token holds only the
// newest token, so each is drawn from the one before. Returns the slides; *first_s: the time
// from t0 to row 0's first token.
static inline int generate_row(const TrainOptions *o, int maxT, int V, NextLogitsFn next_logits, void *model,
                               GenerateRows *g, int r, double t0, double *first_s) {
    int n = g->len[r], slides = 0;
    int *ids = (int *)xmalloc((size_t)maxT * sizeof(int));  // (the row's prompt stays as it is, for its print)
    memcpy(ids, g->ids[r], (size_t)n * sizeof(int));
    float *probs = (float *)xmalloc((size_t)V * sizeof(float));
    // The newest half, rounded up so that even a context of one token keeps the new one.
    const int half = (maxT + 1) / 2;
    for (int i = 0; i < o->gen_tokens; i++) {
        // 1 <= n <= maxT here: the logits come from the whole text, a full context included.
        next_logits(model, ids, n, probs);
        int id = sample_from_logits(probs, probs, V, o->temperature, o->top_k, o->top_p, &g->rng[r]);
        if (n == maxT) {  // no room for id: it joins the newest half - 1 of the text
            memmove(ids, ids + n - (half - 1), (size_t)(half - 1) * sizeof(int));
            n = half - 1;
            slides++;
        }
        ids[n++] = id;
        generate_on_token(g, r, i, id);
        if (r == 0 && i == 0) *first_s = wall_seconds() - t0;
    }
    free(ids);
    free(probs);
    return slides;
}

// --generate through next_logits (the CPU trainer; the GPU trainer with --kv-cache 0): the rows
// one after another. The speed's first token holds the prompt's forward, the rest one
// position each with the KV cache.
static inline void generate_text(const Tokenizer *tok, const TrainOptions *o, int maxT, int V,
                                 NextLogitsFn next_logits, void *model) {
    GenerateRows g = generate_rows_open(tok, o, maxT);
    generate_header(o, &g, maxT, o->kv_cache ? "on" : "off (the whole text again for each token)");
    int slides = 0;
    double t0 = wall_seconds(), first_s = 0;
    for (int r = 0; r < g.rows; r++) slides += generate_row(o, maxT, V, next_logits, model, &g, r, t0, &first_s);
    generate_finish(o, &g, maxT, wall_seconds() - t0, first_s, slides);
    generate_rows_free(&g);
}

#endif  // COMMON_GENERATE_H
