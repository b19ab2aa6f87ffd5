// gpu/memory_plan.cuh: the device memory a run will take, planned from its settings without a
// GPU (--max-device-memory, gpu/host/memory_budget.h, holds the plan against a budget and
// names the settings that fit), and checked against the GPU's free memory once it is open;
// and the host memory it will take, held against --max-host-memory or what the host has.
// It plans from the sizes the model, the optimizer and the FP8 layers allocate by, without
// the trainer; what a built trainer reports is gpu/memory_report.cuh's.
#pragma once
#include "host/memory_budget.h"
#include "../kernels/offload.cuh"
#include "settings.cuh"
#include "activations.cuh"
#include "model.cuh"
#include "optimizer.cuh"
#include "fp8_layers.cuh"
#include "batch.cuh"

// Beyond its buffers a run holds cuBLAS's and the kernels' own memory and allocation
// rounding: DEVICE_RESERVE_BYTES, measured on an H200 (docs/memory.md)
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

// What the plan is of: a model and the run's settings (the planner varies the MemorySetting)
typedef struct {
    const GPT2Config *cfg;
    const GpuSettings *s;
} PlanInput;

// The optimizer's layout under setting m (sharded over its ranks with ZeRO); non-zero: m is
// impossible (ZeRO over ranks that do not divide a slice)
static int plan_layout(const GPT2Config *c, MemorySetting m, ZeroLayout *zl) {
    return optimizer_layout(zl, c, m.ranks > 1 && m.zero_stage > 0 ? m.ranks : 1) != NULL;
}

// The plan of one rank's device for setting m. SIZE_MAX in params: the setting is impossible.
static DevicePlan gpt2_device_plan(const PlanInput *in, MemorySetting m) {
    DevicePlan d;
    memset(&d, 0, sizeof d);
    const GPT2Config *c = in->cfg;
    const GpuSettings *s = in->s;
    const int zero2 = m.ranks > 1 && m.zero_stage >= 2;
    const int zero3 = m.zero_stage == 3, shard_on_host = params_on_host(m.zero_stage, m.ranks, m.offload);
    ZeroLayout zl;
    if (plan_layout(c, m, &zl)) {
        d.params = SIZE_MAX;
        return d;
    }
    const size_t ns = zl.shard_elems, n = zl.n;
    size_t slot_offsets[NUM_PARAM_TENSORS], slot_elems;
    // -z 3: wte, wpe, lnf and the layers' slots, and the rank's shard (one rank with --offload 2: on the host)
    const int param_slots = gpt2_param_slots(m.zero_stage, s->prefetch_layers);
    d.params = zero3 ? (slotted_elems(c, param_slots, slot_offsets, &slot_elems) + (shard_on_host ? 0 : ns)) *
                           sizeof(floatX)
                     : n * sizeof(floatX);
    d.grads = (slotted_elems(c, zero2 ? 2 : 0, slot_offsets, &slot_elems) + (zero2 ? ns : 0)) * sizeof(floatX);
    const int has_master = optimizer_has_master(s);
    const size_t state = optimizer_state_bytes(ns, has_master, m.moments_bf16);
    d.optimizer = m.offload ? 0 : state;  // offload: in host memory
    ActShape a = {c, m.B, m.T, m.recompute, s->flash, s->deterministic, 0};
    size_t bytes[ACT_COUNT];
    activation_sizes(&a, bytes);
    for (int i = 0; i < ACT_COUNT; i++) (ACT_BUFFERS[i].kind == ACT_SCRATCH ? d.scratch : d.acts) += bytes[i];
    d.scratch += fp8_plan_bytes(c, s->fp8_mask, s->fp8_cast > 0, (size_t)m.B * m.T);
    d.other = batch_ints(m.B, m.T) * sizeof(int) + INFO_SLOTS * sizeof(float) + CUBLASLT_WORKSPACE_BYTES +
              DEVICE_RESERVE_BYTES + (m.ranks > 1 ? COMM_RESERVE_BYTES : 0) +
              (m.offload ? state / OFFLOAD_MAP_RESERVE_DIVISOR : 0) +
              (shard_on_host ? ns * sizeof(floatX) / OFFLOAD_MAP_RESERVE_DIVISOR : 0) +
              (m.offload == OFFLOAD_STAGED ? offload_stage_bytes(has_master, adamw_moment_bytes(m.moments_bf16)) : 0);
    return d;
}

static size_t device_plan_bytes(const void *ctx, MemorySetting m) {
    DevicePlan d = gpt2_device_plan((const PlanInput *)ctx, m);
    if (d.params == SIZE_MAX) return SIZE_MAX;
    return d.params + d.grads + d.optimizer + d.acts + d.scratch + d.other;
}

// The host memory of one process: what --offload pins (the optimizer state; with one rank's
// -z 3 --offload 2 the bf16 model too), the largest pageable buffers it holds at once (the
// model in fp32 while it is built or a checkpoint read, this rank's shard of it, and a
// checkpoint's two moments where they are not written in place) and the program's own.
// Beyond its buffers a process holds its code, the CUDA runtime's host memory and the data
// loader's: HOST_RESERVE_BYTES. The memory study's runs (docs/memory.md: no checkpoint
// written, so the model in fp32 and the pinned state were their largest buffers) peaked about
// 270 MiB above those at 124M and 1.5B on one H100's host; the end of a run prints its peak
// beside the plan.
#define HOST_RESERVE_BYTES ((size_t)512 << 20)

typedef struct {
    size_t pinned_state, pinned_params, buffers, reserve;
} HostPlan;

static HostPlan gpt2_host_plan(const PlanInput *in, MemorySetting m) {
    HostPlan h;
    memset(&h, 0, sizeof h);
    ZeroLayout zl;
    if (plan_layout(in->cfg, m, &zl)) {
        h.buffers = SIZE_MAX;
        return h;
    }
    const size_t ns = zl.shard_elems, n = zl.n;
    h.pinned_state = m.offload ? optimizer_state_bytes(ns, optimizer_has_master(in->s), m.moments_bf16) : 0;
    h.pinned_params = params_on_host(m.zero_stage, m.ranks, m.offload) ? ns * sizeof(floatX) : 0;
    const int moments_in_place = m.offload && !m.moments_bf16;  // (kernels/offload.cuh: offload_host_fp32)
    h.buffers = n * sizeof(float) + (moments_in_place ? 0 : 2 * ns * sizeof(float)) +
                ((m.ranks > 1 && m.zero_stage > 0) || m.zero_stage == 3 ? ns * sizeof(float) : 0);
    h.reserve = HOST_RESERVE_BYTES;
    return h;
}

static size_t host_plan_bytes(const void *ctx, MemorySetting m) {
    HostPlan h = gpt2_host_plan((const PlanInput *)ctx, m);
    if (h.buffers == SIZE_MAX) return SIZE_MAX;
    return h.pinned_state + h.pinned_params + h.buffers + h.reserve;
}

// "optimizer state 17.41 GiB pinned, buffers 5.80 GiB, program 0.50 GiB" (the pinned parts where there are any)
static const char *host_plan_text(char *buf, size_t cap, const HostPlan *h) {
    char a[32], b[32];
    int k = 0;
    buf[0] = 0;
    if (h->pinned_state)
        k += snprintf(buf + k, cap - k, "optimizer state %s pinned, ", gib_text(a, sizeof a, h->pinned_state));
    if (h->pinned_params)
        k += snprintf(buf + k, cap - k, "parameters %s pinned, ", gib_text(a, sizeof a, h->pinned_params));
    snprintf(buf + k, cap - k, "buffers %s, program %s", gib_text(a, sizeof a, h->buffers),
             gib_text(b, sizeof b, h->reserve));
    return buf;
}

// A model of a setting's speed, tokens per second on one H100, by which --max-device-memory
// lists the settings that fit fastest first. Calibrated on docs/memory.md's measurements
// (GPT-2 1.5B, 350M and 124M at T=1024 on one H100, 2026-12-05 to 07): the model's FLOPs (6 a
// parameter and 6 L T C of attention a token) at SPEED_FLOPS, slower by SPEED_TOKENS / (B T)
// at small micro-batches (-b 16 to -b 4 cost 1.5B 10%) and by each recompute level's factor
// (-r 3: 21%); --offload's state crossing the bus once each way after the backward (0.44 s a
// step at 1.5B with --offload 2, three times that with 1); one rank's -z 3 --offload 2 copying
// the bf16 model in twice a micro-step, overlapped with the micro-step's compute (1.5B: -r 3
// -b 8 predicted 41,400 tokens/s, measured 40,143; -r 1 -b 2 17,800 and 18,408). It knows
// nothing of communication between GPUs: the suggestions order only the lines on the run's
// own GPUs by it. (Its absolute figures are an H100's; the order is what it is for.)
#define SPEED_FLOPS 5.5e14
#define SPEED_TOKENS 645.0
#define SPEED_OFFLOAD_BPS 42e9
#define SPEED_MAPPED_BPS 14e9
#define SPEED_H2D_BPS 55e9
static const double SPEED_RECOMPUTE[MEMORY_MAX_RECOMPUTE + 1] = {1.0, 1.02, 1.035, 1.21};

static double gpt2_speed(const void *ctx, MemorySetting m) {
    const PlanInput *in = (const PlanInput *)ctx;
    const GPT2Config *c = in->cfg;
    ZeroLayout zl;
    const long micro_steps = memory_micro_steps(m);
    if (plan_layout(c, m, &zl) || !micro_steps || m.recompute < 0 || m.recompute > MEMORY_MAX_RECOMPUTE) return 0.0;
    const double n = (double)zl.n, tokens = (double)m.B * m.T;
    const double flops = 6.0 * n + 6.0 * c->num_layers * (double)m.T * c->channels;
    double micro = tokens * flops / SPEED_FLOPS * (1.0 + SPEED_TOKENS / tokens) * SPEED_RECOMPUTE[m.recompute];
    if (params_on_host(m.zero_stage, m.ranks, m.offload)) micro = fmax(micro, 2.0 * n * sizeof(floatX) / SPEED_H2D_BPS);
    double step = micro * micro_steps;
    if (m.offload)
        step += optimizer_state_bytes(zl.shard_elems, optimizer_has_master(in->s), m.moments_bf16) /
                (m.offload == OFFLOAD_MAPPED ? SPEED_MAPPED_BPS : SPEED_OFFLOAD_BPS);
    return (double)m.total_batch / step;
}

// The host memory the ranks on this host may plan for together: --max-host-memory, or what the
// host has available (0: unknown); each rank's share
static size_t host_limit_total(const GpuSettings *s) {
    return s->max_host_bytes ? s->max_host_bytes : host_available_bytes();
}
static size_t host_limit_per_rank(const GpuSettings *s, int local_ranks) {
    return host_limit_total(s) / (local_ranks > 1 ? local_ranks : 1);
}

// What the budget's search asks: the device plan, the host's with its limit, and the speed model
static MemoryPlanner gpt2_planner(const PlanInput *in, int local_ranks) {
    MemoryPlanner p = {device_plan_bytes, host_plan_bytes, in, host_limit_per_rank(in->s, local_ranks), gpt2_speed};
    return p;
}

// "parameters 0.23 GiB, gradients ..." for the budget's messages
static const char *device_plan_text(char *buf, size_t cap, const DevicePlan *d) {
    const double g = 1.0 / (1024.0 * 1024 * 1024);
    snprintf(buf, cap, "parameters %.2f GiB, gradients %.2f, optimizer state %.2f, activations %.2f, scratch %.2f, "
             "buffers and reserve %.2f", d->params * g, d->grads * g, d->optimizer * g, d->acts * g, d->scratch * g,
             d->other * g);
    return buf;
}

// --fp8-weights auto: the weights' FP8 copies kept while they take at most 2% of the run's
// planned device memory, else each weight cast just before its matmul (docs/fp8.md)
static void fp8_weights_resolve(GpuSettings *s, const GPT2Config *c, MemorySetting m) {
    if (s->fp8_cast >= 0) return;
    s->fp8_cast = 1;
    const PlanInput in = {c, s};
    const size_t total = device_plan_bytes(&in, m);
    const size_t N = (size_t)m.B * m.T;
    const size_t copies = fp8_plan_bytes(c, s->fp8_mask, 0, N) - fp8_plan_bytes(c, s->fp8_mask, 1, N);
    s->fp8_cast = total != SIZE_MAX && copies > total / 50;
}

// The settings a run trains with, resolved once from those given (checked by
// gpu_settings_check) for its model and ranks: what the model's shape decides
// (gpu_settings_for_model), -d -1's tokens a step, and the FP8 weights' choice for the run's
// planned memory. name: the model, for messages.
static GpuSettings gpu_settings_resolve(const GpuSettings *given, const GPT2Config *cfg, const char *name, int world) {
    GpuSettings s = *given;
    gpu_settings_for_model(&s, cfg, name);
    s.total_batch_implied = s.o.total_batch == -1;
    train_options_resolve_total_batch(&s.o, world);
    fp8_weights_resolve(&s, cfg, gpu_memory_setting(&s, world));
    return s;
}

// --max-device-memory, before any GPU work: the plan against the budget (stops naming the
// settings that fit when it is over)
static void memory_budget_gate(const PlanInput *in, MemorySetting m, int local_ranks, int print) {
    if (!in->s->max_memory_bytes) return;
    DevicePlan d = gpt2_device_plan(in, m);
    char text[256];
    const MemoryPlanner p = gpt2_planner(in, local_ranks);
    memory_budget_check(in->s->max_memory_bytes, m, &p, device_plan_text(text, sizeof text, &d), print);
}

// Before any GPU work: the host memory the ranks on this host will take against
// --max-host-memory or what the host has available, so that a run the host cannot hold stops
// now rather than when its state is pinned or a checkpoint is written hours later. Prints
// the plan (print) where the run pins memory or gave a limit.
static void host_memory_gate(const PlanInput *in, MemorySetting m, int local_ranks, int print) {
    const GpuSettings *s = in->s;
    const size_t total = host_limit_total(s), limit = total / (local_ranks > 1 ? local_ranks : 1);
    const size_t need = host_plan_bytes(in, m);
    const HostPlan h = gpt2_host_plan(in, m);
    char text[256], a[32], b[32], ranks[64] = "", what[128];
    host_plan_text(text, sizeof text, &h);
    if (local_ranks > 1) snprintf(ranks, sizeof ranks, " per rank (%d ranks on this host)", local_ranks);
    if (s->max_host_bytes)
        snprintf(what, sizeof what, "--max-host-memory %s", gib_text(b, sizeof b, s->max_host_bytes));
    else
        snprintf(what, sizeof what, "this host's %s available", gib_text(b, sizeof b, total));
    if (!limit || need <= limit) {
        if (print && (m.offload || s->max_host_bytes))
            printf("host memory plan: %s%s of %s (%s)\n", gib_text(a, sizeof a, need), ranks,
                   limit ? what : "an unknown amount", text);
        return;
    }
    // what would need less: bf16 moments, then the state on the device (if the device has room)
    char alt[512] = "";
    size_t n = 0;
    MemorySetting lean = m;
    lean.moments_bf16 = 1;
    if (!m.moments_bf16 && host_plan_bytes(in, lean) <= limit)
        n += snprintf(alt + n, sizeof alt - n, "\n  --optimizer-state bf16: %s",
                      gib_text(b, sizeof b, host_plan_bytes(in, lean)));
    MemorySetting dev = m;
    dev.offload = 0;
    dev.zero_stage = m.ranks > 1 ? m.zero_stage : 0;
    if (m.offload && host_plan_bytes(in, dev) <= limit)
        n += snprintf(alt + n, sizeof alt - n, "\n  --offload 0%s (the state on the device, if it has room: "
                      "--max-device-memory checks that): %s", m.ranks == 1 && m.zero_stage == 3 ? " -z 0" : "",
                      gib_text(b, sizeof b, host_plan_bytes(in, dev)));
    fatal("%s: this run needs %s of host memory%s (%s); %s%s%s", what, gib_text(a, sizeof a, need), ranks, text,
          n ? "settings that need less:" : "free host memory, or use a host with more (or fewer ranks on it)", alt,
          s->max_host_bytes ? "" : "\n(--max-host-memory SIZE plans for SIZE instead: where swap makes up the rest)");
}

// Before any large allocation, once the GPU is open: a budget against the card's size, and
// the plan against the GPU's free memory (the CUDA context and other processes already out
// of it), so that a run too large for this GPU stops naming settings that fit instead of
// failing in the middle of its allocations
static void device_memory_check(const PlanInput *in, MemorySetting m, int local_ranks, int dev,
                                const cudaDeviceProp *prop) {
    char card[300], why[512], what[340], text[256], f[32];
    snprintf(card, sizeof card, "GPU %d (%s)", dev, prop->name);
    if (memory_budget_vs_card(in->s->max_memory_bytes, prop->totalGlobalMem, card, why, sizeof why))
        fatal("%s", why);
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    snprintf(what, sizeof what, "%s has %s free", card, gib_text(f, sizeof f, free_b));
    DevicePlan d = gpt2_device_plan(in, m);
    const MemoryPlanner p = gpt2_planner(in, local_ranks);
    memory_limit_check(what, free_b, m, &p, device_plan_text(text, sizeof text, &d), 0);
}
