// kernels/attention_sm90_ws.cuh: flash attention on Hopper, warp-specialised
// (FlashAttention-3's producer/consumer form): one producer warpgroup loads tiles with the
// bulk copy engine (TMA) into a ring of shared-memory stages guarded by mbarriers and gives
// registers back (setmaxnreg); consumer warpgroups of 64 rows only issue wgmma and run the
// softmax. Kernels: the forward (head sizes 64 and 128), the backward's dk/dv and dq
// (head size 64), built on attention_sm90.cuh's helpers. `forward<HSZ>` and `backward<HSZ>`
// are the launchers attention.cuh takes on a wgmma GPU. Tile shapes and what was measured:
// docs/performance-notes.md; the other tile shapes, ping-pong and pipelining settings are
// test_attention's variants.
//
// TMA writes the same 128-byte-swizzled layout load_tile writes (16-byte chunk c of row r
// at c ^ (r & 7) within each 1024-byte group of 8 rows), so the wgmma descriptors of
// attention_sm90.cuh read these tiles unchanged. The tensor maps view qkv as a 3-D tensor
// (3C columns, T rows, B batches), dout as (C, T, B): rows past T read as zeros, as
// load_tile's do.
#pragma once
#include "attention_sm90.cuh"

#if FLASH_WGMMA && PRECISION != PRECISION_FP32

#include <cuda.h>  // CUtensorMap (the encoder is fetched at run time: no -lcuda)

namespace flash90ws {

using namespace flash90;

#if FLASH90_DEVICE_CODE
__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// the producer's arrival, announcing the bytes its copies will complete
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// wait until the barrier's phase of this parity has completed
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nwait_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_%=;\n}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}
// a box of the 3-D tensor map at (column, row, batch) into shared memory; completes on bar
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, int col, int row, int batch,
                                         uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"(smem_addr(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(batch), "r"(smem_addr(bar))
        : "memory");
}
// named barriers 1.. (0 is __syncthreads'): a warpgroup waits at its own, the other arrives
__device__ __forceinline__ void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
template <int N>
__device__ __forceinline__ void regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
#endif

// Whether NC consumers at CREGS registers and a producer at 24 fit the registers a block of
// NC + 1 warpgroups starts with at MINB blocks an SM (setmaxnreg.inc waits, never fails: a
// budget that does not fit would hang)
__host__ __device__ constexpr int start_regs(int threads, int minb) {  // a multiple of 8, at most 255
    return (65536 / (threads * minb) & ~7) > 255 ? 255 : (65536 / (threads * minb) & ~7);
}
__host__ __device__ constexpr bool regs_fit(int NC, int MINB, int CREGS) {
    return 128 * 24 + NC * 128 * CREGS <= (NC + 1) * 128 * start_regs((NC + 1) * 128, MINB);
}

// one block: warpgroup 0 the producer, warpgroups 1 .. NC consumers of 64 query rows each
// (BM = 64 NC), key blocks of BN in a ring of STAGES K and V buffers. MINB blocks an SM.
// The block starts with the registers __launch_bounds__ gives every thread (R); the
// producer drops to 24 and the consumers rise to CREGS, at most R + (R - 24) / NC rounded
// down to a multiple of 8 (NC 2: R 80 -> 104, R 168 -> 240; NC 3: R 128 -> 160).
// PP (NC = 2): ping-pong, the two consumers take turns issuing their products (named
// barriers 1 and 2), so that one's softmax runs while the other's products do. PIPE: the
// consumers software-pipelined (block n's S issued with block n-1's P V; a stage
// is released after its P V, so PIPE wants STAGES >= 3 to keep a load in flight).
template <int HSZ, int NC, int BN, int STAGES, int MINB, int CREGS, bool PP = false, bool PIPE = false>
__global__ void __launch_bounds__((NC + 1) * 128, MINB)
    fwd_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_kv, floatX *out,
                  float *lse, int T, int NH, float scale_log2) {
#if FLASH90_DEVICE_CODE
    constexpr int BM = 64 * NC, NH_ = HSZ / 64;  // (tiles of head size 128 in two halves, as load_halves)
    static_assert(regs_fit(NC, MINB, CREGS), "fwd_ws_kernel: CREGS does not fit");
    static_assert(STAGES >= 2, "fwd_ws_kernel: a consumer holds one stage while it waits for the next");
    floatX *sQ = smem_base();
    floatX *sK = sQ + BM * HSZ;            // STAGES buffers
    floatX *sV = sK + STAGES * BN * HSZ;   // STAGES buffers
    uint64_t *bars = reinterpret_cast<uint64_t *>(sV + STAGES * BN * HSZ);
    uint64_t *q_full = bars, *k_full = bars + 1, *v_full = k_full + STAGES, *kv_empty = v_full + STAGES;
    const int tid = threadIdx.x, wg = warpgroup_index();
    const int mb = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HSZ;
    const int q0 = mb * BM;
    const int nblocks = min((q0 + BM + BN - 1) / BN, (T + BN - 1) / BN);
    if (tid == 0) {
        mbar_init(q_full, 1);
        for (int s = 0; s < STAGES; s++) {
            mbar_init(k_full + s, 1);
            mbar_init(v_full + s, 1);
            mbar_init(kv_empty + s, NC * 128);  // every consumer thread releases a stage
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();

    if (wg == 0) {  // producer: one thread issues every copy
        regs_dec<24>();
        if (tid == 0) {
            // a tile of `rows` rows from column col on, half by half, completing on bar
            auto load = [&](floatX *dst, const CUtensorMap *map, int rows, int col, int row, uint64_t *bar) {
                mbar_expect_tx(bar, rows * HSZ * sizeof(floatX));
                for (int hf = 0; hf < NH_; hf++) tma_load(dst + hf * rows * HS, map, col + hf * HS, row, b, bar);
            };
            load(sQ, &tm_q, BM, h * HSZ, q0, q_full);
            for (int n = 0; n < nblocks; n++) {
                const int s = n % STAGES;
                if (n >= STAGES) mbar_wait(kv_empty + s, ((n / STAGES) - 1) & 1);  // its last use released
                load(sK + s * BN * HSZ, &tm_kv, BN, C + h * HSZ, n * BN, k_full + s);
                load(sV + s * BN * HSZ, &tm_kv, BN, 2 * C + h * HSZ, n * BN, v_full + s);
            }
        }
        return;
    }

    regs_inc<CREGS>();
    const int cw = wg - 1, w = (tid / 32) % 4, lane = tid & 31, g = lane >> 2, tq = lane & 3;
    const int wq0 = q0 + cw * 64, row_lo = wq0 + w * 16 + g;
    float o_[NH_][32], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};
#pragma unroll
    for (int hf = 0; hf < NH_; hf++) zero(o_[hf]);
    const floatX *myQ = sQ + cw * 64 * HS;  // (within each half)
    // S = Q K^T of the tile at cK, O += P V of the tile at cV, O *= alpha, O's registers fenced
    auto mma_s = [&](float(&sc)[BN / 2], const floatX *cK) {
#pragma unroll
        for (int kk = 0; kk < HSZ / 16; kk++)
            mma_ss<BN>(sc, desc_k(myQ + (kk / 4) * BM * HS, kk % 4), desc_k(cK + (kk / 4) * BN * HS, kk % 4), kk);
    };
    auto mma_pv = [&](const uint32_t(&pa)[BN / 16][4], const floatX *cV) {
#pragma unroll
        for (int hf = 0; hf < NH_; hf++)
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) mma_rs_mn(o_[hf], pa[kk], desc_mn(cV + hf * BN * HS, kk));
    };
    auto rescale = [&](const float(&alpha)[2]) {
#pragma unroll
        for (int hf = 0; hf < NH_; hf++)
#pragma unroll
            for (int i = 0; i < 32; i++) o_[hf][i] *= alpha[(i >> 1) & 1];
    };
    auto fence_o = [&] {
#pragma unroll
        for (int hf = 0; hf < NH_; hf++) wg_fence_regs(o_[hf]);
    };
    static_assert(!PP || NC == 2, "fwd_ws_kernel: ping-pong takes two consumers");
    if (PP && cw == 1) bar_arrive(1, 256);  // consumer 0 goes first
    mbar_wait(q_full, 0);
    // Every consumer walks every key block of the block (the ones past its last row come out
    // all masked): the products then sit under no branch (see attention_sm90.cuh's header).
    if constexpr (PIPE) {
        float sc[BN / 2], alpha[2];
        uint32_t pa[BN / 16][4];
        auto issue_s = [&](int n) {
            wg_fence();
            mma_s(sc, sK + (n % STAGES) * BN * HSZ);
            wg_commit();
        };
        auto issue_pv = [&](int n) {
            wg_fence();
            mma_pv(pa, sV + (n % STAGES) * BN * HSZ);
            wg_commit();
        };
        auto pack = [&] {
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) acc_to_a(pa[kk], sc, kk);
        };
        mbar_wait(k_full, 0);
        if (PP) bar_sync(1 + cw, 256);
        issue_s(0);
        if (PP) bar_arrive(2 - cw, 256);
        wg_wait();
        wg_fence_regs(sc);
        mask_causal<BN>(sc, 0, wq0, row_lo, tq);
        online_softmax<BN>(sc, mrow, lrow, alpha, scale_log2);
        pack();
        for (int n = 1; n < nblocks; n++) {
            const int ps = (n - 1) % STAGES;
            mbar_wait(k_full + n % STAGES, (n / STAGES) & 1);
            mbar_wait(v_full + ps, ((n - 1) / STAGES) & 1);
            if (PP) bar_sync(1 + cw, 256);
            issue_s(n);
            issue_pv(n - 1);
            if (PP) bar_arrive(2 - cw, 256);
            wg_wait_n<1>();
            wg_fence_regs(sc);
            mask_causal<BN>(sc, n * BN, wq0, row_lo, tq);
            online_softmax<BN>(sc, mrow, lrow, alpha, scale_log2);
            wg_wait();
            fence_o();
            rescale(alpha);
            pack();
            mbar_arrive(kv_empty + ps);  // block n-1's K and V are read
        }
        const int ls = (nblocks - 1) % STAGES;
        mbar_wait(v_full + ls, ((nblocks - 1) / STAGES) & 1);
        if (PP) bar_sync(1 + cw, 256);
        issue_pv(nblocks - 1);
        if (PP) bar_arrive(2 - cw, 256);
        wg_wait();
        fence_o();
        mbar_arrive(kv_empty + ls);
    } else {
        for (int n = 0; n < nblocks; n++) {
            const int s = n % STAGES;
            const uint32_t parity = (n / STAGES) & 1;
            const floatX *cK = sK + s * BN * HSZ, *cV = sV + s * BN * HSZ;
            float sc[BN / 2];
            mbar_wait(k_full + s, parity);
            if (PP) bar_sync(1 + cw, 256);  // this consumer's turn
            wg_fence();
            mma_s(sc, cK);
            wg_commit();
            if (PP) bar_arrive(2 - cw, 256);  // the other's turn
            wg_wait();
            wg_fence_regs(sc);
            mask_causal<BN>(sc, n * BN, wq0, row_lo, tq);
            float alpha[2];
            online_softmax<BN>(sc, mrow, lrow, alpha, scale_log2);
            rescale(alpha);
            uint32_t pa[BN / 16][4];
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) acc_to_a(pa[kk], sc, kk);
            mbar_wait(v_full + s, parity);
            wg_fence();
            mma_pv(pa, cV);
            wg_commit();
            wg_wait();
            fence_o();
            mbar_arrive(kv_empty + s);  // this thread's reads of stage s are done
        }
    }
    if (PP && cw == 0) bar_sync(1, 256);  // takes consumer 1's last arrival: no barrier left half-arrived
    write_out<HSZ>(out, lse, o_, mrow, lrow, b, h, bh, row_lo, tq, T, C);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------
// backward, dk and dv, warp-specialised (head size 64): warpgroup 0 loads K and V of the
// block's BN = 64 NC keys once, then each query block's Q and dO (TMA) and its log-sum-exp
// and D (plain loads by the producer's threads) into a ring of STAGES stages; NC consumer
// warpgroups of 64 keys each run bwd_dkdv_kernel's pipelined step (S^T_m, dP^T_m issued with
// dV, dK of block m - 1) and release a stage after block m's gradient products. Q and dO
// are read once for all NC x 64 keys. KV_REGS: K and V rows as register A operands.
template <int NC, int STAGES, int CREGS, bool KV_REGS>
__global__ void __launch_bounds__((NC + 1) * 128, 1)
    bwd_dkdv_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_kv,
                       const __grid_constant__ CUtensorMap tm_o, floatX *dqkv, const float *lse, const float *D, int T,
                       int NH, float scale_log2, float scale) {
#if FLASH90_DEVICE_CODE
    constexpr int BN = 64 * NC, BM = 64, SQ = 2 * BM * HS;  // SQ: a stage's Q and dO elements
    static_assert(regs_fit(NC, 1, CREGS), "bwd_dkdv_ws_kernel: CREGS does not fit");
    static_assert(STAGES >= 2, "bwd_dkdv_ws_kernel: a consumer holds one stage while it waits for the next");
    floatX *sK = smem_base();
    floatX *sV = sK + BN * HS;
    floatX *sQ = sV + BN * HS;  // stage s: Q at sQ + s SQ, dO after it
    float *sLD = reinterpret_cast<float *>(sQ + STAGES * SQ);  // stage s: lse[64], D[64]
    uint64_t *bars = reinterpret_cast<uint64_t *>(sLD + STAGES * 2 * BM);
    uint64_t *kv_full = bars, *q_full = bars + 1, *q_empty = q_full + STAGES;
    const int tid = threadIdx.x, wg = warpgroup_index();
    const int nb = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const int k0 = nb * BN, mstart = k0 / BM, mend = (T + BM - 1) / BM, nsteps = mend - mstart;
    if (tid == 0) {
        mbar_init(kv_full, 1);
        for (int s = 0; s < STAGES; s++) {
            mbar_init(q_full + s, 128 + 1);  // the producer's threads (lse, D) and the copies' arrival
            mbar_init(q_empty + s, NC * 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // producer
        regs_dec<24>();
        if (tid == 0) {
            mbar_expect_tx(kv_full, 2 * BN * HS * sizeof(floatX));
            tma_load(sK, &tm_kv, C + h * HS, k0, b, kv_full);
            tma_load(sV, &tm_kv, 2 * C + h * HS, k0, b, kv_full);
        }
        const float *src = (tid < BM ? lse : D) + (size_t)bh * T;
        for (int i = 0; i < nsteps; i++) {
            const int s = i % STAGES, q0 = (mstart + i) * BM;
            if (i >= STAGES) mbar_wait(q_empty + s, ((i / STAGES) - 1) & 1);
            if (tid == 0) {
                mbar_expect_tx(q_full + s, SQ * sizeof(floatX));
                tma_load(sQ + s * SQ, &tm_q, h * HS, q0, b, q_full + s);
                tma_load(sQ + s * SQ + BM * HS, &tm_o, h * HS, q0, b, q_full + s);
            }
            const int row = q0 + tid % BM;  // rows past T: 0 (their Q and dO rows are zeros)
            sLD[s * 2 * BM + tid] = row < T ? src[row] : 0.0f;
            mbar_arrive(q_full + s);
        }
        return;
    }

    regs_inc<CREGS>();
    const int cw = wg - 1, w = (tid / 32) % 4, lane = tid & 31, g = lane >> 2, tq = lane & 3;
    const int wk0 = k0 + cw * 64, key_lo = wk0 + w * 16 + g;
    const floatX *myK = sK + cw * 64 * HS, *myV = sV + cw * 64 * HS;
    float dk[1][32], dv[1][32], st[32], dpt[32];
    uint32_t pa[4][4], da[4][4], ka[KV_REGS ? 4 : 1][4], va[KV_REGS ? 4 : 1][4];
    zero(dk[0]);
    zero(dv[0]);
    mbar_wait(kv_full, 0);
    if constexpr (KV_REGS) {
        tile_to_a(ka, myK, w, lane);
        tile_to_a(va, myV, w, lane);
    }
    auto issue_sdp = [&](int i) {  // S^T = K Q^T, dP^T = V dO^T of step i's block
        const floatX *cQ = sQ + (i % STAGES) * SQ, *cO = cQ + BM * HS;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            if constexpr (KV_REGS) mma_rs<0>(st, ka[kk], desc_k(cQ, kk), kk);
            else mma_ss<64>(st, desc_k(myK, kk), desc_k(cQ, kk), kk);
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            if constexpr (KV_REGS) mma_rs<0>(dpt, va[kk], desc_k(cO, kk), kk);
            else mma_ss<64>(dpt, desc_k(myV, kk), desc_k(cO, kk), kk);
        }
        wg_commit();
    };
    auto issue_grads = [&](int i) {  // dV += P^T dO, dK += dS^T Q of step i's block
        const floatX *cQ = sQ + (i % STAGES) * SQ, *cO = cQ + BM * HS;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) mma_rs_mn(dv[0], pa[kk], desc_mn(cO, kk));
#pragma unroll
        for (int kk = 0; kk < 4; kk++) mma_rs_mn(dk[0], da[kk], desc_mn(cQ, kk));
        wg_commit();
    };
    auto form = [&](int i) {  // P^T, dS^T of step i's block (while the gradient products run)
        const int s = i % STAGES, q0 = (mstart + i) * BM;
        form_pt_dst(st, dpt, sLD + s * 2 * BM, sLD + s * 2 * BM + BM, q0, key_lo, tq, wk0 + w * 16 + 15 > q0,
                    scale_log2);
    };
    auto pack = [&] {  // into the next gradient products' A operands (once the last ones are done)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            acc_to_a(pa[kk], st, kk);
            acc_to_a(da[kk], dpt, kk);
        }
    };
    // every consumer walks every query block from mstart (see attention_sm90.cuh's header)
    mbar_wait(q_full, 0);
    issue_sdp(0);
    wg_wait();
    wg_fence_regs(st);
    wg_fence_regs(dpt);
    form(0);
    pack();
    for (int i = 1; i < nsteps; i++) {
        mbar_wait(q_full + i % STAGES, (i / STAGES) & 1);
        issue_sdp(i);
        issue_grads(i - 1);
        wg_wait_n<1>();
        wg_fence_regs(st);
        wg_fence_regs(dpt);
        form(i);
        wg_wait();
        wg_fence_regs(dv[0]);
        wg_fence_regs(dk[0]);
        mbar_arrive(q_empty + (i - 1) % STAGES);  // block i - 1's Q and dO are read
        pack();
    }
    issue_grads(nsteps - 1);  // (its stage is not released: the producer has nothing left to load)
    wg_wait();
    wg_fence_regs(dv[0]);
    wg_fence_regs(dk[0]);
    write_dkdv<64>(dqkv, dk, dv, b, h, key_lo, tq, T, C, scale);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------
// backward, dq, warp-specialised (head size 64): warpgroup 0 loads the block's Q and dO
// rows once and each key block's K and V into a ring of STAGES stages (TMA); NC consumer
// warpgroups of 64 query rows run bwd_dq_kernel's pipelined step (S_n, dP_n issued with
// dQ += dS_{n-1} K_{n-1}) and release a stage after its dQ product.
template <int NC, int STAGES, int MINB, int CREGS>
__global__ void __launch_bounds__((NC + 1) * 128, MINB)
    bwd_dq_ws_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_kv,
                     const __grid_constant__ CUtensorMap tm_o, floatX *dqkv, const float *lse, const float *D, int T,
                     int NH, float scale_log2, float scale) {
#if FLASH90_DEVICE_CODE
    constexpr int BM = 64 * NC, BN = 64;
    static_assert(regs_fit(NC, MINB, CREGS), "bwd_dq_ws_kernel: CREGS does not fit");
    static_assert(STAGES >= 2, "bwd_dq_ws_kernel: a consumer holds one stage while it waits for the next");
    floatX *sQ = smem_base();
    floatX *sO = sQ + BM * HS;
    floatX *sK = sO + BM * HS;           // STAGES buffers
    floatX *sV = sK + STAGES * BN * HS;  // STAGES buffers
    uint64_t *bars = reinterpret_cast<uint64_t *>(sV + STAGES * BN * HS);
    uint64_t *q_full = bars, *kv_full = bars + 1, *kv_empty = kv_full + STAGES;
    const int tid = threadIdx.x, wg = warpgroup_index();
    const int mb = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const int q0 = mb * BM, nblocks = min((q0 + BM + BN - 1) / BN, (T + BN - 1) / BN);
    if (tid == 0) {
        mbar_init(q_full, 1);
        for (int s = 0; s < STAGES; s++) {
            mbar_init(kv_full + s, 1);
            mbar_init(kv_empty + s, NC * 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {  // producer: one thread issues every copy
        regs_dec<24>();
        if (tid == 0) {
            mbar_expect_tx(q_full, 2 * BM * HS * sizeof(floatX));
            tma_load(sQ, &tm_q, h * HS, q0, b, q_full);
            tma_load(sO, &tm_o, h * HS, q0, b, q_full);
            for (int n = 0; n < nblocks; n++) {
                const int s = n % STAGES;
                if (n >= STAGES) mbar_wait(kv_empty + s, ((n / STAGES) - 1) & 1);
                mbar_expect_tx(kv_full + s, 2 * BN * HS * sizeof(floatX));
                tma_load(sK + s * BN * HS, &tm_kv, C + h * HS, n * BN, b, kv_full + s);
                tma_load(sV + s * BN * HS, &tm_kv, 2 * C + h * HS, n * BN, b, kv_full + s);
            }
        }
        return;
    }

    regs_inc<CREGS>();
    const int cw = wg - 1, w = (tid / 32) % 4, lane = tid & 31, g = lane >> 2, tq = lane & 3;
    const int wq0 = q0 + cw * 64, row_lo = wq0 + w * 16 + g;
    float lrow[2], drow[2], dq[1][32], s[32], dp[32];
    uint32_t da[4][4];
    dq_rows(lrow, drow, lse, D, bh, row_lo, T);
    zero(dq[0]);
    const floatX *myQ = sQ + cw * 64 * HS, *myO = sO + cw * 64 * HS;
    auto issue_sdp = [&](int n) {  // S = Q K^T, dP = dO V^T of key block n
        const floatX *cK = sK + (n % STAGES) * BN * HS, *cV = sV + (n % STAGES) * BN * HS;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) mma_ss<64>(s, desc_k(myQ, kk), desc_k(cK, kk), kk);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) mma_ss<64>(dp, desc_k(myO, kk), desc_k(cV, kk), kk);
        wg_commit();
    };
    auto issue_dq = [&](int n) {  // dQ += dS_n K_n
        const floatX *cK = sK + (n % STAGES) * BN * HS;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) mma_rs_mn(dq[0], da[kk], desc_mn(cK, kk));
        wg_commit();
    };
    auto pack = [&] {
#pragma unroll
        for (int kk = 0; kk < 4; kk++) acc_to_a(da[kk], s, kk);
    };
    // every consumer walks every key block of the block (see attention_sm90.cuh's header)
    mbar_wait(q_full, 0);
    mbar_wait(kv_full, 0);
    issue_sdp(0);
    wg_wait();
    wg_fence_regs(s);
    wg_fence_regs(dp);
    form_ds(s, dp, lrow, drow, 0, wq0, row_lo, tq, scale_log2);
    pack();
    for (int n = 1; n < nblocks; n++) {
        mbar_wait(kv_full + n % STAGES, (n / STAGES) & 1);
        issue_sdp(n);
        issue_dq(n - 1);
        wg_wait_n<1>();
        wg_fence_regs(s);
        wg_fence_regs(dp);
        form_ds(s, dp, lrow, drow, n * BN, wq0, row_lo, tq, scale_log2);
        wg_wait();
        wg_fence_regs(dq[0]);
        mbar_arrive(kv_empty + (n - 1) % STAGES);  // block n - 1's K and V are read
        pack();
    }
    issue_dq(nblocks - 1);  // (its stage is not released: the producer has nothing left to load)
    wg_wait();
    wg_fence_regs(dq[0]);
    write_dq<64>(dqkv, dq, b, h, row_lo, tq, T, C, scale);
#else
    __trap();
#endif
}

// a 3-D tensor map over a (B, T, W) array, boxes of `rows` x 64 columns, 128-byte swizzle
static CUtensorMap tile_map(const floatX *p, int B, int T, int W, int rows) {
    typedef CUresult (*Encode)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                               const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                               CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    static Encode encode = NULL;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        void *fn = NULL;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !fn) {
            fprintf(stderr, "error: the CUDA driver has no cuTensorMapEncodeTiled\n");
            fatal_exit();
        }
        encode = (Encode)fn;
    }
    CUtensorMap map;
    const cuuint64_t dims[3] = {(cuuint64_t)W, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[2] = {(cuuint64_t)W * sizeof(floatX), (cuuint64_t)T * W * sizeof(floatX)};
    const cuuint32_t box[3] = {(cuuint32_t)HS, (cuuint32_t)rows, 1}, estride[3] = {1, 1, 1};
    const CUtensorMapDataType type =
        PRECISION == PRECISION_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    CUresult r = encode(&map, type, 3, (void *)p, dims, strides, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "error: cuTensorMapEncodeTiled failed (%d) for a %dx%dx%d tensor, box %d rows\n", (int)r, B,
                T, W, rows);
        fatal_exit();
    }
    return map;
}

template <int NC, int BN, int STAGES, int MINB, int CREGS, bool PP = false, bool PIPE = false, int HSZ = 64>
static void forward_ws_cfg(floatX *out, float *lse, const floatX *qkv, int B, int T, int NH, cudaStream_t s) {
    constexpr int BM = 64 * NC;
    const int C = NH * HSZ;
    const CUtensorMap tm_q = tile_map(qkv, B, T, 3 * C, BM), tm_kv = tile_map(qkv, B, T, 3 * C, BN);
    size_t smem = (size_t)(BM + 2 * STAGES * BN) * HSZ * sizeof(floatX) + (1 + 3 * STAGES) * sizeof(uint64_t) +
                  SMEM_SLACK;
    auto kern = fwd_ws_kernel<HSZ, NC, BN, STAGES, MINB, CREGS, PP, PIPE>;
    set_smem(kern, smem);
    dim3 grid(ceil_div(T, BM), B * NH);
    kern<<<grid, (NC + 1) * 128, smem, s>>>(tm_q, tm_kv, out, lse, T, NH, 1.4426950408889634f / sqrtf((float)HSZ));
    LAUNCH_CHECK();
}

// the backward with the warp-specialised dk/dv kernel (head size 64): D, the dq kernel (DQ_NC
// 0: attention_sm90.cuh's at 3 blocks an SM; else bwd_dq_ws_kernel with DQ_NC consumers),
// then bwd_dkdv_ws_kernel
template <int NC, int STAGES, int CREGS, bool KV_REGS, int DQ_NC = 0, int DQ_CREGS = 240>
static void backward_ws_cfg(floatX *dqkv, floatX *dbias_v, const floatX *dout, const floatX *qkv, const floatX *out,
                            const float *lse, float *scratch, int B, int T, int NH, cudaStream_t s) {
    const float scale = 0.125f, scale_log2 = scale * 1.4426950408889634f;
    const int C = NH * HS;
    flash::bwd_dot<HS>(scratch, NULL, dbias_v, dout, out, B, T, NH, s);
    if constexpr (DQ_NC == 0) {
        constexpr int BM = 64, BN = 64;
        size_t smem = (size_t)(2 * BM + 5 * BN) * HS * sizeof(floatX) + SMEM_SLACK;
        auto kern = bwd_dq_kernel<HS, 1, 3>;
        set_smem(kern, smem);
        kern<<<dim3(ceil_div(T, BM), B * NH), 128, smem, s>>>(dqkv, dout, qkv, lse, scratch, T, NH, scale_log2, scale);
        LAUNCH_CHECK();
    } else {
        constexpr int BM = 64 * DQ_NC, BN = 64, DQ_STAGES = 3;
        const CUtensorMap tm_q = tile_map(qkv, B, T, 3 * C, BM), tm_kv = tile_map(qkv, B, T, 3 * C, BN),
                          tm_o = tile_map(dout, B, T, C, BM);
        size_t smem = (size_t)(2 * BM + 2 * DQ_STAGES * BN) * HS * sizeof(floatX) +
                      (1 + 2 * DQ_STAGES) * sizeof(uint64_t) + SMEM_SLACK;
        auto kern = bwd_dq_ws_kernel<DQ_NC, DQ_STAGES, 1, DQ_CREGS>;
        set_smem(kern, smem);
        kern<<<dim3(ceil_div(T, BM), B * NH), (DQ_NC + 1) * 128, smem, s>>>(tm_q, tm_kv, tm_o, dqkv, lse, scratch, T,
                                                                             NH, scale_log2, scale);
        LAUNCH_CHECK();
    }
    constexpr int BN = 64 * NC, BM = 64;
    const CUtensorMap tm_q = tile_map(qkv, B, T, 3 * C, BM), tm_kv = tile_map(qkv, B, T, 3 * C, BN),
                      tm_o = tile_map(dout, B, T, C, BM);
    size_t smem = (size_t)(2 * BN + STAGES * 2 * BM) * HS * sizeof(floatX) + STAGES * 2 * BM * sizeof(float) +
                  (1 + 2 * STAGES) * sizeof(uint64_t) + SMEM_SLACK;
    auto kern = bwd_dkdv_ws_kernel<NC, STAGES, CREGS, KV_REGS>;
    set_smem(kern, smem);
    kern<<<dim3(ceil_div(T, BN), B * NH), (NC + 1) * 128, smem, s>>>(tm_q, tm_kv, tm_o, dqkv, lse, scratch, T, NH,
                                                                      scale_log2, scale);
    LAUNCH_CHECK();
}

// the defaults, from test_attention --bench on an H100: head size 64 two consumers of 64 rows,
// key blocks of 64, two stages, two blocks an SM (their four consumers overlap one another
// without ping-pong); head size 128 two consumers in ping-pong over key blocks of 128 in
// three stages, each consumer pipelined (S of block n issued with P V of block n-1); its
// 230,480 bytes of shared memory leave 1,968 of the H100's 232,448 a block may have
// TMA, like the cp.async and 16-byte vector loads of the other kernels, needs tensors that
// start 16-byte aligned (the trainer's always do)
static void require_aligned(const void *p, const char *what) {
    if ((uintptr_t)p % 16) {
        fprintf(stderr, "error: flash attention: %s at %p is not 16-byte aligned\n", what, p);
        fatal_exit();
    }
}

template <int HSZ>
static void forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int NH, cudaStream_t s) {
    require_aligned(qkv, "qkv");
    if constexpr (HSZ == 64) forward_ws_cfg<2, 64, 2, 2, 104>(out, lse, qkv, B, T, NH, s);
    else forward_ws_cfg<2, 128, 3, 1, 240, true, true, 128>(out, lse, qkv, B, T, NH, s);
}

// head size 64: the warp-specialised dk/dv kernel with attention_sm90.cuh's dq kernel, from
// T = 4096 on with the warp-specialised dq kernel of three consumers (the fastest pairs of
// test_attention --bench on an H100: level at T = 2048, 4% faster at 4096, 5% slower at
// 1024). Head size 128: attention_sm90.cuh's kernels (the warp-specialised dk/dv kernel's
// accumulators, 224 registers, do not fit the 240 a consumer can have).
template <int HSZ>
static void backward(floatX *dqkv, floatX *dbias_v, const floatX *dout, const floatX *qkv, const floatX *out,
                     const float *lse, float *scratch, int B, int T, int NH, cudaStream_t s) {
    require_aligned(qkv, "qkv");
    require_aligned(dout, "the output gradient");
    if constexpr (HSZ == 64) {
        if (T >= 4096) backward_ws_cfg<2, 3, 240, true, 3, 160>(dqkv, dbias_v, dout, qkv, out, lse, scratch, B, T, NH, s);
        else backward_ws_cfg<2, 3, 240, true>(dqkv, dbias_v, dout, qkv, out, lse, scratch, B, T, NH, s);
    } else {  // (both pipelined; dq one warpgroup at 2 blocks an SM, dk/dv two warpgroups)
        backward_cfg<128, 1, 2, 2, 1>(dqkv, dbias_v, dout, qkv, out, lse, scratch, B, T, NH, s);
    }
}

}  // namespace flash90ws

#endif  // FLASH_WGMMA && PRECISION != PRECISION_FP32
