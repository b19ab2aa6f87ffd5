// test_sgemm.c: checks common/sgemm.h against a naive double-precision reference.
// Covers all four transpose combinations, beta 0 (C pre-filled with NaN) and 1, odd sizes,
// row strides wider than the matrices (padding must stay untouched), K = 0, the
// matmul_forward/matmul_backward wrappers, and (with OpenMP) bitwise-equal results for
// 1 and 2 threads. Seed from the clock unless given: ./test_sgemm [seed]
//
//   gcc -O3 -march=native -fopenmp -Wall -Wextra dev/test/test_sgemm.c -o build/test_sgemm -lm
//   gcc -O1 -g -march=native -fopenmp -fsanitize=address,undefined dev/test/test_sgemm.c -o build/test_sgemm_asan -lm
//   gcc -O3 -march=native -fopenmp -DUSE_CBLAS dev/test/test_sgemm.c -o build/test_sgemm_cblas -lopenblas -lm
#include "../../common/util.h"
#include "../../common/sgemm.h"
#include <math.h>

static uint64_t rng_state;
static uint64_t rng_next(void) {  // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float rng_uniform(void) { return (float)((rng_next() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static float *rand_buf(size_t n) {
    float *p = (float *)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = rng_uniform();
    return p;
}

#define TOL 1e-5
static int n_pass, n_fail;

static void report(const char *name, double max_err, double scale, int extra_bad) {
    double rel = scale > 0 ? max_err / scale : max_err;
    int ok = rel <= TOL && !extra_bad && !isnan(rel);
    printf("%-58s rel err %.3e%s %s\n", name, rel, extra_bad ? " (padding/NaN violated)" : "",
           ok ? "ok" : "FAIL");
    if (ok) n_pass++; else n_fail++;
}

// element (i,k) of op(X) for X stored row-major with stride ld
static inline double el(const float *X, int ld, int trans, int i, int k) {
    return trans ? X[(size_t)k * ld + i] : X[(size_t)i * ld + k];
}

static const float SENTINEL = 12345.0f;

// one sgemm case; returns nothing, counts pass/fail
static void check_gemm(int ta, int tb, int M, int N, int K, float beta, int pad) {
    int arows = ta ? K : M, acols = ta ? M : K;
    int brows = tb ? N : K, bcols = tb ? K : N;
    int lda = acols + (pad ? rng_int(pad + 1) : 0);
    int ldb = bcols + (pad ? rng_int(pad + 1) : 0);
    int ldc = N + (pad ? rng_int(pad + 1) : 0);
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    float *A = rand_buf((size_t)arows * lda + 1);
    float *B = rand_buf((size_t)brows * ldb + 1);
    float *C = rand_buf((size_t)M * ldc + 1);
    // padding columns of C get a sentinel; beta == 0 gets NaN in the live part
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            float *c = &C[(size_t)i * ldc + j];
            if (j >= N) *c = SENTINEL;
            else if (beta == 0.0f) *c = NAN;
        }
    // The error is judged against the size of the terms summed (sum |a*b| + |beta*c|), the
    // scale of float's rounding error, not against the result: a result that cancels to near
    // zero (one output, beta 1) would otherwise fail on a correct sum.
    double *ref = (double *)xmalloc((size_t)M * N * sizeof(double));
    double max_scale = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0, scale = 0.0;
            for (int k = 0; k < K; k++) {
                double t = el(A, lda, ta, i, k) * el(B, ldb, tb, k, j);
                s += t;
                scale += fabs(t);
            }
            if (beta != 0.0f) {
                s += (double)beta * C[(size_t)i * ldc + j];
                scale += fabs((double)beta * C[(size_t)i * ldc + j]);
            }
            ref[(size_t)i * N + j] = s;
            if (scale > max_scale) max_scale = scale;
        }
    sgemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    double max_err = 0;
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc; j++) {
            float c = C[(size_t)i * ldc + j];
            if (j >= N) { if (c != SENTINEL) bad = 1; continue; }
            double r = ref[(size_t)i * N + j];
            if (isnan(c)) bad = 1;
            double e = fabs(c - r);
            if (e > max_err) max_err = e;
        }
    char name[128];
    snprintf(name, sizeof name, "sgemm ta=%d tb=%d M=%d N=%d K=%d beta=%g ld+%d/%d/%d", ta, tb, M, N,
             K, beta, lda - acols, ldb - bcols, ldc - N);
    // K = 0 with beta 0: no terms at all, so judge the absolute error
    report(name, max_err, max_scale > 0 ? max_scale : 1.0, bad);
    free(A); free(B); free(C); free(ref);
}

// wrappers against the reference, with random initial gradients to check accumulation
static void check_wrappers(int N, int C, int OC, int use_bias, int mask) {
    float *inp = rand_buf((size_t)N * C), *w = rand_buf((size_t)OC * C), *bias = rand_buf(OC);
    float *out = rand_buf((size_t)N * OC), *dout = rand_buf((size_t)N * OC);
    float *dinp = rand_buf((size_t)N * C), *dw = rand_buf((size_t)OC * C), *db = rand_buf(OC);
    double *r_out = (double *)xmalloc((size_t)N * OC * sizeof(double));
    double *r_dinp = (double *)xmalloc((size_t)N * C * sizeof(double));
    double *r_dw = (double *)xmalloc((size_t)OC * C * sizeof(double));
    double *r_db = (double *)xmalloc((size_t)OC * sizeof(double));
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = use_bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            r_out[(size_t)n * OC + o] = s;
        }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = dinp[(size_t)n * C + c];
            for (int o = 0; o < OC; o++) s += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
            r_dinp[(size_t)n * C + c] = s;
        }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double s = dw[(size_t)o * C + c];
            for (int n = 0; n < N; n++) s += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
            r_dw[(size_t)o * C + c] = s;
        }
    for (int o = 0; o < OC; o++) {
        double s = db[o];
        for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
        r_db[o] = s;
    }
    float *dinp0 = (float *)xmalloc((size_t)N * C * sizeof(float));
    float *dw0 = (float *)xmalloc((size_t)OC * C * sizeof(float));
    float *db0 = (float *)xmalloc((size_t)OC * sizeof(float));
    memcpy(dinp0, dinp, (size_t)N * C * sizeof(float));
    memcpy(dw0, dw, (size_t)OC * C * sizeof(float));
    memcpy(db0, db, (size_t)OC * sizeof(float));

    matmul_forward(out, inp, w, use_bias ? bias : NULL, N, C, OC);
    matmul_backward((mask & 1) ? dinp : NULL, (mask & 2) ? dw : NULL, (mask & 4) ? db : NULL, dout,
                    inp, w, N, C, OC);

    struct { const char *what; const float *got; const double *ref; const float *orig; size_t n; int on; } t[4] = {
        {"out", out, r_out, NULL, (size_t)N * OC, 1},
        {"dinp", dinp, r_dinp, dinp0, (size_t)N * C, mask & 1},
        {"dweight", dw, r_dw, dw0, (size_t)OC * C, mask & 2},
        {"dbias", db, r_db, db0, (size_t)OC, mask & 4},
    };
    for (int q = 0; q < 4; q++) {
        char name[128];
        if (!t[q].on) {  // skipped output must be untouched
            int same = memcmp(t[q].got, t[q].orig, t[q].n * sizeof(float)) == 0;
            snprintf(name, sizeof name, "wrapper N=%d C=%d OC=%d %s skipped (NULL)", N, C, OC, t[q].what);
            report(name, 0.0, 1.0, !same);
            continue;
        }
        double max_err = 0, max_ref = 0;
        for (size_t i = 0; i < t[q].n; i++) {
            double e = fabs(t[q].got[i] - t[q].ref[i]);
            if (!(e <= max_err)) max_err = e;  // NaN propagates
            if (fabs(t[q].ref[i]) > max_ref) max_ref = fabs(t[q].ref[i]);
        }
        snprintf(name, sizeof name, "wrapper N=%d C=%d OC=%d %s%s", N, C, OC, t[q].what,
                 q == 0 ? (use_bias ? " (bias)" : " (no bias)") : "");
        report(name, max_err, max_ref, 0);
    }
    free(inp); free(w); free(bias); free(out); free(dout); free(dinp); free(dw); free(db);
    free(r_out); free(r_dinp); free(r_dw); free(r_db); free(dinp0); free(dw0); free(db0);
}

#ifdef _OPENMP
// The same product with 1 and 2 threads must agree bit for bit.
static void check_threads(int ta, int tb, int M, int N, int K) {
    int lda = ta ? M : K, ldb = tb ? K : N;
    float *A = rand_buf((size_t)M * K), *B = rand_buf((size_t)K * N);
    float *C1 = (float *)xmalloc((size_t)M * N * sizeof(float));
    float *C2 = (float *)xmalloc((size_t)M * N * sizeof(float));
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    sgemm(ta, tb, M, N, K, A, lda, B, ldb, 0.0f, C1, N);
    omp_set_num_threads(2);
    sgemm(ta, tb, M, N, K, A, lda, B, ldb, 0.0f, C2, N);
    omp_set_num_threads(saved);
    int same = memcmp(C1, C2, (size_t)M * N * sizeof(float)) == 0;
    char name[128];
    snprintf(name, sizeof name, "1 vs 2 threads bitwise ta=%d tb=%d M=%d N=%d K=%d", ta, tb, M, N, K);
    report(name, 0.0, 1.0, !same);
    free(A); free(B); free(C1); free(C2);
}

// sgemm called from inside a parallel region (each thread its own product) must give the
// same bits as a top-level call: it runs on the calling thread with private buffers.
static void check_nested(void) {
    enum { M = 70, N = 90, K = 300, T = 2 };
    float *A = rand_buf((size_t)T * M * K), *B = rand_buf((size_t)T * K * N);
    float *Cn = (float *)xmalloc((size_t)T * M * N * sizeof(float));
    float *Cs = (float *)xmalloc((size_t)T * M * N * sizeof(float));
    for (int t = 0; t < T; t++)
        sgemm(0, 0, M, N, K, A + (size_t)t * M * K, K, B + (size_t)t * K * N, N, 0.0f, Cs + (size_t)t * M * N, N);
#pragma omp parallel for num_threads(T)
    for (int t = 0; t < T; t++)
        sgemm(0, 0, M, N, K, A + (size_t)t * M * K, K, B + (size_t)t * K * N, N, 0.0f, Cn + (size_t)t * M * N, N);
    int same = memcmp(Cn, Cs, (size_t)T * M * N * sizeof(float)) == 0;
    report("sgemm inside a parallel region == top-level call", 0.0, 1.0, !same);
    free(A); free(B); free(Cn); free(Cs);
}
#endif

int main(int argc, char **argv) {
    long seed_arg = 0;
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    if (argc > 1) {
        if (!parse_long(argv[1], &seed_arg)) fatal("usage: %s [seed]: seed must be an integer, got '%s'", argv[0], argv[1]);
        seed = (uint64_t)seed_arg;
    }
    rng_state = seed;
    printf("test_sgemm: backend %s, seed %llu", sgemm_backend(), (unsigned long long)seed);
#ifdef _OPENMP
    printf(", %d threads", omp_get_max_threads());
#endif
    printf("\n");
    double t0 = wall_seconds();

    // sizes that straddle the micro-tile (6x16 AVX2, 12x32 AVX-512, 4x8 scalar) and the cache
    // blocks (MC 144, KC 256/192, NC 1024; with two threads the split halves come into play)
    static const int shapes[][3] = {
        {1, 1, 1},     {3, 17, 65},   {17, 3, 127},   {65, 127, 3},  {127, 65, 17},
        {6, 16, 8},    {12, 32, 9},   {13, 33, 385},  {300, 301, 299}, {1, 300, 129},
        {300, 1, 129}, {401, 20, 50}, {7, 47, 769},   {50, 6300, 20}, {257, 130, 1000},
        {3, 1100, 100}, {145, 1100, 200},
    };
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < nshapes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int b = 0; b < 2; b++)
                    check_gemm(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], (float)b, (s + b) % 3 ? 7 : 0);
    check_gemm(0, 1, 5, 9, 0, 0.0f, 3);  // K = 0: C = beta*C
    check_gemm(1, 0, 5, 9, 0, 1.0f, 3);
    check_gemm(0, 0, 33, 17, 40, 0.5f, 3);  // general beta

    check_wrappers(64, 48, 144, 1, 7);
    check_wrappers(37, 67, 129, 0, 7);
    check_wrappers(33, 40, 50, 1, 0);  // all gradients skipped
    check_wrappers(33, 40, 50, 1, 2);  // only dweight
    check_wrappers(33, 40, 50, 0, 5);  // dinp and dbias
#ifdef _OPENMP
    check_threads(0, 1, 256, 2304, 96);
    check_threads(1, 0, 770, 96, 256);
    check_threads(0, 0, 64, 200, 1000);
    check_nested();
#endif
    sgemm_release_buffers();
    printf("%d passed, %d failed (seed %llu, %.2f s)\n", n_pass, n_fail, (unsigned long long)seed,
           wall_seconds() - t0);
    return n_fail ? 1 : 0;
}
