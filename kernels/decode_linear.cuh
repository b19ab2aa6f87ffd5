// kernels/decode_linear.cuh: the linear layers of generation, where a forward is a handful of
// rows (B <= 8 tokens): out (B, N) = epilogue(prologue(in) (B, K) W^T + bias), W (N, K) as the
// model keeps it. Prologue: nothing, or the row's layernorm; epilogue: bias, then nothing, GELU
// or the add into the residual stream. A matrix-vector product: every weight is used B times,
// so the time is the time to read W once, and the kernel is built around reading it at the
// memory's rate.
//
// Why it looks the way it does:
//  - Work split. Output rows go in tiles of 8 (the N side of one mma, below). A tile's K may be
//    cut into segments, one warp each, whose partial sums meet in shared memory at the end; at
//    narrow outputs (attproj, fcproj: 96 tiles at d12, 200 at d48) there are too few tiles to
//    give every SM warps without such a split. Where the split goes is set by the input's
//    traffic: a block reads the input rows of the K it covers, B x K x 2 bytes for a full K,
//    from L2 into shared memory, and an SM must take that in before it can use its prefetched
//    weights. Were a block one 8-row tile over all of K, the input read at B = 8 would weigh
//    as much as the weights (an L2-bound 2-4 us at d48's fcproj against its 6 us of weights).
//    So on sm_90, for a plain input, K is split over the 8 blocks of a thread-block cluster,
//    each block a warp per tile for up to 8 tiles over 1/8 of K, and the 8 blocks' sums meet
//    through distributed shared memory: a block reads B x K/8 of input for up to 64 weight rows.
//    A layernorm needs whole rows for its statistics, so there (and below sm_90, where there are
//    no clusters) a block covers all of K for as many tiles as leave about a block an SM, the
//    K of each tile over 8 / TB warps (more at small N, where it is the only way to have warps).
//    No sum goes through global memory or atomics, and each output is summed in one fixed order
//    (lane chains in k order, then the block's segments in order, then the cluster's blocks in
//    order, then the bias): bit-identical on every run, with or without PDL or a graph, and
//    whatever the other rows of the call (B = 1 gives a row the bits B = 8 gives it). The split
//    depends only on (K, N), the prologue and the GPU (SM count, clusters).
//  - Loads. Each weight byte is read once, 16 bytes a lane, through the non-coherent path with
//    no L1 allocation and a 256-byte L2 prefetch hint (W is read-only while we run, and those
//    256 bytes are this or a neighbouring warp's next steps, so the hint only cuts the number of
//    DRAM requests). A lane keeps DL_PF steps of loads in flight in a register ring, refilled
//    the step its slot is consumed: 8 x 16 bytes, 4 KB a warp, 32 KB an SM at 8 warps, above the
//    ~25 KB an H100 SM must have in flight to draw its share of 3.35 TB/s at ~1 us latency.
//    The loop has no barrier: partial sums wait in shared memory until every warp is done.
//  - Grid. About one wave. Without a cluster, a block per row group if half of what the SMs
//    hold suffices, so that the next kernel's blocks fit beside ours under PDL; else (the
//    lm_head) up to all they hold, each block walking up to 8 row groups, the ring running on
//    across them.
//  - PDL. The ring is filled (8 steps of every warp: most or all of W for d12's layers but the
//    lm_head) before griddepcontrol.wait, so the weight stream overlaps the previous kernel's
//    tail; in and the residual are read only after the wait. The kernel triggers its dependents
//    at once: they too only prefetch weights before their own wait, which covers our
//    completion. So W must not be written by a kernel that can still run when the call starts,
//    in a chain of PDL launches (the weights are constant during generation).
//  - Layernorm prologue: each block recomputes the rows' statistics in layernorm_forward_kernel's
//    exact order (a warp per row, lane l over vectors l, l+32, ..., a butterfly warp_sum): the
//    normalised values are the training forward's bit for bit, for two passes over B x K of
//    shared memory. Staged rows are 64 mod 128 bytes apart so that the mma path's reads of 8
//    rows spread over the banks.
//  - Arithmetic, 16-bit floatX: tensor cores (mma.m16n8k16, fp32 accumulation), the input as the
//    A operand (rows 0..7 = the call's rows, 8..15 zero) and 8 weight rows as B: lane (g, t)
//    loads 16 bytes of weight row g at k = 8t.. and the same 16 bytes of input row g, which feed
//    two mmas as they are (k is permuted alike in both operands, which a dot product ignores).
//    On CUDA cores B = 8 would cost 64 FMAs and 8 shared-memory vectors per 16 weight bytes, half
//    of an H100 SM's FP32 rate at full bandwidth; the mma costs two instructions. Two accumulator
//    chains (one per mma of a step) halve the chain of dependent mmas.
//  - Arithmetic, fp32 floatX: no exact tensor-core product (TF32 rounds), so CUDA-core FMAs, each
//    lane holding all 8 rows of its k-chunk so that one shared-memory read of an input row serves
//    8 weight vectors; the lanes' sums meet in a butterfly at each tile's end.
//  - Epilogue: the training forward's rounding points: round(acc + bias), round(gelu_f(acc +
//    bias)), and for the residual round(r + round(acc + bias)).
#pragma once
#include "common.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"  // LN_EPS
#include "pdl.cuh"

#define DECODE_LINEAR_MAX_ROWS 8
typedef enum { DECODE_IN_PLAIN, DECODE_IN_LAYERNORM } DecodeIn;
typedef enum { DECODE_OUT_PLAIN, DECODE_OUT_GELU, DECODE_OUT_RESIDUAL } DecodeOut;

#define DL_TILE_N 8          // output rows per tile
#define DL_BLOCK_WARPS 8     // warps a block aims for
#define DL_WARPS_PER_SM 16   // without clusters, at small N: the split-K target, warps per SM
#define DL_MAX_CLUSTER 8     // blocks of a cluster splitting K (the portable maximum)
#define DL_MAX_ITERS 8       // tile groups a block walks (their partial sums wait in shared memory)
#if PRECISION == PRECISION_FP32
#define DL_MMA 0
#define DL_KSTEP 128  // k per warp step: 32 lanes x 4 floats, all 8 rows per lane
#define DL_PF 2       // steps in flight per lane (8 x 16 bytes each)
#define DL_MAX_KS 8
#else
#define DL_MMA 1
#define DL_KSTEP 32   // k per warp step: 4 lanes x 8 elements, 8 rows
#define DL_PF 8       // steps in flight per lane (16 bytes each)
#define DL_MAX_KS 16
#endif
#define DL_MAX_WARPS (DL_MAX_KS > DL_BLOCK_WARPS ? DL_MAX_KS : DL_BLOCK_WARPS)
#define DL_PART_FLOATS (DL_TILE_N * DECODE_LINEAR_MAX_ROWS)  // one warp's partial sums of a tile

typedef struct {
    floatX *out;
    const floatX *in, *W, *bias, *ln_w, *ln_b;
    int B, K, N, pro, epi;
    int KSB;      // blocks of a cluster, each a slice of K (1: no cluster)
    int KS;       // warps (k segments) per tile within a block
    int S;        // steps per segment
    int TB;       // tiles a block works on at once (warps = KS * TB)
    int iters;    // tile groups per block (1 with clusters, at most DL_MAX_ITERS)
    int xstride;  // elements from one staged input row to the next
} DecodeLinearArgs;

// 16 bytes of weights: read-only for the kernel's lifetime, used once (no L1 allocation), the
// L2 told to fetch the surrounding 256 bytes, which the next steps read
__device__ __forceinline__ uint4 dl_load_w(const floatX *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}
// every thread of every block of the cluster arrives; shared-memory writes before it are
// visible to the cluster's reads after it (release / acquire)
__device__ __forceinline__ void dl_cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
// the float at p's offset in the shared memory of the cluster's block `rank`
__device__ __forceinline__ float dl_load_cluster(const float *p, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t local = (uint32_t)__cvta_generic_to_shared(p), remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
#else
    (void)rank;
    return *p;
#endif
}

#if DL_MMA
// d = a b + c for one m16n8k16 tile, rows 8..15 of a zero (a1 = a3 = 0): c0, c1 are row g's
// columns 2t, 2t+1, the only ones used. (volatile: kept in program order with the loads, so
// that a ring slot's refill is issued after the mma that reads it)
__device__ __forceinline__ void dl_mma(float &c0, float &c1, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    float d2 = 0.0f, d3 = 0.0f;  // (rows 8..15: zero)
#if PRECISION == PRECISION_BF16
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c0), "+f"(c1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c0), "+f"(c1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
#endif
}
#endif

// The block's input into shared memory (xs, rows xstride apart): columns [k0, k0 + kn) of the
// B rows, layer-normed in place when asked (then k0 = 0, kn = K). L2 loads: in was written by
// the previous kernel, which PDL lets overlap us.
__device__ __forceinline__ void dl_stage_input(const DecodeLinearArgs &a, floatX *xs, int k0, int kn) {
    constexpr int V = X128::size;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int K = a.K, nvec = kn / V;
    for (int i = threadIdx.x; i < a.B * nvec; i += blockDim.x) {
        const int b = i / nvec, c = (i - b * nvec) * V;
        const uint4 v = __ldcg(reinterpret_cast<const uint4 *>(a.in + (size_t)b * K + k0 + c));
        *reinterpret_cast<uint4 *>(xs + b * a.xstride + c) = v;
    }
    __syncthreads();
    if (a.pro != DECODE_IN_LAYERNORM) return;
    // layernorm_forward_kernel's arithmetic, operation for operation
    for (int b = warp; b < a.B; b += nwarps) {
        floatX *r = xs + b * a.xstride;
        float sum = 0.0f;
        for (int c = lane * V; c < K; c += 32 * V) {
            const X128 u = load128(r + c);
            for (int k = 0; k < V; k++) sum += to_float(u[k]);
        }
        float m = warp_sum(sum) / K;
        float var = 0.0f;
        for (int c = lane * V; c < K; c += 32 * V) {
            const X128 u = load128(r + c);
            for (int k = 0; k < V; k++) { float d = to_float(u[k]) - m; var += d * d; }
        }
        float s = rsqrtf(warp_sum(var) / K + LN_EPS);
        for (int c = lane * V; c < K; c += 32 * V) {
            X128 u = load128(r + c), wv = load128(a.ln_w + c), bv = load128(a.ln_b + c), res;
            for (int k = 0; k < V; k++)
                res[k] = from_float<floatX>((to_float(u[k]) - m) * s * to_float(wv[k]) + to_float(bv[k]));
            store128(r + c, res);
        }
    }
    __syncthreads();
}

// After the loop, every warp's partial sums of every tile group in part ([iters][warps]
// [DL_PART_FLOATS], [b * 8 + r] within a warp's): each output summed over the KS warps of its
// tile in order and, with a cluster, over the KSB blocks in order (block q's sums read from its
// shared memory), then stored; the block's (or the cluster's) threads share the outputs.
__device__ __forceinline__ void dl_finish(const DecodeLinearArgs &a, const float *part, int rowgroup, int rank) {
    const int nwarps = blockDim.x / 32, tiles_per_iter = gridDim.x / a.KSB * a.TB;
    if (a.KSB > 1) dl_cluster_sync();
    else __syncthreads();
    const int outs = a.iters * a.TB * DL_PART_FLOATS;
#pragma unroll 1
    for (int o = rank + a.KSB * (int)threadIdx.x; o < outs; o += a.KSB * blockDim.x) {
        const int it = o / (a.TB * DL_PART_FLOATS), tb = o / DL_PART_FLOATS % a.TB, idx = o % DL_PART_FLOATS;
        const int b = idx / DL_TILE_N, n = (it * tiles_per_iter + rowgroup * a.TB + tb) * DL_TILE_N + idx % DL_TILE_N;
        if (b >= a.B || n >= a.N) continue;
        const float *p = part + (it * nwarps + tb * a.KS) * DL_PART_FLOATS + idx;
        float v = 0.0f;
#pragma unroll 1
        for (int q = 0; q < a.KSB; q++)
#pragma unroll 1
            for (int ks = 0; ks < a.KS; ks++)
                v += a.KSB > 1 ? dl_load_cluster(p + ks * DL_PART_FLOATS, q) : p[ks * DL_PART_FLOATS];
        if (a.bias) v += to_float(a.bias[n]);
        floatX *dst = a.out + (size_t)b * a.N + n;
        if (a.epi == DECODE_OUT_GELU) {
            *dst = from_float<floatX>(gelu_f(v));
        } else if (a.epi == DECODE_OUT_RESIDUAL) {
            const float r = to_float(__ldcg(dst));
            *dst = from_float<floatX>(r + to_float(from_float<floatX>(v)));
        } else {
            *dst = from_float<floatX>(v);
        }
    }
    if (a.KSB > 1) dl_cluster_sync();  // (no block leaves while another may still read its sums)
}

// NBT: input rows the fp32 path's accumulators hold (B rounded up to a power of two); the mma
// path always takes 8 (its rows are the mma's, zero past B).
// dynamic shared memory: B rows of xstride floatX, then iters x warps x DL_PART_FLOATS floats
template <int NBT>
__global__ void __launch_bounds__(32 * DL_MAX_WARPS) decode_linear_kernel(DecodeLinearArgs a) {
    extern __shared__ __align__(16) unsigned char dl_smem[];
    floatX *xs = reinterpret_cast<floatX *>(dl_smem);
    float *part = reinterpret_cast<float *>(dl_smem + (size_t)a.B * a.xstride * sizeof(floatX));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int tg = warp / a.KS, kseg = warp % a.KS;
    const int S = a.S, T = a.iters * S, K = a.K, N = a.N;
    // the cluster's blocks are consecutive in x: its rank is the slice of K
    const int rank = blockIdx.x % a.KSB, rowgroup = blockIdx.x / a.KSB;
    const int k0 = rank * a.KS * S * DL_KSTEP;  // the block's slice of K: [k0, k0 + KS * S * DL_KSTEP)
    const int tiles_per_iter = gridDim.x / a.KSB * a.TB;
    const int tile0 = rowgroup * a.TB + tg;
#if DL_MMA
    const int g = lane / 4, t = lane % 4;
    const int xl = kseg * S * DL_KSTEP + t * 8;  // this lane's k at step 0, within the slice
    typedef uint4 Step;
    const int row_lane = g;
#else
    const int xl = kseg * S * DL_KSTEP + lane * 4;
    struct Step { uint4 r[DL_TILE_N]; };
    const int row_lane = 0;
#endif
    const int kl = k0 + xl;  // and within K
    // the load cursor: the next step to load, as (step in segment, k, first row, address);
    // loads out of range (past K, past N, past the last step) are zeros that read nothing
    int l_s = 0, l_k = kl, l_row = tile0 * DL_TILE_N + row_lane;
    const floatX *l_ptr = a.W + (size_t)l_row * K + kl;
    const long long group_jump = (long long)tiles_per_iter * DL_TILE_N * K - (long long)S * DL_KSTEP;
    auto load_next = [&](bool live) {
        Step w;
#if DL_MMA
        w = make_uint4(0, 0, 0, 0);
        if (live && l_k < K && l_row < N) w = dl_load_w(l_ptr);
#else
#pragma unroll
        for (int r = 0; r < DL_TILE_N; r++) {
            w.r[r] = make_uint4(0, 0, 0, 0);
            if (live && l_k < K && l_row + r < N) w.r[r] = dl_load_w(l_ptr + (size_t)r * K);
        }
#endif
        l_k += DL_KSTEP;
        l_ptr += DL_KSTEP;
        if (++l_s == S) {
            l_s = 0;
            l_k = kl;
            l_row += tiles_per_iter * DL_TILE_N;
            l_ptr += group_jump;
        }
        return w;
    };

    // fill the ring before waiting on the previous kernel: weights only
    Step ring[DL_PF];
#pragma unroll
    for (int u = 0; u < DL_PF; u++) ring[u] = load_next(u < T);
    pdl_trigger();
    pdl_wait();
    const int kn = min(K - k0, a.KS * S * DL_KSTEP);  // (a layernorm's block has all of K: k0 = 0)
    dl_stage_input(a, xs, k0, kn > 0 ? kn : 0);

#if DL_MMA
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    const floatX *xrow = xs + g * a.xstride;
    const bool has_row = g < a.B;
#else
    float acc[DL_TILE_N][NBT];
#pragma unroll
    for (int r = 0; r < DL_TILE_N; r++)
#pragma unroll
        for (int b = 0; b < NBT; b++) acc[r][b] = 0.0f;
#endif
    int c_it = 0, c_s = 0;  // the step being consumed
    for (int j0 = 0; j0 < T; j0 += DL_PF) {
#pragma unroll
        for (int u = 0; u < DL_PF; u++) {
            if (j0 + u >= T) break;  // (uniform over the block)
            // this step's weights, then the load that refills their slot (into the same
            // registers: the ring is never copied)
            const int x = xl + c_s * DL_KSTEP;  // (k = k0 + x)
            const bool in_k = k0 + x < K;
#if DL_MMA
            uint4 xv = make_uint4(0, 0, 0, 0);
            if (has_row && in_k) xv = *reinterpret_cast<const uint4 *>(xrow + x);
            dl_mma(acc[0][0], acc[0][1], xv.x, xv.y, ring[u].x, ring[u].y);
            dl_mma(acc[1][0], acc[1][1], xv.z, xv.w, ring[u].z, ring[u].w);
#else
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= a.B) break;
                float4 xv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (in_k) xv = *reinterpret_cast<const float4 *>(xs + b * a.xstride + x);
#pragma unroll
                for (int r = 0; r < DL_TILE_N; r++) {
                    const float4 wv = *reinterpret_cast<const float4 *>(&ring[u].r[r]);
                    float s = acc[r][b];
                    s += wv.x * xv.x;
                    s += wv.y * xv.y;
                    s += wv.z * xv.z;
                    s += wv.w * xv.w;
                    acc[r][b] = s;
                }
            }
#endif
            ring[u] = load_next(j0 + u + DL_PF < T);
            if (++c_s == S) {  // the tile group's last step: its partial sums out
                float *p = part + (c_it * nwarps + warp) * DL_PART_FLOATS;
#if DL_MMA
                if (has_row) {
                    p[g * DL_TILE_N + 2 * t] = acc[0][0] + acc[1][0];
                    p[g * DL_TILE_N + 2 * t + 1] = acc[0][1] + acc[1][1];
                }
                acc[0][0] = acc[0][1] = acc[1][0] = acc[1][1] = 0.0f;
#else
#pragma unroll
                for (int r = 0; r < DL_TILE_N; r++)
#pragma unroll
                    for (int b = 0; b < NBT; b++) {
                        const float v = warp_sum(acc[r][b]);
                        if (lane == 0) p[b * DL_TILE_N + r] = v;
                        acc[r][b] = 0.0f;
                    }
#endif
                c_s = 0;
                c_it++;
            }
        }
    }
    dl_finish(a, part, rowgroup, rank);
}

// ---------------------------------------------------------------------------
// host side

typedef struct {
    // the split over warps, blocks and clusters: these alone fix each output's summation order
    int KSB, KS, S, TB, warps;
    int xstride;          // elements between staged input rows
    size_t smem_per_row;  // dynamic shared memory: B * smem_per_row + iters * smem_per_iter
    size_t smem_per_iter;
    int iters, grid;      // set by decode_linear_grid
} DecodeLinearPlan;

static size_t decode_linear_smem(const DecodeLinearPlan *p, int B, int iters) {
    return B * p->smem_per_row + iters * p->smem_per_iter;
}

static int decode_linear_num_sms(void) {
    enum { MAX_DEVICES = 64 };
    static int sms[MAX_DEVICES];
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= MAX_DEVICES) fatal("decode_linear: device %d: at most %d devices", dev, MAX_DEVICES);
    if (!sms[dev]) CUDA_CHECK(cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev));
    return sms[dev];
}

typedef void (*DecodeLinearKernel)(DecodeLinearArgs);
static DecodeLinearKernel decode_linear_kernel_for(int B) {
#if DL_MMA
    (void)B;
    return decode_linear_kernel<8>;
#else
    return B <= 1 ? decode_linear_kernel<1> : B <= 2 ? decode_linear_kernel<2> : B <= 4 ? decode_linear_kernel<4>
                                                                                      : decode_linear_kernel<8>;
#endif
}

// the kernel's dynamic shared memory opt-in, raised as far as a call needs (once per kernel
// and device)
static void decode_linear_smem_optin(DecodeLinearKernel fn, size_t smem) {
    if (smem <= 48 * 1024) return;
    enum { SLOTS = 64 };
    static struct { DecodeLinearKernel fn; int dev; size_t smem; } set[SLOTS];
    static int used = 0;
    int dev = 0, i;
    CUDA_CHECK(cudaGetDevice(&dev));
    for (i = 0; i < used && !(set[i].fn == fn && set[i].dev == dev); i++) {}
    if (i < used && set[i].smem >= smem) return;
    CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (i == used && used < SLOTS) { set[i].fn = fn; set[i].dev = dev; used++; }
    if (i < used) set[i].smem = smem;
}

// blocks of this kernel one SM holds at this size (asked once per kernel, size and device)
static int decode_linear_blocks_per_sm(DecodeLinearKernel fn, int threads, size_t smem) {
    enum { SLOTS = 128 };
    static struct { DecodeLinearKernel fn; int dev, threads; size_t smem; int blocks; } cache[SLOTS];
    static int used = 0;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    for (int i = 0; i < used; i++)
        if (cache[i].fn == fn && cache[i].dev == dev && cache[i].threads == threads && cache[i].smem == smem)
            return cache[i].blocks;
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, threads, smem));
    if (used < SLOTS) {
        cache[used].fn = fn; cache[used].dev = dev; cache[used].threads = threads; cache[used].smem = smem;
        cache[used].blocks = blocks;
        used++;
    }
    return blocks;
}

static int dl_pow2_floor(int x) {
    int p = 1;
    while (2 * p <= x) p *= 2;
    return p;
}

// The split of (K, N) over warps, blocks and clusters on a GPU of num_sms SMs (clusters: sm_90).
static DecodeLinearPlan decode_linear_plan(int K, int N, DecodeIn pro, int num_sms, int clusters) {
    DecodeLinearPlan p;
    const int steps = ceil_div(K, DL_KSTEP), tiles = ceil_div(N, DL_TILE_N);
    p.KSB = 1;
    if (clusters && pro == DECODE_IN_PLAIN && tiles < 2 * num_sms && steps >= 2) {
        // narrow output, plain input: K split over the blocks of a cluster, each block a warp per
        // tile over its slice and as many tiles as keep the grid at one block an SM or more
        p.KSB = steps < DL_MAX_CLUSTER ? steps : DL_MAX_CLUSTER;
        p.KS = 1;
        p.S = ceil_div(steps, p.KSB);
        p.KSB = ceil_div(steps, p.S);  // (no empty slices)
        const int tb = dl_pow2_floor((int)((long)tiles * p.KSB / num_sms));
        p.TB = tb > DL_BLOCK_WARPS ? DL_BLOCK_WARPS : tb;
    } else {
        // otherwise about a block an SM: TB tiles, whose K is split over KS warps (more at
        // small N, where the tiles alone would leave the SMs short of warps)
        const int tb = dl_pow2_floor(tiles / num_sms > 1 ? tiles / num_sms : 1);
        p.TB = tb > DL_BLOCK_WARPS ? DL_BLOCK_WARPS : tb;
        int ks = DL_BLOCK_WARPS / p.TB;
        if (p.TB == 1) {
            const int want = ceil_div((long)num_sms * DL_WARPS_PER_SM, tiles);
            if (want > ks) ks = want;
        }
        ks = ks > DL_MAX_KS ? DL_MAX_KS : ks;
        if (ks > steps) ks = steps;
        p.S = ceil_div(steps, ks);
        p.KS = ceil_div(steps, p.S);  // (no empty segments)
    }
    p.warps = p.KS * p.TB;
    // the block's slice of K, its rows 64 mod 128 bytes apart (bank spread for the mma path)
    const int kb = p.KSB > 1 ? p.KS * p.S * DL_KSTEP : K;
    p.smem_per_row = ((size_t)kb * sizeof(floatX) + 127) / 128 * 128 + 64;
    p.xstride = (int)(p.smem_per_row / sizeof(floatX));
    p.smem_per_iter = (size_t)p.warps * DL_PART_FLOATS * sizeof(float);
    p.iters = p.grid = 0;
    return p;
}

// The grid for B rows. With a cluster: a block per (row group, slice of K). Otherwise a block
// per row group if half of what the SMs hold suffices (room for the next kernel's blocks under
// PDL), else up to all they hold, each block walking `iters` row groups (at most DL_MAX_ITERS:
// beyond, more waves), spread evenly.
static void decode_linear_grid(DecodeLinearPlan *p, int B, int N, int num_sms) {
    const int blocks = ceil_div(ceil_div(N, DL_TILE_N), p->TB);
    const DecodeLinearKernel fn = decode_linear_kernel_for(B);
    if (p->KSB > 1) {
        p->iters = 1;
        p->grid = blocks * p->KSB;
    } else {
        decode_linear_smem_optin(fn, decode_linear_smem(p, B, 1));
        int full = decode_linear_blocks_per_sm(fn, 32 * p->warps, decode_linear_smem(p, B, 1));
        full = full < 1 ? 1 : full;
        int cap = num_sms * (full / 2 < 1 ? 1 : full / 2);
        if (blocks > cap) cap = num_sms * full;  // (a long kernel: its own throughput first)
        p->iters = ceil_div(blocks, cap);
        if (p->iters > DL_MAX_ITERS) p->iters = DL_MAX_ITERS;
        p->grid = ceil_div(blocks, p->iters);
    }
    decode_linear_smem_optin(fn, decode_linear_smem(p, B, p->iters));
}

// p: from decode_linear_grid (which raised the shared-memory opt-in for B rows)
static void decode_linear_launch(const DecodeLinearPlan *p, floatX *out, const floatX *in, const floatX *W,
                                 const floatX *bias, int B, int K, int N, DecodeIn pro, const floatX *ln_w,
                                 const floatX *ln_b, DecodeOut epi, int pdl, cudaStream_t s) {
    const DecodeLinearKernel fn = decode_linear_kernel_for(B);
    DecodeLinearArgs a;
    a.out = out; a.in = in; a.W = W; a.bias = bias; a.ln_w = ln_w; a.ln_b = ln_b;
    a.B = B; a.K = K; a.N = N; a.pro = (int)pro; a.epi = (int)epi;
    a.KSB = p->KSB; a.KS = p->KS; a.S = p->S; a.TB = p->TB; a.iters = p->iters; a.xstride = p->xstride;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(p->grid);
    cfg.blockDim = dim3(32 * p->warps);
    cfg.dynamicSmemBytes = decode_linear_smem(p, B, p->iters);
    cfg.stream = s;
    cudaLaunchAttribute attr[2] = {};
    int n = 0;
    if (p->KSB > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = p->KSB;
        attr[n].val.clusterDim.y = 1;
        attr[n].val.clusterDim.z = 1;
        n++;
    }
    if (pdl) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, fn, a));
}

// out (B, N) = epilogue(prologue(in) (B, K) W^T + bias); W (N, K) row-major (the model's
// layout), bias (N) or NULL.
// DECODE_IN_LAYERNORM: each row of in is first layer-normed with ln_w, ln_b (K each) exactly as
//   kernels/layernorm.cuh does (fp32 statistics, LN_EPS), the normalised value rounded to floatX
//   as the training forward stores it.
// DECODE_OUT_PLAIN: out = round(acc + bias); DECODE_OUT_GELU: out = round(gelu_f(acc + bias));
//   DECODE_OUT_RESIDUAL: out is the residual stream, updated in place:
//   out = round(float(out) + float(round(acc + bias))).
// in must not alias out. 1 <= B <= DECODE_LINEAR_MAX_ROWS; K a multiple of 8 (16-byte rows); in,
// W, ln_w, ln_b 16-byte aligned.
// pdl: launched with programmatic dependent launch (compute capability 9.0 and newer, and code
//   built for it; ignored otherwise): the weights start loading before the previous kernel on
//   the stream has finished, in and out are read only after it has. W must not be written by a
//   kernel of the same chain of PDL launches. The kernel lets its own dependents start at once
//   (pdl or not): a kernel launched after it with PDL must wait (griddepcontrol.wait,
//   cudaGridDependencySynchronize) before it reads out. Correct in CUDA graph capture and without.
// Bit-identical results on every run, for pdl 0 and 1, in a graph or not, and a row's result is
// the same whatever the other rows of the call (on one GPU model: the split depends on its SM count).
static void decode_linear(floatX *out, const floatX *in, const floatX *W, const floatX *bias, int B, int K, int N,
                          DecodeIn pro, const floatX *ln_w, const floatX *ln_b, DecodeOut epi, int pdl,
                          cudaStream_t s) {
    if (B < 1 || B > DECODE_LINEAR_MAX_ROWS)
        fatal("decode_linear: B=%d rows; it takes 1 to %d", B, DECODE_LINEAR_MAX_ROWS);
    if (K < 8 || K % 8 != 0) fatal("decode_linear: K=%d; it takes a positive multiple of 8 (16-byte rows)", K);
    if (N < 1) fatal("decode_linear: N=%d outputs", N);
    if (pro != DECODE_IN_PLAIN && pro != DECODE_IN_LAYERNORM) fatal("decode_linear: unknown prologue %d", (int)pro);
    if (epi != DECODE_OUT_PLAIN && epi != DECODE_OUT_GELU && epi != DECODE_OUT_RESIDUAL)
        fatal("decode_linear: unknown epilogue %d", (int)epi);
    if (pro == DECODE_IN_LAYERNORM && (!ln_w || !ln_b))
        fatal("decode_linear: the layernorm prologue needs its weight and bias");
    if (!out || !in || !W) fatal("decode_linear: out, in and W must be given");
    if (((uintptr_t)in | (uintptr_t)W | (uintptr_t)(pro == DECODE_IN_LAYERNORM ? ln_w : NULL) |
         (uintptr_t)(pro == DECODE_IN_LAYERNORM ? ln_b : NULL)) % 16)
        fatal("decode_linear: in, W, ln_w and ln_b must be 16-byte aligned");
    const char *ib = (const char *)in, *ie = (const char *)(in + (size_t)B * K);
    const char *ob = (const char *)out, *oe = (const char *)(out + (size_t)B * N);
    if (ib < oe && ob < ie) fatal("decode_linear: in and out overlap");
    const DeviceCaps *caps = device_caps();
    if (!caps) fatal("decode_linear: no GPU");
    const int num_sms = decode_linear_num_sms();
    const int sm90 = caps->cc >= 90 && sm90_code();  // (PDL, clusters)
    const DecodeLinearPlan plan = decode_linear_plan(K, N, pro, num_sms, sm90);
    // the rows whose staged input fits a block's shared memory (all 8 on sm_90 up to K of about
    // 14000 in bf16); more go in turns, each re-reading W
    const size_t fixed = decode_linear_smem(&plan, 0, DL_MAX_ITERS);
    if (fixed + plan.smem_per_row > (size_t)caps->smem_optin)
        fatal("decode_linear: K=%d needs %zu bytes of shared memory a block; this GPU allows %d", K,
              fixed + plan.smem_per_row, caps->smem_optin);
    int rows = (int)(((size_t)caps->smem_optin - fixed) / plan.smem_per_row);
    if (rows > B) rows = B;
    for (int b0 = 0; b0 < B; b0 += rows) {
        const int nb = B - b0 < rows ? B - b0 : rows;
        DecodeLinearPlan p = plan;
        decode_linear_grid(&p, nb, N, num_sms);
        decode_linear_launch(&p, out + (size_t)b0 * N, in + (size_t)b0 * K, W, bias, nb, K, N, pro, ln_w, ln_b,
                             epi, pdl && sm90, s);
    }
}
