// common/generate.h: text generation from a trained model, written once for both trainers:
// the KV cache's bookkeeping (which positions of a text a cache already holds) and the
// --generate mode (a prompt, -g tokens printed as they come, tokens/s at the end). The
// trainers supply the model's next-token logits (NextLogitsFn), cached or not.
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

// --generate: the text starts with the end-of-text token and the prompt's tokens (the last
// maxT - 1 of them when the prompt is longer, which is said); -g tokens follow, sampled with
// --temperature, --top-k, --top-p and --seed, and printed as they come. Each token is drawn
// from the whole text so far, up to a full context of maxT tokens; a new token that finds
// the context full slides the window: the newest half of the text, the new token included,
// stays and generation continues from it (recomputed once); the end says how often. A
// context of one token holds only the newest token, so each is drawn from the one before.
// Then the speed: the first token's time holds the prompt's forward, the rest one position
// each with the KV cache.
static inline void generate_text(const Tokenizer *tok, const TrainOptions *o, int maxT, int V,
                                 NextLogitsFn next_logits, void *model) {
    uint64_t rng = rng_seed((uint64_t)o->seed ^ 0x6e657874ULL);
    int *ids = (int *)xmalloc((size_t)maxT * sizeof(int));
    TokenVec tv = prompt_tokens(tok, o->prompt);
    size_t keep = tv.len < (size_t)maxT - 1 ? tv.len : (size_t)maxT - 1;
    if (keep == 0 && tv.len > 0)
        printf("generate: the model's context holds one token, the start token: --prompt (%zu token%s) is not "
               "used\n", tv.len, tv.len == 1 ? "" : "s");
    else if (keep < tv.len)
        printf("generate: --prompt is %zu tokens, more than the context holds (%d, one of them the start token): "
               "generation starts from its last %zu\n", tv.len, maxT, keep);
    int n = 0;
    ids[n++] = GPT2_EOT;
    for (size_t i = tv.len - keep; i < tv.len; i++) ids[n++] = (int)tv.data[i];
    tokenvec_free(&tv);
    printf("generate: %d tokens after a prompt of %d, context %d, temperature %g, top-k %d, top-p %g, seed %d, "
           "KV cache %s\n", o->gen_tokens, n - 1, maxT, o->temperature, o->top_k, o->top_p, o->seed,
           o->kv_cache ? "on" : "off (the whole text again for each token)");
    printf("----\n");
    for (int i = 1; i < n; i++) generate_print_token(tok, ids[i]);
    float *probs = (float *)xmalloc((size_t)V * sizeof(float));
    // The newest half, rounded up so that even a context of one token keeps the new one.
    const int half = (maxT + 1) / 2;
    int slides = 0;
    double t0 = wall_seconds(), t_first = 0;
    for (int g = 0; g < o->gen_tokens; g++) {
        // 1 <= n <= maxT here: the logits come from the whole text, a full context included.
        next_logits(model, ids, n, probs);
        int id = sample_from_logits(probs, probs, V, o->temperature, o->top_k, o->top_p, &rng);
        if (n == maxT) {  // no room for id: it joins the newest half - 1 of the text
            memmove(ids, ids + n - (half - 1), (size_t)(half - 1) * sizeof(int));
            n = half - 1;
            slides++;
        }
        ids[n++] = id;
        generate_print_token(tok, id);
        if (g == 0) t_first = wall_seconds() - t0;
    }
    double dt = wall_seconds() - t0;
    printf("\n----\n");
    if (o->gen_tokens > 0)
        printf("generate: %d tokens in %.2f s: %.1f tokens/s (the first, with the prompt's forward, %.1f ms; then "
               "%.2f ms a token)\n", o->gen_tokens, dt, o->gen_tokens / dt, 1e3 * t_first,
               o->gen_tokens > 1 ? 1e3 * (dt - t_first) / (o->gen_tokens - 1) : 0.0);
    if (slides)
        printf("generate: the text filled the context (%d token%s) %d time(s); each time generation went on from "
               "its newest %d token%s\n", maxT, maxT == 1 ? "" : "s", slides, half, half == 1 ? "" : "s");
    free(probs);
    free(ids);
}

#endif  // COMMON_GENERATE_H
