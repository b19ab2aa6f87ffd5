// gpu/optimizer.cuh: the optimizer, AdamW, and everything it owns: the layout of its state
// over the ranks (ZeRO, common/distributed.h: each rank keeps its chunk of every tensor
// slice under -z 1 and -z 2, the whole model otherwise), the fp32 master weights and the
// moments wherever they live (on the device; in host memory with --offload 1 or 2,
// kernels/offload.cuh; the moments in bf16 with --optimizer-state bf16), ZeRO-2's shard of
// the summed gradients, and a step: the global gradient norm, the clip factor, the decision
// to skip the update (common/update_rule.h, taken on the device), AdamW on the rank's
// elements (under -z 3 into the parameters' shard, gpu/zero3.cuh). What the new parameters
// imply (ZeRO's all-gather, FP8's casts and amax roll) is the trainer's (trainer_update);
// those of its launches that must replay with the update it gives the optimizer to run after
// AdamW's. With --cuda-graph 1 a step's launches replay from a CUDA graph after one eager
// step. Entry points: optimizer_create, optimizer_step, optimizer_state_get / _set (the
// checkpoint's arrays), optimizer_free; the trainer does not reach inside.
#pragma once
#include "../common/distributed.h"
#include "../kernels/adamw.cuh"
#include "../kernels/global_norm.cuh"
#include "../kernels/offload.cuh"
#include "../kernels/step_graph.cuh"
#include "../kernels/step_info.cuh"
#include "settings.cuh"
#include "model.cuh"
#include "data_parallel.cuh"
#include "zero3.cuh"

typedef struct {
    ZeroLayout zl;         // the parameters over the ranks the state is sharded over (world 1: unsharded)
    int rank;              // this process's rank
    int shard_rank;        // the rank whose chunks the state holds (0 when unsharded)
    float *master;         // fp32 master weights of the rank's elements (NULL: none)
    void *m, *v;           // AdamW's moments of the rank's elements (zl.shard_elems), fp32 or bf16
    int moments_bf16;      // m and v in bf16
    int offload;           // OFFLOAD_*: where master, m and v are
    OffloadStage stage;    // --offload 2: the device buffers the state goes through
    floatX *gshard;        // ZeRO-2: the rank's summed gradient chunks (zl.shard_elems)
    AdamWStepBuf step;     // the update's per-step values, read on the device
    int use_graph, warm;   // --cuda-graph 1; an update has run eagerly (its kernels' first launches)
    StepGraph graph;       // norm, clip and AdamW (one rank, not staged)
    DataParallel *dp;      // the ranks
    ParamShards *ps;       // -z 3: the parameters' shard, which the update writes (NULL: the model's parameters)
    // the owner's launches after AdamW's, on the model's stream: run at the end of every
    // update's launches, and so captured into its graph with them (NULL: none)
    void (*after_adamw)(void *ctx);
    void *after_adamw_ctx;
} Optimizer;

// the ranks the optimizer state is sharded over: all of them under ZeRO, else one
static int optimizer_shard_world(const GpuSettings *s, int world) {
    return s->zero_stage > 0 && world > 1 ? world : 1;
}

// The layout of the model's parameters over shard_world ranks; NULL, or why the model's
// slices cannot be sharded that way.
static const char *optimizer_layout(ZeroLayout *zl, const GPT2Config *c, int shard_world) {
    size_t sizes[NUM_PARAM_TENSORS];
    int layers[NUM_PARAM_TENSORS];
    gpt2_param_sizes(c, sizes);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) layers[k] = gpt2_param_layers(c, k);
    return zero_layout_init(zl, sizes, layers, GPT2_PARAM_NAMES, NUM_PARAM_TENSORS, shard_world);
}

// bytes of the optimizer's state of ns elements (master weights and moments)
static size_t optimizer_state_bytes(size_t ns, int has_master, int moments_bf16) {
    return ns * 2 * adamw_moment_bytes(moments_bf16) + (has_master ? ns * sizeof(float) : 0);
}

static int optimizer_has_master(const GpuSettings *s) { return s->master_weights && PRECISION != PRECISION_FP32; }

// The state for the model's parameters host_params (fp32, checkpoint order): the master
// weights from them, the moments zero. after_adamw(ctx): launches to run after AdamW's in
// every update (NULL: none).
static void optimizer_create(Optimizer *o, const GPT2 *model, const float *host_params, const GpuSettings *s,
                             DataParallel *dp, void (*after_adamw)(void *), void *ctx) {
    memset(o, 0, sizeof *o);
    o->dp = dp;
    o->after_adamw = after_adamw;
    o->after_adamw_ctx = ctx;
    o->rank = dp->rank;
    const char *bad = optimizer_layout(&o->zl, &model->config, optimizer_shard_world(s, dp->world));
    if (bad) fatal("internal: ZeRO layout: %s", bad);  // gpu_settings_check's caller checked it
    o->shard_rank = o->zl.world > 1 ? dp->rank : 0;
    o->moments_bf16 = s->moments_bf16;
    o->offload = s->offload;
    o->use_graph = s->cuda_graph;
    const size_t ns = o->zl.shard_elems;
    if (s->shard_grads) {
        CUDA_CHECK(cudaMalloc(&o->gshard, ns * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(o->gshard, 0, ns * sizeof(floatX)));
    }
    if (optimizer_has_master(s)) {
        float *shard = NULL;  // this rank's chunks of every slice (everything when unsharded)
        if (o->zl.world > 1) {
            shard = (float *)xmalloc(ns * sizeof(float));
            zero_gather_shard(&o->zl, o->shard_rank, host_params, shard);
        }
        o->master = (float *)optimizer_state_alloc(ns * sizeof(float), o->offload);
        CUDA_CHECK(cudaMemcpy(o->master, shard ? shard : host_params, ns * sizeof(float), cudaMemcpyDefault));
        free(shard);
    }
    const size_t mb = adamw_moment_bytes(o->moments_bf16);
    o->m = optimizer_state_alloc(ns * mb, o->offload);
    o->v = optimizer_state_alloc(ns * mb, o->offload);
    if (o->offload == OFFLOAD_STAGED) offload_stage_init(&o->stage, o->master != NULL, mb);
    adamw_step_init(&o->step);
}

static void optimizer_free(Optimizer *o) {
    step_graph_free(&o->graph);
    adamw_step_free(&o->step);
    optimizer_state_free(o->master, o->offload);
    optimizer_state_free(o->m, o->offload);
    optimizer_state_free(o->v, o->offload);
    offload_stage_free(&o->stage);
    cudaFree(o->gshard);
    memset(o, 0, sizeof *o);
}

// Before a step's first backward: ZeRO-2's gradient shard starts from zero
static void optimizer_zero_grad(Optimizer *o, cudaStream_t s) {
    if (o->gshard) CUDA_CHECK(cudaMemsetAsync(o->gshard, 0, o->zl.shard_elems * sizeof(floatX), s));
}

// The runs of tensor k this rank updates (see kernels/adamw.cuh): its chunk of every layer's
// slice under ZeRO, the whole tensor otherwise. grads, grad_stride: where their summed
// gradients are (the model's gradients, or ZeRO-2's compact shard).
typedef struct {
    int slabs;
    size_t len, stride, first, shard_offset;  // first: index in the tensor of the run's first element
    const floatX *grads;
    size_t grad_stride;
    // the parameters: the model's (run s's element j at params + s * stride + j), or -z 3's
    // shard, laid out as the gradients' (params + s * grad_stride + j)
    floatX *params;
    int params_compact;
} UpdateRuns;

static UpdateRuns update_runs(const Optimizer *o, const GPT2 *model, int k) {
    const ZeroTensor *t = &o->zl.t[k];
    UpdateRuns u;
    u.shard_offset = t->shard_offset;
    u.params_compact = o->ps != NULL;
    if (o->zl.world == 1) {  // unsharded: the tensor is one run
        u.slabs = 1;
        u.len = u.stride = u.grad_stride = model->param_sizes[k];
        u.first = 0;
        u.grads = model->grad[k];
        u.params = o->ps ? o->ps->shard + t->shard_offset : model->param[k];
        return u;
    }
    u.slabs = t->layers;
    u.len = t->chunk;
    u.stride = t->slice;
    u.first = (size_t)o->rank * t->chunk;
    if (o->gshard) { u.grads = o->gshard + t->shard_offset; u.grad_stride = t->chunk; }
    else { u.grads = model->grad[k] + u.first; u.grad_stride = t->slice; }
    u.params = o->ps ? o->ps->shard + t->shard_offset : model->param[k] + u.first;
    return u;
}

// What one step's launches need
typedef struct {
    Optimizer *o;
    GPT2 *model;
    float *info;  // the step's scalars (kernels/step_info.cuh's INFO_*)
    const AdamWConfig *h;
} UpdateCtx;

// AdamW over elements [c0, c1) of this rank's state, whose master weights and moments are at
// master, m, v (element c0 first): the whole state, or a staged chunk of it (--offload 2).
// The state holds tensor after tensor (at zl.t[k].shard_offset), each tensor's runs one
// after the other; common/distributed.h's update_piece cuts them. Each element's arithmetic
// and rounding noise depend on its index only, so any cut updates it alike.
static void adamw_range(void *ctx, size_t c0, size_t c1, float *master, void *m, void *v) {
    const UpdateCtx *r = (const UpdateCtx *)ctx;
    const Optimizer *o = r->o;
    const AdamWConfig *h = r->h;
    const size_t mb = adamw_moment_bytes(o->moments_bf16);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        UpdateRuns u = update_runs(o, r->model, k);
        float wd = gpt2_param_is_decayed(k) ? h->weight_decay : 0.0f;
        int n = update_piece_count(u.shard_offset, u.slabs, u.len, c0, c1);
        for (int i = 0; i < n; i++) {
            UpdatePiece p;
            if (!update_piece(u.shard_offset, u.slabs, u.len, u.stride, u.grad_stride, c0, c1, i, &p)) continue;
            floatX *params = u.params_compact ? u.params + p.grad_at : u.params + p.at;
            adamw_update(params, u.params_compact ? u.grad_stride : u.stride, master ? master + p.q : NULL,
                         u.grads + p.grad_at, u.grad_stride, (char *)m + p.q * mb, (char *)v + p.q * mb,
                         o->moments_bf16, p.slabs, p.len, u.stride, u.first + p.at, h->beta1, h->beta2, h->eps, wd,
                         r->info, o->step.dev, (uint32_t)(k * 0x85EBCA77u), r->model->stream);
        }
    }
}

// A step's launches: global norm, clip factor and AdamW, all on the device, reading the
// step's values from o->step, then the owner's (after_adamw). Under ZeRO each rank sums and
// updates its chunks.
static void update_launches(void *ctx) {
    const UpdateCtx *r = (const UpdateCtx *)ctx;
    Optimizer *o = r->o;
    GPT2 *model = r->model;
    cudaStream_t s = model->stream;
    float *partials = model->acts.fscratch;
    int nparts = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        UpdateRuns u = update_runs(o, model, k);
        nparts += grad_sumsq(partials + nparts, u.grads, u.slabs, u.len, u.grad_stride, s);
    }
    grad_sumsq_total(r->info, partials, nparts, s);
    if (o->zl.world > 1) dp_allreduce_f32(o->dp, r->info + INFO_SUMSQ, 1, COMM_SUM);  // each rank summed its chunks
    grad_norm_finish(r->info, r->h->grad_clip, &o->step.dev->inv_scale, s);
    if (o->offload == OFFLOAD_STAGED)
        offload_staged_update(&o->stage, o->master, o->m, o->v, o->zl.shard_elems, adamw_range, ctx, s);
    else
        adamw_range(ctx, 0, o->zl.shard_elems, o->master, o->m, o->v);
    if (o->after_adamw) o->after_adamw(o->after_adamw_ctx);
}

// One optimizer step (t counts from 1) on the model's summed gradients, which carry the loss
// scale 1 / inv_loss_scale. The step's loss must already be in info[INFO_LOSS]; a loss or
// norm that common/update_rule.h refuses skips the update on the device. Under ZeRO each
// rank's parameters are new in its chunks only (-z 3: in its shard).
static void optimizer_step(Optimizer *o, GPT2 *model, float *info, const AdamWConfig *h, int t, float inv_loss_scale) {
    cudaStream_t s = model->stream;
    dp_wait_for_comm(o->dp);  // the backward's gradient reductions
    adamw_step_upload(&o->step, h->lr, h->beta1, h->beta2, t, h->max_loss, h->max_norm, inv_loss_scale, s);
    UpdateCtx r = {o, model, info, h};
    if (o->use_graph && o->warm && o->offload != OFFLOAD_STAGED) {
        // what the launches bake in: the run's constant hyperparameters (staged offload stays
        // eager: its copies run on streams of their own)
        float key[5] = {h->beta1, h->beta2, h->eps, h->weight_decay, h->grad_clip};
        step_graph_run(&o->graph, s, key, sizeof key, update_launches, &r);
    } else {
        update_launches(&r);
        o->warm = 1;
    }
}

// The checkpoint's view of the state: fp32 arrays on the host, as the training-state file
// holds them (TrainState's n, m, v, master). Offloaded fp32 arrays are used in place (a copy
// would take 4 bytes a parameter of host memory more: 12.5 GB at GPT-2 1.5B for the
// moments); the others go through host buffers, the master weights through scratch (ns
// floats or more, the caller's). optimizer_state_release frees what these allocated.
static int optimizer_moments_in_place(const Optimizer *o) {
    return offload_host_fp32(o->m, o->offload, !o->moments_bf16) != NULL;
}

static void optimizer_state_arrays(const Optimizer *o, TrainState *s, float *scratch) {
    const size_t ns = o->zl.shard_elems;
    const int in_place = optimizer_moments_in_place(o);
    s->n = ns;
    s->m = in_place ? (float *)o->m : (float *)xmalloc(ns * sizeof(float));
    s->v = in_place ? (float *)o->v : (float *)xmalloc(ns * sizeof(float));
    float *master_in_place = o->master ? offload_host_fp32(o->master, o->offload, 1) : NULL;
    s->master = !o->master ? NULL : master_in_place ? master_in_place : scratch;
}

// The state into s's arrays, to be written (after the step's update has finished)
static void optimizer_state_get(const Optimizer *o, TrainState *s, float *scratch) {
    const size_t ns = o->zl.shard_elems;
    optimizer_state_arrays(o, s, scratch);
    if (!optimizer_moments_in_place(o)) {
        adamw_moments_download(s->m, o->m, ns, o->moments_bf16);
        adamw_moments_download(s->v, o->v, ns, o->moments_bf16);
    }
    if (o->master && s->master != (float *)o->master)
        CUDA_CHECK(cudaMemcpy(s->master, o->master, ns * sizeof(float), cudaMemcpyDefault));
}

// The state from s's arrays (set up by optimizer_state_arrays, then read from the file)
static void optimizer_state_set(Optimizer *o, const TrainState *s) {
    const size_t ns = o->zl.shard_elems;
    if (!optimizer_moments_in_place(o)) {
        adamw_moments_upload(o->m, s->m, ns, o->moments_bf16);
        adamw_moments_upload(o->v, s->v, ns, o->moments_bf16);
    }
    if (o->master && s->master != (float *)o->master)
        CUDA_CHECK(cudaMemcpy(o->master, s->master, ns * sizeof(float), cudaMemcpyDefault));
}

static void optimizer_state_release(const Optimizer *o, TrainState *s) {
    if (!optimizer_moments_in_place(o)) {
        free(s->m);
        free(s->v);
    }
    s->m = s->v = s->master = NULL;
}
