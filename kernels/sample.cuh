// kernels/sample.cuh: drawing the next token on the GPU, one block per row of logits, the
// same choice as common/sampling.h's sample_from_logits (softmax at a temperature, cut to
// --top-k then --top-p, the inverse-CDF draw) for the same logits and the same coin, with no
// host synchronisation: generation runs each token as one CUDA graph.
//
// The row (V values) is copied once into fp32 and kept in the block's dynamic shared memory
// (GPT-2's 50257 floats are 196 KB of an H100 block's 227 KB), or in `scratch` where it does
// not fit. Then, per row:
//   1. the max; e[v] = exp((l[v] - max) / temperature) in place; each thread's float sum of
//      its own contiguous chunk of ids. Nothing is divided by the sum of e: the draw compares
//      coin * sum with running sums of e, which is the CPU's coin < cumulative probability.
//   2. no cut: the chunk sums scanned in fixed point find the one thread whose range holds
//      coin * sum, and it walks its chunk. Nothing is sorted.
//   3. a cut: the kept tokens are those whose e (its float bits order like the value, e >= 0)
//      is above a threshold, ties taken in id order, as the CPU's sort orders them. The
//      threshold is a radix select over the bits of e: up to three levels of a 1024-bin
//      histogram (shared-memory atomics) of the count and the exact mass (integer sums of
//      mantissas) of the candidates, each level taking the first bin from the top where the
//      count reaches top_k or the mass top_p * sum. Candidates are the tokens at or above a
//      lower bound of the threshold, found first from the largest e of each thread's share of
//      the row (with top-k 40, a few dozen tokens); they go into a list in id order, so that
//      the later levels and the draw look at them alone. Then the draw of 2. over the kept
//      tokens.
//   4. greedy (top_k == 1, or a cut that keeps one token) is the CPU's choice exactly: see
//      greedy() below.
//
// Where the choice can differ from the CPU's (floating-point rounding all of it, none of it
// the rows' order or the run's: the result is deterministic):
//   - a coin within about 1e-5 of a cumulative boundary: the CPU adds V float probabilities
//     in id order (its total alone can be off by 1e-5 at V = 50257), this kernel adds each
//     thread's chunk of at most 51 in float and the chunks exactly; and CUDA's expf is within
//     2 ulp of glibc's;
//   - a cut where two tokens' probabilities are within a few ulp of each other at the
//     boundary of the kept set, or where the cumulative probability reaches top_p within
//     about 1e-6 of it: the CPU orders and sums float probabilities (e divided by its float
//     sum), this kernel orders by e and sums it exactly against top_p times its sum;
//   - top_p == 1 with a top-k cut: the CPU also stops where its double sum of float
//     probabilities reaches 1.0, which rounding can make it do a few tiny tokens early; here
//     top_p >= 1 cuts nothing.
// A coin above the total (rounding) draws the last kept token of non-zero probability, as the
// CPU's sample_index does (not its last token, which a cut may have dropped). NaN logits have
// no sensible CPU choice; here their tokens have probability 0.
#pragma once
#include "common.cuh"
#include "../common/rng.h"
#include <float.h>
#include <limits.h>

// Block size of sample_kernel: with ~50 ids a thread the chunk sums stay short (their float
// rounding is what the CPU comparison allows for), and every pass over a row in shared memory
// has the whole SM's issue slots (one block an SM, its shared memory taken).
#define SAMPLE_THREADS 1024
#define SAMPLE_BINS 1024      // 10 bits of e a histogram level (the first: e <= 1 leaves 11 bits below 1017)
#define SAMPLE_LIST_CAP 4096  // candidates kept as a list of ids (more: the passes go over the whole row)
#define SAMPLE_MAX_V (1 << 20)  // the histograms' 32-bit mass sums hold 2^20 tokens' 12-bit mantissa parts

// sample_row's own shared memory (static, 30 KB): histograms, the candidate list, reduction
// scratch and what one thread tells the others
struct SampleShared {
    unsigned cnt[SAMPLE_BINS], mhi[SAMPLE_BINS], mlo[SAMPLE_BINS];  // count, mantissa sums (high, low 12 bits)
    int list[SAMPLE_LIST_CAP];
    double rd[33];
    unsigned long long ru[33];
    unsigned rw[33];
    int ri[33], ri3[3][32];
    float rf[33];
    struct {
        int found, bin;
        unsigned c_before, c_bin;
        unsigned long long m_before, m_bin;
    } pick;
    int result;
    float sum;
};

// The block's dynamic shared memory: the row, where the launch gave V floats of it.
extern __shared__ float4 sample_dynamic_smem[];
__device__ __forceinline__ unsigned sample_dynamic_smem_bytes() {
    unsigned r;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

namespace sample_detail {

constexpr unsigned FULL = 0xffffffffu;
constexpr float ONE_MINUS_1ULP = 0x1.fffffep-1f;  // 1 - 2^-24, the float below 1
constexpr float ONE_MINUS_2ULP = 0x1.fffffcp-1f;  // 1 - 2^-23

// ---------------------------------------------------------------------------
// block-wide reductions and scans, fixed order (deterministic); every thread calls them and
// gets the result. scratch: 33 values of shared memory (each call begins with a barrier, so
// that back-to-back calls may share it). blockDim.x: a multiple of 32.

template <class T> struct Add { __device__ T operator()(T a, T b) const { return a + b; } };
template <class T> struct Min { __device__ T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct Max { __device__ T operator()(T a, T b) const { return b > a ? b : a; } };

template <class T, class Op> __device__ __forceinline__ T warp_reduce(T v, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(FULL, v, o));  // (every lane the same bits)
    return v;
}
template <class T, class Op> __device__ T block_reduce(T v, Op op, T ident, T *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_reduce(v, op);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < nw ? scratch[lane] : ident;
    return warp_reduce(v, op);
}
template <class T> __device__ __forceinline__ T warp_incl_scan(T v) {
    const int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        T y = __shfl_up_sync(FULL, v, o);
        if (lane >= o) v = v + y;
    }
    return v;
}
// the sum of v over the threads before this one; *total: over all
template <class T> __device__ T block_excl_scan(T v, T *total, T *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const T incl = warp_incl_scan(v);
    T excl = __shfl_up_sync(FULL, incl, 1);
    if (lane == 0) excl = T(0);
    __syncthreads();
    if (lane == 31) scratch[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const T w = lane < nw ? scratch[lane] : T(0);
        const T wi = warp_incl_scan(w);
        T we = __shfl_up_sync(FULL, wi, 1);
        if (lane == 0) we = T(0);
        scratch[lane] = we;  // (each lane its own slot)
        if (lane == 31) scratch[32] = wi;
    }
    __syncthreads();
    *total = scratch[32];
    return scratch[warp] + excl;
}

// the same for a count and (with_b) a mass at once
__device__ void block_excl_scan2(unsigned a, unsigned long long b, bool with_b, unsigned *ea,
                                 unsigned long long *eb, unsigned *rw, unsigned long long *ru) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const unsigned ia = warp_incl_scan(a);
    const unsigned long long ib = with_b ? warp_incl_scan(b) : 0ull;
    unsigned xa = __shfl_up_sync(FULL, ia, 1);
    unsigned long long xb = with_b ? __shfl_up_sync(FULL, ib, 1) : 0ull;
    if (lane == 0) { xa = 0; xb = 0; }
    __syncthreads();
    if (lane == 31) { rw[warp] = ia; ru[warp] = ib; }
    __syncthreads();
    if (warp == 0) {
        const unsigned wa = lane < nw ? rw[lane] : 0u;
        const unsigned long long wb = lane < nw ? ru[lane] : 0ull;
        const unsigned sa = warp_incl_scan(wa);
        const unsigned long long sb = with_b ? warp_incl_scan(wb) : 0ull;
        unsigned pa = __shfl_up_sync(FULL, sa, 1);
        unsigned long long pb = with_b ? __shfl_up_sync(FULL, sb, 1) : 0ull;
        if (lane == 0) { pa = 0; pb = 0; }
        rw[lane] = pa;
        ru[lane] = pb;
    }
    __syncthreads();
    *ea = rw[warp] + xa;
    *eb = ru[warp] + xb;
}
// the minimum of three ints at once
__device__ void block_min3(int *a, int *b, int *c, int (*scratch)[32]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = warp_reduce(*a, Min<int>()), y = warp_reduce(*b, Min<int>()), z = warp_reduce(*c, Min<int>());
    __syncthreads();
    if (lane == 0) { scratch[0][warp] = x; scratch[1][warp] = y; scratch[2][warp] = z; }
    __syncthreads();
    *a = warp_reduce(lane < nw ? scratch[0][lane] : INT_MAX, Min<int>());
    *b = warp_reduce(lane < nw ? scratch[1][lane] : INT_MAX, Min<int>());
    *c = warp_reduce(lane < nw ? scratch[2][lane] : INT_MAX, Min<int>());
}

// ---------------------------------------------------------------------------
// e = exp((l - max) / temperature), as the CPU computes it

struct ExpParams {
    float M, temp, rtemp;  // the row's max, the temperature (clamped as the CPU does), its reciprocal
    bool unit;             // temperature 1: no division
};

// a / b rounded to nearest from rb = RN(1 / b) (Markstein's correction: correctly rounded but
// for subnormal quotients, which make e 1 or 0 either way); three instructions, not ten
__device__ __forceinline__ float div_rn(float a, float b, float rb) {
    const float q = __fmul_rn(a, rb);
    const float r = __fmaf_rn(-q, b, a);
    return __fmaf_rn(r, rb, q);
}

// exp(d) for -2^-20 <= d <= 0 rounded to float as glibc's expf rounds it: for every such float
// d the two agree (checked exhaustively against glibc 2.36); these are the values whose
// probability can tie with the largest one's, which greedy sampling must decide as the CPU does
__device__ __forceinline__ float near_exp(float d) {
    const double x = d;
    double t = __fma_rn(x, 1.0 / 6.0, 0.5);
    t = __fma_rn(x, t, 1.0);
    t = __fma_rn(x, t, 1.0);
    return __double2float_rn(t);
}

// true where e is within 2^-20 of 1; *e then holds it exactly as the CPU rounds it
__device__ __forceinline__ bool elem_near(float x, const ExpParams &p, float *e, float *d_out) {
    const float a = __fsub_rn(x, p.M);
    const float d = p.unit ? a : div_rn(a, p.temp, p.rtemp);
    *d_out = d;
    if (d >= -0x1p-20f) {
        *e = near_exp(__fdiv_rn(a, p.temp));
        return true;
    }
    return false;
}
__device__ __forceinline__ float elem_e(float x, const ExpParams &p, bool *near) {
    float e, d;
    *near = elem_near(x, p, &e, &d);
    return *near ? e : fmaxf(expf(d), 0.0f);  // (NaN: 0)
}
// the lowest id of each value whose probability may tie with the largest one's: e == 1, e one
// and two ulp below 1 (three ulp below never ties: see greedy())
struct NearIds {
    int v0, c1, c2;
};
__device__ __forceinline__ void near_note(NearIds &n, float e, int v) {
    if (e == 1.0f) n.v0 = min(n.v0, v);
    else if (e == ONE_MINUS_1ULP) n.c1 = min(n.c1, v);
    else if (e == ONE_MINUS_2ULP) n.c2 = min(n.c2, v);
}

// ---------------------------------------------------------------------------
// histograms of candidates' e: bin = 10 bits of e's bits (u); count and mantissa sums

__device__ __forceinline__ void hist_clear(SampleShared &sh) {
    for (int j = threadIdx.x; j < SAMPLE_BINS; j += blockDim.x) sh.cnt[j] = sh.mhi[j] = sh.mlo[j] = 0;
}
__device__ __forceinline__ void hist_add(SampleShared &sh, unsigned u, int shift, bool mass) {
    const unsigned d = (u >> shift) & (SAMPLE_BINS - 1);
    atomicAdd(&sh.cnt[d], 1u);
    if (mass) {  // e = m * 2^(max(E, 1) - 150): a bin holds one exponent E, so mantissas add up exactly
        const unsigned m = (u & 0x7FFFFFu) | ((u >> 23) ? 0x800000u : 0u);
        atomicAdd(&sh.mhi[d], m >> 12);
        atomicAdd(&sh.mlo[d], m & 0xFFFu);
    }
}
// fixed point: mass 1.0 is 2^F, F = 61 - ceil(log2 V), so that V tokens' total stays below 2^62
__device__ __forceinline__ unsigned long long bin_mass(const SampleShared &sh, int b, int E, int F) {
    const unsigned long long ms = ((unsigned long long)sh.mhi[b] << 12) + sh.mlo[b];
    const int ex = E < 0 ? (b >> 3) : E;  // (the first level's bin is E and 3 bits of mantissa)
    const int s = (ex ? ex : 1) - 150 + F;
    return s >= 0 ? ms << s : (s > -64 ? ms >> -s : 0ull);
}
__device__ __forceinline__ double elem_mass(unsigned u, int F) {
    const int E = (int)(u >> 23);
    const unsigned m = (u & 0x7FFFFFu) | (E ? 0x800000u : 0u);
    return ldexp((double)m, (E ? E : 1) - 150 + F);
}

// The first bin from the top (bins ordered by value, largest first) where, counting c0 tokens
// and m0 mass above the histogram, the count reaches kk or the mass reaches Pu; with the count
// and mass above that bin and in it. E: the exponent every bin shares, < 0 for the first level.
// The sums are exact integers, so whether a bin reaches the target is monotone in its position:
// the one thread whose bin reaches it first, its predecessor not, tells the others. Each thread
// clears the bins it read: the histogram is left empty for the next level.
struct Pick {
    int found, bin;
    unsigned c_before, c_bin;
    unsigned long long m_before, m_bin;
};
__device__ Pick pick_bin(SampleShared &sh, unsigned c0, unsigned long long m0, unsigned kk, unsigned long long Pu,
                         int E, int F, bool mass) {
    const int T = blockDim.x, t = threadIdx.x, G = (SAMPLE_BINS + T - 1) / T;
    unsigned lc = 0;
    unsigned long long lm = 0;
    for (int g = 0; g < G; g++) {
        const int j = t * G + g;  // position from the top
        if (j < SAMPLE_BINS) {
            lc += sh.cnt[SAMPLE_BINS - 1 - j];
            if (mass) lm += bin_mass(sh, SAMPLE_BINS - 1 - j, E, F);
        }
    }
    unsigned cx;
    unsigned long long mx;
    block_excl_scan2(lc, lm, mass, &cx, &mx, sh.rw, sh.ru);
    unsigned cc = c0 + cx;
    unsigned long long mm = m0 + mx;
    for (int g = 0; g < G; g++) {
        const int j = t * G + g;
        if (j < SAMPLE_BINS) {
            const int b = SAMPLE_BINS - 1 - j;
            const unsigned c = sh.cnt[b];
            const unsigned long long m = mass ? bin_mass(sh, b, E, F) : 0ull;
            if (!(cc >= kk || mm >= Pu) && (cc + c >= kk || mm + m >= Pu)) {
                sh.pick.found = 1; sh.pick.bin = b;
                sh.pick.c_before = cc; sh.pick.c_bin = c;
                sh.pick.m_before = mm; sh.pick.m_bin = m;
            }
            cc += c;
            mm += m;
            sh.cnt[b] = sh.mhi[b] = sh.mlo[b] = 0;
            if (j == SAMPLE_BINS - 1 && !(cc >= kk || mm >= Pu)) sh.pick.found = 0;  // (nowhere)
        }
    }
    __syncthreads();
    const Pick p = {sh.pick.found, sh.pick.bin, sh.pick.c_before, sh.pick.c_bin, sh.pick.m_before, sh.pick.m_bin};
    return p;
}

// ---------------------------------------------------------------------------
// the tokens a pass looks at: the whole row (list == NULL: item i is id i) or a list of ids in
// increasing order; each thread takes `per` consecutive items

struct View {
    const int *list;
    int n, per;
};
__device__ __forceinline__ int view_id(const View &w, int i) { return w.list ? w.list[i] : i; }

// kept: u > ucut, or u == ucut and id <= idcut (ties in id order)
__device__ __forceinline__ bool kept(unsigned u, int id, unsigned ucut, int idcut) {
    return u > ucut || (u == ucut && id <= idcut);
}

// The draw among the kept tokens of the view: the first (in id order) whose running sum of e
// exceeds coin * (the kept total). Each thread's float sum of its items' e (pre: tpre, the exp
// pass's, every item kept) is scanned as an integer in fixed point (fscale = 2^F), so that the
// boundaries between threads increase and exactly one thread's range holds coin * total; it
// walks its items adding in the same order, so that it finds the token there. A token of
// e == 0 is never drawn; a coin at or above the total draws the last kept token of e > 0
// (V - 1 if there is none).
__device__ int draw(SampleShared &sh, const View &w, const float *buf, int V, float coin, unsigned ucut, int idcut,
                    bool pre, float tpre, float fscale) {
    const int t = threadIdx.x, a = min(t * w.per, w.n), b = min(a + w.per, w.n);
    float ts = 0.0f;
    if (pre) ts = tpre;
    else
        for (int i = a; i < b; i++) {
            const int id = view_id(w, i);
            const float e = buf[id];
            if (kept(__float_as_uint(e), id, ucut, idcut) && e > 0.0f) ts += e;
        }
    const unsigned long long tf = __float2ull_rz(ts * fscale);
    unsigned long long total;
    const unsigned long long ex = block_excl_scan<unsigned long long>(tf, &total, sh.ru);
    const double c = (double)fmaxf(coin, 0.0f) * (double)total;
    if (c < (double)total) {
        if (tf > 0 && (double)ex <= c && c < (double)(ex + tf)) {
            float run = 0.0f;
            int got = -1;
            for (int i = a; i < b; i++) {  // (no early exit: only the adds wait on each other)
                const int id = view_id(w, i);
                const float e = buf[id];
                if (kept(__float_as_uint(e), id, ucut, idcut) && e > 0.0f) {
                    run += e;
                    if (got < 0 && c < (double)(ex + __float2ull_rz(run * fscale))) got = id;
                }
            }
            sh.result = got;
        }
        __syncthreads();
        return sh.result;
    }
    int last = -1;
    for (int i = a; i < b; i++) {
        const int id = view_id(w, i);
        const float e = buf[id];
        if (kept(__float_as_uint(e), id, ucut, idcut) && e > 0.0f) last = id;
    }
    last = block_reduce<int>(last, Max<int>(), -1, sh.ri);
    return last >= 0 ? last : V - 1;
}

// The id of the m-th (from 1) token of the view, in id order, whose e has the bits us.
__device__ int tie_id(SampleShared &sh, const View &w, const float *buf, unsigned us, unsigned m) {
    const int t = threadIdx.x, a = min(t * w.per, w.n), b = min(a + w.per, w.n);
    unsigned n = 0;
    for (int i = a; i < b; i++) n += __float_as_uint(buf[view_id(w, i)]) == us;
    unsigned total;
    const unsigned ex = block_excl_scan<unsigned>(n, &total, sh.rw);
    if (ex < m && ex + n >= m) {
        unsigned k = ex;
        for (int i = a; i < b; i++) {
            const int id = view_id(w, i);
            if (__float_as_uint(buf[id]) == us && ++k == m) { sh.result = id; break; }
        }
    }
    __syncthreads();
    return sh.result;
}

// ---------------------------------------------------------------------------
// Greedy: the CPU keeps the first token in order of probability p = e / S (S: its float sum
// of e in id order), ties to the lower id. The largest p is RN(1 / S), that of every e == 1
// (the max logit's and any within rounding of it: their lowest id is v0). A token with e
// three or more ulp below 1 has p at least half an ulp below RN(1 / S) whatever S is; one or
// two ulp below (e = 1 - 2^-24, 1 - 2^-23: lowest ids c1, c2) ties with it for some S and not
// for others. Only where such a token comes before v0 is S needed (logits within about
// 2.4e-7 * temperature below the max: adjacent fp32 values near the max, or in bf16 and fp16
// a temperature in the thousands); then it is recomputed as the CPU computes it, e rounded as
// glibc's expf rounds (from the double exp: glibc's differs from that by an ulp on 1e-4 of all
// floats, which can move S by an ulp, and the choice only if S then crosses a rounding
// boundary of 1 / S) and added in id order by one thread (~0.1 ms at V = 50257).
__device__ int greedy(SampleShared &sh, NearIds n, const floatX *logits, int V, float *buf, const ExpParams &p,
                      int lo, int hi) {
    block_min3(&n.v0, &n.c1, &n.c2, sh.ri3);
    if (n.v0 == INT_MAX) return V - 1;  // (no finite logit: the CPU's probabilities are NaN)
    if (n.c1 > n.v0 && n.c2 > n.v0) return n.v0;
    for (int v = lo; v < hi; v++) {
        const float d = __fdiv_rn(__fsub_rn(to_float(logits[v]), p.M), p.temp);
        buf[v] = d >= -0x1p-20f ? near_exp(d) : __double2float_rn(exp((double)d));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        int v = 0;
        for (; v + 8 <= V; v += 8) {
            float x[8];
#pragma unroll
            for (int k = 0; k < 8; k++) x[k] = buf[v + k];
#pragma unroll
            for (int k = 0; k < 8; k++) s += x[k];
        }
        for (; v < V; v++) s += buf[v];
        sh.sum = s;
    }
    __syncthreads();
    const float S = sh.sum, top = __fdiv_rn(1.0f, S);
    int id = n.v0;
    if (n.c1 < id && __fdiv_rn(ONE_MINUS_1ULP, S) == top) id = n.c1;
    if (n.c2 < id && __fdiv_rn(ONE_MINUS_2ULP, S) == top) id = n.c2;
    return id;
}

// ---------------------------------------------------------------------------
// e in place of each logit of this thread's chunk [lo, hi), and the chunk's float sum. CUT:
// also note the ids of e near 1 (greedy), and count candidates (u >= Lu) into the first
// histogram level, marking them in *cmask where C <= 64
template <bool CUT>
__device__ void exp_pass(SampleShared &sh, float *buf, int lo, int hi, const ExpParams &p, unsigned Lu, bool mass,
                         int C, float *tsum, NearIds *near, unsigned *ncand, unsigned long long *cmask) {
    float ts = 0.0f;
    unsigned nc = 0;
    unsigned long long mk = 0;
    auto one = [&](int v, float x) {
        float e;
        if (CUT) {
            bool nr;
            e = elem_e(x, p, &nr);
            if (nr) near_note(*near, e, v);
        } else {
            const float a = __fsub_rn(x, p.M);
            e = fmaxf(expf(p.unit ? a : div_rn(a, p.temp, p.rtemp)), 0.0f);
        }
        buf[v] = e;
        ts += e;
        if (CUT) {
            const unsigned u = __float_as_uint(e);
            if (u >= Lu) {
                hist_add(sh, u, 20, mass);
                nc++;
                if (C <= 64) mk |= 1ull << (v - lo);
            }
        }
    };
    int v = lo;
    for (; v + 8 <= hi; v += 8) {  // eight loads ahead of the stores
        float x[8];
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = buf[v + k];
#pragma unroll
        for (int k = 0; k < 8; k++) one(v + k, x[k]);
    }
    for (; v < hi; v++) one(v, buf[v]);
    *tsum = ts;
    if (CUT) {
        *ncand = nc;
        *cmask = mk;
    }
}

// ---------------------------------------------------------------------------
// the row into buf as fp32, and its max; *gmax: the max of this thread's share (*has: it has one)
__device__ float load_row(SampleShared &sh, const floatX *row, int V, float *buf, float *gmax, bool *has) {
    const int T = blockDim.x, t = threadIdx.x;
    float m = -FLT_MAX;
    bool any = false;
    constexpr int VEC = X128::size;
    if (((uintptr_t)row & 15) == 0) {
        const int nv = V / VEC;
        const bool buf_al = ((uintptr_t)buf & 15) == 0;
        for (int i0 = t; i0 < nv; i0 += 4 * T) {  // four loads in flight a thread
            X128 x[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (i0 + k * T < nv) x[k] = load128cs(row + (size_t)(i0 + k * T) * VEC);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int i = i0 + k * T;
                if (i < nv) {
                    float f[VEC];
#pragma unroll
                    for (int j = 0; j < VEC; j++) {
                        f[j] = to_float(x[k][j]);
                        m = fmaxf(m, f[j]);
                    }
                    float *dst = buf + (size_t)i * VEC;
                    if (buf_al) {
#pragma unroll
                        for (int j = 0; j < VEC; j += 4)
                            *reinterpret_cast<float4 *>(dst + j) = make_float4(f[j], f[j + 1], f[j + 2], f[j + 3]);
                    } else {
#pragma unroll
                        for (int j = 0; j < VEC; j++) dst[j] = f[j];
                    }
                    any = true;
                }
            }
        }
        for (int v = nv * VEC + t; v < V; v += T) {
            const float f = to_float(row[v]);
            buf[v] = f;
            m = fmaxf(m, f);
            any = true;
        }
    } else {
        for (int v = t; v < V; v += T) {
            const float f = to_float(row[v]);
            buf[v] = f;
            m = fmaxf(m, f);
            any = true;
        }
    }
    *gmax = m;
    *has = any;
    return block_reduce<float>(m, Max<float>(), -FLT_MAX, sh.rf);  // (its barriers publish buf)
}

}  // namespace sample_detail

// A block's choice of a token from one row of logits (V values; floatX as the model writes them), the same as
// common/sampling.h's sample_from_logits(logits, probs, V, temperature, top_k, top_p, &rng) with coin = the
// rng_uniform it draws. Every thread of the block calls it; every thread gets the id. blockDim.x: a multiple of
// 32 (sample_kernel: SAMPLE_THREADS). The row is kept in the block's dynamic shared memory where the launch gave
// it at least V * 4 bytes (from its start: a caller's own dynamic shared memory would be overwritten), else in
// `scratch` (V floats of global memory for this row; unused, may be NULL, in the first case). The function's own
// static shared memory is sizeof(SampleShared), 30 KB. V <= SAMPLE_MAX_V.
__device__ int sample_row(const floatX *logits, int V, float temperature, int top_k, float top_p, float coin,
                          float *scratch) {
    using namespace sample_detail;
    __shared__ SampleShared sh;
    if (V <= 1) return 0;
    const int T = blockDim.x, t = threadIdx.x;
    float *buf = sample_dynamic_smem_bytes() >= (unsigned)V * sizeof(float)
                     ? reinterpret_cast<float *>(sample_dynamic_smem) : scratch;
    hist_clear(sh);  // (then always left clear by pick_bin)
    float gmax;
    bool has;
    ExpParams p;
    p.M = load_row(sh, logits, V, buf, &gmax, &has);
    p.temp = temperature > 1e-4f ? temperature : 1e-4f;  // (as the CPU clamps it)
    p.rtemp = __frcp_rn(p.temp);
    p.unit = p.temp == 1.0f;
    // each thread's chunk of ids: an odd length, so that a warp's lanes reading their chunks'
    // j-th values hit 32 different banks
    const int C = ((V + T - 1) / T) | 1, lo = min(t * C, V), hi = min(lo + C, V);
    const View whole = {NULL, V, C};
    const int F = 61 - (32 - __clz(V - 1));  // fixed point of masses and sums: 1.0 is 2^F
    const float fscale = __uint_as_float((unsigned)(127 + F) << 23);
    NearIds near = {INT_MAX, INT_MAX, INT_MAX};
    float tsum = 0.0f;

    const bool topk_on = top_k > 0 && top_k < V, topp_on = top_p < 1.0f;
    if (!topk_on && !topp_on) {  // no cut: e, the chunk sums, the draw over the whole row
        exp_pass<false>(sh, buf, lo, hi, p, UINT_MAX, false, C, &tsum, &near, NULL, NULL);
        return draw(sh, whole, buf, V, coin, 0u, INT_MAX, true, tsum, fscale);
    }
    if ((topk_on && top_k == 1) || (topp_on && !(top_p > 0.0f))) {  // greedy: e near 1 alone matters
        for (int v = lo; v < hi; v++) {
            float e, d;
            if (elem_near(buf[v], p, &e, &d)) near_note(near, e, v);
        }
        return greedy(sh, near, logits, V, buf, p, lo, hi);
    }

    const unsigned kk = topk_on ? (unsigned)top_k : UINT_MAX;
    // the e of the max of this thread's share of the row (each thread's a different token's)
    bool nr_item;
    const unsigned u_item = has ? __float_as_uint(elem_e(gmax, p, &nr_item)) : 0u;
    unsigned Lu = UINT_MAX;  // candidates: tokens of e's bits u >= Lu (UINT_MAX: not known yet)
    if (topk_on) {
        // a lower bound of the threshold: the top_k-th largest of the threads' maxima (the lower
        // edge of its first-level bin): then the exp pass does the candidates' first level
        if (has) hist_add(sh, u_item, 20, false);
        __syncthreads();
        const Pick b = pick_bin(sh, 0, 0, kk, ~0ull, -1, F, false);
        Lu = b.found ? (unsigned)b.bin << 20 : 0u;
    }
    unsigned ncand = 0;
    unsigned long long cmask = 0;  // which of this thread's ids are candidates (where C <= 64)
    exp_pass<true>(sh, buf, lo, hi, p, Lu, topp_on, C, &tsum, &near, &ncand, &cmask);

    // the mass target: top_p times the sum of e, in the fixed point of bin_mass
    unsigned long long Pu = ~0ull;
    double S = 0.0;
    if (topp_on) {
        S = block_reduce<double>((double)tsum, Add<double>(), 0.0, sh.rd);
        Pu = (unsigned long long)ceil(ldexp((double)top_p * S, F));
    }
    auto level0_pass = [&]() {  // the candidates' first histogram level, over the whole row
        ncand = 0;
        cmask = 0;
        for (int v = lo; v < hi; v++) {
            const unsigned u = __float_as_uint(buf[v]);
            if (u >= Lu) {
                hist_add(sh, u, 20, topp_on);
                ncand++;
                if (C <= 64) cmask |= 1ull << (v - lo);
            }
        }
        __syncthreads();
    };
    if (!topk_on) {
        // top-p alone: the bound from the threads' maxima by mass, and from the tail: tokens of e
        // below (1 - top_p) * S / (2V) hold less than half the mass that top-p leaves out
        if (has) hist_add(sh, u_item, 20, true);
        __syncthreads();
        const Pick b = pick_bin(sh, 0, 0, UINT_MAX, Pu, -1, F, true);
        Lu = b.found ? (unsigned)b.bin << 20 : 0u;
        const unsigned tail = __float_as_uint(__double2float_rd(0.5 * (1.0 - (double)top_p) * S / V));
        Lu = max(Lu, tail);
        level0_pass();
    } else if (!topp_on) {
        __syncthreads();  // (the exp pass's histogram complete; block_reduce's barriers did it with top-p)
    }
    Pick pk = pick_bin(sh, 0, 0, kk, Pu, -1, F, topp_on);
    if (!pk.found && Lu > 0) {  // (the bound was too high: only by rounding) every token a candidate
        Lu = 0;
        level0_pass();
        pk = pick_bin(sh, 0, 0, kk, Pu, -1, F, topp_on);
    }
    if (!pk.found)  // (the cut keeps everything: top_p within rounding of 1)
        return draw(sh, whole, buf, V, coin, 0u, INT_MAX, true, tsum, fscale);

    // the candidates as a list of ids in id order, where they fit
    unsigned ntot;
    const unsigned off = block_excl_scan<unsigned>(ncand, &ntot, sh.rw);
    View w = whole;
    if (ntot <= SAMPLE_LIST_CAP) {
        unsigned k = off;
        if (C <= 64) {
            for (unsigned long long mk = cmask; mk; mk &= mk - 1) sh.list[k++] = lo + __ffsll((long long)mk) - 1;
        } else {
            for (int v = lo; v < hi; v++)
                if (__float_as_uint(buf[v]) >= Lu) sh.list[k++] = v;
        }
        __syncthreads();
        w.list = sh.list;
        w.n = (int)ntot;
        w.per = ((int)ntot + T - 1) / T;
    }

    // the finer levels, over the candidates of the bin the cut is in; the cut: kept(u, id, ucut, idcut)
    unsigned ucut = 0, B0 = 0, B01 = 0;
    int idcut = INT_MAX;
    unsigned nkept = 0;
    for (int level = 0;; level++) {
        const unsigned edge = level == 0 ? (unsigned)pk.bin << 20
                            : level == 1 ? (B0 << 20) | ((unsigned)pk.bin << 10)
                                         : (B01 << 10) | (unsigned)pk.bin;
        unsigned m = pk.c_bin;  // how many of the bin's tokens are kept
        if (level == 2) {  // one value of e: the first m of its tokens in id order
            if (kk != UINT_MAX) m = min(m, kk - pk.c_before);
            if (Pu != ~0ull) {
                const double f = elem_mass(edge, F);
                if (f > 0.0) {
                    const double need = ceil((double)(Pu - pk.m_before) / f);
                    if (need < (double)m) m = need < 1.0 ? 1u : (unsigned)need;
                }
            }
        } else if (!(pk.c_bin == 1 || (pk.c_before + pk.c_bin == kk && pk.m_before + pk.m_bin < Pu))) {
            // the cut is inside the bin: the next level over its candidates
            const int shift = level == 0 ? 10 : 0, hs = level == 0 ? 20 : 10;
            const unsigned pref = level == 0 ? (B0 = (unsigned)pk.bin) : (B01 = (B0 << 10) | (unsigned)pk.bin);
            const int a = min(t * w.per, w.n), b = min(a + w.per, w.n);
            for (int i = a; i < b; i++) {
                const unsigned u = __float_as_uint(buf[view_id(w, i)]);
                if (u >= Lu && (u >> hs) == pref) hist_add(sh, u, shift, topp_on);
            }
            __syncthreads();
            const Pick q = pick_bin(sh, pk.c_before, pk.m_before, kk, Pu, (int)(B0 >> 3), F, topp_on);
            if (q.found) {
                pk = q;
                continue;
            }
            // (the finer masses, rounded down bin by bin, fell short of the target: the cut is
            // at the bin's last token) the whole bin kept
        }
        if (m >= pk.c_bin) {  // the whole bin (and everything above it)
            const unsigned from = max(edge, Lu);
            nkept = pk.c_before + pk.c_bin;
            if (from == 0) { ucut = 0; idcut = INT_MAX; }
            else { ucut = from - 1; idcut = -1; }
        } else {
            nkept = pk.c_before + m;
            ucut = edge;
            idcut = tie_id(sh, w, buf, edge, m);
        }
        break;
    }
    if (nkept == 1) return greedy(sh, near, logits, V, buf, p, lo, hi);
    return draw(sh, w, buf, V, coin, ucut, idcut, false, 0.0f, fscale);
}

// sample_row with the coin drawn from *rng (one draw, as the CPU's sample_from_logits makes;
// thread 0 draws it): every thread of the block calls it and gets the id
__device__ int sample_row_draw(uint64_t *rng, const floatX *logits, int V, float temperature, int top_k, float top_p,
                               float *scratch) {
    __shared__ float coin;
    if (threadIdx.x == 0) coin = rng_uniform(rng);
    __syncthreads();
    return sample_row(logits, V, temperature, top_k, top_p, coin, scratch);
}

// One block per row b < B: rows whose active[b] is 0 (active may be NULL: all) draw nothing and leave rng[b] and
// out[b] unchanged; the others draw coin = rng_uniform(&rng[b]) (exactly one draw, as the CPU does) and write
// out[b] = sample_row(logits + b * ld, ...). scratch: row b's is scratch + b * V (see sample_row).
__global__ void __launch_bounds__(SAMPLE_THREADS)
sample_kernel(int *out, const floatX *logits, int ld, int V, float temperature, int top_k, float top_p,
              uint64_t *rng, const int *active, float *scratch) {
    const int b = blockIdx.x;
    if (active && !active[b]) return;
    const int id = sample_row_draw(&rng[b], logits + (size_t)b * ld, V, temperature, top_k, top_p,
                                   scratch ? scratch + (size_t)b * V : NULL);
    if (threadIdx.x == 0) out[b] = id;
}

// The dynamic shared memory to launch `kernel` (one that calls sample_row) with for rows of V
// tokens: V floats where they fit beside its static shared memory on this GPU (its opt-in
// raised to that), else 0, and sample_row then keeps the row in scratch.
template <typename Kernel> static size_t sample_row_smem(Kernel kernel, int V) {
    cudaFuncAttributes fa;
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
    const DeviceCaps *caps = device_caps();
    const size_t smem = (size_t)V * sizeof(float), optin = caps ? (size_t)caps->smem_optin : 48 * 1024;
    if (smem + fa.sharedSizeBytes > optin) return 0;
    if (smem > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    return smem;
}

// Whether sample_kernel keeps a row of V tokens in shared memory on this GPU; if not, sample_rows needs scratch
// of B * V floats.
static bool sample_row_fits_smem(int V) { return sample_row_smem(sample_kernel, V) != 0; }

// out[b] for the rows b < B of logits (row stride ld): sample_kernel on stream s, no host synchronisation (a CUDA
// graph may hold it). scratch: B * V floats, or NULL where sample_row_fits_smem(V).
static void sample_rows(int *out, const floatX *logits, int ld, int V, int B, float temperature, int top_k,
                        float top_p, uint64_t *rng, const int *active, float *scratch, cudaStream_t s) {
    if (B <= 0) return;
    if (V < 1 || V > SAMPLE_MAX_V || ld < V)
        fatal("sample_rows: %d tokens a row (row stride %d): the kernel samples from 1 to %d", V, ld, SAMPLE_MAX_V);
    const size_t smem = sample_row_smem(sample_kernel, V);
    if (!smem && !scratch) fatal("sample_rows: a row of %d tokens does not fit in shared memory: it needs scratch", V);
    sample_kernel<<<B, SAMPLE_THREADS, smem, s>>>(out, logits, ld, V, temperature, top_k, top_p, rng, active,
                                                  scratch);
    LAUNCH_CHECK();
}
