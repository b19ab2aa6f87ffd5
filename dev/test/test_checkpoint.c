// test_checkpoint.c: unit tests of common/checkpoint.h: model descriptors, the model FLOPs,
// GPT-2's random initialisation (model_source.h), bf16
// rounding, model checkpoint fp32/bf16 round trips, the debug state and training state
// readers, clear errors (no crash) on corrupted, truncated and mismatched files, the
// checksums and finiteness checks, and -y 1's choice of checkpoint (run_dir.h), a model
// file without its state among the ones it skips with a warning.
// Built with AddressSanitizer and UBSan by `make test`.
#include "testutil.h"
#include "../../common/checkpoint.h"
#include "../../common/train_common.h"
#include "../../common/rng.h"
#include <fcntl.h>
#include <math.h>

static char g_dir[256];
static GPT2Config g_cfg;

static char *path_in(const char *name) {
    char *p = (char *)xmalloc(strlen(g_dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", g_dir, name);
    return p;
}

static float *random_params(const GPT2Config *c, uint64_t *rng) {
    size_t n = gpt2_num_params(c);
    float *p = (float *)xmalloc(n * sizeof(float));
    rng_fill_normal(rng, p, n, 0.0f, 1.0f);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = xfopen(path, "wb");
    if (n) xfwrite(data, 1, n, f, path);
    xfclose(f, path);
}

// ---------------------------------------------------------------------------

static void test_descriptors(void) {
    GPT2Config c;
    CHECK(gpt2_config_from_descriptor("d12", &c) && c.num_layers == 12 && c.num_heads == 12 && c.channels == 768 &&
          c.max_seq_len == 1024 && c.vocab_size == 50257 && c.padded_vocab_size == 50304, "d12");
    CHECK(gpt2_config_from_descriptor("d48", &c) && c.num_layers == 48 && c.num_heads == 25 && c.channels == 1600, "d48");
    CHECK(gpt2_config_from_descriptor("l4h4c256t128", &c) && c.num_layers == 4 && c.num_heads == 4 && c.channels == 256 &&
          c.max_seq_len == 128, "l4h4c256t128");
    CHECK(gpt2_config_from_descriptor("l2h2c64", &c) && c.max_seq_len == 1024, "l2h2c64 default maxT");
    const char *bad[] = {"d13", "l4h4", "l4h4c256x", "l4h4c256t", "model.bin", "", "dd12", "l 2h 2c 64",
                         "l+2h2c64", "l-2h2c64", "l2h2c64t 32", "l2h2c64t-1", "l2h2c1234567890", " l2h2c64"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!gpt2_config_from_descriptor(bad[i], &c), "'%s' must not parse as a descriptor", bad[i]);
    // d12 has 124M parameters without the padding (the number GPT-2 124M is named for)
    gpt2_config_from_descriptor("d12", &c);
    CHECK(gpt2_num_real_params(&c) == 124439808, "d12 real params %zu", gpt2_num_real_params(&c));
    c.channels = 770;
    CHECK(gpt2_config_problem(&c) != NULL, "channels not divisible by heads must be refused");
    // the model FLOPs behind MFU, 6 N + 12 L T C: docs/performance.md's worked figure for d12
    gpt2_config_from_descriptor("d12", &c);
    CHECK(gpt2_flops_per_token(&c, 1024) == 859885056.0, "d12 FLOPs a token at T=1024: %.0f, want 859,885,056",
          gpt2_flops_per_token(&c, 1024));
}

// GPT-2's initialisation: each tensor's sample mean and deviation against the rule (weights
// N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2L)), biases 0, layernorm weights 1,
// wte's padded rows 0); the deviations within 5% (2,048 samples or more a tensor)
static void test_init(void) {
    GPT2Config c;
    gpt2_config_from_descriptor("l4h2c64t32", &c);
    float *p = gpt2_init_random_params(&c, 42);
    size_t sizes[NUM_PARAM_TENSORS];
    gpt2_param_sizes(&c, sizes);
    const double resid = 0.02 / sqrt(2.0 * c.num_layers);
    const float *t = p;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = i == P_WTE ? (size_t)c.vocab_size * c.channels : sizes[i];
        double sum = 0.0, sq = 0.0;
        for (size_t j = 0; j < n; j++) sum += t[j];
        for (size_t j = 0; j < n; j++) sq += (t[j] - sum / n) * (t[j] - sum / n);
        double mean = sum / n, sd = sqrt(sq / n);
        int ln_weight = i == P_LN1W || i == P_LN2W || i == P_LNFW;
        double want = i == P_ATTPROJW || i == P_FCPROJW                         ? resid
                      : i == P_WTE || i == P_WPE || i == P_QKVW || i == P_FCW ? 0.02
                                                                              : 0.0;
        if (want > 0.0)
            CHECK(fabs(sd / want - 1.0) < 0.05 && fabs(mean) < 4.0 * want / sqrt((double)n),
                  "%s: mean %.2e, deviation %.5f, want N(0, %.5f)", GPT2_PARAM_NAMES[i], mean, sd, want);
        else
            CHECK(sd == 0.0 && mean == (ln_weight ? 1.0 : 0.0), "%s: mean %g, deviation %g, want the constant %d",
                  GPT2_PARAM_NAMES[i], mean, sd, ln_weight);
        if (i == P_WTE)
            for (size_t j = n; j < sizes[i]; j++)
                CHECK(t[j] == 0.0f, "wte's padded row %zu is not zero", j / c.channels);
        t += sizes[i];
    }
    free(p);
}

// bf16 rounding against a direct search for the nearest representable value
static void test_bf16_rounding(void) {
    uint64_t rng = rng_seed((uint64_t)time(NULL));
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)rng_next_u64(&rng);
        float f;
        memcpy(&f, &u, 4);
        if (!isfinite(f)) continue;
        uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
        // past the largest finite bf16, the next step up is 2^128 (which rounds to inf)
        double vhi = isinf(bf16_to_float(hi)) ? copysign(ldexp(1.0, 128), f) : (double)bf16_to_float(hi);
        double dlo = fabs((double)bf16_to_float(lo) - f), dhi = fabs(vhi - f);
        uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
        if ((u & 0xffff) == 0) want = lo;
        uint16_t got = float_to_bf16(f);
        if (got != want) {
            CHECK(0, "float_to_bf16(%a) = 0x%04x, nearest-even is 0x%04x", f, got, want);
            break;
        }
    }
    CHECK(isnan(bf16_to_float(float_to_bf16(NAN))), "NaN must stay NaN");
    CHECK(isinf(bf16_to_float(float_to_bf16(INFINITY))), "inf must stay inf");
}

static void test_model_roundtrip(void) {
    uint64_t rng = rng_seed(1);
    float *p = random_params(&g_cfg, &rng);
    size_t n = gpt2_num_params(&g_cfg);
    char *f32 = path_in("model.bin"), *b16 = path_in("model_bf16.bin");
    gpt2_checkpoint_write(f32, &g_cfg, p, 0);
    gpt2_checkpoint_write(b16, &g_cfg, p, 1);
    char *tmp = path_in("model.bin.tmp");
    CHECK(!file_exists(tmp), "the temporary file must be gone after the write");
    free(tmp);
    GPT2Config c;
    float *q = gpt2_checkpoint_read(f32, &c);
    CHECK(memcmp(&c, &g_cfg, sizeof c) == 0, "fp32 config differs");
    CHECK(memcmp(p, q, n * sizeof(float)) == 0, "fp32 params differ");
    free(q);
    q = gpt2_checkpoint_read(b16, &c);
    CHECK(memcmp(&c, &g_cfg, sizeof c) == 0, "bf16 config differs");
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += q[i] != bf16_to_float(float_to_bf16(p[i]));
    CHECK(bad == 0, "%zu bf16 params differ from the rounded fp32 values", bad);
    free(q);
    free(p);
    free(f32);
    free(b16);
}

// corrupted checkpoints: each must fail with status 1 and a message naming the file
static void read_checkpoint_child(const char *path) {
    GPT2Config c;
    free(gpt2_checkpoint_read(path, &c));
}

static void corrupt_and_expect(const char *name, void (*mutate)(uint8_t *buf, size_t *len), const char *what) {
    size_t len;
    char *src = path_in("model.bin");
    uint8_t *buf = xread_file(src, &len);
    free(src);
    buf = (uint8_t *)xrealloc(buf, len + 64);
    mutate(buf, &len);
    char *p = path_in("mutant.bin");  // a name holding none of the words looked for
    write_bytes(p, buf, len);
    expect_failure(name, read_checkpoint_child, p, p, what, NULL);
    free(buf);
    free(p);
}

static void set_int(uint8_t *buf, int idx, int v) { memcpy(buf + 4 * idx, &v, 4); }
static void m_magic(uint8_t *b, size_t *n) { (void)n; set_int(b, 0, 12345); }
static void m_version(uint8_t *b, size_t *n) { (void)n; set_int(b, 1, 4); }
static void m_truncate(uint8_t *b, size_t *n) { (void)b; *n -= 10; }
static void m_extra(uint8_t *b, size_t *n) { memset(b + *n, 0, 7); *n += 7; }
static void m_header_only(uint8_t *b, size_t *n) { (void)b; *n = 100; }
static void m_heads(uint8_t *b, size_t *n) { (void)n; set_int(b, 5, 3); }
static void m_layers(uint8_t *b, size_t *n) { (void)n; set_int(b, 4, -2); }
static void m_padded(uint8_t *b, size_t *n) { (void)n; set_int(b, 7, 10); }
static void m_padded_by_one(uint8_t *b, size_t *n) {  // the padded vocabulary one short of the vocabulary
    (void)n;
    int v;
    memcpy(&v, b + 4 * 3, 4);
    set_int(b, 7, v - 1);
}
static void m_empty(uint8_t *b, size_t *n) { (void)b; *n = 0; }
static void m_flip_body(uint8_t *b, size_t *n) { b[*n - 5] ^= 0x10; }
// llm.c's files have no checksum: the values themselves are checked
static void m_untag(uint8_t *b) { set_int(b, CKSUM_TAG_SLOT, 0); set_int(b, CKSUM_SLOT, 0); }
static void m_nan_body_untagged(uint8_t *b, size_t *n) {
    m_untag(b);
    for (size_t i = HEADER_INTS * 4; i + 4 <= *n; i += 4) { float f = NAN; memcpy(b + i, &f, 4); }
}
static void m_random_body_untagged(uint8_t *b, size_t *n) {
    m_untag(b);
    uint64_t rng = rng_seed((uint64_t)time(NULL));
    for (size_t i = HEADER_INTS * 4; i < *n; i++) b[i] = (uint8_t)rng_next_u64(&rng);
}

// the checksum is in our files, and a file without it (llm.c's) still loads
static void test_checksums(void) {
    uint64_t rng = rng_seed(3);
    float *p = random_params(&g_cfg, &rng);
    char *f = path_in("model_ck.bin"), *g = path_in("model_llmc.bin");
    uint32_t crc = gpt2_checkpoint_write(f, &g_cfg, p, 1);
    size_t len;
    uint8_t *buf = xread_file(f, &len);
    int h[HEADER_INTS];
    memcpy(h, buf, sizeof h);
    CHECK(h[CKSUM_TAG_SLOT] == CKSUM_TAG && (uint32_t)h[CKSUM_SLOT] == crc, "tag and checksum in the header");
    set_int(buf, CKSUM_SLOT, 0);
    CHECK(crc32c_update(0, buf, len) == crc, "the checksum is CRC-32C of the file with its slot zero");
    m_untag(buf);
    write_bytes(g, buf, len);
    GPT2Config c;
    float *q = gpt2_checkpoint_read(g, &c);
    CHECK(q[0] == bf16_to_float(float_to_bf16(p[0])), "a file without a checksum loads");
    free(q);
    uint32_t mcrc = 1;
    char why[256];
    CHECK(model_file_problem(f, &mcrc, why, sizeof why) == NULL && mcrc == crc, "model_file_problem on a good file");
    CHECK(crc32c_update(0, "123456789", 9) == 0xe3069283u, "CRC-32C check value");
    free(buf); free(p); free(f); free(g);
}

static void test_corrupted_checkpoints(void) {
    corrupt_and_expect("bad_magic.bin", m_magic, "magic");
    corrupt_and_expect("bad_version.bin", m_version, "version");
    corrupt_and_expect("truncated.bin", m_truncate, "truncated");
    corrupt_and_expect("extra.bin", m_extra, "bytes");
    corrupt_and_expect("header_only.bin", m_header_only, "header");
    corrupt_and_expect("bad_heads.bin", m_heads, "divisible");
    corrupt_and_expect("bad_layers.bin", m_layers, "num_layers");
    corrupt_and_expect("bad_padded.bin", m_padded, "padded");
    corrupt_and_expect("padded_one_short.bin", m_padded_by_one, "padded");
    corrupt_and_expect("empty.bin", m_empty, "header");
    corrupt_and_expect("body_flipped.bin", m_flip_body, "checksum mismatch");
    corrupt_and_expect("nan_body_no_checksum.bin", m_nan_body_untagged, "non-finite");
    corrupt_and_expect("random_body_no_checksum.bin", m_random_body_untagged, "non-finite");
    char *missing = path_in("no_such_file.bin");
    expect_failure("missing file", read_checkpoint_child, missing, missing, "cannot open", NULL);
    free(missing);
}

// debug state v3 written by hand, read back; then truncated
static void write_debug_state(const char *path, int B, int T, int nsteps) {
    size_t BT = (size_t)B * T, V = (size_t)g_cfg.vocab_size, np = gpt2_num_params(&g_cfg);
    int h[HEADER_INTS] = {0};
    h[0] = DEBUG_STATE_MAGIC; h[1] = 3; h[2] = B; h[3] = T; h[4] = (int)V; h[5] = nsteps;
    FILE *f = xfopen(path, "wb");
    xfwrite(h, 4, HEADER_INTS, f, path);
    for (size_t i = 0; i < 2 * BT; i++) { int t = (int)(i % V); xfwrite(&t, 4, 1, f, path); }
    float *zeros = (float *)xcalloc(BT * V + 1 + np + (size_t)nsteps + 8, sizeof(float));
    for (int i = 0; i < nsteps; i++) zeros[BT * V + 1 + np + i] = 10.0f - i;
    xfwrite(zeros, 4, BT * V + 1 + np + (size_t)nsteps + 8, f, path);
    xfclose(f, path);
    free(zeros);
}

static void read_debug_child(const char *path) {
    DebugState d;
    debug_state_read(path, &g_cfg, &d);
    debug_state_free(&d);
}

static void test_debug_state(void) {
    char *p = path_in("debug_state.bin");
    write_debug_state(p, 2, 8, 3);
    DebugState d;
    debug_state_read(p, &g_cfg, &d);
    CHECK(d.B == 2 && d.T == 8 && d.nsteps == 3 && d.V == g_cfg.vocab_size, "header fields");
    CHECK(d.x[5] == 5 && d.losses[2] == 8.0f, "payload");
    debug_state_free(&d);
    size_t len;
    uint8_t *buf = xread_file(p, &len);
    char *q = path_in("debug_truncated.bin");
    write_bytes(q, buf, len - 4);
    expect_failure("truncated debug state", read_debug_child, q, q, "expected", NULL);
    write_debug_state(q, 2, g_cfg.max_seq_len + 1, 0);
    expect_failure("debug state T > maxT", read_debug_child, q, q, "does not fit", NULL);
    const int B = 2, T = 8, at[2] = {HEADER_INTS + 3, HEADER_INTS + B * T + 5};  // an input, a target
    for (int i = 0; i < 2; i++) {
        uint8_t *bad = (uint8_t *)xmalloc(len);
        memcpy(bad, buf, len);
        set_int(bad, at[i], g_cfg.vocab_size);  // one past the last token id
        write_bytes(q, bad, len);
        expect_failure(i ? "debug state target id == V" : "debug state input id == V", read_debug_child, q, q,
                       "token id out of range", NULL);
        free(bad);
    }
    free(buf); free(p); free(q);
}

static TrainState make_state(size_t n, int master) {
    TrainState s;
    memset(&s, 0, sizeof s);
    s.n = n;
    s.world_size = 2;
    s.rank = 1;
    s.loader_pos_bytes = 24;
    s.m = (float *)xcalloc(n, 4);
    s.v = (float *)xcalloc(n, 4);
    s.master = master ? (float *)xcalloc(n, 4) : NULL;
    return s;
}

static void free_state(TrainState *s) { free(s->m); free(s->v); free(s->master); free(s->fp8); }

static void read_state_fp8_child(const char *path) {
    TrainState s = make_state(100, 0);
    train_state_read(path, &s);
}

// A state file as another version's writer would stamp it: the version changed and the
// checksum made again over the file (the header with its checksum slot zeroed, then the body)
static void restamp_version(uint8_t *buf, size_t len, int version) {
    set_int(buf, 1, version);
    set_int(buf, CKSUM_SLOT, 0);
    set_int(buf, CKSUM_SLOT, (int)crc32c_update(0, buf, len));
}

// The FP8 scaling state (version 3): written, read back bit for bit (non-finite entries,
// which skipped steps leave in an amax history, included); a version 2 file, which has none,
// still reads, as none
static void test_train_state_fp8(void) {
    TrainState s = make_state(100, 0);
    s.fp8_n = 50;
    s.fp8 = (float *)xmalloc(50 * sizeof(float));
    for (int i = 0; i < 50; i++) s.fp8[i] = (float)i * 0.25f - 3.0f;
    s.fp8[7] = NAN;
    s.fp8[8] = INFINITY;
    char *p = path_in("state_fp8.bin");
    train_state_write(p, &s);
    TrainState r = make_state(100, 0);
    train_state_read(p, &r);
    CHECK(r.fp8_n == 50 && r.fp8 && !memcmp(r.fp8, s.fp8, 50 * sizeof(float)), "FP8 state read back bit for bit");
    free_state(&r);
    TrainState z = make_state(100, 0);
    train_state_write(p, &z);  // no FP8 state, as a run without --fp8 delayed scaling writes
    size_t len;
    uint8_t *buf = xread_file(p, &len);
    CHECK(len == (size_t)train_state_bytes(3, 100, 0, 0), "a state without FP8 scaling: %zu bytes", len);
    restamp_version(buf, len, 2);
    write_bytes(p, buf, len);
    r = make_state(100, 0);
    train_state_read(p, &r);
    CHECK(r.fp8_n == 0 && r.fp8 == NULL && r.has_ext, "a version 2 state reads, without FP8 state");
    free_state(&r);
    // version 1 has no outlier windows and no metrics file length (-1: unknown); the log's stays
    TrainState o = make_state(100, 0);
    o.log_bytes = 777;
    o.json_bytes = 4242;
    train_state_write(p, &o);
    size_t len1;
    uint8_t *buf1 = xread_file(p, &len1);
    len1 = (size_t)train_state_bytes(1, 100, 0, 0);
    restamp_version(buf1, len1, 1);
    write_bytes(p, buf1, len1);
    r = make_state(100, 0);
    train_state_read(p, &r);
    CHECK(r.json_bytes == -1 && r.log_bytes == 777 && r.recent_loss.count == 0 && r.fp8_n == 0,
          "a version 1 state reads: metrics length %lld, log length %lld, window %d", (long long)r.json_bytes,
          (long long)r.log_bytes, r.recent_loss.count);
    free_state(&r);
    free_state(&o);
    free(buf1);
    restamp_version(buf, len, 4);
    write_bytes(p, buf, len);
    expect_failure("state of a version from the future", read_state_fp8_child, p, p, "not supported", NULL);
    set_int(buf, 69, -5);
    restamp_version(buf, len, 3);
    write_bytes(p, buf, len);
    expect_failure("state with a negative FP8 size", read_state_fp8_child, p, p, "impossible FP8", NULL);
    free(buf); free(p);
    free_state(&s); free_state(&z);
}

static void read_state_child(const char *path) {
    TrainState s = make_state(1000, 1);
    train_state_read(path, &s);
}

static void read_state_wrong_n_child(const char *path) {
    TrainState s = make_state(999, 1);
    train_state_read(path, &s);
}

static void read_state_no_master_child(const char *path) {
    TrainState s = make_state(1000, 0);
    train_state_read(path, &s);
}

static void read_state_wrong_rank_child(const char *path) {
    TrainState s = make_state(1000, 1);
    s.world_size = 4;
    train_state_read(path, &s);
}

static void test_train_state(void) {
    uint64_t rng = rng_seed(7);
    TrainState s = make_state(1000, 1);
    rng_fill_normal(&rng, s.m, 1000, 0, 1);
    rng_fill_normal(&rng, s.v, 1000, 0, 1);
    for (int i = 0; i < 1000; i++) s.v[i] *= s.v[i];  // a second moment: non-negative
    rng_fill_normal(&rng, s.master, 1000, 0, 1);
    s.log_bytes = 123456789012LL; s.skipped_in_a_row = 3; s.model_crc = 0xdeadbeefu;
    for (int i = 0; i < STATE_SETTINGS; i++) s.settings[i] = i * 11 - 5;
    s.step = 17; s.rng = 0x123456789abcdefULL; s.loss_scale = 65536.0f; s.loss_scale_good_steps = 5;
    for (int i = 0; i < 24; i++) s.loader_pos[i] = (uint8_t)(i * 7);
    char *p = path_in("state.bin");
    train_state_write(p, &s);
    TrainState r = make_state(1000, 1);
    train_state_read(p, &r);
    CHECK(r.step == 17 && r.rng == s.rng && r.loss_scale == 65536.0f && r.loss_scale_good_steps == 5, "scalars");
    CHECK(!memcmp(r.m, s.m, 4000) && !memcmp(r.v, s.v, 4000) && !memcmp(r.master, s.master, 4000), "arrays");
    CHECK(!memcmp(r.loader_pos, s.loader_pos, 24), "loader position");
    CHECK(r.has_ext && r.log_bytes == s.log_bytes && r.skipped_in_a_row == 3 && r.model_crc == 0xdeadbeefu &&
          !memcmp(r.settings, s.settings, sizeof s.settings), "log length, skipped updates, model checksum, settings");
    expect_failure("state of another size", read_state_wrong_n_child, p, p, "optimizer elements", NULL);
    expect_failure("state of another rank count", read_state_wrong_rank_child, p, p, "same number of ranks", NULL);
    expect_failure("state with master weights, run without", read_state_no_master_child, p, p,
                   "master weights present in the file but not used", NULL);
    size_t len;
    uint8_t *buf = xread_file(p, &len);
    char *q = path_in("state_truncated.bin");
    write_bytes(q, buf, len - 100);
    expect_failure("truncated state", read_state_child, q, q, "truncated", NULL);
    uint8_t *copy = (uint8_t *)xmalloc(len);
    memcpy(copy, buf, len);
    copy[len - 3] ^= 1;
    write_bytes(q, copy, len);
    expect_failure("state with a flipped bit", read_state_child, q, q, "checksum mismatch", NULL);
    uint64_t r2 = rng_seed((uint64_t)time(NULL));
    for (size_t i = HEADER_INTS * 4; i < len; i++) copy[i] = (uint8_t)rng_next_u64(&r2);
    write_bytes(q, copy, len);
    expect_failure("state with a random body", read_state_child, q, q, "checksum mismatch", NULL);
    memset(copy + 4 * CKSUM_TAG_SLOT, 0, 8);  // the tag lost: a version 2 state always has one
    write_bytes(q, copy, len);
    expect_failure("state without its checksum tag", read_state_child, q, q, "checksum tag", NULL);
    set_int(copy, 1, 1);  // as an older writer's (version 1) file, which has no outlier windows: the values
    write_bytes(q, copy, len - 4 * 2 * OUTLIER_WINDOW);  // themselves are checked
    expect_failure("version 1 state with a random body", read_state_child, q, q, "corrupt", NULL);
    free(copy);
    s.v[10] = -1.0f;
    train_state_write(q, &s);
    expect_failure("state with a negative second moment", read_state_child, q, q, "negative", NULL);
    s.v[10] = 1.0f;
    s.m[20] = NAN;
    train_state_write(q, &s);
    expect_failure("state with a NaN moment", read_state_child, q, q, "non-finite", NULL);
    free(buf); free(p); free(q);
    free_state(&s); free_state(&r);
}

// -y 1's choice: the newest intact checkpoint, each skipped one named
static void checkpoint_paths(const char *dir, int step, char *mp, char *sp, size_t cap) {
    path_join(mp, cap, dir, "model_%08d.bin", step);
    path_join(sp, cap, dir, "state_%08d.bin", step);
}

static int pick_in(const char *dir) {
    RunDir rd;
    run_dir_open(&rd, dir, 0, 0);
    int step = resume_pick_step(&rd, 0, 1, NULL, NULL);
    close(rd.fd);
    return step;
}

static void write_pair(const char *dir, int step, int name_step, const float *params) {
    char mp[4096], sp[4096];
    checkpoint_paths(dir, name_step, mp, sp, sizeof mp);
    TrainState s = make_state(1000, 0);
    s.world_size = 1; s.rank = 0; s.step = step;
    s.model_crc = gpt2_checkpoint_write(mp, &g_cfg, params, 0);
    train_state_write(sp, &s);
    free_state(&s);
}

static void pick_child(const char *dir) { printf("%d\n", pick_in(dir)); }

// resume_pick_step with its warnings (checked once, in a child) kept off the test's output
static int pick_quiet(const char *dir) {
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    int step = pick_in(dir);
    fflush(stderr);
    dup2(saved, 2);
    close(null);
    close(saved);
    return step;
}

static void test_resume_pick(void) {
    char *dir = path_in("run");
    mkdir(dir, 0755);
    CHECK(pick_quiet(dir) == -1, "no checkpoint: start fresh");
    // a crash during the first checkpoint leaves only temporary files: nothing to resume
    char tmp_name[64];
    for (int i = 0; i < 3; i++) {
        const char *name[3] = {"state_00000005.bin.tmp", "model_00000005.bin.tmp", "state_00000005.binx"};
        snprintf(tmp_name, sizeof tmp_name, "run/%s", name[i]);
        char *t = path_in(tmp_name);
        write_bytes(t, "x", 1);
        free(t);
    }
    CHECK(pick_quiet(dir) == -1, "temporary and misnamed files only: start fresh");
    uint64_t rng = rng_seed(5);
    float *p = random_params(&g_cfg, &rng), *p2 = random_params(&g_cfg, &rng);
    write_pair(dir, 3, 3, p);
    write_pair(dir, 6, 6, p);
    write_pair(dir, 9, 9, p);
    CHECK(pick_quiet(dir) == 9, "newest intact");
    // a checkpoint stopped between its model and its state: skipped with a warning (the
    // states alone are listed, so the model file needs its own look)
    char mp[4096], sp[4096];
    checkpoint_paths(dir, 10, mp, sp, sizeof mp);
    gpt2_checkpoint_write(mp, &g_cfg, p, 0);
    char *err;
    run_child(pick_child, dir, &err);
    CHECK(strstr(err, "warning: -y 1: skipping the checkpoint of step 10") && strstr(err, "00000010.bin is missing"),
          "warns about the model of step 10 without its state: %s", err);
    free(err);
    CHECK(pick_quiet(dir) == 9, "model without its state: falls back to 9");
    remove(mp);
    checkpoint_paths(dir, 9, mp, sp, sizeof mp);
    size_t len;
    uint8_t *buf = xread_file(sp, &len);
    buf[len - 1] ^= 4;
    write_bytes(sp, buf, len);
    free(buf);
    run_child(pick_child, dir, &err);
    CHECK(strstr(err, "skipping the checkpoint of step 9") && strstr(err, "checksum"), "warns about step 9: %s", err);
    free(err);
    CHECK(pick_quiet(dir) == 6, "corrupt state of step 9: falls back to 6");
    write_pair(dir, 6, 12, p);  // step 6's files renamed to step 12
    CHECK(pick_quiet(dir) == 6, "renamed pair: its header's step is not its name's");
    checkpoint_paths(dir, 15, mp, sp, sizeof mp);
    write_pair(dir, 15, 15, p);
    gpt2_checkpoint_write(mp, &g_cfg, p2, 0);  // another model under the state's name
    CHECK(pick_quiet(dir) == 6, "state paired with another model file: skipped");
    checkpoint_paths(dir, 18, mp, sp, sizeof mp);
    write_pair(dir, 18, 18, p);
    if (truncate(mp, 2000) != 0) CHECK(0, "truncate");
    CHECK(pick_quiet(dir) == 6, "truncated model: skipped");
    checkpoint_paths(dir, 21, mp, sp, sizeof mp);
    write_pair(dir, 21, 21, p);
    remove(mp);
    CHECK(pick_quiet(dir) == 6, "state without its model: skipped");
    for (int st = 3; st <= 6; st += 3) {
        checkpoint_paths(dir, st, mp, sp, sizeof mp);
        remove(mp);
    }
    int rc = run_child(pick_child, dir, &err);
    CHECK(rc == 1 && strstr(err, "error: -y 1: none of the 7 checkpoint(s)"), "none intact: exit %d, %s", rc, err);
    free(err);
    free(p); free(p2); free(dir);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "build/test_checkpoint_%d", (int)getpid());
    mkdir("build", 0755);
    if (mkdir(g_dir, 0755) != 0) fatal("cannot create %s", g_dir);
    // a small shape with a non-GPT-2 vocabulary, padded to 128
    g_cfg.max_seq_len = 16; g_cfg.vocab_size = 300; g_cfg.padded_vocab_size = 384;
    g_cfg.num_layers = 2; g_cfg.num_heads = 2; g_cfg.channels = 8;
    run_case("model descriptors", test_descriptors);
    run_case("GPT-2's initialisation, tensor by tensor", test_init);
    run_case("bf16 round-to-nearest-even", test_bf16_rounding);
    run_case("model checkpoint fp32/bf16 round trip", test_model_roundtrip);
    run_case("corrupted checkpoints fail clearly", test_corrupted_checkpoints);
    run_case("debug state v3 read, truncated, bad T", test_debug_state);
    run_case("training state round trip and mismatches", test_train_state);
    run_case("training state: FP8 section, version 2", test_train_state_fp8);
    run_case("checksums: ours checked, llm.c's files load", test_checksums);
    run_case("-y 1 picks the newest intact checkpoint", test_resume_pick);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return test_summary();
}
