// sgemm.h: fp32 matrix multiply for the CPU reference trainer, header-only.
//
//   sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc)
//       C[M,N] = beta*C + A'[M,K] * B'[K,N], all row-major, A' = A or A^T, B' = B or B^T.
//       lda/ldb/ldc are row strides in elements of the matrices as stored. beta == 0 never
//       reads C (old NaN/Inf are overwritten); any other beta scales C first.
//
// Linear-layer wrappers (weight stored (OC, C) as in PyTorch nn.Linear):
//   matmul_forward(out, inp, weight, bias, N, C, OC)        out = inp . weight^T (+ bias)
//   matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC)
//       dinp += dout . weight, dweight += dout^T . inp, dbias += column sums of dout;
//       any of dinp/dweight/dbias may be NULL to skip it.
//
// Implementation: BLIS-style blocking. For each NC-wide column block of B' and each KC-deep
// slice of K, a KC x NC panel of B' is packed into NR-wide micro-panels; for each MC-tall
// row block of A' a MC x KC block is packed into MR-tall micro-panels; a register-blocked
// micro-kernel (AVX-512 12x32, AVX2+FMA 6x16, or portable scalar 4x8) computes one MR x NR
// tile of C per call. Packing absorbs the transposes and zero-pads the edges.
//
// Threads (OpenMP): the output is cut into a pm x pn grid of rectangles, pm*pn = threads,
// chosen to minimise the packing the threads repeat (a thread packs all of A' for its rows
// and all of B' for its columns), so wide-and-short products such as the lm_head
// (M = tokens, N = 50304) split along N and keep every thread busy. Big products cut the
// split dimension further (up to 4 chunks a thread, handed out dynamically) so that a core
// shared with another process does not stall the rest. Products under 2 MFLOP run on the
// calling thread. Each C element is computed by exactly one thread with the same summation
// order whatever the partition, so results are bitwise identical for any thread count on a
// given kernel. Called from inside a parallel region, sgemm runs on the calling thread only.
//
// Packing buffers: one 64-byte aligned buffer (1.2 MB for AVX2) per OpenMP thread number,
// allocated on first use and kept (no per-call page faults); sgemm_release_buffers() frees
// them. Calls from inside a parallel region use per-call buffers instead. Do not call sgemm
// concurrently from threads that are not one OpenMP team (e.g. raw pthreads).
//
// -DUSE_CBLAS: the same API forwards to cblas_sgemm (link -lopenblas); thread count is then
// OpenBLAS's own (OPENBLAS_NUM_THREADS or openblas_set_num_threads).
#ifndef COMMON_SGEMM_H
#define COMMON_SGEMM_H

#include "util.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// every function here is static; 'unused' keeps -Wall quiet in files that use only some.
#define SGEMM_FN static __attribute__((unused))

#ifdef _OPENMP
#define SGEMM_PRAGMA(x) _Pragma(#x)
#else
#define SGEMM_PRAGMA(x)
#endif

// C[M,N] *= beta for beta != 1 (beta == 0 writes zeros without reading C)
SGEMM_FN void sgemm_scale_c(int M, int N, float beta, float *C, int ldc) {
    if (beta == 1.0f) return;
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f) memset(c, 0, (size_t)N * sizeof(float));
        else for (int j = 0; j < N; j++) c[j] *= beta;
    }
}

#ifdef USE_CBLAS
// ------------------------------------------------------------------------------------------
// OpenBLAS backend
// ------------------------------------------------------------------------------------------
#include <cblas.h>

SGEMM_FN const char *sgemm_backend(void) { return "cblas (OpenBLAS)"; }
SGEMM_FN void sgemm_release_buffers(void) {}

SGEMM_FN void sgemm(int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { sgemm_scale_c(M, N, beta, C, ldc); return; }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

#else
// ------------------------------------------------------------------------------------------
// Own implementation
// ------------------------------------------------------------------------------------------

// Micro-tile MR x NR and cache blocks. KC: depth of a packed slice (the KC x NR B micro-panel,
// 16 KB for AVX2, stays in half of a 32 KB L1 while the kernel sweeps the A block); the
// MC x KC packed A block (144 KB) lives in L2 (512 KB on Zen3); the KC x NC packed B panel
// (1 MB) and the M x NC strip of C it updates stay in L2/L3 across the K slices. Smaller NC
// measured better than BLIS's usual ~4000 for the short-and-wide forward products here (the
// C strip is revisited once per K slice). KC, MC and NC are upper bounds: the actual blocks
// are balanced (e.g. K = 600 -> three slices of 200, not 256 + 256 + 88).
#if defined(__AVX512F__)
#define SGEMM_MR 12
#define SGEMM_NR 32
#define SGEMM_KC_DEF 256  // 32 KB B micro-panel; 256/384 beat 192 on a Xeon (48 KB L1)
#define SGEMM_MC_DEF 144
#define SGEMM_NC_DEF 1024
#define SGEMM_KERNEL_NAME "avx512 12x32"
#elif defined(__AVX2__) && defined(__FMA__)
#define SGEMM_MR 6
#define SGEMM_NR 16
#define SGEMM_KC_DEF 256
#define SGEMM_MC_DEF 144
#define SGEMM_NC_DEF 1024
#define SGEMM_KERNEL_NAME "avx2+fma 6x16"
#else
#define SGEMM_MR 4
#define SGEMM_NR 8
#define SGEMM_KC_DEF 256
#define SGEMM_MC_DEF 128
#define SGEMM_NC_DEF 2048
#define SGEMM_KERNEL_NAME "portable scalar 4x8"
#endif
// the cache blocks may be overridden at compile time (-DSGEMM_KC=256 ...) for tuning
#ifndef SGEMM_KC
#define SGEMM_KC SGEMM_KC_DEF
#endif
#ifndef SGEMM_MC
#define SGEMM_MC SGEMM_MC_DEF
#endif
#ifndef SGEMM_NC
#define SGEMM_NC SGEMM_NC_DEF
#endif
// smallest extent (rows or columns) of a dynamically scheduled chunk of a big product
#ifndef SGEMM_CHUNK_MIN
#define SGEMM_CHUNK_MIN 1536
#endif

SGEMM_FN const char *sgemm_backend(void) { return "own sgemm, " SGEMM_KERNEL_NAME; }

// Write an MR x NR tile held in tmp (row-major, NR wide) to C: m x n valid part only.
static inline void sgemm_store_tile(const float *tmp, float *C, int ldc, int add, int m, int n) {
    for (int i = 0; i < m; i++) {
        float *c = C + (size_t)i * ldc;
        const float *t = tmp + i * SGEMM_NR;
        if (add) for (int j = 0; j < n; j++) c[j] += t[j];
        else for (int j = 0; j < n; j++) c[j] = t[j];
    }
}

#if defined(__AVX512F__)
// 12x32 tile: 24 zmm accumulators, 2 zmm for the B row, 1 for the broadcast A value.
static inline void sgemm_ukernel(int kc, const float *restrict a, const float *restrict b,
                                 float *C, int ldc, int add, int m, int n) {
    for (int r = 0; r < m; r++) {
        _mm_prefetch((const char *)(C + (size_t)r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(C + (size_t)r * ldc + 16), _MM_HINT_T0);
        _mm_prefetch((const char *)(C + (size_t)r * ldc + SGEMM_NR - 1), _MM_HINT_T0);
    }
    __m512 c00 = _mm512_setzero_ps(), c01 = _mm512_setzero_ps();
    __m512 c10 = _mm512_setzero_ps(), c11 = _mm512_setzero_ps();
    __m512 c20 = _mm512_setzero_ps(), c21 = _mm512_setzero_ps();
    __m512 c30 = _mm512_setzero_ps(), c31 = _mm512_setzero_ps();
    __m512 c40 = _mm512_setzero_ps(), c41 = _mm512_setzero_ps();
    __m512 c50 = _mm512_setzero_ps(), c51 = _mm512_setzero_ps();
    __m512 c60 = _mm512_setzero_ps(), c61 = _mm512_setzero_ps();
    __m512 c70 = _mm512_setzero_ps(), c71 = _mm512_setzero_ps();
    __m512 c80 = _mm512_setzero_ps(), c81 = _mm512_setzero_ps();
    __m512 c90 = _mm512_setzero_ps(), c91 = _mm512_setzero_ps();
    __m512 ca0 = _mm512_setzero_ps(), ca1 = _mm512_setzero_ps();
    __m512 cb0 = _mm512_setzero_ps(), cb1 = _mm512_setzero_ps();
#define SGEMM_ROW512(r, x0, x1)                           \
    { __m512 av = _mm512_set1_ps(a[r]);                   \
      x0 = _mm512_fmadd_ps(av, b0, x0);                    \
      x1 = _mm512_fmadd_ps(av, b1, x1); }
#pragma GCC unroll 2
    for (int k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        _mm_prefetch((const char *)(b + 8 * SGEMM_NR), _MM_HINT_T0);
        SGEMM_ROW512(0, c00, c01) SGEMM_ROW512(1, c10, c11) SGEMM_ROW512(2, c20, c21)
        SGEMM_ROW512(3, c30, c31) SGEMM_ROW512(4, c40, c41) SGEMM_ROW512(5, c50, c51)
        SGEMM_ROW512(6, c60, c61) SGEMM_ROW512(7, c70, c71) SGEMM_ROW512(8, c80, c81)
        SGEMM_ROW512(9, c90, c91) SGEMM_ROW512(10, ca0, ca1) SGEMM_ROW512(11, cb0, cb1)
        a += SGEMM_MR;
        b += SGEMM_NR;
    }
#undef SGEMM_ROW512
    __m512 acc[24] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51,
                      c60, c61, c70, c71, c80, c81, c90, c91, ca0, ca1, cb0, cb1};
    if (m == SGEMM_MR && n == SGEMM_NR) {
        for (int i = 0; i < SGEMM_MR; i++) {
            float *c = C + (size_t)i * ldc;
            __m512 v0 = acc[2 * i], v1 = acc[2 * i + 1];
            if (add) {
                v0 = _mm512_add_ps(v0, _mm512_loadu_ps(c));
                v1 = _mm512_add_ps(v1, _mm512_loadu_ps(c + 16));
            }
            _mm512_storeu_ps(c, v0);
            _mm512_storeu_ps(c + 16, v1);
        }
    } else {
        _Alignas(64) float tmp[SGEMM_MR * SGEMM_NR];
        for (int i = 0; i < 2 * SGEMM_MR; i++) _mm512_store_ps(tmp + 16 * i, acc[i]);
        sgemm_store_tile(tmp, C, ldc, add, m, n);
    }
}

#elif defined(__AVX2__) && defined(__FMA__)
// 6x16 tile: 12 ymm accumulators, 2 ymm for the B row, 1 for the broadcast A value.
static inline void sgemm_ukernel(int kc, const float *restrict a, const float *restrict b,
                                 float *C, int ldc, int add, int m, int n) {
    // pull the C tile toward L1 while the k loop runs (it is read, or written, at the end)
    for (int r = 0; r < m; r++) {
        _mm_prefetch((const char *)(C + (size_t)r * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(C + (size_t)r * ldc + SGEMM_NR - 1), _MM_HINT_T0);
    }
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
#define SGEMM_ROW256(r, x0, x1)                           \
    { __m256 av = _mm256_broadcast_ss(a + (r));           \
      x0 = _mm256_fmadd_ps(av, b0, x0);                    \
      x1 = _mm256_fmadd_ps(av, b1, x1); }
#pragma GCC unroll 4
    for (int k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        _mm_prefetch((const char *)(b + 8 * SGEMM_NR), _MM_HINT_T0);
        SGEMM_ROW256(0, c00, c01) SGEMM_ROW256(1, c10, c11) SGEMM_ROW256(2, c20, c21)
        SGEMM_ROW256(3, c30, c31) SGEMM_ROW256(4, c40, c41) SGEMM_ROW256(5, c50, c51)
        a += SGEMM_MR;
        b += SGEMM_NR;
    }
#undef SGEMM_ROW256
    if (m == SGEMM_MR && n == SGEMM_NR) {
#define SGEMM_ST256(r, x0, x1)                                        \
        { float *c = C + (size_t)(r) * ldc;                           \
          if (add) { x0 = _mm256_add_ps(x0, _mm256_loadu_ps(c));       \
                     x1 = _mm256_add_ps(x1, _mm256_loadu_ps(c + 8)); } \
          _mm256_storeu_ps(c, x0); _mm256_storeu_ps(c + 8, x1); }
        SGEMM_ST256(0, c00, c01) SGEMM_ST256(1, c10, c11) SGEMM_ST256(2, c20, c21)
        SGEMM_ST256(3, c30, c31) SGEMM_ST256(4, c40, c41) SGEMM_ST256(5, c50, c51)
#undef SGEMM_ST256
    } else {
        _Alignas(32) float tmp[SGEMM_MR * SGEMM_NR];
        _mm256_store_ps(tmp + 0, c00);  _mm256_store_ps(tmp + 8, c01);
        _mm256_store_ps(tmp + 16, c10); _mm256_store_ps(tmp + 24, c11);
        _mm256_store_ps(tmp + 32, c20); _mm256_store_ps(tmp + 40, c21);
        _mm256_store_ps(tmp + 48, c30); _mm256_store_ps(tmp + 56, c31);
        _mm256_store_ps(tmp + 64, c40); _mm256_store_ps(tmp + 72, c41);
        _mm256_store_ps(tmp + 80, c50); _mm256_store_ps(tmp + 88, c51);
        sgemm_store_tile(tmp, C, ldc, add, m, n);
    }
}

#else
// Portable 4x8 tile in plain C (the compiler may vectorise the inner j loop).
static inline void sgemm_ukernel(int kc, const float *restrict a, const float *restrict b,
                                 float *C, int ldc, int add, int m, int n) {
    float acc[SGEMM_MR * SGEMM_NR];
    for (int i = 0; i < SGEMM_MR * SGEMM_NR; i++) acc[i] = 0.0f;
    for (int k = 0; k < kc; k++) {
        for (int i = 0; i < SGEMM_MR; i++) {
            float av = a[i];
            for (int j = 0; j < SGEMM_NR; j++) acc[i * SGEMM_NR + j] += av * b[j];
        }
        a += SGEMM_MR;
        b += SGEMM_NR;
    }
    sgemm_store_tile(acc, C, ldc, add, m, n);
}
#endif

#if defined(__AVX2__)
// Transpose 8 rows of 8 floats held in v[0..7] in place (v[j] becomes column j).
static inline void sgemm_transpose8x8_regs(__m256 v[8]) {
    // interleave pairs of rows: t0 = r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5] ...
    __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    // gather four rows: s0 = column 0 of rows 0-3 | column 4 of rows 0-3, etc.
    __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    // join the 128-bit halves of rows 0-3 and rows 4-7
    v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Transpose the 8x8 block at src (row stride lds) into dst (row stride ldd).
static inline void sgemm_transpose8x8(const float *src, size_t lds, float *dst, size_t ldd) {
    __m256 v[8];
    for (int r = 0; r < 8; r++) v[r] = _mm256_loadu_ps(src + r * lds);
    sgemm_transpose8x8_regs(v);
    for (int r = 0; r < 8; r++) _mm256_storeu_ps(dst + r * ldd, v[r]);
}
#endif

// Pack the mc x kc block of A' whose top-left is A'(0,0) (A already offset) into MR-tall
// micro-panels: panel p holds rows p*MR.. as kc consecutive groups of MR values, zero-padded.
SGEMM_FN void sgemm_pack_a(int trans_a, const float *A, int lda, int mc, int kc, float *dst) {
    int mfull = mc / SGEMM_MR * SGEMM_MR;
    if (trans_a) {
        // A'(i,k) = A[k*lda + i]: walk each row of A once, scattering MR-long pieces
        for (int k = 0; k < kc; k++) {
            const float *s = A + (size_t)k * lda;
            float *dk = dst + (size_t)k * SGEMM_MR;
            for (int p = 0; p < mfull; p += SGEMM_MR)
                memcpy(dk + (size_t)p * kc, s + p, SGEMM_MR * sizeof(float));
            if (mfull < mc) {
                float *e = dk + (size_t)mfull * kc;
                int r = 0;
                for (; r < mc - mfull; r++) e[r] = s[mfull + r];
                for (; r < SGEMM_MR; r++) e[r] = 0.0f;
            }
        }
        return;
    }
    // A'(i,k) = A[i*lda + k]: MR row streams interleaved
    for (int p = 0; p < mc; p += SGEMM_MR) {
        int mr = mc - p < SGEMM_MR ? mc - p : SGEMM_MR;
        float *d = dst + (size_t)p * kc;
        const float *rows[SGEMM_MR];
        for (int r = 0; r < mr; r++) rows[r] = A + (size_t)(p + r) * lda;
        if (mr == SGEMM_MR) {
            int k = 0;
#if defined(__AVX2__)
            // 8 k at a time: transpose groups of up to 8 rows (missing rows read as zero)
            for (; k + 8 <= kc; k += 8) {
                for (int r0 = 0; r0 < SGEMM_MR; r0 += 8) {
                    int nr = SGEMM_MR - r0 < 8 ? SGEMM_MR - r0 : 8;
                    __m256 v[8];
                    for (int r = 0; r < 8; r++)
                        v[r] = r < nr ? _mm256_loadu_ps(rows[r0 + r] + k) : _mm256_setzero_ps();
                    sgemm_transpose8x8_regs(v);
                    for (int t = 0; t < 8; t++) {
                        float *o = d + (size_t)(k + t) * SGEMM_MR + r0;
                        if (nr == 8) {
                            _mm256_storeu_ps(o, v[t]);
                        } else {  // 4 or 6 rows (MR = 12 or 6)
                            _mm_storeu_ps(o, _mm256_castps256_ps128(v[t]));
                            if (nr == 6) _mm_storel_pi((__m64 *)(o + 4), _mm256_extractf128_ps(v[t], 1));
                        }
                    }
                }
            }
#endif
            for (; k < kc; k++)
                for (int r = 0; r < SGEMM_MR; r++) d[(size_t)k * SGEMM_MR + r] = rows[r][k];
        } else {
            for (int k = 0; k < kc; k++)
                for (int r = 0; r < SGEMM_MR; r++) d[(size_t)k * SGEMM_MR + r] = r < mr ? rows[r][k] : 0.0f;
        }
    }
}

// B'(k,j) = B[k*ldb + j]: walk each row of B once, scattering NR-wide pieces to the panels
// (walking a panel down its rows instead strides through B and thrashes L1 sets).
static inline void sgemm_pack_b_rows(const float *B, int ldb, int kc, int nc, float *dst) {
    int nfull = nc / SGEMM_NR * SGEMM_NR;
    for (int k = 0; k < kc; k++) {
        const float *s = B + (size_t)k * ldb;
        float *dk = dst + (size_t)k * SGEMM_NR;
        for (int q = 0; q < nfull; q += SGEMM_NR)
            memcpy(dk + (size_t)q * kc, s + q, SGEMM_NR * sizeof(float));
        if (nfull < nc) {
            float *e = dk + (size_t)nfull * kc;
            int j = 0;
            for (; j < nc - nfull; j++) e[j] = s[nfull + j];
            for (; j < SGEMM_NR; j++) e[j] = 0.0f;
        }
    }
}

// Pack the kc x nc block of B' (B already offset to B'(0,0)) into NR-wide micro-panels:
// panel q holds columns q*NR.. as kc consecutive rows of NR values, zero-padded.
SGEMM_FN void sgemm_pack_b(int trans_b, const float *B, int ldb, int kc, int nc, float *dst) {
    if (!trans_b) { sgemm_pack_b_rows(B, ldb, kc, nc, dst); return; }
    for (int q = 0; q < nc; q += SGEMM_NR) {
        int nr = nc - q < SGEMM_NR ? nc - q : SGEMM_NR;
        float *d = dst + (size_t)q * kc;
        {
            // B'(k,j) = B[j*ldb + k]: a transpose of NR rows of B
            const float *s = B + (size_t)q * ldb;
            int k = 0;
#if defined(__AVX2__)
            if (nr == SGEMM_NR) {
                for (; k + 8 <= kc; k += 8)
                    for (int g = 0; g < SGEMM_NR; g += 8)
                        sgemm_transpose8x8(s + (size_t)g * ldb + k, (size_t)ldb,
                                           d + (size_t)k * SGEMM_NR + g, SGEMM_NR);
            }
#endif
            for (; k < kc; k++) {
                float *dk = d + (size_t)k * SGEMM_NR;
                int j = 0;
                for (; j < nr; j++) dk[j] = s[(size_t)j * ldb + k];
                for (; j < SGEMM_NR; j++) dk[j] = 0.0f;
            }
        }
    }
}

// Split n into nblocks balanced blocks, each a multiple of 'mult' (but the last), at most
// about 'cap': returns the nominal block size.
static inline int sgemm_block_size(int n, int cap, int mult) {
    if (n <= cap) return n;
    int nblocks = (n + cap - 1) / cap;
    int b = (n + nblocks - 1) / nblocks;
    b = (b + mult - 1) / mult * mult;
    return b;
}

// Single-thread blocked product on an (already offset) sub-problem, with beta in {0, 1}.
// bufa holds SGEMM_ABUF_FLOATS floats, bufb SGEMM_BBUF_FLOATS (64-byte aligned).
SGEMM_FN void sgemm_serial(int trans_a, int trans_b, int M, int N, int K, const float *A,
                           int lda, const float *B, int ldb, int add_c, float *C, int ldc,
                           float *bufa, float *bufb) {
    int kcb = sgemm_block_size(K, SGEMM_KC, 8);
    int mcb = sgemm_block_size(M, SGEMM_MC, SGEMM_MR);
    int ncb = sgemm_block_size(N, SGEMM_NC, SGEMM_NR);
    for (int jc = 0; jc < N; jc += ncb) {
        int nc = N - jc < ncb ? N - jc : ncb;
        for (int pc = 0; pc < K; pc += kcb) {
            int kc = K - pc < kcb ? K - pc : kcb;
            const float *Bblk = trans_b ? B + (size_t)jc * ldb + pc : B + (size_t)pc * ldb + jc;
            sgemm_pack_b(trans_b, Bblk, ldb, kc, nc, bufb);
            int add = add_c || pc > 0;
            for (int ic = 0; ic < M; ic += mcb) {
                int mc = M - ic < mcb ? M - ic : mcb;
                const float *Ablk = trans_a ? A + (size_t)pc * lda + ic : A + (size_t)ic * lda + pc;
                sgemm_pack_a(trans_a, Ablk, lda, mc, kc, bufa);
                for (int jr = 0; jr < nc; jr += SGEMM_NR) {
                    int nr = nc - jr < SGEMM_NR ? nc - jr : SGEMM_NR;
                    const float *bp = bufb + (size_t)jr * kc;
                    for (int ir = 0; ir < mc; ir += SGEMM_MR) {
                        int mr = mc - ir < SGEMM_MR ? mc - ir : SGEMM_MR;
                        sgemm_ukernel(kc, bufa + (size_t)ir * kc, bp,
                                      C + (size_t)(ic + ir) * ldc + jc + jr, ldc, add, mr, nr);
                    }
                }
            }
        }
    }
}

// Packing-buffer cache, one slot per OpenMP thread number. A slot holds the packed A block
// (at most roundup(MC,MR) x roundup(KC,8) floats) followed by the packed B panel (at most
// roundup(NC,NR) x roundup(KC,8) floats); sgemm_block_size never exceeds these bounds.
#define SGEMM_MAX_SLOTS 256
#define SGEMM_KC_MAX ((SGEMM_KC + 7) / 8 * 8)
#define SGEMM_ABUF_FLOATS \
    (((size_t)((SGEMM_MC + SGEMM_MR - 1) / SGEMM_MR * SGEMM_MR) * SGEMM_KC_MAX + 15) / 16 * 16)
#define SGEMM_BBUF_FLOATS ((size_t)((SGEMM_NC + SGEMM_NR - 1) / SGEMM_NR * SGEMM_NR) * SGEMM_KC_MAX)
static float *sgemm_buf_[SGEMM_MAX_SLOTS];

static inline float *sgemm_alloc_buf(void) {
    size_t bytes = (SGEMM_ABUF_FLOATS + SGEMM_BBUF_FLOATS) * sizeof(float);
    bytes = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, bytes);
    if (!p) fatal("out of host memory allocating %zu bytes of sgemm packing buffer", bytes);
    return (float *)p;
}

// Slot's buffer (slot < 0 or past the cache: a fresh one that the caller frees).
static inline float *sgemm_get_buf(int slot) {
    if (slot < 0 || slot >= SGEMM_MAX_SLOTS) return sgemm_alloc_buf();
    if (!sgemm_buf_[slot]) sgemm_buf_[slot] = sgemm_alloc_buf();
    return sgemm_buf_[slot];
}

// Free the cached packing buffers (call outside any parallel region, e.g. at exit).
SGEMM_FN void sgemm_release_buffers(void) {
    for (int i = 0; i < SGEMM_MAX_SLOTS; i++) {
        free(sgemm_buf_[i]);
        sgemm_buf_[i] = NULL;
    }
}

// Run one thread's rectangle of the pm x pn grid (rows/cols split in whole micro-tiles).
SGEMM_FN void sgemm_part(int part, int pm, int pn, int slot, int trans_a, int trans_b, int M,
                         int N, int K, const float *A, int lda, const float *B, int ldb, int add_c,
                         float *C, int ldc) {
    int pi = part / pn, pj = part % pn;
    long mt = (M + SGEMM_MR - 1) / SGEMM_MR, nt = (N + SGEMM_NR - 1) / SGEMM_NR;
    int i0 = (int)(mt * pi / pm) * SGEMM_MR, i1 = (int)(mt * (pi + 1) / pm) * SGEMM_MR;
    int j0 = (int)(nt * pj / pn) * SGEMM_NR, j1 = (int)(nt * (pj + 1) / pn) * SGEMM_NR;
    if (i1 > M) i1 = M;
    if (j1 > N) j1 = N;
    if (i0 >= i1 || j0 >= j1) return;
    float *buf = sgemm_get_buf(slot);
    const float *Ap = trans_a ? A + i0 : A + (size_t)i0 * lda;
    const float *Bp = trans_b ? B + (size_t)j0 * ldb : B + j0;
    sgemm_serial(trans_a, trans_b, i1 - i0, j1 - j0, K, Ap, lda, Bp, ldb, add_c,
                 C + (size_t)i0 * ldc + j0, ldc, buf, buf + SGEMM_ABUF_FLOATS);
    if (slot < 0 || slot >= SGEMM_MAX_SLOTS) free(buf);
}

// Choose the pm x pn thread grid (pm*pn = nt) that minimises the packing repeated across
// threads (pn copies of A', pm copies of B'), without splitting a dimension finer than its
// micro-tiles.
static inline void sgemm_grid(int nt, int M, int N, int *pm_out, int *pn_out) {
    long mt = (M + SGEMM_MR - 1) / SGEMM_MR, ntl = (N + SGEMM_NR - 1) / SGEMM_NR;
    int best_pm = 1, best_pn = 1;
    double best = -1.0;
    for (int pm = 1; pm <= nt; pm++) {
        if (nt % pm) continue;
        int pn = nt / pm;
        if (pm > mt || pn > ntl) continue;
        double cost = (double)pn * M + (double)pm * N;
        if (best < 0 || cost < best) { best = cost; best_pm = pm; best_pn = pn; }
    }
    if (best < 0) {  // too few tiles for every factorisation: use fewer threads along one dim
        if (mt >= ntl) { best_pm = (int)(mt < nt ? mt : nt); best_pn = 1; }
        else { best_pm = 1; best_pn = (int)(ntl < nt ? ntl : nt); }
    }
    *pm_out = best_pm;
    *pn_out = best_pn;
}

SGEMM_FN void sgemm(int trans_a, int trans_b, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { sgemm_scale_c(M, N, beta, C, ldc); return; }
    if (beta != 0.0f && beta != 1.0f) sgemm_scale_c(M, N, beta, C, ldc);
    int add_c = beta != 0.0f;  // beta == 0: the first K slice overwrites C without reading it
    int nt = 1, nested = 0;
#ifdef _OPENMP
    nested = omp_in_parallel();
    if (!nested) nt = omp_get_max_threads();
#endif
    if (2.0 * M * N * K < 2e6) nt = 1;  // a fork costs more than the work
    if (nt <= 1) {
        sgemm_part(0, 1, 1, nested ? -1 : 0, trans_a, trans_b, M, N, K, A, lda, B, ldb, add_c, C, ldc);
        return;
    }
    int pm, pn;
    sgemm_grid(nt, M, N, &pm, &pn);
    // Big products: cut the split dimension into up to 4 chunks per thread (each at least
    // SGEMM_CHUNK_MIN wide) handed out dynamically, so a thread slowed by another process
    // on its core does not hold the others up. The chunking never changes the results.
    long tiles = pn >= pm ? (N + SGEMM_NR - 1) / SGEMM_NR : (M + SGEMM_MR - 1) / SGEMM_MR;
    int tile = pn >= pm ? SGEMM_NR : SGEMM_MR;
    int split = pn >= pm ? pn : pm;
    long refine = tiles * tile / ((long)split * SGEMM_CHUNK_MIN);
    if (refine > 4) refine = 4;
    if (refine > 1) {
        if (pn >= pm) pn *= (int)refine; else pm *= (int)refine;
    }
    int nparts = pm * pn;
    SGEMM_PRAGMA(omp parallel for schedule(dynamic, 1) num_threads(nt))
    for (int part = 0; part < nparts; part++) {
        int slot = 0;
#ifdef _OPENMP
        slot = omp_get_thread_num();
#endif
        sgemm_part(part, pm, pn, slot, trans_a, trans_b, M, N, K, A, lda, B, ldb, add_c, C, ldc);
    }
}
#endif  // USE_CBLAS

// ------------------------------------------------------------------------------------------
// Linear-layer wrappers
// ------------------------------------------------------------------------------------------

// out (N, OC) = inp (N, C) . weight(OC, C)^T + bias(OC)
SGEMM_FN void matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                             int N, int C, int OC) {
    sgemm(0, 1, N, OC, C, inp, C, weight, C, 0.0f, out, OC);
    if (bias) {
        SGEMM_PRAGMA(omp parallel for schedule(static) if ((long)N * OC > 65536))
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
            for (int j = 0; j < OC; j++) o[j] += bias[j];
        }
    }
}

// dinp (N, C) += dout (N, OC) . weight (OC, C); dweight (OC, C) += dout^T . inp (N, C);
// dbias (OC) += sum over rows of dout. NULL outputs are skipped.
SGEMM_FN void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, int N, int C, int OC) {
    if (dinp) sgemm(0, 0, N, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
    if (dweight) sgemm(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) {
        // columns in chunks of 64, each chunk summed over rows in order: deterministic
        int nchunks = (OC + 63) / 64;
        SGEMM_PRAGMA(omp parallel for schedule(static) if ((long)N * OC > 65536))
        for (int ch = 0; ch < nchunks; ch++) {
            int j0 = ch * 64, w = OC - j0 < 64 ? OC - j0 : 64;
            float acc[64];
            for (int j = 0; j < w; j++) acc[j] = 0.0f;
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC + j0;
                for (int j = 0; j < w; j++) acc[j] += d[j];
            }
            for (int j = 0; j < w; j++) dbias[j0 + j] += acc[j];
        }
    }
}

#endif  // COMMON_SGEMM_H
