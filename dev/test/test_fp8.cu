// dev/test/test_fp8.cu: kernels/fp8.cuh on the GPU, on fresh random inputs (the seed is
// printed; pass it back as the argument to repeat a run):
//  (a) the cast's codes against common/fp8.h's encoder bit for bit, and its amax exactly
//      (vector and scalar paths, a saturating scale, inf and NaN inputs, amax alone);
//  (b) the transposing cast likewise, at aligned and ragged shapes;
//  (c) the FP8 matmul against a double-precision CPU product of the dequantized FP8
//      operands, at GPT-2 124M's linear layers (N = B*T = 512, C = 768): forward (E4M3 x
//      E4M3, with bias), dinp and dweight (E4M3 x E5M2 gradients, dweight accumulated onto
//      its old value) and dweight^T (E5M2 x E4M3);
//  (d) the same with cuBLASLt's fast accumulation;
//  (e) the on-device scale update against fp8.h's recipe.
// Exit 1 on any failure; 77 (skipped) in the fp16 and fp32 builds, and without a GPU of compute
// capability 8.9 or newer (FP8 tensor cores; measured on 9.0 only).
#include "kernels/fp8.cuh"
#include "gpu_testutil.cuh"
#include <vector>
#include <thread>
#include <algorithm>
#include <time.h>

#if PRECISION != PRECISION_BF16
int main() {
    printf("test_fp8: needs the bf16 build (PRECISION=BF16); this is the %s build\n", PRECISION_NAME);
    return 77;
}
#else

static const MatmulModes g_modes = MATMUL_MODES_DEFAULT;  // (not tuned: the heuristic's first choice)

static float download1(const float *d) { return download(d, 1)[0]; }
static void set1(float *d, float v) { CUDA_CHECK(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice)); }

static float host_amax(const floatX *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = std::max(m, fabsf(to_float(x[i])));
    return m;
}
static const char *fname(Fp8Format f) { return fp8_format_name(f); }

// the GPU's code against fp8.h's for x * scale: equal bits, or both NaN (a NaN's sign is
// free). An infinite x is cast as NaN (kernels/fp8.cuh fp8_scaled), so that an overflow stays
// visible; a finite x beyond the format's range saturates.
static bool code_ok(uint8_t got, float x, float scale, Fp8Format f) {
    uint8_t want = isinf(x) ? FP8_NAN : fp8_from_float(x * scale, f);
    return got == want || (want == FP8_NAN && isnan(fp8_to_float(got, f)));
}

static const int GUARD = 64;  // bytes after each output that must stay untouched
static const uint8_t GUARD_BYTE = 0xA5;

// a cast's outputs: n codes and GUARD guard bytes, the scale (set), the amax (zeroed)
static void cast_buffers(size_t n, float scale, uint8_t **dq, float **dscale, float **damax) {
    CUDA_CHECK(cudaMalloc(dq, n + GUARD));
    CUDA_CHECK(cudaMemset(*dq, GUARD_BYTE, n + GUARD));
    CUDA_CHECK(cudaMalloc(dscale, sizeof(float)));
    CUDA_CHECK(cudaMalloc(damax, sizeof(float)));
    set1(*dscale, scale);
    set1(*damax, 0.0f);
}

// (a) one cast of n elements starting `offset` elements into a fresh buffer
static void check_quantize(const char *what, const std::vector<floatX> &x, size_t offset, Fp8Format f, float scale,
                           bool nan_amax) {
    size_t n = x.size() - offset;
    floatX *dx = upload(x);
    uint8_t *dq;
    float *dscale, *damax;
    cast_buffers(n, scale, &dq, &dscale, &damax);
    fp8_quantize(dq, damax, dx + offset, dscale, n, f, 0);
    std::vector<uint8_t> q = download(dq, n + GUARD);
    float amax = download1(damax);
    set1(damax, 0.0f);
    fp8_quantize(NULL, damax, dx + offset, NULL, n, f, 0);
    float amax_only = download1(damax);
    size_t bad = 0, first = n;
    for (size_t i = 0; i < n; i++)
        if (!code_ok(q[i], to_float(x[offset + i]), scale, f)) { if (!bad++) first = i; }
    size_t guard_bad = 0;
    for (int i = 0; i < GUARD; i++) guard_bad += q[n + i] != GUARD_BYTE;
    float want = host_amax(x.data() + offset, n);
    bool amax_ok = nan_amax ? isnan(amax) && isnan(amax_only) : amax == want && amax_only == want;
    report(bad == 0 && guard_bad == 0 && amax_ok,
           "cast %-34s %s n=%zu scale %g: %zu of %zu codes differ, %zu guard bytes written, amax %g (amax-only %g, "
           "want %g)", what, fname(f), n, scale, bad, n, guard_bad, amax, amax_only, nan_amax ? NAN : want);
    if (bad)
        printf("    first at %zu: x %g -> 0x%02x, want 0x%02x\n", first, to_float(x[offset + first]), q[first],
               fp8_from_float(to_float(x[offset + first]) * scale, f));
    cudaFree(dx); cudaFree(dq); cudaFree(dscale); cudaFree(damax);
}

static void test_quantize() {
    printf("(a) fp8_quantize against fp8.h's encoder\n");
    std::vector<floatX> x = randn(512 * 768 + 5, 0.0, 1.0);
    for (int i = 0; i < 64; i++) x[(size_t)(uniform01() * x.size())] = (floatX)(float)(normal() * 1e-6);  // tiny
    float amax = host_amax(x.data(), x.size());
    for (Fp8Format f : {FP8_E4M3, FP8_E5M2}) {
        float s = fp8_scale_from_amax(amax, fp8_format_max(f), 0, 1.0f);
        check_quantize("16-byte path + scalar tail", x, 0, f, s, false);
        check_quantize("unaligned (scalar path)", x, 1, f, s, false);
        check_quantize("saturating (scale x 16)", x, 0, f, 16 * s, false);
        std::vector<floatX> sp = randn(4096, 0.0, 3.0);
        sp[5] = (floatX)INFINITY;
        sp[77] = (floatX)-INFINITY;
        sp[1000] = (floatX)NAN;
        sp[1001] = (floatX)0.0f;
        sp[1002] = (floatX)-0.0f;
        check_quantize("inf, NaN and zeros", sp, 0, f, 10.0f, true);
    }
}

// (b) the transposing cast of a rows x cols tensor, or (ld > cols) of the first cols columns
// of a rows x ld one; both: fp8_quantize_both, which writes the row-major codes as well
static void check_transpose(int rows, int cols, int ld, Fp8Format f, bool both = false) {
    std::vector<floatX> x = randn((size_t)rows * ld, 0.0, 0.05), block((size_t)rows * cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) block[(size_t)r * cols + c] = x[(size_t)r * ld + c];
    float amax_want = host_amax(block.data(), block.size());
    float scale = fp8_scale_from_amax(amax_want, fp8_format_max(f), 1, 1.0f);
    size_t n = block.size();
    floatX *dx = upload(x);
    uint8_t *dq;
    float *dscale, *damax;
    cast_buffers(n, scale, &dq, &dscale, &damax);
    uint8_t *dr = NULL;  // the row-major codes of fp8_quantize_both
    if (both) {
        CUDA_CHECK(cudaMalloc(&dr, n + GUARD));
        CUDA_CHECK(cudaMemset(dr, GUARD_BYTE, n + GUARD));
    }
    if (both) fp8_quantize_both(dr, dq, damax, dx, dscale, rows, cols, f, 0);
    else if (ld == cols) fp8_quantize_transpose(dq, damax, dx, dscale, rows, cols, f, 0);
    else fp8_quantize_transpose_ld(dq, damax, dx, (size_t)ld, dscale, rows, cols, f, 0);
    x = block;  // the reference reads the block
    std::vector<uint8_t> q = download(dq, n + GUARD), qr;
    if (both) qr = download(dr, n + GUARD);
    float amax = download1(damax);
    size_t bad = 0, guard_bad = 0;
    int br = -1, bc = -1;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float v = to_float(x[(size_t)r * cols + c]);
            if (!code_ok(q[(size_t)c * rows + r], v, scale, f) || (both && !code_ok(qr[(size_t)r * cols + c], v, scale, f))) {
                if (!bad++) { br = r; bc = c; }
            }
        }
    for (int i = 0; i < GUARD; i++) guard_bad += (q[n + i] != GUARD_BYTE) + (both && qr[n + i] != GUARD_BYTE);
    report(bad == 0 && guard_bad == 0 && amax == amax_want,
           "%s %4d x %-4d (ld %4d) %s: %zu of %zu codes differ, %zu guard bytes written, amax %g (want %g)",
           both ? "both ways" : "transpose", rows, cols, ld, fname(f), bad, n, guard_bad, amax, amax_want);
    if (bad)
        printf("    first at row %d col %d: x %g -> 0x%02x, want 0x%02x\n", br, bc, to_float(x[(size_t)br * cols + bc]),
               q[(size_t)bc * rows + br], fp8_from_float(to_float(x[(size_t)br * cols + bc]) * scale, f));
    cudaFree(dx); cudaFree(dq); cudaFree(dr); cudaFree(dscale); cudaFree(damax);
}

static void test_transpose() {
    printf("(b) fp8_quantize_transpose and fp8_quantize_both against fp8.h's encoder\n");
    // rows, cols, ld: whole tensors, then column blocks of wider ones (the lm_head's slices)
    const int shapes[][3] = {{512, 768, 768}, {768, 2304, 2304}, {3072, 512, 512}, {64, 64, 64}, {100, 72, 72},
                             {77, 50, 50},    {1, 8, 8},          {512, 768, 2304}, {256, 64, 50304}, {100, 40, 72}};
    for (Fp8Format f : {FP8_E4M3, FP8_E5M2})
        for (auto &s : shapes) {
            check_transpose(s[0], s[1], s[2], f);
            if (s[1] == s[2]) check_transpose(s[0], s[1], s[2], f, true);  // both ways: whole tensors
        }
}

// A tensor in FP8 on the device: codes (and those of its transpose), scale and dequantization factor
struct Fp8Tensor {
    int rows, cols;
    Fp8Format f;
    uint8_t *q = NULL, *qt = NULL;
    float *scale = NULL, *deq = NULL, *amax = NULL;
};
// current scaling: amax, then the scale (fp8_update_scale with H = 1), then the casts
static Fp8Tensor make_fp8(const floatX *dx, int rows, int cols, Fp8Format f, bool transposed_too) {
    Fp8Tensor t;
    t.rows = rows; t.cols = cols; t.f = f;
    size_t n = (size_t)rows * cols;
    CUDA_CHECK(cudaMalloc(&t.q, n));
    if (transposed_too) CUDA_CHECK(cudaMalloc(&t.qt, n));
    CUDA_CHECK(cudaMalloc(&t.scale, sizeof(float)));
    CUDA_CHECK(cudaMalloc(&t.deq, sizeof(float)));
    CUDA_CHECK(cudaMalloc(&t.amax, sizeof(float)));
    set1(t.scale, 1.0f);
    set1(t.amax, 0.0f);
    fp8_quantize(NULL, t.amax, dx, NULL, n, f, 0);
    fp8_update_scale(t.scale, t.deq, t.amax, 1, f, 0, 0);
    fp8_quantize(t.q, NULL, dx, t.scale, n, f, 0);
    if (transposed_too) fp8_quantize_transpose(t.qt, NULL, dx, t.scale, rows, cols, f, 0);
    return t;
}
static void free_fp8(Fp8Tensor &t) {
    cudaFree(t.q); cudaFree(t.qt); cudaFree(t.scale); cudaFree(t.deq); cudaFree(t.amax);
}
// the codes' values, unscaled (rows x cols, or cols x rows for the transpose)
static std::vector<float> decoded(const uint8_t *dq, size_t n, Fp8Format f) {
    std::vector<uint8_t> q = download(dq, n);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = fp8_to_float(q[i], f);
    return v;
}

// The reference of D (m x n col-major, ld m) = ab * A B^T-as-rows + bias + C0, A: m rows
// of k values, B: n rows of k values (the TN call's operands as stored). mag: ab * sum |a b|,
// the scale of the accumulation error.
struct Ref { std::vector<double> val, mag; };
static Ref reference(const std::vector<float> &A, const std::vector<float> &B, int m, int n, int k, double ab,
                     const std::vector<floatX> *bias, const std::vector<floatX> *C0) {
    Ref r;
    r.val.resize((size_t)m * n);
    r.mag.resize((size_t)m * n);
    int nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t]() {
            for (int j = t; j < n; j += nt)
                for (int i = 0; i < m; i++) {
                    const float *a = &A[(size_t)i * k], *b = &B[(size_t)j * k];
                    double s = 0, sa = 0;
                    for (int p = 0; p < k; p++) {
                        double pr = (double)a[p] * b[p];
                        s += pr;
                        sa += fabs(pr);
                    }
                    size_t o = (size_t)j * m + i;
                    r.val[o] = ab * s + (bias ? (double)to_float((*bias)[i]) : 0.0) +
                               (C0 ? (double)to_float((*C0)[o]) : 0.0);
                    r.mag[o] = ab * sa;
                }
        });
    for (auto &x : th) x.join();
    return r;
}

// Tolerance of each output: the bf16 rounding of D is at most half an ulp, 2^-9 of |D|
// (the operands are exactly representable, so their quantization error is not ours to
// count: the reference uses the same FP8 values); 2^-8 doubles it. Plus the accumulation:
// exact FP8 products summed in fp32 would be off by far less than 2^-11 of sum |a b|, but
// the tensor cores' FP8 sums carry fewer bits than fp32 (about 14 were measured on Hopper),
// cuBLASLt promoting them to fp32 every few k-steps; with fast accumulation it does not
// (cublasLt.h: "intermediate results will not periodically be promoted"), and a
// truncating 14-bit running sum over K/32 MMA steps errs by up to about 2^-11.5 of
// sum |a b| at K = 3072. Hence 2^-11 (promoted) and 2^-8 (fast): 8 times those estimates.
// Accumulating into D (beta = 1, a weight gradient's +=) rounds twice: an H200 gave errors up
// to 0.9 ulp of D there (2026-12-05, build/test_fp8), as if the product were rounded to bf16
// before D is added; 2^-7 |D| is at least one ulp.
static void check_matmul(const char *what, const Fp8Tensor &ta, bool a_t, const Fp8Tensor &tb, bool b_t, int m, int n,
                         int k, const floatX *dbias, float beta, const std::vector<floatX> *C0, const Ref &ref,
                         int fast) {
    floatX *dD;
    CUDA_CHECK(cudaMalloc(&dD, (size_t)m * n * sizeof(floatX)));
    if (C0) CUDA_CHECK(cudaMemcpy(dD, C0->data(), C0->size() * sizeof(floatX), cudaMemcpyHostToDevice));
    else CUDA_CHECK(cudaMemset(dD, 0xFF, (size_t)m * n * sizeof(floatX)));  // NaN: unwritten outputs fail
    matmul_fp8(&g_modes, dD, a_t ? ta.qt : ta.q, ta.f, ta.deq, b_t ? tb.qt : tb.q, tb.f, tb.deq, dbias, m, n, k, k, k,
               m, beta, fast, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<floatX> D = download(dD, (size_t)m * n);
    double max_err = 0, max_ref = 0, worst = 0;
    size_t bad = 0, first = 0;
    const double eps = fast ? ldexp(1.0, -8) : ldexp(1.0, -11);
    for (size_t o = 0; o < D.size(); o++) {
        double got = to_float(D[o]), err = fabs(got - ref.val[o]);
        double tol = ldexp(fabs(ref.val[o]), C0 ? -7 : -8) + eps * ref.mag[o] + 1e-30;
        if (!(err <= tol)) { if (!bad++) first = o; }
        max_err = err == err && max_err == max_err ? std::max(max_err, err) : NAN;
        max_ref = std::max(max_ref, fabs(ref.val[o]));
        worst = err == err && worst == worst ? std::max(worst, err / tol) : NAN;
    }
    report(bad == 0, "%-22s %s x %s m=%-4d n=%-4d k=%-4d%s: max abs err %.2e, rel %.2e (of max |ref| %.2e), "
           "worst err/tol %.3f, %zu over tol", what, fname(ta.f), fname(tb.f), m, n, k, fast ? " fast" : "     ",
           max_err, max_err / max_ref, max_ref, worst, bad);
    if (bad)
        printf("    first at row %zu col %zu: got %.6e, ref %.6e\n", first % m, first / m, to_float(D[first]),
               ref.val[first]);
    cudaFree(dD);
}

static void test_matmul() {
    printf("(c, d) matmul_fp8 against a double-precision product of the dequantized operands\n");
    const int N = 512;  // B * T = 4 * 128
    struct Layer { const char *name; int C, OC; } layers[] = {
        {"qkv", 768, 2304}, {"attproj", 768, 768}, {"fc", 768, 3072}, {"fcproj", 3072, 768}};
    for (const Layer &L : layers) {
        const int C = L.C, OC = L.OC;
        std::vector<floatX> inp = randn((size_t)N * C, 0.0, 1.0), W = randn((size_t)OC * C, 0.0, 0.02),
                            bias = randn(OC, 0.0, 0.02), dout = randn((size_t)N * OC, 0.0, 1e-4),
                            dW0 = randn((size_t)OC * C, 0.0, 1e-3);
        floatX *dinp = upload(inp), *dW = upload(W), *dbias = upload(bias), *ddout = upload(dout);
        Fp8Tensor qi = make_fp8(dinp, N, C, FP8_E4M3, true), qw = make_fp8(dW, OC, C, FP8_E4M3, true),
                  qd = make_fp8(ddout, N, OC, FP8_E5M2, true);
        double si = download1(qi.deq), sw = download1(qw.deq), sd = download1(qd.deq);
        const size_t ni = (size_t)N * C, nw = (size_t)OC * C, nd = (size_t)N * OC;
        std::vector<float> inp_v = decoded(qi.q, ni, FP8_E4M3), inpT_v = decoded(qi.qt, ni, FP8_E4M3),
                           W_v = decoded(qw.q, nw, FP8_E4M3), WT_v = decoded(qw.qt, nw, FP8_E4M3),
                           d_v = decoded(qd.q, nd, FP8_E5M2), dT_v = decoded(qd.qt, nd, FP8_E5M2);
        char what[64];
        // forward: out (N, OC) = inp W^T + bias: m = OC, n = N, k = C, A = W, B = inp
        Ref r = reference(W_v, inp_v, OC, N, C, sw * si, &bias, NULL);
        snprintf(what, sizeof what, "%s forward", L.name);
        for (int fast = 0; fast < 2; fast++)
            check_matmul(what, qw, false, qi, false, OC, N, C, dbias, 0, NULL, r, fast);
        // dinp (N, C) = dout W: m = C, n = N, k = OC, A = W^T (C rows of OC), B = dout
        r = reference(WT_v, d_v, C, N, OC, sw * sd, NULL, NULL);
        snprintf(what, sizeof what, "%s dinp", L.name);
        for (int fast = 0; fast < 2; fast++)
            check_matmul(what, qw, true, qd, false, C, N, OC, NULL, 0, NULL, r, fast);
        // dweight (OC, C) += dout^T inp: m = C, n = OC, k = N, A = inp^T (C rows of N), B = dout^T
        r = reference(inpT_v, dT_v, C, OC, N, si * sd, NULL, &dW0);
        snprintf(what, sizeof what, "%s dweight +=", L.name);
        for (int fast = 0; fast < 2; fast++)
            check_matmul(what, qi, true, qd, true, C, OC, N, NULL, 1, &dW0, r, fast);
        if (L.OC == 2304) {
            // dweight^T (C, OC) = inp^T dout with the gradient as A: E5M2 x E4M3
            r = reference(dT_v, inpT_v, OC, C, N, si * sd, NULL, NULL);
            snprintf(what, sizeof what, "%s dweight^T", L.name);
            for (int fast = 0; fast < 2; fast++)
                check_matmul(what, qd, true, qi, true, OC, C, N, NULL, 0, NULL, r, fast);
        }
        free_fp8(qi); free_fp8(qw); free_fp8(qd);
        cudaFree(dinp); cudaFree(dW); cudaFree(dbias); cudaFree(ddout);
    }
}

// (f) the forward as the trainer calls it (bias, fast accumulation, its small N), with the
// dequantization factors of W and x in one allocation as kernels/fp8_linear.cuh keeps them:
// each at the start of a 16-byte group. On an H200 cuBLASLt refused the trainer's calls when
// the groups were 3 floats: W's factor 4 bytes past a 16-byte boundary, x's 12 bytes after
// it. Each layout starts from a fresh plan (the heuristic's first choice), and the line says
// whether that choice ran or matmul_fp8 fell back to another candidate. The old layout is a
// probe of cuBLASLt, reported, not a check.
static void test_factor_layout() {
    printf("(f) matmul_fp8 with the factors in one allocation, as the trainer keeps them\n");
    struct { int N, C, OC; } shapes[] = {{128, 128, 384}, {256, 768, 2304}, {2048, 256, 768}};
    // floats from the allocation's start to W's and to x's factor: the trainer's groups of 4
    // (site 0: W at 0, x at 4), then the old groups of 3 (W at 1, x at 4)
    struct { int w, x; const char *name; } layouts[] = {{0, 4, "16-byte groups"}, {1, 4, "old 12-byte groups"}};
    float *slots;
    CUDA_CHECK(cudaMalloc(&slots, 16 * sizeof(float)));
    for (auto &sh : shapes) {
        const int N = sh.N, C = sh.C, OC = sh.OC;
        std::vector<floatX> inp = randn((size_t)N * C, 0.0, 1.0), W = randn((size_t)OC * C, 0.0, 0.02),
                            bias = randn(OC, 0.0, 0.02);
        floatX *dinp = upload(inp), *dW = upload(W), *dbias = upload(bias);
        Fp8Tensor qi = make_fp8(dinp, N, C, FP8_E4M3, false), qw = make_fp8(dW, OC, C, FP8_E4M3, false);
        double si = download1(qi.deq), sw = download1(qw.deq);
        Ref r = reference(decoded(qw.q, (size_t)OC * C, FP8_E4M3), decoded(qi.q, (size_t)N * C, FP8_E4M3), OC, N, C,
                          sw * si, &bias, NULL);
        for (auto &l : layouts) {
            CUDA_CHECK(cudaMemcpy(slots + l.w, qw.deq, sizeof(float), cudaMemcpyDeviceToDevice));
            CUDA_CHECK(cudaMemcpy(slots + l.x, qi.deq, sizeof(float), cudaMemcpyDeviceToDevice));
            Fp8Tensor vw = qw, vi = qi;
            vw.deq = slots + l.w;
            vi.deq = slots + l.x;
            char what[64];
            snprintf(what, sizeof what, "N=%d %s", N, l.name);
            matmul_plans_forget();
            int fallbacks0 = g_fp8_fallbacks;
            if (l.w == 0) {
                check_matmul(what, vw, false, vi, false, OC, N, C, dbias, 0, NULL, r, 1);
                printf("    %s\n", g_fp8_fallbacks > fallbacks0 ? "ran after a fallback to another candidate"
                                                              : "the heuristic's first choice ran");
                continue;
            }
            floatX *dD;
            CUDA_CHECK(cudaMalloc(&dD, (size_t)OC * N * sizeof(floatX)));
            FatalTrap trap;
            g_fatal_trap = &trap;
            if (!setjmp(trap.jump)) {
                matmul_fp8(&g_modes, dD, vw.q, FP8_E4M3, vw.deq, vi.q, FP8_E4M3, vi.deq, dbias, OC, N, C, C, C, OC,
                           0.0f, 1, 0);
                CUDA_CHECK(cudaDeviceSynchronize());
                printf("  probe, not a check: %s m=%d n=%d k=%d: %s\n", what, OC, N, C,
                       g_fp8_fallbacks > fallbacks0 ? "first choice refused, another candidate ran"
                                                    : "the heuristic's first choice ran");
            } else {
                printf("  probe, not a check: %s m=%d n=%d k=%d: refused (%s)\n", what, OC, N, C, trap.msg);
            }
            g_fatal_trap = NULL;
            cudaFree(dD);
        }
        free_fp8(qi); free_fp8(qw);
        cudaFree(dinp); cudaFree(dW); cudaFree(dbias);
    }
    matmul_plans_forget();
    cudaFree(slots);
}

// The tanh form of GELU (kernels/gelu.cuh's), in double
static double gelu_h(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

// count of outputs over tol, and the worst err / tol, of got against want with tolerances tol
static size_t over_tol(const std::vector<floatX> &got, const std::vector<double> &want, const std::vector<double> &tol,
                       double *worst) {
    size_t bad = 0;
    *worst = 0;
    for (size_t o = 0; o < got.size(); o++) {
        double r = fabs(to_float(got[o]) - want[o]) / tol[o];
        if (!(r <= 1.0)) bad++;
        *worst = r == r && *worst == *worst ? std::max(*worst, r) : NAN;
    }
    return bad;
}

// (g) the GELU epilogue kernels/fp8_linear.cuh asks for in fc's forward (GELU_AUX_BIAS: D =
// gelu(x W^T + b), aux = x W^T + b) against the double-precision product of the dequantized
// operands. Tolerances: the product's (as check_matmul's, with fast accumulation) carried
// through GELU (|gelu'| <= 1.13), plus half an ulp of the bf16 result. Where cuBLASLt offers
// no such algorithm the trainer runs the GELU kernel: reported as skipped.
static void test_gelu_epilogues() {
    printf("(g) matmul_fp8_epi with the GELU epilogue (fc's forward)\n");
    const int N = 512, C = 768, H = 3072;
    const double fast_eps = ldexp(1.0, -8);
    {  // forward, fc: (N, H) = inp (N, C) W^T (W: H x C) + bias
        std::vector<floatX> inp = randn((size_t)N * C, 0.0, 1.0), W = randn((size_t)H * C, 0.0, 0.02),
                            bias = randn(H, 0.0, 0.02);
        floatX *dinp = upload(inp), *dW = upload(W), *dbias = upload(bias), *dD, *dAux;
        Fp8Tensor qi = make_fp8(dinp, N, C, FP8_E4M3, false), qw = make_fp8(dW, H, C, FP8_E4M3, false);
        Ref r = reference(decoded(qw.q, (size_t)H * C, FP8_E4M3), decoded(qi.q, (size_t)N * C, FP8_E4M3), H, N, C,
                          (double)download1(qw.deq) * download1(qi.deq), &bias, NULL);
        CUDA_CHECK(cudaMalloc(&dD, (size_t)N * H * sizeof(floatX)));
        CUDA_CHECK(cudaMalloc(&dAux, (size_t)N * H * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(dD, 0xFF, (size_t)N * H * sizeof(floatX)));  // NaN: unwritten outputs fail
        CUDA_CHECK(cudaMemset(dAux, 0xFF, (size_t)N * H * sizeof(floatX)));
        int ok = matmul_fp8_epi(&g_modes, dD, qw.q, FP8_E4M3, qw.deq, qi.q, FP8_E4M3, qi.deq, dbias, H, N, C, C, C, H,
                                0.0f, 1, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dAux, H, 0);
        if (!ok) {
            printf("  fc forward, GELU_AUX_BIAS: skipped: cuBLASLt offers no algorithm for it on this GPU\n");
        } else {
            std::vector<double> want(r.val.size()), tol(r.val.size()), gwant(r.val.size()), gtol(r.val.size());
            for (size_t o = 0; o < r.val.size(); o++) {
                tol[o] = ldexp(fabs(r.val[o]), -8) + fast_eps * r.mag[o] + 1e-30;
                gwant[o] = gelu_h(r.val[o]);
                gtol[o] = 1.13 * tol[o] + ldexp(fabs(gwant[o]), -8) + 1e-30;
            }
            double w1, w2;
            size_t b1 = over_tol(download(dAux, r.val.size()), r.val, tol, &w1);
            size_t b2 = over_tol(download(dD, r.val.size()), gwant, gtol, &w2);
            report(b1 == 0 && b2 == 0, "fc forward, GELU_AUX_BIAS, m=%d n=%d k=%d: aux (pre-GELU) worst err/tol %.3f, "
                   "%zu over; out (GELU) worst err/tol %.3f, %zu over", H, N, C, w1, b1, w2, b2);
        }
        free_fp8(qi); free_fp8(qw);
        cudaFree(dinp); cudaFree(dW); cudaFree(dbias); cudaFree(dD); cudaFree(dAux);
    }
}

// (e) the scale update on the device against fp8.h on the host, bit for bit
static void test_scale_update() {
    printf("(e) fp8_update_scale against fp8.h's recipe\n");
    float *dscale, *ddeq, *dhist;
    CUDA_CHECK(cudaMalloc(&dscale, sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ddeq, sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dhist, 8 * sizeof(float)));
    struct { std::vector<float> hist; Fp8Format f; int margin; } cases[] = {
        {{0.37f}, FP8_E4M3, 0},
        {{3.1e-5f}, FP8_E5M2, 0},
        {{0.5f, NAN, 2.0f, INFINITY, 1.0f}, FP8_E4M3, 1},
        {{0.0f, 0.0f, 0.0f}, FP8_E4M3, 0},
        {{NAN}, FP8_E5M2, 2},
        {{1e-3f, 7e-4f, 1.3e-3f, 9e-4f, 1.1e-3f, 0.0f, 1.2e-3f, 8e-4f}, FP8_E5M2, 0},
    };
    for (auto &c : cases) {
        const float prev = 5.0f;
        set1(dscale, prev);
        CUDA_CHECK(cudaMemcpy(dhist, c.hist.data(), c.hist.size() * sizeof(float), cudaMemcpyHostToDevice));
        fp8_update_scale(dscale, ddeq, dhist, (int)c.hist.size(), c.f, c.margin, 0);
        float s = download1(dscale), d = download1(ddeq);
        float want = fp8_scale_from_amax(fp8_amax_history_max(c.hist.data(), (int)c.hist.size()),
                                         fp8_format_max(c.f), c.margin, prev);
        report(s == want && d == fp8_dequant_factor(want), "%zu-step history, %s, margin %d: scale %g, deq %g "
               "(want %g, %g)", c.hist.size(), fname(c.f), c.margin, s, d, want, fp8_dequant_factor(want));
    }
    cudaFree(dscale); cudaFree(ddeq); cudaFree(dhist);
}

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
    g_rng = seed * 0x9E3779B97F4A7C15ull | 1;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_fp8: no GPU\n");
        return 77;
    }
    const DeviceCaps *caps = device_caps();  // (a test cap, GPT2_TEST_GPU_CAP, counts)
    if (!caps || caps->cc < 89) {  // (as fp8_require_device: no FP8 tensor cores)
        printf("test_fp8: FP8 matmuls need a GPU of compute capability 8.9 or newer; this one is %d.%d\n",
               caps ? caps->cc / 10 : 0, caps ? caps->cc % 10 : 0);
        return 77;
    }
    printf("test_fp8 (%s), seed %llu\n", PRECISION_NAME, (unsigned long long)seed);
    matmul_init(0);
    test_quantize();
    test_transpose();
    test_scale_update();
    test_matmul();
    test_factor_layout();
    test_gelu_epilogues();
    matmul_free();
    return report_finish();
}
#endif
