// gpu/trainer.cuh: one rank's trainer on its GPU, GpuTrainer: the model and what trains it,
// each the owner of its part: the FP8 state of the linear layers, the ranks' communication,
// the optimizer, the micro-batches on their way to the device, the fp16 loss scale, the
// CUDA graph of a micro-step, the step's scalars on the device, the phase timer. Built
// from the settings by one constructor (the trainer and test_gpt2cu alike), it runs the
// pieces of a training step (a micro-step: forward, loss, backward; the update) and the
// forwards of evaluation and sampling.
#pragma once
#include "host/loss_scaler.h"
#include "../kernels/step_graph.cuh"
#include "../kernels/step_info.cuh"
#include "settings.cuh"
#include "model.cuh"
#include "fp8_layers.cuh"
#include "fp8_auto.cuh"
#include "data_parallel.cuh"
#include "optimizer.cuh"
#include "batch.cuh"
#include "phases.cuh"

typedef struct {
    GpuSettings s;
    GPT2 model;
    Fp8Layers fp8;
    DataParallel dp;
    Optimizer opt;
    ParamShards shards;     // -z 3: this rank's shard of the parameters, gathered into the model's slots
    BatchStager batch;
    LossScaler scaler;      // S: the backward computes d(S * loss); 1 unless fp16
    int force_overflow;     // test hook (GPT2_TEST_OVERFLOW_STEPS): this step's scaled gradients overflow
                            // (trainer_step_begin)
    StepGraph micro_graph;  // --cuda-graph 1: forward, loss and backward of a micro-step
    int micro_warm;         // a micro-step has run eagerly (matmul plans, first launches)
    float *info;            // the step's scalars on the device (kernels/step_info.cuh's INFO_*)
    PhaseTimer phases;
} GpuTrainer;

// FP8's copies of the weights from the parameters as they are now
static void trainer_fp8_recast(GpuTrainer *t) {
    fp8_layers_cast_weights(&t->fp8, &t->model.config, t->model.param, t->model.stream);
}

// FP8's delayed scaling, after a step: its amaxes into the histories (fp8_linear_roll), each
// the largest over the ranks first, so that every rank scales alike
static void trainer_fp8_roll(GpuTrainer *t) {
    Fp8Linear *f8 = &t->fp8.f8;
    if (!t->fp8.on) return;
    if (f8->delayed) dp_allreduce_f32(&t->dp, f8->scalars, fp8_linear_scalar_count(f8), COMM_MAX);
    fp8_linear_roll(f8, t->model.stream);
}

// The update's steps 1 and 2 (trainer_update), run by the optimizer after AdamW's launches
static void trainer_after_adamw(void *ctx) {
    GpuTrainer *t = (GpuTrainer *)ctx;
    if (t->opt.zl.world == 1) trainer_fp8_recast(t);  // the parameters are final already
    trainer_fp8_roll(t);
}

// --fp8-layers auto: every kind of linear layer timed in FP8 and in bf16, the kinds FP8 makes
// faster kept in FP8 (gpu/fp8_auto.cuh); the timing's gradients are zeroed
static void trainer_fp8_auto(GpuTrainer *t) {
    GPT2 *m = &t->model;
    trainer_fp8_recast(t);
    // the linear layers' shapes are first met here: with --deterministic 0 they are tuned here
    // (matmul plans are made once a shape), so that the timing compares what training runs
    m->modes.tune = !t->s.deterministic;
    const int mask = fp8_auto_choose(m, &t->fp8, &t->dp, t->dp.rank == 0);
    m->modes.tune = 0;
    gpt2_zero_grad(m);
    fp8_layers_build(&t->fp8, &m->config, mask);
    char text[64];
    if (t->dp.rank == 0) {
        if (mask) printf("fp8 auto: FP8 in %s (as --fp8-layers %s would)\n", fp8_kinds_text(mask, text, sizeof text), text);
        else printf("fp8 auto: FP8 in none (every linear layer in bf16, as with --fp8 0)\n");
    }
}

// The trainer of the model host_params (fp32, checkpoint order) with the settings s (checked,
// and resolved for the model by gpu_settings_for_model). comm: the ranks' communicator
// (NULL: one rank); rank of world.
static void trainer_build(GpuTrainer *t, const GPT2Config *cfg, const float *host_params, const GpuSettings *s,
                          Comm *comm, int rank, int world) {
    memset(t, 0, sizeof *t);
    t->s = *s;
    fp8_layers_init(&t->fp8, cfg, s->fp8_mask, s->fp8_delayed, s->fp8_cast, (size_t)s->o.B * s->o.T);
    const GPT2Shape shape = gpu_model_shape(s);
    gpt2_build(&t->model, cfg, host_params, &shape, &t->fp8);
    dp_init(&t->dp, comm, rank, world, s->zero_stage, t->model.stream);
    if (t->fp8.auto_pick) trainer_fp8_auto(t);
    optimizer_create(&t->opt, &t->model, host_params, s, &t->dp, trainer_after_adamw, t);
    if (s->zero_stage == 3) {  // one rank with --offload 2: the shard (the whole model) in host memory
        param_shards_init(&t->shards, &t->model, &t->opt.zl, comm, rank, host_params,
                          params_on_host(s->zero_stage, world, s->offload));
        t->opt.ps = &t->shards;
    }
    dp_bind_gradients(&t->dp, &t->model, &t->opt.zl, t->opt.gshard);
    CUDA_CHECK(cudaMalloc(&t->info, INFO_SLOTS * sizeof(float)));
    CUDA_CHECK(cudaMemset(t->info, 0, INFO_SLOTS * sizeof(float)));
    loss_scaler_init(&t->scaler, PRECISION == PRECISION_FP16 ? LOSS_SCALE_INIT : 1.0f);
    trainer_fp8_recast(t);
    batch_stager_init(&t->batch, s->o.B, s->o.T, cfg->vocab_size);
    phase_timer_init(&t->phases, s->profile);
    CUDA_CHECK(cudaDeviceSynchronize());
}

// --trace: the phases of the traced steps become spans of trace
static void trainer_trace_to(GpuTrainer *t, Trace *trace) { t->phases.trace = trace; }

static void trainer_free(GpuTrainer *t) {
    step_graph_free(&t->micro_graph);
    phase_timer_free(&t->phases);
    batch_stager_free(&t->batch);
    cudaFree(t->info);
    optimizer_free(&t->opt);
    param_shards_free(&t->shards);
    dp_free(&t->dp);
    fp8_layers_free(&t->fp8);
    gpt2_free(&t->model);
}

// The scale S the loss's gradient is computed with (the test hook makes it overflow)
static float trainer_grad_scale(const GpuTrainer *t) { return t->force_overflow ? INFINITY : t->scaler.scale; }

// Before a step's micro-steps: the gradients (and ZeRO-2's shard of them) and the loss start at
// zero. force_overflow: the test hook's step, whose scaled gradients overflow.
static void trainer_step_begin(GpuTrainer *t, int force_overflow) {
    t->force_overflow = force_overflow;
    gpt2_zero_grad(&t->model);
    optimizer_zero_grad(&t->opt, t->model.stream);
    CUDA_CHECK(cudaMemsetAsync(t->info + INFO_LOSS, 0, sizeof(float), t->model.stream));
}

// One micro-step over a batch of the model's full (B, T) on the device: forward, the loss
// (added to info[INFO_LOSS] with loss_scale) and the backward, whose gradients accumulate.
typedef struct {
    GpuTrainer *t;
    const DeviceBatch *batch;
    int B, T;
    float loss_scale;
} MicroStep;

static void micro_step_launches(void *ctx) {
    MicroStep *m = (MicroStep *)ctx;
    GpuTrainer *t = m->t;
    cudaStream_t s = t->model.stream;
    const GradHooks hooks = dp_grad_hooks(&t->dp);
    t->fp8.f8.record = 1;  // FP8's delayed scaling learns from training micro-steps only
    phase_begin(&t->phases, PHASE_FORWARD, s);
    gpt2_forward(&t->model, m->batch, m->B, m->T);
    phase_end(&t->phases, PHASE_FORWARD, s);
    phase_begin(&t->phases, PHASE_LOSS, s);
    gpt2_loss(&t->model, m->batch, t->info + INFO_LOSS, m->loss_scale, trainer_grad_scale(t), 1, m->B, m->T);
    phase_end(&t->phases, PHASE_LOSS, s);
    phase_begin(&t->phases, PHASE_BACKWARD, s);
    gpt2_backward(&t->model, m->batch, &hooks);
    phase_end(&t->phases, PHASE_BACKWARD, s);
    t->fp8.f8.record = 0;
}

// batch: as batch_on_device gives it (for a graph's replays with --cuda-graph 1); last_micro:
// the step's last micro-step, after which the ranks reduce (ZeRO-0/1). With --cuda-graph 1
// the launches come from a CUDA graph (kernels/step_graph.cuh), after one eager micro-step
// has made the matmul plans and the kernels' first-launch setup, which must not happen inside
// a capture.
static void trainer_micro_step(GpuTrainer *t, const DeviceBatch *batch, int last_micro, float loss_scale) {
    const int B = t->model.B, T = t->model.T;
    MicroStep m = {t, batch, B, T, loss_scale};
    t->dp.last_micro = last_micro;
    if (!t->s.cuda_graph || !t->micro_warm) {
        micro_step_launches(&m);
        t->micro_warm = 1;
        return;
    }
    // what the launches bake in: the shape, the loss scale the gradients are computed with,
    // GELU's fusion (switched off for good when a shape finds no fused epilogue), and
    // whether FP8's delayed scaling has a history yet (before it, each cast scales itself)
    struct {
        int B, T;
        float loss_scale, S;
        int fuse_gelu, fp8_rolled;
    } key = {B, T, loss_scale, trainer_grad_scale(t), t->model.modes.fuse_gelu, t->fp8.f8.rolled};
    step_graph_run(&t->micro_graph, t->model.stream, &key, sizeof key, micro_step_launches, &m);
}

// One optimizer step (t counts from 1) on the accumulated gradients: AdamW (optimizer_step),
// then what the new parameters imply, in this order:
//   1. where each rank updated every parameter (one rank, or no ZeRO), FP8's copies of the
//      weights cast again;
//   2. FP8's amax roll (delayed scaling), the amaxes first the largest over the ranks;
//   3. under ZeRO-1 and -2, every rank's updated chunks all-gathered, then FP8's casts;
//   4. under -z 3, the model's layer slots out of date (each layer is gathered again from the
//      shard as it is used).
// 1 and 2 are launches that follow AdamW's with nothing between: the optimizer runs them
// at the end of the update's launches (trainer_after_adamw), so that the update's CUDA graph
// (--cuda-graph 1) captures and replays them too.
static void trainer_update(GpuTrainer *t, const AdamWConfig *h, int step_t) {
    cudaStream_t s = t->model.stream;
    phase_begin(&t->phases, PHASE_UPDATE, s);
    optimizer_step(&t->opt, &t->model, t->info, h, step_t, 1.0f / t->scaler.scale);  // with 1 and 2
    if (t->fp8.on && t->fp8.f8.delayed) t->fp8.f8.rolled = 1;  // the roll is enqueued for good
    if (t->s.zero_stage == 3) {
        param_shards_changed(&t->shards);
    } else if (t->opt.zl.world > 1) {
        dp_allgather_params(&t->dp);
        trainer_fp8_recast(t);
    }
    phase_end(&t->phases, PHASE_UPDATE, s);
}

// The step's loss and gradient norm: the step's one host sync.
static void trainer_step_result(GpuTrainer *t, float *loss, float *norm) {
    float info[INFO_SLOTS];
    CUDA_CHECK(cudaMemcpyAsync(info, t->info, sizeof info, cudaMemcpyDeviceToHost, t->model.stream));
    CUDA_CHECK(cudaStreamSynchronize(t->model.stream));
    *loss = info[INFO_LOSS];
    *norm = info[INFO_NORM];
}

// --deterministic 0: one forward and backward of a dummy (all token 0) micro-batch with
// matmul tuning on, so that every matmul shape of the training step has timed cuBLASLt's
// candidates and kept the fastest before the first step (other shapes, e.g. sampling's B=1,
// keep the heuristic's first choice). What the pass leaves in activations, gradients and
// the loss is overwritten or zeroed at the start of every step.
static void trainer_tune_matmuls(GpuTrainer *t) {
    GPT2 *m = &t->model;
    const int B = m->B, T = m->T;
    int *zeros = (int *)xcalloc((size_t)B * T, sizeof(int));
    batch_upload(&t->batch, zeros, zeros, B, T, m->stream);
    const DeviceBatch b = batch_on_device(&t->batch, t->s.cuda_graph);
    const GradHooks hooks = dp_grad_hooks(&t->dp);
    m->modes.tune = 1;
    gpt2_forward(m, &b, B, T);
    gpt2_loss(m, &b, t->info + INFO_LOSS, 1.0f / ((float)B * T), trainer_grad_scale(t), 1, B, T);
    t->dp.last_micro = 0;
    gpt2_backward(m, &b, &hooks);
    m->modes.tune = 0;
    // ZeRO-2 sends each micro-step's gradients from the comm stream: step 1's zeroing must
    // come after this pass's reduce-scatters and shard additions
    dp_wait_for_comm(&t->dp);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    free(zeros);
}

// Evaluation: each rank runs its part of every validation batch; the losses accumulate on the
// device, in info[INFO_VAL_LOSS] with weight, and the ranks' sums are added at the end.
static void trainer_eval_batch(GpuTrainer *t, const int *inputs, const int *targets, float weight) {
    GPT2 *m = &t->model;
    const int B = m->B, T = m->T;
    batch_upload(&t->batch, inputs, targets, B, T, m->stream);
    const DeviceBatch b = batch_on_device(&t->batch, 0);
    gpt2_forward(m, &b, B, T);
    gpt2_loss(m, &b, t->info + INFO_VAL_LOSS, weight / ((float)B * T * (float)t->dp.world), trainer_grad_scale(t), 0,
              B, T);
}

// The accumulated validation loss summed over the ranks; the accumulator back to zero
static float trainer_eval_result(GpuTrainer *t) {
    float *acc = t->info + INFO_VAL_LOSS, loss;
    dp_allreduce_f32(&t->dp, acc, 1, COMM_SUM);
    CUDA_CHECK(cudaMemcpyAsync(&loss, acc, sizeof(float), cudaMemcpyDeviceToHost, t->model.stream));
    CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(float), t->model.stream));  // ready for the next evaluation
    CUDA_CHECK(cudaStreamSynchronize(t->model.stream));
    return loss;
}

// A count summed over the ranks on the device, like the validation loss (exact: a float
// holds every count below 2^24).
static long trainer_sum_over_ranks(GpuTrainer *t, long count) {
    float mine = (float)count;
    CUDA_CHECK(cudaMemcpyAsync(t->info + INFO_VAL_LOSS, &mine, sizeof(float), cudaMemcpyHostToDevice,
                               t->model.stream));
    return lroundf(trainer_eval_result(t));
}

// Whether every rank passed the same v (0 <= v < 2^31): the largest and the smallest over the
// ranks of its two 16-bit halves, all-reduced on the device (a float holds each half exactly).
static int trainer_same_on_ranks(GpuTrainer *t, long v) {
    if (t->dp.world == 1) return 1;
    float h[4] = {(float)(v >> 16), (float)(v & 0xffff), -(float)(v >> 16), -(float)(v & 0xffff)}, *d;
    CUDA_CHECK(cudaMalloc(&d, sizeof h));
    CUDA_CHECK(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, t->model.stream));
    dp_allreduce_f32(&t->dp, d, 4, COMM_MAX);
    CUDA_CHECK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, t->model.stream));
    CUDA_CHECK(cudaStreamSynchronize(t->model.stream));
    CUDA_CHECK(cudaFree(d));
    return h[0] == -h[2] && h[1] == -h[3];
}

// One forward over a batch of rows and its per-position losses on the host (HellaSwag's
// scoring: the forward is the work, the scorer's arithmetic is small).
static void trainer_position_losses(GpuTrainer *t, const int *inputs, const int *targets, float *losses) {
    GPT2 *m = &t->model;
    const GPT2Config *c = &m->config;
    const int B = m->B, T = m->T, N = B * T;
    batch_upload(&t->batch, inputs, targets, B, T, m->stream);
    const DeviceBatch b = batch_on_device(&t->batch, 0);
    gpt2_forward(m, &b, B, T);
    fused_classifier(m->acts.logits, m->acts.losses, b.targets, 1.0f, 0, N, c->vocab_size, c->padded_vocab_size,
                     m->stream);
    CUDA_CHECK(cudaMemcpyAsync(losses, m->acts.losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

// Sampling: row 0 of a B=1 forward at the full T holds the text so far, ids[0..n) (padded with
// token 0; attention is causal, so the padding does not change the logits at position n-1);
// that position's logits to the host.
static void trainer_next_logits(GpuTrainer *t, const int *ids, int n, float *logits) {
    GPT2 *m = &t->model;
    const int T = m->T, V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    int *padded = (int *)xmalloc((size_t)T * sizeof(int));  // (ids holds n tokens, not T)
    for (int i = 0; i < T; i++) padded[i] = i < n ? ids[i] : 0;
    batch_upload(&t->batch, padded, NULL, 1, T, m->stream);
    free(padded);
    const DeviceBatch b = batch_on_device(&t->batch, 0);
    gpt2_forward(m, &b, 1, T);
    floatX *row = (floatX *)xmalloc((size_t)Vp * sizeof(floatX));
    CUDA_CHECK(cudaMemcpyAsync(row, m->acts.logits + (size_t)(n - 1) * Vp, (size_t)Vp * sizeof(floatX),
                               cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    for (int v = 0; v < V; v++) logits[v] = to_float(row[v]);
    free(row);
}

// --cuda-graph 1: how often the graphs were captured and replayed
static void trainer_print_graphs(const GpuTrainer *t) {
    if (!t->s.cuda_graph) return;
    printf("CUDA graph: %d capture(s), %d replays of the micro-step (the first micro-step eager); %d capture(s), %d "
           "replays of the update%s\n", t->micro_graph.captures, t->micro_graph.replays, t->opt.graph.captures,
           t->opt.graph.replays,
           t->opt.offload == OFFLOAD_STAGED ? " (eager with --offload 2)" : " (the first update eager)");
}
