// kernels/decode_linear.cuh: the linear layers of generation, where a forward is a handful of
// rows (B <= 8 tokens): out (B, N) = epilogue(prologue(in) (B, K) W^T + bias), W (N, K) as the
// model keeps it. Prologue: nothing, or the row's layernorm; epilogue: bias, then nothing, GELU
// or the add into the residual stream. A matrix-vector product: every weight is used B times,
// so the time is the time to read W once, and the kernel is built around reading it at the
// memory's rate.
//
// Why it looks the way it does:
//  - Work split. Output rows go in tiles of 8 (the N side of one mma, below); a tile's K is cut
//    into KS segments, one warp each, and the KS partial sums meet in shared memory inside the
//    block. KS grows until the grid has about 16 warps per SM: at N = C (attproj, fcproj: 96
//    tiles at d12) a warp per tile would leave most SMs idle and every warp a long serial walk.
//    No split crosses blocks, so nothing goes through global scratch or atomics, and each output
//    is summed in one fixed order (lane chains in k order, then the segments in order, then the
//    bias): bit-identical on every run, with or without PDL or a graph, and whatever the other
//    rows of the call (B = 1 gives a row the bits B = 8 gives it). The split depends only on
//    (K, N) and the GPU's SM count.
//  - Loads. Each weight byte is read once, 16 bytes a lane, through the non-coherent path with
//    no L1 allocation and a 256-byte L2 prefetch hint (W is read-only while we run, and those
//    256 bytes are this or a neighbouring warp's next steps, so the hint only cuts the number of
//    DRAM requests). A lane keeps DL_PF steps of loads in flight in a register ring, refilled
//    the step its slot is consumed: 8 x 16 bytes, 4 KB a warp, 32 KB an SM at 8 warps, above the
//    ~25 KB an H100 SM must have in flight to draw its share of 3.35 TB/s at ~1 us latency.
//  - Grid. One block per tile group when half of what the SMs hold suffices, so that the next
//    kernel's blocks fit beside ours under PDL; else (the lm_head) up to all the SMs hold, each
//    block walking several tile groups, spread evenly, the register ring running on across them.
//    Every warp of a block has the same number of steps: the barriers in the loop are uniform.
//  - PDL. The ring is filled (8 steps of every warp: all of W for d12's layers but the lm_head)
//    before griddepcontrol.wait, so the weight stream overlaps the previous kernel's tail; in and
//    the residual are read only after the wait. The kernel triggers its dependents at once: they
//    too only prefetch weights before their own wait, which covers our completion. So W must not
//    be written by a kernel that can still run when the call starts, in a chain of PDL launches
//    (the weights are constant during generation).
//  - Input. The B input rows (after the prologue) are staged in shared memory as floatX, each
//    block its own copy: B x K x 2 bytes of L2 reads a block, small next to its weight bytes but
//    at the smallest layers, where latency rules anyway. The layernorm prologue recomputes each
//    row's statistics in every block, in layernorm_forward_kernel's exact order (a warp per row,
//    lane l over vectors l, l+32, ..., a butterfly warp_sum): the normalised values are the
//    training forward's bit for bit, for two passes over B x K of shared memory. Rows are 64 mod
//    128 bytes apart so that the mma path's reads of 8 rows spread over the banks.
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

#define DECODE_LINEAR_MAX_ROWS 8
typedef enum { DECODE_IN_PLAIN, DECODE_IN_LAYERNORM } DecodeIn;
typedef enum { DECODE_OUT_PLAIN, DECODE_OUT_GELU, DECODE_OUT_RESIDUAL } DecodeOut;

#define DL_TILE_N 8          // output rows per tile
#define DL_BLOCK_WARPS 8     // warps a block aims for (several tiles per block when KS is small)
#define DL_WARPS_PER_SM 16   // split-K target: warps per SM over the whole grid
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
    int KS;       // warps (k segments) per tile
    int S;        // steps per segment
    int TB;       // tiles a block works on at once (warps = KS * TB)
    int iters;    // tile groups per block
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
__device__ __forceinline__ void dl_grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void dl_trigger_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#if DL_MMA
// d = a b + c for one m16n8k16 tile, rows 8..15 of a zero (a1 = a3 = 0): c0, c1 are row g's
// columns 2t, 2t+1, the only ones used
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

// The block's input rows into shared memory (xs, rows xstride apart), layer-normed in place
// when asked. L2 loads: in was written by the previous kernel, which PDL lets overlap us.
__device__ __forceinline__ void dl_stage_input(const DecodeLinearArgs &a, floatX *xs) {
    constexpr int V = X128::size;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int K = a.K, nvec = K / V;
    for (int i = threadIdx.x; i < a.B * nvec; i += blockDim.x) {
        const int b = i / nvec, c = (i - b * nvec) * V;
        const uint4 v = __ldcg(reinterpret_cast<const uint4 *>(a.in + (size_t)b * K + c));
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

// Tile end, after each warp of the block wrote its partial sums of tile group `it` to part:
// the first warp of each tile's KS sums them in segment order, adds the bias, applies the
// epilogue and stores. part: [2][warps][DL_PART_FLOATS], [b * 8 + r] within a warp's.
__device__ __forceinline__ void dl_finish_tile(const DecodeLinearArgs &a, const float *part, int it, int tg,
                                               int kseg, int lane) {
    if (a.KS > 1) __syncthreads();
    else __syncwarp();
    if (kseg != 0) return;
    const int nwarps = blockDim.x / 32;
    const int tile = (it * gridDim.x + blockIdx.x) * a.TB + tg;
    const float *p = part + ((it & 1) * nwarps + tg * a.KS) * DL_PART_FLOATS;
#pragma unroll 1
    for (int idx = lane; idx < a.B * DL_TILE_N; idx += 32) {
        const int b = idx / DL_TILE_N, n = tile * DL_TILE_N + idx % DL_TILE_N;
        if (n >= a.N) continue;
        float v = 0.0f;
#pragma unroll 1
        for (int q = 0; q < a.KS; q++) v += p[q * DL_PART_FLOATS + idx];
        if (a.bias) v += to_float(a.bias[n]);
        floatX *o = a.out + (size_t)b * a.N + n;
        if (a.epi == DECODE_OUT_GELU) {
            *o = from_float<floatX>(gelu_f(v));
        } else if (a.epi == DECODE_OUT_RESIDUAL) {
            const float r = to_float(__ldcg(o));
            *o = from_float<floatX>(r + to_float(from_float<floatX>(v)));
        } else {
            *o = from_float<floatX>(v);
        }
    }
}

// NBT: input rows the fp32 path's accumulators hold (B rounded up to a power of two); the mma
// path always takes 8 (its rows are the mma's, zero past B).
// dynamic shared memory: B rows of xstride floatX, then 2 x warps x DL_PART_FLOATS floats
template <int NBT>
__global__ void __launch_bounds__(32 * DL_MAX_WARPS) decode_linear_kernel(DecodeLinearArgs a) {
    extern __shared__ __align__(16) unsigned char dl_smem[];
    floatX *xs = reinterpret_cast<floatX *>(dl_smem);
    float *part = reinterpret_cast<float *>(dl_smem + (size_t)a.B * a.xstride * sizeof(floatX));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    const int tg = warp / a.KS, kseg = warp % a.KS;
    const int S = a.S, T = a.iters * S, K = a.K, N = a.N;
    const int tiles_per_iter = gridDim.x * a.TB;
    const int tile0 = blockIdx.x * a.TB + tg;
#if DL_MMA
    const int g = lane / 4, t = lane % 4;
    const int kl = kseg * S * DL_KSTEP + t * 8;  // this lane's k at step 0 of its segment
    typedef uint4 Step;
#else
    const int kl = kseg * S * DL_KSTEP + lane * 4;
    struct Step { uint4 r[DL_TILE_N]; };
#endif
    // the load cursor: the next step to load, as (tile group, step), this lane's k and first
    // row there, and its address; loads out of range (past K, past N, past the last step) are
    // zeros that read nothing
#if DL_MMA
    const int row_lane = g;
#else
    const int row_lane = 0;
#endif
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
    dl_trigger_dependents();
    dl_grid_dependency_wait();
    dl_stage_input(a, xs);

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
            // registers: the ring never needs copying)
            const int k = kl + c_s * DL_KSTEP;
#if DL_MMA
            uint4 xv = make_uint4(0, 0, 0, 0);
            if (has_row && k < K) xv = *reinterpret_cast<const uint4 *>(xrow + k);
            dl_mma(acc[0][0], acc[0][1], xv.x, xv.y, ring[u].x, ring[u].y);
            dl_mma(acc[1][0], acc[1][1], xv.z, xv.w, ring[u].z, ring[u].w);
#else
#pragma unroll
            for (int b = 0; b < NBT; b++) {
                if (b >= a.B) break;
                float4 xv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (k < K) xv = *reinterpret_cast<const float4 *>(xs + b * a.xstride + k);
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
            if (++c_s == S) {  // the tile group's last step: partial sums out, epilogue
                float *p = part + ((c_it & 1) * nwarps + warp) * DL_PART_FLOATS;
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
                dl_finish_tile(a, part, c_it, tg, kseg, lane);
                c_s = 0;
                c_it++;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// host side

typedef struct {
    int KS, S, TB, warps;  // the split of (K, N) over warps: it alone fixes each output's summation order
    int xstride;           // elements between staged input rows
    size_t smem_fixed, smem_per_row;  // dynamic shared memory: smem_fixed + B * smem_per_row
    int iters, grid;       // set by decode_linear_grid
} DecodeLinearPlan;

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

// The split of (K, N) over warps on a GPU of num_sms SMs: KS grows until the grid has about
// DL_WARPS_PER_SM warps an SM (or each segment is one step).
static DecodeLinearPlan decode_linear_plan(int K, int N, int num_sms) {
    DecodeLinearPlan p;
    const int steps = ceil_div(K, DL_KSTEP), tiles = ceil_div(N, DL_TILE_N);
    int ks = ceil_div((long)num_sms * DL_WARPS_PER_SM, tiles);
    ks = ks < 1 ? 1 : ks > DL_MAX_KS ? DL_MAX_KS : ks;
    if (ks > steps) ks = steps;
    p.S = ceil_div(steps, ks);
    p.KS = ceil_div(steps, p.S);  // (no empty segments)
    p.TB = p.KS >= DL_BLOCK_WARPS ? 1 : DL_BLOCK_WARPS / p.KS;
    p.warps = p.KS * p.TB;
    // rows 64 mod 128 bytes apart (bank spread for the mma path's 8-row reads)
    p.smem_per_row = ((size_t)K * sizeof(floatX) + 127) / 128 * 128 + 64;
    p.xstride = (int)(p.smem_per_row / sizeof(floatX));
    p.smem_fixed = (size_t)2 * p.warps * DL_PART_FLOATS * sizeof(float);
    p.iters = p.grid = 0;
    return p;
}

// The grid for B rows: one block per tile group if half of what the SMs hold suffices (room
// for the next kernel's blocks under PDL), else up to all they hold, each block walking `iters`
// tile groups, spread evenly.
static void decode_linear_grid(DecodeLinearPlan *p, int B, int N, int num_sms) {
    const int blocks = ceil_div(ceil_div(N, DL_TILE_N), p->TB);
    const DecodeLinearKernel fn = decode_linear_kernel_for(B);
    const size_t smem = p->smem_fixed + B * p->smem_per_row;
    decode_linear_smem_optin(fn, smem);
    int full = decode_linear_blocks_per_sm(fn, 32 * p->warps, smem);
    full = full < 1 ? 1 : full;
    int cap = num_sms * (full / 2 < 1 ? 1 : full / 2);
    if (blocks > cap) cap = num_sms * full;  // (a long kernel: its own throughput first)
    p->iters = ceil_div(blocks, cap);
    p->grid = ceil_div(blocks, p->iters);
}

// p: from decode_linear_grid (which raised the shared-memory opt-in for B rows)
static void decode_linear_launch(const DecodeLinearPlan *p, floatX *out, const floatX *in, const floatX *W,
                                 const floatX *bias, int B, int K, int N, DecodeIn pro, const floatX *ln_w,
                                 const floatX *ln_b, DecodeOut epi, int pdl, cudaStream_t s) {
    const DecodeLinearKernel fn = decode_linear_kernel_for(B);
    const size_t smem = p->smem_fixed + B * p->smem_per_row;
    DecodeLinearArgs a;
    a.out = out; a.in = in; a.W = W; a.bias = bias; a.ln_w = ln_w; a.ln_b = ln_b;
    a.B = B; a.K = K; a.N = N; a.pro = (int)pro; a.epi = (int)epi;
    a.KS = p->KS; a.S = p->S; a.TB = p->TB; a.iters = p->iters; a.xstride = p->xstride;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(p->grid);
    cfg.blockDim = dim3(32 * p->warps);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
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
// pdl: launched with programmatic dependent launch (compute capability 9.0 and newer; ignored
//   below): the weights start loading before the previous kernel on the stream has finished, in
//   and out are read only after it has. W must not be written by a kernel of the same chain of
//   PDL launches. Correct in CUDA graph capture and without.
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
    const DecodeLinearPlan plan = decode_linear_plan(K, N, num_sms);
    // the rows whose staged input fits a block's shared memory (all 8 on sm_90 up to K of about
    // 14000 in bf16); more go in turns, each re-reading W
    if (plan.smem_fixed + plan.smem_per_row > (size_t)caps->smem_optin)
        fatal("decode_linear: K=%d needs %zu bytes of shared memory a block; this GPU allows %d", K,
              plan.smem_fixed + plan.smem_per_row, caps->smem_optin);
    int rows = (int)(((size_t)caps->smem_optin - plan.smem_fixed) / plan.smem_per_row);
    if (rows > B) rows = B;
    for (int b0 = 0; b0 < B; b0 += rows) {
        const int nb = B - b0 < rows ? B - b0 : rows;
        DecodeLinearPlan p = plan;
        decode_linear_grid(&p, nb, N, num_sms);
        decode_linear_launch(&p, out + (size_t)b0 * N, in + (size_t)b0 * K, W, bias, nb, K, N, pro, ln_w, ln_b,
                             epi, pdl && caps->cc >= 90, s);
    }
}
