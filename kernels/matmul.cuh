// kernels/matmul.cuh: the linear layers through cuBLASLt, with bias and GELU fused into
// the epilogue where cuBLASLt supports it, and a deterministic bias gradient.
// Row-major tensors: inp (N, C), weight (OC, C) as in nn.Linear, out (N, OC).
// forward:  out = inp @ weight^T + bias           [fused: out = gelu(.), pre_gelu = (.)]
// backward: dinp = dout @ weight                   [fused: dinp *= gelu'(pre_gelu)]
//           dweight += dout^T @ inp, dbias += column sums of dout
// cuBLAS is column-major: a row-major (R, K) matrix is the column-major (K, R) one, so
// out^T = W (as K x OC, transposed) * inp^T, and so on below.
#pragma once
#include "common.cuh"
#include "gelu.cuh"

static cublasLtHandle_t g_cublaslt;
static cublasHandle_t g_cublas;
static void *g_cublaslt_workspace;
static const size_t CUBLASLT_WORKSPACE_BYTES = 32u << 20;
// How the matmuls run, owned by whoever owns their results (the model, gpu/model.cuh) and
// passed to every call that launches one.
typedef struct {
    // 1: GELU in the forward matmul's epilogue and its derivative in dinp's; 0: kernels of
    // their own (--fuse-gelu 0, or for good once cuBLASLt offers no fused epilogue for the
    // type: matmul_forward writes the 0)
    int fuse_gelu;
    // 1 while a shape's first call should time cuBLASLt's candidates and keep the fastest
    // (the trainer sets it for one pass before training, with --deterministic 0); 0: the
    // heuristic's first choice, the same on every run
    int tune;
    // fp32 accumulation in every build; the fp32 build's products are true fp32 unless tf32
    // (-f 1) lets them round their inputs to TF32 (the other builds' inputs are bf16 or fp16
    // already, so TF32 changes nothing there)
    int tf32;
} MatmulModes;
static const MatmulModes MATMUL_MODES_DEFAULT = {1, 0, 0};
#define MATMUL_TUNE_CANDIDATES 8
static int g_tuned_shapes = 0, g_tuned_changed = 0;  // shapes timed; of those, not the first choice

// the cuBLAS compute type of the modes' products
static cublasComputeType_t matmul_compute_type(const MatmulModes *modes) {
    return PRECISION == PRECISION_FP32 && modes->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

static void matmul_init(cudaStream_t s) {
    CUBLAS_CHECK(cublasLtCreate(&g_cublaslt));
    CUBLAS_CHECK(cublasCreate(&g_cublas));
    CUBLAS_CHECK(cublasSetStream(g_cublas, s));
    CUBLAS_CHECK(cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH));  // no TF32
    CUDA_CHECK(cudaMalloc(&g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES));
    CUBLAS_CHECK(cublasSetWorkspace(g_cublas, g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES));
}
static void matmul_free(void) {
    cublasLtDestroy(g_cublaslt);
    cublasDestroy(g_cublas);
    cudaFree(g_cublaslt_workspace);
}

// One chosen algorithm per distinct call shape, so the same shape always runs the same
// algorithm within a run, and the heuristic runs once per shape. (Across runs too, unless
// MatmulModes.tune picked by timing.)
typedef struct {
    int m, n, k, ta, tb, lda, ldb, ldd, epi, has_bias, beta_nonzero;
    int variant;  // 0: floatX operands (matmul_lt); else the FP8 operand formats and accumulation (kernels/fp8.cuh)
    int align_a, align_b, align_d;  // operand_alignment of A, B, D: set by matmul_plan_choose
    int ok;
    cublasLtMatmulAlgo_t algo;
} MatmulPlan;
static MatmulPlan g_plans[128];
static int g_num_plans = 0;

// The plan whose key (every field before ok) equals key's; a new one, marked by *added and
// still without an algorithm, when this is the shape's first call.
static MatmulPlan *matmul_plan_get(const MatmulPlan *key, int *added) {
    for (int i = 0; i < g_num_plans; i++) {
        MatmulPlan *p = &g_plans[i];
        if (p->m == key->m && p->n == key->n && p->k == key->k && p->ta == key->ta && p->tb == key->tb &&
            p->lda == key->lda && p->ldb == key->ldb && p->ldd == key->ldd && p->epi == key->epi &&
            p->has_bias == key->has_bias && p->beta_nonzero == key->beta_nonzero && p->variant == key->variant &&
            p->align_a == key->align_a && p->align_b == key->align_b && p->align_d == key->align_d) {
            *added = 0;
            return p;
        }
    }
    if (g_num_plans == (int)(sizeof g_plans / sizeof g_plans[0])) {
        fprintf(stderr, "error: internal: too many distinct matmul shapes\n");
        fatal_exit();
    }
    MatmulPlan *p = &g_plans[g_num_plans++];
    *p = *key;
    p->ok = 0;
    *added = 1;
    return p;
}

// Every plan dropped, so that the next call of each shape asks the heuristic again (the tests:
// a case that must start from cuBLASLt's first choice)
static void matmul_plans_forget(void) { g_num_plans = 0; }

// One cuBLASLt call's descriptors: D (m x n, col-major, ld ldd) =
// epilogue(alpha * op(A) op(B) + beta * D [+ bias]), aux the epilogue's GELU input/output.
typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
} LtCall;
// bias: the bias added (floatX), or for the BGRAD epilogues the fp32 bias gradient written
// (the trainer uses none of those; dev/bench_matmul.cu probes whether cuBLASLt offers them)
static int epilogue_is_bgrad(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
static void lt_call_create(LtCall *c, cublasComputeType_t compute, const void *bias, int m, int n, int k, int ta, int tb,
                           int lda, int ldb, int ldd, cublasLtEpilogue_t epi, const floatX *aux, int ldaux) {
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&c->desc, compute, CUDA_R_32F));
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias) {
        cudaDataType_t bt = epilogue_is_bgrad(epi) ? CUDA_R_32F : CUBLAS_FLOATX;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    if (aux) {
        int64_t ld = ldaux;
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->la, CUBLAS_FLOATX, ta ? k : m, ta ? m : k, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->lb, CUBLAS_FLOATX, tb ? n : k, tb ? k : n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c->ld, CUBLAS_FLOATX, m, n, ldd));
}
static void lt_call_destroy(LtCall *c) {
    cublasLtMatrixLayoutDestroy(c->la);
    cublasLtMatrixLayoutDestroy(c->lb);
    cublasLtMatrixLayoutDestroy(c->ld);
    cublasLtMatmulDescDestroy(c->desc);
}
// up to max_algos candidates from cuBLASLt's heuristic, best first; returns how many
// The largest power of two, up to 256, that divides the address. cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told otherwise, and an algorithm chosen under that
// assumption refuses a less aligned operand at the call (CUBLAS_STATUS_NOT_SUPPORTED): row
// chunks and column slices of a buffer start at any multiple of 16 bytes.
static uint32_t operand_alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}

// align_a, align_b, align_d: the operands' alignments in bytes (C is D); 256 for a whole
// cudaMalloc'd buffer
static int lt_call_heuristic(const LtCall *c, cublasLtMatmulHeuristicResult_t *h, int max_algos, uint32_t align_a,
                             uint32_t align_b, uint32_t align_d) {
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = CUBLASLT_WORKSPACE_BYTES;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const struct { cublasLtMatmulPreferenceAttributes_t attr; uint32_t bytes; } al[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d}, {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, al[i].attr, &al[i].bytes, sizeof al[i].bytes));
    int returned = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_cublaslt, c->desc, c->la, c->lb, c->ld, c->ld, pref,
                                                       max_algos, h, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    return st == CUBLAS_STATUS_SUCCESS ? returned : 0;
}

// The fastest of n candidates for this call, each run once to warm up and then timed over
// 3 runs on stream s (it writes D: only for a pass whose results are thrown away).
static cublasLtMatmulAlgo_t fastest_algo(const LtCall *c, const cublasLtMatmulHeuristicResult_t *h, int n,
                                         floatX *D, const void *A, const void *B, float beta, cudaStream_t s) {
    static cudaEvent_t e0 = NULL, e1 = NULL;
    if (!e0) {
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
    }
    float alpha = 1.0f, best_ms = INFINITY;
    int best = -1;
    for (int i = 0; i < n; i++) {
        cublasStatus_t st = cublasLtMatmul(g_cublaslt, c->desc, &alpha, A, c->la, B, c->lb, &beta, D, c->ld, D, c->ld,
                                           &h[i].algo, g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, s);
        if (st != CUBLAS_STATUS_SUCCESS) continue;  // a candidate that does not run here
        CUDA_CHECK(cudaEventRecord(e0, s));
        for (int r = 0; r < 3; r++)
            CUBLAS_CHECK(cublasLtMatmul(g_cublaslt, c->desc, &alpha, A, c->la, B, c->lb, &beta, D, c->ld, D, c->ld,
                                        &h[i].algo, g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, s));
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best_ms) { best_ms = ms; best = i; }
    }
    if (best < 0) best = 0;  // none ran: the heuristic's first, whose error the real call reports
    g_tuned_shapes++;
    if (best != 0) g_tuned_changed++;
    return h[best].algo;
}

// The plan for call c with this key: found, or on the shape's first call made with the
// heuristic's first choice (or, with tune, the fastest of its candidates, timed by running
// c on D, A, B); plan->ok is 0 when cuBLASLt offers no algorithm.
static MatmulPlan *matmul_plan_choose(const MatmulPlan *shape, const LtCall *c, floatX *D, const void *A,
                                      const void *B, float beta, int tune, cudaStream_t s) {
    MatmulPlan key = *shape;
    key.align_a = operand_alignment(A);
    key.align_b = operand_alignment(B);
    key.align_d = operand_alignment(D);
    int added;
    MatmulPlan *plan = matmul_plan_get(&key, &added);
    if (added) {
        cublasLtMatmulHeuristicResult_t h[MATMUL_TUNE_CANDIDATES];
        int na = lt_call_heuristic(c, h, tune ? MATMUL_TUNE_CANDIDATES : 1, key.align_a, key.align_b,
                                   key.align_d);
        plan->ok = na > 0;
        if (plan->ok) plan->algo = na > 1 ? fastest_algo(c, h, na, D, A, B, beta, s) : h[0].algo;
    }
    return plan;
}

// D (m x n, col-major, ld ldd) = epilogue(alpha * op(A) op(B) + beta * D [+ bias]).
// Returns 0 if cuBLASLt offers no algorithm for this combination (caller falls back).
static int matmul_lt(const MatmulModes *modes, floatX *D, const floatX *A, const floatX *B, const void *bias, int m,
                     int n, int k, int ta, int tb, int lda, int ldb, int ldd, float beta, cublasLtEpilogue_t epi,
                     const floatX *aux, int ldaux, cudaStream_t s) {
    LtCall c;
    lt_call_create(&c, matmul_compute_type(modes), bias, m, n, k, ta, tb, lda, ldb, ldd, epi, aux, ldaux);

    MatmulPlan key;
    memset(&key, 0, sizeof key);
    key.m = m; key.n = n; key.k = k; key.ta = ta; key.tb = tb; key.lda = lda; key.ldb = ldb; key.ldd = ldd;
    key.epi = (int)epi; key.has_bias = bias != NULL; key.beta_nonzero = beta != 0.0f;
    MatmulPlan *plan = matmul_plan_choose(&key, &c, D, A, B, beta, modes->tune, s);
    int ok = plan->ok;
    if (ok) {
        float alpha = 1.0f;
        CUBLAS_CHECK(cublasLtMatmul(g_cublaslt, c.desc, &alpha, A, c.la, B, c.lb, &beta, D, c.ld, D, c.ld, &plan->algo,
                                    g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, s));
    }
    lt_call_destroy(&c);
    return ok;
}

// out (N, OC) = inp (N, C) @ weight^T + bias. With pre_gelu != NULL: pre_gelu = that, and
// out = gelu(pre_gelu) (fused in the epilogue when possible). bias may be NULL.
static void matmul_forward(MatmulModes *modes, floatX *out, floatX *pre_gelu, const floatX *inp,
                           const floatX *weight, const floatX *bias, int N, int C, int OC, cudaStream_t s) {
    if (pre_gelu && modes->fuse_gelu) {
        cublasLtEpilogue_t e = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        if (matmul_lt(modes, out, weight, inp, bias, OC, N, C, 1, 0, C, C, OC, 0.0f, e, pre_gelu, OC, s)) return;
        modes->fuse_gelu = 0;  // not offered for this type: use the separate kernel from now on
        fprintf(stderr, "note: cuBLASLt offers no fused GELU epilogue here; using the separate GELU kernel\n");
    }
    floatX *dst = pre_gelu ? pre_gelu : out;
    cublasLtEpilogue_t e = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (!matmul_lt(modes, dst, weight, inp, bias, OC, N, C, 1, 0, C, C, OC, 0.0f, e, NULL, 0, s)) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for the forward matmul N=%d C=%d OC=%d\n", N, C, OC);
        fatal_exit();
    }
    if (pre_gelu) gelu_forward(out, pre_gelu, (long)N * OC, s);
}

// ---------------------------------------------------------------------------
// bias gradient: dbias[oc] += sum_n dout[n, oc] in a pass of its own (cuBLASLt 13 offers
// no algorithm for the BGRADB or DGELU_BGRAD epilogues at our layouts in bf16: see
// dev/bench_matmul.cu), deterministic: each block sums a chunk
// of rows for a tile of columns in a fixed order and writes one fp32 partial row; the
// partial rows are then added in a fixed order (add_partial_sums). A block is 32 lanes
// (X128 columns each: a 512-byte coalesced row segment per warp) x BIAS_BWD_WARPS warps
// walking interleaved rows, so every SM has many independent loads in flight.

#define BIAS_BWD_WARPS 8
#define BIAS_BWD_CHUNKS 256

// amax (optional): max |dout| into *amax as float bits (atomicMax: non-negative floats order
// like their bits), for FP8's current scaling of a gradient the bias pass reads anyway
__global__ void __launch_bounds__(32 * BIAS_BWD_WARPS)
bias_grad_partial_kernel(float *partials, unsigned *amax, const floatX *dout, int N, int OC, int ld) {
    constexpr int V = X128::size, TILE = 32 * V;
    __shared__ float part[BIAS_BWD_WARPS][TILE];
    int c = blockIdx.x * TILE + threadIdx.x * V;
    int rows_per = (N + gridDim.y - 1) / gridDim.y;
    int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
    float acc[V];
    unsigned m = 0;
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    if (c < OC) {
#pragma unroll 4
        for (int r = r0 + threadIdx.y; r < r1; r += BIAS_BWD_WARPS) {
            X128 d = load128(dout + (size_t)r * ld + c);
            for (int k = 0; k < V; k++) {
                acc[k] += to_float(d[k]);
                if (amax) m = max(m, __float_as_uint(fabsf(to_float(d[k]))));
            }
        }
    }
    if (amax) {
        m = __reduce_max_sync(0xffffffffu, m);
        if (threadIdx.x == 0 && m) atomicMax(amax, m);
    }
    for (int k = 0; k < V; k++) part[threadIdx.y][threadIdx.x * V + k] = acc[k];
    __syncthreads();
    // the block's TILE columns, each summed over the warps in order
    for (int t = threadIdx.y * 32 + threadIdx.x; t < TILE; t += 32 * BIAS_BWD_WARPS) {
        int col = blockIdx.x * TILE + t;
        if (col >= OC) continue;
        float v = 0.0f;
        for (int w = 0; w < BIAS_BWD_WARPS; w++) v += part[w][t];
        partials[(size_t)blockIdx.y * OC + col] = v;
    }
}

static size_t bias_grad_scratch_floats(int max_OC) { return (size_t)BIAS_BWD_CHUNKS * max_OC; }

// dbias (OC) += column sums of dout (N rows of OC, ld elements apart; OC and ld multiples of
// X128::size); scratch: bias_grad_scratch_floats(OC) floats. amax (not NULL): *amax = max(*amax,
// max |dout|) too.
static void bias_backward(floatX *dbias, float *scratch, const floatX *dout, int N, int OC, int ld, cudaStream_t s,
                          float *amax = NULL) {
    int chunks = N < BIAS_BWD_CHUNKS ? N : BIAS_BWD_CHUNKS;
    dim3 grid(ceil_div(OC, 32 * X128::size), chunks);
    bias_grad_partial_kernel<<<grid, dim3(32, BIAS_BWD_WARPS), 0, s>>>(scratch, (unsigned *)amax, dout, N, OC, ld);
    LAUNCH_CHECK();
    add_partial_sums(dbias, NULL, NULL, OC, scratch, chunks, OC, s);
}

// dinp (N, C) = dout (N, OC) @ weight (OC, C)   [* gelu'(pre_gelu) if pre_gelu]  (written)
// dweight (OC, C) += dout^T @ inp                 (accumulated)
// dbias (OC) += column sums of dout               (accumulated; skipped if dbias == NULL)
// scratch: bias_grad_scratch_floats(OC) floats
static void matmul_backward(MatmulModes *modes, floatX *dinp, floatX *dweight, floatX *dbias, float *scratch,
                            const floatX *dout, const floatX *inp, const floatX *weight, const floatX *pre_gelu,
                            int N, int C, int OC, cudaStream_t s) {
    if (dbias) bias_backward(dbias, scratch, dout, N, OC, OC, s);
    // dinp^T (C x N) = W^T-as-stored (C x OC, no transpose) * dout^T (OC x N)
    int done = 0;
    if (pre_gelu && modes->fuse_gelu)
        done = matmul_lt(modes, dinp, weight, dout, NULL, C, N, OC, 0, 0, C, OC, C, 0.0f, CUBLASLT_EPILOGUE_DGELU,
                         pre_gelu, C, s);
    if (!done) {
        if (!matmul_lt(modes, dinp, weight, dout, NULL, C, N, OC, 0, 0, C, OC, C, 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
                       NULL, 0, s)) {
            fprintf(stderr, "error: cuBLASLt has no algorithm for the backward matmul N=%d C=%d OC=%d\n", N, C, OC);
            fatal_exit();
        }
        if (pre_gelu) gelu_backward(dinp, pre_gelu, dinp, (long)N * C, s);
    }
    // dweight^T (C x OC) += inp^T (C x N) * dout (N x OC)
    if (!matmul_lt(modes, dweight, inp, dout, NULL, C, OC, N, 0, 1, C, OC, C, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0,
                   s)) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for the weight-gradient matmul N=%d C=%d OC=%d\n", N, C, OC);
        fatal_exit();
    }
}
