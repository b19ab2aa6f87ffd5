// dev/test/test_attention.cu: flash attention (kernels/attention.cuh) against a simple fp32
// GPU reference, forward (out, lse) and backward (dq, dk, dv), at several shapes, plus a
// bitwise determinism check of the backward. bf16 or fp16 build (-DPRECISION=BF16|FP16).
//   build/test_attention [--seed N]            correctness; exit 1 on any miss
//   build/test_attention --bench B NH T hs     timing of ours (and the old cuBLAS path), and
//                                              joules per layer under a sustained load
#include "gpu/host/energy.h"
#include "attention_variants.cuh"  // (kernels/attention.cuh, and the kernels only tests run)
#include <vector>
#include <string.h>
#include <time.h>

#if PRECISION == PRECISION_FP32
#error "flash attention test needs -DPRECISION=BF16 or FP16"
#endif

static uint64_t rng_state;
static float frand(void) {  // uniform [0, 1)
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) & 0xFFFFFF) / 16777216.0f;
}

// reference, one thread per query row: lse, out, D = dout . out, dq (all fp32)
__global__ void ref_rows_kernel(float *out, float *lse, float *Dref, float *dq, const floatX *qkv, const floatX *dout,
                                int B, int T, int NH, int hs) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)B * NH * T) return;
    int t = (int)(idx % T), h = (int)((idx / T) % NH), b = (int)(idx / ((long)T * NH));
    int C = NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
    const floatX *dO = dout + ((size_t)b * T + t) * C + h * hs;
    float qv[128], acc[128], dov[128];
    for (int d = 0; d < hs; d++) { qv[d] = to_float(q[d]); acc[d] = 0.0f; dov[d] = to_float(dO[d]); }
    float m = -INFINITY;
    for (int j = 0; j <= t; j++) {
        const floatX *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
        float s = 0.0f;
        for (int d = 0; d < hs; d++) s += qv[d] * to_float(k[d]);
        m = fmaxf(m, s * scale);
    }
    float l = 0.0f;
    for (int j = 0; j <= t; j++) {
        const floatX *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs, *v = k + C;
        float s = 0.0f;
        for (int d = 0; d < hs; d++) s += qv[d] * to_float(k[d]);
        float p = expf(s * scale - m);
        l += p;
        for (int d = 0; d < hs; d++) acc[d] += p * to_float(v[d]);
    }
    float L = m + logf(l), Dd = 0.0f;
    for (int d = 0; d < hs; d++) {
        float o = acc[d] / l;
        out[((size_t)b * T + t) * C + h * hs + d] = o;
        Dd += o * dov[d];
        acc[d] = 0.0f;
    }
    lse[idx] = L;
    Dref[idx] = Dd;
    for (int j = 0; j <= t; j++) {
        const floatX *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs, *v = k + C;
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < hs; d++) { s += qv[d] * to_float(k[d]); dp += dov[d] * to_float(v[d]); }
        float ds = expf(s * scale - L) * (dp - Dd);
        for (int d = 0; d < hs; d++) acc[d] += ds * to_float(k[d]);
    }
    for (int d = 0; d < hs; d++) dq[((size_t)b * T + t) * C + h * hs + d] = acc[d] * scale;
}

// reference, one thread per key row: dk, dv
__global__ void ref_keys_kernel(float *dk, float *dv, const float *lse, const float *Dref, const floatX *qkv,
                                const floatX *dout, int B, int T, int NH, int hs) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)B * NH * T) return;
    int j = (int)(idx % T), h = (int)((idx / T) % NH), b = (int)(idx / ((long)T * NH));
    int C = NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    const floatX *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs, *v = k + C;
    float kv[128], vv[128], ak[128], av[128];
    for (int d = 0; d < hs; d++) { kv[d] = to_float(k[d]); vv[d] = to_float(v[d]); ak[d] = av[d] = 0.0f; }
    long rowbase = idx - j;
    for (int t = j; t < T; t++) {
        const floatX *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        const floatX *dO = dout + ((size_t)b * T + t) * C + h * hs;
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < hs; d++) { s += to_float(q[d]) * kv[d]; dp += to_float(dO[d]) * vv[d]; }
        float p = expf(s * scale - lse[rowbase + t]);
        float ds = p * (dp - Dref[rowbase + t]);
        for (int d = 0; d < hs; d++) { av[d] += p * to_float(dO[d]); ak[d] += ds * to_float(q[d]); }
    }
    for (int d = 0; d < hs; d++) {
        dk[((size_t)b * T + j) * C + h * hs + d] = ak[d] * scale;
        dv[((size_t)b * T + j) * C + h * hs + d] = av[d];
    }
}

static std::vector<float> to_host_f(const floatX *d, size_t n) {
    std::vector<floatX> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> r(n);
    for (size_t i = 0; i < n; i++) r[i] = to_float(h[i]);
    return r;
}
static std::vector<float> to_host(const float *d, size_t n) {
    std::vector<float> r(n);
    CUDA_CHECK(cudaMemcpy(r.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return r;
}
// max |got - ref| / max |ref| over the elements, with got taken at stride/offset (for dqkv);
// NaN anywhere gives NaN
static double rel_err(const std::vector<float> &got, const std::vector<float> &ref, size_t rows, int cols,
                      int got_stride, int got_off) {
    double maxerr = 0.0, maxref = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double g = got[r * got_stride + got_off + c], f = ref[r * cols + c];
            double e = fabs(g - f);
            if (!(e == e)) return NAN;
            if (e > maxerr) maxerr = e;
            if (fabs(f) > maxref) maxref = fabs(f);
        }
    return maxerr / (maxref > 0 ? maxref : 1.0);
}

typedef void (*FwdFn)(floatX *, float *, const floatX *, int, int, int, cudaStream_t);
typedef void (*BwdFn)(floatX *, floatX *, const floatX *, const floatX *, const floatX *, const float *, float *, int,
                      int, int, cudaStream_t);
// tile-shape variants for hs = 64 (the first of each is the launchers' default): with
// FLASH_WGMMA (a build that includes sm_90a) the wgmma kernels (attention_sm90.cuh,
// attention_sm90_ws.cuh, attention_variants.cuh) first, the NWG of each list, then
// attention_mma.cuh's mma.sync ones; a GPU that does not run wgmma (flash_wgmma_runs_here)
// starts each list after them
#if FLASH_WGMMA
enum { NWG_F = 7, NWG_B = 6 };
#define WG_FWD flash90ws::forward_ws_cfg<2, 64, 2, 2, 104>, flash90ws::forward_ws_cfg<2, 64, 3, 2, 104>, \
    flash90ws::forward_ws_cfg<2, 128, 2, 1, 240, true>, flash90ws::forward_ws_cfg<2, 128, 3, 1, 240, true, true>, \
    flash90::forward_cfg<2, 64, 2>, flash90::forward_cfg<1, 64, 4>, flash90::forward_pipe_cfg<2, 64, 2>,
#define WG_FWD_NAMES "wgmma ws NC2 BN64 2 stages 2/SM", "wgmma ws NC2 BN64 3 stages 2/SM", \
    "wgmma ws NC2 BN128 2 stages ping-pong", "wgmma ws NC2 BN128 3 stages ping-pong pipelined", \
    "wgmma fwd NWG2 BN64 2/SM", "wgmma fwd NWG1 BN64 4/SM", "wgmma pipe NWG2 BN64 2/SM",
#define WG_BWD flash90ws::backward_ws_cfg<2, 3, 240, true>, flash90ws::backward_ws_cfg<2, 3, 240, true, 2>, \
    flash90ws::backward_ws_cfg<2, 3, 240, true, 3, 160>, flash90ws::backward_ws_cfg<2, 3, 240, false>, \
    flash90::backward_cfg<64, 1, 3, 1, 2>, flash90::backward_cfg<64, 1, 3, 2, 1>,
#define WG_BWD_NAMES "wgmma bwd dq(NWG1 3/SM) + kv ws NC2 3 stages K,V regs", \
    "wgmma bwd dq ws NC2 + kv ws NC2 K,V regs", "wgmma bwd dq ws NC3 + kv ws NC2 K,V regs", \
    "wgmma bwd dq(NWG1 3/SM) + kv ws NC2 3 stages", "wgmma bwd dq(NWG1 3/SM) kv(NWG1 2/SM)", \
    "wgmma bwd dq(NWG1 3/SM) kv(NWG2)",
#else
enum { NWG_F = 0, NWG_B = 0 };
#define WG_FWD
#define WG_FWD_NAMES
#define WG_BWD
#define WG_BWD_NAMES
#endif
static const FwdFn fwd_variants[] = {WG_FWD flash::forward_cfg<64, 4, 64, 2>, flash::forward_cfg<64, 4, 64, 1>,
                                     flash::forward_cfg<64, 4, 32, 2>, flash::forward_cfg<64, 8, 64, 1>,
                                     flash::forward_cfg<64, 8, 32, 2>, flash::forward_cfg<64, 8, 64, 2>};
static const char *fwd_names[] = {WG_FWD_NAMES "fwd NW4 BN64 MT2", "fwd NW4 BN64 MT1", "fwd NW4 BN32 MT2",
                                  "fwd NW8 BN64 MT1", "fwd NW8 BN32 MT2", "fwd NW8 BN64 MT2"};
static const BwdFn bwd_variants[] = {
    WG_BWD flash::backward_cfg<64, 2, 32, 2, 4, 32, 2>, flash::backward_cfg<64, 4, 64, 1, 4, 64, 1>,
    flash::backward_cfg<64, 8, 64, 1, 4, 64, 1>,
    flash::backward_cfg<64, 4, 64, 1, 4, 32, 2>, flash::backward_cfg<64, 4, 64, 1, 8, 32, 2>,
    flash::backward_cfg<64, 4, 32, 2, 4, 32, 2>,
    flash::backward_cfg<64, 4, 32, 2, 4, 64, 1>, flash::backward_cfg<64, 2, 64, 1, 4, 32, 2>};
static const char *bwd_names[] = {WG_BWD_NAMES "bwd kv(NW2,BM32,KT2) dq(NW4,BN32,MT2)", "bwd kv(NW4,BM64,KT1) dq(NW4,BN64,MT1)",
                                  "bwd kv(NW8,BM64,KT1) dq(NW4,BN64,MT1)",
                                  "bwd kv(NW4,BM64,KT1) dq(NW4,BN32,MT2)", "bwd kv(NW4,BM64,KT1) dq(NW8,BN32,MT2)",
                                  "bwd kv(NW4,BM32,KT2) dq(NW4,BN32,MT2)",
                                  "bwd kv(NW4,BM32,KT2) dq(NW4,BN64,MT1)", "bwd kv(NW2,BM64,KT1) dq(NW4,BN32,MT2)"};
// the atomic-dq backward's tile shapes (the first is its default, attention_mma.cuh's Cfg)
static const BwdFn abwd_variants[] = {flash::backward_atomic_cfg<64, 2, 32, 2>, flash::backward_atomic_cfg<64, 4, 64, 1>,
                                      flash::backward_atomic_cfg<64, 4, 32, 1>, flash::backward_atomic_cfg<64, 8, 64, 1>,
                                      flash::backward_atomic_cfg<64, 2, 64, 1>};
static const char *abwd_names[] = {"atomic kv(NW2,BM32,KT2)", "atomic kv(NW4,BM64,KT1)", "atomic kv(NW4,BM32,KT1)",
                                   "atomic kv(NW8,BM64,KT1)", "atomic kv(NW2,BM64,KT1)"};
static const int NAV = sizeof(abwd_variants) / sizeof(abwd_variants[0]);
// variants for hs = 128 (wgmma only; none where wgmma does not run; the first of each is the default)
#if FLASH_WGMMA
static const FwdFn fwd128_variants[] = {flash90ws::forward_ws_cfg<2, 128, 3, 1, 240, true, true, 128>,
                                        flash90ws::forward_ws_cfg<2, 128, 2, 1, 240, true, false, 128>,
                                        flash90ws::forward_ws_cfg<2, 128, 3, 1, 240, true, false, 128>,
                                        flash90ws::forward_ws_cfg<2, 128, 2, 1, 240, false, false, 128>,
                                        flash90ws::forward_ws_cfg<2, 64, 2, 1, 240, true, false, 128>,
                                        flash90::forward_pipe_cfg<1, 64, 3, 128>};
static const char *fwd128_names[] = {"wgmma ws hs128 NC2 BN128 3 stages ping-pong pipelined",
                                     "wgmma ws hs128 NC2 BN128 2 stages ping-pong",
                                     "wgmma ws hs128 NC2 BN128 3 stages ping-pong",
                                     "wgmma ws hs128 NC2 BN128 2 stages", "wgmma ws hs128 NC2 BN64 2 stages ping-pong",
                                     "wgmma pipe hs128 NWG1 BN64 3/SM"};
static const int NF128 = sizeof(fwd128_variants) / sizeof(fwd128_variants[0]);
static const BwdFn bwd128_variants[] = {flash90::backward_cfg<128, 1, 2, 2, 1>, flash90::backward_cfg<128, 2, 1, 2, 1>,
                                        flash90::backward_cfg<128, 1, 2, 1, 1>};
static const char *bwd128_names[] = {"wgmma pipe hs128 dq(NWG1 2/SM) kv(NWG2)", "wgmma pipe hs128 dq(NWG2) kv(NWG2)",
                                     "wgmma pipe hs128 dq(NWG1 2/SM) kv(NWG1)"};
static const int NB128 = sizeof(bwd128_variants) / sizeof(bwd128_variants[0]);
#else
static const BwdFn *bwd128_variants = NULL;
static const char **bwd128_names = NULL;
static const int NB128 = 0;
static const FwdFn *fwd128_variants = NULL;
static const char **fwd128_names = NULL;
static const int NF128 = 0;
#endif
// this GPU's variants: fwd_variants[FV0 ..], NFV of them; bwd_variants[BV0 ..], NBV (set by main)
static int FV0 = 0, BV0 = 0, NFV = 0, NBV = 0;
static void variants_for_this_gpu(void) {
    FV0 = flash_wgmma_runs_here() ? 0 : NWG_F;
    BV0 = flash_wgmma_runs_here() ? 0 : NWG_B;
    NFV = (int)(sizeof(fwd_variants) / sizeof(fwd_variants[0])) - FV0;
    NBV = (int)(sizeof(bwd_variants) / sizeof(bwd_variants[0])) - BV0;
}
// NULL: the public launchers
static FwdFn g_fwd = NULL;
static BwdFn g_bwd = NULL;
static void do_fwd(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH) {
    if (g_fwd) g_fwd(out, lse, qkv, B, T, NH, 0);
    else flash_attention_forward(out, lse, qkv, B, T, C, NH, 0);
}
// deterministic: the public launcher's mode (a variant is one backward, whatever it is)
static void do_bwd(floatX *dqkv, floatX *dbv, const floatX *dout, const floatX *qkv, const floatX *out, const float *lse,
                   float *scr, int B, int T, int C, int NH, int deterministic) {
    if (g_bwd) g_bwd(dqkv, dbv, dout, qkv, out, lse, scr, B, T, NH, 0);
    else flash_attention_backward(dqkv, dbv, dout, qkv, out, lse, scr, B, T, C, NH, deterministic, 0);
}

static int passed = 0, failed = 0;
static void check(const char *what, double err, double tol) {
    bool ok = err <= tol;  // false for NaN
    printf("  %-6s err %.3e  (tol %.0e)  %s\n", what, err, tol, ok ? "ok" : "FAIL");
    if (ok) passed++; else failed++;
}

// scratch for any backward, the atomic-dq variants included: those run here by name even
// where the launchers would not take them (a 9.0 GPU's wgmma backward needs no dq_acc)
static size_t scratch_elems_any(int B, int T, int C, int NH) { return flash_backward_scratch_elems_for(B, T, C, NH, 1); }

// atomic: the backward under test is the atomic-dq one, the public launcher's deterministic 0
// (dq's bits may differ between runs)
static void run_case(int B, int NH, int T, int hs, uint64_t seed, bool atomic) {
    int C = NH * hs;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nrow = (size_t)B * NH * T;
    size_t nscr = scratch_elems_any(B, T, C, NH);
    printf("case B=%d NH=%d T=%d hs=%d, %s backward (seed %llu)\n", B, NH, T, hs,
           atomic ? "--deterministic 0 (atomic-dq where built)" : "deterministic", (unsigned long long)seed);
    rng_state = seed;
    std::vector<floatX> hq(nqkv), ho(nout);
    for (auto &x : hq) x = (floatX)((frand() * 2.0f - 1.0f) * 1.7f);
    for (auto &x : ho) x = (floatX)(frand() * 2.0f - 1.0f);
    floatX *qkv, *dout, *out, *dqkv, *dqkv2, *dbv, *dbv2;
    float *lse, *scratch, *rout, *rlse, *rD, *rdq, *rdk, *rdv;
    CUDA_CHECK(cudaMalloc(&dbv, C * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dbv2, C * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(dbv, 0, C * sizeof(floatX)));  // the backward adds to it
    CUDA_CHECK(cudaMemset(dbv2, 0, C * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&qkv, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dqkv, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dqkv2, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dout, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&out, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&lse, nrow * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&scratch, nscr * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&rout, nout * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&rdq, nout * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&rdk, nout * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&rdv, nout * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&rlse, nrow * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&rD, nrow * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(qkv, hq.data(), nqkv * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dout, ho.data(), nout * sizeof(floatX), cudaMemcpyHostToDevice));
    // poison (0xFF bytes: NaN in bf16, fp16 and fp32)
    CUDA_CHECK(cudaMemset(out, 0xFF, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(lse, 0xFF, nrow * sizeof(float)));
    CUDA_CHECK(cudaMemset(dqkv, 0xFF, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(dqkv2, 0xFF, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(scratch, 0xFF, nscr * sizeof(float)));

    ref_rows_kernel<<<ceil_div(nrow, 128), 128>>>(rout, rlse, rD, rdq, qkv, dout, B, T, NH, hs);
    LAUNCH_CHECK();
    ref_keys_kernel<<<ceil_div(nrow, 128), 128>>>(rdk, rdv, rlse, rD, qkv, dout, B, T, NH, hs);
    LAUNCH_CHECK();
    do_fwd(out, lse, qkv, B, T, C, NH);
    do_bwd(dqkv, dbv, dout, qkv, out, lse, scratch, B, T, C, NH, !atomic);
    CUDA_CHECK(cudaMemset(scratch, 0xFF, nscr * sizeof(float)));
    do_bwd(dqkv2, dbv2, dout, qkv, out, lse, scratch, B, T, C, NH, !atomic);
    CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<float> o = to_host_f(out, nout), ro = to_host(rout, nout);
    std::vector<float> l = to_host(lse, nrow), rl = to_host(rlse, nrow);
    std::vector<float> g = to_host_f(dqkv, nqkv);
    std::vector<float> rq = to_host(rdq, nout), rk = to_host(rdk, nout), rv = to_host(rdv, nout);
    // tolerances: bf16 has an 8-bit significand (unit roundoff 2^-9 ~ 2e-3); out is stored in
    // floatX and P passes through floatX in P V: a few roundoffs of the largest value.
    // The gradients pass through two roundings (P or dS in floatX, then the result), summed
    // over up to T terms of mixed sign: 2e-2 of the largest value. lse is fp32 throughout.
    double tol_out = 1e-2, tol_grad = 2e-2, tol_lse = 1e-4;
#if PRECISION == PRECISION_FP16
    tol_out = 5e-3; tol_grad = 1e-2;  // fp16: 11-bit significand
#endif
    check("out", rel_err(o, ro, (size_t)B * T, C, C, 0), tol_out);
    check("lse", rel_err(l, rl, nrow, 1, 1, 0), tol_lse);
    check("dq", rel_err(g, rq, (size_t)B * T, C, 3 * C, 0), tol_grad);
    check("dk", rel_err(g, rk, (size_t)B * T, C, 3 * C, C), tol_grad);
    check("dv", rel_err(g, rv, (size_t)B * T, C, 3 * C, 2 * C), tol_grad);
    // the v-bias gradient: column sums of dout, in double here; the kernel's fp32 sums end
    // in one floatX rounding
    std::vector<float> rb(C, 0.0f), gb = to_host_f(dbv, C);
    for (int c = 0; c < C; c++) {
        double sum = 0.0;
        for (size_t bt = 0; bt < (size_t)B * T; bt++) sum += (double)(float)ho[bt * C + c];
        rb[c] = (float)sum;
    }
    check("dbv", rel_err(gb, rb, 1, C, C, 0), tol_out);
    std::vector<floatX> a(nqkv), c(nqkv);
    CUDA_CHECK(cudaMemcpy(a.data(), dqkv, nqkv * sizeof(floatX), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(c.data(), dqkv2, nqkv * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<floatX> ba(C), bc(C);
    CUDA_CHECK(cudaMemcpy(ba.data(), dbv, C * sizeof(floatX), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(bc.data(), dbv2, C * sizeof(floatX), cudaMemcpyDeviceToHost));
    if (!atomic) {
        bool same = memcmp(a.data(), c.data(), nqkv * sizeof(floatX)) == 0 && memcmp(ba.data(), bc.data(), C * sizeof(floatX)) == 0;
        printf("  %-6s two backward runs %s\n", "determ", same ? "bitwise identical: ok" : "DIFFER: FAIL");
        if (same) passed++; else failed++;
    } else {  // dk, dv still come in a fixed order; dq's largest run-to-run difference is shown
        bool same = true;
        double dqdiff = 0.0;
        for (size_t bt = 0; bt < (size_t)B * T; bt++) {
            const floatX *x = a.data() + bt * 3 * C, *y = c.data() + bt * 3 * C;
            same = same && memcmp(x + C, y + C, 2 * C * sizeof(floatX)) == 0;
            for (int i = 0; i < C; i++) dqdiff = fmax(dqdiff, fabs((double)(float)x[i] - (double)(float)y[i]));
        }
        same = same && memcmp(ba.data(), bc.data(), C * sizeof(floatX)) == 0;
        printf("  %-6s two backward runs: dk, dv, dbv %s; dq max |difference| %.3e\n", "determ",
               same ? "bitwise identical: ok" : "DIFFER: FAIL", dqdiff);
        if (same) passed++; else failed++;
    }
    cudaFree(qkv); cudaFree(dqkv); cudaFree(dqkv2); cudaFree(dout); cudaFree(out); cudaFree(lse); cudaFree(scratch);
    cudaFree(dbv); cudaFree(dbv2); cudaFree(rout); cudaFree(rdq); cudaFree(rdk); cudaFree(rdv); cudaFree(rlse); cudaFree(rD);
}

// mean ms of fn over 20 runs after 3 warm-up runs
template <class F>
static float time_ms(F fn, cudaEvent_t e0, cudaEvent_t e1) {
    const int warm = 3, iters = 20;
    for (int i = 0; i < warm; i++) fn();
    CUDA_CHECK(cudaEventRecord(e0));
    for (int i = 0; i < iters; i++) fn();
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / iters;
}

static void bench(int B, int NH, int T, int hs, int variants) {
    int C = NH * hs;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nrow = (size_t)B * NH * T;
    floatX *qkv, *dout, *out, *dqkv, *dbv;  // dbv: the v-bias gradient, as the trainer asks for it
    float *lse, *scratch;
    CUDA_CHECK(cudaMalloc(&dbv, C * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(dbv, 0, C * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&qkv, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dqkv, nqkv * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dout, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&out, nout * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&lse, nrow * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&scratch, scratch_elems_any(B, T, C, NH) * sizeof(float)));
    rng_state = 1234;
    std::vector<floatX> h(nqkv);
    for (auto &x : h) x = (floatX)((frand() * 2.0f - 1.0f) * 1.7f);
    CUDA_CHECK(cudaMemcpy(qkv, h.data(), nqkv * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dout, h.data(), nout * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    double flops_f = 2.0 * 2.0 * B * NH * (double)T * T * hs / 2.0, flops_b = 2.5 * flops_f;
    float ms_f, ms_b, ms_f0 = 0.0f;
    // the variant lists of this head size (the first of each is the default): hs = 128's on wgmma
    const bool v128 = hs == 128 && variants && FV0 == 0 && NF128 > 0;
    const FwdFn *fl = v128 ? fwd128_variants : fwd_variants + FV0;
    const BwdFn *bl = v128 ? bwd128_variants : bwd_variants + BV0;
    const char *const *fnames = v128 ? fwd128_names : fwd_names + FV0;
    const char *const *bnames = v128 ? bwd128_names : bwd_names + BV0;
    int nf = (hs == 64 && variants) ? NFV : v128 ? NF128 : 1, nb = (hs == 64 && variants) ? NBV : v128 ? NB128 : 1;
    for (int v = 0; v < nf || v < nb; v++) {
        g_fwd = v < nf && nf > 1 ? fl[v] : NULL;
        g_bwd = v < nb && nb > 1 ? bl[v] : NULL;
        ms_f = time_ms([&] { do_fwd(out, lse, qkv, B, T, C, NH); }, e0, e1);
        ms_b = time_ms([&] { do_bwd(dqkv, dbv, dout, qkv, out, lse, scratch, B, T, C, NH, 1); }, e0, e1);
        if (nf > 1 || nb > 1)
            printf("VARIANT %d [%s | %s] fwd_ms %.4f fwd_tflops %.1f bwd_ms %.4f bwd_tflops %.1f\n", v,
                   v < nf ? fnames[v] : "-", v < nb ? bnames[v] : "-", ms_f, flops_f / ms_f * 1e-9,
                   ms_b, flops_b / ms_b * 1e-9);
        if (v == 0) {  // the defaults (the atomic-dq line below reuses this forward time)
            ms_f0 = ms_f;
            printf("BENCH ours B=%d NH=%d T=%d hs=%d fwd_ms %.4f fwd_tflops %.1f bwd_ms %.4f bwd_tflops %.1f\n", B, NH,
                   T, hs, ms_f, flops_f / ms_f * 1e-9, ms_b, flops_b / ms_b * 1e-9);
        }
    }
    g_fwd = NULL;
    g_bwd = NULL;
    {  // the defaults' forward + backward again and again for ~4 s, so that the board reaches
       // the clock its power limit allows: ms and joules (NVML) per layer
        EnergyMeter meter;
        char bus[32] = "";
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
        int have_energy = energy_open(&meter, bus);
        int reps = (int)(4000.0f / (ms_f0 + ms_b)) + 1;
        CUDA_CHECK(cudaDeviceSynchronize());
        double e_start = energy_joules(&meter);
        CUDA_CHECK(cudaEventRecord(e0));
        for (int r = 0; r < reps; r++) {
            do_fwd(out, lse, qkv, B, T, C, NH);
            do_bwd(dqkv, dbv, dout, qkv, out, lse, scratch, B, T, C, NH, 1);
        }
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        double joules = energy_joules(&meter) - e_start;
        printf("SUSTAINED ours B=%d NH=%d T=%d hs=%d: %d x (fwd + bwd), %.4f ms each", B, NH, T, hs, reps, ms / reps);
        if (have_energy) printf(", %.3f J each, %.0f W mean", joules / reps, joules / (ms * 1e-3));
        else printf(" (energy not measured: %s)", meter.why);
        printf("\n");
    }
    {  // --deterministic 0 through the public launcher (the atomic-dq backward where it is the
       // faster one), then the atomic-dq tile variants
        int na = (hs == 64 && variants) ? NAV : 0;
        for (int v = -1; v < na; v++) {
            g_bwd = v >= 0 ? abwd_variants[v] : NULL;
            ms_b = time_ms([&] { do_bwd(dqkv, dbv, dout, qkv, out, lse, scratch, B, T, C, NH, 0); }, e0, e1);
            if (v >= 0) printf("VARIANT a%d [%s] bwd_ms %.4f bwd_tflops %.1f\n", v, abwd_names[v], ms_b, flops_b / ms_b * 1e-9);
            else
                printf("BENCH ours_atomic B=%d NH=%d T=%d hs=%d fwd_ms %.4f fwd_tflops %.1f bwd_ms %.4f bwd_tflops %.1f\n",
                       B, NH, T, hs, ms_f0, flops_f / ms_f0 * 1e-9, ms_b, flops_b / ms_b * 1e-9);
        }
        g_bwd = NULL;
    }
    if (variants) {  // the old cuBLAS path at this shape, for reference
        matmul_init(0);
        floatX *att, *ascr;
        size_t na = (size_t)B * NH * T * T;
        size_t ns = attention_backward_scratch_elems(B, T, C, NH);
        CUDA_CHECK(cudaMalloc(&att, na * sizeof(floatX)));
        CUDA_CHECK(cudaMalloc(&ascr, ns * sizeof(floatX)));
        ms_f = time_ms([&] { attention_forward(&MATMUL_MODES_DEFAULT, out, att, qkv, ascr, B, T, C, NH, 0); }, e0, e1);
        ms_b = time_ms([&] { attention_backward(&MATMUL_MODES_DEFAULT, dqkv, dout, qkv, att, ascr, B, T, C, NH, 0); }, e0, e1);
        printf("BENCH old B=%d NH=%d T=%d hs=%d fwd_ms %.4f fwd_tflops %.1f bwd_ms %.4f bwd_tflops %.1f\n", B, NH, T,
               hs, ms_f, flops_f / ms_f * 1e-9, ms_b, flops_b / ms_b * 1e-9);
        cudaFree(att);
        cudaFree(ascr);
    }
    cudaFree(qkv); cudaFree(dqkv); cudaFree(dout); cudaFree(out); cudaFree(lse); cudaFree(scratch); cudaFree(dbv);
}

int main(int argc, char **argv) {
    variants_for_this_gpu();
    if (argc >= 6 && !strcmp(argv[1], "--bench")) {  // --bench B NH T hs [variants 0|1]
        bench(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), argc >= 7 ? atoi(argv[6]) : 0);
        return 0;
    }
    uint64_t seed = (uint64_t)time(NULL);
    if (argc >= 3 && !strcmp(argv[1], "--seed")) seed = strtoull(argv[2], NULL, 10);
    printf("test_attention (%s, %s kernels), seed %llu\n", PRECISION_NAME,
           flash_wgmma_runs_here() ? "wgmma" : "mma.sync", (unsigned long long)seed);
    const int shapes[][4] = {{2, 12, 1024, 64}, {1, 4, 4096, 64}, {2, 8, 333, 64}, {1, 6, 512, 128},
                             {3, 2, 17, 64},    {1, 3, 1000, 128}, {2, 2, 129, 64}};
    const int nshapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
    for (int i = 0; i < nshapes; i++) run_case(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], seed + i, false);
    for (int i = 0; i < nshapes; i++)
        run_case(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], seed + 50 + i, true);
    // the other tile shapes (benchmarked with --bench ... 1) at two shapes
    for (int v = 1; v < NFV || v < NBV; v++) {
        g_fwd = fwd_variants[FV0 + (v < NFV ? v : 0)];
        g_bwd = bwd_variants[BV0 + (v < NBV ? v : 0)];
        printf("variant %d: %s | %s\n", v, v < NFV ? fwd_names[FV0 + v] : "-", v < NBV ? bwd_names[BV0 + v] : "-");
        run_case(2, 8, 333, 64, seed + 100 + v, false);
        run_case(1, 4, 1024, 64, seed + 200 + v, false);
    }
    g_fwd = NULL;
    g_bwd = NULL;
    for (int v = 0; FV0 == 0 && (v < NF128 || v < NB128); v++) {  // head size 128's variants
        g_fwd = fwd128_variants[v < NF128 ? v : 0];
        g_bwd = bwd128_variants[v < NB128 ? v : 0];
        printf("variant h128-%d: %s | %s\n", v, fwd128_names[v < NF128 ? v : 0], bwd128_names[v < NB128 ? v : 0]);
        run_case(1, 6, 512, 128, seed + 500 + v, false);
        run_case(1, 3, 1000, 128, seed + 600 + v, false);
    }
    g_fwd = NULL;
    g_bwd = NULL;
    for (int v = 1; v < NAV; v++) {
        g_bwd = abwd_variants[v];
        printf("variant a%d: %s\n", v, abwd_names[v]);
        run_case(2, 8, 333, 64, seed + 300 + v, true);
        run_case(1, 4, 1024, 64, seed + 400 + v, true);
    }
    g_bwd = NULL;
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
