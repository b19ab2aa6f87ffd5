// gpu/data_parallel.cuh: what several ranks add to a training step (mpirun -np N, or ranks
// from the environment). Every rank holds the whole model and trains on its part of each
// global batch; the gradients are summed across the ranks layer by layer on the
// communication stream (kernels/comm.cuh) while the backward goes on, as soon as the
// backward says a layer's are final (the model's GradHooks). ZeRO-0 all-reduces them and
// ZeRO-1 reduce-scatters them (each rank keeps the sums of its chunks), both once a step,
// in its last micro-step; ZeRO-2 (and -3, whose parameters gpu/zero3.cuh gathers)
// reduce-scatters every micro-step's, adds the rank's chunks to the optimizer's gradient
// shard and clears the layer's slot for the layer after next. After the update, ZeRO-1 and
// -2 all-gather the parameters' chunks each rank updated.
// The communication stream is ordered after the compute stream (and back) with events, so
// the compute stream never waits on the host. With one rank every function here does nothing.
#pragma once
#include "../common/distributed.h"
#include "../kernels/comm.cuh"
#include "../kernels/adamw.cuh"  // grad_shard_accumulate
#include "model.cuh"

typedef struct {
    Comm *comm;  // NULL or one rank: nothing to communicate
    int rank, world, zero_stage;
    cudaStream_t compute;  // the model's stream
    cudaEvent_t ev_compute, ev_comm;
    // the gradients' reduction (dp_bind_gradients)
    GPT2 *model;
    const ZeroLayout *zl;  // the optimizer's layout over the ranks
    floatX *gshard;        // ZeRO-2: the optimizer's gradient shard
    int last_micro;        // 1 during the step's last micro-step (ZeRO-0/1 reduce then)
    cudaEvent_t ev_free[3];  // ZeRO-2: slot 0, slot 1, wte/wpe/lnf gradients free again
} DataParallel;

static int dp_distributed(const DataParallel *dp) { return dp->comm && dp->comm->world > 1; }
// ZeRO-2 and -3: the gradients reduce-scattered every micro-step into the optimizer's shard
static int dp_zero2(const DataParallel *dp) { return dp->zero_stage >= 2 && dp_distributed(dp); }

static void dp_init(DataParallel *dp, Comm *comm, int rank, int world, int zero_stage, cudaStream_t compute) {
    memset(dp, 0, sizeof *dp);
    dp->comm = comm;
    dp->rank = rank;
    dp->world = world;
    dp->zero_stage = zero_stage;
    dp->compute = compute;
    CUDA_CHECK(cudaEventCreateWithFlags(&dp->ev_compute, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&dp->ev_comm, cudaEventDisableTiming));
}

// The gradients the backward writes and where ZeRO's chunks of them go.
static void dp_bind_gradients(DataParallel *dp, GPT2 *model, const ZeroLayout *zl, floatX *gshard) {
    dp->model = model;
    dp->zl = zl;
    dp->gshard = gshard;
    if (dp_zero2(dp))
        for (int i = 0; i < 3; i++) CUDA_CHECK(cudaEventCreateWithFlags(&dp->ev_free[i], cudaEventDisableTiming));
}

static void dp_free(DataParallel *dp) {
    cudaEventDestroy(dp->ev_compute);
    cudaEventDestroy(dp->ev_comm);
    if (dp_zero2(dp))
        for (int i = 0; i < 3; i++) cudaEventDestroy(dp->ev_free[i]);
}

static void comm_after_compute(DataParallel *dp) {
    CUDA_CHECK(cudaEventRecord(dp->ev_compute, dp->compute));
    CUDA_CHECK(cudaStreamWaitEvent(dp->comm->stream, dp->ev_compute, 0));
}
static void compute_after_comm(DataParallel *dp) {
    CUDA_CHECK(cudaEventRecord(dp->ev_comm, dp->comm->stream));
    CUDA_CHECK(cudaStreamWaitEvent(dp->compute, dp->ev_comm, 0));
}

// Before the compute stream uses what the ranks sent (the summed gradients, before the update)
static void dp_wait_for_comm(DataParallel *dp) {
    if (dp_distributed(dp)) compute_after_comm(dp);
}

// n floats on the device combined over the ranks in stream order (between the compute work
// before and after it)
static void dp_allreduce_f32(DataParallel *dp, float *buf, size_t n, CommOp op) {
    if (!dp_distributed(dp)) return;
    comm_after_compute(dp);
    comm_allreduce_f32(dp->comm, buf, n, op);
    compute_after_comm(dp);
}

// Every rank has reached this point (collective): scratch is a device float to all-reduce.
static void dp_barrier(DataParallel *dp, float *scratch) {
    if (!dp_distributed(dp)) return;
    comm_allreduce_f32(dp->comm, scratch, 1, COMM_SUM);
    CUDA_CHECK(cudaStreamSynchronize(dp->comm->stream));
}

// ZeRO-2: before the backward writes layer l's gradients (l = -1: wte, wpe, lnf), the
// reduction of whatever last used their slot has read it.
static void dp_grads_writable(void *ctx, int l) {
    DataParallel *dp = (DataParallel *)ctx;
    if (dp_zero2(dp)) CUDA_CHECK(cudaStreamWaitEvent(dp->compute, dp->ev_free[l < 0 ? 2 : (l & 1)], 0));
}

// Sums the gradients of layer l (l = -1: wte, wpe, lnf) across the ranks, as soon as the
// backward has written them (see the file's header for each ZeRO stage).
static void dp_grads_final(void *ctx, int l) {
    DataParallel *dp = (DataParallel *)ctx;
    if (!dp_distributed(dp) || (!dp->last_micro && !dp_zero2(dp))) return;
    Comm *c = dp->comm;
    const int rank = dp->rank, layer = l < 0 ? 0 : l;
    comm_after_compute(dp);
    comm_group_start(c);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        const ZeroTensor *t = &dp->zl->t[k];
        if ((l < 0) != (t->layers == 1)) continue;
        floatX *g = grad_at(dp->model, k, layer);
        if (dp->zero_stage == 0) comm_allreduce_sum(c, g, t->slice);
        else comm_reduce_scatter_sum(c, g, g + (size_t)rank * t->chunk, t->chunk);
    }
    comm_group_end(c);
    if (!dp_zero2(dp)) return;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        const ZeroTensor *t = &dp->zl->t[k];
        if ((l < 0) != (t->layers == 1)) continue;
        floatX *g = grad_at(dp->model, k, layer);
        grad_shard_accumulate(dp->gshard + zero_chunk_at(t, layer), g + (size_t)rank * t->chunk,
                              t->chunk, c->stream);
        CUDA_CHECK(cudaMemsetAsync(g, 0, t->slice * sizeof(floatX), c->stream));
    }
    CUDA_CHECK(cudaEventRecord(dp->ev_free[l < 0 ? 2 : (l & 1)], c->stream));
}

// The backward's hooks for this run's gradient reduction
static GradHooks dp_grad_hooks(DataParallel *dp) {
    GradHooks h = {dp_grads_writable, dp_grads_final, dp};
    return h;
}

// ZeRO-1 and -2, after the update: every rank's updated chunks of the parameters (the
// optimizer's layout) to every rank
static void dp_allgather_params(DataParallel *dp) {
    if (!dp_distributed(dp)) return;
    comm_after_compute(dp);
    comm_group_start(dp->comm);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        const ZeroTensor *zt = &dp->zl->t[k];
        for (int l = 0; l < zt->layers; l++) {
            floatX *slice = dp->model->param[k] + (size_t)l * zt->slice;
            comm_allgather(dp->comm, slice + (size_t)dp->rank * zt->chunk, slice, zt->chunk);
        }
    }
    comm_group_end(dp->comm);
    compute_after_comm(dp);
}
