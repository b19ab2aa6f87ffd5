// dev/bench_fp8.cu: the linear layers of one GPT-2 training step in FP8 beside bf16, on random inputs.
// Per layer (qkv, attproj, fc, fcproj, lm_head), two measurements:
// 1. Each matmul on its own (forward, dinp, dweight), to see where the time goes:
//   bf16    matmul_lt with the trainer's arguments (kernels/matmul.cuh, the heuristic's first algorithm),
//   fp8     matmul_fp8 on operands already cast, called as kernels/fp8_linear.cuh calls it: forward and dinp
//           over its row chunks, dweight over its slices (fp8_dweight_plan, the function the trainer's backward
//           takes its split from: the sum over all N rows in one matmul per slice of dweight's rows or columns),
//           its formats and accumulation, dweight accumulated with beta 1,
//   casts   the FP8 casts that matmul needs: the activation's or gradient's amax pass, scale update and cast
//           (forward, dinp), the transposing casts of x and g (dweight),
// each as ms per call (the median of CUDA-event-timed calls after warm-up) and joules per call (the board's NVML
// energy counter over a loop of calls, at the clock the power limit then allows); the floor (the call's FLOPs at
// the FP8 dense peak); and the FP8 result's error against the bf16 one, which a wrong operand layout would make
// ~100%. The casts write whole-size buffers here, apart from the matmuls, so these lines miss how casts and
// matmuls share the trainer's buffers and the L2.
// 2. The whole layer through the trainer's own functions, which is what a step pays: fp8_linear_forward +
// fp8_linear_backward (current scaling, and delayed scaling once it has a history) against matmul_forward +
// matmul_backward, with the layer's bias, GELU and bias gradient as the trainer wires them (gpu/linear.cuh); ms, J, their
// ratios and the three outputs' errors. The weights' casts (once per update) are left out and listed last.
// Then the step's totals of both. GPU only: the bf16 build on a GPU of compute capability 9.0 (elsewhere it says
// so and exits 77). The energy loops take most of its time: under a minute at the default size.
//   build/bench_fp8 [B T C L Vp]      (default 64 1024 768 12 50304: GPT-2 124M, B=64)
#include "gpu/host/energy.h"
#include "kernels/fp8_linear.cuh"
#include <algorithm>
#include <vector>

#if PRECISION != PRECISION_BF16
int main() {
    printf("bench_fp8: needs the bf16 build (PRECISION=BF16); this is the %s build\n", PRECISION_NAME);
    return 77;
}
#else

// Dense tensor-core peaks of the H100 SXM and the H200 SXM: NVIDIA's datasheets give 1,979 TFLOP/s for bf16 and
// 3,958 TFLOP/s for FP8 "with sparsity", twice the dense rate. PCIe and NVL boards are slower: the floors are
// the SXM boards'.
static const double PEAK_BF16_TFLOPS = 989.0, PEAK_FP8_TFLOPS = 1979.0;
static const int WARMUP = 3, REPS = 21;  // timed calls per measurement: an odd count has a true median
// Energy loops, long against the energy counter's ~100 ms steps: one step is ~8% of a whole layer's loop, the
// figure that decides, and ~12% of a single matmul's, whose 15 lines a step sums (their steps partly cancel).
// 30 loops of the one and 15 of the other keep the run under a minute.
static const double SUSTAIN_CALL_MS = 800.0, SUSTAIN_LAYER_MS = 1200.0;

enum { CALL_FWD, CALL_DINP, CALL_DW, CALLS };
static const char *CALL_NAME[CALLS] = {"fwd", "dinp", "dweight"};

typedef struct {
    const char *name;
    int cin, oc, per_step;  // weight OC x Cin; calls per step
    int bias;               // the forward adds a bias
    int gelu_out;           // the forward applies GELU after (fc: pre_gelu kept for it)
    int gelu_in;            // the input is a GELU's output: dinp times gelu'(pre_gelu) (fcproj)
    int dbias;              // the trainer's backward call sums the bias gradient (fc; the other biases' come from
                            // the layernorm backward, or qkv's from its own pass after the call)
} Layer;

// the step's tensors, one of each role at the largest size any layer needs. Products only ever write D16, D8,
// the layer outputs and the code buffers, so the inputs keep their random fill (a product written into a later
// product's input drifts the data and, with it, the board's power: see dev/bench_matmul.cu)
static floatX *X, *G, *W, *bias, *D16, *D8;  // inputs N x Cin, output gradients N x OC, weight, bias; outputs
static uint8_t *x8, *xT8, *g8, *gT8;         // X and G cast: as stored, and transposed
static Fp8Linear f8;                         // per layer (site) the weight's FP8 copies and the three scales
static MatmulModes modes = MATMUL_MODES_DEFAULT;  // the heuristic's first choices, GELU fused where offered
static int N;
// the whole layers: the GELU input fcproj's backward reads (fc's pre-GELU output in the trainer); fc's pre-GELU
// output; dinp and dweight of the bf16 and FP8 runs (out goes to D16, D8); the bias gradient and its scratch
static floatX *XG, *P, *DX16, *DX8, *DW16, *DW8, *dbias;
static float *dbias_scratch;


// out[0] = max |a - b|, out[1] = max |b|, as float bits (non-negative floats order like their bits, and a NaN
// lies above them all, so a NaN in the FP8 result shows as one); out zeroed by the caller
__global__ void max_diff_kernel(unsigned *out, const floatX *a, const floatX *b, size_t n) {
    unsigned md = 0, mb = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = to_float(a[i]), y = to_float(b[i]);
        md = max(md, abs_bits(x - y));
        mb = max(mb, abs_bits(y));
    }
    md = __reduce_max_sync(0xffffffffu, md);
    mb = __reduce_max_sync(0xffffffffu, mb);
    if (threadIdx.x % 32 == 0) {
        atomicMax(out, md);
        atomicMax(out + 1, mb);
    }
}

static double rel_error(const floatX *fp8_result, const floatX *bf16_result, size_t n) {
    static unsigned *d = NULL;
    if (!d) CUDA_CHECK(cudaMalloc(&d, 2 * sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(d, 0, 2 * sizeof(unsigned)));
    max_diff_kernel<<<1024, 256>>>(d, fp8_result, bf16_result, n);
    LAUNCH_CHECK();
    unsigned h[2];
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    float md, mb;
    memcpy(&md, &h[0], sizeof md);
    memcpy(&mb, &h[1], sizeof mb);
    return (double)md / mb;
}

// How an FP8 call splits its work: forward and dinp in row chunks of N (FP8_DW_ROW_CHUNKS), `size` rows each;
// dweight in one of fp8_dweight_plan's ways, `size` rows or columns of dweight (or rows of N) per matmul
typedef struct { int way, size; } Split;

// the trainer's split: the forward chunks x (Cin wide), dinp g (OC wide), dweight as fp8_linear_backward does
static Split trainer_split(const Layer *l, int site, int call) {
    Split sp = {FP8_DW_ROW_CHUNKS, 0};
    if (call == CALL_DW) sp.way = fp8_dweight_plan(&f8, site, N, &sp.size);
    else sp.size = fp8_chunk_rows(&f8, site, call == CALL_FWD ? l->cin : l->oc, N);
    return sp;
}

// the same product done by one matmul: all N rows, or all of dweight in one slice (x^T and g^T cast whole)
static Split one_call(const Layer *l, int call) {
    Split sp = {call == CALL_DW ? FP8_DW_OUT_SLICES : FP8_DW_ROW_CHUNKS, call == CALL_DW ? l->oc : N};
    return sp;
}

// what the split cuts: N's rows, dweight's rows (OC) or its columns (C); and into how many pieces
static int split_total(const Layer *l, Split sp) {
    return sp.way == FP8_DW_OUT_SLICES ? l->oc : sp.way == FP8_DW_IN_SLICES ? l->cin : N;
}
static const char *split_name(const Layer *l, Split sp) {
    static char buf[32];
    const int total = split_total(l, sp);
    snprintf(buf, sizeof buf, "%s/%d", sp.way == FP8_DW_OUT_SLICES ? "OC" : sp.way == FP8_DW_IN_SLICES ? "C" : "N",
             (total + sp.size - 1) / sp.size);
    return buf;
}

static void bf16_call(const Layer *l, int call, floatX *D) {
    const int C = l->cin, OC = l->oc;
    int ok;
    if (call == CALL_FWD)
        ok = matmul_lt(&modes, D, W, X, l->bias ? bias : NULL, OC, N, C, 1, 0, C, C, OC, 0.0f,
                       l->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, NULL, 0, 0);
    else if (call == CALL_DINP)
        ok = matmul_lt(&modes, D, W, G, NULL, C, N, OC, 0, 0, C, OC, C, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0, 0);
    else
        ok = matmul_lt(&modes, D, X, G, NULL, C, OC, N, 0, 1, C, OC, C, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0, 0);
    if (!ok) fatal("cuBLASLt has no algorithm for %s %s in bf16", l->name, CALL_NAME[call]);
}

// The casts of call's operands as split by sp, each piece where the matmul of fp8_call(.., sp) reads it. Current
// scaling (delayed = 0): the forward's amax pass and scale update are x's, the dinp's g's. Delayed scaling: no
// pass, the casts record the amax for the history instead (as the trainer's --fp8 delayed scaling does once it
// has one). dweight reuses both scales (the trainer's dweight casts x^T with its forward's scale, g^T with its
// dinp's) and records nothing. dweight's slices put each column block of g (or x) transposed at its rows of g^T
// (x^T), so that the slices together lie as the whole transposed tensor.
static void fp8_casts(const Layer *l, int site, int call, Split sp, int delayed = 0) {
    const int C = l->cin, OC = l->oc, S = sp.size;
    const float *xs = fp8_slot(&f8, site, FP8_OP_X, FP8_SCALE), *gs = fp8_slot(&f8, site, FP8_OP_G, FP8_SCALE);
    float *xa = delayed ? fp8_slot(&f8, site, FP8_OP_X, FP8_AMAX) : NULL;
    float *ga = delayed ? fp8_slot(&f8, site, FP8_OP_G, FP8_AMAX) : NULL;
    if (call == CALL_FWD && !delayed) fp8_scale_for(&f8, site, FP8_OP_X, X, (size_t)N * C, FP8_E4M3, 0);
    if (call == CALL_DINP && !delayed) fp8_scale_for(&f8, site, FP8_OP_G, G, (size_t)N * OC, FP8_E5M2, 0);
    if (call == CALL_DW && sp.way == FP8_DW_OUT_SLICES) {
        fp8_quantize_transpose(xT8, NULL, X, xs, N, C, FP8_E4M3, 0);
        for (int o0 = 0; o0 < OC; o0 += S)
            fp8_quantize_transpose_ld(gT8 + (size_t)o0 * N, NULL, G + o0, (size_t)OC, gs, N, std::min(S, OC - o0),
                                      FP8_E5M2, 0);
        return;
    }
    if (call == CALL_DW && sp.way == FP8_DW_IN_SLICES) {
        fp8_quantize_transpose(gT8, NULL, G, gs, N, OC, FP8_E5M2, 0);
        for (int c0 = 0; c0 < C; c0 += S)
            fp8_quantize_transpose_ld(xT8 + (size_t)c0 * N, NULL, X + c0, (size_t)C, xs, N, std::min(S, C - c0),
                                      FP8_E4M3, 0);
        return;
    }
    for (int r0 = 0; r0 < N; r0 += S) {
        const int rows = std::min(S, N - r0);
        const size_t xo = (size_t)r0 * C, go = (size_t)r0 * OC;
        if (call == CALL_FWD) fp8_quantize(x8 + xo, xa, X + xo, xs, (size_t)rows * C, FP8_E4M3, 0);
        if (call == CALL_DINP) fp8_quantize(g8 + go, ga, G + go, gs, (size_t)rows * OC, FP8_E5M2, 0);
        if (call == CALL_DW) {
            // each chunk transposed on its own (OC x rows, C x rows), as it lands in the trainer's buffers
            fp8_quantize_transpose(gT8 + go, NULL, G + go, gs, rows, OC, FP8_E5M2, 0);
            fp8_quantize_transpose(xT8 + xo, NULL, X + xo, xs, rows, C, FP8_E4M3, 0);
        }
    }
}

// The FP8 matmuls of call on operands cast by fp8_casts(.., sp), one per piece, with fp8_linear.cuh's arguments
static void fp8_call(const Layer *l, int site, int call, floatX *D, Split sp) {
    const int C = l->cin, OC = l->oc, S = sp.size;
    const uint8_t *w = f8.weights + f8.w_off[site], *wt = w + (size_t)OC * C;
    const float *w_deq = fp8_slot(&f8, site, FP8_OP_W, FP8_DEQ), *x_deq = fp8_slot(&f8, site, FP8_OP_X, FP8_DEQ);
    const float *g_deq = fp8_slot(&f8, site, FP8_OP_G, FP8_DEQ);
    if (call == CALL_DW && sp.way == FP8_DW_OUT_SLICES) {
        for (int o0 = 0; o0 < OC; o0 += S)
            matmul_fp8(&modes, D + (size_t)o0 * C, xT8, FP8_E4M3, x_deq, gT8 + (size_t)o0 * N, FP8_E5M2, g_deq, NULL,
                       C, std::min(S, OC - o0), N, N, N, C, 1.0f, 0, 0);
        return;
    }
    if (call == CALL_DW && sp.way == FP8_DW_IN_SLICES) {
        for (int c0 = 0; c0 < C; c0 += S)
            matmul_fp8(&modes, D + c0, xT8 + (size_t)c0 * N, FP8_E4M3, x_deq, gT8, FP8_E5M2, g_deq, NULL,
                       std::min(S, C - c0), OC, N, N, N, C, 1.0f, 0, 0);
        return;
    }
    for (int r0 = 0; r0 < N; r0 += S) {
        const int rows = std::min(S, N - r0);
        const size_t xo = (size_t)r0 * C, go = (size_t)r0 * OC;
        if (call == CALL_FWD)
            matmul_fp8(&modes, D + go, w, FP8_E4M3, w_deq, x8 + xo, FP8_E4M3, x_deq, l->bias ? bias : NULL, OC, rows,
                       C, C, C, OC, 0.0f, 1, 0);
        else if (call == CALL_DINP)
            matmul_fp8(&modes, D + xo, wt, FP8_E4M3, w_deq, g8 + go, FP8_E5M2, g_deq, NULL, C, rows, OC, OC, OC, C,
                       0.0f, 0, 0);
        else
            matmul_fp8(&modes, D, xT8 + xo, FP8_E4M3, x_deq, gT8 + go, FP8_E5M2, g_deq, NULL, C, OC, rows, rows, rows,
                       C, 1.0f, 0, 0);
    }
}

// Where one run of a whole layer writes: its output, dinp and dweight (the bias gradient and the pre-GELU
// output go to buffers the two runs share: nothing compares them)
typedef struct { floatX *out, *dinp, *dweight; } LayerOut;

// The layer's forward and backward in bf16, as gpu/linear.cuh's linear_forward/backward call them where a
// layer is not in FP8 (GELU and dGELU fused into the matmuls' epilogues where cuBLASLt offers them)
static void bf16_layer(const Layer *l, const LayerOut *o) {
    matmul_forward(&modes, o->out, l->gelu_out ? P : NULL, X, W, l->bias ? bias : NULL, N, l->cin, l->oc, 0);
    matmul_backward(&modes, o->dinp, o->dweight, l->dbias ? dbias : NULL, dbias_scratch, G, X, W,
                    l->gelu_in ? XG : NULL, N, l->cin, l->oc, 0);
}

// The same through the FP8 functions, as linear_forward/backward call them where the layer is in FP8 (GELU in
// the forward's epilogue where cuBLASLt offers it, dGELU a kernel of its own; the bias gradient in the pass that
// finds the gradient's amax under current scaling)
static void fp8_layer(const Layer *l, int site, const LayerOut *o) {
    fp8_linear_forward(&f8, &modes, site, o->out, l->gelu_out ? P : NULL, X, W, l->bias ? bias : NULL, N, 0);
    fp8_linear_backward(&f8, &modes, site, o->dinp, o->dweight, l->dbias ? dbias : NULL, dbias_scratch, G, W, X,
                        l->gelu_in ? XG : NULL, N, 0);
}

// Delayed scaling from here on (1) or current scaling (0). Delayed as a training micro-step after the first
// roll: the scales are those the last current-scaling run left (this tensor's own), and the casts record their
// amax instead of a pass before them; nothing rolls, so the scales stay.
static void set_delayed(int on) { f8.delayed = f8.rolled = f8.record = on; }

// the median ms of REPS calls of f after WARMUP, each between two events
static std::vector<cudaEvent_t> ev;
template <class F> static float median_ms(F f) {
    for (int i = 0; i < WARMUP; i++) f();
    CUDA_CHECK(cudaEventRecord(ev[0], 0));
    for (int i = 1; i <= REPS; i++) {
        f();
        CUDA_CHECK(cudaEventRecord(ev[i], 0));
    }
    CUDA_CHECK(cudaEventSynchronize(ev[REPS]));
    float t[REPS];
    for (int i = 0; i < REPS; i++) CUDA_CHECK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
    std::sort(t, t + REPS);
    return t[REPS / 2];
}

// f again and again for ~total_ms from an idle queue: ms and joules per call (joules < 0: not measured)
typedef struct { double ms, joules; } Sustained;
template <class F> static Sustained sustain(F f, float ms_each, double total_ms, EnergyMeter *meter) {
    const int reps = (int)(total_ms / ms_each) + 1;
    CUDA_CHECK(cudaDeviceSynchronize());
    const double j0 = energy_joules(meter);
    CUDA_CHECK(cudaEventRecord(ev[0], 0));
    for (int r = 0; r < reps; r++) f();
    CUDA_CHECK(cudaEventRecord(ev[1], 0));
    CUDA_CHECK(cudaEventSynchronize(ev[1]));
    const double j1 = energy_joules(meter);
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
    return {ms / reps, j0 < 0 || j1 < 0 ? -1.0 : (j1 - j0) / reps};
}

static void print_joules(double j) {
    if (j < 0) printf(" %8s", "-");
    else printf(" %8.3f", j);
}

int main(int argc, char **argv) {
    int B = 64, T = 1024, C = 768, L = 12, Vp = 50304;
    if (argc == 6) { B = atoi(argv[1]); T = atoi(argv[2]); C = atoi(argv[3]); L = atoi(argv[4]); Vp = atoi(argv[5]); }
    else if (argc != 1) { fprintf(stderr, "usage: %s [B T C L Vp]\n", argv[0]); return 2; }
    if (B <= 0 || T <= 0 || C <= 0 || L <= 0 || Vp <= 0 || (long)B * T > INT32_MAX) {
        fprintf(stderr, "bench_fp8: B T C L Vp must be positive, B*T below 2^31\n");
        return 2;
    }
    N = B * T;
    int ndev = 0, major = 0, minor = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("bench_fp8: no GPU\n");
        return 77;
    }
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    if (major != 9 || minor != 0) {  // (FP8 matmuls run from 8.9 on, but the floors are Hopper's)
        printf("bench_fp8: its floors are the H100/H200's peaks: a GPU of compute capability 9.0; this one is %d.%d\n",
               major, minor);
        return 77;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    matmul_init(0);

    //  name       cin    oc      /step bias gelu_out gelu_in dbias
    const Layer layers[] = {
        {"qkv", C, 3 * C, L, 1, 0, 0, 0},     {"attproj", C, C, L, 1, 0, 0, 0}, {"fc", C, 4 * C, L, 1, 1, 0, 1},
        {"fcproj", 4 * C, C, L, 1, 0, 1, 0}, {"lm_head", C, Vp, 1, 0, 0, 0, 0},
    };
    const int NL = (int)(sizeof layers / sizeof layers[0]);
    int oc[NL], cc[NL];
    for (int i = 0; i < NL; i++) { oc[i] = layers[i].oc; cc[i] = layers[i].cin; }
    // the trainer's buffers (gpu/fp8_layers.cuh, fp8_layers_lend): the blocks' layers cast into the logits' memory
    // (2 N Vp bytes, of which they use 12 N C: every operand whole), the lm_head into the MLP gradient's (8 N C);
    // they set the chunks and slices, which the single matmuls follow (their casts write full-size buffers
    // instead), and the whole layers use them as the trainer does
    fp8_linear_init(&f8, NL, oc, cc, 0, 0);  // current scaling; set_delayed switches
    uint8_t *lent_blocks, *lent_head;
    CUDA_CHECK(cudaMalloc(&lent_blocks, (size_t)12 * N * C));
    CUDA_CHECK(cudaMalloc(&lent_head, (size_t)8 * N * C));
    fp8_linear_lend(&f8, lent_blocks, (size_t)12 * N * C, NL - 1, 1);
    fp8_linear_lend(&f8, lent_head, (size_t)8 * N * C, NL - 1, 0);
    for (int i = 0; i < NL; i++)
        if (!fp8_linear_fits(&f8, i, N)) {
            fprintf(stderr, "bench_fp8: %s (%d x %d) cannot run in FP8 at N=%d: every dimension must be a multiple "
                            "of 16\n", layers[i].name, layers[i].oc, layers[i].cin, N);
            return 2;
        }

    const size_t wide = (size_t)std::max(Vp, 4 * C), act = (size_t)N * 4 * C, grad = (size_t)N * wide;
    CUDA_CHECK(cudaMalloc(&X, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&G, grad * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&W, wide * C * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&bias, wide * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&D16, grad * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&D8, grad * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&x8, act));
    CUDA_CHECK(cudaMalloc(&xT8, act));
    CUDA_CHECK(cudaMalloc(&g8, grad));
    CUDA_CHECK(cudaMalloc(&gT8, grad));
    CUDA_CHECK(cudaMalloc(&XG, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&P, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&DX16, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&DX8, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&DW16, wide * C * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&DW8, wide * C * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dbias, wide * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dbias_scratch, bias_grad_scratch_floats((int)wide) * sizeof(float)));
    // magnitudes near the step's (unit activations after a layernorm, weights of the 0.02-std initialisation,
    // small gradients): the scales differ per operand as they do in training. XG, the pre-GELU values of
    // fcproj's input, spans GELU's bend, so that its derivative varies as it does in training.
    fill_uniform(X, act, 1.0f, 1, 0);
    fill_uniform(G, grad, 1e-3f, 2, 0);
    fill_uniform(W, wide * C, 0.035f, 3, 0);
    fill_uniform(bias, wide, 0.02f, 4, 0);
    fill_uniform(XG, act, 2.0f, 5, 0);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaMemset(D16, 0, grad * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(D8, 0, grad * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(DW16, 0, wide * C * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(DW8, 0, wide * C * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(dbias, 0, wide * sizeof(floatX)));
    ev.resize(REPS + 1);
    for (auto &e : ev) CUDA_CHECK(cudaEventCreate(&e));
    EnergyMeter meter;
    char bus[32] = "";
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
    const int have_energy = energy_open(&meter, bus);

    printf("FP8 against bf16, the linear layers of one step on %s: N=%d C=%d L=%d Vp=%d\n", prop.name, N, C, L,
           Vp);
    if (!have_energy) printf("energy: not measured (%s)\n", meter.why);
    printf("\n1. each matmul on its own\n");
    printf("bf16: matmul_lt, the heuristic's first algorithm; epilogue BIAS in the forward (lm_head none), none in\n"
           "  the backward: the trainer's fused GELU (fc fwd) and dGELU (fcproj dinp) left out here (see 2.)\n");
    printf("fp8: matmul_fp8 split as the trainer splits it (buffers of %.1f MB for the blocks, %.1f MB for the lm_head),\n"
           "  split: N/k fwd and dinp in k row\n"
           "  chunks; dweight summed over all N rows per matmul, OC/k in k slices of its rows (x^T cast whole, g^T\n"
           "  a column block of g at a time), C/k in k slices of its columns (g^T whole, x^T by blocks), or N/k in\n"
           "  k row chunks of both where neither fits a buffer. fwd E4M3 x E4M3, fast accumulation, bias; dinp E4M3\n"
           "  x E5M2; dweight E4M3 x E5M2, beta 1. 1call: the same in one matmul (no chunks or slices)\n",
           4.0 * N * C / 1e6, 8.0 / 3 * N * C / 1e6);
    printf("casts: amax pass, scale update and cast of x (fwd) or g (dinp); transposing casts of g and x (dweight)\n");
    printf("ms: median of %d calls; J: per call over ~%.1f s of calls (fp8+c: the matmul and its casts); floor: the\n"
           "  FLOPs at %.0f TFLOP/s (FP8 dense, H100/H200 SXM); err: max |fp8 - bf16| / max |bf16| (a few %%\n"
           "  expected, ~100%% for a wrong layout)\n",
           REPS, SUSTAIN_CALL_MS / 1e3, PEAK_FP8_TFLOPS);
    printf("%-8s %-7s %5s %6s %8s %7s %8s %7s %8s %8s %7s %8s %8s %8s %6s\n", "layer", "call", "/step", "split",
           "bf16_ms", "TFLOP/s", "fp8_ms", "TFLOP/s", "casts_ms", "1call_ms", "speedup", "bf16_J", "fp8+c_J",
           "floor_ms", "err%");

    // per-step sums: bf16, fp8 matmuls, casts (current, delayed scaling), one-call fp8; joules (bf16, fp8 +
    // casts), sustained ms, floors, FLOPs
    double s16 = 0, s8 = 0, scast = 0, scastd = 0, s1 = 0, sj16 = 0, sj8 = 0, ss16 = 0, ss8 = 0;
    double sfl16 = 0, sfl8 = 0, sflops = 0;
    int joules_all = have_energy;  // every line's joules measured (the counter can fail mid-run)
    float wcast[NL];
    for (int site = 0; site < NL; site++) {
        const Layer *l = &layers[site];
        fp8_linear_weight(&f8, site, W, 0);
        for (int call = 0; call < CALLS; call++) fp8_casts(l, site, call, trainer_split(l, site, call));  // scales
        for (int call = 0; call < CALLS; call++) {
            const Split sp = trainer_split(l, site, call), one = one_call(l, call);
            const int m = call == CALL_FWD ? l->oc : l->cin, n = call == CALL_DW ? l->oc : N;
            const int k = call == CALL_FWD ? l->cin : call == CALL_DINP ? l->oc : N;
            const double flops = 2.0 * m * (double)n * k;
            const float t16 = median_ms([&] { bf16_call(l, call, D16); });
            const float t8 = median_ms([&] { fp8_call(l, site, call, D8, sp); });
            const float tc = median_ms([&] { fp8_casts(l, site, call, sp); });
            const float tcd = call == CALL_DW ? tc : median_ms([&] { fp8_casts(l, site, call, sp, 1); });
            // one product each onto zeros (dweight accumulates), the codes those the casts just wrote
            const size_t nout = (size_t)m * n;
            CUDA_CHECK(cudaMemset(D16, 0, nout * sizeof(floatX)));
            CUDA_CHECK(cudaMemset(D8, 0, nout * sizeof(floatX)));
            bf16_call(l, call, D16);
            fp8_call(l, site, call, D8, sp);
            const double err = rel_error(D8, D16, nout);
            const Sustained e16 = sustain([&] { bf16_call(l, call, D16); }, t16, SUSTAIN_CALL_MS, &meter);
            const Sustained e8 = sustain([&] {
                fp8_casts(l, site, call, sp);
                fp8_call(l, site, call, D8, sp);
            }, t8 + tc, SUSTAIN_CALL_MS, &meter);
            // one call: dweight's transposed operands cast whole first; the others' codes lie the same whole or
            // chunked
            if (call == CALL_DW) fp8_casts(l, site, call, one);
            const float t1 = median_ms([&] { fp8_call(l, site, call, D8, one); });
            const double floor8 = flops / (PEAK_FP8_TFLOPS * 1e9), floor16 = flops / (PEAK_BF16_TFLOPS * 1e9);
            printf("%-8s %-7s %5d %6s %8.4f %7.1f %8.4f %7.1f %8.4f %8.4f %6.2fx", l->name, CALL_NAME[call],
                   l->per_step, split_name(l, sp), t16, flops / t16 * 1e-9, t8, flops / t8 * 1e-9, tc, t1,
                   t16 / (t8 + tc));
            print_joules(e16.joules);
            print_joules(e8.joules);
            printf(" %8.4f %6.2f\n", floor8, 100.0 * err);
            fflush(stdout);
            const int ps = l->per_step;
            s16 += ps * t16; s8 += ps * t8; scast += ps * tc; scastd += ps * tcd; s1 += ps * t1;
            sj16 += ps * e16.joules; sj8 += ps * e8.joules;
            if (e16.joules < 0 || e8.joules < 0) joules_all = 0;
            ss16 += ps * e16.ms; ss8 += ps * e8.ms;
            sfl16 += ps * floor16; sfl8 += ps * floor8; sflops += ps * flops;
        }
        wcast[site] = median_ms([&] { fp8_linear_weight(&f8, site, W, 0); });
    }
    CUDA_CHECK(cudaGetLastError());

    printf("per step (each line times its /step), %.1f TFLOP:\n", sflops * 1e-12);
    printf("  bf16         %8.2f ms (%.1f TFLOP/s; sustained %.2f ms)", s16, sflops / s16 * 1e-9, ss16);
    if (joules_all) printf(", %.1f J", sj16);
    printf("; floor at %.0f TFLOP/s %.2f ms\n", PEAK_BF16_TFLOPS, sfl16);
    printf("  fp8 + casts  %8.2f ms (%.1f TFLOP/s; sustained %.2f ms)", s8 + scast, sflops / (s8 + scast) * 1e-9,
           ss8);
    if (joules_all) printf(", %.1f J", sj8);
    printf("; floor at %.0f TFLOP/s %.2f ms\n", PEAK_FP8_TFLOPS, sfl8);
    printf("    matmuls %.2f ms, casts %.2f ms: the casts %.1f%% of fp8 + casts; matmuls in one call each: %.2f ms\n",
           s8, scast, 100.0 * scast / (s8 + scast), s1);
    printf("    with delayed scaling (the casts record the amax, no pass before them): casts %.2f ms, fp8 + casts "
           "%.2f ms\n", scastd, s8 + scastd);
    printf("  fp8 + casts against bf16: %.2fx the speed", s16 / (s8 + scast));
    if (joules_all) printf(", %.2fx the energy", sj8 / sj16);
    else if (have_energy) printf(" (energy: %s)", meter.why);
    printf("\n");

    printf("\n2. each layer whole, forward and backward, through the trainer's functions\n");
    printf("bf16: matmul_forward + matmul_backward (GELU fused into fc's forward, dGELU into fcproj's dinp where\n"
           "  cuBLASLt offers them); fp8: fp8_linear_forward + fp8_linear_backward on the trainer's buffers (their\n"
           "  casts as the trainer runs them: g once for both its copies; GELU in fc's forward epilogue where\n"
           "  cuBLASLt offers it, dGELU a kernel), current scaling, and fp8d: delayed scaling with a history (no\n"
           "  amax passes). Both: the layer's bias; fc's bias gradient (a bf16 pass; under current scaling it\n"
           "  also finds g's amax). Not in: the weights' casts (once per update, below)\n");
    printf("ms: median of %d calls; J: per call over ~%.1f s of calls; speed: bf16_ms / fp8_ms; energy: fp8_J /\n"
           "  bf16_J; err%%: max |fp8 - bf16| / max |bf16| of the output, dinp and dweight (current scaling)\n",
           REPS, SUSTAIN_LAYER_MS / 1e3);
    printf("%-8s %5s %8s %8s %8s %6s %6s %8s %8s %8s %6s %6s %6s %6s %6s\n", "layer", "/step", "bf16_ms", "fp8_ms",
           "fp8d_ms", "speed", "speedd", "bf16_J", "fp8_J", "fp8d_J", "energy", "energd", "out%", "dinp%", "dW%");
    // per-step sums over the layers: median ms, sustained ms and joules of bf16, fp8 and fp8 delayed
    double lt16 = 0, lt8 = 0, lt8d = 0, ls16 = 0, ls8 = 0, ls8d = 0, lj16 = 0, lj8 = 0, lj8d = 0;
    int ljoules_all = have_energy;
    for (int site = 0; site < NL; site++) {
        const Layer *l = &layers[site];
        const LayerOut o16 = {D16, DX16, DW16}, o8 = {D8, DX8, DW8};
        set_delayed(0);
        const float t16 = median_ms([&] { bf16_layer(l, &o16); });
        const float t8 = median_ms([&] { fp8_layer(l, site, &o8); });
        const Sustained e16 = sustain([&] { bf16_layer(l, &o16); }, t16, SUSTAIN_LAYER_MS, &meter);
        const Sustained e8 = sustain([&] { fp8_layer(l, site, &o8); }, t8, SUSTAIN_LAYER_MS, &meter);
        // each once onto zeroed weight gradients (they accumulate): the three outputs compared
        const size_t nw = (size_t)l->oc * l->cin;
        CUDA_CHECK(cudaMemset(DW16, 0, nw * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(DW8, 0, nw * sizeof(floatX)));
        bf16_layer(l, &o16);
        fp8_layer(l, site, &o8);
        const double eo = rel_error(D8, D16, (size_t)N * l->oc), ex = rel_error(DX8, DX16, (size_t)N * l->cin);
        const double ew = rel_error(DW8, DW16, nw);
        set_delayed(1);
        const float t8d = median_ms([&] { fp8_layer(l, site, &o8); });
        const Sustained e8d = sustain([&] { fp8_layer(l, site, &o8); }, t8d, SUSTAIN_LAYER_MS, &meter);
        set_delayed(0);
        printf("%-8s %5d %8.4f %8.4f %8.4f %5.2fx %5.2fx", l->name, l->per_step, t16, t8, t8d, t16 / t8, t16 / t8d);
        print_joules(e16.joules);
        print_joules(e8.joules);
        print_joules(e8d.joules);
        if (e16.joules > 0 && e8.joules >= 0 && e8d.joules >= 0)
            printf(" %5.2fx %5.2fx", e8.joules / e16.joules, e8d.joules / e16.joules);
        else
            printf(" %6s %6s", "-", "-");
        printf(" %6.2f %6.2f %6.2f\n", 100.0 * eo, 100.0 * ex, 100.0 * ew);
        fflush(stdout);
        const int ps = l->per_step;
        lt16 += ps * t16; lt8 += ps * t8; lt8d += ps * t8d;
        ls16 += ps * e16.ms; ls8 += ps * e8.ms; ls8d += ps * e8d.ms;
        lj16 += ps * e16.joules; lj8 += ps * e8.joules; lj8d += ps * e8d.joules;
        if (e16.joules < 0 || e8.joules < 0 || e8d.joules < 0) ljoules_all = 0;
    }
    CUDA_CHECK(cudaGetLastError());
    printf("per step, the linear layers whole (each line times its /step):\n");
    const char *lname[3] = {"bf16", "fp8", "fp8 delayed"};
    const double lt[3] = {lt16, lt8, lt8d}, ls[3] = {ls16, ls8, ls8d}, lj[3] = {lj16, lj8, lj8d};
    for (int i = 0; i < 3; i++) {
        printf("  %-12s %8.2f ms (sustained %.2f ms)", lname[i], lt[i], ls[i]);
        if (ljoules_all) printf(", %.1f J", lj[i]);
        if (i > 0) {
            printf(": %.2fx the speed", lt16 / lt[i]);
            if (ljoules_all) printf(", %.2fx the energy", lj[i] / lj16);
        }
        printf("\n");
    }
    if (have_energy && !ljoules_all) printf("  (energy: %s)\n", meter.why);

    printf("\nweight casts (amax, scale, cast and transposed cast of W; once per update), ms per layer:");
    double wsum = 0;
    for (int i = 0; i < NL; i++) {
        printf(" %s %.4f", layers[i].name, wcast[i]);
        wsum += layers[i].per_step * wcast[i];
    }
    printf("; per update %.2f ms\n", wsum);
    energy_close(&meter);
    fp8_linear_free(&f8);
    matmul_free();
    return 0;
}
#endif
