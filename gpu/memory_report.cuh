// gpu/memory_report.cuh: the memory a built trainer holds, as a run reports it: the breakdown
// at start, the peak against the plan at the end, and the buffers --memory-trace lists.
#pragma once
#include "../common/memory_trace.h"
#include "memory_plan.cuh"
#include "trainer.cuh"

static size_t device_used_bytes(void) {
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

// The start-of-run memory breakdown (this rank's), with what ZeRO saves per rank.
static void print_memory(const GPT2 *model, const Optimizer *o, const Fp8Layers *fp8, const DataParallel *dp,
                         size_t in_use) {
    double mib = 1.0 / (1024.0 * 1024.0);
    const size_t np = model->num_params, ns = o->zl.shard_elems;
    const ParamShards *ps = o->ps;  // -z 3: the model holds its slots, the rank its shard
    const size_t param_bytes = (model->param_elems + (ps && !ps->on_host ? ns : 0)) * sizeof(floatX);
    const size_t grad_bytes = model->grad_elems * sizeof(floatX) + (o->gshard ? ns * sizeof(floatX) : 0);
    const size_t moments = 2 * adamw_moment_bytes(o->moments_bf16);
    const size_t opt_bytes = optimizer_state_bytes(ns, o->master != NULL, o->moments_bf16);
    const size_t scratch = model->scratch_bytes + fp8_plan_bytes(&model->config, fp8->mask, fp8->cast, (size_t)model->B * model->T);
    printf("memory: parameters %.0f MiB%s, gradients %.0f MiB, master weights %.0f MiB, AdamW moments %.0f MiB (%s%s), "
           "activations %.0f MiB, scratch %.0f MiB, cuBLAS workspace %.0f MiB; in use after setup %.0f MiB\n",
           param_bytes * mib,
           !ps ? "" : ps->on_host ? " (wte, wpe, lnf and the layers' slots; the model in pinned host memory)"
                                  : " (the rank's shard, wte, wpe, lnf and the layers' slots)",
           grad_bytes * mib, o->master ? ns * 4 * mib : 0.0, ns * moments * mib,
           o->moments_bf16 ? "bf16" : "fp32",
           o->offload == OFFLOAD_STAGED ? "; these and the master weights in pinned host memory, staged"
           : o->offload                 ? "; these and the master weights in mapped pinned host memory"
                                        : "",
           model->act_bytes * mib, scratch * mib, CUBLASLT_WORKSPACE_BYTES * mib, in_use * mib);
    if (dp->world > 1) {
        size_t full_opt = optimizer_state_bytes(np, o->master != NULL, o->moments_bf16), full_grad = np * sizeof(floatX);
        printf(
            "data parallel: %d ranks (%s), ZeRO-%d: per rank, optimizer state %.0f MiB (unsharded %.0f, saves %.0f), "
            "gradients %.0f MiB (unsharded %.0f, saves %.0f), parameters %.0f MiB (unsharded %.0f, saves %.0f)\n",
            dp->world, comm_backend_name(dp->comm->backend), dp->zero_stage, opt_bytes * mib, full_opt * mib,
            (full_opt - opt_bytes) * mib, grad_bytes * mib, full_grad * mib,
            full_grad > grad_bytes ? (full_grad - grad_bytes) * mib : 0.0, param_bytes * mib, full_grad * mib,
            full_grad > param_bytes ? (full_grad - param_bytes) * mib : 0.0);
    }
}

// At the end of a run with --max-device-memory: the device memory at peak against the plan and
// the budget (peak: cudaMemGetInfo's use less the use before the run)
static void print_memory_vs_budget(size_t peak, size_t planned, size_t max_memory) {
    const double mib = 1.0 / (1024.0 * 1024.0);
    if (max_memory)
        printf("memory: measured peak %.0f MiB, planned %.0f MiB, --max-device-memory %.0f MiB%s\n", peak * mib,
               planned * mib, max_memory * mib, peak > max_memory ? ": OVER the budget (the plan misses something)" : "");
}

// --memory-trace: every buffer the trainer holds on the device, by category (each layer's
// slices of the kept activations apart); the rest of the device's use (the CUDA runtime's,
// cuBLAS's, NCCL's, allocation rounding) is the samples' "other"
static void memory_trace_list(MemoryTrace *m, const GpuTrainer *t) {
    if (!m->path) return;
    const GPT2 *g = &t->model;
    const Optimizer *o = &t->opt;
    const size_t X = sizeof(floatX), ns = o->zl.shard_elems, mb = adamw_moment_bytes(o->moments_bf16);
    if (!o->ps) memory_trace_add(m, "parameters", MEM_PARAMS, -1, g->num_params * X);
    else {
        memory_trace_add(m, "parameters (wte, wpe, lnf and the layers' slots)", MEM_PARAMS, -1, g->param_elems * X);
        if (!o->ps->on_host) memory_trace_add(m, "parameter shard (ZeRO-3)", MEM_PARAMS, -1, ns * X);
    }
    memory_trace_add(m, g->grad_slots ? "gradients (wte, wpe, lnf and two layers' slots)" : "gradients", MEM_GRADS, -1,
                     g->grad_elems * X);
    if (o->gshard) memory_trace_add(m, "gradient shard (ZeRO-2)", MEM_GRADS, -1, ns * X);
    if (!o->offload) {  // offloaded: in host memory
        if (o->master) memory_trace_add(m, "master weights", MEM_OPTIMIZER, -1, ns * sizeof(float));
        memory_trace_add(m, "AdamW m", MEM_OPTIMIZER, -1, ns * mb);
        memory_trace_add(m, "AdamW v", MEM_OPTIMIZER, -1, ns * mb);
    }
    if (o->offload == OFFLOAD_STAGED)
        memory_trace_add(m, "offload staging buffers", MEM_STAGING, -1, offload_stage_bytes(o->master != NULL, mb));
    const GPT2Shape shape = gpu_model_shape(&t->s);
    ActShape a = gpt2_act_shape(&g->config, &shape, g->num_sms);
    size_t bytes[ACT_COUNT], copies[ACT_COUNT];
    activation_sizes(&a, bytes, copies);
    for (int i = 0; i < ACT_COUNT; i++)
        memory_trace_add_layers(m, ACT_BUFFERS[i].name, ACT_BUFFERS[i].kind == ACT_KEPT ? MEM_ACTS_KEPT : MEM_SCRATCH,
                                bytes[i], copies[i], g->config.num_layers);
    memory_trace_add(m, "FP8 weight codes and scales", MEM_FP8, -1,
                     fp8_plan_bytes(&g->config, t->fp8.mask, t->fp8.cast, (size_t)g->B * g->T));
    memory_trace_add(m, "micro-batch", MEM_STAGING, -1, batch_ints(g->B, g->T) * sizeof(int));
    memory_trace_add(m, "step scalars", MEM_SCRATCH, -1, INFO_SLOTS * sizeof(float) + sizeof(AdamWStep));
    memory_trace_add(m, "cuBLAS workspace", MEM_SCRATCH, -1, CUBLASLT_WORKSPACE_BYTES);
}

// the device memory in use beyond what was in use before the run (ctx: that, in bytes)
static size_t device_in_use_since(void *ctx) {
    const size_t now = device_used_bytes(), before = *(const size_t *)ctx;
    return now > before ? now - before : 0;
}
