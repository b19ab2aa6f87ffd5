// test_fp8_host.cu: common/fp8.h on the CPU (no GPU needed): the decoders against values
// computed from the bit fields by the format definition (and CUDA's own decoder), every
// code's round trip, round-to-nearest-even at every midpoint between neighbouring codes
// and one float either side, saturation, NaN and the values that flush to zero or to
// subnormals; our encoder bit for bit against CUDA's __nv_cvt_float_to_fp8(x,
// __NV_SATFINITE, ...) (host code in cuda_fp8.h) over a strided sweep of all 2^32 float
// bit patterns, a dense sweep of the fp8 range and every midpoint; the scale recipe; and
// kernels/fp8.cuh's refusals of matmuls cuBLASLt cannot run (decided before any GPU call).
// Each case prints how many comparisons it made; the first mismatches are listed.
#include "dev/test/testutil.h"
#include "common/fp8.h"
#include "kernels/fp8.cuh"
#include <cuda_fp8.h>
#include <float.h>

static long g_compared;  // comparisons made by the running case

static void run_counted(const char *name, void (*fn)(void)) {
    printf("%-58s", name);
    fflush(stdout);
    g_compared = 0;
    g_case_failed = 0;
    fn();
    if (g_case_failed) {
        g_failed++;
        printf("  FAIL %s: %d of %ld comparisons failed\n", name, g_case_failed, g_compared);
    } else {
        g_passed++;
        printf("ok (%ld compared)\n", g_compared);
    }
    fflush(stdout);
}

static const Fp8Format FORMATS[2] = {FP8_E4M3, FP8_E5M2};
static const char *NAMES[2] = {"E4M3", "E5M2"};
static const uint8_t MAXCODE[2] = {0x7E, 0x7B};

// The value of code c from its fields, by the definition: (-1)^s 2^(e - bias) (1 + m / 2^M),
// subnormals (e = 0) 2^(1 - bias) (m / 2^M); E4M3's S.1111.111 is NaN, E5M2's top exponent
// is inf (m = 0) or NaN.
static double value_by_definition(int c, Fp8Format f) {
    int E = f == FP8_E4M3 ? 4 : 5, M = 8 - 1 - E, bias = (1 << (E - 1)) - 1;
    int s = c >> 7, e = (c >> M) & ((1 << E) - 1), m = c & ((1 << M) - 1);
    if (f == FP8_E4M3 && e == 15 && m == 7) return NAN;
    if (f == FP8_E5M2 && e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
    double v = e == 0 ? ldexp((double)m / (1 << M), 1 - bias) : ldexp(1.0 + (double)m / (1 << M), e - bias);
    return s ? -v : v;
}

static uint8_t cuda_encode(float x, Fp8Format f) {
    return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, f == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
}
static float cuda_decode(uint8_t c, Fp8Format f) {
    __half_raw h = __nv_cvt_fp8_to_halfraw(c, f == FP8_E4M3 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(h));
}

static int same_value(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void test_decode(void) {
    for (int fi = 0; fi < 2; fi++) {
        Fp8Format f = FORMATS[fi];
        for (int c = 0; c < 256; c++) {
            double want = value_by_definition(c, f);
            float got = fp8_to_float((uint8_t)c, f);
            g_compared += 2;
            CHECK(same_value(got, want), "%s decode(0x%02x) = %g, the definition gives %g", NAMES[fi], c, got, want);
            float cu = cuda_decode((uint8_t)c, f);
            CHECK(same_value(got, cu), "%s decode(0x%02x) = %g, CUDA's gives %g", NAMES[fi], c, got, cu);
        }
    }
    // the landmarks the header states
    g_compared += 4;
    CHECK(fp8_e4m3_to_float(0x7E) == 448.0f && fp8_e4m3_to_float(0x01) == ldexpf(1, -9), "E4M3 max / min subnormal");
    CHECK(fp8_e5m2_to_float(0x7B) == 57344.0f && fp8_e5m2_to_float(0x01) == ldexpf(1, -16), "E5M2 max / min sub");
    CHECK(fp8_format_max(FP8_E4M3) == fp8_e4m3_to_float(0x7E), "FP8_E4M3_MAX is the largest E4M3 value");
    CHECK(fp8_format_max(FP8_E5M2) == fp8_e5m2_to_float(0x7B), "FP8_E5M2_MAX is the largest E5M2 value");
}

// every code that is a number comes back from its value; E5M2's infinities saturate
static void test_round_trip(void) {
    for (int fi = 0; fi < 2; fi++) {
        Fp8Format f = FORMATS[fi];
        for (int c = 0; c < 256; c++) {
            float v = fp8_to_float((uint8_t)c, f);
            if (isnan(v)) continue;
            uint8_t want = isinf(v) ? (uint8_t)((c & 0x80) | MAXCODE[fi]) : (uint8_t)c;
            uint8_t got = fp8_from_float(v, f);
            g_compared++;
            CHECK(got == want, "%s encode(decode(0x%02x) = %g) = 0x%02x, want 0x%02x", NAMES[fi], c, v, got, want);
        }
    }
}

static void expect_code(float x, Fp8Format f, uint8_t want, const char *what) {
    uint8_t got = fp8_from_float(x, f);
    g_compared++;
    CHECK(got == want, "%s %s: encode(%a) = 0x%02x, want 0x%02x", f == FP8_E4M3 ? "E4M3" : "E5M2", what, x, got, want);
}

// The midpoints between neighbouring codes of each format, as floats (exact: two fp8
// values differ in at most 5 significant bits), with the codes either side.
typedef struct { float mid; uint8_t lo, hi; } Midpoint;
static int midpoints(Fp8Format f, Midpoint *out) {
    int n = 0, maxcode = f == FP8_E4M3 ? 0x7E : 0x7B;
    for (int c = 0; c < maxcode; c++) {
        double a = fp8_to_float((uint8_t)c, f), b = fp8_to_float((uint8_t)(c + 1), f);
        out[n].mid = (float)((a + b) / 2);
        out[n].lo = (uint8_t)c;
        out[n].hi = (uint8_t)(c + 1);
        if ((double)out[n].mid != (a + b) / 2) fatal("midpoint of 0x%02x and 0x%02x not a float", c, c + 1);
        n++;
    }
    return n;
}

static void test_rounding(void) {
    for (int fi = 0; fi < 2; fi++) {
        Fp8Format f = FORMATS[fi];
        Midpoint mp[128];
        int n = midpoints(f, mp);
        for (int i = 0; i < n; i++) {
            for (int neg = 0; neg < 2; neg++) {
                uint8_t s = neg ? 0x80 : 0;
                float sg = neg ? -1.0f : 1.0f, mid = sg * mp[i].mid;
                uint8_t even = (mp[i].lo & 1) ? mp[i].hi : mp[i].lo;
                expect_code(mid, f, s | even, "midpoint ties to the even code");
                expect_code(nextafterf(mid, sg * INFINITY), f, s | mp[i].hi, "just above a midpoint");
                expect_code(nextafterf(mid, 0.0f), f, s | mp[i].lo, "just below a midpoint");
            }
        }
        // saturation: everything beyond max, the infinities too, is ±max
        float mx = fp8_format_max(f), ulp = mx - fp8_to_float((uint8_t)(MAXCODE[fi] - 1), f);
        float beyond[] = {nextafterf(mx, INFINITY), mx + ulp / 2, nextafterf(mx + ulp / 2, 0.0f),
                          nextafterf(mx + ulp / 2, INFINITY), mx + ulp, 2 * mx, 1e30f, FLT_MAX, INFINITY};
        for (size_t i = 0; i < sizeof beyond / sizeof beyond[0]; i++) {
            expect_code(beyond[i], f, MAXCODE[fi], "beyond max saturates");
            expect_code(-beyond[i], f, 0x80 | MAXCODE[fi], "beyond -max saturates");
        }
        expect_code(mx, f, MAXCODE[fi], "max itself");
        // NaN in any encoding stays NaN
        uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFC00000u, 0xFF800001u, 0xFFFFFFFFu};
        for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
            expect_code(fp8_bits_float(nans[i]), f, FP8_NAN, "NaN");
            g_compared++;
            CHECK(isnan(fp8_to_float(fp8_from_float(fp8_bits_float(nans[i]), f), f)), "NaN 0x%08x decodes as NaN",
                  nans[i]);
        }
        // tiny: below half the smallest subnormal flushes to a zero of x's sign; the smallest
        // subnormal's half is a tie (to the even zero), just above it the smallest subnormal
        float sub = fp8_to_float(1, f);
        float tiny[] = {fp8_bits_float(1), FLT_MIN, ldexpf(1, -40), sub / 4, nextafterf(sub / 2, 0.0f), sub / 2};
        for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) {
            expect_code(tiny[i], f, 0x00, "tiny flushes to +0");
            expect_code(-tiny[i], f, 0x80, "tiny flushes to -0");
        }
        expect_code(0.0f, f, 0x00, "+0");
        expect_code(-0.0f, f, 0x80, "-0");
        expect_code(nextafterf(sub / 2, 1.0f), f, 0x01, "just above half the smallest subnormal");
        expect_code(sub * 0.75f, f, 0x01, "3/4 of the smallest subnormal");
        expect_code(-sub * 1.5f, f, 0x82, "-1.5 smallest subnormals (tie, to even)");
        // the largest subnormal rounding up into the smallest normal
        int M = f == FP8_E4M3 ? 3 : 2;
        float minnorm = fp8_to_float((uint8_t)(1 << M), f), maxsub = fp8_to_float((uint8_t)((1 << M) - 1), f);
        expect_code((minnorm + maxsub) / 2, f, (uint8_t)(1 << M), "subnormal/normal tie, to the even normal");
        expect_code(nextafterf((minnorm + maxsub) / 2, 0.0f), f, (uint8_t)((1 << M) - 1), "largest subnormal");
    }
}

static long g_sweep_mismatches;
static void compare_with_cuda(float x) {
    for (int fi = 0; fi < 2; fi++) {
        uint8_t ours = fp8_from_float(x, FORMATS[fi]), theirs = cuda_encode(x, FORMATS[fi]);
        g_compared++;
        if (ours != theirs) {
            g_sweep_mismatches++;
            CHECK(0, "%s encode(%a = 0x%08x): ours 0x%02x, CUDA 0x%02x", NAMES[fi], x, fp8_float_bits(x), ours, theirs);
        }
    }
}

// every 251st float bit pattern (251 is odd: the low mantissa bits take every value)
static void test_cuda_strided(void) {
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 251) compare_with_cuda(fp8_bits_float((uint32_t)u));
}

// Densely over the exponents where fp8 values and their rounding live (2^-27 .. 2^18): every
// combination of the top 12 mantissa bits (all rounding positions, from normals down to half
// the smallest subnormal, lie among them) with the low 11 bits at 0, 1, just under and at
// and above their half, and all ones.
static void test_cuda_dense(void) {
    const uint32_t lows[] = {0x000, 0x001, 0x3FF, 0x400, 0x401, 0x7FF};
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t ex = 100; ex <= 145; ex++)
            for (uint32_t top = 0; top < 4096; top++)
                for (size_t l = 0; l < sizeof lows / sizeof lows[0]; l++)
                    compare_with_cuda(fp8_bits_float((sign << 31) | (ex << 23) | (top << 11) | lows[l]));
}

static void test_cuda_midpoints(void) {
    for (int fi = 0; fi < 2; fi++) {
        Midpoint mp[128];
        int n = midpoints(FORMATS[fi], mp);
        for (int i = 0; i < n; i++)
            for (int neg = 0; neg < 2; neg++) {
                float m = neg ? -mp[i].mid : mp[i].mid;
                compare_with_cuda(m);
                compare_with_cuda(nextafterf(m, INFINITY));
                compare_with_cuda(nextafterf(m, -INFINITY));
            }
    }
    float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX, FLT_MIN, fp8_bits_float(1)};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) compare_with_cuda(special[i]);
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double uniform01(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static void test_scale_recipe(void) {
    float prev = 3.0f;
    // exact cases
    struct { float amax, fmax; int margin; float want; } exact[] = {
        {1.0f, FP8_E4M3_MAX, 0, 448.0f},     {1.0f, FP8_E4M3_MAX, 1, 224.0f},   {1.0f, FP8_E4M3_MAX, -1, 896.0f},
        {3.5f, FP8_E5M2_MAX, 0, 16384.0f},   {448.0f, FP8_E4M3_MAX, 0, 1.0f},   {0.25f, FP8_E4M3_MAX, 3, 224.0f},
        {1e-5f, FP8_E5M2_MAX, 0, (float)(57344.0 / (double)1e-5f)},
    };
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++) {
        float got = fp8_scale_from_amax(exact[i].amax, exact[i].fmax, exact[i].margin, prev);
        g_compared++;
        CHECK(got == exact[i].want, "scale(amax %g, fmax %g, margin %d) = %g, want %g", exact[i].amax, exact[i].fmax,
              exact[i].margin, got, exact[i].want);
    }
    // no usable amax: the previous scale stays
    float keep[] = {0.0f, -0.0f, NAN, INFINITY, -1.0f, fp8_bits_float(1)};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        g_compared++;
        CHECK(fp8_scale_from_amax(keep[i], FP8_E4M3_MAX, 0, prev) == prev, "amax %g did not keep the previous scale",
              keep[i]);
    }
    // the amax lands on the format's max / 2^margin, over a wide range of amaxes
    for (int i = 0; i < 20000; i++) {
        float amax = (float)exp((uniform01() * 2 - 1) * 60.0);  // about 1e-26 .. 1e26
        int fi = i & 1, margin = (i >> 1) % 4;
        float mx = fp8_format_max(FORMATS[fi]), s = fp8_scale_from_amax(amax, mx, margin, prev);
        float target = ldexpf(mx, -margin);
        uint8_t got = fp8_from_float(amax * s, FORMATS[fi]), want = fp8_from_float(target, FORMATS[fi]);
        g_compared++;
        CHECK(got == want && fp8_to_float(got, FORMATS[fi]) == target, "%s amax %g margin %d: amax*scale -> 0x%02x",
              NAMES[fi], amax, margin, got);
        // the dequantization factor undoes the scale to within fp32 rounding
        float deq = fp8_dequant_factor(s);
        g_compared++;
        CHECK(fabs((double)deq * s - 1.0) <= ldexp(1.0, -24), "deq %g * scale %g = %.9g", deq, s, (double)deq * s);
        // and a value under amax comes back within fp8's relative rounding (normal range)
        float x = (float)((uniform01() * 0.9 + 0.1) * amax);
        double back = (double)fp8_to_float(fp8_from_float(x * s, FORMATS[fi]), FORMATS[fi]) * deq;
        double rel = fi == 0 ? ldexp(1.0, -4) : ldexp(1.0, -3);  // half an ulp: 2^-(M+1)
        g_compared++;
        CHECK(fabs(back - x) <= rel * fabs(x) * (1 + 1e-6) || fabs(x * s) < ldexp(1.0, fi == 0 ? -6 : -14),
              "%s x %g scale %g: back %g", NAMES[fi], x, s, back);
    }
    // history: the largest finite entry; none gives 0, which keeps the previous scale
    float h1[] = {0.5f, NAN, 2.0f, INFINITY, 1.0f}, h2[] = {0.0f, 0.0f}, h3[] = {NAN, -INFINITY};
    g_compared += 5;
    CHECK(fp8_amax_history_max(h1, 5) == 2.0f, "history max %g, want 2", fp8_amax_history_max(h1, 5));
    CHECK(fp8_amax_history_max(h1, 1) == 0.5f, "history of one entry");
    CHECK(fp8_amax_history_max(h2, 2) == 0.0f && fp8_amax_history_max(h1, 0) == 0.0f, "empty or zero history");
    CHECK(fp8_amax_history_max(h3, 2) == 0.0f, "history without finite entries");
    CHECK(fp8_scale_from_amax(fp8_amax_history_max(h3, 2), FP8_E4M3_MAX, 0, prev) == prev, "prev kept");
}

// the matmul arguments cuBLASLt's FP8 kernels cannot take are refused before the GPU is touched
#define P(x) ((const void *)(uintptr_t)(x))
static const MatmulModes g_modes = MATMUL_MODES_DEFAULT;
static void fp8_bad_call(const char *arg) {
    (void)arg;
    matmul_fp8(&g_modes, (floatX *)4096, (const uint8_t *)4096, FP8_E5M2, NULL, (const uint8_t *)8192, FP8_E5M2, NULL,
               NULL, 64, 64, 64, 64, 64, 64, 0.0f, 0, 0);
}
static void fp8_bad_shape(const char *arg) {
    (void)arg;
    matmul_fp8(&g_modes, (floatX *)4096, (const uint8_t *)4096, FP8_E4M3, NULL, (const uint8_t *)8192, FP8_E5M2, NULL,
               NULL, 768, 100, 768, 768, 768, 768, 0.0f, 0, 0);
}
static void test_matmul_refusals(void) {
    struct { const void *D, *A; Fp8Format fa; const void *B; Fp8Format fb; int m, n, k, lda, ldb, ldd;
             const char *want; } cases[] = {
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 2304, 512, 768, 768, 768, 2304, NULL},
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E5M2, 768, 512, 2304, 2304, 2304, 768, NULL},
        {P(4096), P(8192), FP8_E5M2, P(16384), FP8_E4M3, 768, 2304, 512, 512, 512, 768, NULL},
        {P(4096), P(8192), FP8_E5M2, P(16384), FP8_E5M2, 768, 512, 768, 768, 768, 768, "E5M2 x E5M2"},
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 760, 512, 768, 768, 768, 768, "multiples of 16"},
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 768, 0, 768, 768, 768, 768, "multiples of 16"},
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 768, 512, 776, 776, 776, 768, "multiples of 16"},
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 768, 512, 768, 752, 768, 768, "too small"},
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 768, 512, 768, 768, 768, 512, "too small"},
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 768, 512, 768, 776, 768, 768, "multiples of 16 bytes"},
        {P(4096), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 768, 512, 768, 768, 768, 772, "multiples of 16 bytes"},
        {P(4096), P(8200), FP8_E4M3, P(16384), FP8_E4M3, 768, 512, 768, 768, 768, 768, "16-byte aligned"},
        {P(4104), P(8192), FP8_E4M3, P(16384), FP8_E4M3, 768, 512, 768, 768, 768, 768, "16-byte aligned"},
        {P(4096), P(8192), FP8_E4M3, NULL, FP8_E4M3, 768, 512, 768, 768, 768, 768, "NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *why = matmul_fp8_refusal(cases[i].D, cases[i].A, cases[i].fa, cases[i].B, cases[i].fb, cases[i].m,
                                             cases[i].n, cases[i].k, cases[i].lda, cases[i].ldb, cases[i].ldd);
        g_compared++;
        if (!cases[i].want) CHECK(why == NULL, "case %zu refused: %s", i, why);
        else CHECK(why && strstr(why, cases[i].want), "case %zu: '%s', want '%s'", i, why ? why : "(accepted)",
                   cases[i].want);
    }
    g_compared += 2;
    expect_failure("E5M2 x E5M2 matmul", fp8_bad_call, NULL, "FP8 matmul E5M2 x E5M2", "one operand must be E4M3",
                   NULL);
    expect_failure("matmul with n = 100", fp8_bad_shape, NULL, "n=100", "multiples of 16", NULL);
}

// The operand chunks of kernels/fp8_linear.cuh, for random rows n (multiples of 16, as the
// trainer's), widths and buffer sizes: all n in one chunk, or chunks of a multiple of 16
// rows within the buffer, as few as fit, the last at least 16 rows; 0 exactly when 16 rows
// do not fit
static void test_chunk_rows(void) {
    for (int trial = 0; trial < 100000; trial++) {
        int n = 16 * (1 + (int)(uniform01() * 4096)), width = 16 * (1 + (int)(uniform01() * 4000));
        size_t cap = (size_t)(uniform01() * uniform01() * 64.0 * 1024 * 1024) + 1;
        int r = fp8_rows_per_chunk(cap, width, n);
        g_compared++;
        size_t fit = cap / (size_t)width;
        if (fit < 16 && fit < (size_t)n) {
            CHECK(r == 0, "n %d width %d cap %zu: %d rows, but 16 do not fit", n, width, cap, r);
            continue;
        }
        int chunks = r > 0 ? (n + r - 1) / r : 0, last = r > 0 ? n - (chunks - 1) * r : 0;
        size_t fewest = (n + fit / 16 * 16 - 1) / (fit / 16 * 16);
        CHECK(r > 0 && (size_t)r * width <= cap && (r == n || r % 16 == 0) && last >= 16 &&
                  (r == n || (size_t)chunks == fewest),
              "n %d width %d cap %zu: %d rows a chunk, %d chunks, the last %d rows (fewest %zu)", n, width, cap, r,
              chunks, last, fewest);
    }
}

int main(void) {
    printf("test_fp8_host: common/fp8.h against the format definition and cuda_fp8.h\n");
    run_counted("decode: 256 codes x 2 formats", test_decode);
    run_counted("encode(decode(c)) == c for every number", test_round_trip);
    run_counted("rounding: midpoints, saturation, NaN, tiny", test_rounding);
    run_counted("vs CUDA: every 251st float bit pattern", test_cuda_strided);
    run_counted("vs CUDA: dense over 2^-27 .. 2^18", test_cuda_dense);
    run_counted("vs CUDA: midpoints, neighbours, specials", test_cuda_midpoints);
    if (g_sweep_mismatches) printf("  %ld encodings differ from CUDA's\n", g_sweep_mismatches);
    run_counted("scale recipe, history, dequantization factor", test_scale_recipe);
    run_counted("FP8 matmul refusals (no GPU call)", test_matmul_refusals);
    run_counted("operand chunks: 16-row multiples that fit", test_chunk_rows);
    return test_summary();
}
