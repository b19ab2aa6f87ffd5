// test_tokenizer_unit.c: unit tests of common/tokenizer.h, meant to run under
// -fsanitize=address,undefined. Loads the real files from data/gpt2 (run from the
// repository root); broken copies of them are written under build/test_tokenizer_unit.tmp/
// and must fail cleanly (exit 1, "error: ..." naming the file) in a forked child.
// Build: gcc -std=c11 -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -pthread
//        -Icommon dev/test/test_tokenizer_unit.c -o build/test_tokenizer_unit
// Expected token ids below come from tiktoken 0.14's "gpt2" encoding.
#include "../../common/tokenizer.h"
#include "testutil.h"
#include <pthread.h>
#include <sys/stat.h>
#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#define DATA_DIR "data/gpt2"
#define TMP_DIR "build/test_tokenizer_unit.tmp"

static Tokenizer g_tok;
static uint64_t g_rng;

static uint64_t rnd(void) {  // xorshift64*
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}

static void encode_str(const char *s, TokenVec *v) {
    v->len = 0;
    tokenizer_encode(&g_tok, (const uint8_t *)s, strlen(s), v);
}

static int same_tokens(const TokenVec *v, const uint32_t *want, size_t n) {
    return v->len == n && (n == 0 || memcmp(v->data, want, n * sizeof(uint32_t)) == 0);
}

static void test_load_and_known_ids(void) {
    CHECK(g_tok.vocab_size == GPT2_VOCAB_SIZE, "vocab_size %d", g_tok.vocab_size);
    size_t len;
    const uint8_t *b = tokenizer_token_bytes(&g_tok, GPT2_EOT, &len);
    CHECK(b && len == 13 && memcmp(b, "<|endoftext|>", 13) == 0, "EOT bytes");
    CHECK(tokenizer_token_bytes(&g_tok, GPT2_VOCAB_SIZE, &len) == NULL && len == 0, "id 50257 must be NULL");
    CHECK(tokenizer_token_bytes(&g_tok, 0xFFFFFFFFu, &len) == NULL, "id 2^32-1 must be NULL");
    b = tokenizer_token_bytes(&g_tok, 0, &len);
    CHECK(b && len == 1 && b[0] == '!', "token 0 is '!'");
    b = tokenizer_token_bytes(&g_tok, 220, &len);
    CHECK(b && len == 1 && b[0] == ' ', "token 220 is ' '");
    b = tokenizer_token_bytes(&g_tok, 50255, &len);
    CHECK(b && len == 6 && memcmp(b, " gazed", 6) == 0, "token 50255 is ' gazed'");
    // every byte is a token of its own and decodes to itself
    for (int c = 0; c < 256; c++) {
        uint8_t x = (uint8_t)c;
        TokenVec v = {NULL, 0, 0};
        tokenizer_encode(&g_tok, &x, 1, &v);
        CHECK(v.len == 1, "byte %d: %zu tokens", c, v.len);
        if (v.len == 1) {
            b = tokenizer_token_bytes(&g_tok, v.data[0], &len);
            CHECK(len == 1 && b[0] == x, "byte %d does not decode to itself", c);
        }
        tokenvec_free(&v);
    }
}

static void test_known_encodings(void) {
    TokenVec v = {NULL, 0, 0};
    static const uint32_t hello[] = {15496, 995};
    encode_str("Hello world", &v);
    CHECK(same_tokens(&v, hello, 2), "Hello world");
    // the text of <|endoftext|> is ordinary text, not token 50256
    static const uint32_t eot_text[] = {27, 91, 437, 1659, 5239, 91, 29};
    encode_str("<|endoftext|>", &v);
    CHECK(same_tokens(&v, eot_text, 7), "<|endoftext|> as text");
    // contractions are lower case only
    static const uint32_t contr[] = {40, 1183, 467, 11, 340, 6, 50, 33700, 6, 3069};
    encode_str("I'll go, it'S HIS'LL", &v);
    CHECK(same_tokens(&v, contr, 10), "contractions");
    static const uint32_t ws[] = {64, 220, 220, 628, 275, 197, 1849, 66, 220, 220, 220};
    encode_str("a  \n\n b\t\xc2\xa0" "c   ", &v);
    CHECK(same_tokens(&v, ws, 11), "white space runs");
    static const uint32_t uni[] = {2616, 38776, 40304, 10545, 245, 98, 17312, 105, 32485, 17031, 29228};
    encode_str("na\xc3\xafve caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 123456", &v);
    CHECK(same_tokens(&v, uni, 11), "non-ASCII");
    tokenvec_free(&v);
}

static void test_empty_and_append(void) {
    TokenVec v = {NULL, 0, 0};
    tokenizer_encode(&g_tok, (const uint8_t *)"", 0, &v);
    CHECK(v.len == 0, "empty input gave %zu tokens", v.len);
    tokenizer_encode(&g_tok, NULL, 0, &v);
    CHECK(v.len == 0, "NULL empty input gave %zu tokens", v.len);
    tokenizer_encode(&g_tok, (const uint8_t *)"Hello", 5, &v);
    tokenizer_encode(&g_tok, (const uint8_t *)" world", 6, &v);
    static const uint32_t hello[] = {15496, 995};
    CHECK(same_tokens(&v, hello, 2), "encode appends");
    TokBytes out = {NULL, 0, 0};
    CHECK(tokenizer_decode(&g_tok, v.data, 0, &out) == 0 && out.len == 0, "decode of nothing");
    uint32_t ids[] = {15496, 99999, GPT2_EOT, 995};
    CHECK(tokenizer_decode(&g_tok, ids, 4, &out) == 1, "one invalid id is skipped and counted");
    CHECK(out.len == 24 && memcmp(out.data, "Hello<|endoftext|> world", 24) == 0, "decode with EOT");
    tokbytes_free(&out);
    tokenvec_free(&v);
}

static void roundtrip(const uint8_t *s, size_t n, const char *what) {
    TokenVec v = {NULL, 0, 0};
    tokenizer_encode(&g_tok, s, n, &v);
    TokBytes out = {NULL, 0, 0};
    size_t bad = tokenizer_decode(&g_tok, v.data, v.len, &out);
    CHECK(bad == 0, "%s: %zu ids out of range", what, bad);
    for (size_t i = 0; i < v.len; i++) CHECK(v.data[i] < GPT2_EOT, "%s: token %u", what, v.data[i]);
    CHECK(out.len == n && (n == 0 || memcmp(out.data, s, n) == 0), "%s: decode(encode(x)) != x (n=%zu)", what, n);
    tokbytes_free(&out);
    tokenvec_free(&v);
}

static void test_roundtrip_random_bytes(void) {
    static const char *atoms[] = {" ", "  ", "\n", "\n\n", "'", "'s", "'ll", "a", "Zq", "7", "!",
                                  "\t", "\r\n", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\xa8", "\xf0\x9f\x99\x82",
                                  "\xc3", "\xe2\x80", "\xf0\x9f\x99", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf"};
    uint8_t buf[600];
    for (int iter = 0; iter < 4000; iter++) {
        size_t n = 0, want = rnd() % 500;
        while (n < want) {
            if (rnd() % 2) buf[n++] = (uint8_t)rnd();
            else {
                const char *a = atoms[rnd() % (sizeof(atoms) / sizeof(atoms[0]))];
                size_t l = strlen(a);
                memcpy(buf + n, a, l);
                n += l;
            }
        }
        roundtrip(buf, n, "random bytes");
        if (g_case_failed) break;
    }
}

// The two BPE paths (flat array for short pieces, heap for long ones) must agree.
static void test_bpe_paths_agree(void) {
    static const char alpha[] = "==  --ab\xc3\xa9 e th\xe2\x80\x94zq.";
    TokScratch sc;
    memset(&sc, 0, sizeof(sc));
    uint8_t p[TOK_SMALL_PIECE];
    TokenVec a = {NULL, 0, 0}, b = {NULL, 0, 0};
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = 2 + rnd() % (TOK_SMALL_PIECE - 1);
        for (size_t i = 0; i < n; i++)
            p[i] = (rnd() % 8) ? (uint8_t)alpha[rnd() % (sizeof(alpha) - 1)] : (uint8_t)rnd();
        a.len = b.len = 0;
        tok__bpe_short(&g_tok, p, n, &a);
        tok__bpe_long(&g_tok, p, n, &b, &sc);
        CHECK(a.len == b.len && memcmp(a.data, b.data, a.len * 4) == 0, "short and heap BPE differ (n=%zu)", n);
        if (g_case_failed) break;
    }
    free(sc.tok); free(sc.nxt); free(sc.prv); free(sc.heap);
    tokenvec_free(&a);
    tokenvec_free(&b);
}

static void long_run(char c, size_t n, size_t want_len, uint64_t want_sum, const char *what) {
    uint8_t *s = (uint8_t *)xmalloc(n);
    memset(s, c, n);
    TokenVec v = {NULL, 0, 0};
    double t0 = wall_seconds();
    tokenizer_encode(&g_tok, s, n, &v);
    double dt = wall_seconds() - t0;
    uint64_t sum = 0;
    for (size_t i = 0; i < v.len; i++) sum += v.data[i];
    CHECK(v.len == want_len && sum == want_sum, "%s: %zu tokens (want %zu), sum %llu (want %llu)", what, v.len,
          want_len, (unsigned long long)sum, (unsigned long long)want_sum);
    // generous bound (sanitizers, a busy machine): a quadratic algorithm takes far longer
    CHECK(dt < 2.0, "%s took %.2f s", what, dt);
    roundtrip(s, n, what);
    tokenvec_free(&v);
    free(s);
}

static void test_long_runs(void) {
    long_run(' ', 100000, 100000, 100000ull * 220, "100 KB of spaces");
    long_run('=', 100000, 1563, 37382464ull, "100 KB of '='");
    long_run('\n', 100000, 50000, 50000ull * 628, "100 KB of newlines");
    long_run('a', 100000, 25000, 25000ull * 24794, "100 KB of 'a'");
}

// Cutting at tokenizer_safe_split points never changes the tokens.
static void test_safe_split(void) {
    static const char *atoms[] = {"\n", "\n", "\n\n", " ", "  ", "a", "Bc", "'s", "1", ".", "\t",
                                  "\xc2\xa0", "\xe3\x80\x80", "\xc3\xa9", "\xff"};
    uint8_t buf[400];
    TokenVec whole = {NULL, 0, 0}, parts = {NULL, 0, 0};
    size_t cuts_seen = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 0, want = 1 + rnd() % 300;
        while (n < want) {
            const char *a = atoms[rnd() % (sizeof(atoms) / sizeof(atoms[0]))];
            size_t l = strlen(a);
            memcpy(buf + n, a, l);
            n += l;
        }
        whole.len = parts.len = 0;
        tokenizer_encode(&g_tok, buf, n, &whole);
        size_t prev = 0;
        for (size_t b = 0; b <= n; b++) {
            if (b < n && !tokenizer_safe_split(buf, n, b)) continue;
            CHECK(b == n || tokenizer_next_safe_split(buf, n, prev + 1) == b || prev == 0,
                  "next_safe_split disagrees with safe_split");
            tokenizer_encode(&g_tok, buf + prev, b - prev, &parts);
            prev = b;
            cuts_seen++;
        }
        CHECK(whole.len == parts.len && memcmp(whole.data, parts.data, whole.len * 4) == 0,
              "cutting at safe points changed the tokens: %.*s", (int)n, (const char *)buf);
        if (g_case_failed) break;
    }
    CHECK(cuts_seen > 3000, "too few safe points exercised (%zu)", cuts_seen);
    tokenvec_free(&whole);
    tokenvec_free(&parts);
}

typedef struct {
    const uint8_t *text;
    size_t len;
    TokenVec out;
} ThreadJob;

static void *thread_encode(void *arg) {
    ThreadJob *j = (ThreadJob *)arg;
    for (int r = 0; r < 3; r++) {
        j->out.len = 0;
        tokenizer_encode(&g_tok, j->text, j->len, &j->out);
    }
    return NULL;
}

static void test_threads(void) {
    size_t n = 200000;
    uint8_t *s = (uint8_t *)xmalloc(n);
    static const char *words[] = {"the ", "cat's ", "\n\n", "caf\xc3\xa9 ", "12345 ", "==== ",
                                  "\xe6\x97\xa5\xe6\x9c\xac", "  "};
    size_t k = 0;
    while (k < n) {
        const char *w = words[rnd() % 8];
        size_t l = strlen(w);
        if (k + l > n) l = n - k;
        memcpy(s + k, w, l);
        k += l;
    }
    TokenVec ref = {NULL, 0, 0};
    tokenizer_encode(&g_tok, s, n, &ref);
    ThreadJob jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].text = s;
        jobs[i].len = n;
        memset(&jobs[i].out, 0, sizeof(TokenVec));
        if (pthread_create(&th[i], NULL, thread_encode, &jobs[i]) != 0) fatal("pthread_create failed");
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].out.len == ref.len && memcmp(jobs[i].out.data, ref.data, ref.len * 4) == 0,
              "thread %d got different tokens", i);
        tokenvec_free(&jobs[i].out);
    }
    tokenvec_free(&ref);
    free(s);
}

// ---- broken files ------------------------------------------------------------------------

static uint8_t *g_bpe, *g_json;
static size_t g_bpe_len, g_json_len;

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = xfopen(path, "wb");
    if (n) xfwrite(data, 1, n, f, path);
    xfclose(f, path);
}

// Makes TMP_DIR/<name>/ holding the given vocab.bpe and encoder.json (NULL: leave out).
static const char *make_case(const char *name, const void *bpe, size_t bpe_len, const void *json, size_t json_len) {
    static char dir[256];
    snprintf(dir, sizeof(dir), "%s/%s", TMP_DIR, name);
    mkdir(TMP_DIR, 0755);
    mkdir(dir, 0755);
    char path[300];
    snprintf(path, sizeof(path), "%s/vocab.bpe", dir);
    unlink(path);
    if (bpe) write_file(path, bpe, bpe_len);
    snprintf(path, sizeof(path), "%s/encoder.json", dir);
    unlink(path);
    if (json) write_file(path, json, json_len);
    return dir;
}

static void child_init(const char *dir) {
#ifdef __SANITIZE_ADDRESS__
    __lsan_disable();  // fatal() exits with the loader's buffers still allocated, by design
#endif
    Tokenizer t;
    tokenizer_init(&t, dir);
    tokenizer_free(&t);
}

// Copy of buf with the first occurrence of `from` replaced by `to`.
static uint8_t *replaced(const uint8_t *buf, size_t n, const char *from, const char *to, size_t *out_n) {
    const uint8_t *p = (const uint8_t *)memmem(buf, n, from, strlen(from));
    if (!p) fatal("test setup: '%s' not found", from);
    size_t a = (size_t)(p - buf), fl = strlen(from), tl = strlen(to);
    uint8_t *r = (uint8_t *)xmalloc(n - fl + tl);
    memcpy(r, buf, a);
    memcpy(r + a, to, tl);
    memcpy(r + a + tl, buf + a + fl, n - a - fl);
    *out_n = n - fl + tl;
    return r;
}

static void bad_bpe(const char *name, const uint8_t *bpe, size_t n, const char *needle) {
    const char *dir = make_case(name, bpe, n, g_json, g_json_len);
    char path[300];
    snprintf(path, sizeof(path), "%s/vocab.bpe", dir);
    expect_failure(name, child_init, dir, path, needle, NULL);
}

static void bad_json(const char *name, const uint8_t *json, size_t n, const char *needle) {
    const char *dir = make_case(name, g_bpe, g_bpe_len, json, n);
    char path[300];
    snprintf(path, sizeof(path), "%s/encoder.json", dir);
    expect_failure(name, child_init, dir, path, needle, NULL);
}

// A directory where a tokenizer file is expected: fopen() opens it, and its size read
// through fseeko/ftello is 2^63 - 1 (which once asked malloc for 2^63 bytes).
static void file_is_directory(const char *name, const char *file) {
    char path[300];
    snprintf(path, sizeof(path), "%s/%s/%s", TMP_DIR, name, file);
    rmdir(path);  // left by an earlier run; make_case cannot write a file over it
    const char *dir = make_case(name, g_bpe, g_bpe_len, g_json, g_json_len);
    unlink(path);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) fatal("test setup: cannot create %s: %s", path, strerror(errno));
    expect_failure(name, child_init, dir, path, "is a directory", NULL);
}

static void test_broken_vocab_bpe(void) {
    expect_failure("missing directory", child_init, TMP_DIR "/no_such_dir", "vocab.bpe", NULL, NULL);
    const char *dir = make_case("bpe_missing", NULL, 0, g_json, g_json_len);
    expect_failure("vocab.bpe missing", child_init, dir, "vocab.bpe", "cannot open", NULL);
    file_is_directory("bpe_directory", "vocab.bpe");
    bad_bpe("bpe_empty", g_bpe, 0, "empty");
    bad_bpe("bpe_half", g_bpe, g_bpe_len / 2, "truncated");
    bad_bpe("bpe_one_byte", g_bpe, 1, NULL);
    // cut at a line end: whole lines are missing
    const uint8_t *p = g_bpe;
    for (int lines = 0; lines < 1000; lines++)
        p = (const uint8_t *)memchr(p, '\n', g_bpe_len - (size_t)(p - g_bpe)) + 1;
    bad_bpe("bpe_1000_lines", g_bpe, (size_t)(p - g_bpe), "999 merges");
    size_t n;
    uint8_t *b;
    b = replaced(g_bpe, g_bpe_len, "\nh e\n", "\nhe\n", &n);
    bad_bpe("bpe_no_space", b, n, "two tokens");
    free(b);
    b = replaced(g_bpe, g_bpe_len, "\nh e\n", "\nh e x\n", &n);
    bad_bpe("bpe_three_fields", b, n, "two tokens");
    free(b);
    b = replaced(g_bpe, g_bpe_len, "\nh e\n", "\nh \x01\n", &n);
    bad_bpe("bpe_bad_char", b, n, "alphabet");
    free(b);
    b = replaced(g_bpe, g_bpe_len, "\nh e\n", "\nh \xff\n", &n);
    bad_bpe("bpe_bad_utf8", b, n, "UTF-8");
    free(b);
    b = replaced(g_bpe, g_bpe_len, "\n\xc4\xa0 t\n", "\n\xc4\xa0t he\n", &n);  // "Gt" used before it is made
    bad_bpe("bpe_order", b, n, "earlier line");
    free(b);
    b = replaced(g_bpe, g_bpe_len, "\nh e\n", "\n\xc4\xa0 t\n", &n);  // "Gt" made twice
    bad_bpe("bpe_duplicate", b, n, "already made");
    free(b);
    b = replaced(g_bpe, g_bpe_len, "#version", "#vErsion", &n);
    bad_bpe("bpe_header", b, n, "#version");
    free(b);
    b = replaced(g_bpe, g_bpe_len, "\nh e\n", "\nh e\r\n", &n);
    bad_bpe("bpe_crlf", b, n, "line 4");
    free(b);
}

static void test_broken_encoder_json(void) {
    const char *dir = make_case("json_missing", g_bpe, g_bpe_len, NULL, 0);
    expect_failure("encoder.json missing", child_init, dir, "encoder.json", "cannot open", NULL);
    file_is_directory("json_directory", "encoder.json");
    bad_json("json_empty", g_json, 0, "empty");
    bad_json("json_half", g_json, g_json_len / 2, "truncated");
    bad_json("json_cut_end", g_json, g_json_len - 1, "truncated");
    bad_json("json_array", (const uint8_t *)"[1, 2]", 6, "expected '{'");
    bad_json("json_empty_object", (const uint8_t *)"{}", 2, "empty");
    size_t n;
    uint8_t *b;
    b = replaced(g_json, g_json_len, "\"!\": 0", "\"!\": 1", &n);
    bad_json("json_wrong_id", b, n, "disagrees");
    free(b);
    b = replaced(g_json, g_json_len, "\"\\u0120gazed\": 50255", "\"\\u0120gazer\": 50255", &n);
    bad_json("json_unknown_key", b, n, "not a token");
    free(b);
    b = replaced(g_json, g_json_len, "\"\\u0120gazed\": 50255", "\"\\u0120gazed\": 50254", &n);
    bad_json("json_dup_id", b, n, "twice");
    free(b);
    b = replaced(g_json, g_json_len, "\"\\u0120gazed\": 50255", "\"\\u0120gazed\": 70000", &n);
    bad_json("json_big_id", b, n, "out of range");
    free(b);
    b = replaced(g_json, g_json_len, "\"\\u0120gazed\": 50255", "\"\\u012Xgazed\": 50255", &n);
    bad_json("json_bad_escape", b, n, "hex digit");
    free(b);
    b = replaced(g_json, g_json_len, "\"\\u0120gazed\": 50255", "\"\\ud800gazed\": 50255", &n);
    bad_json("json_lone_surrogate", b, n, "surrogate");
    free(b);
    b = replaced(g_json, g_json_len, "\"\\u0120gazed\": 50255", "\"\\u4e00gazed\": 50255", &n);
    bad_json("json_bad_char", b, n, "alphabet");
    free(b);
    b = replaced(g_json, g_json_len, ", \"<|endoftext|>\": 50256}", "}", &n);
    bad_json("json_no_eot", b, n, "no <|endoftext|>");
    free(b);
    b = replaced(g_json, g_json_len, "\"<|endoftext|>\": 50256}", "\"<|endoftext|>\": 50256} x", &n);
    bad_json("json_trailing", b, n, "after the JSON object");
    free(b);
    b = replaced(g_json, g_json_len, "\"!\": 0,", "\"!\" 0,", &n);
    bad_json("json_no_colon", b, n, "expected ':'");
    free(b);
    b = replaced(g_json, g_json_len, "\"!\": 0,", "\"!\": -0,", &n);
    bad_json("json_negative", b, n, "non-negative");
    free(b);
}

int main(void) {
    const char *seed_env = getenv("TEST_SEED");
    g_rng = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL) * 2654435761u + (uint64_t)getpid();
    if (!g_rng) g_rng = 1;
    printf("seed %llu (set TEST_SEED to repeat)\n", (unsigned long long)g_rng);
    mkdir("build", 0755);
    g_bpe = xread_file(DATA_DIR "/vocab.bpe", &g_bpe_len);
    g_json = xread_file(DATA_DIR "/encoder.json", &g_json_len);
    double t0 = wall_seconds();
    tokenizer_init(&g_tok, DATA_DIR);
    printf("tokenizer_init: %.3f s\n", wall_seconds() - t0);
    run_case("load and known ids", test_load_and_known_ids);
    run_case("known encodings (tiktoken)", test_known_encodings);
    run_case("empty input, append, decode", test_empty_and_append);
    run_case("round trip of random bytes", test_roundtrip_random_bytes);
    run_case("short and heap BPE agree", test_bpe_paths_agree);
    run_case("100 KB runs finish fast", test_long_runs);
    run_case("safe split points", test_safe_split);
    run_case("concurrent encoding", test_threads);
    run_case("broken vocab.bpe fails cleanly", test_broken_vocab_bpe);
    run_case("broken encoder.json fails cleanly", test_broken_encoder_json);
    tokenizer_free(&g_tok);
    free(g_bpe);
    free(g_json);
    return test_summary();
}
