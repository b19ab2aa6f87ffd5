// dev/test/attention_variants.cuh: flash attention kernels that only the tests and benchmarks
// run, kept out of the product headers so that a trainer build carries none of them: the
// wgmma forwards that the warp-specialised forward of kernels/attention_sm90_ws.cuh replaced
// (fwd_kernel: every thread loads K and V with cp.async, and each product is waited for
// before the next step; fwd_pipe_kernel: the same, software-pipelined within the warpgroup),
// with their launchers. build/test_attention checks them and times them (--bench ... 1) against the
// defaults; docs/performance-notes.md has what they measured. The other variants the tests
// run are other template arguments of the product's own kernels and launchers.
#pragma once
#include "kernels/attention.cuh"

#if FLASH_WGMMA && PRECISION != PRECISION_FP32

namespace flash90 {

// ---------------------------------------------------------------------------------------
// forward: one block = NWG warpgroups x 64 query rows of one head; key blocks of BN, K and V
// double-buffered (cp.async, all threads), S = Q K^T and O += P V as wgmma
template <int NWG, int BN, int MINB>
__global__ void __launch_bounds__(NWG * 128, MINB) fwd_kernel(floatX *out, float *lse, const floatX *qkv, int T, int NH,
                                                       float scale_log2) {
#if FLASH90_DEVICE_CODE
    constexpr int BM = 64 * NWG, NT = NWG * 128;
    floatX *sQ = smem_base();
    floatX *sK = sQ + BM * HS;      // 2 buffers
    floatX *sV = sK + 2 * BN * HS;  // 2 buffers
    const int tid = threadIdx.x, wg = warpgroup_index(), w = (tid / 32) % 4, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int mb = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const floatX *qb = qkv + (size_t)b * T * 3 * C + h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const int q0 = mb * BM, wq0 = q0 + wg * 64;  // this warpgroup's rows wq0 .. wq0 + 63
    const int row_lo = wq0 + w * 16 + g;         // this thread's rows row_lo, row_lo + 8
    const int nblocks = min((q0 + BM + BN - 1) / BN, (T + BN - 1) / BN);

    load_tile<BM, HS, NT>(sQ, qb, q0, 3 * C, T);
    load_tile<BN, HS, NT>(sK, kb, 0, 3 * C, T);
    load_tile<BN, HS, NT>(sV, vb, 0, 3 * C, T);
    cp_async_commit();

    float o_[1][32], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f};  // (one 64-column half)
    float(&o)[32] = o_[0];
    zero(o);
    // Q stays an all-shared operand here: with Q as a register A operand (as K and V are in the
    // dk/dv kernel) this kernel gave wrong results from the second key block on, for a 1.5%
    // gain (cause not found: docs/performance-notes.md, "Unexplained failures")
    const floatX *myQ = sQ + wg * 64 * HS;
    for (int n = 0; n < nblocks; n++) {
        const int buf = n & 1;
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();  // block n landed; every warpgroup is done with block n - 1's buffer
        if (n + 1 < nblocks) {
            load_tile<BN, HS, NT>(sK + (buf ^ 1) * BN * HS, kb, (n + 1) * BN, 3 * C, T);
            load_tile<BN, HS, NT>(sV + (buf ^ 1) * BN * HS, vb, (n + 1) * BN, 3 * C, T);
            cp_async_commit();
        }
        const int k0 = n * BN;
        if (k0 > wq0 + 63) continue;  // every key of the block is after every row of this warpgroup
        const floatX *cK = sK + buf * BN * HS, *cV = sV + buf * BN * HS;
        float s[BN / 2];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) mma_ss<BN>(s, desc_k(myQ, kk), desc_k(cK, kk), kk);
        wg_commit();
        wg_wait();
        wg_fence_regs(s);
        mask_causal<BN>(s, k0, wq0, row_lo, tq);
        float alpha[2];
        online_softmax<BN>(s, mrow, lrow, alpha, scale_log2);
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] *= alpha[(i >> 1) & 1];
        uint32_t pa[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) acc_to_a(pa[kk], s, kk);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) mma_rs_mn(o, pa[kk], desc_mn(cV, kk));
        wg_commit();
        wg_wait();
        wg_fence_regs(o);
    }
    write_out<HS>(out, lse, o_, mrow, lrow, b, h, bh, row_lo, tq, T, C);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------
// forward, software-pipelined within the warpgroup: step n issues S_n = Q K_n^T and then
// O += P_{n-1} V_{n-1}, waits for S_n alone and runs block n's mask and softmax while the
// P V product is still on the tensor cores; O takes block n's rescale once that product is
// done. K runs one block ahead of V: step n loads K_{n+1} and V_n (double-buffered each).
// P_{n-1} stays packed in registers the in-flight product reads, so block n's P is packed
// only after the wait. Head size HSZ 64 or 128 (tiles in halves: load_halves).
template <int HSZ, int NWG, int BN, int MINB>
__global__ void __launch_bounds__(NWG * 128, MINB) fwd_pipe_kernel(floatX *out, float *lse, const floatX *qkv, int T,
                                                                  int NH, float scale_log2) {
#if FLASH90_DEVICE_CODE
    constexpr int BM = 64 * NWG, NT = NWG * 128, NH_ = HSZ / 64;
    floatX *sQ = smem_base();
    floatX *sK = sQ + BM * HSZ;      // 2 buffers
    floatX *sV = sK + 2 * BN * HSZ;  // 2 buffers
    const int tid = threadIdx.x, wg = warpgroup_index(), w = (tid / 32) % 4, lane = tid & 31;
    const int g = lane >> 2, tq = lane & 3;
    const int mb = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HSZ;
    const floatX *qb = qkv + (size_t)b * T * 3 * C + h * HSZ, *kb = qb + C, *vb = qb + 2 * C;
    const int q0 = mb * BM, wq0 = q0 + wg * 64;
    const int row_lo = wq0 + w * 16 + g;
    const int nblocks = min((q0 + BM + BN - 1) / BN, (T + BN - 1) / BN);

    load_halves<BM, HSZ, NT>(sQ, qb, q0, 3 * C, T);
    load_halves<BN, HSZ, NT>(sK, kb, 0, 3 * C, T);
    cp_async_commit();

    float o[NH_][32], s[BN / 2], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.0f, 0.0f}, alpha[2];
    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int hf = 0; hf < NH_; hf++) zero(o[hf]);
    const floatX *myQ = sQ + wg * 64 * HS;  // (within each half)
    // step n: K_n and V_{n-1} landed; every warpgroup is done with K_{n-1} and V_{n-2}; K_{n+1}
    // and V_n start loading
    auto step_sync = [&](int n) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (n + 1 < nblocks) load_halves<BN, HSZ, NT>(sK + ((n + 1) & 1) * BN * HSZ, kb, (n + 1) * BN, 3 * C, T);
        if (n < nblocks) load_halves<BN, HSZ, NT>(sV + (n & 1) * BN * HSZ, vb, n * BN, 3 * C, T);
        cp_async_commit();
    };
    auto issue_s = [&](int n) {
        const floatX *cK = sK + (n & 1) * BN * HSZ;
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < HSZ / 16; kk++)
            mma_ss<BN>(s, desc_k(myQ + (kk / 4) * BM * HS, kk % 4), desc_k(cK + (kk / 4) * BN * HS, kk % 4), kk);
        wg_commit();
    };
    auto issue_pv = [&](int n) {  // O += P_n V_n
        const floatX *cV = sV + (n & 1) * BN * HSZ;
        wg_fence();
#pragma unroll
        for (int hf = 0; hf < NH_; hf++)
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) mma_rs_mn(o[hf], pa[kk], desc_mn(cV + hf * BN * HS, kk));
        wg_commit();
    };
    // Every warpgroup walks every key block of the block's rows: a warpgroup's blocks after
    // its last row come out all masked (P = 0). Skipping them would put the products under a
    // branch, and ptxas then serialises every wgmma of the kernel.
    step_sync(0);
    issue_s(0);
    wg_wait();
    wg_fence_regs(s);
    mask_causal<BN>(s, 0, wq0, row_lo, tq);
    online_softmax<BN>(s, mrow, lrow, alpha, scale_log2);
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) acc_to_a(pa[kk], s, kk);
    for (int n = 1; n < nblocks; n++) {
        step_sync(n);
        issue_s(n);
        issue_pv(n - 1);
        wg_wait_n<1>();
        wg_fence_regs(s);
        mask_causal<BN>(s, n * BN, wq0, row_lo, tq);
        online_softmax<BN>(s, mrow, lrow, alpha, scale_log2);
        wg_wait();
#pragma unroll
        for (int hf = 0; hf < NH_; hf++) {
            wg_fence_regs(o[hf]);
#pragma unroll
            for (int i = 0; i < 32; i++) o[hf][i] *= alpha[(i >> 1) & 1];
        }
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) acc_to_a(pa[kk], s, kk);
    }
    step_sync(nblocks);
    issue_pv(nblocks - 1);
    wg_wait();
#pragma unroll
    for (int hf = 0; hf < NH_; hf++) wg_fence_regs(o[hf]);
    write_out<HSZ>(out, lse, o, mrow, lrow, b, h, bh, row_lo, tq, T, C);
#else
    __trap();
#endif
}

// ---------------------------------------------------------------------------------------
// launchers

// MINB: blocks per SM the registers are budgeted for (__launch_bounds__)
template <int NWG, int BN, int MINB>
static void forward_cfg(floatX *out, float *lse, const floatX *qkv, int B, int T, int NH, cudaStream_t s) {
    constexpr int BM = 64 * NWG;
    size_t smem = (size_t)(BM + 4 * BN) * HS * sizeof(floatX) + SMEM_SLACK;
    auto kern = fwd_kernel<NWG, BN, MINB>;
    set_smem(kern, smem);
    dim3 grid(ceil_div(T, BM), B * NH);
    kern<<<grid, NWG * 128, smem, s>>>(out, lse, qkv, T, NH, 1.4426950408889634f / sqrtf((float)HS));
    LAUNCH_CHECK();
}

template <int NWG, int BN, int MINB, int HSZ = 64>
static void forward_pipe_cfg(floatX *out, float *lse, const floatX *qkv, int B, int T, int NH, cudaStream_t s) {
    constexpr int BM = 64 * NWG;
    size_t smem = (size_t)(BM + 4 * BN) * HSZ * sizeof(floatX) + SMEM_SLACK;
    auto kern = fwd_pipe_kernel<HSZ, NWG, BN, MINB>;
    set_smem(kern, smem);
    dim3 grid(ceil_div(T, BM), B * NH);
    kern<<<grid, NWG * 128, smem, s>>>(out, lse, qkv, T, NH, 1.4426950408889634f / sqrtf((float)HSZ));
    LAUNCH_CHECK();
}

}  // namespace flash90

#endif  // FLASH_WGMMA && PRECISION != PRECISION_FP32
