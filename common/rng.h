// rng.h: a small deterministic random number generator (xorshift64*) for weight init
// and sampling. Its whole state is one uint64, saved in training checkpoints.
#ifndef COMMON_RNG_H
#define COMMON_RNG_H
#include <math.h>
#include <stdint.h>

static inline uint64_t rng_next_u64(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
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
static inline float rng_uniform(uint64_t *state) {
    return (float)(rng_next_u64(state) >> 40) / 16777216.0f;
}

static inline void rng_fill_normal(uint64_t *state, float *out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(rng_next_u64(state) >> 11) + 1.0) / 9007199254740993.0;
        double u2 = (double)(rng_next_u64(state) >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        out[i] = (float)(mean + std * r * cos(2.0 * M_PI * u2));
        if (i + 1 < n) out[i + 1] = (float)(mean + std * r * sin(2.0 * M_PI * u2));
    }
}

#endif // COMMON_RNG_H
