// test_rng.c: the weight initialisation's normal values (common/rng.h). rng_fill_normal
// fills chunks of pairs in parallel from start states jumped ahead by a GF(2) matrix power;
// each check holds it to one sequential Box-Muller pass written here from rng_next_u64
// alone: every value bit for bit and the final state, at lengths around the chunk size
// (odd ones too: the last pair draws two and keeps one), at 1, 2 and 7 threads; the jump
// against k single draws; and the values' mean and deviation as a normal's.
#include "testutil.h"
#include "../../common/rng.h"
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// the sequential pass, independent of rng.h's pair helper
static void reference_fill(uint64_t *state, float *out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(rng_next_u64(state) >> 11) + 1.0) / 9007199254740993.0;
        double u2 = (double)(rng_next_u64(state) >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        out[i] = (float)(mean + std * r * cos(2.0 * M_PI * u2));
        if (i + 1 < n) out[i + 1] = (float)(mean + std * r * sin(2.0 * M_PI * u2));
    }
}

static void test_jump(void) {
    const uint64_t ks[] = {0, 1, 2, 63, 64, 65, 1000, 2 * RNG_NORMAL_CHUNK_PAIRS, 1234567};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        uint64_t s = rng_seed(42 + i), want = s;
        for (uint64_t k = 0; k < ks[i]; k++) rng_next_u64(&want);
        RngJump m = rng_jump_draws(ks[i]);
        uint64_t got = rng_jump_apply(&m, s);
        CHECK(got == want, "%llu draws: jumped to %016llx, drawn to %016llx", (unsigned long long)ks[i],
              (unsigned long long)got, (unsigned long long)want);
    }
}

// rng_fill_normal at n values with `threads` threads against the sequential pass
static int same_as_sequential(size_t n, int threads) {
#ifdef _OPENMP
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    float *got = (float *)xmalloc((n + 1) * sizeof(float)), *want = (float *)xmalloc((n + 1) * sizeof(float));
    got[n] = want[n] = -7.0f;  // the slot past the end stays as it was
    uint64_t s1 = rng_seed(n), s2 = s1;
    rng_fill_normal(&s1, got, n, 0.5f, 0.02f);
    reference_fill(&s2, want, n, 0.5f, 0.02f);
    int ok = s1 == s2 && memcmp(got, want, (n + 1) * sizeof(float)) == 0;
    size_t bad = 0;
    while (bad < n && got[bad] == want[bad]) bad++;
    CHECK(ok, "n %zu, %d threads: state %s, first differing value at %zu of %zu%s", n, threads,
          s1 == s2 ? "same" : "differs", bad, n, got[n] == -7.0f ? "" : ", wrote past the end");
    free(got);
    free(want);
    return ok;
}

static void test_fill_lengths(void) {
    const size_t K = 2 * RNG_NORMAL_CHUNK_PAIRS;  // values per chunk
    const size_t ns[] = {0, 1, 2, 3, K - 1, K, K + 1, K + 2, 2 * K - 1, 3 * K, 3 * K + 1, 5 * K + 12345};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) same_as_sequential(ns[i], 2);
}

static void test_fill_threads(void) {
    const int threads[] = {1, 2, 7};
    for (int i = 0; i < 3; i++) same_as_sequential(9 * 2 * RNG_NORMAL_CHUNK_PAIRS + 3, threads[i]);
}

// consecutive fills continue one stream: two fills equal one fill of both lengths when the
// first length is even (an odd one discards its last pair's second value)
static void test_fill_continues(void) {
    const size_t a = 3 * 2 * RNG_NORMAL_CHUNK_PAIRS + 10, b = 2 * RNG_NORMAL_CHUNK_PAIRS + 7;
    float *x = (float *)xmalloc((a + b) * sizeof(float)), *y = (float *)xmalloc((a + b) * sizeof(float));
    uint64_t s1 = rng_seed(5), s2 = s1;
    rng_fill_normal(&s1, x, a, 0, 1);
    rng_fill_normal(&s1, x + a, b, 0, 1);
    reference_fill(&s2, y, a + b, 0, 1);
    CHECK(s1 == s2 && memcmp(x, y, (a + b) * sizeof(float)) == 0, "two fills differ from one of both lengths");
    free(x);
    free(y);
}

// 4M values of normal(0.1, 2): mean within 5 standard errors, deviation within 1%
static void test_fill_moments(void) {
    const size_t n = (size_t)1 << 22;
    float *x = (float *)xmalloc(n * sizeof(float));
    uint64_t s = rng_seed(7);
    rng_fill_normal(&s, x, n, 0.1f, 2.0f);
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    double mean = sum / n;
    for (size_t i = 0; i < n; i++) sq += (x[i] - mean) * (x[i] - mean);
    double sd = sqrt(sq / n);
    printf("(mean %.5f, sd %.5f) ", mean, sd);
    CHECK(fabs(mean - 0.1) < 5 * 2.0 / sqrt((double)n), "mean %g, expected 0.1", mean);
    CHECK(fabs(sd - 2.0) < 0.02, "deviation %g, expected 2", sd);
    free(x);
}

int main(void) {
    run_case("jump ahead = single draws", test_jump);
    run_case("fill: lengths around the chunk size", test_fill_lengths);
    run_case("fill: 1, 2, 7 threads", test_fill_threads);
    run_case("fill: consecutive fills, one stream", test_fill_continues);
    run_case("fill: mean and deviation", test_fill_moments);
    return test_summary();
}
