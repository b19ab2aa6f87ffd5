// fuzz_readers.c: a mutation fuzzer over every reader of an input file: model checkpoints
// (fp32 and bf16), training states (and the data loader position they carry), token
// shards, the tokenizer's vocab.bpe and encoder.json, prepro's JSONL input, transformers'
// model.safetensors and the HellaSwag eval file (common/hellaswag.h). Seeds are small
// valid files made here (the tokenizer's are the real ones from data/gpt2); each mutant is
// read in a forked child. A reader may accept a mutant (exit 0) or refuse it through
// fatal() (exit 1); anything else (a signal, a sanitizer report, a hang, another exit
// status) is a crash: the input is saved as build/fuzz_crashes/<kind>_<n>.bin and the
// program exits 1. Built with ASan and UBSan: make build/san/fuzz_readers
//
//   build/san/fuzz_readers                        every kind, FUZZ_SECONDS (60) each
//   build/san/fuzz_readers --replay KIND FILE [SEED]   one saved input, its report shown
//
// Kinds: model, state, shard, tokenizer, jsonl, safetensors, hellaswag. SEED is the seed
// file the input came from (the crash report names it); for hellaswag it picks the
// vocabulary the file is read with.
// Environment: FUZZ_SECONDS, FUZZ_SEED (default from the clock; printed, and the same
// seed gives the same mutants), FUZZ_KINDS (e.g. "shard,jsonl"), FUZZ_JOBS (children at
// a time; default: the cores, at most 8), FUZZ_TIMEOUT (seconds before a child counts as
// hung; 10). Run from the repository root (it reads data/gpt2).
#include "testutil.h"
#include "../../common/checkpoint.h"
#include "../../common/crc32c.h"
#include "../../common/dataloader.h"
#include "../../common/hellaswag.h"
#include "../../common/rng.h"
#include "../../common/safetensors.h"
#include "../../common/tokenizer.h"
#include <ctype.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>

// prepro's JSONL reader runs in-process: its main() runs in the child exactly as
// from the command line, so arguments, parsing, tokenizing and shard writing are all
// covered without a second sanitizer build of prepro to keep in step with this one.
#define main prepro_main
#include "../data/prepro.c"
#undef main

// A sanitizer report must end in SIGABRT: by default ASan and UBSan exit with status 1,
// which is what fatal() gives a clean refusal. Leak checks are off because fatal() exits
// with the reader's buffers still allocated, by design. (These defaults are read at
// start-up, so setting ASAN_OPTIONS in a forked child would have no effect.)
__attribute__((used)) const char *__asan_default_options(void) {
    return "abort_on_error=1:halt_on_error=1:detect_leaks=0";
}
__attribute__((used)) const char *__ubsan_default_options(void) {
    return "abort_on_error=1:halt_on_error=1:print_stacktrace=1";
}

#define TOK_DIR "data/gpt2"
#define CRASH_DIR "build/fuzz_crashes"
#define FZ_CRC_TAG 0x43524332  // slot 250 of a checksummed header; slot 251 holds the CRC
#define FZ_CRC_TAG_SLOT 250
#define FZ_CRC_SLOT 251
#define FZ_MAX_RESIZE ((size_t)16 << 20)  // a header-consistent resize stays below this
#define FZ_MAX_MSGS 512

enum { K_MODEL, K_STATE, K_SHARD, K_TOKENIZER, K_JSONL, K_SAFETENSORS, K_HELLASWAG, NKINDS };
static const char *const KIND_NAMES[NKINDS] = {"model", "state", "shard", "tokenizer", "jsonl", "safetensors",
                                               "hellaswag"};

typedef struct {
    uint8_t *p;
    size_t n, cap;
} Buf;

// The tiny model of the checkpoint seeds: L2 H2 C32 maxT16, vocabulary 50 padded to 128.
static const GPT2Config MODEL_CFG = {16, 50, 128, 2, 2, 32};

// Shard seeds and the loader each one is read with; `sibling` adds an intact second shard
// so that multi-shard orders are exercised.
typedef struct {
    int version, ntok, B, T, world, rank, shuffle, sibling;
} ShardSeed;
static const ShardSeed SHARD_SEEDS[] = {
    {1, 100, 2, 8, 1, 0, 0, 0},
    {2, 150, 2, 4, 2, 1, 1, 1},
    {1, 120, 1, 16, 1, 0, 1, 1},
};
#define NSHARD_SEEDS ((int)(sizeof SHARD_SEEDS / sizeof SHARD_SEEDS[0]))
#define SHARD_VOCAB 300

// The run a training-state seed belongs to: its loader reads the fixture shards
// st_000.bin (100 tokens) and st_001.bin (70 tokens) with these settings.
#define STATE_N 3000
#define STATE_B 2
#define STATE_T 8
#define STATE_SEED 7

static const char *const JSONL_SEEDS[] = {
    "{\"text\": \"Hello, world!\\nIt's a test.\"}\n"
    "{\"id\": 1, \"text\": \"caf\\u00e9 na\\u00efve \\ud83d\\ude80 tab\\tquote\\\" back\\\\ sl\\/ash\", "
    "\"meta\": {\"a\": [1, -2.5e-3, true, false, null], \"b\": {}}}\n"
    "\n"
    "{\"text\": \"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e and an emoji \xf0\x9f\x9a\x80 \\\"quoted\\\"\\r\\n\"}\n"
    "   \t\n"
    "{\"text\": \"\"}\n",
    "{\"text\": \"line one\\nline two\\n\\nline three, with more words than the chunk size\\n"
    "and a fourth line\\nand a fifth\\n\"}\n"
    "{\"text\": \"A\\u0000B\\u001fC\", \"text\": \"the last text key wins\"}\n"
    "{\"x\": [[[[]]]], \"text\": \"nested \\b\\f escapes\"}\r\n",
};
#define NJSONL_SEEDS ((int)(sizeof JSONL_SEEDS / sizeof JSONL_SEEDS[0]))

// HellaSwag seeds: examples of random tokens, each part 1..max tokens long, read with the
// vocabulary given (the trainers pass the model's; a small one makes the id check bite).
typedef struct {
    int examples, max_ctx, max_comp, vocab;
} HellaSwagSeed;
static const HellaSwagSeed HS_SEEDS[] = {
    {6, 24, 12, GPT2_VOCAB_SIZE},
    {12, 3, 2, GPT2_VOCAB_SIZE},    // many one-token parts
    {3, 200, 60, GPT2_VOCAB_SIZE},  // longer than the child's shortest rows: cut to their last T+1 tokens
    {5, 16, 8, 300},
};
#define NHS_SEEDS ((int)(sizeof HS_SEEDS / sizeof HS_SEEDS[0]))
#define HS_BODY (HELLASWAG_HEADER_INTS * 4)  // the byte at which the first example starts
#define HS_MAX_EXAMPLES 256                 // a mutation walks at most this many

static char g_root[256];        // the temporary directory of this run
static char g_fixture[512];    // intact files the children read beside the mutant
static char g_real_bpe[PATH_MAX], g_real_json[PATH_MAX];
static Buf g_seeds[NKINDS][4];
static int g_nseeds[NKINDS];
static int g_timeout = 10;

// ---------------------------------------------------------------------------------------
// byte buffers and files

static void buf_reserve(Buf *b, size_t n) {
    if (n <= b->cap) return;
    b->cap = n + n / 2 + 64;
    b->p = (uint8_t *)xrealloc(b->p, b->cap);
}

static void buf_set(Buf *b, const void *src, size_t n) {
    buf_reserve(b, n);
    if (n) memcpy(b->p, src, n);
    b->n = n;
}

// src may point into b itself.
static void buf_insert(Buf *b, size_t at, const void *src, size_t n) {
    uint8_t *copy = (uint8_t *)xmalloc(n);
    memcpy(copy, src, n);
    buf_reserve(b, b->n + n);
    memmove(b->p + at + n, b->p + at, b->n - at);
    memcpy(b->p + at, copy, n);
    b->n += n;
    free(copy);
}

static void buf_erase(Buf *b, size_t at, size_t n) {
    memmove(b->p + at, b->p + at + n, b->n - at - n);
    b->n -= n;
}

// Resizes to n; new bytes repeat the bytes after `from` (a finite body stays finite).
static void buf_resize_cyclic(Buf *b, size_t n, size_t from) {
    size_t old = b->n;
    buf_reserve(b, n);
    for (size_t i = old; i < n; i++) b->p[i] = old > from ? b->p[from + (i - old) % (old - from)] : 0;
    b->n = n;
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = xfopen(path, "wb");
    if (n) xfwrite(p, 1, n, f, path);
    xfclose(f, path);
}

static void read_into(Buf *b, const char *path) {
    size_t n;
    uint8_t *p = xread_file(path, &n);
    buf_set(b, p, n);
    free(p);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

// Empties dir, keeping it.
static void clear_dir(const char *dir) {
    rm_tree(dir);
    if (mkdir(dir, 0755) != 0) fatal("cannot create %s: %s", dir, strerror(errno));
}

static int32_t hget(const Buf *b, int slot) {
    int32_t v = 0;
    if ((size_t)(slot + 1) * 4 <= b->n) memcpy(&v, b->p + 4 * slot, 4);
    return v;
}

static void hset(Buf *b, int slot, int32_t v) {
    if ((size_t)(slot + 1) * 4 <= b->n) memcpy(b->p + 4 * slot, &v, 4);
}

static int64_t hget64(const Buf *b, int slot) {
    int64_t v = 0;
    if ((size_t)(slot + 2) * 4 <= b->n) memcpy(&v, b->p + 4 * slot, 8);
    return v;
}

static void hset64(Buf *b, int slot, int64_t v) {
    if ((size_t)(slot + 2) * 4 <= b->n) memcpy(b->p + 4 * slot, &v, 8);
}

// The uint16 at byte offset at (HellaSwag's body); 0 past the end.
static uint16_t u16_get(const Buf *b, size_t at) {
    uint16_t v = 0;
    if (at + 2 <= b->n) memcpy(&v, b->p + at, 2);
    return v;
}

static void u16_set(Buf *b, size_t at, uint16_t v) {
    if (at + 2 <= b->n) memcpy(b->p + at, &v, 2);
}

static void u16_append(Buf *b, uint16_t v) { buf_insert(b, b->n, &v, 2); }

// ---------------------------------------------------------------------------------------
// seeds and fixtures

static void write_shard(const char *path, int version, int ntok, int vocab, uint64_t *r) {
    int tb = version == 1 ? 2 : 4;
    Buf b = {0};
    buf_resize_cyclic(&b, SHARD_HEADER_BYTES + (size_t)ntok * tb, 0);
    memset(b.p, 0, b.n);
    hset(&b, 0, SHARD_MAGIC);
    hset(&b, 1, version);
    hset(&b, 2, ntok);
    for (int i = 0; i < ntok; i++) {
        uint32_t id = (uint32_t)(rng_next_u64(r) % (uint64_t)vocab);
        if (tb == 2) { uint16_t v = (uint16_t)id; memcpy(b.p + SHARD_HEADER_BYTES + 2 * i, &v, 2); }
        else memcpy(b.p + SHARD_HEADER_BYTES + 4 * i, &id, 4);
    }
    write_file(path, b.p, b.n);
    free(b.p);
}

// A valid eval file as dev/data/hellaswag.py writes one: the header's longest is exact.
static void make_hellaswag_seed(Buf *b, const HellaSwagSeed *s, uint64_t *r) {
    buf_resize_cyclic(b, HS_BODY, 0);
    memset(b->p, 0, b->n);
    hset(b, 0, HELLASWAG_MAGIC);
    hset(b, 1, HELLASWAG_VERSION);
    hset(b, 2, s->examples);
    int longest = 0;
    for (int i = 0; i < s->examples; i++) {
        size_t at = b->n;
        u16_append(b, HELLASWAG_DELIMITER);
        u16_append(b, 0);  // the size, once known
        u16_append(b, (uint16_t)i);
        u16_append(b, (uint16_t)(rng_next_u64(r) % HELLASWAG_COMPLETIONS));
        u16_append(b, HELLASWAG_COMPLETIONS);
        for (int c = -1; c < HELLASWAG_COMPLETIONS; c++) {
            int n = 1 + (int)(rng_next_u64(r) % (uint64_t)(c < 0 ? s->max_ctx : s->max_comp));
            u16_append(b, (uint16_t)n);
            for (int k = 0; k < n; k++) u16_append(b, (uint16_t)(rng_next_u64(r) % (uint64_t)s->vocab));
        }
        int bytes = (int)(b->n - at);
        u16_set(b, at + 2, (uint16_t)bytes);
        if (bytes > longest) longest = bytes;
    }
    hset(b, 3, longest);
}

static void fixture_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", g_fixture, name);
}

static void make_fixtures(void) {
    uint64_t r = rng_seed(12345);
    char path[1024], path2[1024];
    if (!realpath(TOK_DIR "/vocab.bpe", g_real_bpe) || !realpath(TOK_DIR "/encoder.json", g_real_json))
        fatal("cannot find " TOK_DIR "/vocab.bpe and encoder.json: run from the repository root");
    snprintf(g_fixture, sizeof g_fixture, "%s/fixture", g_root);
    if (mkdir(g_fixture, 0755) != 0) fatal("cannot create %s: %s", g_fixture, strerror(errno));
    // absolute, so that symbolic links to the fixture work from any slot directory
    char abs[PATH_MAX];
    if (!realpath(g_fixture, abs)) fatal("realpath %s: %s", g_fixture, strerror(errno));
    if (strlen(abs) >= sizeof g_fixture) fatal("the path of %s is too long", g_fixture);
    memcpy(g_fixture, abs, strlen(abs) + 1);

    // model checkpoints, fp32 and bf16
    size_t np = gpt2_num_params(&MODEL_CFG);
    float *params = (float *)xmalloc(np * sizeof(float));
    rng_fill_normal(&r, params, np, 0.0f, 0.5f);
    fixture_path(path, sizeof path, "model_fp32.bin");
    gpt2_checkpoint_write(path, &MODEL_CFG, params, 0);
    read_into(&g_seeds[K_MODEL][0], path);
    fixture_path(path, sizeof path, "model_bf16.bin");
    gpt2_checkpoint_write(path, &MODEL_CFG, params, 1);
    read_into(&g_seeds[K_MODEL][1], path);
    g_nseeds[K_MODEL] = 2;
    // the same model as transformers' GPT-2 (F32, BF16), read beside an intact config.json
    for (int s = 0; s < 2; s++) {
        fixture_path(path, sizeof path, s ? "hf_bf16.safetensors" : "hf_fp32.safetensors");
        gpt2_hf_write_safetensors(path, &MODEL_CFG, params, s);
        read_into(&g_seeds[K_SAFETENSORS][s], path);
    }
    g_nseeds[K_SAFETENSORS] = 2;
    static const char hf_config[] = "{\"model_type\": \"gpt2\", \"vocab_size\": 50, \"n_positions\": 16, "
                                    "\"n_embd\": 32, \"n_layer\": 2, \"n_head\": 2}";
    fixture_path(path, sizeof path, "config.json");
    write_file(path, hf_config, sizeof hf_config - 1);
    free(params);

    // shards: the state's loader reads st_*.bin; the shard seeds' intact sibling
    fixture_path(path, sizeof path, "st_000.bin");
    write_shard(path, 1, 100, SHARD_VOCAB, &r);
    fixture_path(path, sizeof path, "st_001.bin");
    write_shard(path, 2, 70, SHARD_VOCAB, &r);
    fixture_path(path, sizeof path, "sibling.bin");
    write_shard(path, 1, 90, SHARD_VOCAB, &r);
    for (int s = 0; s < NSHARD_SEEDS; s++) {
        snprintf(path2, sizeof path2, "seed_shard_%d.bin", s);
        fixture_path(path, sizeof path, path2);
        write_shard(path, SHARD_SEEDS[s].version, SHARD_SEEDS[s].ntok, SHARD_VOCAB, &r);
        read_into(&g_seeds[K_SHARD][s], path);
    }
    g_nseeds[K_SHARD] = NSHARD_SEEDS;

    // training states, without and with master weights, positioned 3 batches into a run
    DataLoader dl;
    fixture_path(path, sizeof path, "st_*.bin");
    dataloader_init(&dl, path, STATE_B, STATE_T, 0, 1, 1, STATE_SEED, SHARD_VOCAB);
    int in[STATE_B * STATE_T], tg[STATE_B * STATE_T];
    for (int i = 0; i < 3; i++) dataloader_next(&dl, in, tg);
    DataLoaderPos pos = dataloader_get_pos(&dl);
    dataloader_free(&dl);
    float *m = (float *)xmalloc(STATE_N * sizeof(float)), *v = (float *)xmalloc(STATE_N * sizeof(float));
    float *master = (float *)xmalloc(STATE_N * sizeof(float));
    rng_fill_normal(&r, m, STATE_N, 0.0f, 0.01f);
    rng_fill_normal(&r, v, STATE_N, 0.0f, 0.001f);
    for (int i = 0; i < STATE_N; i++) v[i] = fabsf(v[i]);  // a second moment is never negative
    rng_fill_normal(&r, master, STATE_N, 0.0f, 0.02f);
    for (int s = 0; s < 2; s++) {
        TrainState st;
        memset(&st, 0, sizeof st);
        st.step = 3;
        st.world_size = 1;
        st.rng = 0x1234567887654321ull;
        st.loss_scale = 1.0f;
        memcpy(st.loader_pos, &pos, sizeof pos);
        st.loader_pos_bytes = (int)sizeof pos;
        st.n = STATE_N;
        st.m = m;
        st.v = v;
        st.master = s ? master : NULL;
        fixture_path(path, sizeof path, s ? "state_master.bin" : "state.bin");
        train_state_write(path, &st);
        read_into(&g_seeds[K_STATE][s], path);
    }
    g_nseeds[K_STATE] = 2;
    free(m); free(v); free(master);

    read_into(&g_seeds[K_TOKENIZER][0], g_real_bpe);
    read_into(&g_seeds[K_TOKENIZER][1], g_real_json);
    g_nseeds[K_TOKENIZER] = 2;

    for (int s = 0; s < NJSONL_SEEDS; s++) buf_set(&g_seeds[K_JSONL][s], JSONL_SEEDS[s], strlen(JSONL_SEEDS[s]));
    g_nseeds[K_JSONL] = NJSONL_SEEDS;

    for (int s = 0; s < NHS_SEEDS; s++) make_hellaswag_seed(&g_seeds[K_HELLASWAG][s], &HS_SEEDS[s], &r);
    g_nseeds[K_HELLASWAG] = NHS_SEEDS;
}

// ---------------------------------------------------------------------------------------
// mutations

static size_t below(uint64_t *r, size_t n) { return n ? (size_t)(rng_next_u64(r) % n) : 0; }

// Header slots whose meaning the readers check (the rest are overwritten at random too).
static const int MODEL_SLOTS[] = {0, 1, 2, 3, 4, 5, 6, 7, FZ_CRC_TAG_SLOT, FZ_CRC_SLOT};
static const int STATE_SLOTS[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 16,
                                  32, 33, 34, 36, 38, 40, 42, 44, 45, 46, 47, 48, 49, FZ_CRC_TAG_SLOT, FZ_CRC_SLOT};
static const int SHARD_SLOTS[] = {0, 1, 2};
static const int HELLASWAG_SLOTS[] = {0, 1, 2, 3};

static int32_t interesting_int(uint64_t *r, int32_t old) {
    static const int32_t fixed[] = {0, -1, 1, 2, 3, 4, 7, 8, 15, 16, 17, 255, 256, 1023, 1024, 65535, 65536,
                                    INT_MAX, INT_MIN, INT_MAX - 1, 0x40000000, 0x10000, 1 << 20, 50257, 50304};
    switch (below(r, 6)) {
    case 0: return (int32_t)((uint32_t)old + 1u);  // unsigned: INT_MAX + 1 is no overflow here
    case 1: return (int32_t)((uint32_t)old - 1u);
    case 2: return (int32_t)((uint32_t)old * 2u);
    case 3: return (int32_t)rng_next_u64(r);
    default: return fixed[below(r, sizeof fixed / sizeof fixed[0])];
    }
}

// The file size a header implies, or 0 if it implies none (or an unreasonably large one).
static size_t implied_size(int kind, const Buf *b) {
    if (b->n < 1024) return 0;
    if (kind == K_MODEL) {
        GPT2Config c = {hget(b, 2), hget(b, 3), hget(b, 7), hget(b, 4), hget(b, 5), hget(b, 6)};
        int v = hget(b, 1);
        if (gpt2_config_problem(&c) || (v != CKPT_VERSION_FP32 && v != CKPT_VERSION_BF16)) return 0;
        size_t n = gpt2_num_params(&c), elem = v == CKPT_VERSION_FP32 ? 4 : 2;
        return n <= FZ_MAX_RESIZE / elem ? 1024 + n * elem : 0;
    }
    if (kind == K_STATE) {
        int64_t n = hget64(b, 8);
        return n >= 0 && n <= (int64_t)(FZ_MAX_RESIZE / 12) ? 1024 + (size_t)n * 4 * (hget(b, 3) ? 3 : 2) : 0;
    }
    if (kind == K_SHARD) {
        uint32_t n = (uint32_t)hget(b, 2);
        size_t tb = hget(b, 1) == 2 ? 4 : 2;
        return n <= 65536 ? 1024 + n * tb : 0;
    }
    return 0;  // HellaSwag's examples vary in size: mutate_hellaswag keeps the body in step itself
}

// The header's int32 a plus d, wrapping as the file would (a mutated header may be at INT_MAX).
static int32_t add32(int32_t a, int32_t d) { return (int32_t)((uint32_t)a + (uint32_t)d); }

// The byte offsets of the examples that a walk along their size fields finds (at most
// cap), from the first on; it stops at one that does not start and end inside the file.
static int hs_examples(const Buf *b, size_t *at, int cap) {
    int n = 0;
    for (size_t p = HS_BODY; n < cap && p + 2 * HELLASWAG_EXAMPLE_FIELDS <= b->n;) {
        size_t bytes = u16_get(b, p + 2);
        if (u16_get(b, p) != HELLASWAG_DELIMITER || bytes < 2 * HELLASWAG_EXAMPLE_FIELDS || bytes % 2 ||
            p + bytes > b->n)
            break;
        at[n++] = p;
        p += bytes;
    }
    return n;
}

// The byte offsets of the length fields of an example's context and completions, those
// that lie inside the example (fewer once a length is mutated); returns their count.
static int hs_parts(const Buf *b, size_t at, size_t *len_at) {
    size_t end = at + u16_get(b, at + 2), p = at + 2 * (HELLASWAG_EXAMPLE_FIELDS - 1);
    int n = 0;
    while (n < 1 + HELLASWAG_COMPLETIONS && p + 2 <= end) {
        len_at[n++] = p;
        p += 2 + 2 * (size_t)u16_get(b, p);
    }
    return n;
}

// One field the reader checks set to a value at the edge of its check, or whole examples
// and parts edited with the fields that describe them kept in step (mostly), so that the
// mutant gets past the checks before the one it aims at.
static void mutate_hellaswag(Buf *b, uint64_t *r, int seed) {
    size_t ex[HS_MAX_EXAMPLES], len_at[1 + HELLASWAG_COMPLETIONS];
    int n = hs_examples(b, ex, HS_MAX_EXAMPLES), vocab = HS_SEEDS[seed].vocab;
    int32_t count = hget(b, 2), longest = hget(b, 3);
    size_t i = below(r, (size_t)n), at = n ? ex[i] : HS_BODY, bytes = u16_get(b, at + 2);
    size_t end = n ? ex[n - 1] + u16_get(b, ex[n - 1] + 2) : HS_BODY;  // of the last example found
    int np = n ? hs_parts(b, at, len_at) : 0;
    size_t la = np ? len_at[below(r, (size_t)np)] : 0;  // a part's length field
    int len = u16_get(b, la);
    switch (n ? below(r, 12) : below(r, 2)) {  // without an example found, only the header
    case 0: {  // the number of examples
        int32_t v[] = {0, -1, 1, n - 1, n + 1, 2 * n, add32(count, -1), add32(count, 1), 65536, INT_MAX, INT_MIN,
                       (int32_t)below(r, 4096)};
        hset(b, 2, v[below(r, sizeof v / sizeof v[0])]);
        break;
    }
    case 1: {  // the longest example's size, which bounds every example's
        int32_t v[] = {0, 2 * HELLASWAG_EXAMPLE_FIELDS - 1, 2 * HELLASWAG_EXAMPLE_FIELDS, add32(longest, -2),
                       add32(longest, -1), add32(longest, 1), 65534, 65535, 65536, 2 * 65535, 2 * 65535 + 1, INT_MAX,
                       -1};
        hset(b, 3, v[below(r, sizeof v / sizeof v[0])]);
        break;
    }
    case 2: {  // an example's size
        int v[] = {0, 1, 2, 2 * HELLASWAG_EXAMPLE_FIELDS - 1, 2 * HELLASWAG_EXAMPLE_FIELDS, (int)bytes - 2,
                   (int)bytes - 1, (int)bytes + 1, (int)bytes + 2, 65534, 65535, longest, add32(longest, 2)};
        u16_set(b, at + 2, (uint16_t)v[below(r, sizeof v / sizeof v[0])]);
        break;
    }
    case 3: {  // its label
        static const uint16_t v[] = {0, 1, 2, 3, 4, 5, 255, 256, 65535};
        u16_set(b, at + 6, v[below(r, sizeof v / sizeof v[0])]);
        break;
    }
    case 4: {  // its number of completions
        static const uint16_t v[] = {0, 1, 3, 5, 255, 65535};
        u16_set(b, at + 8, v[below(r, sizeof v / sizeof v[0])]);
        break;
    }
    case 5: {  // a part's length alone
        int v[] = {0, 1, len - 1, len + 1, len + 2, (int)bytes / 2, (int)bytes / 2 - 5, 32767, 65535};
        if (np) u16_set(b, la, (uint16_t)v[below(r, sizeof v / sizeof v[0])]);
        break;
    }
    case 6: {  // a part resized with its tokens, the example's size and mostly the header's longest
        if (!np || la + 2 + 2 * (size_t)len > at + bytes) break;  // a length already past its example
        // the example is at most 32767 words while its size in bytes fits the 16-bit field
        int room = 32767 - (int)bytes / 2 + len;
        int v[] = {0, 1, len - 1, len + 1, 2 * len, len + 1 + (int)below(r, 64), room - 1, room, room + 1};
        int m = v[below(r, sizeof v / sizeof v[0])];
        if (m < 0) m = 0;
        if (m > len) {
            uint16_t *t = (uint16_t *)xmalloc((size_t)(m - len) * 2);
            for (int k = 0; k < m - len; k++) t[k] = (uint16_t)below(r, (size_t)vocab);
            buf_insert(b, la + 2 + 2 * (size_t)len, t, (size_t)(m - len) * 2);
            free(t);
        } else {
            buf_erase(b, la + 2 + 2 * (size_t)m, (size_t)(len - m) * 2);
        }
        u16_set(b, la, (uint16_t)m);
        int64_t nb = (int64_t)bytes + 2 * (int64_t)(m - len);
        u16_set(b, at + 2, (uint16_t)nb);  // wraps past 65535, as a writer without the check would write it
        if (below(r, 4) && nb > longest) hset(b, 3, (int32_t)nb);
        break;
    }
    case 7: {  // a token at the edges of the vocabulary, or the delimiter
        int v[] = {HELLASWAG_DELIMITER, 65534, vocab - 1, vocab, vocab + 1, GPT2_VOCAB_SIZE - 1, GPT2_VOCAB_SIZE, 0};
        if (np && len) u16_set(b, la + 2 + 2 * below(r, (size_t)len), (uint16_t)v[below(r, sizeof v / sizeof v[0])]);
        break;
    }
    case 8: {  // a cut at (or next to) an example's boundary, the header's count mostly cut to match
        static const int nudge[] = {0, 0, 0, 0, -2, -1, 1, 2, 2 * HELLASWAG_EXAMPLE_FIELDS};
        size_t k = below(r, (size_t)n + 1), cut = (k < (size_t)n ? ex[k] : end) + nudge[below(r, 9)];
        if (cut < b->n) b->n = cut;
        if (below(r, 4)) hset(b, 2, (int32_t)k);
        break;
    }
    case 9:  // bytes appended: a copy of an example (the count mostly follows), a lone delimiter, words, a byte
        switch (below(r, 4)) {
        case 0:
            buf_insert(b, b->n, b->p + at, bytes);
            if (below(r, 4)) hset(b, 2, add32(count, 1));
            break;
        case 1: u16_append(b, HELLASWAG_DELIMITER); break;
        case 2:
            for (int k = 1 + (int)below(r, 16); k > 0; k--) u16_append(b, (uint16_t)rng_next_u64(r));
            break;
        default: buf_insert(b, b->n, "", 1); break;
        }
        break;
    case 10:  // an example removed, or a copy of it put after it; the count mostly follows
        if (below(r, 2)) {
            buf_erase(b, at, bytes);
            if (below(r, 4)) hset(b, 2, add32(count, -1));
        } else {
            buf_insert(b, at + bytes, b->p + at, bytes);
            if (below(r, 4)) hset(b, 2, add32(count, 1));
        }
        break;
    default: {  // its delimiter
        static const uint16_t v[] = {0, 1, 65534, 0x7fff, 0xff00};
        u16_set(b, at, v[below(r, sizeof v / sizeof v[0])]);
        break;
    }
    }
}

// A header edit that keeps the file length consistent with it, so that the readers'
// size checks pass and the mutant reaches the code behind them.
static void mutate_structured(int kind, Buf *b, uint64_t *r, int seed) {
    if (b->n < 1024) return;
    if (kind == K_MODEL) {
        static const int32_t small[] = {0, -1, 1, 2, 3, 4, 8, 16, 17, 31, 32, 33, 50, 64, 127, 128, 129, 256};
        int slot = 1 + (int)below(r, 7);
        if (slot == 1) hset(b, 1, hget(b, 1) == CKPT_VERSION_FP32 ? CKPT_VERSION_BF16 : CKPT_VERSION_FP32);
        else hset(b, slot, small[below(r, sizeof small / sizeof small[0])]);
    } else if (kind == K_STATE) {
        // the loader position's epoch, shard and sample indices and shuffle seed sit at
        // slots 32, 34, 36 and 38 (DataLoaderPos in common/dataloader.h)
        static const int64_t dn[] = {-1, 1, 0, STATE_N};
        static const int64_t epoch[] = {0, 1, 2, -1, INT64_MAX, (int64_t)1 << 40};
        static const int64_t shard[] = {0, 1, 2, 3, -1, INT64_MAX};
        static const int64_t sample[] = {0, 3, 4, 5, 6, 7, 100, -1};
        switch (below(r, 6)) {
        case 0: hset64(b, 8, (int64_t)((uint64_t)hget64(b, 8) + (uint64_t)dn[below(r, 4)])); break;
        case 1: hset(b, 3, !hget(b, 3)); break;
        case 2: hset64(b, 32, epoch[below(r, 6)]); break;
        case 3: hset64(b, 34, shard[below(r, 6)]); break;
        case 4: hset64(b, 36, sample[below(r, 8)]); break;
        default: hset64(b, 38, (int64_t)rng_next_u64(r)); break;
        }
    } else if (kind == K_SHARD) {
        const ShardSeed *s = &SHARD_SEEDS[seed];
        int64_t w = (int64_t)s->B * s->T * s->world;
        int64_t counts[] = {0, 1, w - 1, w, w + 1, 2 * w + 1, s->ntok - 1, s->ntok + 1, (int64_t)below(r, 4096),
                            0xFFFFFFFFll, 0x80000000ll};
        if (below(r, 4) == 0) hset(b, 1, hget(b, 1) == 1 ? 2 : 1);
        hset(b, 2, (int32_t)(uint32_t)counts[below(r, sizeof counts / sizeof counts[0])]);
    } else if (kind == K_HELLASWAG) {
        mutate_hellaswag(b, r, seed);
    }
    size_t n = implied_size(kind, b);
    if (n) buf_resize_cyclic(b, n, 1024);
}

// Token ids at the edges of the vocabulary, where an off-by-one check would let one through.
static void mutate_token_ids(Buf *b, uint64_t *r) {
    if (b->n <= 1024) return;
    int tb = hget(b, 1) == 2 ? 4 : 2;
    size_t ntok = (b->n - 1024) / tb;
    if (!ntok) return;
    static const uint32_t ids[] = {SHARD_VOCAB - 1, SHARD_VOCAB, SHARD_VOCAB + 1, 0, 65535, 0xFFFFFFFFu, 0x80000000u};
    for (int k = 1 + (int)below(r, 4); k > 0; k--) {
        uint32_t id = ids[below(r, sizeof ids / sizeof ids[0])];
        size_t at = 1024 + below(r, ntok) * tb;
        if (tb == 2) { uint16_t v = (uint16_t)id; memcpy(b->p + at, &v, 2); }
        else memcpy(b->p + at, &id, 4);
    }
}

// Pieces of JSON and of GPT-2's byte alphabet that random bytes would rarely produce.
static const char *const TEXT_DICT[] = {
    "\"", "\\", "\\u", "\\ud800", "\\udc00", "\\ud83d\\ude80", "\\u00e9", "\\u0000", "\\x", "{", "}", "[", "]",
    ",", ":", "\n", "\r", "\t", " ", "  ", "\xc3", "\xe2\x82", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "\xc0\x80",
    "\xf4\x90\x80\x80", "\xff", "null", "true", "false", "1e999", "-0", "0123", "\"text\"", "\"text\": ",
    "\"text\": 1", "{\"text\": \"", "\xc4\xa0", "\xc4\x8a", "\xc5\x83", "#version: 0.2\n", "<|endoftext|>",
    ": 50256", ": 50257", ": -1", ": 99999999999999999999", "\xc4\xa0t\xc4\xa0h",
};

// Half of the time next to a structural character: most of a line is string contents,
// and the parsers' branches sit between the strings.
static void mutate_dict(Buf *b, uint64_t *r) {
    const char *t = TEXT_DICT[below(r, sizeof TEXT_DICT / sizeof TEXT_DICT[0])];
    size_t len = strlen(t), at = below(r, b->n + 1);
    if (below(r, 2))
        for (size_t k = at; k < b->n && k < at + 256; k++)
            if (strchr("{}[],:\" \n", b->p[k]) && b->p[k]) { at = k + below(r, 2); break; }
    if (below(r, 2) && at + len <= b->n) memcpy(b->p + at, t, len);
    else buf_insert(b, at, t, len);
}

// [start, end) of the line holding byte at (end includes its '\n').
static void line_at(const Buf *b, size_t at, size_t *start, size_t *end) {
    size_t s = at, e = at;
    while (s > 0 && b->p[s - 1] != '\n') s--;
    while (e < b->n && b->p[e] != '\n') e++;
    *start = s;
    *end = e < b->n ? e + 1 : e;
}

// Whole lines deleted, duplicated or swapped: merges out of order, repeated keys, ...
static void mutate_lines(Buf *b, uint64_t *r) {
    if (!b->n) return;
    size_t s1, e1, s2, e2;
    line_at(b, below(r, b->n), &s1, &e1);
    switch (below(r, 3)) {
    case 0: buf_erase(b, s1, e1 - s1); break;
    case 1: buf_insert(b, e1, b->p + s1, e1 - s1); break;
    default:
        line_at(b, below(r, b->n), &s2, &e2);
        if (s2 < s1) { size_t t = s1; s1 = s2; s2 = t; t = e1; e1 = e2; e2 = t; }
        if (e1 > s2 || e2 == b->n) break;  // overlapping, or a last line without its newline
        {
            Buf tmp = {0};
            buf_set(&tmp, b->p, s1);
            buf_insert(&tmp, tmp.n, b->p + s2, e2 - s2);
            buf_insert(&tmp, tmp.n, b->p + e1, s2 - e1);
            buf_insert(&tmp, tmp.n, b->p + s1, e1 - s1);
            buf_insert(&tmp, tmp.n, b->p + e2, b->n - e2);
            buf_set(b, tmp.p, tmp.n);
            free(tmp.p);
        }
    }
}

// A position, half of the time in the first `hot` bytes (the header of a binary format,
// the part of it that is read; 0 for text).
static size_t pick_pos(const Buf *b, uint64_t *r, size_t hot) {
    if (hot && b->n > hot && below(r, 2)) return below(r, hot);
    return below(r, b->n);
}

enum { M_FLIP, M_BYTES, M_HEADER, M_TRUNC, M_EXTEND, M_DUP, M_DEL, M_NAN, M_STRUCT, M_IDS, M_DICT, M_LINES };

static void mutate_once(int kind, Buf *b, uint64_t *r, int seed) {
    static const int binary_ops[] = {M_FLIP, M_FLIP, M_BYTES, M_HEADER, M_HEADER, M_HEADER, M_TRUNC, M_EXTEND,
                                     M_DUP, M_DEL, M_NAN, M_STRUCT, M_STRUCT, M_STRUCT, M_IDS};
    static const int text_ops[] = {M_FLIP, M_BYTES, M_TRUNC, M_EXTEND, M_DUP, M_DEL, M_DICT, M_DICT, M_DICT,
                                   M_LINES, M_LINES};
    // HellaSwag's structure sits in its body's fields, which byte edits rarely keep in step
    static const int hellaswag_ops[] = {M_FLIP, M_BYTES, M_HEADER, M_TRUNC, M_EXTEND, M_DUP, M_DEL, M_NAN,
                                        M_STRUCT, M_STRUCT, M_STRUCT, M_STRUCT, M_STRUCT, M_STRUCT, M_STRUCT};
    int binary = kind == K_MODEL || kind == K_STATE || kind == K_SHARD || kind == K_HELLASWAG;
    size_t hot = kind == K_HELLASWAG ? 16 : binary ? 1024 : 0;  // HellaSwag reads 4 of its 256 slots
    int op = kind == K_HELLASWAG ? hellaswag_ops[below(r, sizeof hellaswag_ops / sizeof hellaswag_ops[0])]
           : binary ? binary_ops[below(r, sizeof binary_ops / sizeof binary_ops[0] - (kind != K_SHARD))]
                    : text_ops[below(r, sizeof text_ops / sizeof text_ops[0])];
    switch (op) {
    case M_FLIP:
        for (int k = 1 + (int)below(r, 8); b->n && k > 0; k--)
            b->p[pick_pos(b, r, hot)] ^= (uint8_t)(1u << below(r, 8));
        break;
    case M_BYTES:
        for (int k = 1 + (int)below(r, 16); b->n && k > 0; k--)
            b->p[pick_pos(b, r, hot)] = (uint8_t)rng_next_u64(r);
        break;
    case M_HEADER: {
        const int *slots = kind == K_MODEL ? MODEL_SLOTS : kind == K_STATE ? STATE_SLOTS
                         : kind == K_SHARD ? SHARD_SLOTS : HELLASWAG_SLOTS;
        size_t ns = kind == K_MODEL ? sizeof MODEL_SLOTS / sizeof(int)
                  : kind == K_STATE ? sizeof STATE_SLOTS / sizeof(int)
                  : kind == K_SHARD ? sizeof SHARD_SLOTS / sizeof(int) : sizeof HELLASWAG_SLOTS / sizeof(int);
        int slot = below(r, 4) ? slots[below(r, ns)] : (int)below(r, 256);
        hset(b, slot, interesting_int(r, hget(b, slot)));
        break;
    }
    case M_TRUNC: {
        size_t cuts[] = {0, 1, 4, 1023, 1024, 1025, b->n / 2, b->n ? b->n - 1 : 0, b->n ? b->n - 2 : 0, below(r, b->n)};
        size_t n = cuts[below(r, sizeof cuts / sizeof cuts[0])];
        if (n < b->n) b->n = n;
        break;
    }
    case M_EXTEND: {
        size_t add = 1 + below(r, below(r, 2) ? 8 : 4096), old = b->n;
        int how = (int)below(r, 3);
        if (how == 2) buf_resize_cyclic(b, old + add, 0);
        else {
            buf_reserve(b, old + add);
            for (size_t i = old; i < old + add; i++) b->p[i] = how ? (uint8_t)rng_next_u64(r) : 0;
            b->n = old + add;
        }
        break;
    }
    case M_DUP: {
        if (!b->n) break;
        size_t at = below(r, b->n), len = 1 + below(r, b->n - at < 4096 ? b->n - at : 4096);
        buf_insert(b, below(r, b->n + 1), b->p + at, len);
        break;
    }
    case M_DEL: {
        if (!b->n) break;
        size_t at = below(r, b->n), len = 1 + below(r, b->n - at < 4096 ? b->n - at : 4096);
        buf_erase(b, at, len);
        break;
    }
    case M_NAN: {
        // every body value NaN (fp32 and bf16 alike), or infinite, or -1 (a negative
        // second moment), or token ids far past the vocabulary (HellaSwag: delimiters)
        static const uint32_t fills[] = {0x7fc07fc0u, 0x7f807f80u, 0xff80ff80u, 0xbf800000u, 0xffffffffu};
        uint32_t fill = kind == K_SHARD || kind == K_HELLASWAG ? 0xffffffffu : fills[below(r, 4)];
        for (size_t i = 1024; i + 4 <= b->n; i += 4) memcpy(b->p + i, &fill, 4);
        break;
    }
    case M_STRUCT: mutate_structured(kind, b, r, seed); break;
    case M_IDS: mutate_token_ids(b, r); break;
    case M_DICT: mutate_dict(b, r); break;
    case M_LINES: mutate_lines(b, r); break;
    }
}

// The checksum of a mutant recomputed so that it reaches past the reader's check: the
// CRC-32C of the whole file with the CRC slot zero. Only where the tag is present.
static void fix_checksum(Buf *b) {
    if (b->n < 1024 || hget(b, FZ_CRC_TAG_SLOT) != FZ_CRC_TAG) return;
    hset(b, FZ_CRC_SLOT, 0);
    hset(b, FZ_CRC_SLOT, (int32_t)crc32c_update(0, b->p, b->n));
}

static void make_mutant(int kind, uint64_t fuzz_seed, uint64_t iter, Buf *out, int *seed_index) {
    uint64_t r = rng_seed(fuzz_seed + ((uint64_t)(kind + 1) << 40) + iter);
    int s = (int)below(&r, (size_t)g_nseeds[kind]);
    *seed_index = s;
    buf_set(out, g_seeds[kind][s].p, g_seeds[kind][s].n);
    int nmut = 1 + (int)(below(&r, 4) == 0 ? 1 + below(&r, 3) : 0);
    for (int k = 0; k < nmut; k++) mutate_once(kind, out, &r, s);
    if ((kind == K_MODEL || kind == K_STATE) && below(&r, 2)) fix_checksum(out);
}

// ---------------------------------------------------------------------------------------
// what a child runs: one reader on the slot's files, used as its callers use it

static void slot_path(char *out, size_t cap, const char *slot, const char *name) {
    snprintf(out, cap, "%s/%s", slot, name);
}

// Puts the mutant (and the intact files read with it) into the slot directory.
static void prepare_slot(int kind, const char *slot, const Buf *m, int seed) {
    char path[1024], target[1024];
    switch (kind) {
    case K_MODEL: slot_path(path, sizeof path, slot, "model.bin"); break;
    case K_STATE: slot_path(path, sizeof path, slot, "state.bin"); break;
    case K_SHARD:
        slot_path(path, sizeof path, slot, "shard_001.bin");
        if (SHARD_SEEDS[seed].sibling) {
            fixture_path(target, sizeof target, "sibling.bin");
            slot_path(path, sizeof path, slot, "shard_000.bin");
            if (symlink(target, path) != 0) fatal("symlink %s: %s", path, strerror(errno));
            slot_path(path, sizeof path, slot, "shard_001.bin");
        }
        break;
    case K_TOKENIZER:
        slot_path(path, sizeof path, slot, seed ? "vocab.bpe" : "encoder.json");
        if (symlink(seed ? g_real_bpe : g_real_json, path) != 0) fatal("symlink %s: %s", path, strerror(errno));
        slot_path(path, sizeof path, slot, seed ? "encoder.json" : "vocab.bpe");
        break;
    case K_SAFETENSORS:
        fixture_path(target, sizeof target, "config.json");
        slot_path(path, sizeof path, slot, "config.json");
        if (symlink(target, path) != 0) fatal("symlink %s: %s", path, strerror(errno));
        slot_path(path, sizeof path, slot, "model.safetensors");
        break;
    case K_HELLASWAG: slot_path(path, sizeof path, slot, "hellaswag_val.bin"); break;
    default: slot_path(path, sizeof path, slot, "input.jsonl"); break;
    }
    write_file(path, m->p, m->n);
}

static void child_model(const char *slot) {
    char path[1024];
    slot_path(path, sizeof path, slot, "model.bin");
    GPT2Config cfg;
    float *p = gpt2_checkpoint_read(path, &cfg);
    if (gpt2_config_problem(&cfg)) { fprintf(stderr, "reader accepted a bad shape\n"); abort(); }
    volatile float sum = 0.0f;  // every parameter is touched, so a short buffer shows
    for (size_t i = 0, n = gpt2_num_params(&cfg); i < n; i++) sum += p[i];
    free(p);
}

static void child_state(const char *slot, int seed) {
    char path[1024];
    slot_path(path, sizeof path, slot, "state.bin");
    TrainState s;  // allocated as the trainer's load_checkpoint does before reading
    memset(&s, 0, sizeof s);
    s.world_size = 1;
    s.loader_pos_bytes = (int)sizeof(DataLoaderPos);
    s.n = STATE_N;
    s.m = (float *)xmalloc(STATE_N * sizeof(float));
    s.v = (float *)xmalloc(STATE_N * sizeof(float));
    s.master = seed ? (float *)xmalloc(STATE_N * sizeof(float)) : NULL;
    train_state_read(path, &s);
    if (s.step < 0) { fprintf(stderr, "reader accepted a negative step\n"); abort(); }
    // then the data loader position it carries, as a resume would
    DataLoader dl;
    fixture_path(path, sizeof path, "st_*.bin");
    dataloader_init(&dl, path, STATE_B, STATE_T, 0, 1, 1, STATE_SEED, SHARD_VOCAB);
    DataLoaderPos pos;
    memcpy(&pos, s.loader_pos, sizeof pos);
    dataloader_set_pos(&dl, pos);
    int in[STATE_B * STATE_T], tg[STATE_B * STATE_T];
    for (int i = 0; i < 12; i++) dataloader_next(&dl, in, tg);
    dataloader_free(&dl);
    free(s.m); free(s.v); free(s.master);
}

static void child_shard(const char *slot, int seed) {
    const ShardSeed *c = &SHARD_SEEDS[seed];
    char pattern[1024];
    slot_path(pattern, sizeof pattern, slot, "shard_*.bin");
    DataLoader dl;
    dataloader_init(&dl, pattern, c->B, c->T, c->rank, c->world, c->shuffle, 1234, SHARD_VOCAB);
    size_t bt = (size_t)c->B * c->T;
    int *in = (int *)xmalloc(bt * sizeof(int)), *tg = (int *)xmalloc(bt * sizeof(int));
    // ids index a vocabulary-sized table, as the trainer's embedding lookup does
    int *count = (int *)xcalloc(SHARD_VOCAB, sizeof(int));
    int64_t nb = dataloader_batches_per_epoch(&dl);
    for (int64_t i = 0; i < nb; i++) {
        dataloader_next(&dl, in, tg);
        for (size_t k = 0; k < bt; k++) { count[in[k]]++; count[tg[k]]++; }
    }
    DataLoaderPos pos = dataloader_get_pos(&dl);
    dataloader_reset(&dl);
    dataloader_next(&dl, in, tg);
    DataLoader again;  // a resumed loader continues where the first one stopped
    dataloader_init(&again, pattern, c->B, c->T, c->rank, c->world, c->shuffle, 99, SHARD_VOCAB);
    dataloader_set_pos(&again, pos);
    dataloader_next(&again, in, tg);
    for (size_t k = 0; k < bt; k++) count[in[k]]++;
    dataloader_free(&again);
    dataloader_free(&dl);
    free(in); free(tg); free(count);
}

static void child_tokenizer(const char *slot) {
    Tokenizer t;
    tokenizer_init(&t, slot);
    static const char text[] =
        "Hello, world! It's 2024: caf\xc3\xa9 na\xc3\xafve \xf0\x9f\x9a\x80\n\n   x\ty'll <|endoftext|>";
    TokenVec ids = {0};
    tokenizer_encode(&t, (const uint8_t *)text, sizeof text - 1, &ids);
    TokBytes back = {0};
    size_t bad = tokenizer_decode(&t, ids.data, ids.len, &back);
    if (bad || back.len != sizeof text - 1 || memcmp(back.data, text, back.len) != 0) {
        fprintf(stderr, "a loaded tokenizer does not round-trip text\n");
        abort();
    }
    size_t total = 0;  // every token's bytes, so that bad offsets show
    volatile uint8_t x = 0;
    for (uint32_t id = 0; id < (uint32_t)t.vocab_size; id++) {
        size_t len;
        const uint8_t *p = tokenizer_token_bytes(&t, id, &len);
        for (size_t i = 0; i < len; i++) x ^= p[i];
        total += len;
    }
    (void)total;
    tokenvec_free(&ids);
    tokbytes_free(&back);
    tokenizer_free(&t);
}

// prepro's own checks end in fatal(); what it writes must be valid shards, and no
// temporary file may remain.
static void child_jsonl(const char *slot) {
    char in[1024], out[1024], pattern[1100];
    slot_path(in, sizeof in, slot, "input.jsonl");
    slot_path(out, sizeof out, slot, "out");
    char *argv[] = {"prepro", "--input", in, "--format", "jsonl", "--out-dir", out, "--name", "f",
                    "--val-tokens", "8", "--threads", "1", "--chunk-bytes", "32", "--tokenizer-dir", TOK_DIR, NULL};
    int rc = prepro_main((int)(sizeof argv / sizeof argv[0]) - 1, argv);
    if (rc != 0) { fprintf(stderr, "prepro returned %d without an error message\n", rc); abort(); }
    snprintf(pattern, sizeof pattern, "%s/*", out);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) { fprintf(stderr, "prepro wrote nothing\n"); abort(); }
    for (size_t i = 0; i < g.gl_pathc; i++) {
        Buf b = {0};
        read_into(&b, g.gl_pathv[i]);
        int ok = strstr(g.gl_pathv[i], ".tmp") == NULL && b.n >= 1024 && hget(&b, 0) == SHARD_MAGIC &&
                 hget(&b, 1) == 1 && (size_t)hget(&b, 2) * 2 + 1024 == b.n;
        for (size_t k = 1024; ok && k + 2 <= b.n; k += 2) {
            uint16_t id;
            memcpy(&id, b.p + k, 2);
            ok = id < GPT2_VOCAB_SIZE;
        }
        if (!ok) { fprintf(stderr, "prepro wrote a bad shard or left a temporary: %s\n", g.gl_pathv[i]); abort(); }
        free(b.p);
    }
    globfree(&g);
}

// The file alone, then as the trainers' -e DIR reads it.
static void child_safetensors(const char *slot) {
    char path[1024];
    slot_path(path, sizeof path, slot, "model.safetensors");
    fuzz_read_safetensors(path);
    GPT2Config cfg;
    free(gpt2_params_from_hf_dir(slot, &cfg));
}

// The trainer's forward pass stood in for: every input and target indexes a
// vocabulary-sized table, as its embedding lookup and loss do.
typedef struct {
    int B, T, vocab;
    int *seen;
} FakeModel;

static void fake_position_losses(void *model, const int *inputs, const int *targets, float *losses) {
    FakeModel *m = (FakeModel *)model;
    for (int i = 0; i < m->B * m->T; i++) {
        if (inputs[i] < 0 || inputs[i] >= m->vocab || targets[i] < 0 || targets[i] >= m->vocab) {
            fprintf(stderr, "a row holds an id outside the vocabulary: %d -> %d\n", inputs[i], targets[i]);
            abort();
        }
        m->seen[inputs[i]]++;
        m->seen[targets[i]]++;
        losses[i] = (float)((inputs[i] * 31 + targets[i]) % 97) * 0.1f;
    }
}

// What the reader promises of an accepted file, then the examples scored as the trainer
// scores them: over two ranks, in batches of 3 rows (so an example spans two), with
// rows short enough to be cut, and rows that just fit the longest example.
static void child_hellaswag(const char *slot, int seed) {
    const int vocab = HS_SEEDS[seed].vocab;
    char path[1024];
    slot_path(path, sizeof path, slot, "hellaswag_val.bin");
    HellaSwag h;
    hellaswag_load(&h, path, vocab);
    int longest = 0;
    for (int i = 0; i < h.n; i++) {  // every token read, so that a part past the body shows
        const HellaSwagExample *e = &h.ex[i];
        int ok = e->label >= 0 && e->label < HELLASWAG_COMPLETIONS && e->ctx_len >= 1;
        for (int k = 0; k < e->ctx_len; k++) ok &= e->ctx[k] < vocab;
        for (int c = 0; c < HELLASWAG_COMPLETIONS; c++) {
            ok &= e->comp_len[c] >= 1;
            for (int k = 0; k < e->comp_len[c]; k++) ok &= e->comp[c][k] < vocab;
            if (e->ctx_len + e->comp_len[c] > longest) longest = e->ctx_len + e->comp_len[c];
        }
        if (!ok) { fprintf(stderr, "reader accepted a bad example %d\n", i); abort(); }
    }
    if (h.n < 1 || longest != h.longest) { fprintf(stderr, "reader accepted a bad count or longest\n"); abort(); }
    const int B = 3, Ts[] = {4, h.longest - 1, h.longest};
    int *choices = (int *)xmalloc((size_t)h.n * sizeof(int));
    FakeModel m = {B, 0, vocab, (int *)xcalloc((size_t)vocab, sizeof(int))};
    for (int t = 0; t < 3; t++) {
        m.T = Ts[t];
        int *in = (int *)xmalloc((size_t)B * m.T * sizeof(int)), *tg = (int *)xmalloc((size_t)B * m.T * sizeof(int));
        for (int i = 0; i < h.n; i++) choices[i] = -1;
        long correct = 0;
        for (int rank = 0; rank < 2; rank++) {
            HellaSwagScore s = hellaswag_evaluate(&h, B, m.T, rank, 2, in, tg, fake_position_losses, &m, choices);
            if (s.examples != h.n) { fprintf(stderr, "scored %ld examples of %d\n", s.examples, h.n); abort(); }
            correct += s.correct;
        }
        for (int i = 0; i < h.n; i++)
            if (choices[i] < 0 || choices[i] >= HELLASWAG_COMPLETIONS) {
                fprintf(stderr, "example %d got no choice (%d)\n", i, choices[i]);
                abort();
            }
        if (correct < 0 || correct > h.n) { fprintf(stderr, "%ld correct of %d\n", correct, h.n); abort(); }
        free(in); free(tg);
    }
    free(m.seen);
    free(choices);
    hellaswag_free(&h);
}

static void run_child_case(int kind, const char *slot, int seed) {
    switch (kind) {
    case K_MODEL: child_model(slot); break;
    case K_STATE: child_state(slot, seed); break;
    case K_SHARD: child_shard(slot, seed); break;
    case K_TOKENIZER: child_tokenizer(slot); break;
    case K_SAFETENSORS: child_safetensors(slot); break;
    case K_HELLASWAG: child_hellaswag(slot, seed); break;
    default: child_jsonl(slot); break;
    }
}

// ---------------------------------------------------------------------------------------
// the loop: a few children at a time, each in its own slot directory

typedef struct {
    char msg[160];
    long count;
} Msg;

typedef struct {
    long runs, accepted, refused, crashes;
    Msg msgs[FZ_MAX_MSGS];
    int nmsgs;
    long other_msgs;
    Msg crash_kinds[FZ_MAX_MSGS];  // one per distinct report, with its count
    int ncrash_kinds;
    long saved;
} Stats;

typedef struct {
    pid_t pid;
    uint64_t iter;
    int seed;
    Buf input;
    char slot[512], err[512];
} Job;

// The first line of a refusal with the slot directory and numbers taken out, so that
// refusals of one kind group together.
static void count_message(Stats *st, const char *err, const char *slot) {
    char line[160];
    size_t n = 0, sl = strlen(slot), fl = strlen(g_fixture);
    const char *p = err;
    while (*p && *p != '\n' && n + 1 < sizeof line) {
        if (!strncmp(p, slot, sl)) { p += sl + (p[sl] == '/'); continue; }
        if (!strncmp(p, g_fixture, fl)) { p += fl + (p[fl] == '/'); continue; }
        if (*p >= '0' && *p <= '9') {
            while (*p >= '0' && *p <= '9') p++;
            line[n++] = 'N';
            continue;
        }
        line[n++] = *p++;
    }
    line[n] = 0;
    if (!n) snprintf(line, sizeof line, "(no message)");
    for (int i = 0; i < st->nmsgs; i++)
        if (!strcmp(st->msgs[i].msg, line)) { st->msgs[i].count++; return; }
    if (st->nmsgs == FZ_MAX_MSGS) { st->other_msgs++; return; }
    snprintf(st->msgs[st->nmsgs].msg, sizeof st->msgs[0].msg, "%s", line);
    st->msgs[st->nmsgs++].count = 1;
}

// What tells one crash from another: the sanitizer's summary or the first line of a
// UBSan report (its source position and the kind of error, without values or
// addresses), else how the child ended.
static void crash_signature(const char *err, const char *why, char *out, size_t cap) {
    const char *p = strstr(err, "SUMMARY: "), *ub = p ? NULL : strstr(err, ": runtime error: ");
    if (ub) for (p = ub; p > err && p[-1] != '\n'; p--) {}
    if (!p) { snprintf(out, cap, "%s", why); return; }
    size_t n = 0;
    for (; *p && *p != '\n' && n + 4 < cap; p++) {
        if (ub && p > ub + 16 && *p == ':') break;
        if (ub && p > ub && p[0] == '0' && p[1] == 'x') {
            for (p += 2; isxdigit((unsigned char)p[0]); p++) {}
            memcpy(out + n, "0x?", 3);
            n += 3;
            p--;
            continue;
        }
        out[n++] = *p;
    }
    out[n] = 0;
}

// Saves the input (the first two of each distinct report; the rest are only counted).
static void save_crash(int kind, const Job *j, const char *why, const char *err, Stats *st) {
    char sig[160];
    crash_signature(err, why, sig, sizeof sig);
    st->crashes++;
    int i = 0;
    while (i < st->ncrash_kinds && strcmp(st->crash_kinds[i].msg, sig)) i++;
    if (i == st->ncrash_kinds) {
        if (i == FZ_MAX_MSGS) i--;
        else snprintf(st->crash_kinds[st->ncrash_kinds++].msg, sizeof st->crash_kinds[0].msg, "%s", sig);
    }
    if (++st->crash_kinds[i].count > 2) return;
    char path[256];
    mkdir("build", 0755);
    mkdir(CRASH_DIR, 0755);
    int fd;
    do {  // a new name: the inputs of earlier runs stay, and two runs at once do not clash
        snprintf(path, sizeof path, CRASH_DIR "/%s_%ld.bin", KIND_NAMES[kind], st->saved++);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    } while (fd < 0 && errno == EEXIST);
    if (fd < 0) fatal("cannot create %s: %s", path, strerror(errno));
    close(fd);
    write_file(path, j->input.p, j->input.n);
    printf("\nCRASH %s: %s (case %llu, seed file %d): input saved as %s (%zu bytes)\n", KIND_NAMES[kind], why,
           (unsigned long long)j->iter, j->seed, path, j->input.n);
    printf("  first bytes:");
    for (size_t k = 0; k < j->input.n && k < 48; k++) printf(" %02x", j->input.p[k]);
    printf("\n  replay: build/san/fuzz_readers --replay %s %s %d\n  its stderr:\n", KIND_NAMES[kind], path, j->seed);
    const char *p = err;
    for (int lines = 0; *p && lines < 25; lines++) {
        const char *e = strchr(p, '\n');
        int len = e ? (int)(e - p) : (int)strlen(p);
        printf("    %.*s\n", len > 200 ? 200 : len, p);
        p += len + (e != NULL);
    }
    fflush(stdout);
}

static void start_job(int kind, Job *j, uint64_t fuzz_seed) {
    make_mutant(kind, fuzz_seed, j->iter, &j->input, &j->seed);
    clear_dir(j->slot);
    prepare_slot(kind, j->slot, &j->input, j->seed);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY), errfd = open(j->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (devnull < 0 || errfd < 0) _exit(99);
        dup2(devnull, 1);
        dup2(errfd, 2);
        close(devnull);
        close(errfd);
        alarm((unsigned)g_timeout);
        run_child_case(kind, j->slot, j->seed);
        _exit(0);
    }
    j->pid = pid;
}

static void finish_job(int kind, Job *j, int status, Stats *st) {
    size_t n = 0;
    char *err = file_exists(j->err) ? (char *)xread_file(j->err, &n) : xstrdup("");
    char why[96] = "";
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        if (sig == SIGALRM) snprintf(why, sizeof why, "no exit within %d s (a hang?)", g_timeout);
        else snprintf(why, sizeof why, "killed by signal %d (%s)", sig, strsignal(sig));
    } else if (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 1) {
        snprintf(why, sizeof why, "exit status %d", WEXITSTATUS(status));
    } else if (strstr(err, "Sanitizer") || strstr(err, "runtime error:")) {
        snprintf(why, sizeof why, "sanitizer report with exit status %d", WEXITSTATUS(status));
    }
    st->runs++;
    if (why[0]) save_crash(kind, j, why, err, st);
    else if (WEXITSTATUS(status) == 0) st->accepted++;
    else { st->refused++; count_message(st, err, j->slot); }
    free(err);
    remove(j->err);
    j->pid = 0;
}

static int cmp_msg(const void *a, const void *b) {
    long ca = ((const Msg *)a)->count, cb = ((const Msg *)b)->count;
    return ca < cb ? 1 : ca > cb ? -1 : 0;
}

static void fuzz_kind(int kind, double seconds, uint64_t fuzz_seed, int njobs) {
    static Stats st;
    memset(&st, 0, sizeof st);
    Job *jobs = (Job *)xcalloc((size_t)njobs, sizeof(Job));
    for (int i = 0; i < njobs; i++) {
        snprintf(jobs[i].slot, sizeof jobs[i].slot, "%s/slot%d", g_root, i);
        snprintf(jobs[i].err, sizeof jobs[i].err, "%s/stderr%d.txt", g_root, i);
        if (mkdir(jobs[i].slot, 0755) != 0) fatal("cannot create %s: %s", jobs[i].slot, strerror(errno));
    }
    double t0 = wall_seconds(), end = t0 + seconds;
    uint64_t iter = 0;
    int running = 0;
    for (;;) {
        for (int i = 0; i < njobs && wall_seconds() < end; i++)
            if (!jobs[i].pid) { jobs[i].iter = iter++; start_job(kind, &jobs[i], fuzz_seed); running++; }
        if (!running) break;
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) fatal("waitpid: %s", strerror(errno));
        for (int i = 0; i < njobs; i++)
            if (jobs[i].pid == pid) { finish_job(kind, &jobs[i], status, &st); running--; }
    }
    printf("%-10s %7ld runs in %.0f s: %ld accepted (exit 0), %ld refused (exit 1), %ld crashes  %s\n",
           KIND_NAMES[kind], st.runs, wall_seconds() - t0, st.accepted, st.refused, st.crashes,
           st.crashes ? "FAIL" : "ok");
    qsort(st.msgs, (size_t)st.nmsgs, sizeof(Msg), cmp_msg);
    for (int i = 0; i < st.nmsgs && i < 5; i++) printf("    %6ld  %s\n", st.msgs[i].count, st.msgs[i].msg);
    printf("    (%d distinct refusals%s)\n", st.nmsgs, st.other_msgs ? ", more not counted" : "");
    for (int i = 0; i < st.ncrash_kinds; i++)
        printf("    crash x%ld: %s\n", st.crash_kinds[i].count, st.crash_kinds[i].msg);
    fflush(stdout);
    for (int i = 0; i < njobs; i++) { rm_tree(jobs[i].slot); free(jobs[i].input.p); }
    free(jobs);
    if (st.crashes) g_failed++;
    else g_passed++;
}

static int kind_by_name(const char *name) {
    for (int k = 0; k < NKINDS; k++)
        if (!strcmp(name, KIND_NAMES[k])) return k;
    fatal("unknown kind '%s' (model, state, shard, tokenizer, jsonl, safetensors, hellaswag)", name);
}

static void make_root(void) {
    mkdir("build", 0755);
    snprintf(g_root, sizeof g_root, "build/fuzz_readers_XXXXXX");
    if (!mkdtemp(g_root)) fatal("mkdtemp %s: %s", g_root, strerror(errno));
}

// Runs one saved input with the child's stderr on the terminal, so that the sanitizer's
// report shows in full; under a debugger, set follow-fork-mode child.
static int replay(const char *kind_name, const char *file, int argc_seed, const char *seed_arg) {
    int kind = kind_by_name(kind_name);
    make_root();
    make_fixtures();
    Buf b = {0};
    read_into(&b, file);
    int seed = 0;
    if (argc_seed) seed = atoi(seed_arg);
    else if (kind == K_TOKENIZER) seed = b.n < 8 || memcmp(b.p, "#version", 8) != 0;  // else encoder.json
    else if (kind == K_STATE) seed = hget(&b, 3) != 0;  // the run keeps master weights
    if (seed < 0 || seed >= g_nseeds[kind]) fatal("seed file %d: %s has %d", seed, kind_name, g_nseeds[kind]);
    char slot[512];
    snprintf(slot, sizeof slot, "%s/replay", g_root);
    clear_dir(slot);
    prepare_slot(kind, slot, &b, seed);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        run_child_case(kind, slot, seed);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    rm_tree(g_root);
    free(b.p);
    int clean = WIFEXITED(status) && WEXITSTATUS(status) <= 1;
    printf("%s %s (seed file %d): %s\n", kind_name, file, seed,
           !clean ? "CRASH" : WEXITSTATUS(status) ? "refused" : "accepted");
    return clean ? 0 : 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 4 && !strcmp(argv[1], "--replay")) return replay(argv[2], argv[3], argc >= 5, argc >= 5 ? argv[4] : "");
    if (argc != 1) fatal("usage: fuzz_readers | fuzz_readers --replay KIND FILE [SEED] (see the top of %s)", __FILE__);
    const char *env = getenv("FUZZ_SECONDS");
    double seconds = 60.0;
    if (env && (!parse_double(env, &seconds) || seconds < 0)) fatal("FUZZ_SECONDS must be a number of seconds");
    uint64_t fuzz_seed = (uint64_t)time(NULL) * 1000003u + (uint64_t)getpid();
    env = getenv("FUZZ_SEED");
    if (env) fuzz_seed = strtoull(env, NULL, 10);
    long njobs = sysconf(_SC_NPROCESSORS_ONLN);
    env = getenv("FUZZ_JOBS");
    if (env && (!parse_long(env, &njobs) || njobs < 1)) fatal("FUZZ_JOBS must be a positive number");
    if (njobs < 1) njobs = 1;
    if (njobs > 8 && !env) njobs = 8;
    long timeout = g_timeout;
    env = getenv("FUZZ_TIMEOUT");
    if (env && (!parse_long(env, &timeout) || timeout < 1)) fatal("FUZZ_TIMEOUT must be a positive number");
    g_timeout = (int)timeout;
    int want[NKINDS];
    for (int k = 0; k < NKINDS; k++) want[k] = 1;
    env = getenv("FUZZ_KINDS");
    if (env && *env) {
        memset(want, 0, sizeof want);
        char *list = xstrdup(env), *save = NULL;
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) want[kind_by_name(t)] = 1;
        free(list);
    }
    make_root();
    make_fixtures();
    printf("fuzz_readers: seed %llu (FUZZ_SEED=%llu repeats these mutants), %g s per kind, %ld children at a "
           "time\n", (unsigned long long)fuzz_seed, (unsigned long long)fuzz_seed, seconds, njobs);
    for (int k = 0; k < NKINDS; k++)
        if (want[k]) fuzz_kind(k, seconds, fuzz_seed, (int)njobs);
    rm_tree(g_root);
    return test_summary();
}
