// train_gpt2.cu: the GPU trainer of GPT-2, the training program: settings, the loop of
// steps and the work between them. A step is what the algorithm says: for each micro-step a
// batch to the device, forward, loss, backward (the gradients accumulate, and are summed
// across the ranks as the backward goes); then the update: norm, clip, AdamW; then the log.
// Flags and files are those of the CPU trainer (train_gpt2.c), llm.c's included.
//
// Where things are (docs/architecture.md follows one step through them):
//   gpu/settings.cuh       GpuSettings: every option, one table, checked before any GPU work;
//                          gpu_settings_resolve (memory_plan.cuh) resolves them once for the model
//   gpu/trainer.cuh        GpuTrainer: one rank's model and what trains it; micro-step, update,
//                          evaluation and sampling forwards
//   gpu/model.cuh          GPT2: parameters, gradients, activations, stream; forward, loss, backward
//   gpu/activations.cuh    the activation buffers, one table; recomputation's shared slots
//   gpu/linear.cuh         the linear layer (FP8 or the build's precision) and the table of the
//                          model's linear layers
//   gpu/fp8_layers.cuh     --fp8: which linear layers run in FP8, their weights' FP8 copies
//   gpu/fp8_auto.cuh       --fp8-layers auto: each kind of linear layer timed both ways at start-up
//   gpu/optimizer.cuh      Optimizer: ZeRO layout, master weights and moments (device, offload,
//                          bf16), norm, clip, skip, AdamW, the checkpoint's arrays
//   gpu/data_parallel.cuh  DataParallel: the gradients summed across ranks layer by layer, ZeRO-2's
//                          slots, ZeRO-1/2's all-gather, the loss's sum, a barrier
//   gpu/zero3.cuh          ParamShards: -z 3's shard of the parameters, each layer gathered (or copied
//                          in from host memory) just ahead of use
//   gpu/batch.cuh          BatchStager, TrainBatches: micro-batches from the loader to the device
//   gpu/checkpoint.cuh     model and training-state files of a run directory
//   gpu/memory_plan.cuh    the device-memory plan (--max-device-memory), without a GPU or a trainer
//   gpu/memory_report.cuh  the memory lines of a run and --memory-trace's buffers
//   gpu/phases.cuh         NVTX ranges and --profile's time per phase of the step
//   gpu/trace_gpu.cuh      --trace's GPU rows: kernels, copies and phases from CUPTI
//   gpu/generate.cuh       sampling and --generate with a KV cache
//   gpu/device_check.cuh   the GPU refused below compute capability 8.0 or without code for it
//   gpu/host/*.h           host-only C: the step meter and energy, the memory budget, fp16's loss scale
//   kernels/<layer>.cuh    one layer's kernels and launchers a file (and comm, offload, graphs,
//                          step_info.cuh: the slots of the step's scalars on the device)
//   common/*.h             what both trainers share: options, data loader, formats, logger, tokenizer
#include "common/util.h"
#include "common/args.h"
#include "common/checkpoint.h"
#include "common/dataloader.h"
#include "common/distributed.h"
#include "common/logger.h"
#include "gpu/host/memory_budget.h"
#include "common/rng.h"
#include "common/run_summary.h"
#include "common/schedule.h"
#include "gpu/host/step_meter.h"
#include "common/train_common.h"
#include "gpu/settings.cuh"
#include "gpu/trainer.cuh"
#include "gpu/generate.cuh"
#include "gpu/checkpoint.cuh"
#include "gpu/device_check.cuh"
#include "gpu/memory_plan.cuh"
#include "gpu/memory_report.cuh"
#include "gpu/trace_gpu.cuh"

// The MFU denominator: the dense peak of an H100/H200 SXM (datasheet) for the build's
// matmuls: bf16 and fp16 tensor cores 989 TFLOP/s; the fp32 build's true-fp32 products (no
// TF32, kernels/matmul.cuh) 67 TFLOP/s, its TF32 ones (-f 1) 494.
static double gpu_peak_flops(int tf32) {
    if (PRECISION != PRECISION_FP32) return 989e12;
    return tf32 ? 494e12 : 67e12;
}

// ----------------------------------------------------------------------------
// The work between steps (common/between_steps.h's after_step), on the GpuTrainer

static void eval_batch(void *t, const int *inputs, const int *targets, float weight) {
    trainer_eval_batch((GpuTrainer *)t, inputs, targets, weight);
}
static float eval_result(void *t) { return trainer_eval_result((GpuTrainer *)t); }

static float between_evaluate(void *tr) {
    Trainer *r = (Trainer *)tr;
    EvalFns f = {eval_batch, eval_result};
    return evaluate_split(&r->data->val, r->o->val_batches, r->val_inputs, r->val_targets, f, r->model);
}

static void position_losses(void *t, const int *inputs, const int *targets, float *losses) {
    trainer_position_losses((GpuTrainer *)t, inputs, targets, losses);
}

// HellaSwag: each rank scores its share of the examples
static HellaSwagScore between_hellaswag(void *tr) {
    Trainer *r = (Trainer *)tr;
    GpuTrainer *t = (GpuTrainer *)r->model;
    HellaSwagScore s = hellaswag_evaluate(&r->data->hellaswag, t->model.B, t->model.T, t->dp.rank, t->dp.world,
                                          r->val_inputs, r->val_targets, position_losses, t, NULL);
    s.correct = trainer_sum_over_ranks(t, s.correct);
    s.truncated = (int)trainer_sum_over_ranks(t, s.truncated);
    return s;
}

static void next_logits(void *t, const int *ids, int n, float *logits) {
    trainer_next_logits((GpuTrainer *)t, ids, n, logits);
}

// A sample through the decoder and its KV cache (gpu/generate.cuh; --kv-cache 0: the training
// forward over the whole text for each token). The cache lives only while the sample is
// drawn: L x T x 2C values, 36 MiB at GPT-2 124M with T=1024.
static void between_sample(void *tr) {
    Trainer *r = (Trainer *)tr;
    GpuTrainer *t = (GpuTrainer *)r->model;
    const int T = t->model.T, V = t->model.config.vocab_size;
    if (!r->o->kv_cache || t->shards.shard) {  // (-z 3 holds no whole model for the cache's forward)
        sample_text(&r->data->tok, r->o, T, V, r->rng, r->lg, next_logits, t);
        return;
    }
    const DecoderModes dm = {t->s.decode_graph, t->s.decode_graph};
    sample_text_gpu(&r->data->tok, r->o, T, r->rng, r->lg, &t->model.config, t->model.param, &t->model.modes, dm,
                    t->model.stream);
}

static void between_save(void *tr, int step1) {
    Trainer *r = (Trainer *)tr;
    GpuTrainer *t = (GpuTrainer *)r->model;
    trainer_save_checkpoint(t, &r->data->train, r->rd, step1, *r->rng, r->run);
    if (t->dp.rank == 0) printf("checkpoint written: %s/model_%08d.bin\n", r->o->out_dir, step1);
}

// ----------------------------------------------------------------------------
// Before the first step

static long pg_sum_cb(const void *ctx, long v) { return pg_sum_long((const ProcessGroup *)ctx, v); }

// -y 1: the newest checkpoint intact on every rank (-1: none). The ranks agree through MPI;
// ranks from the environment have no host collective, and each checks its own files.
static int resume_step_pick(const TrainOptions *o, const RunDir *rd, const ProcessGroup *pg, int shard_rank) {
    if (!o->resume) return -1;
    return resume_pick_step(rd, shard_rank, pg->rank != 0, pg->world > 1 && pg->using_mpi ? pg_sum_cb : NULL, pg);
}

// -nk's agreement between the ranks, on the device (every backend has it)
static long trainer_sum_cb(const void *ctx, long v) { return trainer_sum_over_ranks((GpuTrainer *)ctx, v); }

// Rank r takes GPU local_rank (NCCL: one each; the MPI backend: shared); returns its index.
static int gpu_open(const ProcessGroup *pg, int backend, cudaDeviceProp *prop) {
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count < 1) fatal("no CUDA device found");
    // (one visible GPU: the scheduler may give each rank its own; NCCL refuses true sharing)
    if (pg->world > 1 && backend == COMM_BACKEND_NCCL && dev_count > 1 && pg->local_rank >= dev_count)
        fatal("rank %d is local rank %d on a node with %d GPU(s): NCCL needs one GPU per rank; launch at most %d "
              "ranks per node (or --comm mpi to let ranks share GPUs, for tests)", pg->rank, pg->local_rank, dev_count,
              dev_count);
    int dev = pg->local_rank % dev_count;
    CUDA_CHECK(cudaSetDevice(dev));
    CUDA_CHECK(cudaGetDeviceProperties(prop, dev));
    // below 8.0, or a GPU the build has no code for (the Makefile's GPU_ARCH): refused here
    device_check(dev, prop, "train_gpt2cu");
    return dev;
}

// The PCI bus id of the current GPU, whose board the energy counter reads.
static const char *device_pci_bus_id(void) {
    static char bus[32];
    int cur = 0;
    CUDA_CHECK(cudaGetDevice(&cur));
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, cur));
    return bus;
}

// What the run is: the device, the model, the memory, the training settings.
static void print_run_start(const GpuTrainer *t, const cudaDeviceProp *prop, const TrainData *data, size_t in_use) {
    const GpuSettings *s = &t->s;
    const TrainOptions *o = &s->o;
    const GPT2Config *cfg = &t->model.config;
    const double mib = 1.0 / (1024.0 * 1024.0);
    printf("device: %s, %d SMs, %.0f MiB; precision %s\n", prop->name, prop->multiProcessorCount,
           prop->totalGlobalMem * mib, PRECISION_NAME);
    print_model_banner(cfg);
    print_memory(&t->model, &t->opt, &t->fp8, &t->dp, in_use);
    const int atomic_dq = s->flash && flash_attention_atomic_dq(cfg->channels / cfg->num_heads, s->deterministic);
    printf("training: B=%d T=%d x %d rank(s), %d micro-steps per step (%d tokens), %d steps, lr %g (%s), recompute %d, "
           "gelu %s, %s attention%s%s\n", o->B, o->T, t->dp.world, data->accum, o->total_batch, data->max_steps, o->lr,
           o->sched_name, s->recompute, t->model.modes.fuse_gelu ? "fused" : "separate", s->flash ? "flash" : "plain",
           atomic_dq ? " (atomic-dq backward: not bitwise reproducible)" : "",
           PRECISION == PRECISION_FP16 ? ", dynamic loss scaling" : "");
    if (!s->deterministic)
        printf("matmuls: %d shapes timed over cuBLASLt's candidates, %d of them faster than its first choice\n",
               g_tuned_shapes, g_tuned_changed);
    char kinds[64];
    if (t->fp8.on)
        printf("fp8: %s in FP8%s (E4M3 weights and inputs, E5M2 gradients, %s scaling), weights %s, %.0f MiB\n",
               fp8_kinds_text(t->fp8.mask, kinds, sizeof kinds), t->fp8.auto_pick ? " (auto)" : "",
               s->fp8_delayed ? "delayed" : "current", t->fp8.cast ? "cast before each matmul" : "kept as FP8 copies",
               fp8_plan_bytes(cfg, t->fp8.mask, t->fp8.cast, (size_t)o->B * o->T) * mib);
}

// ----------------------------------------------------------------------------
// The training loop's pieces

// One optimizer step: each micro-step's batch to the device, forward, loss and backward (the
// gradients accumulate, and the backward sums them across the ranks), the step's loss summed
// across the ranks, then the update. prefetch_last: the batch after the step's last may be
// read ahead (not across a checkpoint, which records the loader's position as the next
// batch to train).
static void train_step(GpuTrainer *t, TrainBatches *batches, int accum, const AdamWConfig *h, int step_t,
                       int prefetch_last, int force_overflow) {
    const int B = t->model.B, T = t->model.T;
    // the mean over positions, micro-steps and ranks (the ranks' losses and gradients are summed)
    const float loss_scale = 1.0f / ((float)B * T * accum * t->dp.world);
    cudaStream_t s = t->model.stream;
    trainer_step_begin(t, force_overflow);
    for (int micro = 0; micro < accum; micro++) {
        phase_begin(&t->phases, PHASE_BATCH, s);
        const DeviceBatch batch = train_batches_upload(batches, s);
        phase_end(&t->phases, PHASE_BATCH, s);
        trainer_micro_step(t, &batch, micro == accum - 1, loss_scale);
        if (micro + 1 < accum || prefetch_last) train_batches_prefetch(batches);  // read while the GPU works
    }
    dp_allreduce_f32(&t->dp, t->info + INFO_LOSS, 1, COMM_SUM);
    trainer_update(t, h, step_t);  // skipped on the device if the loss or the norm is not finite or an outlier
}

// The step's line and metrics record, then its bookkeeping: the skipped updates (a run that
// skips too many in a row stops) and the fp16 loss scale.
static void report_step(GpuTrainer *t, Logger *lg, TrainState *run, const TrainOptions *o, StepReport *r) {
    log_step(lg, r);
    updates_record(run, r->step1, r->loss, r->norm, r->fate, o->max_skipped);
    if (PRECISION == PRECISION_FP16 && loss_scaler_update(&t->scaler, r->loss, r->norm) < 0)  // every rank: one norm
        logger_printf(lg, "loss scale halved to %g\n", t->scaler.scale);
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

// After the last step: the means of the timed steps (before any work after them, whose
// energy is not theirs) and the data stall, into sum as well
static void report_steps(StepMeter *meter, const GpuTrainer *t, const TrainData *data, int start_step,
                         double flops_per_step, int rank0, RunSummary *sum) {
    const GpuSettings *s = &t->s;
    const int steps = data->max_steps - start_step;
    run_summary_init(sum);
    step_meter_report(meter, data->max_steps, s->o.total_batch, flops_per_step, gpu_peak_flops(s->tf32) * t->dp.world,
                      rank0, t->dp.world > 1 ? ", rank 0's GPU" : "", sum);
    if (rank0) report_data_stall(data, &s->o, steps);
    sum->data_stall_ms = data_stall_ms(data, steps);
}

// The end of the run: the profile, the memory at peak against the plan, the CUDA graphs'
// replays, and the run's summary record in metrics.jsonl.
static void report_end(const GpuTrainer *t, Logger *lg, const TrainState *run, size_t peak_used, RunSummary *sum) {
    const GpuSettings *s = &t->s;
    const double mib = 1.0 / (1024.0 * 1024.0);
    phase_timer_print(&t->phases);
    printf("device memory used at peak (cudaMemGetInfo: the GPU's use less its use before this run%s): %.0f MiB\n",
           t->dp.world > 1 ? "; rank 0's GPU" : "", peak_used * mib);
    const PlanInput plan = {&t->model.config, s};
    printf("host memory at peak (VmHWM, rank 0's process): %.0f MiB, planned %.0f MiB\n", host_peak_bytes() * mib,
           host_plan_bytes(&plan, gpu_memory_setting(s, t->dp.world)) * mib);
    trainer_print_graphs(t);
    print_memory_vs_budget(peak_used, device_plan_bytes(&plan, gpu_memory_setting(s, t->dp.world)),
                           s->max_memory_bytes);
    sum->device_peak_mib = peak_used * mib;
    sum->host_peak_mib = run_host_peak_mib();
    sum->skipped_updates = run->skipped_total;
    log_run_summary(lg, sum);
}
// ----------------------------------------------------------------------------
// --generate: no training. The model of -e continues --prompt for -g tokens on one GPU,
// within its whole context (its max_seq_len, not -t): through the KV cache its parameters
// are all it holds; --kv-cache 0 builds it as for training at B=1 and runs the training
// forward over the whole text for each token.

static int generate_main(const GpuSettings *given, ProcessGroup *pg) {
    const TrainOptions *o = &given->o;
    if (pg->world > 1) fatal("--generate runs on one GPU: start it without mpirun or with -np 1 (%d ranks)", pg->world);
    GPT2Config cfg;
    Tokenizer tok;
    float *host_params = generate_open(o, &cfg, &tok);
    const int maxT = cfg.max_seq_len;
    cudaDeviceProp prop;
    gpu_open(pg, COMM_BACKEND_NONE, &prop);
    printf("GPU: %s (" PRECISION_NAME " build)\n", prop.name);
    if (o->kv_cache) {
        size_t sizes[NUM_PARAM_TENSORS], offsets[NUM_PARAM_TENSORS];
        const size_t n = gpt2_param_layout(&cfg, sizes, offsets);
        floatX *params, *param[NUM_PARAM_TENSORS];
        CUDA_CHECK(cudaMalloc(&params, n * sizeof(floatX)));
        upload_params(params, host_params, n);
        for (int k = 0; k < NUM_PARAM_TENSORS; k++) param[k] = params + offsets[k];
        cudaStream_t stream;
        CUDA_CHECK(cudaStreamCreate(&stream));
        matmul_init(stream);
        MatmulModes modes = MATMUL_MODES_DEFAULT;  // (-ge is not read here: GELU fused where cuBLASLt offers it)
        const DecoderModes dm = {given->decode_graph, given->decode_graph};
        generate_text_gpu(&tok, o, &cfg, param, &modes, dm, stream);
        matmul_free();
        cudaStreamDestroy(stream);
        cudaFree(params);
    } else {
        const GpuSettings s = gpu_settings_for_generate(given, &cfg, o->model_arg);
        Comm comm;
        comm_init(&comm, pg, COMM_BACKEND_NONE);
        GpuTrainer t;
        trainer_build(&t, &cfg, host_params, &s, &comm, 0, 1);
        generate_text(&tok, o, maxT, cfg.vocab_size, next_logits, &t);
        trainer_free(&t);
    }
    free(host_params);
    tokenizer_free(&tok);
    pg_finalize(pg);
    return 0;
}

int main(int argc, char **argv) {
    ProcessGroup pg;
    pg_init(&pg, &argc, &argv);
    const int rank0 = pg.rank == 0;
    GpuSettings given;  // as the command line gives them; resolved for the model below
    gpu_settings_defaults(&given);
    ARG_TABLE(options, GPU_OPTIONS_CAPACITY);
    gpu_settings_add_options(&options, &given, GPU_OPTIONS_ALL);
    args_parse_table(argc, argv, &options,
                     "usage: train_gpt2cu [options]\n"
                     "       mpirun -np N train_gpt2cu [options]     (N ranks, one GPU each)\n\n"
                     "Trains GPT-2 on NVIDIA GPUs (" PRECISION_NAME " build). Several ranks come from mpirun or from "
                     "the\nenvironment (RANK, WORLD_SIZE, LOCAL_RANK, with GPT2_NCCL_ID_FILE naming a file all ranks "
                     "see).");

    // everything is checked before any GPU work
    train_options_validate(&given.o);
    gpu_settings_check(&given, &pg);
    if (given.o.generate) return generate_main(&given, &pg);
    GPT2Config cfg;
    float *host_params = gpt2_params_from_model_arg(given.o.model_arg, given.o.T, (uint64_t)given.o.seed, &cfg);
    char model_name[4200];
    snprintf(model_name, sizeof model_name, "-e %s", given.o.model_arg);
    const GpuSettings s = gpu_settings_resolve(&given, &cfg, model_name, pg.world);
    const TrainOptions *o = &s.o;
    ZeroLayout zl;
    const char *bad = optimizer_layout(&zl, &cfg, optimizer_shard_world(&s, pg.world));
    if (bad) fatal("-z %d with %d ranks: %s; use a number of ranks that divides the channels (%d), or -z 0",
                   s.zero_stage, pg.world, bad, cfg.channels);
    const int shard_rank = zl.world > 1 ? pg.rank : 0;
    // -o: rank 0 locks it for the run; nothing there is removed or written before every check has passed on
    // every rank. This process writes rank 0's checkpoint files, a ZeRO rank's shard, or none.
    RunDir rd;
    run_dir_open(&rd, o->out_dir, shard_rank == 0 && !rank0 ? -1 : shard_rank, rank0);
    if (rank0) run_dir_claim(&rd, o->resume, o->overwrite, o->model_arg);
    const PlanInput plan = {&cfg, &s};
    const MemorySetting setting = gpu_memory_setting(&s, pg.world);
    memory_budget_gate(&plan, setting, pg.local_world, rank0);
    host_memory_gate(&plan, setting, pg.local_world, rank0);
    TrainData data;
    train_data_open(&data, o, cfg.vocab_size, pg.rank, pg.world);
    const int resume_step = resume_step_pick(o, &rd, &pg, shard_rank);

    // the GPU, the ranks' communicator, the trainer
    cudaDeviceProp prop;
    const int dev = gpu_open(&pg, s.backend, &prop);
    const size_t used0 = device_used_bytes();
    device_memory_check(&plan, setting, pg.local_world, dev, &prop);
    Comm comm;
    comm_init(&comm, &pg, pg.world > 1 ? s.backend : COMM_BACKEND_NONE);
    GpuTrainer t;
    trainer_build(&t, &cfg, host_params, &s, &comm, pg.rank, pg.world);
    free(host_params);
    if (!s.deterministic) trainer_tune_matmuls(&t);
    if (rank0) print_run_start(&t, &prop, &data, device_used_bytes() - used0);

    uint64_t rng = rng_seed((uint64_t)o->seed ^ 0x5eedULL);
    TrainState run;  // what the checkpoints carry besides the weights and moments
    memset(&run, 0, sizeof run);
    run_settings_pack(o, data.max_steps, pg.world, run.settings);
    // ranks from the environment picked their checkpoint each alone: they must have picked the same
    if (pg.world > 1 && !pg.using_mpi && !trainer_same_on_ranks(&t, resume_step + 1))
        fatal("-y 1: the ranks picked different checkpoints in %s (rank %d picked step %d, -1 for none; launched "
              "without mpirun, each rank checks only its own files): see the warnings about the newer steps' state "
              "files", o->out_dir, pg.rank, resume_step);
    const int start_step = resume_step >= 0 ? resume_step : 0, max_steps = data.max_steps;
    if (resume_step >= 0) {
        trainer_load_checkpoint(&t, &data.train, &rd, resume_step, &run, &rng);
        if (rank0) printf("resumed from %s at step %d\n", o->out_dir, start_step);
        if (rank0 && start_step >= max_steps)
            printf("the run finished at step %d (-x %d): nothing left to train\n", start_step, max_steps);
    }
    int *val_inputs = (int *)xmalloc((size_t)o->B * o->T * sizeof(int));
    int *val_targets = (int *)xmalloc((size_t)o->B * o->T * sizeof(int));
    Trace trace;  // --trace: the timeline of a few steps
    trace_start(&trace, "train_gpt2cu", o, start_step, max_steps, step_meter_warmup_steps(data.accum), rank0);
    gpu_tracer_start(&trace);
    memory_trace_list(&trace.mem, &t);
    trace.in_use = device_in_use_since;
    trace.in_use_ctx = (void *)&used0;
    trainer_trace_to(&t, &trace);
    train_data_start_reading(&data, o);
    TrainBatches batches;
    train_batches_init(&batches, &t.batch, &data.train, o->overfit, s.prefetch, s.cuda_graph);

    // every check has passed on every rank: the run may change -o now
    // (rank 0 sets its files aside first: a ZeRO rank's shard of an unfinished checkpoint is what tells -y 1 that
    // rank 0's model of that step is unfinished, not an earlier run's)
    dp_barrier(&t.dp, t.info + INFO_BARRIER);
    if (rank0) run_dir_start(&rd, o->resume, resume_step, 0);
    dp_barrier(&t.dp, t.info + INFO_BARRIER);
    if (!rank0) run_dir_start(&rd, o->resume, resume_step, 1);
    Logger lg;
    run_logger_open(&lg, &rd, resume_step, &run, !rank0);
    metrics_header(&lg, "train_gpt2cu", PRECISION_NAME, &cfg, o, max_steps, pg.world, resume_step);
    // (under -z 3 with several ranks a forward gathers from every rank: rank 0 cannot sample alone)
    const int can_sample = rank0 && !(s.zero_stage == 3 && pg.world > 1) &&
                           sampling_possible(&cfg, o, &data.tok, t.model.T, !rank0);
    if (rank0 && s.zero_stage == 3 && pg.world > 1 && o->gen_tokens > 0 && o->sample_every > 0)
        printf("sampling: off with -z 3 over %d ranks (a forward needs every rank); sample a checkpoint with "
               "--generate\n", pg.world);
    Trainer between_ctx = {&t, &data, o, &run, &rng, &lg, val_inputs, val_targets, &rd,
                           pg.world > 1 ? trainer_sum_cb : NULL, &t, &trace};
    const BetweenStepsFns between = {between_evaluate, between_hellaswag, between_sample, between_save};
    AdamWConfig h = {o->lr, 0.9f, 0.95f, 1e-8f, o->weight_decay, o->grad_clip, 0.0f, 0.0f};
    const double flops_per_step = gpt2_flops_per_token(&cfg, o->T) * o->total_batch;
    const double peak_flops = gpu_peak_flops(s.tf32) * pg.world;  // MFU is per GPU
    size_t peak_used = device_used_bytes();
    StepMeter meter;  // this rank's GPU board
    step_meter_init(&meter, start_step, data.accum, device_pci_bus_id());
    const double t_run = wall_seconds();
    for (int step = start_step; step < max_steps; step++) {
        const int step1 = step + 1, last = step1 == max_steps, ckpt_due = checkpoint_due(o, step1, last);
        step_meter_begin(&meter, step);
        trace_step_begin(&trace, step1);
        gpu_tracer_step_begin(&trace, step1);
        trace_begin(&trace, "step", TRACE_CAT_STEP);
        h.lr = lr_at_step(&data.sched, step);
        outlier_limits(o, &run, &h);
        train_step(&t, &batches, data.accum, &h, adamw_step_count(&run, step1), !last && !ckpt_due,
                   test_overflow_step(step1));
        float loss, norm;
        trainer_step_result(&t, &loss, &norm);  // the step's one host sync
        const double dt = step_meter_end(&meter, step);
        trace_end(&trace);  // the step
        phase_timer_collect(&t.phases, step > start_step);
        StepReport r = {step1, max_steps, loss, norm, h.lr, dt, flops_per_step / dt / peak_flops, NAN,
                        o->total_batch, 0, 0, update_fate(loss, norm, &h), &h};
        run_progress(t_run, start_step, step1, max_steps, &r.elapsed, &r.eta);
        report_step(&t, &lg, &run, o, &r);
        if (step == start_step) peak_used = max_size(peak_used, device_used_bytes());
        // evaluation, HellaSwag, sample, checkpoint (their energy is not the step's)
        const int other = val_due(o, data.have_val, step1, last) || hellaswag_due(o, step1, last) ||
                          sample_due(o, can_sample, step1, last) || ckpt_due;
        step_meter_pause(&meter, step, other);
        after_step(o, data.have_val, can_sample, &lg, &run, step1, last, between, &between_ctx);
        step_meter_resume(&meter, step, other);
        gpu_tracer_step_end(&trace, step1, max_steps);
    }
    RunSummary summary;
    report_steps(&meter, &t, &data, start_step, flops_per_step, rank0, &summary);
    final_sample(o, can_sample, max_steps, between, &between_ctx);
    peak_used = max_size(max_size(peak_used, device_used_bytes()), used0 + trace.mem.peak);
    if (rank0) report_end(&t, &lg, &run, peak_used - used0, &summary);
    train_batches_free(&batches);
    free(val_inputs);
    free(val_targets);
    logger_close(&lg);
    train_data_close(&data);
    trainer_free(&t);
    comm_free(&comm);
    pg_finalize(&pg);
    return 0;
}
