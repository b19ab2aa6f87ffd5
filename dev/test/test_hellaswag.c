// test_hellaswag.c: unit tests of common/hellaswag.h, the HellaSwag eval of -h 1: llm.c's
// eval file, written here from random examples, reads back field for field; every kind of
// malformed file is refused through fatal() with a message naming the file and the fault
// (never a crash: built with ASan/UBSan); one (example, completion) row is laid out as an
// independent expectation says (fits in T, cut to its last T+1 tokens, completion longer
// than T); the lowest mean loss is chosen, ties to the lower index; and the scorer, run
// with fake models, picks what they favour over batch sizes that split examples across
// batches and over ranks, and never scores the padding rows. The seed is printed:
// `build/san/test_hellaswag SEED` repeats a run.
#include "testutil.h"
#include "../../common/hellaswag.h"
#include "../../common/rng.h"
#include <math.h>

#define NC HELLASWAG_COMPLETIONS
#define PAD HELLASWAG_PAD
#define HEADER_BYTES (HELLASWAG_HEADER_INTS * 4)

static char g_dir[256];
static uint64_t g_rng;
static int g_vocab;  // the vocab_size load_child passes (set before each fork)

static char *path_in(const char *name) {
    char *p = (char *)xmalloc(strlen(g_dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", g_dir, name);
    return p;
}

static int rnd(int lo, int hi) { return lo + (int)(rng_next_u64(&g_rng) % (uint64_t)(hi - lo + 1)); }

// ---------------------------------------------------------------------------
// writing eval files

// One example as the test writes it (owns its tokens).
typedef struct {
    int label, ctx_len, comp_len[NC];
    uint16_t *ctx, *comp[NC];
} Ex;

static void ex_alloc(Ex *e, int label, int ctx_len, const int comp_len[NC]) {
    e->label = label;
    e->ctx_len = ctx_len;
    e->ctx = (uint16_t *)xmalloc((size_t)ctx_len * 2);
    for (int c = 0; c < NC; c++) {
        e->comp_len[c] = comp_len[c];
        e->comp[c] = (uint16_t *)xmalloc((size_t)comp_len[c] * 2);
    }
}

static void ex_free(Ex *ex, int n) {
    for (int i = 0; i < n; i++) {
        free(ex[i].ctx);
        for (int c = 0; c < NC; c++) free(ex[i].comp[c]);
    }
}

static int ex_words(const Ex *e) {
    int w = HELLASWAG_EXAMPLE_FIELDS + e->ctx_len;
    for (int c = 0; c < NC; c++) w += 1 + e->comp_len[c];
    return w;
}

// The body of an eval file, as hellaswag.py writes it: per example the delimiter, its size in
// bytes (all its words x 2), its index, label, completion count, then the length-prefixed
// context and completions. Returns the words (malloc'd) and their count in *words.
static uint16_t *encode(const Ex *ex, int n, size_t *words) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)ex_words(&ex[i]);
    uint16_t *out = (uint16_t *)xmalloc(total * 2), *w = out;
    for (int i = 0; i < n; i++) {
        const Ex *e = &ex[i];
        *w++ = HELLASWAG_DELIMITER;
        *w++ = (uint16_t)(2 * ex_words(e));
        *w++ = (uint16_t)i;
        *w++ = (uint16_t)e->label;
        *w++ = NC;
        *w++ = (uint16_t)e->ctx_len;
        for (int k = 0; k < e->ctx_len; k++) *w++ = e->ctx[k];
        for (int c = 0; c < NC; c++) {
            *w++ = (uint16_t)e->comp_len[c];
            for (int k = 0; k < e->comp_len[c]; k++) *w++ = e->comp[c][k];
        }
    }
    *words = total;
    return out;
}

// The header hellaswag.py writes: magic, version, examples, longest example in bytes.
static void make_header(int32_t hd[HELLASWAG_HEADER_INTS], const Ex *ex, int n) {
    memset(hd, 0, HEADER_BYTES);
    hd[0] = HELLASWAG_MAGIC;
    hd[1] = HELLASWAG_VERSION;
    hd[2] = n;
    for (int i = 0; i < n; i++) hd[3] = 2 * ex_words(&ex[i]) > hd[3] ? 2 * ex_words(&ex[i]) : hd[3];
}

// The file's bytes, little-endian whatever the host, with `spare` bytes of room after them.
static uint8_t *file_image(const int32_t *hd, const uint16_t *body, size_t words, size_t spare, size_t *len) {
    *len = HEADER_BYTES + 2 * words;
    uint8_t *b = (uint8_t *)xcalloc(*len + spare, 1);
    for (int i = 0; i < HELLASWAG_HEADER_INTS; i++)
        for (int k = 0; k < 4; k++) b[4 * i + k] = (uint8_t)((uint32_t)hd[i] >> (8 * k));
    for (size_t i = 0; i < words; i++) {
        b[HEADER_BYTES + 2 * i] = (uint8_t)(body[i] & 0xff);
        b[HEADER_BYTES + 2 * i + 1] = (uint8_t)(body[i] >> 8);
    }
    return b;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = xfopen(path, "wb");
    if (n) xfwrite(data, 1, n, f, path);
    xfclose(f, path);
}

// Writes the examples as a well-formed eval file.
static void write_eval(const char *path, const Ex *ex, int n) {
    int32_t hd[HELLASWAG_HEADER_INTS];
    make_header(hd, ex, n);
    size_t words, len;
    uint16_t *body = encode(ex, n, &words);
    uint8_t *b = file_image(hd, body, words, 0, &len);
    write_bytes(path, b, len);
    free(b);
    free(body);
}

typedef int (*TokenFn)(const Ex *e, int c);  // a token of the example's completion c (-1: its context)

// An example of the given shape, its tokens from tok.
static void ex_fill(Ex *e, int label, int ctx_len, const int comp_len[NC], TokenFn tok) {
    ex_alloc(e, label, ctx_len, comp_len);
    for (int k = 0; k < ctx_len; k++) e->ctx[k] = (uint16_t)tok(e, -1);
    for (int c = 0; c < NC; c++)
        for (int k = 0; k < comp_len[c]; k++) e->comp[c][k] = (uint16_t)tok(e, c);
}

// n examples of random labels and lengths.
static void random_examples(Ex *ex, int n, int max_ctx, int max_comp, TokenFn tok) {
    for (int i = 0; i < n; i++) {
        int cl[NC];
        for (int c = 0; c < NC; c++) cl[c] = rnd(1, max_comp);
        ex_fill(&ex[i], rnd(0, NC - 1), rnd(1, max_ctx), cl, tok);
    }
}

// ---------------------------------------------------------------------------
// 1. a valid file reads back as written

static int tok_any(const Ex *e, int c) { (void)e; (void)c; return rnd(0, g_vocab - 1); }

static void check_loaded(const HellaSwag *h, const Ex *ex, int n, const char *what) {
    CHECK(h->n == n, "%s: %d examples, wrote %d", what, h->n, n);
    int longest = 0;
    for (int i = 0; i < n && i < h->n; i++) {
        const HellaSwagExample *e = &h->ex[i];
        const Ex *w = &ex[i];
        CHECK(e->label == w->label, "%s: example %d label %d, wrote %d", what, i, e->label, w->label);
        CHECK(e->ctx_len == w->ctx_len, "%s: example %d context %d tokens, wrote %d", what, i, e->ctx_len,
              w->ctx_len);
        if (e->ctx_len == w->ctx_len)
            CHECK(memcmp(e->ctx, w->ctx, (size_t)w->ctx_len * 2) == 0, "%s: example %d context tokens differ",
                  what, i);
        for (int c = 0; c < NC; c++) {
            CHECK(e->comp_len[c] == w->comp_len[c], "%s: example %d completion %d: %d tokens, wrote %d", what, i,
                  c, e->comp_len[c], w->comp_len[c]);
            if (e->comp_len[c] == w->comp_len[c])
                CHECK(memcmp(e->comp[c], w->comp[c], (size_t)w->comp_len[c] * 2) == 0,
                      "%s: example %d completion %d tokens differ", what, i, c);
            if (w->ctx_len + w->comp_len[c] > longest) longest = w->ctx_len + w->comp_len[c];
        }
    }
    CHECK(h->longest == longest, "%s: longest %d, expected %d", what, h->longest, longest);
}

static void load_and_check(const char *name, const Ex *ex, int n) {
    char *p = path_in(name);
    write_eval(p, ex, n);
    HellaSwag h;
    hellaswag_load(&h, p, g_vocab);
    check_loaded(&h, ex, n, name);
    hellaswag_free(&h);
    free(p);
}

static void test_valid_file(void) {
    // GPT-2's vocabulary; a small one (tokens repeat); the whole 16-bit range, where a token
    // may equal the delimiter (the reader goes by the lengths, never scans for it)
    const int vocabs[3] = {50257, rnd(2, 300), 65536};
    for (int round = 0; round < 3; round++) {
        g_vocab = vocabs[round];
        Ex ex[16];
        int n = rnd(2, 16);
        random_examples(ex, n, 60, 40, tok_any);
        ex[0].ctx[0] = (uint16_t)(g_vocab - 1);  // the largest id is in the vocabulary
        ex[n - 1].comp[NC - 1][ex[n - 1].comp_len[NC - 1] - 1] = 0;
        char name[64];
        snprintf(name, sizeof name, "valid_%d.bin", round);
        load_and_check(name, ex, n);
        ex_free(ex, n);
    }
    // a single example of one-token parts: the smallest example there is
    g_vocab = 50257;
    Ex one;
    const int ones[NC] = {1, 1, 1, 1};
    ex_alloc(&one, 3, 1, ones);
    one.ctx[0] = 7;
    for (int c = 0; c < NC; c++) one.comp[c][0] = (uint16_t)(100 + c);
    load_and_check("single.bin", &one, 1);
    ex_free(&one, 1);
    // an example of 65534 bytes, the largest even size the 16-bit size field holds
    Ex big;
    ex_alloc(&big, 1, 32767 - HELLASWAG_EXAMPLE_FIELDS - 2 * NC, ones);
    for (int k = 0; k < big.ctx_len; k++) big.ctx[k] = (uint16_t)rnd(0, g_vocab - 1);
    for (int c = 0; c < NC; c++) big.comp[c][0] = (uint16_t)rnd(0, g_vocab - 1);
    CHECK(2 * ex_words(&big) == 65534, "the big example takes %d bytes", 2 * ex_words(&big));
    load_and_check("big.bin", &big, 1);
    ex_free(&big, 1);
}

// ---------------------------------------------------------------------------
// 2. malformed files

static void load_child(const char *path) {
    HellaSwag h;
    hellaswag_load(&h, path, g_vocab);
    hellaswag_free(&h);
}

// A small, fixed, valid file of two examples, so that a fault can be put at a known word:
//   example 0 at word 0: label 2, context {11,12,13}, completions {21,22} {31} {41,42} {51,52,53}: 21 words
//   example 1 at word 21: label 0, context {14,15}, completions {23} {32,33} {43} {54}: 17 words
#define EX1 21
#define BODY_WORDS 38
static void base_examples(Ex ex[2]) {
    const int cl0[NC] = {2, 1, 2, 3}, cl1[NC] = {1, 2, 1, 1};
    ex_alloc(&ex[0], 2, 3, cl0);
    ex_alloc(&ex[1], 0, 2, cl1);
    const uint16_t t0[] = {11, 12, 13, 21, 22, 31, 41, 42, 51, 52, 53}, t1[] = {14, 15, 23, 32, 33, 43, 54};
    const uint16_t *t[2] = {t0, t1};
    for (int i = 0; i < 2; i++) {
        memcpy(ex[i].ctx, t[i], (size_t)ex[i].ctx_len * 2);
        const uint16_t *s = t[i] + ex[i].ctx_len;
        for (int c = 0; c < NC; c++) {
            memcpy(ex[i].comp[c], s, (size_t)ex[i].comp_len[c] * 2);
            s += ex[i].comp_len[c];
        }
    }
}

typedef struct {
    const char *name;       // of the file
    int hd_at, hd_val;      // a header int to change (hd_at < 0: none)
    int word_at, word_val;  // a body word to change (word_at < 0: none)
    long keep;              // keep only this many bytes of the file (< 0: all)
    int append;             // zero bytes to append
    int vocab;
    const char *n1, *n2;    // what the message must say besides the file's name
} BadCase;

static void test_malformed(void) {
    Ex ex[2];
    base_examples(ex);
    int32_t hd[HELLASWAG_HEADER_INTS];
    make_header(hd, ex, 2);
    size_t words;
    uint16_t *body = encode(ex, 2, &words);
    // the layout the cases below count on
    CHECK(words == BODY_WORDS && body[EX1] == HELLASWAG_DELIMITER && hd[3] == 42 && body[EX1 + 1] == 34,
          "base file layout: %zu words, longest %d", words, hd[3]);
    char *good = path_in("base.bin");
    write_eval(good, ex, 2);
    // the base file loads with every token in the vocabulary (the largest id is 54)...
    HellaSwag h;
    g_vocab = 55;
    hellaswag_load(&h, good, g_vocab);
    check_loaded(&h, ex, 2, "base.bin");
    hellaswag_free(&h);
    // ... and not with one fewer
    g_vocab = 54;
    expect_failure("vocab one short", load_child, good, good, "token id 54 is outside the model's vocabulary (54)",
                   NULL);
    free(good);

    const BadCase cases[] = {
        {"empty.bin", -1, 0, -1, 0, 0, 0, 50257, "0 bytes", "shorter than the 1024-byte header"},
        {"short.bin", -1, 0, -1, 0, 1000, 0, 50257, "1000 bytes", "shorter than the 1024-byte header"},
        {"magic.bin", 0, 20240521, -1, 0, -1, 0, 50257, "not a HellaSwag eval file", "magic 20240521"},
        {"version.bin", 1, 2, -1, 0, -1, 0, 50257, "eval file version 2, expected 1", NULL},
        {"zero_examples.bin", 2, 0, -1, 0, -1, 0, 50257, "the header says 0 examples", NULL},
        {"negative_examples.bin", 2, -5, -1, 0, -1, 0, 50257, "the header says -5 examples", NULL},
        {"longest_small.bin", 3, 11, -1, 0, -1, 0, 50257, "longest example (11 bytes) is out of range", NULL},
        {"longest_big.bin", 3, 131071, -1, 0, -1, 0, 50257, "longest example (131071 bytes) is out of range",
         NULL},
        {"odd_body.bin", -1, 0, -1, 0, -1, 1, 50257, "odd number of bytes (77)", NULL},
        {"header_only.bin", -1, 0, -1, 0, HEADER_BYTES, 0, 50257, "says 2 examples, more than the body can hold",
         "truncated"},
        {"announces_3.bin", 2, 3, -1, 0, -1, 0, 50257, "says 3 examples, more than the body can hold", "truncated"},
        {"announces_1000.bin", 2, 1000, -1, 0, -1, 0, 50257, "says 1000 examples, more than the body", NULL},
        {"cut_in_fields.bin", -1, 0, -1, 0, HEADER_BYTES + 2 * (EX1 + 4), 0, 50257,
         "says 2 examples, more than the body can hold", NULL},
        // a count no body holds is refused before it sizes an allocation
        {"announces_int_max.bin", 2, 2147483647, -1, 0, -1, 0, 50257, "says 2147483647 examples",
         "more than the format numbers"},
        {"index_wrong.bin", -1, 0, EX1 + 2, 0, -1, 0, 50257, "example 1 carries the index 0", NULL},
        {"cut_in_tokens.bin", -1, 0, -1, 0, HEADER_BYTES + 2 * (EX1 + 10), 0, 50257,
         "example 1: its size (34 bytes)", "past the end of the file"},
        {"no_delimiter_0.bin", -1, 0, 0, 0, -1, 0, 50257,
         "example 0 does not start with the delimiter 65535", "found 0 at byte 1024"},
        {"no_delimiter_1.bin", -1, 0, EX1, 65534, -1, 0, 50257,
         "example 1 does not start with the delimiter 65535", "found 65534 at byte 1066"},
        {"size_odd.bin", -1, 0, 1, 41, -1, 0, 50257, "example 0: its size (41 bytes) is odd", NULL},
        {"size_small.bin", -1, 0, 1, 10, -1, 0, 50257, "example 0: its size (10 bytes)", "too small"},
        {"size_zero.bin", -1, 0, EX1 + 1, 0, -1, 0, 50257, "example 1: its size (0 bytes)", NULL},
        {"size_above_longest.bin", 3, 40, -1, 0, -1, 0, 50257, "example 0: its size (42 bytes)",
         "above the header's longest (40)"},
        {"size_past_end.bin", 3, 100, EX1 + 1, 36, -1, 0, 50257, "example 1: its size (36 bytes)",
         "past the end of the file"},
        {"completions_3.bin", -1, 0, 4, 3, -1, 0, 50257, "example 0 has 3 completions; this format holds 4",
         NULL},
        {"completions_5.bin", -1, 0, EX1 + 4, 5, -1, 0, 50257, "example 1 has 5 completions", NULL},
        {"label_4.bin", -1, 0, 3, 4, -1, 0, 50257, "example 0: label 4 is not a completion (0..3)", NULL},
        {"label_65535.bin", -1, 0, EX1 + 3, 65535, -1, 0, 50257, "example 1: label 65535 is not a completion",
         NULL},
        {"context_0.bin", -1, 0, 5, 0, -1, 0, 50257, "example 0: context 0 has 0 tokens, none", NULL},
        {"context_long.bin", -1, 0, 5, 1000, -1, 0, 50257,
         "example 0: context 0 has 1000 tokens, more than its size holds", NULL},
        {"completion_0.bin", -1, 0, 12, 0, -1, 0, 50257, "example 0: completion 1 has 0 tokens, none", NULL},
        // completion 3 of example 0 (length at word 17) one token longer: it would run into example 1
        {"completion_long.bin", -1, 0, 17, 4, -1, 0, 50257,
         "example 0: completion 3 has 4 tokens, more than its size holds", NULL},
        {"completion_long_1.bin", -1, 0, EX1 + 15, 2, -1, 0, 50257,
         "example 1: completion 3 has 2 tokens, more than its size holds", NULL},
        {"token_comp.bin", -1, 0, 10, 50, -1, 0, 50, "example 0: token id 50",
         "outside the model's vocabulary (50)"},
        {"token_ctx.bin", -1, 0, EX1 + 7, 60000, -1, 0, 50257, "example 1: token id 60000",
         "outside the model's vocabulary (50257)"},
        // the size says one word more than the parts take (the header's longest allows it)
        {"size_over_parts.bin", 3, 44, 1, 44, -1, 0, 50257, "example 0: its size says 44 bytes",
         "its parts take 42"},
        // the size ends right before completion 3's length (word 17)
        {"size_under_parts.bin", -1, 0, 1, 34, -1, 0, 50257, "example 0: its parts overrun its size (34 bytes)",
         NULL},
        {"trailing.bin", -1, 0, -1, 0, -1, 4, 50257, "4 bytes follow the 2 examples", NULL},
        {"trailing_example.bin", 2, 1, -1, 0, -1, 0, 50257, "34 bytes follow the 1 examples", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const BadCase *bc = &cases[i];
        int32_t h2[HELLASWAG_HEADER_INTS];
        memcpy(h2, hd, sizeof h2);
        if (bc->hd_at >= 0) h2[bc->hd_at] = bc->hd_val;
        uint16_t b2[BODY_WORDS];
        memcpy(b2, body, sizeof b2);
        if (bc->word_at >= 0) b2[bc->word_at] = (uint16_t)bc->word_val;
        size_t len;
        uint8_t *img = file_image(h2, b2, BODY_WORDS, (size_t)bc->append, &len);
        len += (size_t)bc->append;  // zeros (calloc'd)
        if (bc->keep >= 0) len = (size_t)bc->keep;
        char *p = path_in(bc->name);
        write_bytes(p, img, len);
        g_vocab = bc->vocab;
        expect_failure(bc->name, load_child, p, p, bc->n1, bc->n2);
        free(img);
        free(p);
    }
    char *missing = path_in("no_such_file.bin");
    g_vocab = 50257;
    expect_failure("missing file", load_child, missing, missing, "cannot open", NULL);
    free(missing);
    free(body);
    ex_free(ex, 2);
}

// ---------------------------------------------------------------------------
// 3. one row of the batch

// The row as the test expects it, from the whole sequence (context then completion c): its
// last k = min(n, T+1) tokens are kept; the inputs are kept[0..k-1), the targets kept[1..k),
// padded to T; a position is scored when its target is a completion token.
static void expect_row(const HellaSwagExample *e, int c, int T, int *in, int *tg, int *first, int *count) {
    int n = e->ctx_len + e->comp_len[c];
    int *seq = (int *)xmalloc((size_t)n * sizeof(int));
    for (int k = 0; k < n; k++) seq[k] = k < e->ctx_len ? e->ctx[k] : e->comp[c][k - e->ctx_len];
    int k = n < T + 1 ? n : T + 1, skip = n - k;
    *first = -1;
    *count = 0;
    for (int p = 0; p < T; p++) {
        in[p] = p < k - 1 ? seq[skip + p] : PAD;
        tg[p] = p + 1 < k ? seq[skip + p + 1] : PAD;
        if (p + 1 < k && skip + p + 1 >= e->ctx_len) {
            if (*first < 0) *first = p;
            (*count)++;
        }
    }
    free(seq);
}

// hellaswag_row against expect_row (and against given values where want_in is not NULL);
// the row buffers are exactly T long so that ASan sees a write past them.
static int check_row(const HellaSwagExample *e, int c, int T, const int *want_in, const int *want_tg,
                     int want_first, int want_count) {
    int *in = (int *)xmalloc((size_t)T * sizeof(int)), *tg = (int *)xmalloc((size_t)T * sizeof(int));
    int *ein = (int *)xmalloc((size_t)T * sizeof(int)), *etg = (int *)xmalloc((size_t)T * sizeof(int));
    int first = -7, count = -7, efirst, ecount;
    hellaswag_row(e, c, T, in, tg, &first, &count);
    expect_row(e, c, T, ein, etg, &efirst, &ecount);
    int ok = 1;
    if (want_in) {
        ok &= memcmp(ein, want_in, (size_t)T * sizeof(int)) == 0 && memcmp(etg, want_tg, (size_t)T * sizeof(int)) == 0
              && efirst == want_first && ecount == want_count;
        CHECK(ok, "the test's own expectation disagrees with the hand-written row (T %d)", T);
    }
    for (int p = 0; p < T; p++) {
        CHECK(in[p] == ein[p], "ctx %d comp %d T %d: input %d is %d, expected %d", e->ctx_len, e->comp_len[c], T, p,
              in[p], ein[p]);
        CHECK(tg[p] == etg[p], "ctx %d comp %d T %d: target %d is %d, expected %d", e->ctx_len, e->comp_len[c], T,
              p, tg[p], etg[p]);
        ok &= in[p] == ein[p] && tg[p] == etg[p];
    }
    CHECK(first == efirst && count == ecount, "ctx %d comp %d T %d: first %d count %d, expected %d %d", e->ctx_len,
          e->comp_len[c], T, first, count, efirst, ecount);
    ok &= first == efirst && count == ecount;
    free(in); free(tg); free(ein); free(etg);
    return ok;
}

// An example with distinct nonzero tokens (so none is taken for padding): context 101, 102, ...;
// completion c 1000c + 1001, ...
static HellaSwagExample row_example(uint16_t *store, int ctx_len, int comp_len) {
    HellaSwagExample e;
    memset(&e, 0, sizeof e);
    e.label = 0;
    e.ctx_len = ctx_len;
    e.ctx = store;
    for (int k = 0; k < ctx_len; k++) store[k] = (uint16_t)(101 + k);
    uint16_t *s = store + ctx_len;
    for (int c = 0; c < NC; c++) {
        e.comp_len[c] = comp_len + c;  // the completions differ in length
        e.comp[c] = s;
        for (int k = 0; k < e.comp_len[c]; k++) s[k] = (uint16_t)(1000 * c + 1001 + k);
        s += e.comp_len[c];
    }
    return e;
}

static void test_row(void) {
    uint16_t store[4096];
    // (a) fits: context 101 102 103, completion 0 1001 1002; T 8
    HellaSwagExample e = row_example(store, 3, 2);
    const int a_in[8] = {101, 102, 103, 1001, PAD, PAD, PAD, PAD}, a_tg[8] = {102, 103, 1001, 1002, PAD, PAD, PAD, PAD};
    check_row(&e, 0, 8, a_in, a_tg, 2, 2);
    // exactly T+1 tokens: nothing cut, no padding
    const int x_in[4] = {101, 102, 103, 1001}, x_tg[4] = {102, 103, 1001, 1002};
    check_row(&e, 0, 4, x_in, x_tg, 2, 2);
    // (b) context 101..110, completion 1 2001 2002 2003 (n 13); T 6: the last 7 tokens
    e = row_example(store, 10, 2);
    const int b_in[6] = {107, 108, 109, 110, 2001, 2002}, b_tg[6] = {108, 109, 110, 2001, 2002, 2003};
    check_row(&e, 1, 6, b_in, b_tg, 3, 3);
    // (c) context 101 102, completion 3 4001..4013 (13 tokens); T 4: its last 5 tokens, all scored
    e = row_example(store, 2, 10);
    const int c_in[4] = {4009, 4010, 4011, 4012}, c_tg[4] = {4010, 4011, 4012, 4013};
    check_row(&e, 3, 4, c_in, c_tg, 0, 4);
    // a completion of exactly T tokens after a longer context: all of it scored, from position 0
    e = row_example(store, 5, 4);
    const int d_in[4] = {105, 1001, 1002, 1003}, d_tg[4] = {1001, 1002, 1003, 1004};
    check_row(&e, 0, 4, d_in, d_tg, 0, 4);
    // every small shape: contexts and completions of 1..14 tokens, T 1..17
    int bad = 0, shapes = 0;
    for (int cl = 1; cl <= 14 && bad < 3; cl++)
        for (int ml = 1; ml <= 11 && bad < 3; ml++) {
            e = row_example(store, cl, ml);
            for (int T = 1; T <= 17; T++)
                for (int c = 0; c < NC; c++, shapes++) bad += !check_row(&e, c, T, NULL, NULL, 0, 0);
        }
    // a long context cut to a T of 1024
    e = row_example(store, 3000, 40);
    bad += !check_row(&e, 2, 1024, NULL, NULL, 0, 0);
    CHECK(bad == 0, "%d of %d rows differ", bad, shapes);
}

// ---------------------------------------------------------------------------
// 4. the choice

static void test_choice(void) {
    const struct { float m[NC]; int want; } t[] = {
        {{3, 2, 1, 0}, 3},
        {{0, 1, 2, 3}, 0},
        {{1, 1, 1, 1}, 0},          // a tie of all four: the first
        {{2, 1, 1, 3}, 1},          // tied best: the lower index
        {{0.5f, 0.5f, 0.25f, 0.25f}, 2},
        {{5, 4, 4.0000005f, 4}, 1}, // one ulp above is not a tie
        {{-1, -3, -2, -3}, 1},
        {{1e30f, 1e29f, INFINITY, 1e30f}, 1},
        {{NAN, 2, 1, 3}, 2},        // a NaN never wins over a number
        {{1, NAN, 0.5f, NAN}, 2},
        {{NAN, NAN, NAN, NAN}, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int got = hellaswag_choice(t[i].m);
        CHECK(got == t[i].want, "means {%g, %g, %g, %g}: chose %d, expected %d", t[i].m[0], t[i].m[1], t[i].m[2],
              t[i].m[3], got, t[i].want);
    }
}

// ---------------------------------------------------------------------------
// 5. the scorer with fake models

// The scorer's file has tokens that say what they are, so that a fake model can tell from a
// target alone: a context token has bit 3 set; a completion token carries its completion's
// index in bits 0-1 and, in bit 2, whether that completion is the example's label. None is 0
// (HELLASWAG_PAD).
#define TOK_CTX 8
#define TOK_RIGHT 4
static int tok_tagged(const Ex *e, int c) {
    int x = rnd(1, 3000) * 16;
    return c < 0 ? x | TOK_CTX : x | (c == e->label ? TOK_RIGHT : 0) | c;
}

enum { FAKE_LABEL, FAKE_FIRST, FAKE_LAST, FAKE_TIE, FAKE_HASH, FAKE_MODES };
static const char *fake_names[FAKE_MODES] = {"label", "first", "last", "tie", "hash"};

typedef struct {
    int mode, B, T;
    long calls, pad_rows, bad_pad_rows;
} Fake;

// a loss of a completion token, a multiple of 1/8 so that sums are exact
static float hash_loss(int t) { return (float)(((uint32_t)t * 2654435761u >> 16) % 1024) / 8.0f; }

static float fake_loss(int mode, int t) {
    switch (mode) {
    case FAKE_LABEL: return t & TOK_RIGHT ? 0.0f : 1.0f;
    case FAKE_FIRST: return (t & 3) == 0 ? 0.0f : 1.0f;
    case FAKE_LAST: return (float)(3 - (t & 3));
    case FAKE_TIE: return 1.0f;
    default: return hash_loss(t);
    }
}

// The losses of a batch: a completion target's loss by the mode; any other position gets a
// loss no completion could win with, were it scored; a row of padding (every real row starts
// with a token, none of them 0) is counted and gets NaN.
static void fake_losses(void *model, const int *inputs, const int *targets, float *losses) {
    Fake *f = (Fake *)model;
    f->calls++;
    for (int b = 0; b < f->B; b++) {
        const int *in = inputs + (size_t)b * f->T, *tg = targets + (size_t)b * f->T;
        float *l = losses + (size_t)b * f->T;
        if (in[0] == PAD) {
            f->pad_rows++;
            int clean = 1;
            for (int p = 0; p < f->T; p++) {
                clean &= in[p] == PAD && tg[p] == PAD;
                l[p] = NAN;
            }
            f->bad_pad_rows += !clean;
            continue;
        }
        for (int p = 0; p < f->T; p++)
            l[p] = tg[p] == PAD || (tg[p] & TOK_CTX) ? 1e6f : fake_loss(f->mode, tg[p]);
    }
}

// What each mode should choose: the completion of the lowest mean loss over its scored
// tokens, its last min(length, T), ties to the lower index.
static int expected_choice(const Ex *e, int mode, int T) {
    int best = 0;
    float best_mean = 0.0f;
    for (int c = 0; c < NC; c++) {
        int m = e->comp_len[c] < T ? e->comp_len[c] : T;
        double acc = 0.0;
        for (int k = e->comp_len[c] - m; k < e->comp_len[c]; k++) acc += fake_loss(mode, e->comp[c][k]);
        float mean = (float)(acc / m);
        if (c == 0 || mean < best_mean) { best = c; best_mean = mean; }
    }
    return best;
}

// One run of the scorer on rank of world, checking what the fake saw: one call a batch, as
// many batches on every rank (those of the largest share, ceil(n / world) examples: a forward
// may be collective), and exactly the batches' spare rows as padding.
static HellaSwagScore run_eval(const HellaSwag *h, int B, int T, int rank, int world, int mode, int *choices) {
    Fake f = {mode, B, T, 0, 0, 0};
    int *in = (int *)xmalloc((size_t)B * T * sizeof(int)), *tg = (int *)xmalloc((size_t)B * T * sizeof(int));
    HellaSwagScore s = hellaswag_evaluate(h, B, T, rank, world, in, tg, fake_losses, &f, choices);
    free(in);
    free(tg);
    long rows = 0;
    for (int i = 0; i < h->n; i++) rows += (choices[i] >= 0) * NC;  // this rank's examples, by what it filled
    long most = (long)((h->n + world - 1) / world) * NC;  // the largest share's rows
    long batches = (most + B - 1) / B;
    CHECK(f.calls == batches, "B %d T %d rank %d/%d: %ld forward passes for %ld rows", B, T, rank, world, f.calls,
          rows);
    CHECK(f.pad_rows == batches * B - rows, "B %d T %d rank %d/%d: %ld padding rows, expected %ld", B, T, rank,
          world, f.pad_rows, batches * B - rows);
    CHECK(f.bad_pad_rows == 0, "B %d T %d rank %d/%d: %ld padding rows hold a token", B, T, rank, world,
          f.bad_pad_rows);
    return s;
}

static void test_evaluate(void) {
    g_vocab = 50257;
    Ex ex[14];
    int n = rnd(7, 14);
    random_examples(ex, n, 30, 20, tok_tagged);
    // make sure of the shapes that matter: a context of 30; a labelled completion of 20 (longer
    // than T 5); an example of exactly 13 tokens at most, T 12's T+1 (not cut)
    const int cl0[NC] = {3, 1, 2, 4}, cl1[NC] = {8, 2, 8, 1};
    int l0 = ex[0].label, l1 = ex[1].label, ln = ex[n - 1].label, cln[NC] = {1, 1, 1, 1};
    cln[ln] = 20;
    ex_free(ex, 2);
    ex_free(&ex[n - 1], 1);
    ex_fill(&ex[0], l0, 30, cl0, tok_tagged);
    ex_fill(&ex[1], l1, 5, cl1, tok_tagged);
    ex_fill(&ex[n - 1], ln, rnd(1, 30), cln, tok_tagged);
    char *p = path_in("eval.bin");
    write_eval(p, ex, n);
    HellaSwag h;
    hellaswag_load(&h, p, g_vocab);
    check_loaded(&h, ex, n, "eval.bin");
    int label0 = 0;
    for (int i = 0; i < n; i++) label0 += ex[i].label == 0;

    int *want = (int *)xmalloc((size_t)n * sizeof(int)), *got = (int *)xmalloc((size_t)n * sizeof(int));
    int *all = (int *)xmalloc((size_t)n * sizeof(int));
    const int Ts[3] = {64, 12, 5};  // 64: nothing cut (at most 30 + 20 tokens)
    for (int ti = 0; ti < 3; ti++) {
        int T = Ts[ti], want_trunc = 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < NC; c++)
                if (ex[i].ctx_len + ex[i].comp_len[c] > T + 1) { want_trunc++; break; }
        CHECK(T != 64 || want_trunc == 0, "T 64 cuts nothing");
        CHECK(T == 64 || want_trunc > 0, "T %d cuts some", T);
        for (int mode = 0; mode < FAKE_MODES; mode++) {
            long want_correct = 0;
            for (int i = 0; i < n; i++) {
                want[i] = expected_choice(&ex[i], mode, T);
                want_correct += want[i] == ex[i].label;
            }
            // the fakes the test is built on choose what they must, whatever the cut
            if (mode == FAKE_LABEL) CHECK(want_correct == n, "label fake: %ld of %d", want_correct, n);
            if (mode == FAKE_FIRST || mode == FAKE_TIE)
                CHECK(want_correct == label0, "%s fake: %ld, %d labelled 0", fake_names[mode], want_correct, label0);
            const int Bs[4] = {1, 3, 5, NC * n + 3};  // 3 and 5 split examples across batches; the last pads
            for (int bi = 0; bi < 4; bi++) {
                int B = Bs[bi];
                for (int i = 0; i < n; i++) got[i] = -1;
                HellaSwagScore s = run_eval(&h, B, T, 0, 1, mode, got);
                int same = memcmp(got, want, (size_t)n * sizeof(int)) == 0;
                CHECK(same, "%s fake, B %d T %d: the choices differ from the expected", fake_names[mode], B, T);
                CHECK(s.correct == want_correct && s.examples == n && s.truncated == want_trunc,
                      "%s fake, B %d T %d: correct %ld examples %ld truncated %d, expected %ld %d %d",
                      fake_names[mode], B, T, s.correct, s.examples, s.truncated, want_correct, n, want_trunc);
                // the ranks: each fills a contiguous share of its own, the shares cover every
                // example once, and their sums are the single rank's
                const int worlds[2] = {3, n + 2};  // n + 2: some ranks have no example
                for (int wi = 0; wi < 2; wi++) {
                    int world = worlds[wi];
                    long correct = 0;
                    int truncated = 0, next = 0, smallest = n, largest = 0;
                    for (int i = 0; i < n; i++) all[i] = -1;
                    for (int r = 0; r < world; r++) {
                        for (int i = 0; i < n; i++) got[i] = -1;
                        s = run_eval(&h, B, T, r, world, mode, got);
                        int lo = n, hi = 0, mine = 0, right = 0, elsewhere = 0;
                        for (int i = 0; i < n; i++)
                            if (got[i] >= 0) {
                                lo = i < lo ? i : lo;
                                hi = i + 1;
                                mine++;
                                right += got[i] == ex[i].label;
                                elsewhere += all[i] >= 0;
                                all[i] = got[i];
                            }
                        if (mine == 0) lo = hi = next;
                        CHECK(lo == next && hi - lo == mine && !elsewhere,
                              "B %d T %d rank %d/%d: share [%d, %d) of %d examples, expected to start at %d", B, T, r,
                              world, lo, hi, mine, next);
                        CHECK(s.correct == right && s.examples == n, "B %d T %d rank %d/%d: correct %ld, its choices"
                              " say %d; examples %ld", B, T, r, world, s.correct, right, s.examples);
                        next = hi;
                        smallest = mine < smallest ? mine : smallest;
                        largest = mine > largest ? mine : largest;
                        correct += s.correct;
                        truncated += s.truncated;
                    }
                    CHECK(next == n, "B %d T %d world %d: the shares end at %d of %d", B, T, world, next, n);
                    CHECK(largest - smallest <= 1, "world %d: shares of %d to %d examples", world, smallest, largest);
                    CHECK(memcmp(all, want, (size_t)n * sizeof(int)) == 0, "%s fake, B %d T %d world %d: the choices "
                          "differ from the single rank's", fake_names[mode], B, T, world);
                    CHECK(correct == want_correct && truncated == want_trunc, "%s fake, B %d T %d world %d: correct %ld"
                          " truncated %d, expected %ld %d", fake_names[mode], B, T, world, correct, truncated,
                          want_correct, want_trunc);
                }
            }
        }
    }
    free(want); free(got); free(all);
    hellaswag_free(&h);
    ex_free(ex, n);
    free(p);
}

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    printf("seed %llu\n", (unsigned long long)seed);
    g_rng = rng_seed(seed);
    snprintf(g_dir, sizeof g_dir, "build/test_hellaswag_%d", (int)getpid());
    mkdir("build", 0755);
    if (mkdir(g_dir, 0755) != 0) fatal("cannot create %s", g_dir);
    run_case("a valid file reads back as written", test_valid_file);
    run_case("malformed files are refused clearly", test_malformed);
    run_case("rows: fit, cut to T+1, completion over T", test_row);
    run_case("choice: lowest mean, ties to the lower", test_choice);
    run_case("scorer: fakes, batches, ranks, padding", test_evaluate);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return test_summary();
}
