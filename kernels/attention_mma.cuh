// kernels/attention_mma.cuh: flash attention on the tensor cores' mma.sync (bf16 / fp16
// builds), the kernels every GPU from sm_80 on can run: attention.cuh takes them wherever the
// Hopper kernels (attention_sm90.cuh, attention_sm90_ws.cuh) do not run.
// Tensor-core mma.sync m16n8k16 (fp32 accumulation) fed by ldmatrix from XOR-swizzled
// shared-memory tiles loaded with cp.async; online softmax in the forward; the backward
// recomputes P from q, k and the forward's log-sum-exp (FlashAttention-2 scheme).
// Two backwards. The deterministic one: dk, dv come from one kernel that owns a block of keys
// and walks the query blocks; dq from a second kernel that owns a block of queries and walks
// the key blocks (recomputing S and dP there: 7 matrix products instead of 5, but no atomics
// and a fixed summation order). The atomic-dq one: the dk/dv kernel also adds dS K into an
// fp32 dq accumulator with atomics (5 products; dq's last bits depend on the order of
// arrival). scratch holds D = rowsum(dO*O) (and the dq accumulator): its layout is here, as
// every flash backward's bwd_dot writes it and attention.cuh sizes it in every build.
// Head sizes 64 and 128; the tile shapes per head size (Cfg) and their launchers are here too.
#pragma once
#include "common.cuh"

// floats of backward scratch: D (B*NH*T), the v-bias gradient's partial rows
// (FLASH_VB_PARTS x C), and for the atomic-dq backward (deterministic == 0) the fp32 dq
// accumulator, B*T*C more. Each part starts at a multiple of 64 floats (float4 accesses).
#define FLASH_VB_PARTS 264
static size_t flash_align64(size_t n) { return (n + 63) / 64 * 64; }
static size_t flash_vb_offset(size_t rows) { return flash_align64(rows); }
static size_t flash_dq_acc_offset(size_t rows, int C) {
    return flash_align64(flash_vb_offset(rows) + (size_t)FLASH_VB_PARTS * C);
}

#if PRECISION != PRECISION_FP32

namespace flash {

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const floatX *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const floatX *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
// d (16x8 fp32) += a (16x16, row) * b (16x8, col)
__device__ __forceinline__ void mma16816(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if PRECISION == PRECISION_BF16
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
// 2^x straight through the hardware unit (ex2.approx.ftz: about 2 ulp, denormal results
// flushed to 0, 2^-inf = 0; measured 5% faster forward and 3% backward than exp2f, with
// every kernel check passing)
__device__ __forceinline__ float fast_exp2(float x) { return ex2_approx(x); }
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
#if PRECISION == PRECISION_BF16
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
#else
    __half2 v = __floats2half2_rn(lo, hi);
#endif
    return *reinterpret_cast<uint32_t *>(&v);
}

// Tiles in shared memory: ROWS x HS floatX, row-major, the 16-byte chunk c of row r stored at
// chunk position c ^ (r & 7), so that the 8 rows one ldmatrix reads fall in different banks.
template <int HS>
__device__ __forceinline__ const floatX *tile_at(const floatX *s, int r, int chunk) {
    return s + r * HS + ((chunk ^ (r & 7)) << 3);
}
// rows row0.. of a (T, stride) global matrix; rows >= T are zero-filled. Thread t copies
// chunk t % CH of rows t / CH, + NT / CH, ...: a fixed trip count, so the loop unrolls into
// straight cp.async issues (the strided loop over i it replaces cost ~150 integer
// instructions per thread and key block, a quarter of the forward's instructions).
template <int ROWS, int HS, int NT>
__device__ __forceinline__ void load_tile(floatX *s, const floatX *g, int row0, int stride, int T) {
    constexpr int CH = HS / 8, RSTEP = NT / CH;
    static_assert(NT % CH == 0, "load_tile: the block's threads must cover whole rows");
    const int r = threadIdx.x / CH, c = threadIdx.x % CH;
    const floatX *gp = g + (size_t)(row0 + r) * stride + c * 8;
#pragma unroll
    for (int j = 0; j < (ROWS + RSTEP - 1) / RSTEP; j++) {
        const int rr = r + j * RSTEP;
        if (ROWS % RSTEP != 0 && rr >= ROWS) break;
        const bool ok = row0 + rr < T;
        cp_async16(s + rr * HS + ((c ^ (rr & 7)) << 3), ok ? gp + (size_t)j * RSTEP * stride : g, ok);
    }
}
// A fragment (16x16) at rows m0.., cols k0.. of a row-major tile
template <int HS>
__device__ __forceinline__ void ldsm_A(uint32_t *a, const floatX *s, int m0, int k0, int lane) {
    ldsm_x4(a, tile_at<HS>(s, m0 + (lane & 15), (k0 >> 3) + (lane >> 4)));
}
// B fragments of two n8 tiles (n0.., n0+8..) for k16 at k0, B = X^T with X row-major [n][k]
template <int HS>
__device__ __forceinline__ void ldsm_Bnt(uint32_t *b, const floatX *s, int n0, int k0, int lane) {
    ldsm_x4(b, tile_at<HS>(s, n0 + (lane & 7) + ((lane >> 4) << 3), (k0 >> 3) + ((lane >> 3) & 1)));
}
// the same with B = X, X row-major [k][n]
template <int HS>
__device__ __forceinline__ void ldsm_Bt(uint32_t *b, const floatX *s, int k0, int n0, int lane) {
    ldsm_x4_t(b, tile_at<HS>(s, k0 + (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4)));
}
// acc = A X^T for NT row tiles of 16: A's rows a_row0.. and X (N8 * 8 rows) both row-major
// tiles of width HS in shared memory. The dk/dv kernel's S^T = K Q^T and dP^T = V dO^T.
template <int HS, int NT, int N8>
__device__ __forceinline__ void mma_tile_by_tile_t(float (&acc)[NT][N8][4], const floatX *a, int a_row0,
                                                   const floatX *x, int lane) {
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int i = 0; i < N8; i++) acc[t][i][0] = acc[t][i][1] = acc[t][i][2] = acc[t][i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t af[NT][4];
#pragma unroll
        for (int t = 0; t < NT; t++) ldsm_A<HS>(af[t], a, a_row0 + t * 16, kk * 16, lane);
#pragma unroll
        for (int j = 0; j < N8 / 2; j++) {
            uint32_t bf[4];
            ldsm_Bnt<HS>(bf, x, j * 16, kk * 16, lane);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                mma16816(acc[t][2 * j], af[t], bf[0], bf[1]);
                mma16816(acc[t][2 * j + 1], af[t], bf[2], bf[3]);
            }
        }
    }
}
// acc += P X for NT row tiles of 16: P (NT x 16 rows, KN columns) is the fp32 result of an
// earlier product still in this warp's accumulator registers, whose C-fragment layout is the
// A-fragment layout once two columns are packed per register; X (KN x HS) is a row-major tile
// in shared memory. The forward's O += P V and the backward's dV, dK and dQ sums.
template <int HS, int NT, int KN8>  // KN8 = KN / 8, P's n8 column tiles
__device__ __forceinline__ void mma_regs_by_tile(float (&acc)[NT][HS / 8][4], const float (&p)[NT][KN8][4],
                                                 const floatX *x, int lane) {
#pragma unroll
    for (int kk = 0; kk < KN8 / 2; kk++) {
        uint32_t pa[NT][4];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            pa[t][0] = pack2(p[t][2 * kk][0], p[t][2 * kk][1]);
            pa[t][1] = pack2(p[t][2 * kk][2], p[t][2 * kk][3]);
            pa[t][2] = pack2(p[t][2 * kk + 1][0], p[t][2 * kk + 1][1]);
            pa[t][3] = pack2(p[t][2 * kk + 1][2], p[t][2 * kk + 1][3]);
        }
#pragma unroll
        for (int d = 0; d < HS / 16; d++) {
            uint32_t bf[4];
            ldsm_Bt<HS>(bf, x, kk * 16, d * 16, lane);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                mma16816(acc[t][2 * d], pa[t], bf[0], bf[1]);
                mma16816(acc[t][2 * d + 1], pa[t], bf[2], bf[3]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// forward: one block = BM = 16*MT*NW query rows of one head (each warp MT tiles of 16 rows,
// sharing each K/V fragment it reads from shared memory); key blocks of BN

template <int HS, int NW, int BN, int MT>
__global__ void __launch_bounds__(NW * 32) fwd_kernel(floatX *out, float *lse, const floatX *qkv, int T, int NH,
                                                     float scale_log2) {
    constexpr int BM = 16 * MT * NW, NT = NW * 32;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    floatX *sQ = reinterpret_cast<floatX *>(smem_raw);
    floatX *sK = sQ + BM * HS;       // 2 buffers
    floatX *sV = sK + 2 * BN * HS;   // 2 buffers
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
    const int mb = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const floatX *qb = qkv + (size_t)b * T * 3 * C + h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const int q0 = mb * BM, wrow = w * 16 * MT;  // this warp's rows: q0 + wrow + mt*16 + ...
    const int nblocks = min((q0 + BM + BN - 1) / BN, (T + BN - 1) / BN);

    load_tile<BM, HS, NT>(sQ, qb, q0, 3 * C, T);
    load_tile<BN, HS, NT>(sK, kb, 0, 3 * C, T);
    load_tile<BN, HS, NT>(sV, vb, 0, 3 * C, T);
    cp_async_commit();

    uint32_t qf[MT][HS / 16][4];
    float o[MT][HS / 8][4];
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int i = 0; i < HS / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
        mrow[mt][0] = mrow[mt][1] = -INFINITY;
        lrow[mt][0] = lrow[mt][1] = 0.0f;
    }

    for (int n = 0; n < nblocks; n++) {
        const int buf = n & 1;
        if (n + 1 < nblocks) {
            load_tile<BN, HS, NT>(sK + (buf ^ 1) * BN * HS, kb, (n + 1) * BN, 3 * C, T);
            load_tile<BN, HS, NT>(sV + (buf ^ 1) * BN * HS, vb, (n + 1) * BN, 3 * C, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (n == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < HS / 16; kk++) ldsm_A<HS>(qf[mt][kk], sQ, wrow + mt * 16, kk * 16, lane);
        }
        const floatX *cK = sK + buf * BN * HS, *cV = sV + buf * BN * HS;
        float s[MT][BN / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < BN / 8; i++) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 16; j++) {
#pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) {
                uint32_t bf[4];
                ldsm_Bnt<HS>(bf, cK, j * 16, kk * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816(s[mt][2 * j], qf[mt][kk], bf[0], bf[1]);
                    mma16816(s[mt][2 * j + 1], qf[mt][kk], bf[2], bf[3]);
                }
            }
        }
        const int k0 = n * BN;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int row_lo = q0 + wrow + mt * 16 + g;  // rows row_lo, row_lo + 8
            if (k0 + BN - 1 > q0 + wrow + mt * 16) {  // the diagonal crosses this tile: mask key > row
#pragma unroll
                for (int t = 0; t < BN / 8; t++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int key = k0 + t * 8 + 2 * tig + (e & 1), row = row_lo + (e >> 1) * 8;
                        if (key > row) s[mt][t][e] = -INFINITY;
                    }
            }
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int t = 0; t < BN / 8; t++) {
                mx[0] = fmaxf(mx[0], fmaxf(s[mt][t][0], s[mt][t][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[mt][t][2], s[mt][t][3]));
            }
            float alpha[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                float mnew = fmaxf(mrow[mt][r], mx[r] * scale_log2);  // finite: key 0 is seen in block 0
                alpha[r] = fast_exp2(mrow[mt][r] - mnew);
                mrow[mt][r] = mnew;
                lrow[mt][r] *= alpha[r];
            }
#pragma unroll
            for (int t = 0; t < BN / 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = fast_exp2(s[mt][t][e] * scale_log2 - mrow[mt][e >> 1]);
                    s[mt][t][e] = p;
                    lrow[mt][e >> 1] += p;
                }
#pragma unroll
            for (int i = 0; i < HS / 8; i++) {
                o[mt][i][0] *= alpha[0]; o[mt][i][1] *= alpha[0];
                o[mt][i][2] *= alpha[1]; o[mt][i][3] *= alpha[1];
            }
        }
        mma_regs_by_tile<HS>(o, s, cV, lane);
        __syncthreads();  // this buffer is refilled next iteration
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float l = lrow[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            int row = q0 + wrow + mt * 16 + g + r * 8;
            if (row < T) {
                float inv = 1.0f / l;
                floatX *op = out + ((size_t)b * T + row) * C + h * HS + 2 * tig;
#pragma unroll
                for (int i = 0; i < HS / 8; i++)
                    *reinterpret_cast<uint32_t *>(op + i * 8) = pack2(o[mt][i][2 * r] * inv, o[mt][i][2 * r + 1] * inv);
                if (tig == 0) lse[(size_t)bh * T + row] = (mrow[mt][r] + log2f(l)) * 0.69314718055994531f;
            }
        }
}

// ---------------------------------------------------------------------------------------
// backward, step 1: D = rowsum(dout * out) per (b, h, t), fp32; for the atomic-dq backward
// the row's dq accumulator zeroed (dq_acc may be NULL); and, with vb_part, the column sums
// of dout: the gradient of the v third of the qkv bias, since dv[j] = sum_i P[i][j] dout[i]
// and every row of P sums to 1 (one fp32 partial row of C per block, summed afterwards).
// A block is BWD_DOT_R token rows x C / X128::size threads, one 16-byte vector each, and
// walks a contiguous run of tokens: a warp reads whole 128-byte lines, and each thread keeps
// the same columns throughout, so its column sums stay in registers.
#define BWD_DOT_R 4  // C / 8 is a multiple of 8, so 4 rows make whole warps
template <int HS>
__global__ void bwd_dot_kernel(float *D, float *dq_acc, float *vb_part, const floatX *dout, const floatX *out, int N,
                               int T, int NH) {
    constexpr int V = X128::size, TPH = HS / V;  // threads per head: a power of two up to 32
    static_assert(HS % V == 0 && TPH <= 32 && (TPH & (TPH - 1)) == 0, "bwd_dot_kernel: head size");
    extern __shared__ float red[];  // BWD_DOT_R x C, with vb_part
    const int C = NH * HS, tpr = C / V, j = threadIdx.x % tpr, ty = threadIdx.x / tpr;
    const int h = j / TPH, part = j % TPH;
    const int per = (N + gridDim.x - 1) / gridDim.x, r0 = blockIdx.x * per, r1 = min(N, r0 + per);
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    // two rows a thread in flight; the trip count is the same for the whole block (the
    // shuffles below are full-warp)
    for (int base = r0; base < r1; base += 2 * BWD_DOT_R) {
        int bt[2];
        X128 d[2], o[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            bt[u] = base + u * BWD_DOT_R + ty;
            if (bt[u] < r1) {
                d[u] = load128cs(dout + (size_t)bt[u] * C + j * V);
                o[u] = load128cs(out + (size_t)bt[u] * C + j * V);
            } else {
                d[u] = X128::zeros();
                o[u] = X128::zeros();
            }
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            float dot = 0.0f;
#pragma unroll
            for (int k = 0; k < V; k++) {
                const float dk = to_float(d[u][k]);
                dot += dk * to_float(o[u][k]);
                acc[k] += dk;
            }
#pragma unroll
            for (int m = TPH / 2; m > 0; m >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, m);
            if (bt[u] >= r1) continue;
            const long b = bt[u] / T, t = bt[u] % T, drow = (b * NH + h) * T + t;
            if (part == 0) D[drow] = dot;
            if (dq_acc)
                for (int i = part * V; i < part * V + V; i += 4)
                    *reinterpret_cast<float4 *>(dq_acc + drow * HS + i) = make_float4(0, 0, 0, 0);
        }
    }
    if (!vb_part) return;
#pragma unroll
    for (int k = 0; k < V; k++) red[ty * C + j * V + k] = acc[k];
    __syncthreads();
    if (ty == 0)
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = 0.0f;
            for (int r = 0; r < BWD_DOT_R; r++) v += red[r * C + j * V + k];
            vb_part[(size_t)blockIdx.x * C + j * V + k] = v;
        }
}
// D into scratch (see flash_attention_backward_scratch_elems), dq_acc zeroed if not NULL,
// and dbias_v (C) += the column sums of dout if not NULL
template <int HS>
static void bwd_dot(float *scratch, float *dq_acc, floatX *dbias_v, const floatX *dout, const floatX *out, int B, int T,
                    int NH, cudaStream_t s) {
    const int C = NH * HS, N = B * T, threads = BWD_DOT_R * C / X128::size;
    const int parts = min(FLASH_VB_PARTS, ceil_div(N, BWD_DOT_R));
    float *vb_part = dbias_v ? scratch + flash_vb_offset((size_t)B * NH * T) : NULL;
    size_t smem = dbias_v ? (size_t)BWD_DOT_R * C * sizeof(float) : 0;
    bwd_dot_kernel<HS><<<parts, threads, smem, s>>>(scratch, dq_acc, vb_part, dout, out, N, T, NH);
    LAUNCH_CHECK();
    if (dbias_v) add_partial_sums(dbias_v, NULL, NULL, C, vb_part, parts, C, s);
}

// The atomic-dq backward's dS^T tile in shared memory: BN key rows x BM query columns, the
// 16-byte chunk c of row r stored at c ^ swz(r) so that the 8 rows of one ldmatrix, and the
// 8 rows one warp writes from its accumulators, fall in distinct banks. Element offset:
template <int BM>
__device__ __forceinline__ int ds_off(int r, int col) {
    static_assert(BM == 32 || BM == 64, "dS tile: BM must be 32 or 64");
    const int sw = BM == 64 ? (r & 7) : ((r >> 1) & 3);  // 64-byte rows: two per 128-byte bank line
    return r * BM + ((((col >> 3) ^ sw)) << 3) + (col & 7);
}
// A fragment (16 queries x 16 keys) of dS = (dS^T)^T at queries m0.., keys k0..
template <int BM>
__device__ __forceinline__ void ldsm_A_ds(uint32_t *a, const floatX *s, int m0, int k0, int lane) {
    int r = k0 + (lane & 7) + ((lane >> 4) << 3), col = m0 + (((lane >> 3) & 1) << 3);
    ldsm_x4_t(a, s + ds_off<BM>(r, col));
}
__device__ __forceinline__ void atomic_add2(float *p, float a, float b) {
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2 *>(p), make_float2(a, b));
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

// backward, step 2: dk, dv. One block = BN = 16*KT*NW keys of one head (each warp KT tiles
// of 16 keys, sharing each Q / dO fragment it reads), walking the query blocks (BM rows) from
// the diagonal to the end; all in fixed order.
// ADQ (the atomic-dq backward): the block also adds its share of dq, dS K, to the fp32
// dq_acc (B, NH, T, HS) with float2 atomics, through a dS^T tile in shared memory; the
// order of those additions is not fixed, so dq is not bitwise reproducible.
template <int HS, int NW, int BM, int KT, bool ADQ>
__global__ void __launch_bounds__(NW * 32) bwd_dkdv_kernel(floatX *dqkv, float *dq_acc, const floatX *dout,
                                                          const floatX *qkv, const float *lse, const float *D, int T,
                                                          int NH, float scale_log2, float scale) {
    constexpr int BN = 16 * KT * NW, NT = NW * 32;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    floatX *sK = reinterpret_cast<floatX *>(smem_raw);
    floatX *sV = sK + BN * HS;
    floatX *sQ = sV + BN * HS;       // 2 buffers
    floatX *sO = sQ + 2 * BM * HS;   // dout, 2 buffers
    floatX *sdS = sO + 2 * BM * HS;  // ADQ only: dS^T (BN x BM)
    float *sL = reinterpret_cast<float *>(sdS + (ADQ ? BN * BM : 0));  // lse * log2(e), 2 buffers
    float *sD = sL + 2 * BM;                                           // D, 2 buffers
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
    const int nb = blockIdx.x;  // key block 0 has the most work: first
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const floatX *qb = qkv + (size_t)b * T * 3 * C + h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const floatX *ob = dout + (size_t)b * T * C + h * HS;
    const float *lb = lse + (size_t)bh * T, *db = D + (size_t)bh * T;
    const int k0 = nb * BN, wkey = w * 16 * KT;  // this warp's keys: k0 + wkey + kt*16 + ...
    const int mstart = k0 / BM, mend = (T + BM - 1) / BM;

    load_tile<BN, HS, NT>(sK, kb, k0, 3 * C, T);
    load_tile<BN, HS, NT>(sV, vb, k0, 3 * C, T);
    load_tile<BM, HS, NT>(sQ, qb, mstart * BM, 3 * C, T);
    load_tile<BM, HS, NT>(sO, ob, mstart * BM, C, T);
    cp_async_commit();
    for (int i = threadIdx.x; i < BM; i += NT) {
        int q = mstart * BM + i;
        sL[i] = q < T ? lb[q] * 1.4426950408889634f : INFINITY;
        sD[i] = q < T ? db[q] : 0.0f;
    }

    float dk[KT][HS / 8][4], dv[KT][HS / 8][4];
#pragma unroll
    for (int kt = 0; kt < KT; kt++)
#pragma unroll
        for (int i = 0; i < HS / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[kt][i][e] = dv[kt][i][e] = 0.0f;

    for (int m = mstart; m < mend; m++) {
        const int buf = (m - mstart) & 1;
        if (m + 1 < mend) {
            int nq0 = (m + 1) * BM;
            load_tile<BM, HS, NT>(sQ + (buf ^ 1) * BM * HS, qb, nq0, 3 * C, T);
            load_tile<BM, HS, NT>(sO + (buf ^ 1) * BM * HS, ob, nq0, C, T);
            cp_async_commit();
            for (int i = threadIdx.x; i < BM; i += NT) {
                int q = nq0 + i;
                sL[(buf ^ 1) * BM + i] = q < T ? lb[q] * 1.4426950408889634f : INFINITY;
                sD[(buf ^ 1) * BM + i] = q < T ? db[q] : 0.0f;
            }
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const floatX *cQ = sQ + buf * BM * HS, *cO = sO + buf * BM * HS;
        const float *cL = sL + buf * BM, *cD = sD + buf * BM;
        const int q0 = m * BM;
        // S^T = K Q^T (16 keys x BM queries per key tile)
        float st[KT][BM / 8][4];
        mma_tile_by_tile_t<HS>(st, sK, wkey, cQ, lane);
        // P^T
        const bool need_mask = k0 + BN - 1 > q0;
#pragma unroll
        for (int kt = 0; kt < KT; kt++)
#pragma unroll
            for (int t = 0; t < BM / 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int ql = t * 8 + 2 * tig + (e & 1);
                    float p = fast_exp2(st[kt][t][e] * scale_log2 - cL[ql]);
                    if (need_mask && k0 + wkey + kt * 16 + g + (e >> 1) * 8 > q0 + ql) p = 0.0f;
                    st[kt][t][e] = p;
                }
        // dV += P^T dO
        mma_regs_by_tile<HS>(dv, st, cO, lane);
        // dP^T = V dO^T, then dS^T = P^T * (dP^T - D) in place of P^T
        {
            float dpt[KT][BM / 8][4];
            mma_tile_by_tile_t<HS>(dpt, sV, wkey, cO, lane);
#pragma unroll
            for (int kt = 0; kt < KT; kt++)
#pragma unroll
                for (int t = 0; t < BM / 8; t++)
#pragma unroll
                    for (int e = 0; e < 4; e++) st[kt][t][e] *= dpt[kt][t][e] - cD[t * 8 + 2 * tig + (e & 1)];
        }
        if constexpr (ADQ) {
            // dS^T to shared memory, then dq (BM x HS) += dS K split over the warps: query
            // tile qt, head dims [hs0, hs0 + HSW); fp32 atomics into dq_acc (scaled later)
#pragma unroll
            for (int kt = 0; kt < KT; kt++)
#pragma unroll
                for (int t = 0; t < BM / 8; t++)
#pragma unroll
                    for (int r = 0; r < 2; r++)
                        *reinterpret_cast<uint32_t *>(sdS + ds_off<BM>(wkey + kt * 16 + g + r * 8, t * 8 + 2 * tig)) =
                            pack2(st[kt][t][2 * r], st[kt][t][2 * r + 1]);
            __syncthreads();
            constexpr int QT = BM / 16, HSPLIT = NW >= QT ? NW / QT : 1, JOBS = NW >= QT ? 1 : QT / NW;
            constexpr int HSW = HS / HSPLIT;
            static_assert(NW % QT == 0 || QT % NW == 0, "ADQ: warps and query tiles must divide");
            static_assert(HSW % 16 == 0, "ADQ: head-dim slice must be a multiple of 16");
#pragma unroll
            for (int j = 0; j < JOBS; j++) {
                const int job = w + j * NW, qt = job % QT, hs0 = (job / QT) * HSW;
                float acc[HSW / 8][4];
#pragma unroll
                for (int i = 0; i < HSW / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++) {
                    uint32_t af[4];
                    ldsm_A_ds<BM>(af, sdS, qt * 16, kk * 16, lane);
#pragma unroll
                    for (int d = 0; d < HSW / 16; d++) {
                        uint32_t bf[4];
                        ldsm_Bt<HS>(bf, sK, kk * 16, hs0 + d * 16, lane);
                        mma16816(acc[2 * d], af, bf[0], bf[1]);
                        mma16816(acc[2 * d + 1], af, bf[2], bf[3]);
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int q = q0 + qt * 16 + g + r * 8;
                    if (q < T) {
                        float *p = dq_acc + ((size_t)bh * T + q) * HS + hs0 + 2 * tig;
#pragma unroll
                        for (int i = 0; i < HSW / 8; i++) atomic_add2(p + i * 8, acc[i][2 * r], acc[i][2 * r + 1]);
                    }
                }
            }
        }
        // dK += dS^T Q
        mma_regs_by_tile<HS>(dk, st, cQ, lane);
        __syncthreads();
    }
#pragma unroll
    for (int kt = 0; kt < KT; kt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int key = k0 + wkey + kt * 16 + g + r * 8;
            if (key < T) {
                floatX *p = dqkv + ((size_t)b * T + key) * 3 * C + C + h * HS + 2 * tig;
#pragma unroll
                for (int i = 0; i < HS / 8; i++) {
                    *reinterpret_cast<uint32_t *>(p + i * 8) =
                        pack2(dk[kt][i][2 * r] * scale, dk[kt][i][2 * r + 1] * scale);
                    *reinterpret_cast<uint32_t *>(p + C + i * 8) = pack2(dv[kt][i][2 * r], dv[kt][i][2 * r + 1]);
                }
            }
        }
}

// atomic-dq backward, last step: dqkv's q part = scale * dq_acc, one thread per 8 values
template <int HS>
__global__ void bwd_dq_convert_kernel(floatX *dqkv, const float *dq_acc, int B, int T, int NH, float scale) {
    long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;  // (b, t, h, chunk of 8)
    constexpr int CH = HS / 8;
    if (idx >= (long)B * T * NH * CH) return;
    int c = (int)(idx % CH), h = (int)((idx / CH) % NH);
    long bt = idx / ((long)CH * NH);
    int t = (int)(bt % T), b = (int)(bt / T);
    const float *src = dq_acc + (((size_t)b * NH + h) * T + t) * HS + c * 8;
    float4 x = *reinterpret_cast<const float4 *>(src), y = *reinterpret_cast<const float4 *>(src + 4);
    uint4 o = make_uint4(pack2(x.x * scale, x.y * scale), pack2(x.z * scale, x.w * scale),
                         pack2(y.x * scale, y.y * scale), pack2(y.z * scale, y.w * scale));
    *reinterpret_cast<uint4 *>(dqkv + (size_t)bt * 3 * NH * HS + h * HS + c * 8) = o;
}

// backward, step 3 (deterministic backward): dq. One block = BM = 16*MT*NW queries (each warp MT tiles of 16),
// walking the key blocks 0.. up to the diagonal in order; recomputes S and dP.
template <int HS, int NW, int BN, int MT>
__global__ void __launch_bounds__(NW * 32) bwd_dq_kernel(floatX *dqkv, const floatX *dout, const floatX *qkv,
                                                        const float *lse, const float *D, int T, int NH,
                                                        float scale_log2, float scale) {
    constexpr int BM = 16 * MT * NW, NT = NW * 32;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    floatX *sQ = reinterpret_cast<floatX *>(smem_raw);
    floatX *sO = sQ + BM * HS;
    floatX *sK = sO + BM * HS;       // 2 buffers
    floatX *sV = sK + 2 * BN * HS;   // 2 buffers
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
    const int mb = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS;
    const floatX *qb = qkv + (size_t)b * T * 3 * C + h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const floatX *ob = dout + (size_t)b * T * C + h * HS;
    const int q0 = mb * BM, wrow = w * 16 * MT;
    const int nblocks = min((q0 + BM + BN - 1) / BN, (T + BN - 1) / BN);

    load_tile<BM, HS, NT>(sQ, qb, q0, 3 * C, T);
    load_tile<BM, HS, NT>(sO, ob, q0, C, T);
    load_tile<BN, HS, NT>(sK, kb, 0, 3 * C, T);
    load_tile<BN, HS, NT>(sV, vb, 0, 3 * C, T);
    cp_async_commit();

    float lrow[MT][2], drow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = q0 + wrow + mt * 16 + g + r * 8;
            lrow[mt][r] = row < T ? lse[(size_t)bh * T + row] * 1.4426950408889634f : 0.0f;
            drow[mt][r] = row < T ? D[(size_t)bh * T + row] : 0.0f;
        }
    uint32_t qf[MT][HS / 16][4], of[MT][HS / 16][4];
    float dq[MT][HS / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < HS / 8; i++) dq[mt][i][0] = dq[mt][i][1] = dq[mt][i][2] = dq[mt][i][3] = 0.0f;

    for (int n = 0; n < nblocks; n++) {
        const int buf = n & 1;
        if (n + 1 < nblocks) {
            load_tile<BN, HS, NT>(sK + (buf ^ 1) * BN * HS, kb, (n + 1) * BN, 3 * C, T);
            load_tile<BN, HS, NT>(sV + (buf ^ 1) * BN * HS, vb, (n + 1) * BN, 3 * C, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (n == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < HS / 16; kk++) {
                    ldsm_A<HS>(qf[mt][kk], sQ, wrow + mt * 16, kk * 16, lane);
                    ldsm_A<HS>(of[mt][kk], sO, wrow + mt * 16, kk * 16, lane);
                }
        }
        const floatX *cK = sK + buf * BN * HS, *cV = sV + buf * BN * HS;
        float s[MT][BN / 8][4], dp[MT][BN / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < BN / 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][i][e] = dp[mt][i][e] = 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 16; j++)
#pragma unroll
            for (int kk = 0; kk < HS / 16; kk++) {
                uint32_t bf[4];
                ldsm_Bnt<HS>(bf, cK, j * 16, kk * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816(s[mt][2 * j], qf[mt][kk], bf[0], bf[1]);
                    mma16816(s[mt][2 * j + 1], qf[mt][kk], bf[2], bf[3]);
                }
                ldsm_Bnt<HS>(bf, cV, j * 16, kk * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816(dp[mt][2 * j], of[mt][kk], bf[0], bf[1]);
                    mma16816(dp[mt][2 * j + 1], of[mt][kk], bf[2], bf[3]);
                }
            }
        const int k0 = n * BN;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int row_lo = q0 + wrow + mt * 16 + g;
            const bool need_mask = k0 + BN - 1 > q0 + wrow + mt * 16;
#pragma unroll
            for (int t = 0; t < BN / 8; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = fast_exp2(s[mt][t][e] * scale_log2 - lrow[mt][e >> 1]);
                    if (need_mask && k0 + t * 8 + 2 * tig + (e & 1) > row_lo + (e >> 1) * 8) p = 0.0f;
                    s[mt][t][e] = p * (dp[mt][t][e] - drow[mt][e >> 1]);
                }
        }
        // dQ += dS K
        mma_regs_by_tile<HS>(dq, s, cK, lane);
        __syncthreads();
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = q0 + wrow + mt * 16 + g + r * 8;
            if (row < T) {
                floatX *p = dqkv + ((size_t)b * T + row) * 3 * C + h * HS + 2 * tig;
#pragma unroll
                for (int i = 0; i < HS / 8; i++)
                    *reinterpret_cast<uint32_t *>(p + i * 8) =
                        pack2(dq[mt][i][2 * r] * scale, dq[mt][i][2 * r + 1] * scale);
            }
        }
}

// ---------------------------------------------------------------------------------------
// launchers

// tile shapes per head size (hs = 64: the fastest of the variants timed by
// build/test_attention --bench on an H100; docs/performance-notes.md). AKV: the atomic-dq
// backward's one kernel. Each fits the 99 KB of shared memory a block of sm_86 and sm_89 may
// have, but for AKV at hs = 128 (107,008 bytes): AKV_SMALL_NW is the one for those GPUs.
template <int HS> struct Cfg;
template <> struct Cfg<64> {
    static constexpr int FWD_NW = 4, FWD_BN = 64, FWD_MT = 2;  // 128 queries x 64 keys
    static constexpr int KV_NW = 2, KV_BM = 32, KV_KT = 2;     // 64 keys x 32 queries
    static constexpr int DQ_NW = 4, DQ_BN = 32, DQ_MT = 2;     // 128 queries x 32 keys
    static constexpr int AKV_NW = 2, AKV_BM = 32, AKV_KT = 2;  // 64 keys x 32 queries
    static constexpr int AKV_SMALL_NW = AKV_NW;
};
template <> struct Cfg<128> {
    static constexpr int FWD_NW = 4, FWD_BN = 64, FWD_MT = 1;
    static constexpr int KV_NW = 8, KV_BM = 32, KV_KT = 1;
    static constexpr int DQ_NW = 4, DQ_BN = 32, DQ_MT = 1;
    static constexpr int AKV_NW = 8, AKV_BM = 32, AKV_KT = 1;
    static constexpr int AKV_SMALL_NW = 4;  // 64 keys: 70,144 bytes
};

// the dk/dv kernel's dynamic shared memory (ADQ: with the atomic-dq backward's dS^T tile)
template <int HS, int NW, int BM, int KT, bool ADQ>
constexpr size_t dkdv_smem() {
    constexpr int BN = 16 * KT * NW;
    return (size_t)(2 * BN + 4 * BM) * HS * sizeof(floatX) + 4 * BM * sizeof(float) +
           (ADQ ? (size_t)BN * BM * sizeof(floatX) : 0);
}

// a kernel's dynamic shared memory above the default 48 KB; a tile shape this GPU cannot hold
// is refused here by name rather than by the launch's "invalid argument"
template <typename K>
static void set_smem(K kern, size_t bytes, const char *what) {
    const DeviceCaps *caps = device_caps();
    if (caps && bytes > (size_t)caps->smem_optin)
        fatal("flash attention: the %s tile shape needs %zu bytes of shared memory per block; this GPU (compute "
              "capability %d.%d) allows %d", what, bytes, caps->cc / 10, caps->cc % 10, caps->smem_optin);
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int HS, int NW, int BN, int MT>
static void forward_cfg(floatX *out, float *lse, const floatX *qkv, int B, int T, int NH, cudaStream_t s) {
    constexpr int BM = 16 * MT * NW;
    size_t smem = (size_t)(BM + 4 * BN) * HS * sizeof(floatX);
    auto kern = fwd_kernel<HS, NW, BN, MT>;
    set_smem(kern, smem, "forward");
    dim3 grid(ceil_div(T, BM), B * NH);
    kern<<<grid, NW * 32, smem, s>>>(out, lse, qkv, T, NH, 1.4426950408889634f / sqrtf((float)HS));
    LAUNCH_CHECK();
}

// the dk/dv kernel (with the atomic dq when dq_acc != NULL)
template <int HS, int NW, int BM, int KT>
static void launch_dkdv(floatX *dqkv, float *dq_acc, const floatX *dout, const floatX *qkv, const float *lse,
                        const float *Dbuf, int B, int T, int NH, float scale_log2, float scale, cudaStream_t s) {
    constexpr int BN = 16 * KT * NW;
    dim3 grid(ceil_div(T, BN), B * NH);
    if (dq_acc) {
        constexpr size_t smem = dkdv_smem<HS, NW, BM, KT, true>();
        auto kern = bwd_dkdv_kernel<HS, NW, BM, KT, true>;
        set_smem(kern, smem, "atomic-dq backward");
        kern<<<grid, NW * 32, smem, s>>>(dqkv, dq_acc, dout, qkv, lse, Dbuf, T, NH, scale_log2, scale);
    } else {
        constexpr size_t smem = dkdv_smem<HS, NW, BM, KT, false>();
        auto kern = bwd_dkdv_kernel<HS, NW, BM, KT, false>;
        set_smem(kern, smem, "dk/dv backward");
        kern<<<grid, NW * 32, smem, s>>>(dqkv, NULL, dout, qkv, lse, Dbuf, T, NH, scale_log2, scale);
    }
    LAUNCH_CHECK();
}

// deterministic backward: D, then the dq kernel and the dk/dv kernel (each writes its own
// part of dqkv)
template <int HS, int KV_NW, int KV_BM, int KV_KT, int DQ_NW, int DQ_BN, int DQ_MT>
static void backward_cfg(floatX *dqkv, floatX *dbias_v, const floatX *dout, const floatX *qkv, const floatX *out,
                         const float *lse, float *scratch, int B, int T, int NH, cudaStream_t s) {
    float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * 1.4426950408889634f;
    bwd_dot<HS>(scratch, NULL, dbias_v, dout, out, B, T, NH, s);
    {
        constexpr int NW = DQ_NW, BN = DQ_BN, BM = 16 * DQ_MT * NW;
        size_t smem = (size_t)(2 * BM + 4 * BN) * HS * sizeof(floatX);
        auto kern = bwd_dq_kernel<HS, NW, BN, DQ_MT>;
        set_smem(kern, smem, "dq backward");
        dim3 grid(ceil_div(T, BM), B * NH);
        kern<<<grid, NW * 32, smem, s>>>(dqkv, dout, qkv, lse, scratch, T, NH, scale_log2, scale);
        LAUNCH_CHECK();
    }
    launch_dkdv<HS, KV_NW, KV_BM, KV_KT>(dqkv, NULL, dout, qkv, lse, scratch, B, T, NH, scale_log2, scale, s);
}

// atomic-dq backward: D (and dq_acc = 0), the one dk/dv/dq kernel, then dq_acc -> dqkv.
// scratch: D (B*NH*T floats), then from flash_dq_acc_offset on dq_acc (B*NH*T*HS floats)
template <int HS, int NW, int BM, int KT>
static void backward_atomic_cfg(floatX *dqkv, floatX *dbias_v, const floatX *dout, const floatX *qkv,
                                const floatX *out, const float *lse, float *scratch, int B, int T, int NH,
                                cudaStream_t s) {
    float scale = 1.0f / sqrtf((float)HS), scale_log2 = scale * 1.4426950408889634f;
    long rows = (long)B * NH * T;
    float *dq_acc = scratch + flash_dq_acc_offset(rows, NH * HS);
    bwd_dot<HS>(scratch, dq_acc, dbias_v, dout, out, B, T, NH, s);
    launch_dkdv<HS, NW, BM, KT>(dqkv, dq_acc, dout, qkv, lse, scratch, B, T, NH, scale_log2, scale, s);
    long n = rows * (HS / 8);
    bwd_dq_convert_kernel<HS><<<ceil_div(n, 256), 256, 0, s>>>(dqkv, dq_acc, B, T, NH, scale);
    LAUNCH_CHECK();
}

}  // namespace flash

#endif  // PRECISION != PRECISION_FP32
