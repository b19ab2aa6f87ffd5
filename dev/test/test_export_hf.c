// test_export_hf.c: unit tests of common/safetensors.h, built with ASan and UBSan: the
// JSON parser (escapes, numbers, limits), the safetensors reader's refusals (each with
// exit status 1 and a message naming the file and the problem), write/read round trips,
// the GPT-2 mapping to transformers' names and back (bit-exact), the import's refusals of
// configs and weights our model cannot hold, build/export_hf --import's checks of its
// output and of a config that does not describe its weights (the program run as it is
// built, under resource limits), that neither direction writes over a file it reads and
// that a FIFO in place of a model file is refused at once, and a short mutation run in
// which no mutant may crash the reader. The end-to-end checks (transformers, PyTorch logits,
// the rest of the command line) are in dev/test/test_export_hf.py.
//   make build/export_hf build/san/test_export_hf && build/san/test_export_hf
#include "testutil.h"
#include "../../common/checkpoint.h"
#include "../../common/rng.h"
#include "../../common/safetensors.h"
#include <signal.h>
#include <sys/resource.h>

// A sanitizer report must abort: its default exit status 1 would read as a clean refusal.
__attribute__((used)) const char *__asan_default_options(void) {
    return "abort_on_error=1:halt_on_error=1:detect_leaks=0";
}
__attribute__((used)) const char *__ubsan_default_options(void) {
    return "abort_on_error=1:halt_on_error=1:print_stacktrace=1";
}

static char g_dir[256];

static const char *tmp_path(const char *name) {
    static char bufs[8][512];
    static int k = 0;
    char *p = bufs[k++ % 8];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static void put_file(const char *path, const void *p, size_t n) {
    FILE *f = xfopen(path, "wb");
    if (n) xfwrite(p, 1, n, f, path);
    xfclose(f, path);
}

static void put_text(const char *path, const char *text) { put_file(path, text, strlen(text)); }

// A safetensors file from a header text and data bytes; hlen_override (if not ~0) is
// written as the length instead of the true one.
static void put_st(const char *path, const char *header, const void *data, size_t n, uint64_t hlen_override) {
    size_t hl = strlen(header);
    uint64_t hlen = hlen_override != ~(uint64_t)0 ? hlen_override : hl;
    uint8_t *buf = (uint8_t *)xmalloc(8 + hl + n);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (n) memcpy(buf + 8 + hl, data, n);
    put_file(path, buf, 8 + hl + n);
    free(buf);
}

static void child_read(const char *path) { fuzz_read_safetensors(path); }

static void child_import(const char *dir) {
    GPT2Config c;
    free(gpt2_params_from_hf_dir(dir, &c));
}

// ---------------------------------------------------------------------------
// JSON

static int parses(const char *text) {
    JsonDoc d;
    int ok = json_parse(&d, text, strlen(text));
    json_free(&d);
    return ok;
}

static void test_json_values(void) {
    const char *text = " {\"a\\u00e9\\n\": [1, -2.5e3, 18446744073709551615, 18446744073709551616, true, null],"
                       " \"s\": \"\\ud83d\\ude80\\\"\\\\\\/\\t\", \"a\\u00e9\\n\": {}} ";
    JsonDoc d;
    CHECK(json_parse(&d, text, strlen(text)), "parse failed: %s", d.err);
    const JsonValue *r = &d.root;
    CHECK(r->type == JSON_OBJECT && r->len == 3, "root: type %d len %zu", r->type, r->len);
    const JsonValue *last = json_get(r, "a\xc3\xa9\n");
    CHECK(last && last->type == JSON_OBJECT, "the last of two equal keys should win");
    const JsonValue *arr = &r->items[0];
    CHECK(arr->type == JSON_ARRAY && arr->len == 6, "array len %zu", arr->len);
    if (arr->len == 6) {
        CHECK(arr->items[0].is_uint && arr->items[0].u == 1, "1");
        CHECK(!arr->items[1].is_uint && arr->items[1].num == -2500.0, "-2.5e3: %g", arr->items[1].num);
        CHECK(arr->items[2].is_uint && arr->items[2].u == UINT64_MAX, "2^64-1 must be exact");
        CHECK(!arr->items[3].is_uint, "2^64 does not fit a u64");
        CHECK(arr->items[4].type == JSON_TRUE && arr->items[5].type == JSON_NULL, "true, null");
    }
    const JsonValue *s = json_get(r, "s");
    CHECK(s && s->type == JSON_STRING && s->len == 8 && !memcmp(s->str, "\xf0\x9f\x9a\x80\"\\/\t", 8),
          "escapes and surrogate pair decode wrongly");
    json_free(&d);
    JsonDoc z;
    CHECK(json_parse(&z, "\"a\\u0000b\"", 10) && z.root.len == 3 && z.root.str[1] == 0, "\\u0000 keeps its length");
    json_free(&z);
}

static void test_json_refusals(void) {
    static const char *const bad[] = {
        "", "{", "{\"a\":}", "{\"a\" 1}", "[1,]", "[1 2]", "{\"a\":1,}", "01", "1.", "1e", "-", "+1", ".5",
        "\"abc", "\"a\\x\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\u12g4\"", "\"a\tb\"",
        "\"\xc3\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "tru", "nul", "{} x", "[1]]",
        "{\"a\":1}{}", "\"\\",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!parses(bad[i]), "accepted bad JSON <%s>", bad[i]);
    char deep[400];
    for (int depth = 63; depth <= 66; depth++) {  // the limit is 64 levels
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        deep[2 * depth] = 0;
        CHECK(parses(deep) == (depth <= 64), "depth %d: %s", depth, depth <= 64 ? "refused" : "accepted");
    }
    // nesting far past the limit fails fast, without deep recursion
    size_t n = 1 << 20;
    char *huge = (char *)xmalloc(n + 1);
    memset(huge, '[', n);
    huge[n] = 0;
    CHECK(!parses(huge), "a million '[' accepted");
    free(huge);
}

// ---------------------------------------------------------------------------
// safetensors reader and writer

static void test_write_read(void) {
    const char *path = tmp_path("rw.safetensors");
    float a[6] = {1.0f, -2.0f, 3.5f, 0.0f, -0.0f, 1e-30f};
    uint16_t b[3] = {float_to_bf16(1.5f), float_to_bf16(-3.0f), float_to_bf16(1e20f)};
    uint16_t h[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8400};  // 1, -2, 65504, 2^-24, inf, -2^-14
    StSpec specs[4] = {{"a", ST_F32, 2, {2, 3}}, {"b\"q", ST_BF16, 1, {3}}, {"h", ST_F16, 1, {6}},
                       {"empty", ST_F32, 2, {0, 5}}};
    static const char *const meta[] = {"format", "pt", "note", "x\"y"};
    StWriter w;
    st_write_begin(&w, path, specs, 4, meta, 2);
    st_write_data(&w, a, sizeof a);
    st_write_data(&w, b, sizeof b);
    st_write_data(&w, h, sizeof h);
    st_write_end(&w);
    size_t len;
    uint8_t *raw = xread_file(path, &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | raw[i];
    CHECK((8 + hlen) % 8 == 0, "data start %llu is not 8-byte aligned", (unsigned long long)(8 + hlen));
    free(raw);
    StFile st;
    st_open(&st, path);
    CHECK(st.n == 4, "%zu tensors", st.n);
    CHECK(st_metadata(&st, "note") && !strcmp(st_metadata(&st, "note"), "x\"y"), "metadata lost");
    float out[6];
    const StTensor *t = st_find(&st, "a");
    CHECK(t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->numel == 6, "tensor a");
    if (t) { st_read_f32(&st, t, out); CHECK(!memcmp(out, a, sizeof a), "F32 values changed"); }
    t = st_find(&st, "b\"q");
    if (t) {
        st_read_f32(&st, t, out);
        CHECK(out[0] == 1.5f && out[1] == -3.0f && out[2] == bf16_to_float(b[2]), "BF16 values changed");
    }
    CHECK(t != NULL, "a name with a quote was lost");
    t = st_find(&st, "h");
    if (t) {
        st_read_f32(&st, t, out);
        CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f && out[3] == ldexpf(1.0f, -24) &&
              isinf(out[4]) && out[5] == -ldexpf(1.0f, -14), "F16 conversion: %g %g %g %g %g %g", out[0], out[1],
              out[2], out[3], out[4], out[5]);
    }
    t = st_find(&st, "empty");
    CHECK(t && t->numel == 0 && t->begin == t->end, "an empty tensor");
    CHECK(st_find(&st, "missing") == NULL, "found a tensor that is not there");
    st_close(&st);
    float f16max = f16_to_float(0x7e00);
    CHECK(isnan(f16max), "F16 NaN");
}

typedef struct {
    const char *what, *header;
    size_t data_bytes;
    uint64_t hlen;  // ~0: the true length
    const char *needle;
} BadFile;

static void test_refusals(void) {
    const uint64_t T = ~(uint64_t)0;
    static const char F8[] = "\"dtype\":\"F32\",\"shape\":[2]";
    char h[64][512];
    int k = 0;
    BadFile cases[40];
    int n = 0;
#define BAD(WHAT, BYTES, HLEN, NEEDLE, ...)                                             \
    do {                                                                                \
        snprintf(h[k], sizeof h[k], __VA_ARGS__);                                       \
        cases[n].what = WHAT, cases[n].header = h[k++], cases[n].data_bytes = BYTES;    \
        cases[n].hlen = HLEN, cases[n].needle = NEEDLE, n++;                            \
    } while (0)
    BAD("header length beyond the file", 8, 4096, "exceeds the file", "{\"a\":{%s,\"data_offsets\":[0,8]}}", F8);
    BAD("absurd header length", 8, (uint64_t)1 << 40, "absurd", "{\"a\":{%s,\"data_offsets\":[0,8]}}", F8);
    BAD("JSON that does not parse", 8, T, "not valid JSON", "{\"a\":{%s,\"data_offsets\":[0,8]}", F8);
    BAD("a header that is no object", 0, T, "does not begin with '{'", "[1, 2]");
    BAD("offsets out of range", 8, T, "reach past the end", "{\"a\":{%s,\"data_offsets\":[8,16]}}", F8);
    BAD("end before begin", 8, T, "end before they begin", "{\"a\":{%s,\"data_offsets\":[8,0]}}", F8);
    BAD("size not shape times dtype", 12, T, "need 8", "{\"a\":{%s,\"data_offsets\":[0,12]}}", F8);
    BAD("overlapping tensors", 12, T, "overlap",
        "{\"a\":{%s,\"data_offsets\":[0,8]},\"b\":{%s,\"data_offsets\":[4,12]}}", F8, F8);
    BAD("duplicate names", 16, T, "appears twice",
        "{\"a\":{%s,\"data_offsets\":[0,8]},\"a\":{%s,\"data_offsets\":[8,16]}}", F8, F8);
    BAD("unsupported dtype", 16, T, "unsupported",
        "{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}");
    BAD("unknown dtype", 8, T, "unsupported", "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}");
    BAD("a truncated file", 12, T, "truncated",
        "{\"a\":{%s,\"data_offsets\":[0,8]},\"b\":{%s,\"data_offsets\":[8,16]}}", F8, F8);
    BAD("a gap between tensors", 20, T, "belong to no tensor",
        "{\"a\":{%s,\"data_offsets\":[0,8]},\"b\":{%s,\"data_offsets\":[12,20]}}", F8, F8);
    BAD("bytes after the last tensor", 12, T, "follow the last tensor", "{\"a\":{%s,\"data_offsets\":[0,8]}}", F8);
    BAD("shape with a negative dim", 8, T, "shape",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}");
    BAD("shape with a fraction", 8, T, "shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}");
    BAD("shape of 9 dims", 4, T, "shape",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}");
    BAD("shape whose product overflows", 8, T, "overflows",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}");
    BAD("no data_offsets", 8, T, "data_offsets", "{\"a\":{%s}}", F8);
    BAD("three data_offsets", 8, T, "data_offsets", "{\"a\":{%s,\"data_offsets\":[0,8,8]}}", F8);
    BAD("huge offsets", 8, T, "reach past the end",
        "{\"a\":{%s,\"data_offsets\":[18446744073709551608,18446744073709551614]}}",
        "\"dtype\":\"BF16\",\"shape\":[3]");
    BAD("no dtype", 8, T, "no dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}");
    BAD("an entry that is no object", 0, T, "not an object", "{\"a\":[]}");
    BAD("metadata that is no object of strings", 0, T, "__metadata__", "{\"__metadata__\":{\"x\":1}}");
    BAD("a name with a NUL", 8, T, "NUL", "{\"a\\u0000b\":{%s,\"data_offsets\":[0,8]}}", F8);
    BAD("invalid UTF-8 in a name", 8, T, "UTF-8", "{\"a\xff\":{%s,\"data_offsets\":[0,8]}}", F8);
    BAD("an empty header", 0, 0, "cannot hold", "%s", "");
    {
        char deep[400] = "{\"__metadata__\":";
        for (int i = 0; i < 70; i++) strcat(deep, "[");
        for (int i = 0; i < 70; i++) strcat(deep, "]");
        strcat(deep, "}");
        BAD("nesting beyond the limit", 0, T, "nested too deeply", "%s", deep);
    }
#undef BAD
    uint8_t data[64];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 37);
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad_%02d.safetensors", i);
        const char *path = tmp_path(name);
        put_st(path, cases[i].header, data, cases[i].data_bytes, cases[i].hlen);
        expect_failure(cases[i].what, child_read, path, path, cases[i].needle, NULL);
    }
    const char *path = tmp_path("short.safetensors");
    put_file(path, "\x10\0\0", 3);
    expect_failure("a 3-byte file", child_read, path, path, "shorter than the 8-byte", NULL);
    expect_failure("a missing file", child_read, tmp_path("nonexistent.safetensors"), "nonexistent", NULL, NULL);
    // the format's padding: spaces after the JSON are allowed, and an empty file of tensors is valid
    path = tmp_path("padded.safetensors");
    put_st(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}     ", data, 8, T);
    char *err;
    int rc = run_child(child_read, path, &err);
    CHECK(rc == 0, "a header padded with spaces was refused: %s", err);
    free(err);
    path = tmp_path("none.safetensors");
    put_st(path, "{}", NULL, 0, T);
    rc = run_child(child_read, path, &err);
    CHECK(rc == 0, "a file of no tensors was refused: %s", err);
    free(err);
}

// ---------------------------------------------------------------------------
// GPT-2 mapping

static const GPT2Config CFG = {16, 300, 384, 2, 4, 32};  // maxT V Vp L NH C: a vocabulary that is not GPT-2's

static float *random_params(const GPT2Config *c, uint64_t seed) {
    size_t n = gpt2_num_params(c);
    float *p = (float *)xmalloc(n * sizeof(float));
    uint64_t r = rng_seed(seed);
    rng_fill_normal(&r, p, n, 0.0f, 0.5f);
    memset(p + (size_t)c->vocab_size * c->channels, 0,
           (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
    return p;
}

static void put_config(const char *dir, const GPT2Config *c, const char *extra) {
    char path[600], text[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(text, sizeof text,
             "{\"model_type\": \"gpt2\", \"vocab_size\": %d, \"n_positions\": %d, \"n_embd\": %d, \"n_layer\": %d,"
             " \"n_head\": %d, \"n_inner\": null, \"activation_function\": \"gelu_new\","
             " \"layer_norm_epsilon\": 1e-05%s}", c->vocab_size, c->max_seq_len, c->channels, c->num_layers,
             c->num_heads, extra);
    put_text(path, text);
}

static const char *make_hf_dir(const char *name, const float *params, int bf16, const char *extra) {
    const char *dir = tmp_path(name);
    mkdir(dir, 0755);
    put_config(dir, &CFG, extra);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    gpt2_hf_write_safetensors(path, &CFG, params, bf16);
    return dir;
}

static void test_mapping_layout(void) {
    float *p = random_params(&CFG, 1);
    const char *dir = make_hf_dir("layout", p, 0, "");
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    StFile st;
    st_open(&st, path);
    int L = CFG.num_layers, C = CFG.channels, V = CFG.vocab_size;
    CHECK(st.n == (size_t)(4 + 12 * L), "%zu tensors, expected %d (no lm_head)", st.n, 4 + 12 * L);
    CHECK(st_metadata(&st, "format") && !strcmp(st_metadata(&st, "format"), "pt"), "metadata format pt missing");
    const StTensor *t = st_find(&st, "transformer.wte.weight");
    CHECK(t && t->shape[0] == (uint64_t)V && t->shape[1] == (uint64_t)C, "wte must be (V, C), unpadded");
    size_t off[NUM_PARAM_TENSORS];
    gpt2_param_offsets(&CFG, off);
    // Conv1D stores (in, out): element [i][o] is our (out, in) element [o][i]
    t = st_find(&st, "transformer.h.1.attn.c_attn.weight");
    CHECK(t && t->shape[0] == (uint64_t)C && t->shape[1] == (uint64_t)(3 * C), "c_attn.weight shape");
    if (t) {
        float *x = (float *)xmalloc((size_t)t->numel * sizeof(float));
        st_read_f32(&st, t, x);
        const float *ours = p + off[P_QKVW] + (size_t)3 * C * C;  // layer 1
        int bad = 0;
        for (int o = 0; o < 3 * C; o++)
            for (int i = 0; i < C; i++) bad += x[(size_t)i * 3 * C + o] != ours[(size_t)o * C + i];
        CHECK(!bad, "c_attn.weight is not the transpose of qkvw (%d elements differ)", bad);
        free(x);
    }
    t = st_find(&st, "transformer.h.0.mlp.c_proj.weight");
    CHECK(t && t->shape[0] == (uint64_t)(4 * C) && t->shape[1] == (uint64_t)C, "mlp.c_proj.weight shape");
    if (t) {
        float *x = (float *)xmalloc((size_t)t->numel * sizeof(float));
        st_read_f32(&st, t, x);
        const float *ours = p + off[P_FCPROJW];
        CHECK(x[(size_t)5 * C + 7] == ours[(size_t)7 * 4 * C + 5], "mlp.c_proj.weight is not fcprojw transposed");
        free(x);
    }
    st_close(&st);
    free(p);
}

static void test_mapping_round_trip(void) {
    float *p = random_params(&CFG, 2);
    size_t n = gpt2_num_params(&CFG);
    const char *dir = make_hf_dir("rt32", p, 0, ", \"tie_word_embeddings\": true");
    GPT2Config c;
    int all_bf16 = -1;
    float *q = gpt2_hf_read_dir(dir, &c, &all_bf16);
    CHECK(!memcmp(&c, &CFG, sizeof c), "config: maxT %d V %d Vp %d L %d NH %d C %d", c.max_seq_len, c.vocab_size,
          c.padded_vocab_size, c.num_layers, c.num_heads, c.channels);
    CHECK(all_bf16 == 0, "F32 weights reported as all BF16");
    CHECK(!memcmp(p, q, n * sizeof(float)), "fp32 round trip is not bit-exact");
    free(q);
    // bf16: values already representable survive exactly, and the import says they are all BF16
    for (size_t i = 0; i < n; i++) p[i] = bf16_to_float(float_to_bf16(p[i]));
    dir = make_hf_dir("rt16", p, 1, "");
    q = gpt2_hf_read_dir(dir, &c, &all_bf16);
    CHECK(all_bf16 == 1, "BF16 weights not reported as such");
    CHECK(!memcmp(p, q, n * sizeof(float)), "bf16 round trip is not bit-exact");
    free(q);
    free(p);
}

// A copy of an exported file with its tensors edited: renamed (prefix stripped), one left
// out, one given a wrong shape, an extra one added.
typedef enum { ED_BARE, ED_DROP, ED_SHAPE, ED_EXTRA, ED_LMHEAD, ED_LMHEAD_DIFF, ED_BOTH } Edit;

static void rewrite(const char *src, const char *dst, Edit how, const char *target) {
    StFile st;
    st_open(&st, src);
    StSpec *specs = (StSpec *)xcalloc(2 * st.n + 2, sizeof(StSpec));
    const StTensor **from = (const StTensor **)xcalloc(2 * st.n + 2, sizeof(StTensor *));
    char (*names)[128] = (char (*)[128])xcalloc(2 * st.n + 2, 128);
    size_t m = 0;
    for (size_t i = 0; i < st.n; i++) {
        const StTensor *t = &st.tensors[i];
        if (how == ED_DROP && !strcmp(t->name, target)) continue;
        snprintf(names[m], 128, "%s", how == ED_BARE && !strncmp(t->name, "transformer.", 12) ? t->name + 12 : t->name);
        specs[m].name = names[m];
        specs[m].dtype = t->dtype;
        specs[m].ndim = t->ndim;
        memcpy(specs[m].shape, t->shape, sizeof t->shape);
        if (how == ED_SHAPE && !strcmp(t->name, target)) {  // the transposed shape: same bytes, wrong layout
            specs[m].shape[0] = t->shape[1];
            specs[m].shape[1] = t->shape[0];
        }
        from[m++] = t;
        if ((how == ED_LMHEAD || how == ED_LMHEAD_DIFF || how == ED_BOTH || how == ED_EXTRA) &&
            !strcmp(t->name, "transformer.wte.weight")) {
            snprintf(names[m], 128, "%s", how == ED_EXTRA ? target : how == ED_BOTH ? "wte.weight" : "lm_head.weight");
            specs[m] = specs[m - 1];
            specs[m].name = names[m];
            from[m++] = t;
        }
    }
    StWriter w;
    st_write_begin(&w, dst, specs, m, NULL, 0);
    for (size_t i = 0; i < m; i++) {
        size_t bytes = (size_t)(from[i]->end - from[i]->begin);
        uint8_t *b = (uint8_t *)xmalloc(bytes + 1);
        if (fseeko(st.f, (off_t)(st.data_start + from[i]->begin), SEEK_SET) != 0) fatal("seek");
        xfread(b, 1, bytes, st.f, src);
        if (how == ED_LMHEAD_DIFF && !strcmp(specs[i].name, "lm_head.weight")) b[5] ^= 1;
        st_write_data(&w, b, bytes);
        free(b);
    }
    st_write_end(&w);
    st_close(&st);
    free(specs);
    free(from);
    free(names);
}

static const char *edited_dir(const char *name, const char *src_dir, Edit how, const char *target) {
    const char *dir = tmp_path(name);
    mkdir(dir, 0755);
    put_config(dir, &CFG, "");
    char src[600], dst[600];
    snprintf(src, sizeof src, "%s/model.safetensors", src_dir);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    rewrite(src, dst, how, target);
    return dir;
}

static void test_import_variants(void) {
    float *p = random_params(&CFG, 3);
    size_t n = gpt2_num_params(&CFG);
    const char *src = make_hf_dir("variants", p, 0, "");
    GPT2Config c;
    // bare names, as some GPT-2 files have; lm_head equal to wte is accepted (it is the same tensor)
    static const Edit ok_edits[] = {ED_BARE, ED_LMHEAD};
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "ok_%d", i);
        float *q = gpt2_hf_read_dir(edited_dir(name, src, ok_edits[i], NULL), &c, NULL);
        CHECK(!memcmp(p, q, n * sizeof(float)), "%s: parameters differ", i ? "lm_head" : "bare names");
        free(q);
    }
    // the causal-mask buffers of older files are skipped
    const char *dir = edited_dir("buffers", src, ED_EXTRA, "h.0.attn.bias");
    free(gpt2_hf_read_dir(dir, &c, NULL));
    // sharded: the index names the files, each tensor in one of them
    dir = tmp_path("sharded");
    mkdir(dir, 0755);
    put_config(dir, &CFG, "");
    char path[600], idx[8192] = "{\"metadata\": {}, \"weight_map\": {";
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    rewrite(tmp_path("variants/model.safetensors"), path, ED_DROP, "transformer.wte.weight");
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    {
        StFile st;
        st_open(&st, tmp_path("variants/model.safetensors"));
        const StTensor *t = st_find(&st, "transformer.wte.weight");
        StSpec s = {"transformer.wte.weight", ST_F32, 2, {t->shape[0], t->shape[1]}};
        float *x = (float *)xmalloc((size_t)t->numel * sizeof(float));
        st_read_f32(&st, t, x);
        StWriter w;
        st_write_begin(&w, path, &s, 1, NULL, 0);
        st_write_data(&w, x, (size_t)t->numel * 4);
        st_write_end(&w);
        free(x);
        for (size_t i = 0; i < st.n; i++)
            snprintf(idx + strlen(idx), sizeof idx - strlen(idx), "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                     i ? ", " : "", st.tensors[i].name, st.tensors + i == t ? 2 : 1);
        st_close(&st);
    }
    strcat(idx, "}}");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    put_text(path, idx);
    float *q = gpt2_hf_read_dir(dir, &c, NULL);
    CHECK(!memcmp(p, q, n * sizeof(float)), "sharded: parameters differ");
    free(q);
    free(p);
}

static void test_import_refusals(void) {
    float *p = random_params(&CFG, 4);
    char src[512];  // tmp_path's buffers are reused after eight calls
    snprintf(src, sizeof src, "%s", make_hf_dir("refuse", p, 0, ""));
    free(p);
    expect_failure("missing tensor", child_import, edited_dir("r_drop", src, ED_DROP, "transformer.h.1.mlp.c_fc.bias"),
                   "transformer.h.1.mlp.c_fc.bias", "missing", NULL);
    expect_failure("wrong shape", child_import,
                   edited_dir("r_shape", src, ED_SHAPE, "transformer.h.0.attn.c_attn.weight"),
                   "transformer.h.0.attn.c_attn.weight", "has shape [96, 32], expected [32, 96]", NULL);
    expect_failure("extra tensor", child_import, edited_dir("r_extra", src, ED_EXTRA, "transformer.h.2.ln_1.weight"),
                   "transformer.h.2.ln_1.weight", "not part of", NULL);
    expect_failure("lm_head not tied", child_import, edited_dir("r_lm", src, ED_LMHEAD_DIFF, NULL), "lm_head.weight",
                   "differs from wte", NULL);
    expect_failure("name with and without prefix", child_import, edited_dir("r_both", src, ED_BOTH, NULL),
                   "wte.weight", "both", NULL);
    // the causal-mask buffers are skipped only for the config's layers, spelled as transformers spells them
    static const char *const stray_buffers[] = {"transformer.h.99.attn.bias", "h.2.attn.masked_bias",
                                                "transformer.h.foo.attn.bias", "h.01.attn.bias", "h..attn.bias"};
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "r_buffer_%d", i);
        expect_failure(stray_buffers[i], child_import, edited_dir(name, src, ED_EXTRA, stray_buffers[i]),
                       stray_buffers[i], "not part of", NULL);
    }
    static const struct {
        const char *config, *needle;
    } configs[] = {
        {"{\"model_type\": \"gpt_neo\", \"vocab_size\": 300}", "gpt_neo"},
        {"{\"vocab_size\": 300}", "model_type"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2}",
         "n_head"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 4, \"n_inner\": 96}", "n_inner"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 4, \"activation_function\": \"gelu\"}", "activation_function"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 5}", "divisible"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 4, \"tie_word_embeddings\": false}", "tie_word_embeddings"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 4, \"layer_norm_epsilon\": 1e-6}", "layer_norm_epsilon"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300.5, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 4}", "vocab_size"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 301, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 4}", "transformer.wte.weight"},
        {"{\"model_type\": \"gpt2\", ", "not valid JSON"},
        // "\u0000" must not cut a string short: "gpt2\u0000x" is not "gpt2"
        {"{\"model_type\": \"gpt2\\u0000x\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32,"
         " \"n_layer\": 2, \"n_head\": 4}", "model_type is (a string holding a NUL character)"},
        {"{\"model_type\": \"gpt2\\u0000\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32,"
         " \"n_layer\": 2, \"n_head\": 4}", "NUL"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 4, \"activation_function\": \"gelu_new\\u0000\"}", "activation_function"},
        // each size bounded, named as config.json names it, before anything of that size exists
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 32, \"n_layer\": 1025,"
         " \"n_head\": 4}", "n_layer 1025 is out of range"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_ctx\": 2000000, \"n_embd\": 32, \"n_layer\": 2,"
         " \"n_head\": 4}", "n_ctx 2000000 is out of range"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 65537, \"n_layer\": 2,"
         " \"n_head\": 1}", "n_embd 65537 is out of range"},
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 65536, \"n_layer\": 1024,"
         " \"n_head\": 1}", "n_layer 1024 and n_embd 65536"},
        // a config far larger than its weights: the shapes are refused, nothing of the config's size allocated
        {"{\"model_type\": \"gpt2\", \"vocab_size\": 300, \"n_positions\": 16, \"n_embd\": 2048, \"n_layer\": 300,"
         " \"n_head\": 4}", "transformer.wte.weight has shape [300, 32], expected [300, 2048]"},
    };
    char path[600];
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        snprintf(path, sizeof path, "%s/config.json", src);
        put_text(path, configs[i].config);
        expect_failure(configs[i].needle, child_import, src, "config.json", configs[i].needle, NULL);
    }
    const char *empty = tmp_path("no_weights");
    mkdir(empty, 0755);
    put_config(empty, &CFG, "");
    expect_failure("no weights", child_import, empty, "neither model.safetensors", NULL, NULL);
    expect_failure("no config", child_import, tmp_path("nonexistent_dir"), "config.json", NULL, NULL);
}

// ---------------------------------------------------------------------------
// build/export_hf --import, the program as it is built

#define EXPORT_HF "build/export_hf"

static const char *g_args[8];              // its arguments, NULL-terminated
static rlim_t g_file_limit, g_mem_limit;   // RLIMIT_FSIZE and RLIMIT_AS of its run; 0: none
#define EXPORT_HF_SECONDS 30               // a run that waits (on a FIFO) is killed, and fails its case

static void child_export_hf(const char *unused) {
    (void)unused;
    char *argv[10] = {(char *)EXPORT_HF};
    for (int i = 0; i < 8 && g_args[i]; i++) argv[i + 1] = (char *)g_args[i];
    int quiet = open("/dev/null", O_WRONLY);  // its progress line would break the table of cases
    if (quiet >= 0) dup2(quiet, 1);
    if (g_file_limit) {
        signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails (EFBIG), as on a full disk
        struct rlimit r = {g_file_limit, g_file_limit};
        setrlimit(RLIMIT_FSIZE, &r);
    }
    if (g_mem_limit) {
        struct rlimit r = {g_mem_limit, g_mem_limit};
        setrlimit(RLIMIT_AS, &r);
    }
    alarm(EXPORT_HF_SECONDS);  // kept across execv
    execv(EXPORT_HF, argv);
    fprintf(stderr, "cannot run %s (make build/export_hf): %s\n", EXPORT_HF, strerror(errno));
    _exit(2);
}

static void set_args(const char *a, const char *b, const char *c) {
    memset(g_args, 0, sizeof g_args);
    g_args[0] = a, g_args[1] = b, g_args[2] = c;
}

// An export of CHECKPOINT to OUT_DIR without a tokenizer.
static void set_export_args(const char *ckpt, const char *out) {
    set_args(ckpt, out, "--tokenizer-dir");
    g_args[3] = "none";
}

static void test_import_cli(void) {
    if (!file_exists(EXPORT_HF)) {
        CHECK(0, "%s is missing (make build/export_hf)", EXPORT_HF);
        return;
    }
    float *p = random_params(&CFG, 6);
    const char *dir = make_hf_dir("cli", p, 0, "");
    free(p);
    char dir_tmp[520], dir_slash[520], out[600], out_tmp[620];
    snprintf(dir_tmp, sizeof dir_tmp, "%s.tmp", dir);
    snprintf(dir_slash, sizeof dir_slash, "%s/", dir);
    // an output that cannot take the checkpoint is refused before the conversion
    set_args("--import", dir, dir);
    expect_failure("--import DIR DIR", child_export_hf, NULL, "the directory being imported", NULL, NULL);
    CHECK(!file_exists(dir_tmp), "--import DIR DIR left %s behind", dir_tmp);
    set_args("--import", dir, dir_slash);
    expect_failure("--import DIR DIR/", child_export_hf, NULL, "needs a file name", NULL, NULL);
    CHECK(!file_exists(dir_tmp), "--import DIR DIR/ left %s behind", dir_tmp);
    snprintf(out, sizeof out, "%s/no_such_dir/model.bin", g_dir);
    set_args("--import", dir, out);
    expect_failure("an output in a missing directory", child_export_hf, NULL, "no_such_dir does not exist", NULL,
                   NULL);
    // a write that fails half-way (a full disk) leaves neither the checkpoint nor its temporary
    snprintf(out, sizeof out, "%s/cli_model.bin", g_dir);
    snprintf(out_tmp, sizeof out_tmp, "%s.tmp", out);
    set_args("--import", dir, out);
    g_file_limit = 64 << 10;
    expect_failure("a write that fails", child_export_hf, NULL, "cannot write", "cli_model.bin.tmp", NULL);
    g_file_limit = 0;
    CHECK(!file_exists(out) && !file_exists(out_tmp), "a failed write left %s or its temporary", out);
    char *err;
    int rc = run_child(child_export_hf, NULL, &err);
    CHECK(rc == 0 && file_exists(out) && !file_exists(out_tmp), "the import itself: exit %d: %s", rc, err);
    free(err);
    // a config.json far larger than its weights (60 GB of parameters) is refused by the
    // tensors' shapes, under a memory limit that an allocation of the config's size exceeds
    GPT2Config big = CFG;
    big.num_layers = 300, big.channels = 2048;
    put_config(dir, &big, "");
    snprintf(out, sizeof out, "%s/cli_big.bin", g_dir);
    set_args("--import", dir, out);
    g_mem_limit = (rlim_t)1 << 30;
    expect_failure("config.json of n_layer 300, n_embd 2048 over small weights", child_export_hf, NULL,
                   "model.safetensors: tensor transformer.wte.weight has shape [300, 32], expected [300, 2048]", NULL,
                   NULL);
    g_mem_limit = 0;
    CHECK(!file_exists(out), "a refused import wrote %s", out);
}

// Expects the run of g_args to be refused with the needles, and path to hold what it held.
static void expect_kept(const char *what, const char *path, const char *n1, const char *n2) {
    size_t n0, n;
    uint8_t *before = xread_file(path, &n0);
    expect_failure(what, child_export_hf, NULL, n1, n2, NULL);
    uint8_t *after = xread_file(path, &n);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(n == n0 && !memcmp(before, after, n) && !file_exists(tmp), "%s: %s was changed", what, path);
    free(before), free(after);
}

// Neither direction writes over a file it reads, however the output names it; a model file
// that is not a regular file is refused before it is opened (opening a FIFO waits for a
// writer, forever if none comes).
static void test_inputs_kept_cli(void) {
    if (!file_exists(EXPORT_HF)) {
        CHECK(0, "%s is missing (make build/export_hf)", EXPORT_HF);
        return;
    }
    float *p = random_params(&CFG, 7);
    char dir[520], weights[600], config[600], other[700];
    snprintf(dir, sizeof dir, "%s", make_hf_dir("keep", p, 0, ""));
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(other, sizeof other, "%s/../keep/model.safetensors", dir);
    set_args("--import", dir, weights);
    expect_kept("--import DIR DIR/model.safetensors", weights, "that the import reads", weights);
    set_args("--import", dir, config);
    expect_kept("--import DIR DIR/config.json", config, "that the import reads", config);
    set_args("--import", dir, other);
    expect_kept("--import DIR DIR/../DIR/model.safetensors", weights, other, weights);
    // a sharded directory: each shard and the index are inputs (test_import_variants's directory)
    char sharded[520], shard[600], index[600];
    snprintf(sharded, sizeof sharded, "%s", tmp_path("sharded"));
    snprintf(shard, sizeof shard, "%s/model-00002-of-00002.safetensors", sharded);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", sharded);
    set_args("--import", sharded, shard);
    expect_kept("--import DIR DIR/<a shard>", shard, "that the import reads", shard);
    set_args("--import", sharded, index);
    expect_kept("--import DIR DIR/model.safetensors.index.json", index, "that the import reads", index);
    // an export into a directory that holds the checkpoint under a name the export writes
    const char *out = tmp_path("keep_out");
    mkdir(out, 0755);
    static const char *const names[] = {"model.safetensors", "config.json"};
    for (int i = 0; i < 2; i++) {
        char ckpt[700];
        snprintf(ckpt, sizeof ckpt, "%s/%s", out, names[i]);
        gpt2_checkpoint_write(ckpt, &CFG, p, 0);
        set_export_args(ckpt, out);
        expect_kept(names[i], ckpt, "which the export writes", "choose another OUT_DIR");
        unlink(ckpt);
    }
    // a FIFO as the checkpoint, or as a Hugging Face directory's config or weights
    const char *fifo = tmp_path("model.fifo"), *fifo_out = tmp_path("fifo_out");
    CHECK(mkfifo(fifo, 0644) == 0, "mkfifo %s: %s", fifo, strerror(errno));
    set_export_args(fifo, fifo_out);
    expect_failure("a FIFO as the checkpoint", child_export_hf, NULL, fifo, "is a FIFO", NULL);
    CHECK(!file_exists(fifo_out), "a refused export wrote %s", fifo_out);
    for (int i = 0; i < 2; i++) {
        char fdir[520], path[600];
        snprintf(fdir, sizeof fdir, "%s", make_hf_dir(i ? "fifo_config" : "fifo_weights", p, 0, ""));
        snprintf(path, sizeof path, "%s/%s", fdir, i ? "config.json" : "model.safetensors");
        unlink(path);
        CHECK(mkfifo(path, 0644) == 0, "mkfifo %s: %s", path, strerror(errno));
        set_args("--import", fdir, tmp_path("fifo.bin"));
        expect_failure(path, child_export_hf, NULL, path, "is a FIFO", NULL);
    }
    CHECK(!file_exists(tmp_path("fifo.bin")), "a refused import wrote fifo.bin");
    free(p);
}

// ---------------------------------------------------------------------------
// mutants: the reader may refuse (exit 1) or accept (exit 0), never crash

static void test_mutants(void) {
    float *p = random_params(&CFG, 5);
    const char *src = make_hf_dir("fuzz_seed", p, 1, "");
    free(p);
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    size_t n;
    uint8_t *seed = xread_file(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | seed[i];
    uint8_t *m = (uint8_t *)xmalloc(n + 64);
    uint64_t r = rng_seed(77);
    const char *mut = tmp_path("mutant.safetensors");
    const char *digits = "0123456789,:[]{}\"-e.";
    int crashes = 0, accepted = 0, runs = 400;
    for (int it = 0; it < runs; it++) {
        memcpy(m, seed, n);
        size_t len = n;
        int op = (int)(rng_next_u64(&r) % 6);
        size_t at = 8 + (size_t)(rng_next_u64(&r) % hlen);  // the header is where the decisions are
        if (op == 0) m[at] ^= (uint8_t)(1u << (rng_next_u64(&r) % 8));
        else if (op == 1) m[at] = (uint8_t)digits[rng_next_u64(&r) % strlen(digits)];
        else if (op == 2) len = (size_t)(rng_next_u64(&r) % n);
        else if (op == 3) m[rng_next_u64(&r) % 8] ^= (uint8_t)(1u << (rng_next_u64(&r) % 8));
        else if (op == 4) { memmove(m + at, m + at + 1, len - at - 1); len--; }
        else for (int k = 0; k < 4; k++) m[8 + rng_next_u64(&r) % hlen] = (uint8_t)digits[rng_next_u64(&r) % 10];
        put_file(mut, m, len);
        char *err;
        int rc = run_child(child_read, mut, &err);
        if (rc != 0 && rc != 1) {
            if (!crashes++) CHECK(0, "mutant %d (op %d) crashed the reader (status %d): %.400s", it, op, rc, err);
            char keep[80];
            snprintf(keep, sizeof keep, "build/st_crash_%d.safetensors", it);
            put_file(keep, m, len);
        }
        accepted += rc == 0;
        if (rc == 1) CHECK(strncmp(err, "error: ", 7) == 0, "a refusal without 'error: ': %s", err);
        free(err);
    }
    CHECK(!crashes, "%d of %d mutants crashed the reader (saved as build/st_crash_*.safetensors)", crashes, runs);
    CHECK(accepted > 0 && accepted < runs, "%d of %d mutants accepted: the mutations do not exercise both paths",
          accepted, runs);
    free(m);
    free(seed);
}

static int remove_tree(const char *path) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    return system(cmd);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_export_hf.XXXXXX");
    if (!mkdtemp(g_dir)) fatal("mkdtemp: %s", strerror(errno));
    run_case("json: values, escapes, exact integers", test_json_values);
    run_case("json: refusals and the depth limit", test_json_refusals);
    run_case("safetensors: write, read, F32/BF16/F16", test_write_read);
    run_case("safetensors: each refusal, exit 1 + message", test_refusals);
    run_case("gpt2: export layout (names, transposes)", test_mapping_layout);
    run_case("gpt2: fp32 and bf16 round trips, exact", test_mapping_round_trip);
    run_case("gpt2: import of bare names, lm_head, shards", test_import_variants);
    run_case("gpt2: import refusals (config, weights)", test_import_refusals);
    run_case("export_hf --import: output, cleanup, shapes", test_import_cli);
    run_case("export_hf: no output over an input; FIFOs", test_inputs_kept_cli);
    run_case("safetensors: 400 mutants, no crash", test_mutants);
    if (!g_failed) remove_tree(g_dir);
    else printf("files kept in %s\n", g_dir);
    return test_summary();
}
