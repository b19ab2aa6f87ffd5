// kernels/fp8_linear.cuh: linear layers with FP8 matmuls (--fp8 1, bf16 build), built on
// kernels/fp8.cuh. Each linear layer that runs in FP8 is a "site" (the four of every block,
// the lm_head): it keeps its weight's FP8 copies, as stored and transposed, and the scales
// of its three operands.
//   forward:  out = x W^T + b          x, W in E4M3 (fast accumulation), out bf16
//   backward: dx = g W                 g (the output's gradient) in E5M2, W^T in E4M3
//             dW += g^T x              g^T in E5M2, x^T in E4M3, accumulated in bf16
// Two scaling recipes for the inputs and gradients (the weights always take their own
// amax, cast once per update by fp8_linear_weight):
//   current: each operand's scale comes from its own amax, found by a pass over the tensor
//     just before its cast. A step depends on nothing but its own tensors: nothing to keep
//     in the checkpoint, and the first step is scaled as well as the thousandth.
//   delayed: the scale comes from the largest amax of the last FP8_HISTORY steps, so the
//     cast needs no pass before it and records this step's amax as it goes
//     (fp8_linear_roll moves it into the history after each step). One read of each
//     operand less; the histories join the checkpoint (fp8_linear_state_*). Until the
//     first roll the step scales itself, as current scaling does.
// Operands go through three buffers of codes, the site's own or memory the caller lends
// (fp8_linear_lend: the trainer lends the blocks the logits' memory and the lm_head the MLP
// gradient's, gpu/fp8_layers.cuh). Where they hold a whole operand, the backward reads the
// output gradient once for both its copies (g for dinp, g^T for dweight) and runs each
// product as one matmul. Else (the lm_head, whose gradient is N x 50304) operands go in
// pieces: the forward and dinp over row chunks (each output row is one matmul's); dweight
// over slices of its rows or columns, each summing all N rows in one matmul
// (fp8_dweight_plan), so it is rounded once.
// GELU runs in the FP8 forward's epilogue, as in bf16 (or, where cuBLASLt offers none, as a
// kernel of its own); its derivative is a kernel (gelu.cuh); bias gradients are bf16 passes.
#pragma once
#include "fp8.cuh"

enum { FP8_OP_W, FP8_OP_X, FP8_OP_G, FP8_OPS };  // weight, input, output gradient
// per site and operand, in device memory: the dequantization factor, the scale, the amax and
// a pad. On an H200, cuBLASLt refused (status 15, at the call, after its heuristic had offered
// the algorithm) every FP8 layer's matmul while the groups were 3 floats (scale, factor,
// amax: W's factor 4 bytes past a 16-byte boundary, x's 12 bytes after it), and ran the same
// products with factors in allocations of their own (build/test_fp8): 16 bytes a group, the
// factor first, keeps each factor 16-byte aligned.
enum { FP8_DEQ, FP8_SCALE, FP8_AMAX, FP8_PAD, FP8_SLOTS };

#define FP8_HISTORY 16  // steps of amax history for delayed scaling

typedef struct {
    int delayed;        // 1: delayed scaling of inputs and gradients, 0: current
    int rolled;         // host: the histories hold a step (delayed scaling applies from then on)
    int record;         // host: casts add their amax to the step's (training micro-steps, not evaluation)
    float *hist;        // device: [site][input, gradient][FP8_HISTORY] amaxes
    int *pos;           // device: steps rolled into the histories
    int nsites;
    int *oc, *c;        // host: each site's weight shape (OC x C)
    size_t *w_off;      // host: each site's weight codes in `weights` (then its transpose)
    uint8_t *weights;   // device: per site W (OC x C) then W^T (C x OC), E4M3 (cast: none)
    int cast;           // 1: no copies kept; each matmul casts its W or W^T into wbuf just before it
    uint8_t *wbuf;      // device (cast): one weight's codes, the largest site's OC x C
    float *scalars;     // device: [site][operand][slot]
    uint8_t *buf[3];    // device: codes of one operand chunk each (cap 0: none; the sites use lent ones)
    size_t cap;         // bytes of each buffer
    uint8_t *lent[2][3];  // device: buffers in memory lent by the caller, [0] for the sites below lent_split,
    size_t lent_cap[2];   // [1] for the others, and the bytes of each (0: none lent)
    int lent_split;
} Fp8Linear;

// bytes of a site's two weight copies, rounded up so that every site's start 256-byte aligned
static size_t fp8_site_bytes(int oc, int c) { return (2 * (size_t)oc * c + 255) / 256 * 256; }

// device bytes of the FP8 state for sites of these shapes and buffers of cap bytes; cast: one
// weight buffer instead of every site's two copies
static size_t fp8_linear_bytes(int nsites, const int *oc, const int *c, size_t cap, int cast = 0) {
    size_t w = 0;
    for (int i = 0; i < nsites; i++) {
        size_t b = fp8_site_bytes(oc[i], c[i]);
        w = cast ? (b / 2 > w ? b / 2 : w) : w + b;
    }
    return w + 3 * cap + (size_t)nsites * (FP8_OPS * FP8_SLOTS + 2 * FP8_HISTORY) * sizeof(float) + sizeof(int);
}

static void fp8_linear_init(Fp8Linear *f, int nsites, const int *oc, const int *c, size_t cap, int delayed,
                            int cast = 0) {
    f->delayed = delayed;
    f->cast = cast;
    f->rolled = f->record = 0;
    CUDA_CHECK(cudaMalloc(&f->hist, (size_t)nsites * 2 * FP8_HISTORY * sizeof(float)));
    CUDA_CHECK(cudaMemset(f->hist, 0, (size_t)nsites * 2 * FP8_HISTORY * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&f->pos, sizeof(int)));
    CUDA_CHECK(cudaMemset(f->pos, 0, sizeof(int)));
    f->nsites = nsites;
    f->oc = (int *)xmalloc(nsites * sizeof(int));
    f->c = (int *)xmalloc(nsites * sizeof(int));
    f->w_off = (size_t *)xmalloc(nsites * sizeof(size_t));
    size_t w = 0;
    for (int i = 0; i < nsites; i++) {
        f->oc[i] = oc[i];
        f->c[i] = c[i];
        f->w_off[i] = w;
        w += fp8_site_bytes(oc[i], c[i]);
    }
    f->weights = f->wbuf = NULL;
    if (cast) {
        size_t most = 0;
        for (int i = 0; i < nsites; i++) most = (size_t)oc[i] * c[i] > most ? (size_t)oc[i] * c[i] : most;
        if (most) CUDA_CHECK(cudaMalloc(&f->wbuf, most));
    } else if (w) {
        CUDA_CHECK(cudaMalloc(&f->weights, w));
    }
    size_t ns = (size_t)nsites * FP8_OPS * FP8_SLOTS;
    float *h = (float *)xmalloc(ns * sizeof(float));
    for (size_t i = 0; i < ns; i++) h[i] = i % FP8_SLOTS == FP8_AMAX ? 0.0f : 1.0f;  // scale 1 until an amax
    CUDA_CHECK(cudaMalloc(&f->scalars, ns * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(f->scalars, h, ns * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    f->cap = cap;
    for (int i = 0; i < 3; i++) f->buf[i] = NULL;
    if (cap)  // (none: every site runs in lent buffers)
        for (int i = 0; i < 3; i++) CUDA_CHECK(cudaMalloc(&f->buf[i], cap));
}

static void fp8_linear_free(Fp8Linear *f) {
    if (!f->nsites) return;
    cudaFree(f->weights);
    cudaFree(f->wbuf);
    cudaFree(f->scalars);
    cudaFree(f->hist);
    cudaFree(f->pos);
    for (int i = 0; i < 3; i++) cudaFree(f->buf[i]);
    free(f->oc);
    free(f->c);
    free(f->w_off);
    memset(f, 0, sizeof *f);
}

// Lends `bytes` of device memory at base (256-byte aligned), free whenever the sites below
// split run (below: 1) or the others (below: 0), as their three buffers
static void fp8_linear_lend(Fp8Linear *f, void *base, size_t bytes, int split, int below) {
    const int r = below ? 0 : 1;
    f->lent_cap[r] = bytes / 3 / 256 * 256;
    for (int i = 0; i < 3; i++) f->lent[r][i] = (uint8_t *)base + i * f->lent_cap[r];
    f->lent_split = split;
}

// the three buffers the site's operands are cast into (the larger of its lent and its own
// ones), and the bytes of each
static uint8_t *const *fp8_bufs(const Fp8Linear *f, int site, size_t *cap) {
    const int r = site < f->lent_split ? 0 : 1;
    if (f->lent_cap[r] > f->cap) {
        *cap = f->lent_cap[r];
        return f->lent[r];
    }
    *cap = f->cap;
    return f->buf;
}

static float *fp8_slot(const Fp8Linear *f, int site, int op, int slot) {
    return f->scalars + ((size_t)site * FP8_OPS + op) * FP8_SLOTS + slot;
}

// An operand's scale from its own amax: fp8_amax_begin zeroes the amax slot and returns it for
// the pass that reduces it, fp8_amax_end sets the scale from it
static float *fp8_amax_begin(const Fp8Linear *f, int site, int op, cudaStream_t s) {
    float *amax = fp8_slot(f, site, op, FP8_AMAX);
    CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), s));
    return amax;
}
static void fp8_amax_end(const Fp8Linear *f, int site, int op, Fp8Format fmt, cudaStream_t s) {
    fp8_update_scale(fp8_slot(f, site, op, FP8_SCALE), fp8_slot(f, site, op, FP8_DEQ), fp8_slot(f, site, op, FP8_AMAX),
                     1, fmt, 0, s);
}

// The operand's scale from the amax of x (n elements), in a pass of its own
static void fp8_scale_for(const Fp8Linear *f, int site, int op, const floatX *x, size_t n, Fp8Format fmt,
                          cudaStream_t s) {
    fp8_quantize(NULL, fp8_amax_begin(f, site, op, s), x, NULL, n, fmt, s);
    fp8_amax_end(f, site, op, fmt, s);
}

// Whether inputs and gradients take their scale from themselves now (current scaling, and
// delayed scaling before its first roll), rather than from the history
static int fp8_scales_itself(const Fp8Linear *f) { return !(f->delayed && f->rolled); }

// Before an input's or gradient's casts: the scale they use, and where the casts record
// the amax (NULL: nowhere). Current scaling (and delayed before its first roll) scales
// from the tensor itself; delayed keeps the history's scale and records this step's amax
// while f->record (training micro-steps: evaluation and sampling do not move the scales).
// Before the first roll the amax slot holds the last tensor scaled, so the first history
// entry is the first step's last micro-step's amax.
static float *fp8_operand_scale(const Fp8Linear *f, int site, int op, const floatX *x, size_t n, Fp8Format fmt,
                                cudaStream_t s) {
    if (!fp8_scales_itself(f)) return f->record ? fp8_slot(f, site, op, FP8_AMAX) : NULL;
    fp8_scale_for(f, site, op, x, n, fmt, s);
    return NULL;
}

// Delayed scaling, after each training step: every input's and gradient's amax of the step
// into its history, the amax back to 0, the scale from the history. One block; the slot
// counter moves once every entry has read it.
__global__ void fp8_roll_kernel(float *scalars, float *hist, int *pos, int nsites) {
    const int p = *pos % FP8_HISTORY;
    for (int i = threadIdx.x; i < 2 * nsites; i += blockDim.x) {
        const int op = i % 2 ? FP8_OP_G : FP8_OP_X;
        float *sl = scalars + ((size_t)(i / 2) * FP8_OPS + op) * FP8_SLOTS, *h = hist + (size_t)i * FP8_HISTORY;
        h[p] = sl[FP8_AMAX];
        sl[FP8_AMAX] = 0.0f;
        float sc = fp8_scale_from_amax(fp8_amax_history_max(h, FP8_HISTORY),
                                       op == FP8_OP_G ? FP8_E5M2_MAX : FP8_E4M3_MAX, 0, sl[FP8_SCALE]);
        sl[FP8_SCALE] = sc;
        sl[FP8_DEQ] = fp8_dequant_factor(sc);
    }
    __syncthreads();
    if (threadIdx.x == 0) *pos += 1;
}

// Floats of the scalars (scale, dequantization factor, amax per site and operand): with
// several ranks the caller takes their largest over the ranks before the roll, so that
// every rank's histories and scales stay the same (the scales and weights' slots already
// agree; the inputs' and gradients' amaxes become the global ones)
static size_t fp8_linear_scalar_count(const Fp8Linear *f) { return (size_t)f->nsites * FP8_OPS * FP8_SLOTS; }

// Enqueues the roll (delayed scaling only); the caller marks f->rolled once it is enqueued
// for good (a CUDA graph replays it without this function running)
static void fp8_linear_roll(const Fp8Linear *f, cudaStream_t s) {
    if (!f->delayed) return;
    fp8_roll_kernel<<<1, 512, 0, s>>>(f->scalars, f->hist, f->pos, f->nsites);
    LAUNCH_CHECK();
}

// The FP8 state as floats, for the checkpoint: each site's weight shape (0 x 0 for a layer
// not in FP8: which layers run in FP8, and a state of other layers is told apart), the
// scalars, the histories, the history slot and whether a roll happened (the last four
// matter to delayed scaling only; current scaling scales each tensor afresh).
static size_t fp8_linear_state_floats(const Fp8Linear *f) {
    return (size_t)f->nsites * (2 + FP8_OPS * FP8_SLOTS + 2 * FP8_HISTORY) + 2;
}

static void fp8_linear_state_get(const Fp8Linear *f, float *out, cudaStream_t s) {
    size_t ns = (size_t)f->nsites * FP8_OPS * FP8_SLOTS, nh = (size_t)f->nsites * 2 * FP8_HISTORY;
    int pos;
    for (int i = 0; i < f->nsites; i++) {  // shapes stay exact in a float (below 2^24)
        *out++ = (float)f->oc[i];
        *out++ = (float)f->c[i];
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemcpy(out, f->scalars, ns * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(out + ns, f->hist, nh * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(&pos, f->pos, sizeof(int), cudaMemcpyDeviceToHost));
    out[ns + nh] = (float)(pos % FP8_HISTORY);  // only the slot matters
    out[ns + nh + 1] = (float)f->rolled;
    if (!f->delayed) {  // current scaling keeps no history: none for a delayed resume to trust (one
        // this run resumed from, under delayed scaling, would be many steps old by now)
        memset(out + ns, 0, (nh + 2) * sizeof(float));
    }
}

// Restores a state of fp8_linear_state_floats(f) floats; 0 (nothing changed) when it was
// written for other layers. The weights' scales come back too: the caller casts the weights
// again (they are scaled from their own amax, so that gives what the writer had).
static int fp8_linear_state_set(Fp8Linear *f, const float *in) {
    size_t ns = (size_t)f->nsites * FP8_OPS * FP8_SLOTS, nh = (size_t)f->nsites * 2 * FP8_HISTORY;
    for (int i = 0; i < f->nsites; i++)
        if (in[2 * i] != (float)f->oc[i] || in[2 * i + 1] != (float)f->c[i]) return 0;
    in += 2 * (size_t)f->nsites;
    int pos = (int)in[ns + nh];
    CUDA_CHECK(cudaMemcpy(f->scalars, in, ns * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(f->hist, in + ns, nh * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(f->pos, &pos, sizeof(int), cudaMemcpyHostToDevice));
    f->rolled = in[ns + nh + 1] != 0.0f;
    return 1;
}

// Rows per chunk of an operand `width` codes wide in the site's buffers (common/fp8.h); 0: not even 16 fit
static int fp8_chunk_rows(const Fp8Linear *f, int site, int width, int N) {
    size_t cap;
    fp8_bufs(f, site, &cap);
    return fp8_rows_per_chunk(cap, width, N);
}

// Whether the site can run in FP8 at N rows: cuBLASLt's FP8 kernels need every dimension a
// multiple of 16, and a chunk at least 16 rows; the transposing casts take all N rows in one
// grid of at most 65535 tiles of 64 (the caller falls back to bf16 where not, forward and
// backward alike)
static int fp8_linear_fits(const Fp8Linear *f, int site, int N) {
    int OC = f->oc[site], C = f->c[site];
    return N % 16 == 0 && N <= 65535 * 64 && OC % 16 == 0 && C % 16 == 0 &&
           fp8_chunk_rows(f, site, OC > C ? OC : C, N) >= 16;
}

// The site's weight W (OC x C, bf16) to its FP8 copies, after every change of the weights
// (cast: its scale only; the matmuls cast it with that scale, fp8_weight_codes)
static void fp8_linear_weight(Fp8Linear *f, int site, const floatX *W, cudaStream_t s) {
    int OC = f->oc[site], C = f->c[site];
    const float *scale = fp8_slot(f, site, FP8_OP_W, FP8_SCALE);
    fp8_scale_for(f, site, FP8_OP_W, W, (size_t)OC * C, FP8_E4M3, s);
    if (f->cast) return;
    uint8_t *w = f->weights + f->w_off[site], *wt = w + (size_t)OC * C;
    fp8_quantize_both(w, wt, NULL, W, scale, OC, C, FP8_E4M3, s);
}

// The codes of W (OC x C codes, transposed: W^T, C x OC) for the matmul about to run: the kept
// copy, or (cast) W cast now into the one weight buffer with the scale of the last update,
// which gives the kept copy's codes exactly
static const uint8_t *fp8_weight_codes(const Fp8Linear *f, int site, const floatX *W, int transposed,
                                       cudaStream_t s) {
    const int OC = f->oc[site], C = f->c[site];
    if (!f->cast) return f->weights + f->w_off[site] + (transposed ? (size_t)OC * C : 0);
    const float *scale = fp8_slot(f, site, FP8_OP_W, FP8_SCALE);
    if (transposed) fp8_quantize_transpose(f->wbuf, NULL, W, scale, OC, C, FP8_E4M3, s);
    else fp8_quantize(f->wbuf, NULL, W, scale, (size_t)OC * C, FP8_E4M3, s);
    return f->wbuf;
}

// Said once: cuBLASLt offers no FP8 matmul with the GELU epilogue here (the separate kernel runs)
static void fp8_gelu_not_fused(void) {
    static int said = 0;
    if (!said++) fprintf(stderr, "note: cuBLASLt offers no FP8 matmul with a GELU epilogue; using the GELU kernel\n");
}

// out (N, OC) = inp (N, C) W^T + bias [GELU: pre_gelu = that, out = gelu(pre_gelu)]; W: the bf16
// weight (read only with f->cast); modes: the matmuls' (GELU fused as in the bf16 forward)
static void fp8_linear_forward(Fp8Linear *f, const MatmulModes *modes, int site, floatX *out, floatX *pre_gelu,
                               const floatX *inp, const floatX *W, const floatX *bias, int N, cudaStream_t s) {
    int OC = f->oc[site], C = f->c[site];
    const uint8_t *w = fp8_weight_codes(f, site, W, 0, s);
    float *amax = fp8_operand_scale(f, site, FP8_OP_X, inp, (size_t)N * C, FP8_E4M3, s);
    const int fuse = pre_gelu && modes->fuse_gelu;  // GELU in the epilogue, as the bf16 forward
    int fused = fuse;
    floatX *dst = pre_gelu ? pre_gelu : out;
    size_t cap;
    uint8_t *const *buf = fp8_bufs(f, site, &cap);
    const int R = fp8_chunk_rows(f, site, C, N);
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        fp8_quantize(buf[0], amax, inp + (size_t)r0 * C, fp8_slot(f, site, FP8_OP_X, FP8_SCALE), (size_t)rows * C,
                     FP8_E4M3, s);
        // out rows (col-major OC x rows) = (W: OC rows of C)^T-op times x rows
        const float *w_deq = fp8_slot(f, site, FP8_OP_W, FP8_DEQ), *x_deq = fp8_slot(f, site, FP8_OP_X, FP8_DEQ);
        const size_t o = (size_t)r0 * OC;
        if (fused)
            fused = matmul_fp8_epi(modes, out + o, w, FP8_E4M3, w_deq, buf[0], FP8_E4M3, x_deq, bias, OC, rows, C, C,
                                   C, OC, 0.0f, 1, bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                                   pre_gelu + o, OC, s);
        if (!fused)
            matmul_fp8(modes, dst + o, w, FP8_E4M3, w_deq, buf[0], FP8_E4M3, x_deq, bias, OC, rows, C, C, C, OC, 0.0f,
                       1, s);
        if (!fused && pre_gelu) gelu_forward(out + o, pre_gelu + o, (long)rows * OC, s);
    }
    if (fuse && !fused) fp8_gelu_not_fused();
}

// How fp8_linear_backward splits dweight += g^T x. The sum over all N rows goes in one
// matmul per slice of dweight, so that each of its elements is rounded to bf16 once:
//   FP8_DW_OUT_SLICES  x^T (C x N codes) fits a buffer: cast whole, then slices of *slice
//                      rows of dweight (of OC), each from a block of g's columns cast to g^T
//   FP8_DW_IN_SLICES   else g^T (OC x N) fits: cast whole, then slices of *slice columns of
//                      dweight (of C), each from a block of x's columns cast to x^T
//   FP8_DW_ROW_CHUNKS  else (narrow buffers): chunks of *slice rows of g and x, each a matmul
//                      adding to dweight, each rounding it once more
// One function, so that whatever measures the backward (dev/bench_fp8.cu) splits it the same.
enum { FP8_DW_OUT_SLICES, FP8_DW_IN_SLICES, FP8_DW_ROW_CHUNKS };
static int fp8_dweight_plan(const Fp8Linear *f, int site, int N, int *slice) {
    int OC = f->oc[site], C = f->c[site];
    if (fp8_chunk_rows(f, site, N, C) == C) {
        *slice = fp8_chunk_rows(f, site, N, OC);
        return FP8_DW_OUT_SLICES;
    }
    if (fp8_chunk_rows(f, site, N, OC) == OC) {
        // slices start at dweight + c0: a multiple of 128 elements keeps each start 256-byte
        // aligned, as cuBLASLt's algorithm choice assumes (the plan is made for the first slice)
        *slice = fp8_chunk_rows(f, site, N, C);
        if (*slice < C && *slice >= 128) *slice = *slice / 128 * 128;
        return FP8_DW_IN_SLICES;
    }
    *slice = fp8_chunk_rows(f, site, OC > C ? OC : C, N);
    return FP8_DW_ROW_CHUNKS;
}

// Whether the site's buffers hold its whole operands at N rows (g and g^T, x^T): then the
// backward casts g once for both and runs dinp and dweight as one matmul each
static int fp8_whole(const Fp8Linear *f, int site, int N) {
    size_t cap;
    fp8_bufs(f, site, &cap);
    return (size_t)N * f->oc[site] <= cap && (size_t)N * f->c[site] <= cap;
}

// rows of dinp (col-major C x rows) = (W^T codes: C rows of OC)^T-op times g's rows [* gelu'(pre_gelu)].
// GELU's derivative is a kernel of its own: cuBLASLt's FP8 DGELU epilogue made fcproj's backward
// 1.6x slower on an H100 (2.54 against 1.61 ms at d12 B=64) and missed the double-precision
// reference by up to 78 times the tolerance in 4 of 1.5M outputs (docs/fp8.md).
static void fp8_dinp(const MatmulModes *modes, floatX *dinp, const uint8_t *wt, const float *w_deq, const uint8_t *g,
                     const float *g_deq, const floatX *pre_gelu, int C, int rows, int OC, cudaStream_t s) {
    matmul_fp8(modes, dinp, wt, FP8_E4M3, w_deq, g, FP8_E5M2, g_deq, NULL, C, rows, OC, OC, OC, C, 0.0f, 0, s);
    if (pre_gelu) gelu_backward(dinp, pre_gelu, dinp, (long)rows * C, s);
}

// dinp (N, C) = dout (N, OC) W [* gelu'(pre_gelu)], written; dweight (OC, C) += dout^T inp;
// dbias (OC, NULL: none) += dout's column sums (scratch: bias_grad_scratch_floats(OC)), in the
// pass that finds dout's amax where the gradient scales itself; modes: the matmuls'.
// inp must be the tensor of the site's last forward (its scale is that forward's).
static void fp8_linear_backward(Fp8Linear *f, const MatmulModes *modes, int site, floatX *dinp, floatX *dweight,
                                floatX *dbias, float *scratch, const floatX *dout, const floatX *W,
                                const floatX *inp, const floatX *pre_gelu, int N, cudaStream_t s) {
    int OC = f->oc[site], C = f->c[site];
    const uint8_t *wt = fp8_weight_codes(f, site, W, 1, s);
    const float *g_scale = fp8_slot(f, site, FP8_OP_G, FP8_SCALE), *x_scale = fp8_slot(f, site, FP8_OP_X, FP8_SCALE);
    const float *w_deq = fp8_slot(f, site, FP8_OP_W, FP8_DEQ), *g_deq = fp8_slot(f, site, FP8_OP_G, FP8_DEQ);
    const float *x_deq = fp8_slot(f, site, FP8_OP_X, FP8_DEQ);
    float *amax = NULL;
    if (dbias && fp8_scales_itself(f)) {  // the amax pass is the bias pass
        bias_backward(dbias, scratch, dout, N, OC, OC, s, fp8_amax_begin(f, site, FP8_OP_G, s));
        fp8_amax_end(f, site, FP8_OP_G, FP8_E5M2, s);
    } else {
        amax = fp8_operand_scale(f, site, FP8_OP_G, dout, (size_t)N * OC, FP8_E5M2, s);
        if (dbias) bias_backward(dbias, scratch, dout, N, OC, OC, s);
    }
    size_t cap;
    uint8_t *const *buf = fp8_bufs(f, site, &cap);
    if (fp8_whole(f, site, N)) {
        // g and g^T from one read of dout, x^T from one of inp; dinp (col-major C x N) = (W^T:
        // C rows of OC)^T-op times g; dweight (col-major C x OC) += (x^T: C rows of N) with g^T
        fp8_quantize_both(buf[0], buf[1], amax, dout, g_scale, N, OC, FP8_E5M2, s);
        fp8_quantize_transpose(buf[2], NULL, inp, x_scale, N, C, FP8_E4M3, s);
        fp8_dinp(modes, dinp, wt, w_deq, buf[0], g_deq, pre_gelu, C, N, OC, s);
        matmul_fp8(modes, dweight, buf[2], FP8_E4M3, x_deq, buf[1], FP8_E5M2, g_deq, NULL, C, OC, N, N, N, C, 1.0f, 0,
                   s);
        return;
    }
    // dinp, by row chunks of g: each row of dinp is one matmul's
    const int R = fp8_chunk_rows(f, site, OC, N);
    for (int r0 = 0; r0 < N; r0 += R) {
        int rows = N - r0 < R ? N - r0 : R;
        fp8_quantize(buf[0], amax, dout + (size_t)r0 * OC, g_scale, (size_t)rows * OC, FP8_E5M2, s);
        // dinp rows (col-major C x rows) = (W^T: C rows of OC codes)^T-op times g rows
        fp8_dinp(modes, dinp + (size_t)r0 * C, wt, w_deq, buf[0], g_deq, pre_gelu ? pre_gelu + (size_t)r0 * C : NULL,
                 C, rows, OC, s);
    }
    // dweight (col-major C x OC) += (x^T: C rows of N codes) with (g^T: OC rows of N codes),
    // split as fp8_dweight_plan says
    int S;
    const int way = fp8_dweight_plan(f, site, N, &S);
    if (way == FP8_DW_OUT_SLICES) {
        fp8_quantize_transpose(buf[2], NULL, inp, x_scale, N, C, FP8_E4M3, s);
        for (int o0 = 0; o0 < OC; o0 += S) {
            int n = OC - o0 < S ? OC - o0 : S;
            fp8_quantize_transpose_ld(buf[1], NULL, dout + o0, (size_t)OC, g_scale, N, n, FP8_E5M2, s);
            matmul_fp8(modes, dweight + (size_t)o0 * C, buf[2], FP8_E4M3, x_deq, buf[1], FP8_E5M2, g_deq, NULL, C, n,
                       N, N, N, C, 1.0f, 0, s);
        }
    } else if (way == FP8_DW_IN_SLICES) {
        fp8_quantize_transpose(buf[1], NULL, dout, g_scale, N, OC, FP8_E5M2, s);
        for (int c0 = 0; c0 < C; c0 += S) {
            int m = C - c0 < S ? C - c0 : S;
            fp8_quantize_transpose_ld(buf[2], NULL, inp + c0, (size_t)C, x_scale, N, m, FP8_E4M3, s);
            matmul_fp8(modes, dweight + c0, buf[2], FP8_E4M3, x_deq, buf[1], FP8_E5M2, g_deq, NULL, m, OC, N, N, N,
                       C, 1.0f, 0, s);
        }
    } else {
        for (int r0 = 0; r0 < N; r0 += S) {
            int rows = N - r0 < S ? N - r0 : S;
            fp8_quantize_transpose(buf[1], NULL, dout + (size_t)r0 * OC, g_scale, rows, OC, FP8_E5M2, s);
            fp8_quantize_transpose(buf[2], NULL, inp + (size_t)r0 * C, x_scale, rows, C, FP8_E4M3, s);
            matmul_fp8(modes, dweight, buf[2], FP8_E4M3, x_deq, buf[1], FP8_E5M2, g_deq, NULL, C, OC, rows, rows,
                       rows, C, 1.0f, 0, s);
        }
    }
}
