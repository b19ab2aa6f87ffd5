// rng.h: a small deterministic random number generator (xorshift64*) for weight init
// and sampling. Its whole state is one uint64, saved in training checkpoints.
#ifndef COMMON_RNG_H
#define COMMON_RNG_H
#include <math.h>
#include <stdint.h>
#include "util.h"

// The draws below are written once for the host and the GPU: CUDA code (kernels/sample.cuh)
// draws its sampling coins on the device from the same state, as the CPU would.
#ifdef __CUDACC__
#define RNG_HD __host__ __device__
#else
#define RNG_HD
#endif

// the state update alone (linear over GF(2): rng_jump_draws builds its matrix from it)
static inline RNG_HD uint64_t rng_xorshift(uint64_t x) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x;
}

static inline RNG_HD uint64_t rng_next_u64(uint64_t *state) {
    uint64_t x = rng_xorshift(*state);
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static inline uint64_t rng_seed(uint64_t seed) {
    // splitmix64 scramble so that small seeds give unrelated streams; never zero
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 1;
}

// uniform in [0, 1)
static inline RNG_HD float rng_uniform(uint64_t *state) {
    return (float)(rng_next_u64(state) >> 40) / 16777216.0f;
}

// One normal pair (Box-Muller) from two draws into out[i] and out[i + 1] (if i + 1 < n)
static inline void rng_normal_pair(uint64_t *state, float *out, size_t i, size_t n, float mean, float std) {
    double u1 = ((double)(rng_next_u64(state) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(rng_next_u64(state) >> 11) / 9007199254740992.0;
    double r = sqrt(-2.0 * log(u1));
    out[i] = (float)(mean + std * r * cos(2.0 * M_PI * u2));
    if (i + 1 < n) out[i + 1] = (float)(mean + std * r * sin(2.0 * M_PI * u2));
}

// Jumping ahead: xorshift64*'s state update (rng_xorshift, before the output multiply) is
// linear over GF(2), a 64x64 bit matrix M; k draws move the state by M^k.
// col[j] is the image of bit j.
typedef struct {
    uint64_t col[64];
} RngJump;

static inline uint64_t rng_jump_apply(const RngJump *m, uint64_t x) {
    uint64_t y = 0;
    for (int j = 0; j < 64; j++)
        if (x >> j & 1) y ^= m->col[j];
    return y;
}

// a then b (b's columns through a)
static inline RngJump rng_jump_compose(const RngJump *a, const RngJump *b) {
    RngJump c;
    for (int j = 0; j < 64; j++) c.col[j] = rng_jump_apply(a, b->col[j]);
    return c;
}

// M^k
static inline RngJump rng_jump_draws(uint64_t k) {
    RngJump m, r;
    for (int j = 0; j < 64; j++) {
        m.col[j] = rng_xorshift(1ull << j);
        r.col[j] = 1ull << j;
    }
    for (; k; k >>= 1) {
        if (k & 1) r = rng_jump_compose(&m, &r);
        m = rng_jump_compose(&m, &m);
    }
    return r;
}

#define RNG_NORMAL_CHUNK_PAIRS ((size_t)1 << 16)

// n normal values, two draws a pair (an odd n's last pair draws two and keeps one). Chunks
// of pairs are filled in parallel from their own start states (jumped ahead), so the values
// and the final state are those of one sequential pass whatever the thread count: GPT-2
// 1.5B's initialisation is 1.5 billion of them (40 s on one core).
static inline void rng_fill_normal(uint64_t *state, float *out, size_t n, float mean, float std) {
    const size_t pairs = (n + 1) / 2, chunks = (pairs + RNG_NORMAL_CHUNK_PAIRS - 1) / RNG_NORMAL_CHUNK_PAIRS;
    if (chunks <= 1) {  // (n = 0 included: the state stays)
        for (size_t i = 0; i < n; i += 2) rng_normal_pair(state, out, i, n, mean, std);
        return;
    }
    uint64_t *start = (uint64_t *)xmalloc(chunks * sizeof(uint64_t)), end = 0;
    const RngJump jump = rng_jump_draws(2 * RNG_NORMAL_CHUNK_PAIRS);
    start[0] = *state;
    for (size_t c = 1; c < chunks; c++) start[c] = rng_jump_apply(&jump, start[c - 1]);
#ifdef _OPENMP  // (programs built without OpenMP fill the chunks in turn)
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (size_t c = 0; c < chunks; c++) {
        uint64_t s = start[c];
        size_t hi = (c + 1) * RNG_NORMAL_CHUNK_PAIRS * 2;
        for (size_t i = c * RNG_NORMAL_CHUNK_PAIRS * 2; i < n && i < hi; i += 2)
            rng_normal_pair(&s, out, i, n, mean, std);
        if (c == chunks - 1) end = s;
    }
    free(start);
    *state = end;
}

#endif // COMMON_RNG_H
