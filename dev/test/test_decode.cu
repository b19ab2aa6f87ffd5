// dev/test/test_decode.cu: kernels/decode_linear.cuh, the linear layers of generation, on fresh
// random inputs (the seed is printed; --seed N repeats a run), in every build (bf16, fp16, fp32):
//  (a) every prologue x epilogue at B = 1, 2, 3, 5, 8 on small odd shapes, and GPT-2's layers at
//      d12 and d48 (each layer's own combination at every B, the other combinations at one B
//      each), against a CPU product in double precision that rounds where the kernel rounds. The
//      layernorm prologue's reference input is the training forward's layernorm_forward output
//      (itself checked against a double-precision layernorm). Per case: the largest error in
//      ulps of floatX, the share of outputs that are not the correctly rounded value, and:
//        - every output within ulp(y) (+ ulp of the rounded projection, for the residual) plus
//          2^-24 (2K + 64) sum_k |x_k w_k| of the exact value: the rounding points may land on
//          either side of a rounding boundary, and fp32 accumulation in another order (tensor
//          cores' too, whose additions truncate) errs by at most that; a lost or doubled
//          16-byte chunk of K errs by far more;
//        - 16-bit builds: at most 1% of outputs (5% with GELU, whose fp32 evaluation cancels
//          near x = -3) differ from the correctly rounded value at all;
//        - bit-identical results on a second run, with pdl = 1, and replayed from a CUDA graph;
//          nothing written past out; each row equal to the same row computed alone (B = 1);
//        - on sm_90, plain-input cases also through the split a GPU without clusters takes
//          (other bits: another summation order), against the same bounds;
//  (b) the layernorm prologue against layernorm_forward bit for bit (W = identity);
//  (c) PDL for real: a kernel that lets its dependents start at once and only then, after a
//      delay, writes the input and the residual; decode_linear with pdl = 1 must read the new
//      values. And a fc -> fcproj chain with pdl = 1, eagerly and in a graph, against pdl = 0;
//  (d) the refusals (B = 0, B = 9, K not a multiple of 8, in overlapping out).
// Exit 1 on any failure, 77 without a GPU. On sm_90 the plain-input layers split K over a
// cluster; GPT2_TEST_GPU_CAP=80 runs them (and everything) as a GPU without clusters or PDL would.
//
//   build/test_decode [--seed N]    the checks
//   build/test_decode --bench       timing (printed, never asserted): d12 and d48's layers at
//       B = 1, 4, 8, each in a CUDA graph of back-to-back launches (as generation issues them)
//       over enough copies of the weights that none is read from L2, pdl 0 and 1 and cuBLAS's
//       matmul_forward (bias and GELU fused, no layernorm or residual) for comparison: us per
//       call, GB/s of weights, % of 3.35 TB/s (H100 SXM) and of this GPU's theoretical peak.
#include "kernels/decode_linear.cuh"
#include "kernels/matmul.cuh"
#include "gpu_testutil.cuh"
#include <cmath>
#include <vector>
#include <thread>
#include <algorithm>
#include <time.h>


// GPT-2's linear layers: K = kc * C and N = nc * C (nc = 0: the padded vocabulary), their
// prologue and epilogue, whether they have a bias
struct Layer { const char *name; int kc, nc; DecodeIn pro; DecodeOut epi; bool bias; };
static const Layer layers[] = {{"qkv", 1, 3, DECODE_IN_LAYERNORM, DECODE_OUT_PLAIN, true},
                               {"attproj", 1, 1, DECODE_IN_PLAIN, DECODE_OUT_RESIDUAL, true},
                               {"fc", 1, 4, DECODE_IN_LAYERNORM, DECODE_OUT_GELU, true},
                               {"fcproj", 4, 1, DECODE_IN_PLAIN, DECODE_OUT_RESIDUAL, true},
                               {"lm_head", 1, 0, DECODE_IN_LAYERNORM, DECODE_OUT_PLAIN, false}};

static bool same_bits(const std::vector<floatX> &a, const std::vector<floatX> &b) {
    return a.size() == b.size() && !memcmp(a.data(), b.data(), a.size() * sizeof(floatX));
}

// floatX on the host: rounding and the spacing of values near y
static double rnd(double v) { return to_float((floatX)(float)v); }
static double ulp_of(double y) {
    const int p = PRECISION == PRECISION_BF16 ? 8 : PRECISION == PRECISION_FP16 ? 11 : 24;  // significand bits
    const int emin = PRECISION == PRECISION_FP16 ? -13 : -125;  // frexp exponent of the smallest normal
    int e = emin;
    if (y != 0.0) frexp(fabs(y), &e);
    return ldexp(1.0, (e < emin ? emin : e) - p);
}
static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static const double U24 = 1.0 / 16777216.0;  // 2^-24

static const char *pro_name(DecodeIn p) { return p == DECODE_IN_LAYERNORM ? "ln" : "-"; }
static const char *epi_name(DecodeOut e) {
    return e == DECODE_OUT_GELU ? "gelu" : e == DECODE_OUT_RESIDUAL ? "residual" : "plain";
}

// run f(lo, hi) over [0, n) on the machine's cores
template <class F> static void parallel_for(int n, F f) {
    int nt = (int)std::thread::hardware_concurrency();
    nt = nt < 1 ? 1 : nt > 64 ? 64 : nt;
    if (nt > n) nt = n;
    std::vector<std::thread> th;
    for (int i = 0; i < nt; i++) th.emplace_back(f, (int)((long)n * i / nt), (int)((long)n * (i + 1) / nt));
    for (auto &t : th) t.join();
}

// a weight matrix (N, K), on the device and as floats on the host
struct Weights {
    int K, N;
    floatX *d;
    std::vector<float> h;
};
static Weights make_weights(int K, int N, float amp) {
    Weights w;
    w.K = K;
    w.N = N;
    CUDA_CHECK(cudaMalloc(&w.d, (size_t)N * K * sizeof(floatX)));
    fill_uniform(w.d, (size_t)N * K, amp, (uint32_t)(g_rng >> 32) ^ (uint32_t)g_rng, 0);
    uniform01();
    std::vector<floatX> hx = download(w.d, (size_t)N * K);
    w.h.resize(hx.size());
    for (size_t i = 0; i < hx.size(); i++) w.h[i] = to_float(hx[i]);
    return w;
}

static const int GUARD = 64;  // elements after out that must stay untouched
static const floatX GUARD_VALUE = (floatX)(float)-12345.0f;

// layernorm_forward (the training forward) of B rows of K on the device into a host vector
static std::vector<floatX> training_layernorm(const floatX *dx, const floatX *dw, const floatX *db, int B, int K) {
    floatX *dout;
    float *stats;
    CUDA_CHECK(cudaMalloc(&dout, (size_t)B * K * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&stats, 2 * B * sizeof(float)));
    layernorm_forward(dout, stats, stats + B, dx, dw, db, B, K, 0);
    std::vector<floatX> h = download(dout, (size_t)B * K);
    cudaFree(dout);
    cudaFree(stats);
    return h;
}

// the training layernorm's output against a double-precision layernorm: max error in ulps,
// false beyond ulp(y) + 2^-14 (|w| (|x| + |mean|) rstd + |b|) (fp32 statistics)
static bool check_layernorm_ref(const std::vector<floatX> &x, const std::vector<floatX> &lw,
                                const std::vector<floatX> &lb, const std::vector<floatX> &got, int B, int K,
                                double *max_ulps) {
    bool ok = true;
    *max_ulps = 0;
    for (int b = 0; b < B; b++) {
        double m = 0, v = 0;
        for (int k = 0; k < K; k++) m += to_float(x[(size_t)b * K + k]);
        m /= K;
        for (int k = 0; k < K; k++) { double d = to_float(x[(size_t)b * K + k]) - m; v += d * d; }
        const double s = 1.0 / sqrt(v / K + (double)LN_EPS);
        for (int k = 0; k < K; k++) {
            const double xv = to_float(x[(size_t)b * K + k]), w = to_float(lw[k]), bb = to_float(lb[k]);
            const double want = (xv - m) * s * w + bb, y = to_float(got[(size_t)b * K + k]);
            const double err = fabs(y - want);
            const double tol = ulp_of(want) + U24 * 1024 * (fabs(w) * (fabs(xv) + fabs(m)) * s + fabs(bb));
            *max_ulps = std::max(*max_ulps, err / ulp_of(want));
            if (!(err <= tol)) ok = false;
        }
    }
    return ok;
}

// one decode_linear call with the output reset first (the residual epilogue updates it in place)
struct Call {
    floatX *out, *in;
    const floatX *W, *bias, *ln_w, *ln_b, *out0;
    int B, K, N;
    DecodeIn pro;
    DecodeOut epi;
    void run(int pdl, cudaStream_t s) const {
        CUDA_CHECK(cudaMemcpyAsync(out, out0, (size_t)B * N * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
        decode_linear(out, in, W, bias, B, K, N, pro, ln_w, ln_b, epi, pdl, s);
    }
};

static std::vector<floatX> run_in_graph(const Call &c, cudaStream_t s) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    c.run(1, s);
    CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaMemset(c.out, 0, (size_t)c.B * c.N * sizeof(floatX)));
    for (int i = 0; i < 2; i++) CUDA_CHECK(cudaGraphLaunch(exec, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    return download(c.out, (size_t)c.B * c.N);
}

// these arguments again, through the split a GPU without clusters takes (in one launch: the test's
// shapes fit shared memory), pdl off
static void run_without_clusters(const Call &c, cudaStream_t s) {
    CUDA_CHECK(cudaMemcpyAsync(c.out, c.out0, (size_t)c.B * c.N * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
    const int sms = decode_linear_num_sms();
    DecodeLinearPlan p = decode_linear_plan(c.K, c.N, c.pro, sms, 0);
    decode_linear_grid(&p, c.B, c.N, sms);
    decode_linear_launch(&p, c.out, c.in, c.W, c.bias, c.B, c.K, c.N, c.pro, c.ln_w, c.ln_b, c.epi, 0, s);
}

// outputs against the reference: the largest error in ulps and as a share of its bound, and
// the share of outputs that are not the correctly rounded value
struct Errors {
    double ulps, ratio, share;
};
struct Reference {
    int B, N;
    DecodeOut epi;
    std::vector<double> v, sa;  // (b, n): the exact sum (bias included), sum of |terms|
    std::vector<floatX> r;      // the residual before the call
    int K;
};
static Errors evaluate(const Reference &ref, const std::vector<floatX> &y) {
    const int B = ref.B, N = ref.N, K = ref.K;
    std::vector<double> worst_ratio(N, 0.0), worst_ulps(N, 0.0);
    std::vector<int> not_rounded(N, 0);
    parallel_for(N, [&](int n0, int n1) {
        for (int n = n0; n < n1; n++)
            for (int b = 0; b < B; b++) {
                const size_t i = (size_t)b * N + n;
                const double v = ref.v[i], acc_err = U24 * (2.0 * K + 64) * ref.sa[i], got = to_float(y[i]);
                double exact, rounded, tol;
                if (ref.epi == DECODE_OUT_GELU) {
                    exact = gelu_d(v);
                    rounded = rnd(exact);
                    tol = ulp_of(exact) + 1.2 * acc_err + 8 * U24 * fabs(v);  // (+ gelu_f's fp32 error)
                } else if (ref.epi == DECODE_OUT_RESIDUAL) {
                    const double rv = to_float(ref.r[i]);
                    exact = rv + v;
                    rounded = rnd(rv + rnd(v));
                    tol = ulp_of(exact) + ulp_of(v) + acc_err;
                } else {
                    exact = v;
                    rounded = rnd(v);
                    tol = ulp_of(exact) + acc_err;
                }
                const double err = fabs(got - exact);
                worst_ratio[n] = std::max(worst_ratio[n], std::isnan(err) ? INFINITY : err / tol);
                worst_ulps[n] = std::max(worst_ulps[n], std::isnan(err) ? INFINITY : err / ulp_of(exact));
                not_rounded[n] += got != rounded;
            }
    });
    Errors e = {0, 0, 0};
    long off = 0;
    for (int n = 0; n < N; n++) {
        e.ratio = std::max(e.ratio, worst_ratio[n]);
        e.ulps = std::max(e.ulps, worst_ulps[n]);
        off += not_rounded[n];
    }
    e.share = (double)off / ((double)B * N);
    return e;
}

// (a) one case: fresh input rows, bias, layernorm parameters and residual
static void run_case(const char *name, const Weights &w, int B, DecodeIn pro, DecodeOut epi, bool with_bias,
                     cudaStream_t s) {
    const int K = w.K, N = w.N;
    const bool ln = pro == DECODE_IN_LAYERNORM;
    std::vector<floatX> x = ln ? randn((size_t)B * K, 0.3, 2.0) : randn((size_t)B * K, 0.0, 1.0);
    std::vector<floatX> bias = randn(N, 0.0, 0.1), lw = randn(K, 1.0, 0.1), lb = randn(K, 0.0, 0.1);
    std::vector<floatX> r = randn((size_t)B * N, 0.0, 1.0);
    if (epi != DECODE_OUT_RESIDUAL)
        for (auto &v : r) v = (floatX)(float)NAN;  // whatever the kernel must overwrite
    floatX *dx = upload(x), *dbias = upload(bias), *dlw = upload(lw), *dlb = upload(lb), *dr = upload(r), *dout;
    CUDA_CHECK(cudaMalloc(&dout, ((size_t)B * N + GUARD) * sizeof(floatX)));
    std::vector<floatX> guard(GUARD, GUARD_VALUE);
    CUDA_CHECK(cudaMemcpy(dout + (size_t)B * N, guard.data(), GUARD * sizeof(floatX), cudaMemcpyHostToDevice));
    Call c = {dout, dx, w.d, with_bias ? dbias : NULL, dlw, dlb, dr, B, K, N, pro, epi};

    // the reference's input: the training layernorm's output, itself checked in double
    std::vector<floatX> xe = x;
    double ln_ulps = 0;
    bool ln_ok = true;
    if (ln) {
        xe = training_layernorm(dx, dlw, dlb, B, K);
        ln_ok = check_layernorm_ref(x, lw, lb, xe, B, K, &ln_ulps);
    }

    c.run(0, s);
    std::vector<floatX> y = download(dout, (size_t)B * N + GUARD);
    std::vector<floatX> guard_got(y.begin() + (size_t)B * N, y.end());
    y.resize((size_t)B * N);
    c.run(0, s);
    std::vector<floatX> y_again = download(dout, (size_t)B * N);
    c.run(1, s);
    std::vector<floatX> y_pdl = download(dout, (size_t)B * N);
    std::vector<floatX> y_graph = run_in_graph(c, s);
    bool alone_same = true;
    if (B > 1)
        for (int b = 0; b < B; b++) {
            Call c1 = c;
            c1.B = 1;
            c1.in = dx + (size_t)b * K;
            c1.out = dout + (size_t)b * N;
            c1.out0 = dr + (size_t)b * N;
            c1.run(0, s);
            std::vector<floatX> y1 = download(c1.out, N);
            alone_same = alone_same && !memcmp(y1.data(), y.data() + (size_t)b * N, N * sizeof(floatX));
        }

    std::vector<floatX> y_nc;  // (plain input on sm_90: also the split without clusters)
    const int sm90 = device_caps()->cc >= 90 && sm90_code();
    if (sm90 && pro == DECODE_IN_PLAIN) {
        run_without_clusters(c, s);
        y_nc = download(dout, (size_t)B * N);
    }

    // the reference, and each output's error against its bound
    Reference ref;
    ref.B = B; ref.N = N; ref.K = K; ref.epi = epi; ref.r = r;
    ref.v.resize((size_t)B * N);
    ref.sa.resize((size_t)B * N);
    std::vector<float> xf(xe.size());
    for (size_t i = 0; i < xe.size(); i++) xf[i] = to_float(xe[i]);
    parallel_for(N, [&](int n0, int n1) {
        for (int n = n0; n < n1; n++) {
            const float *wr = w.h.data() + (size_t)n * K;
            for (int b = 0; b < B; b++) {
                const float *xr = xf.data() + (size_t)b * K;
                double v = 0, sa = 0;
                for (int k = 0; k < K; k++) {
                    const double p = (double)xr[k] * wr[k];
                    v += p;
                    sa += fabs(p);
                }
                if (with_bias) {
                    v += to_float(bias[n]);
                    sa += fabs(to_float(bias[n]));
                }
                ref.v[(size_t)b * N + n] = v;
                ref.sa[(size_t)b * N + n] = sa;
            }
        }
    });
    const Errors e = evaluate(ref, y);
    Errors enc = {0, 0, 0};
    if (!y_nc.empty()) enc = evaluate(ref, y_nc);
    const double ratio = std::max(e.ratio, enc.ratio), share = std::max(e.share, enc.share);
    // The share of outputs not correctly rounded, beside the bound: 1%, 5% after GELU (whose
    // negative tail turns a sum's last fp32 bits into a floatX bit more often). After a sum
    // over K beyond GPT-2's C (the fc's K is C <= 1600) the order of the fp32 sum shows more
    // often still (a 2^-24 relative error per term, K terms: 20% of K = 6408's 24 GELU outputs
    // in one run, each within the bound): there the bound alone decides.
    const double share_max = PRECISION == PRECISION_FP32 || K > 1600 ? 1.0 : epi == DECODE_OUT_GELU ? 0.05 : 0.01;
    bool guard_ok = true;
    for (int i = 0; i < GUARD; i++) guard_ok = guard_ok && to_float(guard_got[i]) == to_float(GUARD_VALUE);
    const bool same = same_bits(y, y_again), pdl_same = same_bits(y, y_pdl), graph_same = same_bits(y, y_graph);
    char what[96];
    snprintf(what, sizeof what, "%-9s K=%-5d N=%-5d B=%d %-2s %-8s%s", name, K, N, B, pro_name(pro), epi_name(epi),
             with_bias ? "" : " (no bias)");
    char nc[80] = "";
    if (!y_nc.empty())
        snprintf(nc, sizeof nc, "; without clusters %.2f ulp (%.2f), %.3f%%", enc.ulps, enc.ratio, 100 * enc.share);
    report(ratio <= 1.0 && share <= share_max && guard_ok && same && pdl_same && graph_same && alone_same && ln_ok,
           "%s: max err %.2f ulp (%.2f of bound), %.3f%% not correctly rounded%s%s%s%s%s%s%s", what, e.ulps, e.ratio,
           100 * e.share, nc, same ? "" : ", run twice DIFFERS", pdl_same ? "" : ", pdl=1 DIFFERS",
           graph_same ? "" : ", graph DIFFERS", alone_same ? "" : ", rows alone DIFFER",
           guard_ok ? "" : ", WROTE PAST OUT", ln_ok ? "" : ", training layernorm off its double reference");
    if (ln && !ln_ok) printf("    training layernorm vs double: max %.2f ulp\n", ln_ulps);
    cudaFree(dx); cudaFree(dbias); cudaFree(dlw); cudaFree(dlb); cudaFree(dr); cudaFree(dout);
}

// (a): the shapes
static void test_shapes(cudaStream_t s) {
    const int Bs[5] = {1, 2, 3, 5, 8};
    const DecodeIn pros[2] = {DECODE_IN_PLAIN, DECODE_IN_LAYERNORM};
    const DecodeOut epis[3] = {DECODE_OUT_PLAIN, DECODE_OUT_GELU, DECODE_OUT_RESIDUAL};
    printf("(a) decode_linear against a double-precision reference\n");
    // small and odd: every combination at every B; every other shape without bias
    const int odd[][2] = {{64, 1}, {64, 7}, {64, 8}, {64, 9}, {64, 100}, {64, 300}, {8, 5},
                          {72, 33}, {136, 257}, {1000, 40}, {6408, 24}, {2056, 130}};
    int i = 0;
    for (auto &sh : odd) {
        Weights w = make_weights(sh[0], sh[1], 0.1f);
        for (DecodeIn p : pros)
            for (DecodeOut e : epis)
                for (int B : Bs) run_case("odd", w, B, p, e, i % 2 == 0, s);
        cudaFree(w.d);
        i++;
    }
    // GPT-2's layers: each its own combination at every B, the other combinations at one B each
    for (int C : {768, 1600}) {
        printf(" GPT-2 C=%d\n", C);
        for (const Layer &L : layers) {
            const int K = L.kc * C, N = L.nc ? L.nc * C : 50304;
            Weights w = make_weights(K, N, 1.0f / sqrtf((float)K));
            char name[32];
            snprintf(name, sizeof name, "%s", L.name);
            for (int B : Bs) run_case(name, w, B, L.pro, L.epi, L.bias, s);
            if (L.nc) {  // (the lm_head's reference is the slow one)
                int j = 0;
                for (DecodeIn p : pros)
                    for (DecodeOut e : epis)
                        if (p != L.pro || e != L.epi) run_case(name, w, Bs[(j++ + C) % 5], p, e, L.bias, s);
            }
            cudaFree(w.d);
        }
    }
}

// (b) the layernorm prologue is the training forward's layernorm, bit for bit: W = identity
static void test_layernorm_identity(cudaStream_t s) {
    printf("(b) the layernorm prologue against layernorm_forward, W = identity\n");
    for (int C : {64, 768, 1600})
        for (int B : {3, 8}) {
            std::vector<floatX> x = randn((size_t)B * C, -0.5, 3.0), lw = randn(C, 1.0, 0.2), lb = randn(C, 0.0, 0.2);
            std::vector<floatX> eye((size_t)C * C, (floatX)0.0f);
            for (int i = 0; i < C; i++) eye[(size_t)i * C + i] = (floatX)1.0f;
            floatX *dx = upload(x), *dlw = upload(lw), *dlb = upload(lb), *dW = upload(eye), *dout;
            CUDA_CHECK(cudaMalloc(&dout, (size_t)B * C * sizeof(floatX)));
            std::vector<floatX> want = training_layernorm(dx, dlw, dlb, B, C);
            decode_linear(dout, dx, dW, NULL, B, C, C, DECODE_IN_LAYERNORM, dlw, dlb, DECODE_OUT_PLAIN, 0, s);
            std::vector<floatX> got = download(dout, (size_t)B * C);
            long diff = 0;
            for (size_t i = 0; i < got.size(); i++) diff += to_float(got[i]) != to_float(want[i]);
            report(diff == 0, "C=%-5d B=%d: %ld of %zu normalised values differ from layernorm_forward's", C, B, diff,
                   got.size());
            cudaFree(dx); cudaFree(dlw); cudaFree(dlb); cudaFree(dW); cudaFree(dout);
        }
}

// (c) a kernel that lets its dependents launch at once, waits `ns` nanoseconds, then copies
// src to dst (and src2 to dst2): a PDL dependent that read either before its wait would see the
// old values
__global__ void late_writer_kernel(floatX *dst, const floatX *src, size_t n, floatX *dst2, const floatX *src2,
                                   size_t n2, unsigned long long ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += (size_t)gridDim.x * blockDim.x)
        dst2[i] = src2[i];
}

static void test_pdl(cudaStream_t s) {
    const DeviceCaps *caps = device_caps();
    printf("(c) PDL: inputs written late by the previous kernel, and a fc -> fcproj chain%s\n",
           caps->cc >= 90 && sm90_code() ? "" : " (no sm_90 here: pdl is ignored, the checks still run)");
    const int C = 768, B = 5;
    struct { const char *name; int K, N; DecodeIn pro; DecodeOut epi; } cases[] = {
        {"qkv", C, 3 * C, DECODE_IN_LAYERNORM, DECODE_OUT_PLAIN}, {"attproj", C, C, DECODE_IN_PLAIN, DECODE_OUT_RESIDUAL}};
    for (auto &cs : cases) {
        Weights w = make_weights(cs.K, cs.N, 0.05f);
        std::vector<floatX> x = randn((size_t)B * cs.K, 0.0, 1.0), r = randn((size_t)B * cs.N, 0.0, 1.0);
        std::vector<floatX> bias = randn(cs.N, 0.0, 0.1), lw = randn(cs.K, 1.0, 0.1), lb = randn(cs.K, 0.0, 0.1);
        std::vector<floatX> stale_x((size_t)B * cs.K, (floatX)7.0f), stale_r((size_t)B * cs.N, (floatX)-3.0f);
        floatX *dx = upload(x), *dr = upload(r), *dbias = upload(bias), *dlw = upload(lw), *dlb = upload(lb);
        floatX *din = upload(stale_x), *dout = upload(stale_r);
        // the answer, with nothing late
        CUDA_CHECK(cudaMemcpy(din, dx, x.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(dout, dr, r.size() * sizeof(floatX), cudaMemcpyDeviceToDevice));
        decode_linear(dout, din, w.d, dbias, B, cs.K, cs.N, cs.pro, dlw, dlb, cs.epi, 0, s);
        std::vector<floatX> want = download(dout, r.size());
        for (int graph = 0; graph < 2; graph++) {
            CUDA_CHECK(cudaMemcpy(din, stale_x.data(), x.size() * sizeof(floatX), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(dout, stale_r.data(), r.size() * sizeof(floatX), cudaMemcpyHostToDevice));
            cudaGraph_t g;
            cudaGraphExec_t ge;
            if (graph) CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            late_writer_kernel<<<4, 256, 0, s>>>(din, dx, x.size(), dout, dr, r.size(), 50000);
            LAUNCH_CHECK();
            decode_linear(dout, din, w.d, dbias, B, cs.K, cs.N, cs.pro, dlw, dlb, cs.epi, 1, s);
            if (graph) {
                CUDA_CHECK(cudaStreamEndCapture(s, &g));
                CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
                CUDA_CHECK(cudaGraphLaunch(ge, s));
            }
            std::vector<floatX> got = download(dout, r.size());
            report(same_bits(got, want), "%-8s input%s written 50 us late%s: pdl=1 result %s", cs.name,
                   cs.epi == DECODE_OUT_RESIDUAL ? " and residual" : "", graph ? " (in a graph)" : "",
                   same_bits(got, want) ? "as without the delay" : "DIFFERS (read before the wait?)");
            if (graph) {
                CUDA_CHECK(cudaGraphExecDestroy(ge));
                CUDA_CHECK(cudaGraphDestroy(g));
            }
        }
        cudaFree(dx); cudaFree(dr); cudaFree(dbias); cudaFree(dlw); cudaFree(dlb); cudaFree(din); cudaFree(dout);
        cudaFree(w.d);
    }
    // fc -> fcproj, 20 layers' worth back to back, the second reading the first's output
    Weights fc = make_weights(C, 4 * C, 0.05f), proj = make_weights(4 * C, C, 0.02f);
    std::vector<floatX> x = randn((size_t)B * C, 0.0, 1.0), bfc = randn(4 * C, 0.0, 0.1), bpr = randn(C, 0.0, 0.1);
    std::vector<floatX> lw = randn(C, 1.0, 0.1), lb = randn(C, 0.0, 0.1);
    floatX *dres = upload(x), *dx0 = upload(x), *dbfc = upload(bfc), *dbpr = upload(bpr), *dlw = upload(lw),
           *dlb = upload(lb), *dh;
    CUDA_CHECK(cudaMalloc(&dh, (size_t)B * 4 * C * sizeof(floatX)));
    auto chain = [&](int pdl) {
        CUDA_CHECK(cudaMemcpyAsync(dres, dx0, x.size() * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
        for (int l = 0; l < 20; l++) {
            decode_linear(dh, dres, fc.d, dbfc, B, C, 4 * C, DECODE_IN_LAYERNORM, dlw, dlb, DECODE_OUT_GELU, pdl, s);
            decode_linear(dres, dh, proj.d, dbpr, B, 4 * C, C, DECODE_IN_PLAIN, NULL, NULL, DECODE_OUT_RESIDUAL, pdl,
                          s);
        }
    };
    chain(0);
    std::vector<floatX> want = download(dres, x.size());
    chain(1);
    std::vector<floatX> got = download(dres, x.size());
    report(same_bits(got, want), "20 x (fc -> fcproj) with pdl=1: %s pdl=0's", same_bits(got, want) ? "equal to" : "DIFFERS from");
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    chain(1);
    CUDA_CHECK(cudaStreamEndCapture(s, &g));
    CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    CUDA_CHECK(cudaMemset(dres, 0, x.size() * sizeof(floatX)));
    CUDA_CHECK(cudaGraphLaunch(ge, s));
    got = download(dres, x.size());
    report(same_bits(got, want), "20 x (fc -> fcproj) with pdl=1 in a graph: %s pdl=0's",
           same_bits(got, want) ? "equal to" : "DIFFERS from");
    CUDA_CHECK(cudaGraphExecDestroy(ge));
    CUDA_CHECK(cudaGraphDestroy(g));
    cudaFree(dres); cudaFree(dx0); cudaFree(dbfc); cudaFree(dbpr); cudaFree(dlw); cudaFree(dlb); cudaFree(dh);
    cudaFree(fc.d); cudaFree(proj.d);
}

// (d) what it refuses
static void test_refusals(cudaStream_t s) {
    printf("(d) refusals\n");
    floatX *buf;
    CUDA_CHECK(cudaMalloc(&buf, 1 << 20));
    struct { const char *what; int B, K, N; long in_off; } cases[] = {
        {"B=0", 0, 64, 8, 4096}, {"B=9", 9, 64, 8, 4096}, {"K=12", 1, 12, 8, 4096}, {"in overlapping out", 2, 64, 8, 8}};
    for (auto &c : cases) {
        FatalTrap trap;
        g_fatal_trap = &trap;
        bool refused = false;
        if (!setjmp(trap.jump)) {
            decode_linear(buf, buf + c.in_off, buf + 65536, NULL, c.B, c.K, c.N, DECODE_IN_PLAIN, NULL, NULL,
                          DECODE_OUT_PLAIN, 0, s);
        } else {
            refused = true;
        }
        g_fatal_trap = NULL;
        report(refused, "%-20s refused%s%s", c.what, refused ? ": " : "", refused ? trap.msg : " NOT");
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaFree(buf);
}

// ---------------------------------------------------------------------------
// --bench

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static void bench(void) {
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    matmul_init(s);
    MatmulModes modes = MATMUL_MODES_DEFAULT;
    cudaDeviceProp prop;
    int dev = 0, mem_khz = 0, bus_bits = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    const double peak_here = 2.0 * mem_khz * 1e3 * bus_bits / 8 / 1e9;  // GB/s (DDR: 2 transfers a clock)
    const double peak_h100 = 3350.0;
    printf("test_decode --bench (%s) on %s, %d SMs, theoretical %.0f GB/s; %% columns: of 3.35 TB/s / of this GPU's\n",
           PRECISION_NAME, prop.name, prop.multiProcessorCount, peak_here);
    printf("each: a CUDA graph of back-to-back calls over distinct weight copies (>= 256 MB: not from L2); the\n"
           "median of 15 graph launches / calls. cuBLAS: matmul_forward (bias, GELU fused; no layernorm, no residual)\n");
    printf("plan: K split over KSB blocks (a cluster) x KS warps, S steps of %d each; TB tiles of 8 rows x warps a\n"
           "block; grid blocks x tile groups a block\n", DL_KSTEP);
    printf("%-12s %5s %6s %2s %-24s | %-25s | %-25s | %-25s\n", "layer", "K", "N", "B", "plan KSBxKS xS TBxwarps grid",
           "pdl=0 us GB/s %", "pdl=1 us GB/s %", "cuBLAS us GB/s %");
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int C : {768, 1600}) {
        for (const Layer &L : layers) {
            const int K = L.kc * C, N = L.nc ? L.nc * C : 50304;
            const size_t wbytes = (size_t)K * N * sizeof(floatX);
            int copies = (int)((256ull << 20) / wbytes) + 1;
            if (copies < 2) copies = 2;
            const int calls = copies < 20 ? 20 : copies;
            std::vector<floatX *> W(copies);
            for (int i = 0; i < copies; i++) {
                CUDA_CHECK(cudaMalloc(&W[i], wbytes));
                fill_uniform(W[i], (size_t)K * N, 0.02f, 1000 + i, s);
            }
            floatX *in, *out, *pre, *bias, *lw, *lb;
            CUDA_CHECK(cudaMalloc(&in, (size_t)8 * K * sizeof(floatX)));
            CUDA_CHECK(cudaMalloc(&out, (size_t)8 * N * sizeof(floatX)));
            CUDA_CHECK(cudaMalloc(&pre, (size_t)8 * N * sizeof(floatX)));
            CUDA_CHECK(cudaMalloc(&bias, (size_t)N * sizeof(floatX)));
            CUDA_CHECK(cudaMalloc(&lw, (size_t)K * sizeof(floatX)));
            CUDA_CHECK(cudaMalloc(&lb, (size_t)K * sizeof(floatX)));
            fill_uniform(in, (size_t)8 * K, 1.0f, 1, s);
            fill_uniform(out, (size_t)8 * N, 1.0f, 2, s);
            fill_uniform(bias, N, 0.1f, 3, s);
            fill_uniform(lw, K, 1.0f, 4, s);
            fill_uniform(lb, K, 0.1f, 5, s);
            for (int B : {1, 4, 8}) {
                double us[3];
                for (int mode = 0; mode < 3; mode++) {  // pdl 0, pdl 1, cuBLAS
                    auto one = [&](int i) {
                        const floatX *b = L.bias ? bias : NULL;
                        if (mode < 2)
                            decode_linear(out, in, W[i % copies], b, B, K, N, L.pro, lw, lb, L.epi, mode, s);
                        else
                            matmul_forward(&modes, out, L.epi == DECODE_OUT_GELU ? pre : NULL, in, W[i % copies], b,
                                           B, K, N, s);
                    };
                    one(0);  // (first calls: cuBLASLt's heuristic, shared-memory opt-in, occupancy)
                    CUDA_CHECK(cudaStreamSynchronize(s));
                    cudaGraph_t g;
                    cudaGraphExec_t ge;
                    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                    for (int i = 0; i < calls; i++) one(i);
                    CUDA_CHECK(cudaStreamEndCapture(s, &g));
                    CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
                    for (int i = 0; i < 3; i++) CUDA_CHECK(cudaGraphLaunch(ge, s));
                    std::vector<double> t;
                    for (int rep = 0; rep < 15; rep++) {
                        CUDA_CHECK(cudaEventRecord(e0, s));
                        CUDA_CHECK(cudaGraphLaunch(ge, s));
                        CUDA_CHECK(cudaEventRecord(e1, s));
                        CUDA_CHECK(cudaEventSynchronize(e1));
                        float ms;
                        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
                        t.push_back(ms * 1e3 / calls);
                    }
                    us[mode] = median(t);
                    CUDA_CHECK(cudaGraphExecDestroy(ge));
                    CUDA_CHECK(cudaGraphDestroy(g));
                }
                DecodeLinearPlan p = decode_linear_plan(K, N, L.pro, prop.multiProcessorCount,
                                                        device_caps()->cc >= 90 && sm90_code());
                decode_linear_grid(&p, B, N, prop.multiProcessorCount);
                char plan[64], name[32], col[3][40];
                snprintf(plan, sizeof plan, "%dx%-2d x%-3d %dx%-2d %4d x%d", p.KSB, p.KS, p.S, p.TB, p.warps, p.grid,
                         p.iters);
                snprintf(name, sizeof name, "d%s %s", C == 768 ? "12" : "48", L.name);
                for (int m = 0; m < 3; m++) {
                    const double gbs = wbytes / (us[m] * 1e-6) / 1e9;
                    snprintf(col[m], sizeof col[m], "%7.2f %6.0f %3.0f/%3.0f", us[m], gbs, 100 * gbs / peak_h100,
                             100 * gbs / peak_here);
                }
                printf("%-12s %5d %6d %2d %-24s | %-25s | %-25s | %-25s\n", name, K, N, B, plan, col[0], col[1],
                       col[2]);
                fflush(stdout);
            }
            for (auto w : W) cudaFree(w);
            cudaFree(in); cudaFree(out); cudaFree(pre); cudaFree(bias); cudaFree(lw); cudaFree(lb);
        }
    }
    matmul_free();
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_decode: no GPU\n");
        return 77;
    }
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        bench();
        return 0;
    }
    uint64_t seed = (uint64_t)time(NULL);
    if (argc > 2 && !strcmp(argv[1], "--seed")) seed = strtoull(argv[2], NULL, 10);
    g_rng = seed * 0x9E3779B97F4A7C15ull | 1;
    const DeviceCaps *caps = device_caps();
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    printf("test_decode (%s, %s path), compute capability %d.%d, %d SMs, %s, seed %llu\n", PRECISION_NAME,
           DL_MMA ? "tensor-core" : "CUDA-core", caps->cc / 10, caps->cc % 10, sms,
           caps->cc >= 90 && sm90_code() ? "PDL and clusters" : "no PDL, no clusters",
           (unsigned long long)seed);
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    test_refusals(s);
    test_layernorm_identity(s);
    test_pdl(s);
    test_shapes(s);
    return report_finish();
}
