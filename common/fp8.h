// fp8.h: the two OCP FP8 formats as plain C (and CUDA host/device code): a reference
// encoder and decoder for E4M3 (forward operands) and E5M2 (gradients), and the per-tensor
// scale recipe. The GPU casts use the hardware conversion; this encoder is what they are
// checked against, bit for bit (dev/test/test_fp8_host.cu, dev/test/test_fp8.cu).
//
//   E4M3: bias 7, 3 mantissa bits, no infinities, S.1111.111 is NaN, max 448, min subnormal 2^-9
//   E5M2: bias 15, 2 mantissa bits, IEEE-like (S.11111.00 inf, S.11111.xx NaN), max 57344,
//         min subnormal 2^-16
//
// Encoding rounds to nearest, ties to even, and saturates: anything beyond the largest
// finite value, infinities included, becomes ±max. That is the behaviour of the hardware's
// cvt.rn.satfinite (CUDA's __NV_SATFINITE): a scaled tensor that overshoots keeps its sign
// and magnitude as well as the format allows instead of turning into inf or NaN, which
// would poison every product it enters. NaN stays NaN, as the code 0x7F in both formats
// (the sign of a NaN is dropped, as CUDA does).
#ifndef COMMON_FP8_H
#define COMMON_FP8_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#ifdef __CUDACC__
#define FP8_HD __host__ __device__
#else
#define FP8_HD
#endif

typedef enum { FP8_E4M3 = 0, FP8_E5M2 = 1 } Fp8Format;

#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f
#define FP8_NAN 0x7F  // the NaN code the encoder returns, in either format

FP8_HD static inline float fp8_format_max(Fp8Format f) { return f == FP8_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }

FP8_HD static inline uint32_t fp8_float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
FP8_HD static inline float fp8_bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

// The encoder for a format of M mantissa bits and minimum normal exponent emin, whose
// largest finite value is maxval with code maxcode. It works on the float's bits: the
// 24-bit significand (implicit bit included) is shifted right to the fp8 precision at the
// value's exponent (further for fp8 subnormals), rounded to nearest even on the bits
// shifted out. For a normal the code is then ((e - emin) << M) + rounded significand: the
// significand's implicit bit lands in the exponent field's lowest bit, so exponent field
// = e - emin + 1 = e + bias, and a rounding carry out of the mantissa steps the exponent
// up by itself. A subnormal's code is its rounded significand alone, and rounding up to
// 2^M gives the smallest normal's code. Values below max round to at most max (max is
// representable), so saturation needs only the one comparison before.
FP8_HD static inline uint8_t fp8_encode(float x, int M, int emin, float maxval, uint8_t maxcode) {
    uint32_t u = fp8_float_bits(x);
    uint8_t sign = (uint8_t)((u >> 31) << 7);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return FP8_NAN;
    if (a >= fp8_float_bits(maxval)) return (uint8_t)(sign | maxcode);  // beyond max, or inf
    int e = (int)(a >> 23) - 127;
    if (e < -126) return sign;  // float subnormals (< 2^-126) are far below half the smallest fp8 subnormal
    uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
    int shift = 23 - M + (e < emin ? emin - e : 0);
    if (shift > 24) return sign;  // below half the smallest subnormal: rounds to zero
    uint32_t q = sig >> shift, rem = sig & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    uint32_t code = e < emin ? q : ((uint32_t)(e - emin) << M) + q;
    return (uint8_t)(sign | code);
}

FP8_HD static inline uint8_t fp8_e4m3_from_float(float x) { return fp8_encode(x, 3, -6, FP8_E4M3_MAX, 0x7E); }
FP8_HD static inline uint8_t fp8_e5m2_from_float(float x) { return fp8_encode(x, 2, -14, FP8_E5M2_MAX, 0x7B); }
FP8_HD static inline uint8_t fp8_from_float(float x, Fp8Format f) {
    return f == FP8_E4M3 ? fp8_e4m3_from_float(x) : fp8_e5m2_from_float(x);
}

// Decoding builds the float's bits: a normal's exponent is rebiased and its mantissa moved
// to the top of the float's; a subnormal is mantissa * 2^(emin - M), exact in float.
FP8_HD static inline float fp8_e4m3_to_float(uint8_t c) {
    uint32_t sign = (uint32_t)(c >> 7) << 31, ex = (c >> 3) & 0xF, man = c & 0x7;
    if ((c & 0x7F) == 0x7F) return fp8_bits_float(sign | 0x7FC00000u);
    if (ex == 0) return fp8_bits_float(sign | fp8_float_bits((float)man * (1.0f / 512.0f)));
    return fp8_bits_float(sign | ((ex - 7 + 127) << 23) | (man << 20));
}
FP8_HD static inline float fp8_e5m2_to_float(uint8_t c) {
    uint32_t sign = (uint32_t)(c >> 7) << 31, ex = (c >> 2) & 0x1F, man = c & 0x3;
    if (ex == 0x1F) return fp8_bits_float(sign | (man ? 0x7FC00000u : 0x7F800000u));
    if (ex == 0) return fp8_bits_float(sign | fp8_float_bits((float)man * (1.0f / 65536.0f)));
    return fp8_bits_float(sign | ((ex - 15 + 127) << 23) | (man << 21));
}
FP8_HD static inline float fp8_to_float(uint8_t c, Fp8Format f) {
    return f == FP8_E4M3 ? fp8_e4m3_to_float(c) : fp8_e5m2_to_float(c);
}

// ---------------------------------------------------------------------------
// Per-tensor scaling. A tensor x is stored as codes q = fp8(x * scale), with scale chosen
// so that the tensor's largest magnitude (amax) lands at the format's max divided by
// 2^margin: scale = fmax / amax / 2^margin. Delayed scaling takes amax as the largest of
// the last H steps' amaxes (the cast of this step then needs no pass over x first); current
// scaling takes this step's own amax (H = 1). margin > 0 leaves headroom for growth between
// steps, at the price of precision near zero.
//
// An amax of 0 or one that is not finite keeps the previous scale. 0 says only that the
// tensor was all zeros (a gradient before the first backward, a zero-initialised weight):
// fmax / 0 = inf would make the next non-zero tensor inf * x (saturated) or 0 * inf (NaN).
// inf or NaN comes from a step that overflowed, which the trainer skips: a scale of 0 or
// NaN derived from it would zero or poison every later cast, while the previous scale
// still describes the tensor. An amax so small that fmax / amax overflows carries no more
// usable information than 0 and is treated alike.

// The largest finite entry of an amax history (those that are not finite come from skipped
// steps and are passed over); 0 when there is none.
FP8_HD static inline float fp8_amax_history_max(const float *hist, int H) {
    float m = 0.0f;
    for (int i = 0; i < H; i++)
        if (isfinite(hist[i]) && hist[i] > m) m = hist[i];
    return m;
}

FP8_HD static inline float fp8_scale_from_amax(float amax, float fmax, int margin, float prev_scale) {
    if (!(amax > 0.0f) || !isfinite(amax)) return prev_scale;
    float s = ldexpf(fmax / amax, -margin);
    return isfinite(s) && s > 0.0f ? s : prev_scale;
}

// The matmul gets the dequantization factor of each operand, 1 / scale (cuBLASLt's
// A/B_SCALE_POINTER: D = a_deq * b_deq * (qA qB) recovers the product of the unscaled
// tensors). Computed once per scale update, next to the scale, so every cast and matmul of
// the step uses the same pair; its rounding (half an ulp of fp32) is far below fp8's.
FP8_HD static inline float fp8_dequant_factor(float scale) { return 1.0f / scale; }

// Rows per chunk when an operand of `width` codes a row goes through a buffer of `cap`
// bytes (kernels/fp8_linear.cuh): all n where they fit, else a multiple of 16 (cuBLASLt's
// FP8 kernels need one) that fits, evened out over the chunks so that no last chunk is
// thin; 0 when not even 16 rows fit.
static inline int fp8_rows_per_chunk(size_t cap, int width, int n) {
    size_t fit = cap / (size_t)width;
    if (fit >= (size_t)n) return n;
    int most = (int)(fit / 16 * 16);
    if (most < 16) return 0;
    int chunks = (n + most - 1) / most;
    return ((n + chunks - 1) / chunks + 15) / 16 * 16;
}

#endif // COMMON_FP8_H
