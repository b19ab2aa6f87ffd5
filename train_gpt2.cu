// train_gpt2.cu: the GPU trainer of GPT-2. The model lives on one GPU: parameters in
// floatX (bf16, fp16 or fp32, chosen at build time with -DPRECISION), one contiguous
// buffer in checkpoint order; gradients likewise; AdamW moments and master weights in
// fp32. The fp16 build scales the loss dynamically (common/loss_scaler.h): the gradients
// are computed for loss * S and unscaled inside the norm/clip factor.
// Each layer's forward and backward kernels live in kernels/<layer>.cuh; this file wires
// them together and runs the training loop: forward, loss, backward, clip, update, log.
// Flags and files are those of the CPU trainer (train_gpt2.c). test_gpt2.cu includes this
// file with TESTING defined and checks it against the PyTorch reference.
// Data parallel (mpirun -np N, or ranks from the environment): every rank holds the whole
// model and trains on its part of each global batch; the gradients are summed across
// ranks (kernels/comm.cuh) layer by layer on a communication stream while the backward
// goes on. ZeRO-1 shards the optimizer state (AdamW moments, master weights) by tensor
// slice (common/distributed.h): gradients are reduce-scattered, each rank updates its
// chunks, the parameters are all-gathered. ZeRO-2 also shards the accumulated gradients:
// each micro-step's gradients are reduce-scattered as the backward produces them.
#include "common/util.h"
#include "common/args.h"
#include "common/checkpoint.h"
#include "common/dataloader.h"
#include "common/logger.h"
#include "common/loss_scaler.h"
#include "common/step_meter.h"
#include "common/rng.h"
#include "common/schedule.h"
#include "common/tokenizer.h"
#include "common/train_common.h"
#include "common/distributed.h"
#include "common/energy.h"
#include "common/memory_budget.h"
#include <float.h>
#include <stddef.h>
#include <math.h>

#include "kernels/common.cuh"
#include "kernels/encoder.cuh"
#include "kernels/layernorm.cuh"
#include "kernels/matmul.cuh"
#include "kernels/fp8_linear.cuh"
#include "kernels/attention.cuh"
#include "kernels/gelu.cuh"
#include "kernels/classifier.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/adamw.cuh"
#include "kernels/offload.cuh"
#include "kernels/step_graph.cuh"
#include "kernels/profile.cuh"
#include "kernels/comm.cuh"

// The MFU denominator: the dense peak of an H100/H200 SXM (datasheet) for the build's
// matmuls: bf16 and fp16 tensor cores 989 TFLOP/s; the fp32 build's true-fp32 products
// (no TF32, kernels/matmul.cuh) 67 TFLOP/s.
#define GPU_PEAK_FLOPS_TF32 494e12  // the fp32 build with -f 1
#if PRECISION == PRECISION_FP32
#define GPU_PEAK_FLOPS 67e12
#else
#define GPU_PEAK_FLOPS 989e12
#endif

// -f: 1 flash attention, 0 plain attention, -1 (default) flash where it exists: the bf16
// and fp16 builds, head sizes 64 and 128.
#define FLASH_AUTO (-1)
// Flash is the default where it exists: it passed test_gpt2cu in the bf16 and fp16 builds
// at d12 on the H200, and keeps no T x T matrix (19 GB less at d12, B=64, T=1024).
#define FLASH_DEFAULT FLASH_AUTO
// --deterministic: 1, every kernel sums in a fixed order and runs are bitwise reproducible
// (resume included); 0, the matmul algorithms are picked by timing (gpt2_tune_matmuls)
// and the mma.sync flash attention backward adds dq with atomics (the wgmma backward, head
// size 64 on sm_90a, is deterministic in both modes): the last bits may differ between runs.
#define DETERMINISTIC_DEFAULT 1
static int flash_supported(const GPT2Config *c) {
    int hs = c->channels / c->num_heads;
    return PRECISION != PRECISION_FP32 && (hs == 64 || hs == 128);
}

#define PROF(cat, call) do { prof_begin(s); call; prof_end(cat, s); } while (0)

// ----------------------------------------------------------------------------
// The model on the device

typedef struct {
    // per layer (L copies unless recomputed, see gpt2_alloc)
    floatX *ln1, *qkv, *att, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    // once
    floatX *encoded, *attproj, *fcproj, *lnf, *logits;
    float *lnf_mean, *lnf_rstd, *losses;
    // backward scratch, reused by every layer
    floatX *dresidual, *dln, *datty, *dfch, *dqkv;
    floatX *attn_scratch;  // plain attention's permuted q, k, v (NULL with flash attention)
    float *lse;            // flash attention: per layer log-sum-exp (L, B, NH, T) (NULL without)
    float *flash_scratch;  // flash attention backward: rowsum(dout * out) (B, NH, T)
    float *fscratch;  // fp32 partial sums (layernorm, bias, norm)
} Activations;

typedef struct {
    GPT2Config config;
    size_t param_sizes[NUM_PARAM_TENSORS], param_offsets[NUM_PARAM_TENSORS], num_params;
    floatX *params, *param[NUM_PARAM_TENSORS];  // device, checkpoint order
    floatX *grads, *grad[NUM_PARAM_TENSORS];
    float *master;                              // fp32 master weights (NULL: none), this rank's shard
    void *m, *v;                                // AdamW moments, this rank's shard (zl.shard_elems)
    int moments_bf16;                           // 1: m and v in bf16 (set before gpt2_build), else fp32
    int offload;                                // OFFLOAD_*: where master, m and v are (set before gpt2_build)
    OffloadStage stage;                         // --offload 2: the device buffers the state goes through
    floatX *gshard;                             // ZeRO-2: this rank's summed gradient chunks (zl.shard_elems)
    // data parallel: this process is rank of world; the optimizer's layout is sharded over
    // the ranks for ZeRO >= 1 (over one rank, i.e. unsharded, otherwise)
    int rank, world, zero_stage;
    ZeroLayout zl;
    Comm *comm;                                 // NULL or world 1: no communication
    cudaEvent_t ev_compute, ev_comm;            // orders the comm stream after compute and back
    int last_micro;                             // 1 during the step's last micro-step (ZeRO 0/1 reduce then)
    size_t grad_elems;                          // elements of the grads buffer (ZeRO-2: less than num_params)
    floatX *grad_slot[2];                       // ZeRO-2: two layers' gradients (per-layer tensors only)
    size_t slot_offsets[NUM_PARAM_TENSORS], slot_elems;
    cudaEvent_t ev_free[3];                     // ZeRO-2: slot 0, slot 1, wte/wpe/lnf gradients free again
    float *info;                                // device: the step's scalars (INFO_* in kernels/common.cuh)
    int B, T, recompute;                        // activation capacity and recompute level
    int flash;                                  // 1: flash attention (see gpt2_build)
    int deterministic;                          // 1: bitwise-reproducible backward (set before gpt2_build)
    LossScaler scaler;                          // S: backward computes d(S * loss); 1 unless fp16
    int inject_overflow;                        // test hook: this step's scaled gradients overflow
    int graph;                                  // 1: training micro-steps replayed from a CUDA graph (one rank)
    int graph_warm;                             // a micro-step has run eagerly (matmul plans, first launches)
    StepGraph step_graph;
    int update_warm;                            // an update has run eagerly (its kernels' first launches)
    StepGraph update_graph;                     // --cuda-graph 1: norm, clip and AdamW (one rank, not staged)
    AdamWStepBuf adamw_step;                    // the update's per-step values, read on the device
    int fp8;                                    // FP8_LAYERS_*: the linear layers in FP8 (set before gpt2_build)
    int fp8_delayed;                            // 1: their delayed scaling (set before gpt2_build)
    Fp8Linear f8;                               // their FP8 weights, scales and operand buffers
    Activations acts;
    size_t act_bytes, scratch_bytes;
    // a micro-batch on the device (d_batch) and in three pinned host buffers, each laid out
    // as BATCH_FIELDS (BATCH_*) at the capacity B*T: two (HOST_BATCH_A, _B) taken in turn by
    // gpt2_upload_batch, one (HOST_BATCH_STAGED) for training's next batch, staged ahead
    int *d_batch, *h_batch[3], nb, upload_turn, staged_nb;  // nb: the uploaded batch's buckets
    cudaEvent_t h_batch_sent[3];
    int *bucket_counts;  // host scratch, vocab_size zeros
    int num_sms;
    cudaStream_t stream;
} GPT2;

enum { BATCH_INPUTS, BATCH_TARGETS, BATCH_POSITIONS, BATCH_BUCKET_TOKEN, BATCH_BUCKET_START, BATCH_FIELDS };
enum { HOST_BATCH_A, HOST_BATCH_B, HOST_BATCH_STAGED };
// ints in a batch buffer: BATCH_FIELDS arrays of B*T, one more for the bucket starts and
// the bucket count (read on the device by a graph-replayed step)
static size_t batch_ints(int B, int T) { return (size_t)BATCH_FIELDS * B * T + 2; }
// field f of a batch buffer laid out at the model's capacity
static int *batch_field(const GPT2 *m, int *buf, int f) { return buf + (size_t)f * m->B * m->T; }
static int *batch_bucket_count(const GPT2 *m, int *buf) { return buf + (size_t)BATCH_FIELDS * m->B * m->T + 1; }

// --fp8 1: the linear layers whose matmuls run in FP8 (kernels/fp8_linear.cuh), as "sites":
// layer l's four at 4l + SITE_*, the lm_head at 4L
enum { FP8_LAYERS_BLOCKS = 1, FP8_LAYERS_HEAD = 2, FP8_LAYERS_ALL = 3 };
enum { SITE_QKV, SITE_ATTPROJ, SITE_FC, SITE_FCPROJ, SITES_PER_LAYER };

// --fp8 (0 or 1, checked by the parser) and --fp8-layers to FP8_LAYERS_* (0: no FP8)
static int fp8_layers_arg(int fp8, const char *layers) {
    int mask = !strcmp(layers, "all") ? FP8_LAYERS_ALL : !strcmp(layers, "blocks") ? FP8_LAYERS_BLOCKS
               : !strcmp(layers, "head")                                            ? FP8_LAYERS_HEAD
                                                                                    : -1;
    if (mask < 0) fatal("--fp8-layers must be all, blocks or head, got '%s'", layers);
    if (fp8 && PRECISION != PRECISION_BF16)
        fatal("--fp8 1: FP8 matmuls are in the bf16 build (make PRECISION=BF16); this is the %s build",
              PRECISION_NAME);
    return fp8 ? mask : 0;
}

// --fp8-scaling: 1 for delayed scaling, 0 for current (kernels/fp8_linear.cuh)
static int fp8_delayed_arg(const char *text) {
    if (strcmp(text, "current") != 0 && strcmp(text, "delayed") != 0)
        fatal("--fp8-scaling must be current or delayed, got '%s'", text);
    return strcmp(text, "delayed") == 0;
}

// The sites' weight shapes (OC x C; 0 x 0 for a layer not in FP8); returns their count
static int fp8_site_shapes(const GPT2Config *c, int layers, int *oc, int *cc) {
    int L = c->num_layers, C = c->channels, n = SITES_PER_LAYER * L + 1;
    const int block_oc[SITES_PER_LAYER] = {3 * C, C, 4 * C, C}, block_c[SITES_PER_LAYER] = {C, C, C, 4 * C};
    for (int i = 0; i < n; i++) {
        int head = i == n - 1, on = layers & (head ? FP8_LAYERS_HEAD : FP8_LAYERS_BLOCKS);
        oc[i] = !on ? 0 : head ? c->padded_vocab_size : block_oc[i % SITES_PER_LAYER];
        cc[i] = !on ? 0 : head ? C : block_c[i % SITES_PER_LAYER];
    }
    return n;
}

// bytes of each FP8 operand buffer at micro-batches of N rows: N x C codes, or 64 rows of
// the widest operand (the lm_head's gradient) where that is more, so no chunk is too thin
static size_t fp8_buffer_bytes(const GPT2Config *c, size_t N) {
    size_t a = N * c->channels, b = (size_t)64 * c->padded_vocab_size;
    return a > b ? a : b;
}

// device bytes of --fp8's state for micro-batches of up to N rows (0 without --fp8)
static size_t fp8_plan_bytes(const GPT2Config *c, int layers, size_t N) {
    if (!layers) return 0;
    int *oc = (int *)xmalloc((SITES_PER_LAYER * c->num_layers + 1) * sizeof(int));
    int *cc = (int *)xmalloc((SITES_PER_LAYER * c->num_layers + 1) * sizeof(int));
    int n = fp8_site_shapes(c, layers, oc, cc);
    size_t b = fp8_linear_bytes(n, oc, cc, fp8_buffer_bytes(c, N));
    free(oc);
    free(cc);
    return b;
}

// layer l's site `which` (l < 0: the lm_head), or -1 where that layer is not in FP8
static int fp8_site(const GPT2 *m, int l, int which) {
    if (l < 0) return m->fp8 & FP8_LAYERS_HEAD ? SITES_PER_LAYER * m->config.num_layers : -1;
    return m->fp8 & FP8_LAYERS_BLOCKS ? SITES_PER_LAYER * l + which : -1;
}

// The parameter layout, and the optimizer's over `shard_world` ranks (1: unsharded).
// Returns NULL, or why the model's slices cannot be sharded that way.
static const char *gpt2_setup_layout(GPT2 *model, int shard_world) {
    gpt2_param_sizes(&model->config, model->param_sizes);
    model->num_params = 0;
    int layers[NUM_PARAM_TENSORS];
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        model->param_offsets[i] = model->num_params;
        model->num_params += model->param_sizes[i];
        layers[i] = gpt2_param_layers(&model->config, i);
    }
    return zero_layout_init(&model->zl, model->param_sizes, layers, GPT2_PARAM_NAMES, NUM_PARAM_TENSORS, shard_world);
}

// the ranks the optimizer state is sharded over: all of them under ZeRO, else one
static int gpt2_shard_world(const GPT2 *m) { return m->zero_stage > 0 && m->world > 1 ? m->world : 1; }
static int gpt2_distributed(const GPT2 *m) { return m->comm && m->comm->world > 1; }
static int gpt2_zero2(const GPT2 *m) { return m->zero_stage == 2 && gpt2_distributed(m); }
// the rank whose chunks this process's optimizer state holds (0 when unsharded)
static int gpt2_shard_rank(const GPT2 *m) { return m->zl.world > 1 ? m->rank : 0; }

// Where the gradient of tensor k's layer l lives. ZeRO-2 keeps no full gradient of the
// per-layer tensors: the backward of layer l writes into slot l % 2, which is
// reduce-scattered into the shard and cleared while layer l - 1 runs in the other slot.
static floatX *grad_at(GPT2 *m, int k, int l) {
    if (m->zl.t[k].layers == 1) return m->grad[k];
    if (gpt2_zero2(m)) return m->grad_slot[l & 1] + m->slot_offsets[k];
    return m->grad[k] + (size_t)l * m->zl.t[k].slice;
}

// host fp32 -> device floatX
static void upload_params(floatX *dst, const float *src, size_t n) {
    const size_t chunk = 1 << 24;
    floatX *tmp = (floatX *)xmalloc(chunk * sizeof(floatX));
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
#if PRECISION == PRECISION_FP32
        memcpy(tmp, src + i, m * sizeof(float));
#elif PRECISION == PRECISION_FP16
        for (size_t j = 0; j < m; j++) tmp[j] = __float2half_rn(src[i + j]);
#else
        for (size_t j = 0; j < m; j++) {
            uint16_t h = float_to_bf16(src[i + j]);
            memcpy(&tmp[j], &h, 2);
        }
#endif
        CUDA_CHECK(cudaMemcpy(dst + i, tmp, m * sizeof(floatX), cudaMemcpyHostToDevice));
    }
    free(tmp);
}

// device floatX -> host fp32
static void download_floatX(float *dst, const floatX *src, size_t n) {
    const size_t chunk = 1 << 24;
    floatX *tmp = (floatX *)xmalloc(chunk * sizeof(floatX));
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        CUDA_CHECK(cudaMemcpy(tmp, src + i, m * sizeof(floatX), cudaMemcpyDeviceToHost));
#if PRECISION == PRECISION_FP32
        memcpy(dst + i, tmp, m * sizeof(float));
#elif PRECISION == PRECISION_FP16
        for (size_t j = 0; j < m; j++) dst[i + j] = __half2float(tmp[j]);
#else
        for (size_t j = 0; j < m; j++) {
            uint16_t h;
            memcpy(&h, &tmp[j], 2);
            dst[i + j] = bf16_to_float(h);
        }
#endif
    }
    free(tmp);
}

// The gradient buffer's elements: the whole model's, or (ZeRO-2) wte, wpe, lnf whole plus
// two layer slots, each slot the per-layer tensors' slices at slot_offsets.
static size_t gradient_elems(const GPT2 *m, int zero2, size_t slot_offsets[NUM_PARAM_TENSORS], size_t *slot_elems) {
    *slot_elems = 0;
    if (!zero2) return m->num_params;
    size_t elems = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        if (m->zl.t[k].layers == 1) elems += m->param_sizes[k];
        else { slot_offsets[k] = *slot_elems; *slot_elems += m->zl.t[k].slice; }
    }
    return elems + 2 * *slot_elems;
}

#define PLAN_NUM_SMS 132  // an H100/H200
// The activation and scratch buffers gpt2_build allocates, in its order: each one's field
// in Activations. Those from dresidual on are scratch (reused by every layer).
static const size_t ACT_FIELDS[] = {
    offsetof(Activations, ln1),       offsetof(Activations, ln1_mean),     offsetof(Activations, ln1_rstd),
    offsetof(Activations, qkv),       offsetof(Activations, att),          offsetof(Activations, lse),
    offsetof(Activations, atty),      offsetof(Activations, residual2),    offsetof(Activations, ln2),
    offsetof(Activations, ln2_mean),  offsetof(Activations, ln2_rstd),     offsetof(Activations, fch),
    offsetof(Activations, fch_gelu),  offsetof(Activations, residual3),    offsetof(Activations, encoded),
    offsetof(Activations, attproj),   offsetof(Activations, fcproj),       offsetof(Activations, lnf),
    offsetof(Activations, lnf_mean),  offsetof(Activations, lnf_rstd),     offsetof(Activations, logits),
    offsetof(Activations, losses),    offsetof(Activations, dresidual),    offsetof(Activations, dln),
    offsetof(Activations, datty),     offsetof(Activations, dfch),         offsetof(Activations, dqkv),
    offsetof(Activations, attn_scratch), offsetof(Activations, flash_scratch), offsetof(Activations, fscratch)};
enum { ACT_BUFFERS = sizeof ACT_FIELDS / sizeof ACT_FIELDS[0], ACT_FIRST_SCRATCH = 22 };

// Bytes of each buffer of ACT_FIELDS for micro-batches of (B, T) (0: not used), rounded
// up to cudaMalloc's 256-byte alignment. With num_sms 0, no GPU is asked: layernorm's
// scratch takes its bound on an H200 (PLAN_NUM_SMS).
static void activation_bytes(const GPT2 *m, int B, int T, int recompute, int flash, int deterministic, int num_sms,
                             size_t bytes[ACT_BUFFERS]) {
    const GPT2Config *c = &m->config;
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, BT = (size_t)B * T, Vp = c->padded_vocab_size;
    size_t Lgelu = recompute >= 1 ? 1 : L, Lln = recompute >= 2 ? 1 : L, Lblk = recompute >= 3 ? 1 : L;
    size_t attn_elems = attention_backward_scratch_elems(B, T, (int)C, (int)NH);
    if (attention_forward_scratch_elems(B, T, (int)C) > attn_elems)
        attn_elems = attention_forward_scratch_elems(B, T, (int)C);
    size_t att_bytes = Lblk * (size_t)B * NH * T * T * sizeof(floatX), lse_bytes = 0, flash_scratch_bytes = 0;
    if (flash) {
        att_bytes = 0;
        attn_elems = 0;
        lse_bytes = Lblk * (size_t)B * NH * T * sizeof(float);
        flash_scratch_bytes =
            flash_attention_backward_scratch_elems(B, T, (int)C, (int)NH, deterministic) * sizeof(float);
    }
    size_t fscratch = num_sms ? layernorm_backward_scratch_floats((int)BT, (int)C, num_sms)
                              : layernorm_backward_scratch_bound((int)BT, (int)C, PLAN_NUM_SMS);
    if (bias_grad_scratch_floats(4 * (int)C) > fscratch) fscratch = bias_grad_scratch_floats(4 * (int)C);
    size_t norm_partials = 0;  // grad_sumsq: at most NORM_MAX_BLOCKS per run, a run per slice at most
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) norm_partials += (size_t)NORM_MAX_BLOCKS * m->zl.t[k].layers;
    if (norm_partials > fscratch) fscratch = norm_partials;
    const size_t X = sizeof(floatX), F = sizeof(float);
    const size_t b[ACT_BUFFERS] = {
        Lln * BT * C * X, L * BT * F,         L * BT * F,         Lblk * BT * 3 * C * X, att_bytes,
        lse_bytes,        Lblk * BT * C * X,  Lblk * BT * C * X,  Lln * BT * C * X,    L * BT * F,
        L * BT * F,       Lblk * BT * 4 * C * X, Lgelu * BT * 4 * C * X, L * BT * C * X, BT * C * X,
        BT * C * X,       BT * C * X,         BT * C * X,         BT * F,              BT * F,
        BT * Vp * X,      BT * F,             BT * C * X,         BT * C * X,          BT * C * X,
        BT * 4 * C * X,   BT * 3 * C * X,     attn_elems * X,     flash_scratch_bytes, fscratch * F};
    for (int i = 0; i < ACT_BUFFERS; i++) bytes[i] = (b[i] + 255) / 256 * 256;
}

// The device memory budget's plan (common/memory_budget.h): what gpt2_build allocates on one
// rank's GPU, computed without a GPU. Beyond its buffers a run holds cuBLAS's and the
// kernels' own memory and allocation rounding: DEVICE_RESERVE_BYTES, measured on an H200
// (docs/memory.md).
#define DEVICE_RESERVE_BYTES ((size_t)192 << 20)
// NCCL's (or the MPI backend's) device buffers with several ranks: an estimate, not yet
// measured on GPUs of their own
#define COMM_RESERVE_BYTES ((size_t)512 << 20)
// --offload: the GPU's page tables for the mapped host memory, at 8 bytes a 4 KiB page (an
// estimate, not yet measured): 1/512 of the state
#define OFFLOAD_MAP_RESERVE_DIVISOR 512
typedef struct {
    size_t params, grads, optimizer, acts, scratch, other;
} DevicePlan;

typedef struct {
    GPT2Config cfg;
    int T, use_master, flash, deterministic;
    int fp8;  // FP8_LAYERS_*
} PlanSettings;

// SIZE_MAX in params: the setting is impossible (ZeRO over ranks that do not divide a slice).
static DevicePlan gpt2_device_plan(const PlanSettings *p, MemorySetting s) {
    DevicePlan d;
    memset(&d, 0, sizeof d);
    GPT2 *m = (GPT2 *)xcalloc(1, sizeof(GPT2));
    m->config = p->cfg;
    int sharded = s.ranks > 1 && s.zero_stage > 0, zero2 = s.ranks > 1 && s.zero_stage == 2;
    if (gpt2_setup_layout(m, sharded ? s.ranks : 1)) {
        free(m);
        d.params = SIZE_MAX;
        return d;
    }
    size_t ns = m->zl.shard_elems, slot_offsets[NUM_PARAM_TENSORS], slot_elems;
    d.params = m->num_params * sizeof(floatX);
    d.grads = (gradient_elems(m, zero2, slot_offsets, &slot_elems) + (zero2 ? ns : 0)) * sizeof(floatX);
    const int has_master = p->use_master && PRECISION != PRECISION_FP32;
    const size_t state = ns * 2 * adamw_moment_bytes(s.moments_bf16) + (has_master ? ns * sizeof(float) : 0);
    d.optimizer = s.offload ? 0 : state;  // offload: in host memory
    size_t bytes[ACT_BUFFERS];
    activation_bytes(m, s.B, p->T, s.recompute, p->flash, p->deterministic, 0, bytes);
    for (int i = 0; i < ACT_BUFFERS; i++) (i >= ACT_FIRST_SCRATCH ? d.scratch : d.acts) += bytes[i];
    d.scratch += fp8_plan_bytes(&p->cfg, p->fp8, (size_t)s.B * p->T);
    d.other = batch_ints(s.B, p->T) * sizeof(int) + INFO_SLOTS * sizeof(float) + CUBLASLT_WORKSPACE_BYTES +
              DEVICE_RESERVE_BYTES + (s.ranks > 1 ? COMM_RESERVE_BYTES : 0) +
              (s.offload ? state / OFFLOAD_MAP_RESERVE_DIVISOR : 0) +
              (s.offload == OFFLOAD_STAGED ? offload_stage_bytes(has_master, adamw_moment_bytes(s.moments_bf16)) : 0);
    free(m);
    return d;
}

static size_t device_plan_bytes(const void *ctx, MemorySetting s) {
    DevicePlan d = gpt2_device_plan((const PlanSettings *)ctx, s);
    if (d.params == SIZE_MAX) return SIZE_MAX;
    return d.params + d.grads + d.optimizer + d.acts + d.scratch + d.other;
}

// "parameters 0.23 GiB, gradients ..." for the budget's messages
static const char *device_plan_text(char *buf, size_t cap, const DevicePlan *d) {
    const double g = 1.0 / (1024.0 * 1024 * 1024);
    snprintf(buf, cap, "parameters %.2f GiB, gradients %.2f, optimizer state %.2f, activations %.2f, scratch %.2f, "
             "buffers and reserve %.2f", d->params * g, d->grads * g, d->optimizer * g, d->acts * g, d->scratch * g,
             d->other * g);
    return buf;
}

// --fp8: every FP8 layer's weight to its FP8 copies; after each change of the parameters
static void gpt2_fp8_weights(GPT2 *m) {
    if (!m->fp8) return;
    const int L = m->config.num_layers, C = m->config.channels;
    const int tensor[SITES_PER_LAYER] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};
    const size_t per_layer[SITES_PER_LAYER] = {(size_t)3 * C * C, (size_t)C * C, (size_t)4 * C * C, (size_t)4 * C * C};
    for (int l = 0; l < L; l++)
        for (int w = 0; w < SITES_PER_LAYER; w++) {
            int site = fp8_site(m, l, w);
            if (site >= 0) fp8_linear_weight(&m->f8, site, m->param[tensor[w]] + l * per_layer[w], m->stream);
        }
    if (fp8_site(m, -1, 0) >= 0) fp8_linear_weight(&m->f8, fp8_site(m, -1, 0), m->param[P_WTE], m->stream);
}

// A linear layer's forward and backward (kernels/matmul.cuh's arguments), in FP8 where its
// site is (site >= 0) and the shape allows, else in the build's precision
static void gpt2_linear_forward(GPT2 *m, int site, floatX *out, floatX *pre_gelu, const floatX *inp,
                                const floatX *weight, const floatX *bias, int N, int C, int OC) {
    if (site >= 0 && fp8_linear_fits(&m->f8, site, N))
        fp8_linear_forward(&m->f8, site, out, pre_gelu, inp, bias, N, m->stream);
    else
        matmul_forward(out, pre_gelu, inp, weight, bias, N, C, OC, m->stream);
}

static void gpt2_linear_backward(GPT2 *m, int site, floatX *dinp, floatX *dweight, floatX *dbias, float *scratch,
                                 const floatX *dout, const floatX *inp, const floatX *weight, const floatX *pre_gelu,
                                 int N, int C, int OC) {
    if (site >= 0 && fp8_linear_fits(&m->f8, site, N)) {
        if (dbias) bias_backward(dbias, scratch, dout, N, OC, OC, m->stream);
        fp8_linear_backward(&m->f8, site, dinp, dweight, dout, inp, pre_gelu, N, m->stream);
    } else {
        matmul_backward(dinp, dweight, dbias, scratch, dout, inp, weight, pre_gelu, N, C, OC, m->stream);
    }
}

// Allocates everything on the device for micro-batches of up to (B, T) and uploads the
// parameters. use_master: keep fp32 master weights (bf16 build only).
// flash: 1 = flash attention (bf16/fp16 builds; no T x T matrix kept), 0 = the plain
// attention that stores the softmax matrix. model->deterministic picks flash attention's
// backward (1: fixed summation order; 0: the faster atomic dq).
static void gpt2_build(GPT2 *model, const float *host_params, int B, int T, int recompute, int use_master, int flash) {
    const GPT2Config *c = &model->config;
    if (model->world < 1) model->world = 1;  // not distributed (tests)
    int shard_world = gpt2_shard_world(model);
    const char *bad = gpt2_setup_layout(model, shard_world);
    if (bad) fatal("internal: ZeRO layout: %s", bad);  // main checks this before any GPU work
    size_t n = model->num_params, ns = model->zl.shard_elems;
    int shard_rank = gpt2_shard_rank(model);
    CUDA_CHECK(cudaStreamCreate(&model->stream));
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&model->num_sms, cudaDevAttrMultiProcessorCount, dev));
    matmul_init(model->stream);
    CUDA_CHECK(cudaEventCreateWithFlags(&model->ev_compute, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&model->ev_comm, cudaEventDisableTiming));

    CUDA_CHECK(cudaMalloc(&model->params, n * sizeof(floatX)));
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) model->param[i] = model->params + model->param_offsets[i];
    upload_params(model->params, host_params, n);
    model->grad_elems = gradient_elems(model, gpt2_zero2(model), model->slot_offsets, &model->slot_elems);
    CUDA_CHECK(cudaMalloc(&model->grads, model->grad_elems * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(model->grads, 0, model->grad_elems * sizeof(floatX)));
    if (gpt2_zero2(model)) {
        size_t off = 0;
        for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
            model->grad[k] = NULL;
            if (model->zl.t[k].layers == 1) { model->grad[k] = model->grads + off; off += model->param_sizes[k]; }
        }
        model->grad_slot[0] = model->grads + off;
        model->grad_slot[1] = model->grads + off + model->slot_elems;
        for (int i = 0; i < 3; i++) CUDA_CHECK(cudaEventCreateWithFlags(&model->ev_free[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaMalloc(&model->gshard, ns * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(model->gshard, 0, ns * sizeof(floatX)));
    } else {
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) model->grad[i] = model->grads + model->param_offsets[i];
    }
    // the optimizer's state: this rank's chunks of every slice (everything when unsharded)
    float *shard = NULL;
    if (shard_world > 1) {
        shard = (float *)xmalloc(ns * sizeof(float));
        zero_gather_shard(&model->zl, shard_rank, host_params, shard);
    }
    model->master = NULL;
#if PRECISION != PRECISION_FP32
    if (use_master) {
        model->master = (float *)optimizer_state_alloc(ns * sizeof(float), model->offload);
        CUDA_CHECK(cudaMemcpy(model->master, shard ? shard : host_params, ns * sizeof(float), cudaMemcpyDefault));
    }
#else
    (void)use_master;
#endif
    free(shard);
    const size_t mb = adamw_moment_bytes(model->moments_bf16);
    model->m = optimizer_state_alloc(ns * mb, model->offload);
    model->v = optimizer_state_alloc(ns * mb, model->offload);
    if (model->offload == OFFLOAD_STAGED) offload_stage_init(&model->stage, model->master != NULL, mb);
    CUDA_CHECK(cudaMalloc(&model->info, INFO_SLOTS * sizeof(float)));
    CUDA_CHECK(cudaMemset(model->info, 0, INFO_SLOTS * sizeof(float)));
    adamw_step_init(&model->adamw_step);

    // activations
    model->B = B;
    model->T = T;
    model->recompute = recompute;
    model->flash = flash;
    loss_scaler_init(&model->scaler, PRECISION == PRECISION_FP16 ? LOSS_SCALE_INIT : 1.0f);
    if (flash) flash_attention_set_deterministic(model->deterministic);
    size_t bytes[ACT_BUFFERS];
    activation_bytes(model, B, T, recompute, flash, model->deterministic, model->num_sms, bytes);
    model->act_bytes = model->scratch_bytes = 0;
    for (int i = 0; i < ACT_BUFFERS; i++) {
        void **ptr = (void **)((char *)&model->acts + ACT_FIELDS[i]);
        *ptr = NULL;
        if (bytes[i] == 0) continue;  // not used in this configuration
        CUDA_CHECK(cudaMalloc(ptr, bytes[i]));
        (i >= ACT_FIRST_SCRATCH ? model->scratch_bytes : model->act_bytes) += bytes[i];
    }
    if (model->fp8) {
        int n = SITES_PER_LAYER * c->num_layers + 1, *oc = (int *)xmalloc(n * sizeof(int));
        int *cc = (int *)xmalloc(n * sizeof(int));
        fp8_site_shapes(c, model->fp8, oc, cc);
        size_t cap = fp8_buffer_bytes(c, (size_t)B * T);
        fp8_linear_init(&model->f8, n, oc, cc, cap, model->fp8_delayed);
        model->scratch_bytes += fp8_plan_bytes(c, model->fp8, (size_t)B * T);  // as the plan counts it
        free(oc);
        free(cc);
        gpt2_fp8_weights(model);
    }
    CUDA_CHECK(cudaMalloc(&model->d_batch, batch_ints(B, T) * sizeof(int)));
    for (int i = 0; i < 3; i++) {
        CUDA_CHECK(cudaMallocHost(&model->h_batch[i], batch_ints(B, T) * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&model->h_batch_sent[i], cudaEventDisableTiming));
    }
    model->upload_turn = HOST_BATCH_A;
    model->nb = 0;
    model->bucket_counts = (int *)xcalloc((size_t)c->vocab_size, sizeof(int));
    CUDA_CHECK(cudaDeviceSynchronize());
}

static void gpt2_free(GPT2 *model) {
    Activations *a = &model->acts;
    void *ptrs[] = {a->ln1,         a->ln1_mean,  a->ln1_rstd,     a->qkv,       a->att,           a->atty,
                    a->residual2,   a->ln2,       a->ln2_mean,     a->ln2_rstd,  a->fch,           a->fch_gelu,
                    a->residual3,   a->encoded,   a->attproj,      a->fcproj,    a->lnf,           a->lnf_mean,
                    a->lnf_rstd,    a->logits,    a->losses,       a->dresidual, a->dln,           a->datty,
                    a->dfch,        a->dqkv,      a->attn_scratch, a->lse,       a->flash_scratch, a->fscratch,
                    model->params,  model->grads, model->info,     model->d_batch, model->gshard};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) cudaFree(ptrs[i]);
    step_graph_free(&model->step_graph);
    step_graph_free(&model->update_graph);
    fp8_linear_free(&model->f8);
    adamw_step_free(&model->adamw_step);
    optimizer_state_free(model->master, model->offload);
    optimizer_state_free(model->m, model->offload);
    optimizer_state_free(model->v, model->offload);
    offload_stage_free(&model->stage);
    for (int i = 0; i < 3; i++) { cudaFreeHost(model->h_batch[i]); cudaEventDestroy(model->h_batch_sent[i]); }
    free(model->bucket_counts);
    cudaEventDestroy(model->ev_compute);
    cudaEventDestroy(model->ev_comm);
    if (gpt2_zero2(model)) for (int i = 0; i < 3; i++) cudaEventDestroy(model->ev_free[i]);
    matmul_free();
    cudaStreamDestroy(model->stream);
}

// Fills the pinned buffer h with a micro-batch: the ids (checked against the vocabulary),
// and the per-token position buckets the deterministic embedding backward uses. targets
// may be NULL. Returns the number of buckets.
static int fill_batch(GPT2 *model, int *h, const int *inputs, const int *targets, int B, int T) {
    int V = model->config.vocab_size;
    size_t BT = (size_t)B * T;
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V)
            fatal("token id %d at position %zu is outside the vocabulary (%d)", inputs[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            fatal("target id %d at position %zu is outside the vocabulary (%d)", targets[i], i, V);
    }
    memcpy(batch_field(model, h, BATCH_INPUTS), inputs, BT * sizeof(int));
    if (targets) memcpy(batch_field(model, h, BATCH_TARGETS), targets, BT * sizeof(int));
    int nb = encoder_build_buckets(inputs, (int)BT, V, model->bucket_counts, batch_field(model, h, BATCH_POSITIONS),
                                   batch_field(model, h, BATCH_BUCKET_TOKEN),
                                   batch_field(model, h, BATCH_BUCKET_START));
    *batch_bucket_count(model, h) = nb;
    return nb;
}
// host buffer k (holding nb buckets) to the device, asynchronously on the compute stream
static void send_batch(GPT2 *model, int k, int nb) {
    CUDA_CHECK(cudaMemcpyAsync(model->d_batch, model->h_batch[k], batch_ints(model->B, model->T) * sizeof(int),
                               cudaMemcpyHostToDevice, model->stream));
    CUDA_CHECK(cudaEventRecord(model->h_batch_sent[k], model->stream));
    model->nb = nb;
}

// Copies a micro-batch to the device (asynchronously, from pinned memory). targets may be
// NULL. The host waits only for the copy issued two uploads earlier.
static void gpt2_upload_batch(GPT2 *model, const int *inputs, const int *targets, int B, int T) {
    int k = model->upload_turn;
    model->upload_turn = k == HOST_BATCH_A ? HOST_BATCH_B : HOST_BATCH_A;
    CUDA_CHECK(cudaEventSynchronize(model->h_batch_sent[k]));
    send_batch(model, k, fill_batch(model, model->h_batch[k], inputs, targets, B, T));
}

// Training stages its next micro-batch on the host while the GPU still runs the current one
// (the ids' checks and the buckets are host work the GPU would otherwise wait for at every
// step), then sends it with gpt2_upload_staged. Uploads in between (evaluation, sampling)
// use the other buffers.
static void gpt2_stage_batch(GPT2 *model, const int *inputs, const int *targets, int B, int T) {
    CUDA_CHECK(cudaEventSynchronize(model->h_batch_sent[HOST_BATCH_STAGED]));  // its last copy has left
    model->staged_nb = fill_batch(model, model->h_batch[HOST_BATCH_STAGED], inputs, targets, B, T);
}
static void gpt2_upload_staged(GPT2 *model) { send_batch(model, HOST_BATCH_STAGED, model->staged_nb); }

// Forward over the uploaded inputs (B, T), B <= capacity, T == capacity T. Leaves the
// logits in acts.logits (B*T, Vp).
// Layer l's activations: its own buffers, or for what the recompute level keeps for one
// layer only (-r 1: the GELU output; -r 2: the layernorm outputs too; -r 3: everything but
// the block's output residual3 and the layernorms' statistics) the one shared slot, filled
// again in the backward.
typedef struct {
    floatX *ln1, *qkv, *att, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *lse, *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    const floatX *residual;  // the block's input: the layer below's residual3, or the embeddings
} BlockActs;

static BlockActs block_acts(GPT2 *m, int l) {
    Activations *a = &m->acts;
    const GPT2Config *c = &m->config;
    size_t C = c->channels, NH = c->num_heads, cap = (size_t)m->B * m->T, r = m->recompute;
    size_t lg = r >= 1 ? 0 : l, ll = r >= 2 ? 0 : l, lb = r >= 3 ? 0 : l;
    BlockActs b;
    b.ln1 = a->ln1 + ll * cap * C;
    b.qkv = a->qkv + lb * cap * 3 * C;
    b.att = a->att ? a->att + lb * m->B * NH * m->T * m->T : NULL;
    b.atty = a->atty + lb * cap * C;
    b.residual2 = a->residual2 + lb * cap * C;
    b.ln2 = a->ln2 + ll * cap * C;
    b.fch = a->fch + lb * cap * 4 * C;
    b.fch_gelu = a->fch_gelu + lg * cap * 4 * C;
    b.residual3 = a->residual3 + (size_t)l * cap * C;
    b.lse = a->lse ? a->lse + lb * m->B * NH * m->T : NULL;
    b.ln1_mean = a->ln1_mean + (size_t)l * cap;
    b.ln1_rstd = a->ln1_rstd + (size_t)l * cap;
    b.ln2_mean = a->ln2_mean + (size_t)l * cap;
    b.ln2_rstd = a->ln2_rstd + (size_t)l * cap;
    b.residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * cap * C;
    return b;
}

// Layer l from its layernormed input b->ln1 up to the MLP's GELU output: attention, its
// projection and residual add with ln2, the fc matmul. The forward continues with the fc
// projection; -r 3's backward runs this again to recompute the block.
static void gpt2_block_forward(GPT2 *model, int l, const BlockActs *b, int B, int T) {
    const GPT2Config *c = &model->config;
    int C = c->channels, NH = c->num_heads;
    cudaStream_t s = model->stream;
    Activations *a = &model->acts;
    floatX **p = model->param;
    int N = B * T;
    PROF(PH_MATMUL, gpt2_linear_forward(model, fp8_site(model, l, SITE_QKV), b->qkv, NULL, b->ln1,
                                        p[P_QKVW] + (size_t)l * 3 * C * C, p[P_QKVB] + l * 3 * C, N, C, 3 * C));
    if (model->flash) PROF(PH_ATTENTION, flash_attention_forward(b->atty, b->lse, b->qkv, B, T, C, NH, s));
    else PROF(PH_ATTENTION, attention_forward(b->atty, b->att, b->qkv, a->attn_scratch, B, T, C, NH, s));
    PROF(PH_MATMUL, gpt2_linear_forward(model, fp8_site(model, l, SITE_ATTPROJ), a->attproj, NULL, b->atty,
                                        p[P_ATTPROJW] + (size_t)l * C * C, p[P_ATTPROJB] + l * C, N, C, C));
    PROF(PH_LAYERNORM, fused_residual_layernorm_forward(b->residual2, b->ln2, b->ln2_mean, b->ln2_rstd, b->residual,
                                                        a->attproj, p[P_LN2W] + l * C, p[P_LN2B] + l * C, N, C, s));
    PROF(PH_MATMUL, gpt2_linear_forward(model, fp8_site(model, l, SITE_FC), b->fch_gelu, b->fch, b->ln2,
                                        p[P_FCW] + (size_t)l * 4 * C * C, p[P_FCB] + l * 4 * C, N, C, 4 * C));
}

static void gpt2_forward(GPT2 *model, int B, int T) {
    const GPT2Config *c = &model->config;
    int L = c->num_layers, C = c->channels, Vp = c->padded_vocab_size;
    if (B > model->B || T != model->T)
        fatal("internal: forward with B=%d T=%d, allocated B=%d T=%d", B, T, model->B, model->T);
    cudaStream_t s = model->stream;
    Activations *a = &model->acts;
    floatX **p = model->param;
    size_t N = (size_t)B * T;
    const int *inputs = batch_field(model, model->d_batch, BATCH_INPUTS);

    PROF(PH_ENCODER, encoder_forward(a->encoded, inputs, p[P_WTE], p[P_WPE], B, T, C, s));
    PROF(PH_LAYERNORM,
         layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->encoded, p[P_LN1W], p[P_LN1B], (int)N, C, s));
    for (int l = 0; l < L; l++) {
        BlockActs b = block_acts(model, l);
        gpt2_block_forward(model, l, &b, B, T);
        PROF(PH_MATMUL, gpt2_linear_forward(model, fp8_site(model, l, SITE_FCPROJ), a->fcproj, NULL, b.fch_gelu,
                                            p[P_FCPROJW] + (size_t)l * C * 4 * C, p[P_FCPROJB] + l * C, (int)N, 4 * C,
                                            C));
        // the residual add, fused with the next layernorm (the next layer's ln1, or lnf)
        prof_begin(s);
        if (l + 1 < L) {
            BlockActs next = block_acts(model, l + 1);
            fused_residual_layernorm_forward(b.residual3, next.ln1, next.ln1_mean, next.ln1_rstd, b.residual2,
                                             a->fcproj, p[P_LN1W] + (l + 1) * C, p[P_LN1B] + (l + 1) * C, (int)N, C,
                                             s);
        } else {
            fused_residual_layernorm_forward(b.residual3, a->lnf, a->lnf_mean, a->lnf_rstd, b.residual2, a->fcproj,
                                             p[P_LNFW], p[P_LNFB], (int)N, C, s);
        }
        prof_end(PH_LAYERNORM, s);
    }
    PROF(PH_MATMUL, gpt2_linear_forward(model, fp8_site(model, -1, 0), a->logits, NULL, a->lnf, p[P_WTE], NULL, (int)N,
                                        C, Vp));  // lm_head tied to wte
}

// Loss of the last forward over the uploaded targets: adds loss_scale * sum of the
// per-position losses to *loss_acc (device). With write_grad, the logits are replaced by
// d(S * loss_scale * sum of losses)/d(logits), ready for gpt2_backward (S: model->scaler.scale).
static void gpt2_loss(GPT2 *model, float *loss_acc, float loss_scale, int write_grad, int B, int T) {
    const GPT2Config *c = &model->config;
    int N = B * T;
    cudaStream_t s = model->stream;
    float S = model->inject_overflow ? INFINITY : model->scaler.scale;  // the test hook overflows the gradients
    prof_begin(s);
    fused_classifier(model->acts.logits, model->acts.losses, batch_field(model, model->d_batch, BATCH_TARGETS),
                     loss_scale * S, write_grad, N,
                     c->vocab_size, c->padded_vocab_size, model->stream);
    loss_accumulate(loss_acc, model->acts.losses, N, loss_scale, model->stream);
    prof_end(PH_CLASSIFIER, s);
}

// ----------------------------------------------------------------------------
// Communication between the ranks: the comm stream is ordered after the compute stream
// (and back) with events, so the compute stream never waits on the host.

static void comm_after_compute(GPT2 *m) {
    CUDA_CHECK(cudaEventRecord(m->ev_compute, m->stream));
    CUDA_CHECK(cudaStreamWaitEvent(m->comm->stream, m->ev_compute, 0));
}
static void compute_after_comm(GPT2 *m) {
    CUDA_CHECK(cudaEventRecord(m->ev_comm, m->comm->stream));
    CUDA_CHECK(cudaStreamWaitEvent(m->stream, m->ev_comm, 0));
}

// Sums the gradients of layer l (l = -1: wte, wpe, lnf) across the ranks, as soon as the
// backward has written them. ZeRO-0: all-reduce; ZeRO-1: reduce-scatter in place (each
// rank's chunks hold the sums); both once per step, in its last micro-step. ZeRO-2: every
// micro-step, reduce-scatter, add the rank's chunks to its gradient shard and clear the
// layer's slot for reuse.
static void gpt2_reduce_grads(GPT2 *m, int l) {
    if (!gpt2_distributed(m) || (!m->last_micro && !gpt2_zero2(m))) return;
    Comm *c = m->comm;
    int rank = m->rank;
    comm_after_compute(m);
    comm_group_start(c);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        const ZeroTensor *t = &m->zl.t[k];
        if ((l < 0) != (t->layers == 1)) continue;
        floatX *g = grad_at(m, k, l < 0 ? 0 : l);
        if (m->zero_stage == 0) comm_allreduce_sum(c, g, t->slice);
        else comm_reduce_scatter_sum(c, g, g + (size_t)rank * t->chunk, t->chunk);
    }
    comm_group_end(c);
    if (!gpt2_zero2(m)) return;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        const ZeroTensor *t = &m->zl.t[k];
        if ((l < 0) != (t->layers == 1)) continue;
        floatX *g = grad_at(m, k, l < 0 ? 0 : l);
        grad_shard_accumulate(m->gshard + t->shard_offset + (size_t)(l < 0 ? 0 : l) * t->chunk,
                              g + (size_t)rank * t->chunk, t->chunk, c->stream);
        CUDA_CHECK(cudaMemsetAsync(g, 0, t->slice * sizeof(floatX), c->stream));
    }
    CUDA_CHECK(cudaEventRecord(m->ev_free[l < 0 ? 2 : (l & 1)], c->stream));
}

// Backward of the last forward at full capacity (B, T), after gpt2_loss(write_grad=1).
// Gradients accumulate into model->grads.
static void gpt2_backward(GPT2 *model) {
    const GPT2Config *c = &model->config;
    int B = model->B, T = model->T, L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t N = (size_t)B * T;
    cudaStream_t s = model->stream;
    Activations *a = &model->acts;
    floatX **p = model->param, **g = model->grad;
    float *fs = a->fscratch;
    int r = model->recompute, sms = model->num_sms;

    if (gpt2_zero2(model))
        CUDA_CHECK(cudaStreamWaitEvent(s, model->ev_free[2], 0));  // last micro-step's reduce-scatter
    // lm_head: dlnf = dlogits @ wte; dwte += dlogits^T @ lnf
    PROF(PH_MATMUL, gpt2_linear_backward(model, fp8_site(model, -1, 0), a->dln, g[P_WTE], NULL, fs, a->logits, a->lnf,
                                         p[P_WTE], NULL, (int)N, C, Vp));
    CUDA_CHECK(cudaMemsetAsync(a->dresidual, 0, N * C * sizeof(floatX), s));
    // Each layernorm backward also sums the columns of the dresidual it leaves: that is the
    // bias gradient of the linear layer whose output gradient dresidual is next (lnf and
    // ln1: the fcproj below; ln2: attproj), so those two layers skip their bias passes.
    if (gpt2_zero2(model)) CUDA_CHECK(cudaStreamWaitEvent(s, model->ev_free[(L - 1) & 1], 0));  // fcproj bias slot
    PROF(PH_LAYERNORM,
         layernorm_backward(a->dresidual, g[P_LNFW], g[P_LNFB], grad_at(model, P_FCPROJB, L - 1), fs, a->dln,
                            a->residual3 + (L - 1) * N * C, p[P_LNFW], a->lnf_mean, a->lnf_rstd, (int)N, C, sms, s));

    // dresidual carries the gradient of the residual stream down through the layers
    for (int l = L - 1; l >= 0; l--) {
        BlockActs b = block_acts(model, l);
        const floatX *residual = b.residual;
        floatX *ln1 = b.ln1, *qkv = b.qkv, *atty = b.atty, *att = b.att, *residual2 = b.residual2, *ln2 = b.ln2;
        floatX *fch = b.fch, *fch_gelu = b.fch_gelu;
        float *ln1_mean = b.ln1_mean, *ln1_rstd = b.ln1_rstd, *ln2_mean = b.ln2_mean, *ln2_rstd = b.ln2_rstd;
        if (gpt2_zero2(model))
            CUDA_CHECK(cudaStreamWaitEvent(s, model->ev_free[l & 1], 0));  // slot of layer l + 2 sent

        // recompute what forward did not keep: -r 3 the whole block from its input
        if (r >= 3) {
            PROF(PH_LAYERNORM, layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p[P_LN1W] + l * C,
                                                 p[P_LN1B] + l * C, (int)N, C, s));
            gpt2_block_forward(model, l, &b, B, T);
        }
        if (r == 1 || r == 2) PROF(PH_GELU, gelu_forward(fch_gelu, fch, (long)N * 4 * C, s));
        if (r == 2)
            PROF(PH_LAYERNORM, layernorm_forward(ln2, ln2_mean, ln2_rstd, residual2, p[P_LN2W] + l * C,
                                                 p[P_LN2B] + l * C, (int)N, C, s));

        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        PROF(PH_MATMUL, gpt2_linear_backward(model, fp8_site(model, l, SITE_FCPROJ), a->dfch,
                                             grad_at(model, P_FCPROJW, l), NULL, fs, a->dresidual, fch_gelu,
                                             p[P_FCPROJW] + (size_t)l * C * 4 * C, fch, (int)N, 4 * C,
                                             C));  // dfch includes gelu'
        PROF(PH_MATMUL, gpt2_linear_backward(model, fp8_site(model, l, SITE_FC), a->dln, grad_at(model, P_FCW, l),
                                             grad_at(model, P_FCB, l), fs, a->dfch, ln2,
                                             p[P_FCW] + (size_t)l * 4 * C * C, NULL, (int)N, C, 4 * C));
        PROF(PH_LAYERNORM, layernorm_backward(a->dresidual, grad_at(model, P_LN2W, l), grad_at(model, P_LN2B, l),
                           grad_at(model, P_ATTPROJB, l), fs, a->dln, residual2, p[P_LN2W] + l * C, ln2_mean, ln2_rstd,
                           (int)N, C, sms, s));

        // attention: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        if (r == 2)
            PROF(PH_LAYERNORM, layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p[P_LN1W] + l * C,
                                                 p[P_LN1B] + l * C, (int)N, C, s));
        PROF(PH_MATMUL, gpt2_linear_backward(model, fp8_site(model, l, SITE_ATTPROJ), a->datty,
                                             grad_at(model, P_ATTPROJW, l), NULL, fs, a->dresidual, atty,
                                             p[P_ATTPROJW] + (size_t)l * C * C, NULL, (int)N, C, C));
        // The qkv bias gradient, in thirds with flash attention: q's is a pass over dq; k's is
        // zero (a bias on every key adds the same q.b to a whole row of scores, which softmax
        // ignores; the rows of dS sum to zero), left as zero_grad left it; v's is the column
        // sum of datty, which the attention backward reads anyway.
        floatX *dqkvb = grad_at(model, P_QKVB, l);
        if (model->flash)
            PROF(PH_ATTENTION,
                 flash_attention_backward(a->dqkv, dqkvb + 2 * C, a->datty, qkv, atty, b.lse, a->flash_scratch, B, T, C,
                                          NH, s));
        else PROF(PH_ATTENTION, attention_backward(a->dqkv, a->datty, qkv, att, a->attn_scratch, B, T, C, NH, s));
        PROF(PH_MATMUL, gpt2_linear_backward(model, fp8_site(model, l, SITE_QKV), a->dln, grad_at(model, P_QKVW, l),
                                             model->flash ? NULL : dqkvb, fs, a->dqkv, ln1,
                                             p[P_QKVW] + (size_t)l * 3 * C * C, NULL, (int)N, C, 3 * C));
        if (model->flash) PROF(PH_MATMUL, bias_backward(dqkvb, fs, a->dqkv, (int)N, C, 3 * C, s));
        floatX *dbias_below = NULL;  // layer l - 1's fcproj bias gradient (layer 0: the encoder is below)
        if (l > 0) {
            if (gpt2_zero2(model)) CUDA_CHECK(cudaStreamWaitEvent(s, model->ev_free[(l - 1) & 1], 0));  // its slot sent
            dbias_below = grad_at(model, P_FCPROJB, l - 1);
        }
        PROF(PH_LAYERNORM,
             layernorm_backward(a->dresidual, grad_at(model, P_LN1W, l), grad_at(model, P_LN1B, l), dbias_below, fs,
                                a->dln, residual, p[P_LN1W] + l * C, ln1_mean, ln1_rstd, (int)N, C, sms, s));
        gpt2_reduce_grads(model, l);  // layer l's gradients are final: send them while layer l - 1 runs
    }
    int *d = model->d_batch;
    // a graph replays for every batch: a grid for the most buckets a batch can have, the
    // count read on the device
    const size_t V = (size_t)model->config.vocab_size;
    int nb = model->graph ? (int)(N < V ? N : V) : model->nb;
    PROF(PH_ENCODER, encoder_backward(g[P_WTE], g[P_WPE], a->dresidual, batch_field(model, d, BATCH_POSITIONS),
                                      batch_field(model, d, BATCH_BUCKET_TOKEN),
                                      batch_field(model, d, BATCH_BUCKET_START), nb,
                                      model->graph ? batch_bucket_count(model, d) : NULL, B, T, C, s));
    gpt2_reduce_grads(model, -1);
}

static void gpt2_zero_grad(GPT2 *model) {
    CUDA_CHECK(cudaMemsetAsync(model->grads, 0, model->grad_elems * sizeof(floatX), model->stream));
    if (model->gshard)
        CUDA_CHECK(cudaMemsetAsync(model->gshard, 0, model->zl.shard_elems * sizeof(floatX), model->stream));
}

// One micro-step over the uploaded batch: forward, the loss (added to info[INFO_LOSS], with
// loss_scale) and the backward, whose gradients accumulate. With model->graph the launches
// come from a CUDA graph (kernels/step_graph.cuh), after one eager micro-step has made the
// matmul plans and the kernels' first-launch setup, which must not happen inside a capture.
typedef struct {
    GPT2 *model;
    int B, T;
    float loss_scale;
} MicroStep;

static void micro_step_launches(void *ctx) {
    MicroStep *m = (MicroStep *)ctx;
    m->model->f8.record = 1;  // FP8 delayed scaling learns from training micro-steps only
    gpt2_forward(m->model, m->B, m->T);
    gpt2_loss(m->model, m->model->info + INFO_LOSS, m->loss_scale, 1, m->B, m->T);
    gpt2_backward(m->model);
    m->model->f8.record = 0;
}

static void gpt2_micro_step(GPT2 *model, int B, int T, float loss_scale) {
    MicroStep m = {model, B, T, loss_scale};
    if (!model->graph || !model->graph_warm) {
        micro_step_launches(&m);
        model->graph_warm = 1;
        return;
    }
    // what the launches bake in: the shape, the loss scale the gradients are computed with,
    // GELU's fusion (switched off for good when a shape finds no fused epilogue), and
    // whether FP8's delayed scaling has a history yet (before it, each cast scales itself)
    struct {
        int B, T;
        float loss_scale, S;
        int fuse_gelu, fp8_rolled;
    } key = {B, T, loss_scale, model->inject_overflow ? INFINITY : model->scaler.scale, g_fuse_gelu,
             model->f8.rolled};
    step_graph_run(&model->step_graph, model->stream, &key, sizeof key, micro_step_launches, &m);
}

// --deterministic 0: one forward and backward of a dummy (all token 0) micro-batch with
// matmul tuning on, so that every matmul shape of the training step has timed cuBLASLt's
// candidates and kept the fastest before the first step (other shapes, e.g. sampling's
// B=1, keep the heuristic's first choice). What the pass leaves in activations,
// gradients and the loss is overwritten or zeroed at the start of every step.
static void gpt2_tune_matmuls(GPT2 *model) {
    int B = model->B, T = model->T;
    int *zeros = (int *)calloc((size_t)B * T, sizeof(int));
    if (!zeros) fatal("out of host memory");
    gpt2_upload_batch(model, zeros, zeros, B, T);
    g_matmul_tune = 1;
    gpt2_forward(model, B, T);
    gpt2_loss(model, model->info + INFO_LOSS, 1.0f / ((float)B * T), 1, B, T);
    model->last_micro = 0;
    gpt2_backward(model);
    g_matmul_tune = 0;
    // ZeRO-2 sends each micro-step's gradients from the comm stream: step 1's zeroing must
    // come after this pass's reduce-scatters and shard additions
    if (gpt2_distributed(model)) compute_after_comm(model);
    CUDA_CHECK(cudaStreamSynchronize(model->stream));
    free(zeros);
}

// The step's loss, accumulated on each rank over its tokens (already divided by the
// world size), summed across the ranks: every rank then logs and checks the same value.
static void gpt2_reduce_loss(GPT2 *model, float *loss) {
    if (!gpt2_distributed(model)) return;
    comm_after_compute(model);
    comm_allreduce_f32(model->comm, loss, 1, COMM_SUM);
    compute_after_comm(model);
}

// The runs of tensor k this rank updates (see kernels/adamw.cuh): its chunk of every
// layer's slice under ZeRO, the whole tensor otherwise. *grads, *grad_stride: where their
// summed gradients are (the gradient buffer, or ZeRO-2's compact shard).
typedef struct {
    int slabs;
    size_t len, stride, first, shard_offset;  // first: index in the tensor of the run's first element
    const floatX *grads;
    size_t grad_stride;
} UpdateRuns;

static UpdateRuns gpt2_update_runs(GPT2 *m, int k) {
    const ZeroTensor *t = &m->zl.t[k];
    UpdateRuns u;
    u.shard_offset = t->shard_offset;
    if (m->zl.world == 1) {  // unsharded: the tensor is one run
        u.slabs = 1;
        u.len = u.stride = u.grad_stride = m->param_sizes[k];
        u.first = 0;
        u.grads = m->grad[k];
        return u;
    }
    u.slabs = t->layers;
    u.len = t->chunk;
    u.stride = t->slice;
    u.first = (size_t)m->rank * t->chunk;
    if (gpt2_zero2(m)) { u.grads = m->gshard + t->shard_offset; u.grad_stride = t->chunk; }
    else { u.grads = m->grad[k] + u.first; u.grad_stride = t->slice; }
    return u;
}

// AdamW over elements [c0, c1) of this rank's optimizer state, whose master weights and
// moments are at master, m, v (element c0 first): the whole state, or a staged chunk of it
// (--offload 2). The state holds tensor after tensor (at zl.t[k].shard_offset), each
// tensor's runs one after the other; common/distributed.h's update_piece cuts them. Each
// element's arithmetic and rounding noise depend on its index only, so any cut updates it
// alike.
typedef struct {
    GPT2 *model;
    const AdamWConfig *h;
} UpdateCtx;

static void gpt2_adamw_range(void *ctx, size_t c0, size_t c1, float *master, void *m, void *v) {
    const UpdateCtx *r = (const UpdateCtx *)ctx;
    GPT2 *model = r->model;
    const AdamWConfig *h = r->h;
    const size_t mb = adamw_moment_bytes(model->moments_bf16);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        UpdateRuns u = gpt2_update_runs(model, k);
        float wd = gpt2_param_is_decayed(k) ? h->weight_decay : 0.0f;
        int n = update_piece_count(u.shard_offset, u.slabs, u.len, c0, c1);
        for (int i = 0; i < n; i++) {
            UpdatePiece p;
            if (!update_piece(u.shard_offset, u.slabs, u.len, u.stride, u.grad_stride, c0, c1, i, &p)) continue;
            adamw_update(model->param[k] + u.first + p.at, master ? master + p.q : NULL, u.grads + p.grad_at,
                         u.grad_stride, (char *)m + p.q * mb, (char *)v + p.q * mb, model->moments_bf16, p.slabs,
                         p.len, u.stride, u.first + p.at, h->beta1, h->beta2, h->eps, wd, model->info,
                         model->adamw_step.dev, (uint32_t)(k * 0x85EBCA77u), model->stream);
        }
    }
}

// The update's launches: global norm, clip factor and AdamW, all on the device, reading the
// step's values from model->adamw_step. Under ZeRO each rank sums and updates its chunks.
static void update_launches(void *ctx) {
    const UpdateCtx *r = (const UpdateCtx *)ctx;
    GPT2 *model = r->model;
    cudaStream_t s = model->stream;
    float *partials = model->acts.fscratch;
    int nparts = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        UpdateRuns u = gpt2_update_runs(model, k);
        nparts += grad_sumsq(partials + nparts, u.grads, u.slabs, u.len, u.grad_stride, s);
    }
    grad_sumsq_total(model->info, partials, nparts, s);
    if (model->zl.world > 1) {  // each rank summed its chunks: add the ranks' sums
        comm_after_compute(model);
        comm_allreduce_f32(model->comm, model->info + INFO_SUMSQ, 1, COMM_SUM);
        compute_after_comm(model);
    }
    grad_norm_finish(model->info, r->h->grad_clip, &model->adamw_step.dev->inv_scale, s);
    if (model->offload == OFFLOAD_STAGED)
        offload_staged_update(&model->stage, model->master, model->m, model->v, model->zl.shard_elems,
                              gpt2_adamw_range, ctx, s);
    else
        gpt2_adamw_range(ctx, 0, model->zl.shard_elems, model->master, model->m, model->v);
    // on one rank the parameters are final here, so the FP8 casts join the update's graph
    if (model->zl.world == 1) gpt2_fp8_weights(model);
    if (model->fp8 && model->f8.delayed && gpt2_distributed(model)) {  // every rank the same scales
        comm_after_compute(model);
        comm_allreduce_f32(model->comm, model->f8.scalars, fp8_linear_scalar_count(&model->f8), COMM_MAX);
        compute_after_comm(model);
    }
    if (model->fp8) fp8_linear_roll(&model->f8, s);  // the step's amaxes into the histories (delayed)
}

// One optimizer step (t counts from 1). The loss of the step must already be in
// info[INFO_LOSS]; a non-finite loss or norm skips the update on the device. With
// --cuda-graph 1 the launches replay from a CUDA graph after one eager update (staged
// offload stays eager: its copies run on streams of their own). Under ZeRO the ranks then
// all-gather the updated parameters.
static void gpt2_update(GPT2 *model, const AdamWConfig *h, int t) {
    cudaStream_t s = model->stream;
    if (gpt2_distributed(model)) compute_after_comm(model);  // the backward's gradient reductions
    prof_begin(s);
    adamw_step_upload(&model->adamw_step, h->lr, h->beta1, h->beta2, t, h->max_loss, h->max_norm,
                      1.0f / model->scaler.scale, s);
    UpdateCtx r = {model, h};
    if (model->graph && model->update_warm && model->offload != OFFLOAD_STAGED) {
        // what the launches bake in: the run's constant hyperparameters
        float key[5] = {h->beta1, h->beta2, h->eps, h->weight_decay, h->grad_clip};
        step_graph_run(&model->update_graph, s, key, sizeof key, update_launches, &r);
    } else {
        update_launches(&r);
        model->update_warm = 1;
    }
    if (model->fp8 && model->f8.delayed) model->f8.rolled = 1;
    prof_end(PH_UPDATE, s);
    if (model->zl.world > 1) {  // every rank's updated chunks to every rank
        comm_after_compute(model);
        comm_group_start(model->comm);
        for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
            const ZeroTensor *zt = &model->zl.t[k];
            for (int l = 0; l < zt->layers; l++) {
                floatX *slice = model->param[k] + (size_t)l * zt->slice;
                comm_allgather(model->comm, slice + (size_t)model->rank * zt->chunk, slice, zt->chunk);
            }
        }
        comm_group_end(model->comm);
        compute_after_comm(model);
        gpt2_fp8_weights(model);
    }
}

#ifndef TESTING
// ----------------------------------------------------------------------------
// Sampling: row 0 of a B=1 forward holds the text so far (padded with EOT; attention is
// causal, so the padding does not change the logits at the last real position).

// The logits after ids[0..n) (ids holds T entries), for sample_text: one forward at the
// full T, the row of position n-1 copied to the host.
static void next_logits(void *m, const int *ids, int n, float *logits) {
    GPT2 *model = (GPT2 *)m;
    int T = model->T, V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    gpt2_upload_batch(model, ids, NULL, 1, T);
    gpt2_forward(model, 1, T);
    floatX *row = (floatX *)xmalloc((size_t)Vp * sizeof(floatX));
    CUDA_CHECK(cudaMemcpyAsync(row, model->acts.logits + (size_t)(n - 1) * Vp, (size_t)Vp * sizeof(floatX),
                               cudaMemcpyDeviceToHost, model->stream));
    CUDA_CHECK(cudaStreamSynchronize(model->stream));
    for (int v = 0; v < V; v++) logits[v] = to_float(row[v]);
    free(row);
}

// ----------------------------------------------------------------------------
// Checkpoints: <dir>/model_<step>.bin (the model: fp32 v3 in the fp32 build, bf16 v5 in
// the bf16 build, i.e. exactly the parameters trained) and <dir>/state_<step>.bin
// (AdamW moments, fp32 master weights, step, RNG, data loader position). The state is
// written last, so a step whose state file exists has a complete checkpoint.

// Every rank has reached this point (collective; nothing to do for one rank).
static void gpt2_barrier(GPT2 *model) {
    if (!gpt2_distributed(model)) return;
    comm_allreduce_f32(model->comm, model->info + INFO_BARRIER, 1, COMM_SUM);
    CUDA_CHECK(cudaStreamSynchronize(model->comm->stream));
}

// run carries what the run adds to the state (log length, skipped updates, settings).
static void save_checkpoint(GPT2 *model, const DataLoader *loader, const char *dir, int step, uint64_t rng,
                            const TrainState *run) {
    char mp[4096], sp[4096];
    checkpoint_paths(dir, step, mp, sp, sizeof mp);
    int shard_rank = gpt2_shard_rank(model);
    if (shard_rank == 0 && model->rank != 0) {  // unsharded: rank 0 writes everything
        gpt2_barrier(model);
        return;
    }
    state_path_for_rank(dir, step, shard_rank, sp, sizeof sp);
    size_t n = model->num_params, ns = model->zl.shard_elems;
    CUDA_CHECK(cudaStreamSynchronize(model->stream));
    float *host = (float *)xmalloc((n > ns ? n : ns) * sizeof(float));
    TrainState s = train_state_for(run, step, rng, loader);
    s.model_crc = 0;  // known to rank 0, which writes the model
    if (model->rank == 0) {  // every rank holds the same parameters
        download_floatX(host, model->params, n);
        s.model_crc = gpt2_checkpoint_write(mp, &model->config, host, PRECISION == PRECISION_BF16);
    }
    s.world_size = model->world;
    s.rank = shard_rank;
    s.loss_scale = model->scaler.scale;
    s.loss_scale_good_steps = model->scaler.good_steps;
    s.n = ns;
    // offloaded fp32 state is written from where it lives (the update above has finished)
    const int moments_in_place = offload_host_fp32(model->m, model->offload, !model->moments_bf16) != NULL;
    s.m = moments_in_place ? (float *)model->m : (float *)xmalloc(ns * sizeof(float));
    s.v = moments_in_place ? (float *)model->v : (float *)xmalloc(ns * sizeof(float));
    if (!moments_in_place) {
        adamw_moments_download(s.m, model->m, ns, model->moments_bf16);
        adamw_moments_download(s.v, model->v, ns, model->moments_bf16);
    }
    s.master = model->master ? offload_host_fp32(model->master, model->offload, 1) : NULL;
    if (model->master && !s.master) {
        s.master = host;  // reuse the buffer
        CUDA_CHECK(cudaMemcpy(s.master, model->master, ns * sizeof(float), cudaMemcpyDefault));
    }
    s.fp8_n = model->fp8 ? (int)fp8_linear_state_floats(&model->f8) : 0;
    s.fp8 = s.fp8_n ? (float *)xmalloc((size_t)s.fp8_n * sizeof(float)) : NULL;
    if (s.fp8_n) fp8_linear_state_get(&model->f8, s.fp8, model->stream);
    // rank 0's state file marks the checkpoint complete, so it is written after the others'
    if (shard_rank != 0) train_state_write(sp, &s);
    gpt2_barrier(model);
    if (model->rank == 0) train_state_write(sp, &s);
    if (!moments_in_place) {
        free(s.m);
        free(s.v);
    }
    free(s.fp8);
    free(host);
}

static void load_checkpoint(GPT2 *model, DataLoader *loader, const char *dir, int step, TrainState *run,
                            uint64_t *rng) {
    char mp[4096], sp[4096];
    checkpoint_paths(dir, step, mp, sp, sizeof mp);
    state_path_for_rank(dir, step, gpt2_shard_rank(model), sp, sizeof sp);
    GPT2Config cfg;
    float *params = gpt2_checkpoint_read(mp, &cfg);
    if (memcmp(&cfg, &model->config, sizeof cfg) != 0)
        fatal("%s holds a different model shape than -e gave; resume with the same model", mp);
    size_t n = model->num_params, ns = model->zl.shard_elems;
    upload_params(model->params, params, n);
    gpt2_fp8_weights(model);
    TrainState s;
    memset(&s, 0, sizeof s);
    s.world_size = model->world;
    s.rank = gpt2_shard_rank(model);
    s.loader_pos_bytes = (int)sizeof(DataLoaderPos);
    s.n = ns;
    // offloaded fp32 state is read straight into place (no update has run yet)
    const int moments_in_place = offload_host_fp32(model->m, model->offload, !model->moments_bf16) != NULL;
    float *in_place_master = model->master ? offload_host_fp32(model->master, model->offload, 1) : NULL;
    s.m = moments_in_place ? (float *)model->m : (float *)xmalloc(ns * sizeof(float));
    s.v = moments_in_place ? (float *)model->v : (float *)xmalloc(ns * sizeof(float));
    s.master = !model->master ? NULL : in_place_master ? in_place_master : params;  // reuse the buffer (ns <= n)
    train_state_read(sp, &s);
    if (!moments_in_place) {
        adamw_moments_upload(model->m, s.m, ns, model->moments_bf16);
        adamw_moments_upload(model->v, s.v, ns, model->moments_bf16);
    }
    if (model->master && !in_place_master)
        CUDA_CHECK(cudaMemcpy(model->master, s.master, ns * sizeof(float), cudaMemcpyDefault));
    train_state_resume(&s, loader, run, rng);
    if (model->rank == 0) {
        if (s.has_ext) run_settings_report(s.settings, run->settings);
        logger_truncate(dir, s.log_bytes, s.json_bytes);
    }
    if (PRECISION == PRECISION_FP16) {
        if (!(s.loss_scale > 0.0f) || !isfinite(s.loss_scale)) fatal("%s: bad loss scale %g", sp, s.loss_scale);
        model->scaler.scale = s.loss_scale;
        model->scaler.good_steps = s.loss_scale_good_steps;
    }
    size_t want_fp8 = model->fp8 ? fp8_linear_state_floats(&model->f8) : 0;
    if (want_fp8 && (size_t)s.fp8_n == want_fp8 && fp8_linear_state_set(&model->f8, s.fp8))
        gpt2_fp8_weights(model);  // the weights' copies again, after their scales came back
    else if (want_fp8 && model->rank == 0)
        printf("note: %s holds no FP8 scaling state of this run's layers; the first step scales itself, so the run "
               "continues close to, not bit for bit as, the one that wrote it\n", sp);
    free(s.fp8);
    if (!moments_in_place) {
        free(s.m);
        free(s.v);
    }
    free(params);
}

// ----------------------------------------------------------------------------
// Main

// Evaluation: each rank runs its part of every validation batch; the losses accumulate on
// the device, in info[INFO_VAL_LOSS], and the ranks' sums are added at the end.
static void eval_batch(void *m, const int *inputs, const int *targets, float weight) {
    GPT2 *model = (GPT2 *)m;
    int B = model->B, T = model->T;
    gpt2_upload_batch(model, inputs, targets, B, T);
    gpt2_forward(model, B, T);
    gpt2_loss(model, model->info + INFO_VAL_LOSS, weight / ((float)B * T * (float)model->world), 0, B, T);
}

static float eval_result(void *m) {
    GPT2 *model = (GPT2 *)m;
    float *acc = model->info + INFO_VAL_LOSS, loss;
    gpt2_reduce_loss(model, acc);
    CUDA_CHECK(cudaMemcpyAsync(&loss, acc, sizeof(float), cudaMemcpyDeviceToHost, model->stream));
    CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(float), model->stream));  // ready for the next evaluation
    CUDA_CHECK(cudaStreamSynchronize(model->stream));
    return loss;
}

// Training's micro-batches: the loader's next one, or with --overfit the first one again;
// with prefetch, read and staged on the host while the GPU runs the one before.
typedef struct {
    GPT2 *model;
    DataLoader *train;
    int overfit, prefetch, staged;  // staged: the next batch waits in HOST_BATCH_STAGED
    int *inputs, *targets;
} Batches;

static void batches_stage(Batches *b) {
    if (!b->overfit) dataloader_next(b->train, b->inputs, b->targets);
    gpt2_stage_batch(b->model, b->inputs, b->targets, b->model->B, b->model->T);
    b->staged = 1;
}

static void batches_init(Batches *b, GPT2 *model, DataLoader *train, int overfit, int prefetch) {
    size_t BT = (size_t)model->B * model->T;
    b->model = model;
    b->train = train;
    b->overfit = overfit;
    b->prefetch = prefetch;
    b->staged = 0;
    b->inputs = (int *)xmalloc(BT * sizeof(int));
    b->targets = (int *)xmalloc(BT * sizeof(int));
    if (overfit) dataloader_next(train, b->inputs, b->targets);  // the one batch
}

// The next micro-batch to the device (read now if it was not staged).
static void batches_upload(Batches *b) {
    if (!b->staged) batches_stage(b);
    gpt2_upload_staged(b->model);
    b->staged = 0;
}

// Reads and stages the next micro-batch now, if prefetching.
static void batches_prefetch(Batches *b) {
    if (b->prefetch) batches_stage(b);
}

static void batches_free(Batches *b) {
    free(b->inputs);
    free(b->targets);
}

// The step's loss and gradient norm: the step's one host sync.
static void gpt2_step_result(GPT2 *model, float *loss, float *norm) {
    float info[INFO_SLOTS];
    CUDA_CHECK(cudaMemcpyAsync(info, model->info, sizeof info, cudaMemcpyDeviceToHost, model->stream));
    CUDA_CHECK(cudaStreamSynchronize(model->stream));
    *loss = info[INFO_LOSS];
    *norm = info[INFO_NORM];
}

// The PCI bus id of the current GPU, whose board the energy counter reads.
static const char *device_pci_bus_id(void) {
    static char bus[32];
    int cur = 0;
    CUDA_CHECK(cudaGetDevice(&cur));
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, cur));
    return bus;
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static float trainer_evaluate(void *t) {
    Trainer *r = (Trainer *)t;
    EvalFns f = {eval_batch, eval_result};
    return evaluate_split(&r->data->val, r->o->val_batches, r->val_inputs, r->val_targets, f, r->model);
}

// HellaSwag: one forward over a batch of (example, completion) rows, its per-position
// losses copied to the host (the scorer's arithmetic is small; the forward is the work).
static void position_losses(void *m, const int *inputs, const int *targets, float *losses) {
    GPT2 *model = (GPT2 *)m;
    const GPT2Config *c = &model->config;
    int B = model->B, T = model->T, N = B * T;
    gpt2_upload_batch(model, inputs, targets, B, T);
    gpt2_forward(model, B, T);
    fused_classifier(model->acts.logits, model->acts.losses, batch_field(model, model->d_batch, BATCH_TARGETS), 1.0f,
                     0, N, c->vocab_size, c->padded_vocab_size, model->stream);
    CUDA_CHECK(cudaMemcpyAsync(losses, model->acts.losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost,
                               model->stream));
    CUDA_CHECK(cudaStreamSynchronize(model->stream));
}

// A count summed over the ranks on the device, like the validation loss (exact: a float
// holds every count below 2^24).
static long sum_over_ranks(GPT2 *model, long count) {
    float mine = (float)count;
    CUDA_CHECK(cudaMemcpyAsync(model->info + INFO_VAL_LOSS, &mine, sizeof(float), cudaMemcpyHostToDevice,
                               model->stream));
    return lroundf(eval_result(model));
}

// Each rank scores its share of the examples.
static HellaSwagScore trainer_hellaswag(void *t) {
    Trainer *r = (Trainer *)t;
    GPT2 *model = (GPT2 *)r->model;
    HellaSwagScore s = hellaswag_evaluate(&r->data->hellaswag, model->B, model->T, model->rank, model->world,
                                          r->val_inputs, r->val_targets, position_losses, model, NULL);
    s.correct = sum_over_ranks(model, s.correct);
    s.truncated = (int)sum_over_ranks(model, s.truncated);
    return s;
}

static void trainer_sample(void *t) {
    Trainer *r = (Trainer *)t;
    GPT2 *model = (GPT2 *)r->model;
    sample_text(&r->data->tok, r->o, model->T, model->config.vocab_size, r->rng, r->lg, next_logits, model);
}

static void trainer_save(void *t, int step1) {
    Trainer *r = (Trainer *)t;
    GPT2 *model = (GPT2 *)r->model;
    save_checkpoint(model, &r->data->train, r->o->out_dir, step1, *r->rng, r->run);
    if (model->rank == 0) printf("checkpoint written: %s/model_%08d.bin\n", r->o->out_dir, step1);
}

static long pg_sum_cb(const void *ctx, long v) { return pg_sum_long((const ProcessGroup *)ctx, v); }

// Before any large allocation, once the GPU is open: a budget against the card's size, and
// the plan against the GPU's free memory (the CUDA context and other processes already out
// of it), so that a run too large for this GPU stops naming settings that fit instead of
// failing in the middle of its allocations
static void device_memory_check(const PlanSettings *plan, MemorySetting s, size_t budget, int dev,
                                const cudaDeviceProp *prop) {
    char card[300], why[512], what[340], text[256], f[32];
    snprintf(card, sizeof card, "GPU %d (%s)", dev, prop->name);
    if (memory_budget_vs_card(budget, prop->totalGlobalMem, card, why, sizeof why)) fatal("%s", why);
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    snprintf(what, sizeof what, "%s has %s free", card, gib_text(f, sizeof f, free_b));
    DevicePlan d = gpt2_device_plan(plan, s);
    memory_limit_check(what, free_b, s, device_plan_bytes, plan, device_plan_text(text, sizeof text, &d), 0);
}

static size_t device_used_bytes(void) {
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

// The start-of-run memory breakdown (this rank's), with what ZeRO saves per rank.
static void print_memory(const GPT2 *model, size_t in_use) {
    double mib = 1.0 / (1024.0 * 1024.0);
    size_t np = model->num_params, ns = model->zl.shard_elems;
    size_t grad_bytes = model->grad_elems * sizeof(floatX) + (model->gshard ? ns * sizeof(floatX) : 0);
    const size_t moments = 2 * adamw_moment_bytes(model->moments_bf16);
    size_t opt_bytes = (model->master ? ns * 4 : 0) + ns * moments;
    printf("memory: parameters %.0f MiB, gradients %.0f MiB, master weights %.0f MiB, AdamW moments %.0f MiB (%s%s), "
           "activations %.0f MiB, scratch %.0f MiB, cuBLAS workspace %.0f MiB; in use after setup %.0f MiB\n",
           np * sizeof(floatX) * mib, grad_bytes * mib, model->master ? ns * 4 * mib : 0.0, ns * moments * mib,
           model->moments_bf16 ? "bf16" : "fp32",
           model->offload == OFFLOAD_STAGED ? "; these and the master weights in pinned host memory, staged"
           : model->offload                 ? "; these and the master weights in mapped pinned host memory"
                                            : "",
           model->act_bytes * mib, model->scratch_bytes * mib, CUBLASLT_WORKSPACE_BYTES * mib, in_use * mib);
    if (model->world > 1) {
        size_t full_opt = (model->master ? np * 4 : 0) + np * moments, full_grad = np * sizeof(floatX);
        printf(
            "data parallel: %d ranks (%s), ZeRO-%d: per rank, optimizer state %.0f MiB (unsharded %.0f, saves %.0f), "
            "gradients %.0f MiB (unsharded %.0f, saves %.0f)\n",
            model->world, comm_backend_name(model->comm->backend), model->zero_stage, opt_bytes * mib, full_opt * mib,
            (full_opt - opt_bytes) * mib, grad_bytes * mib, full_grad * mib,
            full_grad > grad_bytes ? (full_grad - grad_bytes) * mib : 0.0);
    }
}

// The end-of-run figures: the device memory at peak (cudaMemGetInfo sees the whole GPU, so
// the caller passes the difference to the start: what other processes hold is left out, but
// their changes during the run count), the host's, the CUDA graphs' replays, the budget.
static void print_run_end(const GPT2 *model, size_t peak, size_t planned, size_t max_memory) {
    double mib = 1.0 / (1024.0 * 1024.0);
    printf("device memory used at peak (cudaMemGetInfo: the GPU's use less its use before this run%s): %.0f MiB\n",
           model->world > 1 ? "; rank 0's GPU" : "", peak * mib);
    printf("host memory at peak (VmHWM, rank 0's process): %.0f MiB\n", host_peak_bytes() * mib);
    if (model->graph)
        printf("CUDA graph: %d capture(s), %d replays of the micro-step (the first micro-step eager); %d capture(s), "
               "%d replays of the update%s\n", model->step_graph.captures, model->step_graph.replays,
               model->update_graph.captures, model->update_graph.replays,
               model->offload == OFFLOAD_STAGED ? " (eager with --offload 2)" : " (the first update eager)");
    if (max_memory)
        printf("memory: measured peak %.0f MiB, planned %.0f MiB, --max-device-memory %.0f MiB%s\n", peak * mib,
               planned * mib, max_memory * mib, peak > max_memory ? ": OVER the budget (the plan misses something)" : "");
}

int main(int argc, char **argv) {
    ProcessGroup pg;
    pg_init(&pg, &argc, &argv);
    const int rank0 = pg.rank == 0;
    TrainOptions o;
    train_options_defaults(&o, 1024);
    int recompute = 1, flash = FLASH_DEFAULT, master_weights = 1, zero_stage = 0, fuse_gelu = 1, profile = 0;
    int prefetch = 1, tf32 = 0, log_gpu = -1, offload = 0, cuda_graph = 0, fp8 = 0;
    int deterministic = DETERMINISTIC_DEFAULT;
    const char *comm_name = "nccl", *max_memory_text = "", *optimizer_state = "fp32", *fp8_layers_text = "all";
    const char *fp8_scaling_text = "current";
    ArgSpec specs[TRAIN_OPTIONS_COUNT + 24];
    int nspecs = train_options_specs(&o, specs);
    specs[nspecs++] =
        arg_spec("-r", "--recompute", ARG_INT, &recompute,
                 "recompute in backward: 0 none, 1 GELU, 2 GELU+layernorm, 3 the whole block (keeps its input only)");
    specs[nspecs++] = arg_spec("-f", "--tf32", ARG_SWITCH, &tf32,
                               "1: the fp32 build's matmuls in TF32 (faster, about 3 decimal digits; the bf16 and "
                               "fp16 builds' are unaffected), 0: true fp32");
    specs[nspecs++] = arg_spec(NULL, "--flash-attention", ARG_INT, &flash,
                               "1: flash attention (bf16/fp16 builds, head size 64 or 128), 0: attention that stores "
                               "the T x T matrix, -1: flash where supported");
    specs[nspecs++] = arg_spec("-w", "--master-weights", ARG_SWITCH, &master_weights,
                               "1: keep fp32 master weights (bf16/fp16 builds)");
    specs[nspecs++] = arg_spec(
        "-z", "--zero-stage", ARG_INT, &zero_stage,
        "ZeRO stage with several ranks: 0 all-reduce the gradients, 1 shard the optimizer state, 2 also the gradients");
    specs[nspecs++] = arg_spec(NULL, "--comm", ARG_STRING, &comm_name,
                               "communication between ranks: nccl (one GPU per rank) or mpi (through host memory; "
                               "ranks may share a GPU: for tests)");
    specs[nspecs++] = arg_spec("-ge", "--fuse-gelu", ARG_INT, &fuse_gelu,
                               "1: GELU in the forward matmul's epilogue, 0: separate kernel");
    specs[nspecs++] =
        arg_spec("-lg", "--log-gpu-every", ARG_INT, &log_gpu, "llm.c's GPU logging: -1 only (use nvidia-smi)");
    // llm.c's launch without mpirun: here the environment does it (RANK, WORLD_SIZE, ...)
    static const char *const launch_flags[][2] = {{"-pn", "--num-processes"}, {"-pr", "--process-rank"},
                                                  {"-pg", "--gpus-per-node"}, {"-pm", "--nccl-init-method"},
                                                  {"-ps", "--server-ip"}, {"-pp", "--fs-path"}};
    for (int i = 0; i < 6; i++)
        specs[nspecs++] = arg_spec(launch_flags[i][0], launch_flags[i][1], ARG_REFUSED, NULL,
                                   "launch with mpirun, or set RANK, WORLD_SIZE, LOCAL_RANK and GPT2_NCCL_ID_FILE in "
                                   "each process (docs/command-line.md)");
    specs[nspecs++] = arg_spec(NULL, "--optimizer-state", ARG_STRING, &optimizer_state,
                               "AdamW's moments on the device: fp32, or bf16 (stochastically rounded, half the "
                               "memory; checkpoints hold fp32 either way)");
    specs[nspecs++] = arg_spec(NULL, "--offload", ARG_INT, &offload,
                               "the fp32 master weights and AdamW's moments in pinned host memory, updated with "
                               "the same arithmetic; 1: the update reads and writes them over PCIe in place, 2: "
                               "the copy engines stage them through two device buffers of 4M elements; 0: on the "
                               "device");
    specs[nspecs++] = arg_spec(NULL, "--max-device-memory", ARG_STRING, &max_memory_text,
                               "the most device memory the run may plan for, e.g. 16G (checked before any GPU "
                               "work; a run that does not fit stops naming settings that do); empty: no limit");
    specs[nspecs++] = arg_spec(NULL, "--prefetch", ARG_SWITCH, &prefetch,
                               "1: read and prepare the next micro-batch on the host while the GPU runs the current "
                               "one, 0: when its micro-step starts");
    specs[nspecs++] = arg_spec(NULL, "--cuda-graph", ARG_SWITCH, &cuda_graph,
                               "1: each training micro-step (forward, loss, backward) and each update (norm, "
                               "clip, AdamW) replayed from a CUDA graph (fewer launches: for small batches and "
                               "models; one rank), 0: launched kernel by kernel");
    specs[nspecs++] = arg_spec(NULL, "--fp8", ARG_SWITCH, &fp8,
                               "1: the linear layers' matmuls in FP8 (E4M3 weights and inputs, E5M2 gradients, "
                               "per-tensor scales, see --fp8-scaling; bf16 build, Hopper), 0: in bf16");
    specs[nspecs++] = arg_spec(NULL, "--fp8-layers", ARG_STRING, &fp8_layers_text,
                               "with --fp8 1, which linear layers: all, blocks (the four of every block), or head "
                               "(the lm_head)");
    specs[nspecs++] = arg_spec(NULL, "--fp8-scaling", ARG_STRING, &fp8_scaling_text,
                               "with --fp8 1, the inputs' and gradients' scales: current (each tensor's own amax, "
                               "one more pass over it) or delayed (the last 16 steps' amaxes over all ranks, kept "
                               "in the checkpoint)");
    specs[nspecs++] = arg_spec(NULL, "--profile", ARG_SWITCH, &profile,
                               "1: time each phase of the step with CUDA events, print a table at the end");
    specs[nspecs++] =
        arg_spec(NULL, "--deterministic", ARG_SWITCH, &deterministic,
                 "1: bitwise-reproducible runs (fixed summation order everywhere), 0: matmul algorithms picked by "
                 "timing, and flash attention's atomic-dq backward where it runs the mma.sync kernels (head size "
                 "128, or GPU_ARCH=90): faster there, not bitwise reproducible");
    args_parse(argc, argv, specs, nspecs,
               "usage: train_gpt2cu [options]\n"
               "       mpirun -np N train_gpt2cu [options]     (N ranks, one GPU each)\n\n"
               "Trains GPT-2 on NVIDIA GPUs (" PRECISION_NAME " build). Several ranks come from mpirun or from the\n"
               "environment (RANK, WORLD_SIZE, LOCAL_RANK, with GPT2_NCCL_ID_FILE naming a file all ranks see).");

    // validate everything before any GPU work
    train_options_validate(&o);
    const int B = o.B, T = o.T;
    if (recompute < 0 || recompute > 3) fatal("-r (recompute) must be 0, 1, 2 or 3, got %d", recompute);
    if (flash < -1 || flash > 1) fatal("--flash-attention must be -1, 0 or 1");
    if (flash == 1 && PRECISION == PRECISION_FP32)
        fatal("--flash-attention 1: flash attention needs the bf16 or fp16 build (make PRECISION=BF16); use 0");
    if (log_gpu != -1) fatal("-lg: logging the GPU's state is not implemented; use nvidia-smi dmon");
    if (zero_stage < 0 || zero_stage > 2) fatal("-z (ZeRO stage) must be 0, 1 or 2, got %d", zero_stage);
    int backend = comm_backend_parse(comm_name);
    if (backend != COMM_BACKEND_NCCL && backend != COMM_BACKEND_MPI)
        fatal("--comm must be nccl or mpi, got '%s'", comm_name);
    if (pg.world > 1 && !pg.using_mpi) {  // ranks from the environment: what the backends need
        if (backend == COMM_BACKEND_MPI) fatal("--comm mpi needs the ranks launched by mpirun; use --comm nccl");
        const char *id_file = getenv("GPT2_NCCL_ID_FILE");
        if (!id_file || !*id_file)
            fatal("%d ranks from the environment (WORLD_SIZE) need GPT2_NCCL_ID_FILE: a path on a file system every "
                  "rank sees, fresh for each launch (rank 0 writes NCCL's id there); or launch with mpirun", pg.world);
    }
    if (fuse_gelu == 2) fatal("-ge 2: GELU fused into the backward matmul is not implemented; use -ge 1");
    if (fuse_gelu != 0 && fuse_gelu != 1) fatal("-ge (GELU fusion) must be 0 or 1");
    const int moments_bf16 = adamw_moments_bf16_arg(optimizer_state);
    if (offload < OFFLOAD_NONE || offload > OFFLOAD_STAGED) fatal("--offload must be 0, 1 or 2, got %d", offload);
    if (cuda_graph && profile) fatal("--cuda-graph 1 with --profile 1: the profile times each phase with events "
                                     "inside the step; use one or the other");
    const int fp8_layers = fp8_layers_arg(fp8, fp8_layers_text), fp8_delayed = fp8_delayed_arg(fp8_scaling_text);
    if (cuda_graph && pg.world > 1)
        fatal("--cuda-graph 1 runs on one rank (the gradient reductions are not captured); %d ranks: use "
              "--cuda-graph 0", pg.world);
    size_t max_memory = 0;
    if (*max_memory_text && !parse_bytes(max_memory_text, &max_memory))
        fatal("--max-device-memory: '%s' is not a size (e.g. 16G, 512M, 1.5G, or a number of bytes)", max_memory_text);
    GPT2 model;
    memset(&model, 0, sizeof model);
    GPT2Config cfg;
    float *host_params = gpt2_params_from_model_arg(o.model_arg, T, (uint64_t)o.seed, &cfg);
    model.config = cfg;
    model.rank = pg.rank;
    model.world = pg.world;
    model.zero_stage = pg.world > 1 ? zero_stage : 0;  // one rank: nothing to shard
    model.deterministic = deterministic;
    model.moments_bf16 = moments_bf16;
    model.offload = offload;
    model.graph = cuda_graph;
    model.fp8 = fp8_layers;
    model.fp8_delayed = fp8_delayed;
    if (flash == FLASH_AUTO) flash = flash_supported(&cfg);
    if (flash && !flash_supported(&cfg))
        fatal("-e %s: flash attention supports head sizes 64 and 128, this model's is %d; use --flash-attention 0",
              o.model_arg, cfg.channels / cfg.num_heads);
    if (cfg.channels % 8 || (cfg.channels / cfg.num_heads) % 8)
        fatal("-e %s: channels (%d) and head size (%d) must be multiples of 8 for the GPU kernels", o.model_arg,
              cfg.channels, cfg.channels / cfg.num_heads);
    const char *bad = gpt2_setup_layout(&model, gpt2_shard_world(&model));
    if (bad) fatal("-z %d with %d ranks: %s; use a number of ranks that divides the channels (%d), or -z 0", zero_stage,
                   pg.world, bad, cfg.channels);
    const PlanSettings plan = {cfg, T, master_weights, flash, deterministic, fp8_layers};
    // (before the data is read: -d -1 is resolved there, to B*T*ranks)
    const long tokens_per_step = o.total_batch == -1 ? (long)B * T * pg.world : o.total_batch;
    const MemorySetting setting = {B,  recompute, pg.world, model.zero_stage, tokens_per_step, T, moments_bf16,
                                   o.total_batch == -1, offload};
    if (max_memory) {
        DevicePlan d = gpt2_device_plan(&plan, setting);
        char text[256];
        memory_budget_check(max_memory, setting, device_plan_bytes, &plan, device_plan_text(text, sizeof text, &d),
                            rank0);
    }

    TrainData data;
    train_data_open(&data, &o, cfg.vocab_size, pg.rank, pg.world);
    const int accum = data.accum, max_steps = data.max_steps;
    AdamWConfig opt = {o.lr, 0.9f, 0.95f, 1e-8f, o.weight_decay, o.grad_clip, 0.0f, 0.0f};
    // -y 1: the newest checkpoint intact on every rank (the ranks agree through MPI; ranks
    // from the environment have no host collective, and each checks its own files)
    const int resume_step = o.resume ? resume_pick_step(o.out_dir, gpt2_shard_rank(&model), !rank0,
                                                        pg.world > 1 && pg.using_mpi ? pg_sum_cb : NULL, &pg) : -1;

    // GPU from here on: rank r takes GPU local_rank (NCCL: one each; MPI backend: shared)
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count < 1) fatal("no CUDA device found");
    // (one visible GPU: the scheduler may give each rank its own; NCCL refuses true sharing)
    if (pg.world > 1 && backend == COMM_BACKEND_NCCL && dev_count > 1 && pg.local_rank >= dev_count)
        fatal("rank %d is local rank %d on a node with %d GPU(s): NCCL needs one GPU per rank; launch at most %d "
              "ranks per node (or --comm mpi to let ranks share GPUs, for tests)", pg.rank, pg.local_rank, dev_count,
              dev_count);
    int dev = pg.local_rank % dev_count;
    CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
#ifdef GPU_CC
    // the binary holds machine code for one compute capability only (the Makefile's GPU_ARCH)
    if (prop.major * 10 + prop.minor != GPU_CC)
        fatal("this train_gpt2cu is built for GPUs of compute capability %d.%d (H100/H200), but GPU %d (%s) is %d.%d; "
              "rebuild with make GPU_ARCH=%d%d (untested on other GPUs)", GPU_CC / 10, GPU_CC % 10, dev, prop.name,
              prop.major, prop.minor, prop.major, prop.minor);
#endif
    size_t used0 = device_used_bytes();
    device_memory_check(&plan, setting, max_memory, dev, &prop);
    Comm comm;
    comm_init(&comm, &pg, pg.world > 1 ? backend : COMM_BACKEND_NONE);
    model.comm = &comm;
    g_fuse_gelu = fuse_gelu;
    matmul_set_tf32(tf32);
    gpt2_build(&model, host_params, B, T, recompute, master_weights, flash);
    free(host_params);

    if (!deterministic) gpt2_tune_matmuls(&model);

    double mib = 1.0 / (1024.0 * 1024.0);
    if (rank0) {
        printf("device: %s, %d SMs, %.0f MiB; precision %s\n", prop.name, prop.multiProcessorCount,
               prop.totalGlobalMem * mib, PRECISION_NAME);
        print_model_banner(&cfg);
        print_memory(&model, device_used_bytes() - used0);
        int atomic_dq = flash && flash_attention_atomic_dq(cfg.channels / cfg.num_heads, deterministic);
        printf("training: B=%d T=%d x %d rank(s), %d micro-steps per step (%d tokens), %d steps, lr %g (%s), "
               "recompute %d, gelu %s, %s attention%s%s\n", B, T, pg.world, accum, o.total_batch, max_steps, o.lr,
               o.sched_name, recompute, g_fuse_gelu ? "fused" : "separate", flash ? "flash" : "plain",
               atomic_dq ? " (atomic-dq backward: not bitwise reproducible)" : "",
               PRECISION == PRECISION_FP16 ? ", dynamic loss scaling" : "");
        if (!deterministic)
            printf("matmuls: %d shapes timed over cuBLASLt's candidates, %d of them faster than its first choice\n",
                   g_tuned_shapes, g_tuned_changed);
        if (fp8_layers)
            printf("fp8: %s in FP8 (E4M3 weights and inputs, E5M2 gradients, %s scaling), their copies and "
                   "buffers %.0f MiB\n", fp8_layers == FP8_LAYERS_ALL ? "every linear layer" :
                   fp8_layers == FP8_LAYERS_BLOCKS ? "the blocks' linear layers" : "the lm_head",
                   fp8_delayed ? "delayed" : "current", fp8_plan_bytes(&cfg, fp8_layers, (size_t)B * T) * mib);
    }

    uint64_t rng = rng_seed((uint64_t)o.seed ^ 0x5eedULL);
    TrainState run;  // what the checkpoints carry besides the weights and moments
    memset(&run, 0, sizeof run);
    run_settings_pack(&o, max_steps, pg.world, run.settings);
    const int start_step = resume_step >= 0 ? resume_step : 0;
    if (resume_step >= 0) {
        load_checkpoint(&model, &data.train, o.out_dir, resume_step, &run, &rng);
        if (rank0) printf("resumed from %s at step %d\n", o.out_dir, start_step);
        if (rank0 && start_step >= max_steps)
            printf("the run finished at step %d (-x %d): nothing left to train\n", start_step, max_steps);
    }
    Logger lg;
    logger_init(&lg, o.out_dir, resume_step >= 0, !rank0);
    metrics_header(&lg, "train_gpt2cu", PRECISION_NAME, &cfg, &o, max_steps, pg.world, resume_step);
    const int can_sample = rank0 && sampling_possible(&cfg, !rank0);
    train_data_start_reading(&data, &o);

    int *val_inputs = (int *)xmalloc((size_t)B * T * sizeof(int));
    int *val_targets = (int *)xmalloc((size_t)B * T * sizeof(int));
    // the checkpoint files this process writes (pruned by -nk): rank 0's, a ZeRO rank's shard, or none
    const int prune_rank = gpt2_shard_rank(&model) == 0 && pg.rank != 0 ? -1 : gpt2_shard_rank(&model);
    Trainer tr = {&model, &data, &o, &run, &rng, &lg, val_inputs, val_targets, prune_rank};
    const BetweenStepsFns between = {trainer_evaluate, trainer_hellaswag, trainer_sample, trainer_save};
    Batches batches;
    batches_init(&batches, &model, &data.train, o.overfit, prefetch);
    const double flops_per_step = gpt2_flops_per_token(&cfg, T) * o.total_batch;
    // MFU is per GPU; the fp32 build's TF32 products have the tensor cores' TF32 peak
    const double peak_flops = (PRECISION == PRECISION_FP32 && tf32 ? GPU_PEAK_FLOPS_TF32 : GPU_PEAK_FLOPS) * pg.world;
    // the mean over positions, micro-steps and ranks (the ranks' losses and gradients are summed)
    const float loss_scale = 1.0f / ((float)B * T * accum * pg.world);
    size_t peak_used = device_used_bytes();
    if (profile) prof_init();
    StepMeter meter;  // this rank's GPU board
    step_meter_init(&meter, start_step, accum, device_pci_bus_id());
    const double t_run = wall_seconds();
    for (int step = start_step; step < max_steps; step++) {
        const int step1 = step + 1, last = step1 == max_steps, ckpt_due = checkpoint_due(&o, step1, last);
        step_meter_begin(&meter, step);
        g_prof.active = profile;
        model.inject_overflow = test_overflow_step(step1);
        // forward, loss and backward over the micro-steps (the gradients accumulate, and are
        // summed across the ranks by the backward)
        gpt2_zero_grad(&model);
        CUDA_CHECK(cudaMemsetAsync(model.info + INFO_LOSS, 0, sizeof(float), model.stream));
        for (int micro = 0; micro < accum; micro++) {
            batches_upload(&batches);
            model.last_micro = micro == accum - 1;
            gpt2_micro_step(&model, B, T, loss_scale);
            // the next batch is read while the GPU works; not across a checkpoint, which
            // records the loader's position as the next batch to train
            if (micro + 1 < accum || (!last && !ckpt_due)) batches_prefetch(&batches);
        }
        gpt2_reduce_loss(&model, model.info + INFO_LOSS);
        // clip and update (skipped on the device if the loss or the norm is not finite or an outlier)
        opt.lr = lr_at_step(&data.sched, step);
        outlier_limits(&o, &run, &opt);
        gpt2_update(&model, &opt, adamw_step_count(&run, step1));
        float loss, norm;
        gpt2_step_result(&model, &loss, &norm);  // the step's one host sync
        double dt = step_meter_end(&meter, step);
        if (profile) { prof_collect(step > start_step); g_prof.active = 0; }
        // log, then the bookkeeping of skipped updates and of the fp16 loss scale
        StepReport r = {step1, max_steps, loss, norm, opt.lr, dt, flops_per_step / dt / peak_flops, NAN,
                        o.total_batch, 0, 0, update_fate(loss, norm, &opt), &opt};
        run_progress(t_run, start_step, step1, max_steps, &r.elapsed, &r.eta);
        log_step(&lg, &r);
        updates_record(&run, step1, loss, norm, r.fate, o.max_skipped);
        if (PRECISION == PRECISION_FP16 && loss_scaler_update(&model.scaler, loss, norm) < 0)  // every rank: one norm
            logger_printf(&lg, "loss scale halved to %g\n", model.scaler.scale);
        if (step == start_step) peak_used = max_size(peak_used, device_used_bytes());
        // evaluation, HellaSwag, sample, checkpoint (their energy is not the step's)
        const int other = val_due(&o, data.have_val, step1, last) || hellaswag_due(&o, step1, last) ||
                          sample_due(&o, can_sample, step1, last) || ckpt_due;
        step_meter_pause(&meter, step, other);
        after_step(&o, data.have_val, can_sample, &lg, &run, step1, last, between, &tr);
        step_meter_resume(&meter, step, other);
    }
    step_meter_report(&meter, max_steps, o.total_batch, flops_per_step, peak_flops, rank0,
                      pg.world > 1 ? ", rank 0's GPU" : "");
    if (rank0) report_data_stall(&data, &o, max_steps - start_step);
    final_sample(&o, can_sample, max_steps, between, &tr);
    peak_used = max_size(peak_used, device_used_bytes());
    if (rank0 && profile) prof_print();
    if (rank0) print_run_end(&model, peak_used - used0, device_plan_bytes(&plan, setting), max_memory);
    batches_free(&batches);
    free(val_inputs);
    free(val_targets);
    logger_close(&lg);
    train_data_close(&data);
    gpt2_free(&model);
    comm_free(&comm);
    pg_finalize(&pg);
    return 0;
}
#endif // TESTING
