// hellaswag.h: the HellaSwag evaluation of both trainers (-h 1): llm.c's eval file
// (hellaswag_val.bin, docs/formats.md), its reader, the layout of one (example,
// completion) pair in a row of the batch, and the scorer. An example is answered by
// the completion whose tokens have the lowest mean loss after the shared context;
// the trainer only supplies the per-position losses of a batch (its forward pass).
#ifndef COMMON_HELLASWAG_H
#define COMMON_HELLASWAG_H
#include "util.h"
#include "test_hooks.h"

#define HELLASWAG_MAGIC 20240522
#define HELLASWAG_VERSION 1
#define HELLASWAG_HEADER_INTS 256
#define HELLASWAG_COMPLETIONS 4     // llm.c's format holds four completions per example
#define HELLASWAG_DELIMITER 65535   // starts every example
#define HELLASWAG_EXAMPLE_FIELDS 6  // delimiter, bytes, index, label, completions, context length
#define HELLASWAG_PAD 0             // fills a row past its tokens: any id of every vocabulary

typedef struct {
    int label;                                  // the right completion, 0..3
    int ctx_len, comp_len[HELLASWAG_COMPLETIONS];
    const uint16_t *ctx, *comp[HELLASWAG_COMPLETIONS];  // into HellaSwag.tokens
} HellaSwagExample;

typedef struct {
    int n;                  // examples
    HellaSwagExample *ex;
    uint16_t *tokens;       // the file's body
    int longest;            // tokens of the longest context + completion
} HellaSwag;

// Reads and checks the whole file: a bad file is refused at start, not mid-run.
// Token ids must be below vocab_size.
static inline void hellaswag_load(HellaSwag *h, const char *path, int vocab_size) {
    size_t len;
    uint8_t *buf = xread_file(path, &len);
    const size_t header_bytes = HELLASWAG_HEADER_INTS * 4;
    if (len < header_bytes)
        fatal("%s: %zu bytes, shorter than the %zu-byte header of a HellaSwag eval file", path, len, header_bytes);
    int32_t hd[HELLASWAG_HEADER_INTS];
    memcpy(hd, buf, header_bytes);
    if (hd[0] != HELLASWAG_MAGIC)
        fatal("%s: not a HellaSwag eval file (magic %d, expected %d; build one with dev/data/hellaswag.py)", path,
              hd[0], HELLASWAG_MAGIC);
    if (hd[1] != HELLASWAG_VERSION) fatal("%s: eval file version %d, expected %d", path, hd[1], HELLASWAG_VERSION);
    if (hd[2] < 1) fatal("%s: the header says %d examples", path, hd[2]);
    if (hd[3] < 2 * HELLASWAG_EXAMPLE_FIELDS || hd[3] > 2 * 65535)
        fatal("%s: the header's longest example (%d bytes) is out of range", path, hd[3]);
    if ((len - header_bytes) % 2) fatal("%s: the body has an odd number of bytes (%zu)", path, len - header_bytes);
    size_t nt = (len - header_bytes) / 2;
    // an example takes at least 15 words (6 fields, 5 lengths, 5 tokens): a count the body
    // cannot hold is refused before it sizes an allocation
    if ((size_t)hd[2] > nt / 15 || hd[2] > 65535)
        fatal("%s: the header says %d examples, more than %s (truncated?)", path, hd[2],
              hd[2] > 65535 ? "the format numbers (65535)" : "the body can hold");
    h->tokens = (uint16_t *)xmalloc(nt * 2);
    memcpy(h->tokens, buf + header_bytes, nt * 2);
    free(buf);
    h->n = hd[2];
    h->ex = (HellaSwagExample *)xcalloc((size_t)h->n, sizeof(HellaSwagExample));
    h->longest = 0;
    const uint16_t *t = h->tokens;
    size_t at = 0;
    for (int i = 0; i < h->n; i++) {
        HellaSwagExample *e = &h->ex[i];
        size_t left = nt - at;
        if (left < HELLASWAG_EXAMPLE_FIELDS)
            fatal("%s: ends inside example %d of the %d its header announces (truncated?)", path, i, h->n);
        const uint16_t *f = t + at;
        if (f[0] != HELLASWAG_DELIMITER)
            fatal("%s: example %d does not start with the delimiter %d (found %d at byte %zu)", path, i,
                  HELLASWAG_DELIMITER, f[0], header_bytes + 2 * at);
        size_t words = f[1] / 2;
        if (f[1] % 2 || words < HELLASWAG_EXAMPLE_FIELDS || (int)f[1] > hd[3] || words > left)
            fatal("%s: example %d: its size (%d bytes) is odd, too small, above the header's longest (%d) or past "
                  "the end of the file", path, i, f[1], hd[3]);
        if (f[2] != i) fatal("%s: example %d carries the index %d", path, i, f[2]);
        if (f[4] != HELLASWAG_COMPLETIONS)
            fatal("%s: example %d has %d completions; this format holds %d", path, i, f[4], HELLASWAG_COMPLETIONS);
        if (f[3] >= HELLASWAG_COMPLETIONS)
            fatal("%s: example %d: label %d is not a completion (0..%d)", path, i, f[3], HELLASWAG_COMPLETIONS - 1);
        e->label = f[3];
        size_t p = 5;  // the context's length
        for (int c = -1; c < HELLASWAG_COMPLETIONS; c++) {
            if (p >= words) fatal("%s: example %d: its parts overrun its size (%zu bytes)", path, i, 2 * words);
            int n = f[p++];
            if (n < 1 || p + (size_t)n > words)
                fatal("%s: example %d: %s %d has %d tokens, %s", path, i, c < 0 ? "context" : "completion",
                      c < 0 ? 0 : c, n, n < 1 ? "none" : "more than its size holds");
            for (int k = 0; k < n; k++)
                if (f[p + k] >= vocab_size)
                    fatal("%s: example %d: token id %d is outside the model's vocabulary (%d)", path, i, f[p + k],
                          vocab_size);
            if (c < 0) {
                e->ctx = f + p;
                e->ctx_len = n;
            } else {
                e->comp[c] = f + p;
                e->comp_len[c] = n;
                if (e->ctx_len + n > h->longest) h->longest = e->ctx_len + n;
            }
            p += (size_t)n;
        }
        if (p != words)
            fatal("%s: example %d: its size says %zu bytes, its parts take %zu", path, i, 2 * words, 2 * p);
        at += words;
    }
    if (at != nt) fatal("%s: %zu bytes follow the %d examples its header announces", path, 2 * (nt - at), h->n);
}

static inline void hellaswag_free(HellaSwag *h) {
    free(h->ex);
    free(h->tokens);
    memset(h, 0, sizeof *h);
}

// Lays completion c of example e into one row of T inputs and targets: the context then
// the completion, of which the last T+1 tokens are kept when they are longer (so the
// whole completion is scored whenever it fits). Positions past the end hold
// HELLASWAG_PAD, which causal attention hides from the scored positions. Sets the first
// scored position (the first whose target is a completion token) and their count.
static inline void hellaswag_row(const HellaSwagExample *e, int c, int T, int *inputs, int *targets, int *first,
                                int *count) {
    const int pad = HELLASWAG_PAD;
    int n = e->ctx_len + e->comp_len[c];
    int start = n > T + 1 ? n - (T + 1) : 0;
    for (int p = 0; p < T; p++) {
        int a = start + p, b = a + 1;
        inputs[p] = a < n - 1 ? (a < e->ctx_len ? e->ctx[a] : e->comp[c][a - e->ctx_len]) : pad;
        targets[p] = b < n ? (b < e->ctx_len ? e->ctx[b] : e->comp[c][b - e->ctx_len]) : pad;
    }
    // target b is a completion token for b in [ctx_len, n); position p = b - 1 - start
    *first = e->ctx_len - 1 - start;
    if (*first < 0) *first = 0;
    *count = n - 1 - start - *first;
}

// The forward pass of a trainer over one batch of B rows of T: the loss at every
// position into losses[B*T].
typedef void (*PositionLossesFn)(void *model, const int *inputs, const int *targets, float *losses);

typedef struct {
    long correct, examples;  // of this rank's share (the trainer sums them over the ranks); of all
    int truncated;           // examples of this rank with a row cut to its last T+1 tokens
} HellaSwagScore;

// The index of the lowest of the four mean losses; ties to the lower index. A NaN never
// wins over a number, so a model with NaN losses is not credited with label 0's share.
static inline int hellaswag_choice(const float mean_loss[HELLASWAG_COMPLETIONS]) {
    int best = 0;
    for (int c = 1; c < HELLASWAG_COMPLETIONS; c++)
        if (mean_loss[c] < mean_loss[best] || (mean_loss[best] != mean_loss[best] && mean_loss[c] == mean_loss[c]))
            best = c;
    return best;
}

// Test hook (common/test_hooks.h): GPT2_TEST_HELLASWAG_CHOICES=FILE makes a one-rank run
// write each example's chosen completion there, one a line, to be held against
// dev/hellaswag_ref.py's.
static inline void hellaswag_write_choices(const int *choices, int n) {
    const char *path = test_hooks()->hellaswag_choices;
    if (!path) return;
    FILE *f = xfopen(path, "w");
    for (int i = 0; i < n; i++) fprintf(f, "%d\n", choices[i]);
    xfclose(f, path);
}

// Scores this rank's share of the examples (a contiguous range; rank of world) in batches
// of B rows, one row per completion, so an example may span two batches. inputs and
// targets hold B*T ints. choices, when not NULL, receives the chosen completion of each of
// this rank's examples (by example index).
static inline HellaSwagScore hellaswag_evaluate(const HellaSwag *h, int B, int T, int rank, int world, int *inputs,
                                                int *targets, PositionLossesFn losses_of, void *model, int *choices) {
    int lo = (int)((long)h->n * rank / world), hi = (int)((long)h->n * (rank + 1) / world);
    long rows = (long)(hi - lo) * HELLASWAG_COMPLETIONS;
    // every rank runs as many batches (its last ones padding where its share is smaller): a
    // forward may be collective (-z 3 gathers the parameters from every rank)
    long batches_rows = ((long)(h->n + world - 1) / world) * HELLASWAG_COMPLETIONS;
    float *losses = (float *)xmalloc((size_t)B * T * sizeof(float));
    float *row_mean = (float *)xmalloc((size_t)(rows > 0 ? rows : 1) * sizeof(float));
    int *first = (int *)xmalloc((size_t)B * sizeof(int)), *count = (int *)xmalloc((size_t)B * sizeof(int));
    HellaSwagScore s = {0, 0, 0};
    int *own_choices = NULL;
    if (!choices && world == 1 && test_hooks()->hellaswag_choices)
        choices = own_choices = (int *)xmalloc((size_t)h->n * sizeof(int));
    for (long r0 = 0; r0 < batches_rows; r0 += B) {
        for (int b = 0; b < B; b++) {
            long r = r0 + b;
            int *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
            if (r < rows) {
                const HellaSwagExample *e = &h->ex[lo + r / HELLASWAG_COMPLETIONS];
                int c = (int)(r % HELLASWAG_COMPLETIONS);
                hellaswag_row(e, c, T, in, tg, &first[b], &count[b]);
            } else {  // past the last example: a row of padding, not scored
                for (int p = 0; p < T; p++) in[p] = tg[p] = HELLASWAG_PAD;
                first[b] = count[b] = 0;
            }
        }
        losses_of(model, inputs, targets, losses);
        for (int b = 0; b < B && r0 + b < rows; b++) {
            double acc = 0.0;
            for (int p = first[b]; p < first[b] + count[b]; p++) acc += losses[(size_t)b * T + p];
            row_mean[r0 + b] = (float)(acc / count[b]);
        }
    }
    for (int i = lo; i < hi; i++) {
        int pick = hellaswag_choice(row_mean + (size_t)(i - lo) * HELLASWAG_COMPLETIONS);
        if (choices) choices[i] = pick;
        s.correct += pick == h->ex[i].label;
        for (int c = 0; c < HELLASWAG_COMPLETIONS; c++)
            if (h->ex[i].ctx_len + h->ex[i].comp_len[c] > T + 1) {
                s.truncated++;
                break;
            }
    }
    s.examples = h->n;
    if (own_choices) hellaswag_write_choices(own_choices, h->n);
    free(own_choices);
    free(losses);
    free(row_mean);
    free(first);
    free(count);
    return s;
}

#endif  // COMMON_HELLASWAG_H
