// kernels/attention_sm90.cuh: flash attention on Hopper's warpgroup matrix instructions
// (wgmma, sm_90a), head sizes 64 and 128; included by attention.cuh, whose launchers pick
// these kernels on a GPU of compute capability 9.0 when the build includes sm_90a
// (FLASH_WGMMA=1: the Makefile's GPU_ARCH=90a, and all); flash_wgmma_runs_here at the end
// says which.
//
// The same algorithm as attention_mma.cuh's mma.sync kernels (FlashAttention-2: online softmax
// forward keeping the log-sum-exp, backward recomputing P), with each matrix product issued
// by a warpgroup of 4 warps as one wgmma over 64 rows instead of per-warp 16-row mma.sync:
// the operands come straight from shared memory (the dk/dv kernel keeps K and V rows in
// registers at head size 64, read once with ldmatrix), the accumulators stay in registers,
// and P / dS feed the next product from registers. Kernels: the backward as dq
// (bwd_dq_kernel) and dk, dv (bwd_dkdv_kernel), deterministic, both software-pipelined within
// the warpgroup (FlashAttention-3's intra-warpgroup overlap): the next block's scores are
// issued before the softmax of this one, so that one waits for the other's products only.
// attention_sm90_ws.cuh builds warp-specialised kernels on these helpers: its forward is the
// default at both head sizes and its dk/dv kernel at 64 (with this file's dq kernel below
// T = 4096); this file's kernels serve head size 128's backward. The forwards built on these
// helpers alone (fwd_kernel; fwd_pipe_kernel, pipelined as the backward) lost to the
// warp-specialised one and are the tests' variants now: dev/test/attention_variants.cuh.
// Tile shapes and what was measured: docs/performance-notes.md.
//
// wgmma under a branch: ptxas serialises every wgmma of a kernel (waits after each) where a
// product is issued under a condition it cannot prove uniform over the warpgroup, or where
// commit groups differ between paths. So the warpgroup's index is read through a shuffle
// (warpgroup_index) and the pipelined loops issue the same products on every path (a
// warpgroup walks its block's key blocks past its own last row, all masked). Build with
// -Xptxas -v and look for "Potential Performance Loss" (C7514, C7520, C7512) after a change.
//
// Shared-memory tiles: a tile is ROWS x 64 bf16/fp16, 128 bytes a row, the 16-byte chunk c of
// row r stored at chunk c ^ (r & 7): attention_mma.cuh's load_tile layout. With the tile at a
// 1024-byte-aligned address this is exactly wgmma's 128-byte-swizzle canonical layout, in
// both readings the kernels need:
//   K-major (the product's k index runs along the row): X Y^T with X, Y row-major [n][64]
//   MN-major (k runs down the rows): X Y with Y row-major [k][64] (transpose flag set)
// A k16 step advances the start address by 32 bytes (K-major) or by 16 rows (MN-major);
// groups of 8 rows are 1024 bytes apart (the descriptor's stride byte offset).
//
// Accumulator layout of a m64nN wgmma (fp32), thread t of the warpgroup, warp w = t / 32,
// g = lane / 4, q = lane % 4: d[4j + e] is row 16w + g + 8(e >> 1), column 8j + 2q + (e & 1),
// the mma.sync m16n8 layout per warp; packed to 16-bit pairs it is the A operand layout of
// the next wgmma (as in the mma.sync kernels).
#pragma once
#include <type_traits>
#include "attention_mma.cuh"  // (load_tile's tiles, the fragment loads, bwd_dot)

#ifndef FLASH_WGMMA
#define FLASH_WGMMA 0
#endif
// The wgmma instructions exist in the sm_90a device pass only. A build for several GPUs
// (GPU_ARCH=all) compiles this file in the sm_80, sm_86 and sm_89 passes too: there the
// helpers are left out and the kernels are empty (a trap, never launched: the launchers ask
// flash_wgmma_runs_here). The host pass sees everything, as the launchers need.
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FLASH90_DEVICE_CODE 1
#else
#define FLASH90_DEVICE_CODE 0
#endif

#if FLASH_WGMMA && PRECISION != PRECISION_FP32

namespace flash90 {

using flash::fast_exp2;
using flash::load_tile;
using flash::pack2;

constexpr int HS = 64;  // head size of these kernels: a tile row is 128 bytes, one swizzle span
// dynamic shared memory rounded up to 1024 bytes (the swizzle's period, smem_base); launchers
// ask for SMEM_SLACK bytes more than the tiles need
constexpr int SMEM_SLACK = 1024;

#if PRECISION == PRECISION_BF16
#define WG_TYPES ".f32.bf16.bf16"
#else
#define WG_TYPES ".f32.f16.f16"
#endif

#if FLASH90_DEVICE_CODE
// shared-memory matrix descriptor: start address, leading byte offset 16 (unused by these
// layouts), stride byte offset 1024 (8 rows of 128 bytes), 128-byte swizzle
__device__ __forceinline__ uint64_t desc(const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
// descriptor of a tile's k16 step kk: K-major (along the row) or MN-major (down the rows)
__device__ __forceinline__ uint64_t desc_k(const floatX *tile, int kk) { return desc(tile + kk * 16); }
__device__ __forceinline__ uint64_t desc_mn(const floatX *tile, int kk) { return desc(tile + kk * 16 * HS); }

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// wait until every wgmma group this warpgroup committed is done (wg_wait_n: all but the N
// most recent; groups complete in the order they were committed)
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait_n() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// after wg_wait: keeps the compiler from reading accumulators before the wait
template <int N>
__device__ __forceinline__ void wg_fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// shared memory written through the generic proxy (cp.async) and next read by wgmma
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define WG_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_F32(i) \
    WG_F4(i), WG_F4(i + 4), WG_F4(i + 8), WG_F4(i + 12), WG_F4(i + 16), WG_F4(i + 20), WG_F4(i + 24), WG_F4(i + 28)
#define WG_R32                                                                                                       \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_R64                                                                                                       \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, "  \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d (64 x N) (+)= A (64 x 16, shared, K-major) B (16 x N, shared, K-major); accumulate 0: d = A B
template <int N>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate);
template <>
__device__ __forceinline__ void mma_ss<64>(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16" WG_TYPES " " WG_R32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : WG_F32(0)
                 : "l"(da), "l"(db), "r"(accumulate));
}
template <>
__device__ __forceinline__ void mma_ss<128>(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16" WG_TYPES " " WG_R64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_F32(0), WG_F32(32)
                 : "l"(da), "l"(db), "r"(accumulate));
}
// d (64 x 64) (+)= A (64 x 16, registers: 4 packed pairs) B (16 x 64, shared; TB: 0 K-major,
// 1 MN-major). Registers for A halve the shared-memory reads: at n64 an all-shared wgmma reads
// 4 KB per 32 tensor-core clocks, the SM's whole 128 bytes a clock.
template <int TB>
__device__ __forceinline__ void mma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16" WG_TYPES " " WG_R32
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : WG_F32(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));
}
__device__ __forceinline__ void mma_rs_mn(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    mma_rs<1>(d, a, db, 1);
}
#undef WG_F4
#undef WG_F32
#undef WG_R32
#undef WG_R64

// the A operands (4 k16 steps) of this warp's 16 rows of a 64-row tile, from shared memory
__device__ __forceinline__ void tile_to_a(uint32_t (&a)[4][4], const floatX *tile, int w, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) flash::ldsm_A<HS>(a[kk], tile, w * 16, kk * 16, lane);
}
// the A operand of k16 step kk from a 64 x N accumulator (columns 16kk .. 16kk + 15)
template <int N>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&d)[N], int kk) {
    a[0] = pack2(d[8 * kk + 0], d[8 * kk + 1]);
    a[1] = pack2(d[8 * kk + 2], d[8 * kk + 3]);
    a[2] = pack2(d[8 * kk + 4], d[8 * kk + 5]);
    a[3] = pack2(d[8 * kk + 6], d[8 * kk + 7]);
}
template <int N>
__device__ __forceinline__ void zero(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) d[i] = 0.0f;
}
// this thread's warpgroup, read from lane 0 so that the compiler knows it is the same in every
// lane: branches on it are then not divergent, and wgmma after them need not be serialised
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0); }
// the dynamic shared memory from its first 1024-byte boundary on
__device__ __forceinline__ floatX *smem_base() {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    uint32_t a = (uint32_t)__cvta_generic_to_shared(smem_raw);
    return reinterpret_cast<floatX *>(smem_raw + ((1024 - (a & 1023)) & 1023));
}

// ---------------------------------------------------------------------------------------
// forward helpers. s: the 64 x BN scores of keys k0.. for this thread's rows row_lo, row_lo + 8
// (wg0: the first row of this warpgroup); -inf where key > row. The early return is decided per
// warpgroup, never per warp: see the dq kernel on branches before a wgmma.
template <int BN>
__device__ __forceinline__ void mask_causal(float (&s)[BN / 2], int k0, int wg0, int row_lo, int tq) {
    if (k0 + BN - 1 <= wg0) return;  // the diagonal does not cross this warpgroup's rows
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        if (k0 + 8 * (i >> 2) + 2 * tq + (i & 1) > row_lo + 8 * ((i >> 1) & 1)) s[i] = -INFINITY;
}
// online softmax over one key block: the row maxima mrow (log2 units) and sums lrow move on,
// s becomes P = 2^(s * scale_log2 - mrow), alpha the factor the earlier O rows take
template <int BN>
__device__ __forceinline__ void online_softmax(float (&s)[BN / 2], float (&mrow)[2], float (&lrow)[2],
                                               float (&alpha)[2], float scale_log2) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < BN / 2; i++) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        // finite from block 0 on (key 0 is in it, and no row is before key 0)
        float mnew = fmaxf(mrow[r], mx[r] * scale_log2);
        alpha[r] = fast_exp2(mrow[r] - mnew);
        mrow[r] = mnew;
        lrow[r] *= alpha[r];
    }
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        float p = fast_exp2(s[i] * scale_log2 - mrow[(i >> 1) & 1]);
        s[i] = p;
        lrow[(i >> 1) & 1] += p;
    }
}
// out rows row_lo, row_lo + 8 of head h = O / l (O: HSZ / 64 halves), and their log-sum-exp
// (natural log)
template <int HSZ>
__device__ __forceinline__ void write_out(floatX *out, float *lse, const float (&o)[HSZ / 64][32],
                                             const float (&mrow)[2], const float (&lrow)[2], int b, int h, int bh,
                                             int row_lo, int tq, int T, int C) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = row_lo + 8 * r;
        if (row < T) {
            float inv = 1.0f / l;
            floatX *op = out + ((size_t)b * T + row) * C + h * HSZ + 2 * tq;
#pragma unroll
            for (int hf = 0; hf < HSZ / 64; hf++)
#pragma unroll
                for (int j = 0; j < HS / 8; j++)
                    *reinterpret_cast<uint32_t *>(op + 64 * hf + 8 * j) =
                        pack2(o[hf][4 * j + 2 * r] * inv, o[hf][4 * j + 2 * r + 1] * inv);
            if (tq == 0) lse[(size_t)bh * T + row] = (mrow[r] + log2f(l)) * 0.69314718055994531f;
        }
    }
}

#endif  // FLASH90_DEVICE_CODE

// ---------------------------------------------------------------------------------------
// tiles of head size 128: two 64-column halves, each a ROWS x 64 tile of the layout above
// (half j at s + j * ROWS * 64), so that every wgmma operand stays one 128-byte swizzle span
// wide. HSZ = 64: one half, load_tile's layout.
#if FLASH90_DEVICE_CODE
template <int ROWS, int HSZ, int NT>
__device__ __forceinline__ void load_halves(floatX *s, const floatX *g, int row0, int stride, int T) {
    if constexpr (HSZ == 64) {
        load_tile<ROWS, HS, NT>(s, g, row0, stride, T);
    } else {
        static_assert(HSZ == 128, "load_halves: head size 64 or 128");
        load_tile<ROWS, HS, NT>(s, g, row0, stride, T);
        load_tile<ROWS, HS, NT>(s + ROWS * HS, g + HS, row0, stride, T);
    }
}
#endif

// ---------------------------------------------------------------------------------------
// the dq kernels' pieces. dq_rows: this thread's rows' log-sum-exp (log2 units) and D;
// form_ds: dS = P (dP - D) of the key block at k0 into s (masked where the diagonal may
// cross this warpgroup's rows, wq0 its first); write_dq: dq (times scale) into dqkv
#if FLASH90_DEVICE_CODE
__device__ __forceinline__ void dq_rows(float (&lrow)[2], float (&drow)[2], const float *lse, const float *D, int bh,
                                        int row_lo, int T) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_lo + 8 * r;
        lrow[r] = row < T ? lse[(size_t)bh * T + row] * 1.4426950408889634f : 0.0f;
        drow[r] = row < T ? D[(size_t)bh * T + row] : 0.0f;
    }
}
__device__ __forceinline__ void form_ds(float (&s)[32], const float (&dp)[32], const float (&lrow)[2],
                                        const float (&drow)[2], int k0, int wq0, int row_lo, int tq,
                                        float scale_log2) {
    const bool masked = k0 + 63 > wq0;
#pragma unroll
    for (int i = 0; i < 32; i++) {
        const int r = (i >> 1) & 1;
        float p = fast_exp2(s[i] * scale_log2 - lrow[r]);
        if (masked && k0 + 8 * (i >> 2) + 2 * tq + (i & 1) > row_lo + 8 * r) p = 0.0f;
        s[i] = p * (dp[i] - drow[r]);
    }
}
template <int HSZ>
__device__ __forceinline__ void write_dq(floatX *dqkv, const float (&dq)[HSZ / 64][32], int b, int h, int row_lo,
                                         int tq, int T, int C, float scale) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row_lo + 8 * r;
        if (row < T) {
            floatX *p = dqkv + ((size_t)b * T + row) * 3 * C + h * HSZ + 2 * tq;
#pragma unroll
            for (int hf = 0; hf < HSZ / 64; hf++)
#pragma unroll
                for (int j = 0; j < HS / 8; j++)
                    *reinterpret_cast<uint32_t *>(p + 64 * hf + 8 * j) =
                        pack2(dq[hf][4 * j + 2 * r] * scale, dq[hf][4 * j + 2 * r + 1] * scale);
        }
    }
}
#endif

// ---------------------------------------------------------------------------------------
// backward, dq (deterministic), software-pipelined: one block = NWG
// warpgroups x 64 query rows, walking the key blocks of 64 up to the diagonal in order.
// Step n issues S_n = Q K_n^T and dP_n = dO V_n^T, then dQ += dS_{n-1} K_{n-1}; waits for
// the first two alone and forms dS_n while the dQ product runs. K is triple-buffered
// (K_{n-1} and K_n are read in step n while K_{n+1} loads), V double-buffered. Head size
// HSZ 64 or 128 (tiles in halves).
template <int HSZ, int NWG, int MINB>
__global__ void __launch_bounds__(NWG * 128, MINB) bwd_dq_kernel(floatX *dqkv, const floatX *dout, const floatX *qkv,
                                                                const float *lse, const float *D, int T, int NH,
                                                                float scale_log2, float scale) {
#if FLASH90_DEVICE_CODE
    constexpr int BM = 64 * NWG, BN = 64, NT = NWG * 128, NH_ = HSZ / 64;
    floatX *sQ = smem_base();
    floatX *sO = sQ + BM * HSZ;      // dout
    floatX *sK = sO + BM * HSZ;      // 3 buffers
    floatX *sV = sK + 3 * BN * HSZ;  // 2 buffers
    const int tid = threadIdx.x, wg = warpgroup_index(), w = (tid / 32) % 4, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int mb = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HSZ;
    const floatX *qb = qkv + (size_t)b * T * 3 * C + h * HSZ, *kb = qb + C, *vb = qb + 2 * C;
    const floatX *ob = dout + (size_t)b * T * C + h * HSZ;
    const int q0 = mb * BM, wq0 = q0 + wg * 64, row_lo = wq0 + w * 16 + g;
    const int nblocks = min((q0 + BM + BN - 1) / BN, (T + BN - 1) / BN);

    load_halves<BM, HSZ, NT>(sQ, qb, q0, 3 * C, T);
    load_halves<BM, HSZ, NT>(sO, ob, q0, C, T);
    load_halves<BN, HSZ, NT>(sK, kb, 0, 3 * C, T);
    load_halves<BN, HSZ, NT>(sV, vb, 0, 3 * C, T);
    cp_async_commit();
    float lrow[2], drow[2];
    dq_rows(lrow, drow, lse, D, bh, row_lo, T);
    float dq[NH_][32], s[32], dp[32];
    uint32_t da[4][4];
#pragma unroll
    for (int hf = 0; hf < NH_; hf++) zero(dq[hf]);
    const floatX *myQ = sQ + wg * 64 * HS, *myO = sO + wg * 64 * HS;  // (within each half)
    // step n: K_n, V_n landed; every warpgroup is done with K_{n-2}, V_{n-1}; K_{n+1}, V_{n+1} start
    auto step_sync = [&](int n) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (n + 1 < nblocks) {
            load_halves<BN, HSZ, NT>(sK + ((n + 1) % 3) * BN * HSZ, kb, (n + 1) * BN, 3 * C, T);
            load_halves<BN, HSZ, NT>(sV + ((n + 1) & 1) * BN * HSZ, vb, (n + 1) * BN, 3 * C, T);
            cp_async_commit();
        }
    };
    auto issue_sdp = [&](int n) {
        const floatX *cK = sK + (n % 3) * BN * HSZ, *cV = sV + (n & 1) * BN * HSZ;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < HSZ / 16; kk++)
            mma_ss<64>(s, desc_k(myQ + (kk / 4) * BM * HS, kk % 4), desc_k(cK + (kk / 4) * BN * HS, kk % 4), kk);
#pragma unroll
        for (int kk = 0; kk < HSZ / 16; kk++)
            mma_ss<64>(dp, desc_k(myO + (kk / 4) * BM * HS, kk % 4), desc_k(cV + (kk / 4) * BN * HS, kk % 4), kk);
        wg_commit();
    };
    auto issue_dq = [&](int n) {  // dQ += dS_n K_n
        const floatX *cK = sK + (n % 3) * BN * HSZ;
        wg_fence();
#pragma unroll
        for (int hf = 0; hf < NH_; hf++)
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) mma_rs_mn(dq[hf], da[kk], desc_mn(cK + hf * BN * HS, kk));
        wg_commit();
    };
    // dS_n = P (dP - D) into s; the causal mask only in blocks the diagonal crosses
    auto form_ds_n = [&](int n) { form_ds(s, dp, lrow, drow, n * BN, wq0, row_lo, tq, scale_log2); };
    // every warpgroup walks every key block (see wgmma under a branch, this file's header)
    step_sync(0);
    issue_sdp(0);
    wg_wait();
    wg_fence_regs(s);
    wg_fence_regs(dp);
    form_ds_n(0);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) acc_to_a(da[kk], s, kk);
    for (int n = 1; n < nblocks; n++) {
        step_sync(n);
        issue_sdp(n);
        issue_dq(n - 1);
        wg_wait_n<1>();
        wg_fence_regs(s);
        wg_fence_regs(dp);
        form_ds_n(n);
        wg_wait();
#pragma unroll
        for (int hf = 0; hf < NH_; hf++) wg_fence_regs(dq[hf]);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) acc_to_a(da[kk], s, kk);
    }
    issue_dq(nblocks - 1);
    wg_wait();
#pragma unroll
    for (int hf = 0; hf < NH_; hf++) wg_fence_regs(dq[hf]);
    write_dq<HSZ>(dqkv, dq, b, h, row_lo, tq, T, C, scale);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------
// the log-sum-exp and D of query rows q0 .. q0 + BM - 1 into shared memory, one 4-byte
// cp.async per thread of the first 2 BM, in the caller's commit group; rows >= T read as 0
// (their Q and dO rows are zero-filled, so they add nothing to dK or dV)
#if FLASH90_DEVICE_CODE
template <int BM>
__device__ __forceinline__ void load_rows_ld(float *sL, float *sD, const float *lb, const float *db, int q0, int T) {
    const int t = threadIdx.x, i = t % BM;
    if (t < 2 * BM) {
        const bool ok = q0 + i < T;
        cp_async4((t < BM ? sL : sD) + i, (t < BM ? lb : db) + (ok ? q0 + i : 0), ok);
    }
}
#endif

// ---------------------------------------------------------------------------------------
// the dk/dv kernels' step, transposed (keys as rows): P^T (into st) and dS^T = P^T (dP^T - D)
// (into dpt) of query block q0, for this thread's keys key_lo, key_lo + 8; cL, cD the block's
// log-sum-exp and D; need_mask where the diagonal may cross this warp's keys
#if FLASH90_DEVICE_CODE
__device__ __forceinline__ void form_pt_dst(float (&st)[32], float (&dpt)[32], const float *cL, const float *cD,
                                            int q0, int key_lo, int tq, bool need_mask, float scale_log2) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float2 l2 = *reinterpret_cast<const float2 *>(cL + 8 * j + 2 * tq);
        const float2 d2 = *reinterpret_cast<const float2 *>(cD + 8 * j + 2 * tq);
        const float lq[2] = {l2.x * 1.4426950408889634f, l2.y * 1.4426950408889634f}, dq_[2] = {d2.x, d2.y};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int idx = 4 * j + e, c = e & 1;
            float p = fast_exp2(st[idx] * scale_log2 - lq[c]);
            if (need_mask && key_lo + 8 * (e >> 1) > q0 + 8 * j + 2 * tq + c) p = 0.0f;
            st[idx] = p;
            dpt[idx] = p * (dpt[idx] - dq_[c]);
        }
    }
}
// dk (times scale) and dv of this thread's keys key_lo, key_lo + 8 into dqkv
template <int HSZ>
__device__ __forceinline__ void write_dkdv(floatX *dqkv, const float (&dk)[HSZ / 64][32],
                                           const float (&dv)[HSZ / 64][32], int b, int h, int key_lo, int tq,
                                           int T, int C, float scale) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int key = key_lo + 8 * r;
        if (key < T) {
            floatX *p = dqkv + ((size_t)b * T + key) * 3 * C + C + h * HSZ + 2 * tq;
#pragma unroll
            for (int hf = 0; hf < HSZ / 64; hf++)
#pragma unroll
                for (int j = 0; j < HS / 8; j++) {
                    *reinterpret_cast<uint32_t *>(p + 64 * hf + 8 * j) =
                        pack2(dk[hf][4 * j + 2 * r] * scale, dk[hf][4 * j + 2 * r + 1] * scale);
                    *reinterpret_cast<uint32_t *>(p + C + 64 * hf + 8 * j) =
                        pack2(dv[hf][4 * j + 2 * r], dv[hf][4 * j + 2 * r + 1]);
                }
        }
    }
}
#endif

// ---------------------------------------------------------------------------------------
// backward, dk and dv, software-pipelined as bwd_dq_kernel: one block = NWG warpgroups x 64
// keys of one head, walking the query blocks of 64 from the diagonal to the end in order.
// Computed transposed, keys as rows, so that P^T and dS^T are accumulators and feed
// dV += P^T dO and dK += dS^T Q from registers. Step m issues S^T_m and dP^T_m,
// then dV += P^T_{m-1} dO_{m-1} and dK += dS^T_{m-1} Q_{m-1}; waits for the first two alone and
// forms P^T_m and dS^T_m while the other two run. Q and dO are triple-buffered (block m - 1's
// and m's are read in step m while m + 1's load); the log-sum-exp and D double-buffered.
// Head size HSZ 64 or 128 (tiles in halves); at 128, K and V stay in shared memory (as
// register A operands they would need 64 more registers than a thread has left).
template <int HSZ, int NWG, int MINB>
__global__ void __launch_bounds__(NWG * 128, MINB) bwd_dkdv_kernel(floatX *dqkv, const floatX *dout,
                                                                  const floatX *qkv, const float *lse, const float *D,
                                                                  int T, int NH, float scale_log2, float scale) {
#if FLASH90_DEVICE_CODE
    constexpr int BN = 64 * NWG, BM = 64, NT = NWG * 128, NH_ = HSZ / 64;
    constexpr bool KV_REGS = HSZ == 64;
    floatX *sK = smem_base();
    floatX *sV = sK + BN * HSZ;
    floatX *sQ = sV + BN * HSZ;                                // 3 buffers
    floatX *sO = sQ + 3 * BM * HSZ;                            // dout, 3 buffers
    float *sL = reinterpret_cast<float *>(sO + 3 * BM * HSZ);  // lse, 2 buffers
    float *sD = sL + 2 * BM;                                   // D, 2 buffers
    const int tid = threadIdx.x, wg = warpgroup_index(), w = (tid / 32) % 4, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int nb = blockIdx.x;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HSZ;
    const floatX *qb = qkv + (size_t)b * T * 3 * C + h * HSZ, *kb = qb + C, *vb = qb + 2 * C;
    const floatX *ob = dout + (size_t)b * T * C + h * HSZ;
    const float *lb = lse + (size_t)bh * T, *db = D + (size_t)bh * T;
    const int k0 = nb * BN, wk0 = k0 + wg * 64, key_lo = wk0 + w * 16 + g;
    const int mstart = k0 / BM, mend = (T + BM - 1) / BM;

    load_halves<BN, HSZ, NT>(sK, kb, k0, 3 * C, T);
    load_halves<BN, HSZ, NT>(sV, vb, k0, 3 * C, T);
    load_halves<BM, HSZ, NT>(sQ, qb, mstart * BM, 3 * C, T);
    load_halves<BM, HSZ, NT>(sO, ob, mstart * BM, C, T);
    load_rows_ld<BM>(sL, sD, lb, db, mstart * BM, T);
    cp_async_commit();
    float dk[NH_][32], dv[NH_][32], st[32], dpt[32];
    uint32_t pa[4][4], da[4][4];
#pragma unroll
    for (int hf = 0; hf < NH_; hf++) {
        zero(dk[hf]);
        zero(dv[hf]);
    }
    const floatX *myK = sK + wg * 64 * HS, *myV = sV + wg * 64 * HS;  // (within each half)
    uint32_t ka[KV_REGS ? 4 : 1][4], va[KV_REGS ? 4 : 1][4];
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (KV_REGS) {
        tile_to_a(ka, myK, w, lane);
        tile_to_a(va, myV, w, lane);
    }
    // step m (i = m - mstart): block m landed; every warpgroup is done with block m - 2's Q, dO;
    // block m + 1 starts loading
    auto step_sync = [&](int m) {
        const int i = m - mstart;
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (m + 1 < mend) {
            const int nq0 = (m + 1) * BM;
            load_halves<BM, HSZ, NT>(sQ + ((i + 1) % 3) * BM * HSZ, qb, nq0, 3 * C, T);
            load_halves<BM, HSZ, NT>(sO + ((i + 1) % 3) * BM * HSZ, ob, nq0, C, T);
            load_rows_ld<BM>(sL + ((i + 1) & 1) * BM, sD + ((i + 1) & 1) * BM, lb, db, nq0, T);
            cp_async_commit();
        }
    };
    auto issue_sdp = [&](int m) {  // S^T_m = K Q_m^T, dP^T_m = V dO_m^T
        const int i = m - mstart;
        const floatX *cQ = sQ + (i % 3) * BM * HSZ, *cO = sO + (i % 3) * BM * HSZ;
        wg_fence();
        if constexpr (KV_REGS) {
#pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) mma_rs<0>(st, ka[kk], desc_k(cQ, kk), kk);
#pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) mma_rs<0>(dpt, va[kk], desc_k(cO, kk), kk);
        } else {
#pragma unroll
            for (int kk = 0; kk < HSZ / 16; kk++)
                mma_ss<64>(st, desc_k(myK + (kk / 4) * BN * HS, kk % 4), desc_k(cQ + (kk / 4) * BM * HS, kk % 4), kk);
#pragma unroll
            for (int kk = 0; kk < HSZ / 16; kk++)
                mma_ss<64>(dpt, desc_k(myV + (kk / 4) * BN * HS, kk % 4), desc_k(cO + (kk / 4) * BM * HS, kk % 4), kk);
        }
        wg_commit();
    };
    auto issue_grads = [&](int m) {  // dV += P^T_m dO_m, dK += dS^T_m Q_m
        const int i = m - mstart;
        const floatX *cQ = sQ + (i % 3) * BM * HSZ, *cO = sO + (i % 3) * BM * HSZ;
        wg_fence();
#pragma unroll
        for (int hf = 0; hf < NH_; hf++)
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) mma_rs_mn(dv[hf], pa[kk], desc_mn(cO + hf * BM * HS, kk));
#pragma unroll
        for (int hf = 0; hf < NH_; hf++)
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) mma_rs_mn(dk[hf], da[kk], desc_mn(cQ + hf * BM * HS, kk));
        wg_commit();
    };
    // P^T_m into st, dS^T_m = P^T (dP^T - D) into dpt
    auto form_p_ds = [&](int m) {
        const int i = m - mstart, q0 = m * BM;
        form_pt_dst(st, dpt, sL + (i & 1) * BM, sD + (i & 1) * BM, q0, key_lo, tq, wk0 + w * 16 + 15 > q0,
                    scale_log2);
    };
    auto pack = [&] {
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            acc_to_a(pa[kk], st, kk);
            acc_to_a(da[kk], dpt, kk);
        }
    };
    // every warpgroup walks every query block from mstart (see wgmma under a branch, above)
    step_sync(mstart);
    issue_sdp(mstart);
    wg_wait();
    wg_fence_regs(st);
    wg_fence_regs(dpt);
    form_p_ds(mstart);
    pack();
    for (int m = mstart + 1; m < mend; m++) {
        step_sync(m);
        issue_sdp(m);
        issue_grads(m - 1);
        wg_wait_n<1>();
        wg_fence_regs(st);
        wg_fence_regs(dpt);
        form_p_ds(m);
        wg_wait();
#pragma unroll
        for (int hf = 0; hf < NH_; hf++) {
            wg_fence_regs(dv[hf]);
            wg_fence_regs(dk[hf]);
        }
        pack();
    }
    issue_grads(mend - 1);
    wg_wait();
#pragma unroll
    for (int hf = 0; hf < NH_; hf++) {
        wg_fence_regs(dv[hf]);
        wg_fence_regs(dk[hf]);
    }
    write_dkdv<HSZ>(dqkv, dk, dv, b, h, key_lo, tq, T, C, scale);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------
// launchers

template <typename K>
static void set_smem(K kern, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// backward: D = rowsum(dout * out), then the dq kernel and the dk/dv kernel (each writes its
// part of dqkv); deterministic, and the fastest here in either --deterministic mode. *_MINB:
// blocks per SM the registers are budgeted for (__launch_bounds__)
template <int HSZ, int DQ_NWG, int DQ_MINB, int KV_NWG, int KV_MINB>
static void backward_cfg(floatX *dqkv, floatX *dbias_v, const floatX *dout, const floatX *qkv, const floatX *out,
                         const float *lse, float *scratch, int B, int T, int NH, cudaStream_t s) {
    float scale = 1.0f / sqrtf((float)HSZ), scale_log2 = scale * 1.4426950408889634f;
    flash::bwd_dot<HSZ>(scratch, NULL, dbias_v, dout, out, B, T, NH, s);
    {
        constexpr int BM = 64 * DQ_NWG, BN = 64;
        size_t smem = (size_t)(2 * BM + 5 * BN) * HSZ * sizeof(floatX) + SMEM_SLACK;
        auto kern = bwd_dq_kernel<HSZ, DQ_NWG, DQ_MINB>;
        set_smem(kern, smem);
        kern<<<dim3(ceil_div(T, BM), B * NH), DQ_NWG * 128, smem, s>>>(dqkv, dout, qkv, lse, scratch, T, NH,
                                                                       scale_log2, scale);
        LAUNCH_CHECK();
    }
    {
        constexpr int BN = 64 * KV_NWG, BM = 64;
        size_t smem = (size_t)(2 * BN + 6 * BM) * HSZ * sizeof(floatX) + 4 * BM * sizeof(float) + SMEM_SLACK;
        auto kern = bwd_dkdv_kernel<HSZ, KV_NWG, KV_MINB>;
        set_smem(kern, smem);
        kern<<<dim3(ceil_div(T, BN), B * NH), KV_NWG * 128, smem, s>>>(dqkv, dout, qkv, lse, scratch, T, NH,
                                                                       scale_log2, scale);
        LAUNCH_CHECK();
    }
}

// flash_wgmma_runs_here's question, which machine code of this build the runtime loaded for
// the GPU, is one any kernel of the build answers (a program's kernels are loaded together
// from one of its images): this one, empty and never launched, answers it so that no flash
// kernel has to be built into the program only to be asked.
__global__ void probe_kernel() {}

}  // namespace flash90

#undef WG_TYPES

// Whether the launchers take these kernels on the current GPU: compute capability 9.0, with
// the kernels loaded as the build's sm_90a machine code (on a 9.0 GPU a build without it would
// run PTX of an older architecture, whose kernels here are empty). Asked once per device.
static bool flash_wgmma_runs_here(void) {
    enum { MAX_DEVICES = 64 };
    static signed char known[MAX_DEVICES];  // 1 yes, -1 no, 0 not asked yet
    const DeviceCaps *caps = device_caps();
    int dev = -1;
    if (!caps || cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEVICES) return false;
    if (!known[dev]) {
        bool yes = false;
        if (caps->cc == 90) {
            cudaFuncAttributes fa;
            const cudaError_t e = cudaFuncGetAttributes(&fa, flash90::probe_kernel);
            if (e != cudaSuccess) (void)cudaGetLastError();  // (not an error of the next launch)
            yes = e == cudaSuccess && fa.binaryVersion == 90 && fa.ptxVersion >= 90;
        }
        known[dev] = yes ? 1 : -1;
    }
    return known[dev] > 0;
}

#else  // no sm_90a in this build

static bool flash_wgmma_runs_here(void) { return false; }

#endif  // FLASH_WGMMA && PRECISION != PRECISION_FP32
