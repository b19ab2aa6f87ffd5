// gpu/zero3.cuh: -z 3, the parameters sharded like the optimizer state (ParamShards). Each
// rank keeps only its chunks of every tensor slice (common/distributed.h's ZeroLayout, the
// optimizer's own layout, so AdamW writes its updated chunks there and nothing is gathered
// after an update); the model holds wte, wpe, lnf and two or three layers' slots
// (gpu/model.cuh's param_slots), which this file fills just ahead of use: when the forward or
// backward asks for layer l (ParamHooks), l is gathered if its slot does not hold it already
// and the next layer's gather (--prefetch-layers 2: the next two's) is issued on the
// communication stream while layer l computes. The backward finds the forward's last layers
// still gathered, and the next micro-step's forward finds the backward's first ones. With several ranks a gather is an all-gather (NCCL, or the
// MPI backend through host memory); with one rank (-z 3 --offload 2) the shard is the whole
// model in pinned host memory and a gather is a copy over PCIe, so the device holds a few
// layers' weights instead of the model's. The gradients go as under ZeRO-2 (data_parallel.cuh).
#pragma once
#include "../common/distributed.h"
#include "../kernels/comm.cuh"
#include "../kernels/offload.cuh"
#include "model.cuh"

typedef struct {
    GPT2 *model;
    const ZeroLayout *zl;  // the optimizer's layout (its world: the ranks, or 1)
    Comm *comm;            // several ranks: the all-gathers; NULL or one rank: copies
    int rank;
    floatX *shard;         // this rank's chunks of every slice (zl->shard_elems), in the optimizer's order
    int on_host;           // the shard in mapped pinned host memory (one rank with --offload 2)
    cudaStream_t stream;   // where the gathers run: the communicator's stream, or one of its own
    int own_stream;
    int slots;             // the model's layer slots: the layer in use and those gathered ahead of it
    int slot_layer[MODEL_MAX_SLOTS];  // the layer each slot holds (-1: none, or stale since an update)
    int globals_ready;     // wte, wpe, lnf hold the shard's current values
    cudaEvent_t gathered[MODEL_MAX_SLOTS], globals_gathered, compute_done;
} ParamShards;

// The shard's memory: on the device, or pinned and mapped host memory that the update's
// kernel writes in place (kernels/offload.cuh's allocator, as the offloaded optimizer state)
static void param_shards_alloc(ParamShards *ps, size_t bytes) {
    if (ps->on_host) ps->shard = (floatX *)pinned_mapped_alloc(bytes, "-z 3 --offload 2", "the model's parameters");
    else CUDA_CHECK(cudaMalloc(&ps->shard, bytes));
}

// Every slot stale: the shard changed (an update, a checkpoint's parameters)
static void param_shards_changed(ParamShards *ps) {
    if (!ps || !ps->shard) return;
    for (int i = 0; i < MODEL_MAX_SLOTS; i++) ps->slot_layer[i] = -1;
    ps->globals_ready = 0;
}

// The shard from the whole model host_params (fp32, checkpoint order)
static void param_shards_set(ParamShards *ps, const float *host_params) {
    const size_t ns = ps->zl->shard_elems;
    float *mine = (float *)xmalloc(ns * sizeof(float));
    zero_gather_shard(ps->zl, ps->zl->world > 1 ? ps->rank : 0, host_params, mine);
    CUDA_CHECK(cudaDeviceSynchronize());  // a gather in flight may still read the shard
    upload_params(ps->shard, mine, ns);
    free(mine);
    param_shards_changed(ps);
}

// The gathers of one step in stream order: after the compute stream's work so far (a slot
// is written only once the layer it held has been used), then the all-gathers (or copies)
static void shards_gather_begin(ParamShards *ps) {
    CUDA_CHECK(cudaEventRecord(ps->compute_done, ps->model->stream));
    CUDA_CHECK(cudaStreamWaitEvent(ps->stream, ps->compute_done, 0));
    if (ps->zl->world > 1) comm_group_start(ps->comm);
}
static void shards_gather_end(ParamShards *ps, cudaEvent_t done) {
    if (ps->zl->world > 1) comm_group_end(ps->comm);
    CUDA_CHECK(cudaEventRecord(done, ps->stream));
}

// Tensor k's slice of layer l (0 for the one-slice tensors) from every rank's chunk into dst
static void shards_gather_slice(ParamShards *ps, int k, int l, floatX *dst) {
    const ZeroTensor *t = &ps->zl->t[k];
    const floatX *mine = ps->shard + zero_chunk_at(t, l);
    if (ps->zl->world > 1) comm_allgather(ps->comm, mine, dst, t->chunk);
    else CUDA_CHECK(cudaMemcpyAsync(dst, mine, t->chunk * sizeof(floatX), cudaMemcpyDefault, ps->stream));
}

static void shards_gather_layer(ParamShards *ps, int l) {
    GPT2 *m = ps->model;
    shards_gather_begin(ps);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++)
        if (ps->zl->t[k].layers > 1) shards_gather_slice(ps, k, l, param_at(m, k, l));
    shards_gather_end(ps, ps->gathered[l % ps->slots]);
    ps->slot_layer[l % ps->slots] = l;
}

static void shards_gather_globals(ParamShards *ps) {
    shards_gather_begin(ps);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++)
        if (ps->zl->t[k].layers == 1) shards_gather_slice(ps, k, 0, ps->model->param[k]);
    shards_gather_end(ps, ps->globals_gathered);
    ps->globals_ready = 1;
}

// ParamHooks.need: layer l's parameters (-1: wte, wpe, lnf) ready for the compute stream's
// next work, and layer `next`'s (and with three slots the one after it, the same way) on
// their way. Each goes into the slot of the layer before l in that direction (none of the
// layers in use), whose work the gather waits for.
static void param_shards_need(void *ctx, int l, int next) {
    ParamShards *ps = (ParamShards *)ctx;
    cudaStream_t s = ps->model->stream;
    if (l < 0) {
        if (!ps->globals_ready) shards_gather_globals(ps);
        CUDA_CHECK(cudaStreamWaitEvent(s, ps->globals_gathered, 0));
    } else {
        if (ps->slot_layer[l % ps->slots] != l) shards_gather_layer(ps, l);
        CUDA_CHECK(cudaStreamWaitEvent(s, ps->gathered[l % ps->slots], 0));
    }
    if (next < 0) return;
    const int L = ps->model->config.num_layers;
    const int step = l >= 0 ? next - l : next == 0 ? 1 : -1;  // the direction: up (forward) or down
    for (int i = 0, n = next; i < ps->slots - 1 && n >= 0 && n < L; i++, n += step)
        if (ps->slot_layer[n % ps->slots] != n) shards_gather_layer(ps, n);
}

// Shards the model's parameters host_params (fp32, checkpoint order) over the layout's ranks
// and lets the model ask for them. on_host: keep the shard in pinned host memory.
static void param_shards_init(ParamShards *ps, GPT2 *model, const ZeroLayout *zl, Comm *comm, int rank,
                              const float *host_params, int on_host) {
    memset(ps, 0, sizeof *ps);
    ps->model = model;
    ps->zl = zl;
    ps->comm = comm;
    ps->rank = rank;
    ps->on_host = on_host;
    if (zl->world > 1 && (!comm || comm->world != zl->world))
        fatal("internal: -z 3 over %d ranks without their communicator", zl->world);
    ps->own_stream = !comm;
    if (comm) ps->stream = comm->stream;
    else CUDA_CHECK(cudaStreamCreateWithFlags(&ps->stream, cudaStreamNonBlocking));
    ps->slots = model->param_slots;
    for (int i = 0; i < ps->slots; i++) CUDA_CHECK(cudaEventCreateWithFlags(&ps->gathered[i], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&ps->globals_gathered, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&ps->compute_done, cudaEventDisableTiming));
    param_shards_alloc(ps, zl->shard_elems * sizeof(floatX));
    param_shards_set(ps, host_params);
    ParamHooks h = {param_shards_need, ps};
    model->param_hooks = h;
}

static void param_shards_free(ParamShards *ps) {
    if (!ps->shard) return;
    CUDA_CHECK(cudaStreamSynchronize(ps->stream));
    if (ps->on_host) CUDA_CHECK(cudaFreeHost(ps->shard));
    else cudaFree(ps->shard);
    for (int i = 0; i < ps->slots; i++) cudaEventDestroy(ps->gathered[i]);
    cudaEventDestroy(ps->globals_gathered);
    cudaEventDestroy(ps->compute_done);
    if (ps->own_stream) cudaStreamDestroy(ps->stream);
    memset(ps, 0, sizeof *ps);
}

// The whole model's parameters into host (fp32, checkpoint order; the model file), layer by
// layer through the slots. Every rank calls it (the gathers are collective); host NULL: this
// rank only takes part.
static void param_shards_download(ParamShards *ps, float *host) {
    GPT2 *m = ps->model;
    const GPT2Config *c = &m->config;
    for (int l = -1; l < c->num_layers; l++) {
        param_shards_need(ps, l, -1);
        if (!host) continue;
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
        for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
            const ZeroTensor *t = &ps->zl->t[k];
            if ((l < 0) != (t->layers == 1)) continue;
            download_floatX(host + m->param_offsets[k] + (size_t)(l < 0 ? 0 : l) * t->slice, param_at(m, k, l),
                            t->slice);
        }
    }
}
