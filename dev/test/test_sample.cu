// dev/test/test_sample.cu: kernels/sample.cuh's token choice against common/sampling.h's
// sample_from_logits, on fresh random rows (the seed is printed; pass it back as the argument
// to repeat a run), logits in this build's precision:
//  (a) draws: rows of many kinds (peaked, flat, all equal, equal values at the top,
//      bf16-rounded and integer logits with many equal values, -inf entries, GPT-2's 50257
//      tokens in rows of 50304, V = 1, 2, 7, 2^20) at many temperatures, top-k and top-p; each
//      row's coin is drawn on the device from its rng state, the CPU draws from a copy of it.
//      The ids must be equal, except where the coin lies within a justified distance of a
//      cumulative boundary of the kept distribution, or the cut itself within rounding of its
//      limit (classify() says which and why); greedy (top-k 1) always. Each drawn row's state
//      afterwards is the host's after one draw; inactive rows keep their state and output;
//      padding past V (poisoned) is never read.
//  (b) coins placed within a few 2^-24 of the CPU's cumulative boundaries (sample_row
//      directly): the same rule, where mismatches are common;
//  (c) greedy where logits differ but their probabilities can round to the same float: the
//      CPU's choice every time, whichever way its sum rounds;
//  (d) the same rows again: the same ids; the rows in global scratch instead of shared
//      memory: the same ids.
// --bench: microseconds per sample_rows call at B = 1, 8, 64 (GPT-2's vocabulary), median of
// CUDA graph replays of back-to-back calls; printed, never asserted.
// Exit 1 on any failure; 77 (skipped) without a GPU.
#include "kernels/sample.cuh"
#include "common/sampling.h"
#include "gpu_testutil.cuh"
#include <vector>
#include <algorithm>
#include <time.h>

static int irand(int n) { return (int)(uniform01() * n) % n; }


// ---------------------------------------------------------------------------
// rows

enum Kind { K_PEAKED, K_FLAT, K_EQUAL, K_TOP_TIES, K_BF16, K_INTEGER, K_MASKED, K_GPT2, K_NKINDS };
static const char *kind_name[K_NKINDS] = {"peaked", "flat", "all equal", "ties at the top", "bf16-rounded",
                                        "integer", "-inf entries", "gpt2-like"};

static unsigned float_bits(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static float bf16_round(float x) { return __bfloat162float(__float2bfloat16(x)); }

static std::vector<float> make_row(Kind k, int V) {
    std::vector<float> l(V);
    switch (k) {
    case K_PEAKED:
        for (auto &x : l) x = (float)normal();
        for (int i = 0, n = 1 + irand(3); i < n; i++) l[irand(V)] += (float)(8 + 4 * uniform01());
        break;
    case K_FLAT: for (auto &x : l) x = (float)(0.01 * uniform01()); break;
    case K_EQUAL: for (auto &x : l) x = 0.5f; break;
    case K_TOP_TIES: {  // the largest values in four levels of exactly equal logits
        for (auto &x : l) x = (float)(2 * normal());
        std::vector<float> s = l;
        const int top = std::min(V, 64);
        std::nth_element(s.begin(), s.begin() + (top - 1), s.end(), std::greater<float>());
        for (auto &x : l)
            if (x >= s[top - 1]) x = (float)(8 + irand(4));
        break;
    }
    case K_BF16: for (auto &x : l) x = bf16_round((float)(3 * normal())); break;
    case K_INTEGER: for (auto &x : l) x = (float)floor(2 * normal()); break;
    case K_MASKED:
        for (auto &x : l) x = uniform01() < 0.3 ? -INFINITY : (float)(2 * normal());
        l[irand(V)] = 1.0f;  // (one finite at least)
        break;
    case K_GPT2:  // a broad body, a few hundred likely tokens, a few very likely ones
        for (auto &x : l) x = (float)(2 * normal());
        for (int i = 0; i < 200 && i < V; i++) l[irand(V)] += (float)(3 + 5 * uniform01());
        for (int i = 0; i < 3; i++) l[irand(V)] += (float)(8 + 4 * uniform01());
        break;
    default: break;
    }
    return l;
}

struct Setting {
    float temp;
    int top_k;
    float top_p;
};

// ---------------------------------------------------------------------------
// the CPU's choice, and why a different one may be allowed

// sample_from_logits with the coin given instead of drawn (its three steps, each by the function it calls)
static int cpu_choice(const float *l, int V, Setting st, float coin, std::vector<float> &probs) {
    probs.assign(V, 0.0f);
    float maxv = -FLT_MAX, sum = 0.0f, temp = st.temp > 1e-4f ? st.temp : 1e-4f;
    for (int v = 0; v < V; v++) maxv = fmaxf(maxv, l[v]);
    for (int v = 0; v < V; v++) {
        probs[v] = expf((l[v] - maxv) / temp);
        sum += probs[v];
    }
    for (int v = 0; v < V; v++) probs[v] /= sum;
    if ((st.top_k > 0 && st.top_k < V) || st.top_p < 1.0f) truncate_distribution(probs.data(), V, st.top_k, st.top_p);
    return sample_index(probs.data(), V, coin);
}

// the length of a thread's chunk of ids in sample_row (its float sums' length)
static int chunk_len(int V) { return ((V + SAMPLE_THREADS - 1) / SAMPLE_THREADS) | 1; }

enum { SAME, NEAR_BOUNDARY, CUT_WITHIN_ROUNDING, BAD };
struct Verdict {
    int what;
    double dist;  // NEAR_BOUNDARY: the coin's distance to the boundary
};

// Why the device (dev) may choose otherwise than the CPU (cpu) for this coin; q: the CPU's
// final distribution (sample_from_logits' probs).
//  NEAR_BOUNDARY: both kept, and the coin within tol of a boundary B_j (the exact cumulative
//    probability of the kept tokens up to j, in double, from the CPU's e) between the two:
//    the CPU's boundary is its float cdf (its error there, measured, is the first part of
//    tol); the device's is (a float sum of at most C = chunk_len(V) e values, then double)
//    over the same for all kept, its e within 2 ulp of glibc's (CUDA's expf): relative error
//    at most (2C + 5) units of 2^-24, and tol allows (2C + 16).
//  CUT_WITHIN_ROUNDING: which tokens are kept differs by rounding alone: the last kept and
//    the first dropped have different logits but e within 8 ulp (the CPU orders by its
//    float probabilities, the device by its e); or the top-p sum at the cut is within
//    rounding of top_p (the CPU's float sum S of e off by |S / exact - 1|, the device's by C
//    units); or top_p >= 1 and the CPU stopped early because its double sum of float
//    probabilities reached 1.0.
// Greedy (top-k 1) allows nothing.
static Verdict classify(const float *l, int V, Setting st, float coin, int cpu, int dev, const std::vector<float> &q) {
    if (dev == cpu) return {SAME, 0};
    if (dev < 0 || dev >= V || (st.top_k == 1 && V > 1)) return {BAD, -1};
    const double u = 0x1p-24;
    const int C = chunk_len(V);
    float maxv = -FLT_MAX, S = 0.0f, temp = st.temp > 1e-4f ? st.temp : 1e-4f;
    for (int v = 0; v < V; v++) maxv = fmaxf(maxv, l[v]);
    std::vector<float> e(V);
    double Sx = 0;
    for (int v = 0; v < V; v++) {
        e[v] = expf((l[v] - maxv) / temp);
        S += e[v];
        Sx += e[v];
    }
    double best = INFINITY;
    if (q[dev] > 0 && q[cpu] > 0) {
        double Ke = 0;
        for (int v = 0; v < V; v++)
            if (q[v] > 0) Ke += e[v];
        const int a = std::min(cpu, dev), b = std::max(cpu, dev);
        const double tol_dev = (2.0 * C + 16) * u;
        double B = 0;
        float cf = 0.0f;
        bool ok = false;
        for (int v = 0; v < b; v++) {
            if (q[v] > 0) B += e[v] / Ke;
            cf += q[v];
            if (v >= a) {
                const double d = fabs(coin - B);
                best = std::min(best, d);
                ok |= d <= fabs(cf - B) + tol_dev;
            }
        }
        if (ok) return {NEAR_BOUNDARY, best};
    }
    if ((st.top_k > 0 && st.top_k < V) || st.top_p < 1.0f) {
        std::vector<float> p(V);
        for (int v = 0; v < V; v++) p[v] = e[v] / S;
        std::vector<int> order(V);
        for (int v = 0; v < V; v++) order[v] = v;
        std::sort(order.begin(), order.end(), [&](int x, int y) { return p[x] != p[y] ? p[x] > p[y] : x < y; });
        const int kk = st.top_k > 0 && st.top_k < V ? st.top_k : V;
        int keep = kk;
        std::vector<double> cum(kk);
        double c = 0;
        for (int i = 0; i < kk; i++) {
            c += p[order[i]];
            cum[i] = c;
            if (c >= st.top_p) { keep = i + 1; break; }
        }
        if (keep < V) {
            const int x = order[keep - 1], y = order[keep];
            if (l[x] != l[y] && fabs((double)e[x] - e[y]) <= 8 * u * e[x]) return {CUT_WITHIN_ROUNDING, 0};
        }
        if (st.top_p < 1.0f) {
            const double tol_p = fabs(S / Sx - 1) + (C + 8) * u;
            if (fabs(cum[keep - 1] - st.top_p) <= tol_p || (keep >= 2 && fabs(cum[keep - 2] - st.top_p) <= tol_p))
                return {CUT_WITHIN_ROUNDING, 0};
        } else if (keep < kk) {
            return {CUT_WITHIN_ROUNDING, 0};
        }
    }
    return {BAD, best};
}

struct Tally {
    long draws = 0, near = 0, cut = 0, bad = 0;
    double max_dist = 0;
    void add(const Verdict &v) {
        draws++;
        if (v.what == NEAR_BOUNDARY) { near++; max_dist = std::max(max_dist, v.dist); }
        else if (v.what == CUT_WITHIN_ROUNDING) cut++;
        else if (v.what == BAD) bad++;
    }
};

static void print_bad(const char *what, const float *l, int V, Setting st, float coin, int cpu, int dev,
                      const std::vector<float> &q, const Verdict &v) {
    printf("    %s V %d t %g k %d p %g: coin %.9g (0x%08x): device %d (CPU p %g, logit %g), CPU %d (p %g, logit %g), "
           "coin %g from the nearest boundary between\n", what, V, st.temp, st.top_k, st.top_p, coin,
           float_bits(coin), dev, dev >= 0 && dev < V ? q[dev] : -1.0, dev >= 0 && dev < V ? l[dev] : 0.0, cpu,
           q[cpu], l[cpu], v.dist);
}

// ---------------------------------------------------------------------------
// (a) draws through sample_rows, each row's coin from its rng state

struct Batch {
    int V, ld, B;
    std::vector<floatX> x;  // B rows of ld (past V: a poison the kernel must not read)
    std::vector<float> l;   // B rows of V: the logits as the CPU sees them
};
static Batch make_batch(Kind k, int V, int ld, int B) {
    Batch b = {V, ld, B, std::vector<floatX>((size_t)B * ld), std::vector<float>((size_t)B * V)};
    for (int r = 0; r < B; r++) {
        std::vector<float> row = make_row(k, V);
        for (int i = 0; i < ld; i++) {
            const floatX x = (floatX)(i < V ? row[i] : 1000.0f);
            b.x[(size_t)r * ld + i] = x;
            if (i < V) b.l[(size_t)r * V + i] = to_float(x);
        }
    }
    return b;
}

// every row drawn once with st (every third inactive when `some_inactive`); the ids through
// classify, the states and the inactive rows checked. Returns the device's ids.
static std::vector<int> draw_batch(const Batch &b, Setting st, bool some_inactive, Tally &t, int *state_bad,
                                   int *inactive_bad, const char *what) {
    std::vector<uint64_t> rng(b.B);
    std::vector<int> active(b.B), out0(b.B, -5);
    for (int r = 0; r < b.B; r++) {
        rng[r] = rng_seed(g_rng + r);
        active[r] = !(some_inactive && r % 3 == 1);
    }
    floatX *dx = upload(b.x);
    uint64_t *drng = upload(rng);
    int *dact = upload(active), *dout = upload(out0);
    float *scratch;
    CUDA_CHECK(cudaMalloc(&scratch, (size_t)b.B * b.V * sizeof(float)));
    sample_rows(dout, dx, b.ld, b.V, b.B, st.temp, st.top_k, st.top_p, drng, some_inactive ? dact : NULL, scratch, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int> out = download(dout, b.B);
    std::vector<uint64_t> rng_after = download(drng, b.B);
    std::vector<float> probs(b.V);
    for (int r = 0; r < b.B; r++) {
        if (!active[r]) {
            *inactive_bad += out[r] != -5 || rng_after[r] != rng[r];
            continue;
        }
        uint64_t s = rng[r], s2 = rng[r];
        const float *l = &b.l[(size_t)r * b.V];
        const int cpu = sample_from_logits(l, probs.data(), b.V, st.temp, st.top_k, st.top_p, &s);
        *state_bad += s != rng_after[r];
        const float coin = rng_uniform(&s2);
        const Verdict v = classify(l, b.V, st, coin, cpu, out[r], probs);
        t.add(v);
        if (v.what == BAD && t.bad <= 3) print_bad(what, l, b.V, st, coin, cpu, out[r], probs, v);
    }
    cudaFree(dx); cudaFree(drng); cudaFree(dact); cudaFree(dout); cudaFree(scratch);
    g_rng = (g_rng * 6364136223846793005ull + 1442695040888963407ull) | 1;  // (xorshift: never 0)
    return out;
}

static void report_tally(const char *what, const Tally &t, int state_bad, int inactive_bad) {
    report(t.bad == 0 && state_bad == 0 && inactive_bad == 0,
           "%-44s %6ld draws: %ld differ by a coin within %.2g of a boundary, %ld by a cut within rounding, %ld "
           "otherwise; %d rng states and %d inactive rows wrong", what, t.draws, t.near, t.max_dist, t.cut, t.bad,
           state_bad, inactive_bad);
}

static const Setting k_small_settings[] = {
    {1.0f, 0, 1.0f},  {1.0f, 1, 1.0f},   {1.0f, 2, 1.0f},   {1.0f, 5, 1.0f},    {1.0f, 40, 1.0f},
    {1.0f, 0, 0.9f},  {1.0f, 0, 0.5f},   {1.0f, 0, 0.99f},  {1.0f, 0, 0.01f},   {1.0f, 40, 0.9f},
    {1.0f, 5, 0.5f},  {1.0f, 1000, 1.0f}, {0.7f, 0, 1.0f},  {0.7f, 3, 0.8f},    {1.6f, 0, 0.9f},
    {1.6f, 40, 1.0f}, {1e-6f, 0, 1.0f},  {1e-6f, 2, 1.0f},  {20.0f, 0, 1.0f},   {20.0f, 40, 0.95f},
    {0.3f, 1, 1.0f},  {0.3f, 0, 0.7f},   {1.0f, 100, 0.999f}};
static const Setting k_big_settings[] = {{1.0f, 0, 1.0f},  {1.0f, 40, 1.0f}, {1.0f, 0, 0.9f},   {1.0f, 1, 1.0f},
                                         {1.0f, 40, 0.9f}, {0.7f, 0, 0.5f},  {1.0f, 1000, 1.0f}, {1.3f, 0, 0.99f},
                                         {1.0f, 50000, 1.0f}};

static void test_draws() {
    printf("(a) draws through sample_rows, each row's coin from its rng state\n");
    Tally greedy;
    // small rows of every kind, every setting; half the batches with rows of an unaligned length
    for (int k = 0; k < K_NKINDS; k++) {
        Tally t;
        int sb = 0, ib = 0;
        for (const Setting &st : k_small_settings)
            for (int V : {2, 7, 33, 300, 1500}) {
                const int ld = (V % 2) ? V : (V + 7) / 8 * 8;
                Batch b = make_batch((Kind)k, V, ld, 6);
                Tally &tt = st.top_k == 1 ? greedy : t;
                draw_batch(b, st, V == 300, tt, &sb, &ib, kind_name[k]);
            }
        char what[96];
        snprintf(what, sizeof what, "%s, V 2..1500", kind_name[k]);
        report_tally(what, t, sb, ib);
    }
    {  // V = 1: always token 0
        Batch b = make_batch(K_PEAKED, 1, 1, 4);
        Tally t;
        int sb = 0, ib = 0;
        for (const Setting &st : k_small_settings) draw_batch(b, st, true, t, &sb, &ib, "V 1");
        report_tally("V 1", t, sb, ib);
    }
    // GPT-2's vocabulary in rows of 50304
    for (int k = 0; k < K_NKINDS; k++) {
        Tally t;
        int sb = 0, ib = 0;
        for (const Setting &st : k_big_settings) {
            Batch b = make_batch((Kind)k, 50257, 50304, 8);
            draw_batch(b, st, k == K_GPT2 && st.top_k == 40, st.top_k == 1 ? greedy : t, &sb, &ib, kind_name[k]);
        }
        char what[96];
        snprintf(what, sizeof what, "%s, V 50257 (rows of 50304)", kind_name[k]);
        report_tally(what, t, sb, ib);
    }
    {  // 2^20 tokens: the row in scratch
        Tally t;
        int sb = 0, ib = 0;
        for (Setting st : {Setting{1.0f, 0, 1.0f}, Setting{1.0f, 40, 1.0f}, Setting{1.0f, 0, 0.9f}, Setting{1.0f, 1, 1.0f}}) {
            Batch b = make_batch(K_GPT2, 1 << 20, 1 << 20, 2);
            draw_batch(b, st, false, st.top_k == 1 ? greedy : t, &sb, &ib, "V 2^20");
        }
        report_tally("gpt2-like, V 2^20 (in scratch)", t, sb, ib);
    }
    report_tally("greedy (top-k 1), every kind above", greedy, 0, 0);
}

// ---------------------------------------------------------------------------
// (b) coins at the CPU's boundaries, through sample_row

__global__ void __launch_bounds__(SAMPLE_THREADS)
coins_kernel(int *out, const floatX *logits, int V, float temperature, int top_k, float top_p, const float *coins,
             float *scratch) {
    const int b = blockIdx.x;
    const int id = sample_row(logits, V, temperature, top_k, top_p, coins[b], scratch ? scratch + (size_t)b * V : NULL);
    if (threadIdx.x == 0) out[b] = id;
}

// sample_row for each coin on one row (shared memory where it fits, else scratch)
static std::vector<int> device_coins(const std::vector<floatX> &row, int V, Setting st, const std::vector<float> &coins,
                                     bool force_scratch) {
    const int n = (int)coins.size();
    floatX *dx = upload(row);
    float *dc = upload(coins), *scratch = NULL;
    int *dout;
    CUDA_CHECK(cudaMalloc(&dout, n * sizeof(int)));
    size_t smem = (size_t)V * sizeof(float);
    if (force_scratch || !sample_row_fits_smem(V)) {
        smem = 0;
        CUDA_CHECK(cudaMalloc(&scratch, (size_t)n * V * sizeof(float)));
    } else {
        CUDA_CHECK(cudaFuncSetAttribute(coins_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    coins_kernel<<<n, SAMPLE_THREADS, smem>>>(dout, dx, V, st.temp, st.top_k, st.top_p, dc, scratch);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int> out = download(dout, n);
    cudaFree(dx); cudaFree(dc); cudaFree(dout); cudaFree(scratch);
    return out;
}

static void test_boundary_coins() {
    printf("(b) coins within a few 2^-24 of the CPU's cumulative boundaries, through sample_row\n");
    const Setting settings[] = {{1.0f, 0, 1.0f}, {1.0f, 40, 1.0f}, {1.0f, 0, 0.9f}, {0.7f, 5, 0.8f}, {1.0f, 40, 0.95f}};
    for (int k : {K_PEAKED, K_TOP_TIES, K_BF16, K_INTEGER, K_GPT2}) {
        Tally t;
        for (int V : {300, 50257})
            for (const Setting &st : settings) {
                std::vector<float> lf = make_row((Kind)k, V), l(V), probs;
                std::vector<floatX> row(V);
                for (int v = 0; v < V; v++) { row[v] = (floatX)lf[v]; l[v] = to_float(row[v]); }
                cpu_choice(l.data(), V, st, 0.5f, probs);
                std::vector<double> bounds;
                double B = 0;
                for (int v = 0; v < V; v++)
                    if (probs[v] > 0) { B += probs[v]; bounds.push_back(B); }
                std::vector<float> coins = {0.0f, 0x1.fffffep-1f};
                for (int i = 0; i < 96; i++) {
                    const double b = bounds[irand((int)bounds.size())];
                    const double c = (floor(b * 16777216.0) + irand(9) - 4) / 16777216.0;
                    if (c >= 0 && c < 1) coins.push_back((float)c);
                }
                std::vector<int> dev = device_coins(row, V, st, coins, false);
                for (size_t i = 0; i < coins.size(); i++) {
                    const int cpu = cpu_choice(l.data(), V, st, coins[i], probs);
                    const Verdict v = classify(l.data(), V, st, coins[i], cpu, dev[i], probs);
                    t.add(v);
                    if (v.what == BAD && t.bad <= 3) print_bad(kind_name[k], l.data(), V, st, coins[i], cpu, dev[i], probs, v);
                }
            }
        char what[96];
        snprintf(what, sizeof what, "%s, V 300 and 50257", kind_name[k]);
        report_tally(what, t, 0, 0);
    }
}

// ---------------------------------------------------------------------------
// (c) greedy where distinct logits' probabilities may round to the largest one

static void test_greedy_near_ties() {
    printf("(c) greedy among logits whose probabilities may round to the largest\n");
    // e = exp((l - max) / t) one or two ulp below 1 for the logits one float (fp32 build) or one
    // storage ulp (bf16, fp16: at a temperature of thousands) below the max; its probability then
    // ties with the max's or not, by how the CPU's float sum rounds
    const bool fp32 = sizeof(floatX) == 4;
    const float top = 1.0f, below = fp32 ? nextafterf(1.0f, 0.0f) : to_float((floatX)0.99f);
    const double gap = (double)top - below;  // one ulp of the storage format below 1
    long rows = 0, bad = 0, by_sum = 0, slow = 0;
    for (int V : {64, 2000, 50257})
        for (int rep = 0; rep < (V == 50257 ? 6 : 60); rep++) {
            // (l - max) / t = -gap / t near -2^-24 (e one ulp below 1) or -2^-23 (two ulp below)
            const float t = (float)(gap / ldexp((rep % 2 ? 0.6 : 1.6) + 0.8 * uniform01(), -24));
            std::vector<float> lf(V);
            for (auto &x : lf) x = (float)(fp32 ? 0.1 * normal() : 0.0);
            std::vector<floatX> row(V);
            const int nb = 1 + irand(4);
            for (int i = 0; i < nb; i++) lf[irand(V)] = below;
            for (int i = 0, n = 1 + irand(2); i < n; i++) lf[irand(V)] = top;
            for (int v = 0; v < V; v++) row[v] = (floatX)lf[v];
            std::vector<float> l(V), probs;
            for (int v = 0; v < V; v++) l[v] = to_float(row[v]);
            const Setting st = {t, 1, 1.0f};
            const std::vector<int> dev = device_coins(row, V, st, {0.5f}, false);
            const int cpu = cpu_choice(l.data(), V, st, 0.5f, probs);
            // the lowest id of e == 1, and whether a lower id ties with it
            float maxv = -FLT_MAX;
            for (int v = 0; v < V; v++) maxv = fmaxf(maxv, l[v]);
            int v0 = V, lower_near = 0;
            for (int v = 0; v < V; v++)
                if (expf((l[v] - maxv) / t) == 1.0f) { v0 = v; break; }
            for (int v = 0; v < v0; v++) lower_near |= expf((l[v] - maxv) / t) >= 0x1.fffffcp-1f;
            rows++;
            slow += lower_near;
            by_sum += cpu != v0;
            if (dev[0] != cpu && bad++ < 3)
                printf("    V %d t %g: device %d, CPU %d (lowest id of the max: %d)\n", V, t, dev[0], cpu, v0);
        }
    report(bad == 0, "%ld rows, %ld of them with a token before the max's that ties with it or not by how the CPU's "
           "sum rounds (it tied in %ld): %ld choices differ", rows, slow, by_sum, bad);
}

// ---------------------------------------------------------------------------
// (d) the same rows again; the rows in scratch

static void test_repeat_and_scratch() {
    printf("(d) the same inputs again, and the rows in global scratch\n");
    const int V = 50257, ld = 50304, B = 16;
    long differ = 0, draws = 0;
    for (Setting st : {Setting{1.0f, 0, 1.0f}, Setting{1.0f, 40, 1.0f}, Setting{1.0f, 0, 0.9f}, Setting{1.0f, 1, 1.0f}})
        for (int k : {K_GPT2, K_TOP_TIES, K_FLAT}) {
            Batch b = make_batch((Kind)k, V, ld, B);
            std::vector<uint64_t> rng(B);
            for (int r = 0; r < B; r++) rng[r] = rng_seed(g_rng + r);
            floatX *dx = upload(b.x);
            uint64_t *drng = upload(rng);
            int *dout;
            float *scratch;
            CUDA_CHECK(cudaMalloc(&dout, B * sizeof(int)));
            CUDA_CHECK(cudaMalloc(&scratch, (size_t)B * V * sizeof(float)));
            std::vector<int> runs[3];
            for (int run = 0; run < 3; run++) {
                CUDA_CHECK(cudaMemcpy(drng, rng.data(), B * sizeof(uint64_t), cudaMemcpyHostToDevice));
                if (run < 2) {
                    sample_rows(dout, dx, ld, V, B, st.temp, st.top_k, st.top_p, drng, NULL, scratch, 0);
                } else {  // no dynamic shared memory: the rows in scratch
                    sample_kernel<<<B, SAMPLE_THREADS, 0>>>(dout, dx, ld, V, st.temp, st.top_k, st.top_p, drng, NULL,
                                                            scratch);
                    LAUNCH_CHECK();
                }
                CUDA_CHECK(cudaDeviceSynchronize());
                runs[run] = download(dout, B);
            }
            for (int r = 0; r < B; r++) differ += (runs[1][r] != runs[0][r]) + (runs[2][r] != runs[0][r]);
            draws += B;
            cudaFree(dx); cudaFree(drng); cudaFree(dout); cudaFree(scratch);
            g_rng = (g_rng * 6364136223846793005ull + 1442695040888963407ull) | 1;  // (xorshift: never 0)
        }
    report(differ == 0, "%ld rows drawn three times (shared memory twice%s, then scratch): %ld ids differ", draws,
           sample_row_fits_smem(V) ? "" : " -- this GPU's rows do not fit: scratch", differ);
}

// ---------------------------------------------------------------------------
// --bench

static void bench() {
    const int V = 50257, ld = 50304, Bmax = 64, N = 50, R = 11;
    Batch b = make_batch(K_GPT2, V, ld, Bmax);
    std::vector<uint64_t> rng(Bmax);
    for (int r = 0; r < Bmax; r++) rng[r] = rng_seed(r + 1);
    floatX *dx = upload(b.x);
    uint64_t *drng = upload(rng);
    int *dout;
    float *scratch = NULL;
    CUDA_CHECK(cudaMalloc(&dout, Bmax * sizeof(int)));
    if (!sample_row_fits_smem(V)) CUDA_CHECK(cudaMalloc(&scratch, (size_t)Bmax * V * sizeof(float)));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("bench: %s; microseconds a sample_rows call, GPT-2's vocabulary (V %d, rows of %d), the row in %s; median of "
           "%d replays of a CUDA graph of %d back-to-back calls\n", prop.name, V, ld,
           scratch ? "global scratch" : "shared memory", R, N);
    const struct { const char *name; Setting st; } modes[] = {{"default (t 1)", {1.0f, 0, 1.0f}},
                                                              {"top-k 40", {1.0f, 40, 1.0f}},
                                                              {"top-p 0.9", {1.0f, 0, 0.9f}},
                                                              {"top-k 1", {1.0f, 1, 1.0f}}};
    const int Bs[] = {1, 8, 64};
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    printf("  %-16s %10s %10s %10s\n", "", "B=1", "B=8", "B=64");
    for (const auto &m : modes) {
        printf("  %-16s", m.name);
        for (int B : Bs) {
            const Setting &st = m.st;
            sample_rows(dout, dx, ld, V, B, st.temp, st.top_k, st.top_p, drng, NULL, scratch, s);  // (attributes set)
            CUDA_CHECK(cudaStreamSynchronize(s));
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < N; i++)
                sample_rows(dout, dx, ld, V, B, st.temp, st.top_k, st.top_p, drng, NULL, scratch, s);
            CUDA_CHECK(cudaStreamEndCapture(s, &g));
            CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
            CUDA_CHECK(cudaGraphLaunch(ge, s));
            CUDA_CHECK(cudaStreamSynchronize(s));
            std::vector<float> ms(R);
            for (int r = 0; r < R; r++) {
                CUDA_CHECK(cudaEventRecord(e0, s));
                CUDA_CHECK(cudaGraphLaunch(ge, s));
                CUDA_CHECK(cudaEventRecord(e1, s));
                CUDA_CHECK(cudaEventSynchronize(e1));
                CUDA_CHECK(cudaEventElapsedTime(&ms[r], e0, e1));
            }
            std::sort(ms.begin(), ms.end());
            printf(" %10.2f", ms[R / 2] * 1000.0 / N);
            fflush(stdout);
            CUDA_CHECK(cudaGraphExecDestroy(ge));
            CUDA_CHECK(cudaGraphDestroy(g));
        }
        printf("\n");
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1); cudaStreamDestroy(s);
    cudaFree(dx); cudaFree(drng); cudaFree(dout); cudaFree(scratch);
}

int main(int argc, char **argv) {
    bool do_bench = false;
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) do_bench = true;
        else seed = strtoull(argv[i], NULL, 10);
    }
    g_rng = seed * 0x9E3779B97F4A7C15ull | 1;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_sample: no GPU\n");
        return 77;
    }
    if (do_bench) {
        bench();
        return 0;
    }
    printf("test_sample (%s), seed %llu\n", PRECISION_NAME, (unsigned long long)seed);
    test_draws();
    test_boundary_coins();
    test_greedy_near_ties();
    test_repeat_and_scratch();
    return report_finish();
}
