// gpu/settings.cuh: every setting of the GPU trainer in one struct, GpuSettings: the
// options both trainers take (common/train_options.h's TrainOptions) and the GPU trainer's
// own, filled once by one option table, checked before any GPU work, then passed whole to
// whatever is built from them (the model, the optimizer, the memory plan). test_gpt2cu
// takes the model's options from the same table.
#pragma once
#include "../common/train_options.h"
#include "../common/distributed.h"
#include "host/memory_budget.h"
#include "../kernels/common.cuh"
#include "../kernels/comm.cuh"
#include "../kernels/offload.cuh"
#include "model.cuh"

// --flash-attention -1: flash attention where it exists (the bf16 and fp16 builds, head
// sizes 64 and 128); it keeps no T x T matrix (19 GB less at GPT-2 124M, B=64, T=1024)
#define FLASH_AUTO (-1)

// The defaults of the options that apply with --fp8 1 only. A string option keeps its
// default's own pointer until the command line sets it (args.h points it into argv), so one
// given, even with the default's value, is told from one left alone.
static const char FP8_LAYERS_DEFAULT[] = "auto", FP8_SCALING_DEFAULT[] = "delayed", FP8_WEIGHTS_DEFAULT[] = "auto";

typedef struct {
    TrainOptions o;  // the options both trainers take
    // the GPU trainer's own options, as given
    int recompute;       // 0 none, 1 GELU, 2 GELU and layernorms, 3 the whole block
    int flash;           // 1 flash attention, 0 plain, FLASH_AUTO (resolved by gpu_settings_for_model)
    int master_weights;  // fp32 master weights (bf16/fp16 builds)
    int zero_stage;      // 0, 1, 2, 3; 1 and 2 become 0 with one rank (gpu_settings_check)
    int prefetch_layers; // -z 3: the layers gathered ahead of the one in use (1 or 2)
    int fuse_gelu, profile, prefetch, tf32, log_gpu, offload, cuda_graph, fp8, deterministic;
    int decode_graph;    // generation's step as one CUDA graph with programmatic dependent launch (gpu/generate.cuh)
    const char *comm, *max_memory, *max_host_memory, *optimizer_state, *fp8_layers, *fp8_scaling, *fp8_weights;
    // derived from the options by gpu_settings_check
    int backend;              // COMM_BACKEND_*
    int shard_grads;          // ZeRO-2 or -3 over several ranks: the gradients in two layer slots
    int moments_bf16;         // AdamW's moments in bf16
    int fp8_mask;             // FP8_LAYERS_* (0: no FP8)
    int fp8_delayed;          // FP8's delayed scaling (0: current)
    int fp8_cast;             // FP8's weights cast before each matmul, no copies kept (-1: auto, resolved by
                              // fp8_weights_resolve)
    size_t max_memory_bytes;  // --max-device-memory (0: no budget)
    size_t max_host_bytes;    // --max-host-memory (0: what the host has available)
    int total_batch_implied;  // -d -1, resolved to B*T*ranks (gpu_settings_resolve): a plan's advice names -d
} GpuSettings;

static void gpu_settings_defaults(GpuSettings *s) {
    memset(s, 0, sizeof *s);
    train_options_defaults(&s->o, 1024);
    s->recompute = 1;
    s->flash = FLASH_AUTO;
    s->master_weights = 1;
    s->fuse_gelu = 1;
    s->prefetch = 1;
    s->prefetch_layers = 2;  // at GPT-2 1.5B on one GPU with --offload 2, 1.5% faster than 1 (docs/memory.md)
    s->log_gpu = -1;
    // 1: every kernel sums in a fixed order and runs are bitwise reproducible (resume
    // included); 0: the matmul algorithms are picked by timing and the mma.sync flash
    // attention backward adds dq with atomics
    s->deterministic = 1;
    s->decode_graph = 1;
    s->comm = "nccl";
    s->max_memory = "";
    s->max_host_memory = "";
    s->optimizer_state = "fp32";
    s->fp8_layers = FP8_LAYERS_DEFAULT;
    s->fp8_scaling = FP8_SCALING_DEFAULT;
    s->fp8_weights = FP8_WEIGHTS_DEFAULT;
}

// The options that shape the model and its update: test_gpt2cu takes these; the trainer
// takes every option (GPU_OPTIONS_ALL), the shared ones first.
enum { GPU_OPTIONS_MODEL, GPU_OPTIONS_ALL };
// room for every option of the trainer's table (args_add checks it)
#define GPU_OPTIONS_CAPACITY (TRAIN_OPTIONS_COUNT + 32)

static void gpu_settings_add_options(ArgTable *t, GpuSettings *s, int which) {
    const int all = which == GPU_OPTIONS_ALL;
    if (all) train_options_add(t, &s->o);
    args_add(t, "-r", "--recompute", ARG_INT, &s->recompute,
             "recompute in backward: 0 none, 1 GELU, 2 GELU+layernorm, 3 the whole block (keeps its input only)");
    args_add(t, "-f", "--tf32", ARG_SWITCH, &s->tf32,
             "1: the fp32 build's matmuls in TF32 (faster, about 3 decimal digits; the bf16 and fp16 builds' are "
             "unaffected), 0: true fp32");
    args_add(t, NULL, "--flash-attention", ARG_INT, &s->flash,
             "1: flash attention (bf16/fp16 builds, head size 64 or 128), 0: attention that stores the T x T "
             "matrix, -1: flash where supported");
    args_add(t, "-w", "--master-weights", ARG_SWITCH, &s->master_weights,
             "1: keep fp32 master weights (bf16/fp16 builds)");
    args_add(t, "-ge", "--fuse-gelu", ARG_INT, &s->fuse_gelu,
             "1: GELU in the forward matmul's epilogue, 0: separate kernel");
    args_add(t, NULL, "--optimizer-state", ARG_STRING, &s->optimizer_state,
             "AdamW's moments on the device: fp32, or bf16 (stochastically rounded, half the memory; checkpoints "
             "hold fp32 either way)");
    args_add(t, NULL, "--offload", ARG_INT, &s->offload,
             "the fp32 master weights and AdamW's moments in pinned host memory, updated with the same "
             "arithmetic; 1: the update reads and writes them over PCIe in place, 2: the copy engines stage them "
             "through two device buffers of 4M elements; 0: on the device");
    args_add(t, NULL, "--cuda-graph", ARG_SWITCH, &s->cuda_graph,
             "1: each training micro-step (forward, loss, backward) and each update (norm, clip, AdamW) replayed "
             "from a CUDA graph (fewer launches: for small batches and models; one rank), 0: launched kernel by "
             "kernel");
    args_add(t, NULL, "--fp8", ARG_SWITCH, &s->fp8,
             "1: the linear layers' matmuls in FP8 (E4M3 weights and inputs, E5M2 gradients, per-tensor scales, "
             "see --fp8-scaling; bf16 build, GPUs of compute capability 8.9 and up), 0: in bf16");
    args_add(t, NULL, "--fp8-layers", ARG_STRING, &s->fp8_layers,
             "with --fp8 1, which linear layers: auto (each kind timed in FP8 and bf16 at the run's shapes at "
             "start-up; those FP8 makes faster), all, blocks (the four of every block), head (the lm_head), or a "
             "comma list of qkv, attproj, fc, fcproj, head");
    args_add(t, NULL, "--fp8-scaling", ARG_STRING, &s->fp8_scaling,
             "with --fp8 1, the inputs' and gradients' scales: delayed (the last 16 steps' amaxes over all ranks, "
             "kept in the checkpoint; the casts record them as they go) or current (each tensor's own amax, one "
             "more pass over it)");
    args_add(t, NULL, "--fp8-weights", ARG_STRING, &s->fp8_weights,
             "with --fp8 1, the weights' FP8 codes: kept (W and W^T of every FP8 layer, cast after each update: "
             "2 bytes a parameter), cast (each layer's cast just before its matmul into one reused buffer: "
             "no copies between steps, a cast per matmul), or auto (kept while they take at most 2% of the run's "
             "planned device memory, else cast)");
    args_add(t, NULL, "--deterministic", ARG_SWITCH, &s->deterministic,
             "1: bitwise-reproducible runs (fixed summation order everywhere), 0: matmul algorithms picked by "
             "timing, and flash attention's atomic-dq backward where it runs the mma.sync kernels (head size 128, "
             "GPUs other than 9.0, or GPU_ARCH=90): faster there, not bitwise reproducible");
    if (!all) return;
    args_add(t, NULL, "--decode-graph", ARG_SWITCH, &s->decode_graph,
             "generation (--generate, and the samples with the KV cache): 1: each step (one position of every "
             "text) replayed from one CUDA graph whose kernels start with programmatic dependent launch, 0: "
             "launched kernel by kernel, plainly (the same kernels and results)");
    args_add(t, "-z", "--zero-stage", ARG_INT, &s->zero_stage,
             "ZeRO stage with several ranks: 0 all-reduce the gradients, 1 shard the optimizer state, 2 also the "
             "gradients, 3 also the parameters (each layer's gathered just ahead of use); with one rank, 3 with "
             "--offload 2 keeps the parameters in host memory and copies each layer in ahead of use");
    args_add(t, NULL, "--prefetch-layers", ARG_INT, &s->prefetch_layers,
             "with -z 3, the layers whose parameters are gathered ahead of the one in use: 1 or 2 (a layer slot "
             "more on the device)");
    args_add(t, NULL, "--comm", ARG_STRING, &s->comm,
             "communication between ranks: nccl (one GPU per rank) or mpi (through host memory; ranks may share "
             "a GPU: for tests)");
    args_add(t, "-lg", "--log-gpu-every", ARG_INT, &s->log_gpu, "llm.c's GPU logging: -1 only (use nvidia-smi)");
    // llm.c's launch without mpirun: here the environment does it (RANK, WORLD_SIZE, ...)
    static const char *const launch_flags[][2] = {{"-pn", "--num-processes"}, {"-pr", "--process-rank"},
                                                  {"-pg", "--gpus-per-node"}, {"-pm", "--nccl-init-method"},
                                                  {"-ps", "--server-ip"},     {"-pp", "--fs-path"}};
    for (int i = 0; i < 6; i++)
        args_add(t, launch_flags[i][0], launch_flags[i][1], ARG_REFUSED, NULL,
                 "launch with mpirun, or set RANK, WORLD_SIZE, LOCAL_RANK and GPT2_NCCL_ID_FILE in each process "
                 "(docs/command-line.md)");
    args_add(t, NULL, "--max-device-memory", ARG_STRING, &s->max_memory,
             "the most device memory the run may plan for, e.g. 16G (checked before any GPU work; a run that does "
             "not fit stops naming settings that do); empty: no limit");
    args_add(t, NULL, "--max-host-memory", ARG_STRING, &s->max_host_memory,
             "the most host memory the run's ranks on one host may plan for together, e.g. 64G (checked before any "
             "GPU work: the memory --offload pins and the buffers a checkpoint holds); empty: what the host has "
             "available (MemAvailable, or less where a cgroup limits the run)");
    args_add(t, NULL, "--prefetch", ARG_SWITCH, &s->prefetch,
             "1: read and prepare the next micro-batch on the host while the GPU runs the current one, 0: when its "
             "micro-step starts");
    args_add(t, NULL, "--profile", ARG_SWITCH, &s->profile,
             "1: time each phase of the step (batch upload, forward, loss, backward, update) with CUDA events, "
             "print a table at the end");
}

// a comma list of kinds (qkv,fc,head) as FP8_* bits; 0 if a name is not a kind
static int fp8_kinds_list(const char *list) {
    int mask = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (k < LINEAR_KINDS && (strlen(LINEAR_KIND_NAMES[k]) != len || strncmp(p, LINEAR_KIND_NAMES[k], len) != 0))
            k++;
        if (k == LINEAR_KINDS) return 0;
        mask |= 1 << k;
        p += len;
        if (*p == ',' && *++p == 0) return 0;  // a trailing comma
    }
    return mask;
}

// --fp8 (0 or 1) and --fp8-layers to FP8_* bits (0: no FP8): all, blocks, head, auto, or a
// comma list of qkv, attproj, fc, fcproj, head
static int fp8_layers_arg(int fp8, const char *layers) {
    int mask = !strcmp(layers, "all") ? FP8_LAYERS_ALL : !strcmp(layers, "blocks") ? FP8_LAYERS_BLOCKS
               : !strcmp(layers, "head") ? FP8_LAYERS_HEAD : !strcmp(layers, "auto") ? FP8_LAYERS_AUTO
               : fp8_kinds_list(layers);
    if (!mask)
        fatal("--fp8-layers must be all, blocks, head, auto or a comma list of qkv, attproj, fc, fcproj and head, "
              "got '%s'", layers);
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

// --fp8-weights: 0 kept, 1 cast, -1 auto
static int fp8_cast_arg(const char *text) {
    if (!strcmp(text, "kept")) return 0;
    if (!strcmp(text, "cast")) return 1;
    if (!strcmp(text, "auto")) return -1;
    fatal("--fp8-weights must be kept, cast or auto, got '%s'", text);
}

// --optimizer-state: 1 for bf16 moments, 0 for fp32
static int moments_bf16_arg(const char *text) {
    if (strcmp(text, "fp32") != 0 && strcmp(text, "bf16") != 0)
        fatal("--optimizer-state must be fp32 or bf16, got '%s'", text);
    return strcmp(text, "bf16") == 0;
}

// -z 3 on one rank with --offload 2: the parameters' shard (the whole model) in host memory
static int params_on_host(int zero_stage, int ranks, int offload) {
    return zero_stage == 3 && ranks == 1 && offload == OFFLOAD_STAGED;
}

// A size flag's value in bytes (0: empty, no limit); anything but a size with its unit stops the run
static size_t size_flag(const char *flag, const char *text) {
    size_t bytes = 0, unused;
    if (!*text || parse_bytes(text, &bytes)) return bytes;
    char with_unit[64];
    snprintf(with_unit, sizeof with_unit, "%sG", text);
    if (parse_bytes(with_unit, &unused))  // a number that a unit would make a size
        fatal("%s %s: give a unit, K, M, G or T (binary: G is 2^30 bytes), e.g. 16G", flag, text);
    fatal("%s: '%s' is not a size (e.g. 16G, 512M, 1.5G)", flag, text);
}

// Checks the GPU options (the shared ones: train_options_validate) and derives what they
// imply, before any GPU work. pg: the ranks of this run.
static void gpu_settings_check(GpuSettings *s, const ProcessGroup *pg) {
    if (s->recompute < 0 || s->recompute > 3) fatal("-r (recompute) must be 0, 1, 2 or 3, got %d", s->recompute);
    if (s->flash < -1 || s->flash > 1) fatal("--flash-attention must be -1, 0 or 1");
    if (s->flash == 1 && PRECISION == PRECISION_FP32)
        fatal("--flash-attention 1: flash attention needs the bf16 or fp16 build (make PRECISION=BF16); use 0");
    if (s->log_gpu != -1) fatal("-lg: logging the GPU's state is not implemented; use nvidia-smi dmon");
    if (s->zero_stage < 0 || s->zero_stage > 3) fatal("-z (ZeRO stage) must be 0, 1, 2 or 3, got %d", s->zero_stage);
    s->backend = comm_backend_parse(s->comm);
    if (s->backend != COMM_BACKEND_NCCL && s->backend != COMM_BACKEND_MPI)
        fatal("--comm must be nccl or mpi, got '%s'", s->comm);
    if (pg->world > 1 && !pg->using_mpi) {  // ranks from the environment: what the backends need
        if (s->backend == COMM_BACKEND_MPI) fatal("--comm mpi needs the ranks launched by mpirun; use --comm nccl");
        const char *id_file = getenv("GPT2_NCCL_ID_FILE");
        if (!id_file || !*id_file)
            fatal("%d ranks from the environment (WORLD_SIZE) need GPT2_NCCL_ID_FILE: a path on a file system every "
                  "rank sees, fresh for each launch (rank 0 writes NCCL's id there); or launch with mpirun",
                  pg->world);
    }
    if (s->fuse_gelu == 2) fatal("-ge 2: GELU fused into the backward matmul is not implemented; use -ge 1");
    if (s->fuse_gelu != 0 && s->fuse_gelu != 1) fatal("-ge (GELU fusion) must be 0 or 1");
    s->moments_bf16 = moments_bf16_arg(s->optimizer_state);
    if (s->offload < OFFLOAD_NONE || s->offload > OFFLOAD_STAGED)
        fatal("--offload must be 0, 1 or 2, got %d", s->offload);
    if (s->cuda_graph && s->profile)
        fatal("--cuda-graph 1 with --profile 1: the profile times each phase with events inside the step; use one "
              "or the other");
    s->fp8_mask = fp8_layers_arg(s->fp8, s->fp8_layers);
    s->fp8_delayed = fp8_delayed_arg(s->fp8_scaling);
    s->fp8_cast = fp8_cast_arg(s->fp8_weights);
    // without --fp8 1 these would be ignored, and a run meant to be in FP8 would train in bf16
    const struct {
        const char *flag, *value, *default_value;
    } fp8_options[] = {{"--fp8-layers", s->fp8_layers, FP8_LAYERS_DEFAULT},
                       {"--fp8-scaling", s->fp8_scaling, FP8_SCALING_DEFAULT},
                       {"--fp8-weights", s->fp8_weights, FP8_WEIGHTS_DEFAULT}};
    for (int i = 0; i < 3 && !s->fp8; i++)
        if (fp8_options[i].value != fp8_options[i].default_value)
            fatal("%s %s: needs --fp8 1 (without it no matmul runs in FP8); add --fp8 1, or leave %s out",
                  fp8_options[i].flag, fp8_options[i].value, fp8_options[i].flag);
    if (s->cuda_graph && pg->world > 1)
        fatal("--cuda-graph 1 runs on one rank (the gradient reductions are not captured); %d ranks: use "
              "--cuda-graph 0", pg->world);
    s->max_memory_bytes = size_flag("--max-device-memory", s->max_memory);
    s->max_host_bytes = size_flag("--max-host-memory", s->max_host_memory);
    if (s->prefetch_layers < 1 || s->prefetch_layers > 2)
        fatal("--prefetch-layers must be 1 or 2, got %d", s->prefetch_layers);
    if (s->zero_stage == 3 && s->cuda_graph)
        fatal("-z 3 with --cuda-graph 1: the layers' gathers are issued as the step goes, which a replayed graph "
              "cannot do; use --cuda-graph 0 (or -z 2)");
    if (s->zero_stage == 3 && s->fp8)
        fatal("-z 3 with --fp8 1: the FP8 layers keep or cast whole weights, which -z 3 does not hold; use "
              "--fp8 0, or -z 2 with --fp8 1");
    if (pg->world == 1 && s->zero_stage == 3 && !params_on_host(s->zero_stage, 1, s->offload))
        printf("note: -z 3 on one rank without --offload 2 keeps the whole model on the device (as its shard, beside "
               "the layer slots): it saves nothing; --offload 2 keeps it in host memory\n");
    if (pg->world == 1 && s->zero_stage < 3) s->zero_stage = 0;  // one rank: nothing to shard
    s->shard_grads = pg->world > 1 && s->zero_stage >= 2;
}

static int flash_supported(const GPT2Config *c) {
    int hs = c->channels / c->num_heads;
    return PRECISION != PRECISION_FP32 && (hs == 64 || hs == 128);
}

// What the model's shape decides: flash attention where it can run (FLASH_AUTO) or a refusal
// where it was asked for and cannot; the kernels' alignment. name: the model, for messages.
static void gpu_settings_for_model(GpuSettings *s, const GPT2Config *cfg, const char *name) {
    if (s->flash == FLASH_AUTO) s->flash = flash_supported(cfg);
    if (s->flash && !flash_supported(cfg))
        fatal("%s: flash attention supports head sizes 64 and 128 in the bf16 and fp16 builds, this model's is %d; "
              "use --flash-attention 0", name, cfg->channels / cfg->num_heads);
    if (cfg->channels % 8 || (cfg->channels / cfg->num_heads) % 8)
        fatal("%s: channels (%d) and head size (%d) must be multiples of 8 for the GPU kernels", name, cfg->channels,
              cfg->channels / cfg->num_heads);
}

// --generate --kv-cache 0's settings: the model whole on one GPU (whatever -z says), one row
// of its whole context (maxT) at a time
static GpuSettings gpu_settings_for_generate(const GpuSettings *given, const GPT2Config *cfg, const char *name) {
    GpuSettings s = *given;
    s.zero_stage = 0;
    s.o.B = 1;
    s.o.T = cfg->max_seq_len;
    gpu_settings_for_model(&s, cfg, name);
    return s;
}

// The layer slots of the parameters: -z 3's, the one in use and those gathered ahead (0: whole)
static int gpt2_param_slots(int zero_stage, int prefetch_layers) { return zero_stage == 3 ? 1 + prefetch_layers : 0; }

// What the model is built for under these settings (after gpu_settings_for_model)
static GPT2Shape gpu_model_shape(const GpuSettings *s) {
    GPT2Shape sh = {s->o.B, s->o.T, s->recompute, s->flash, s->deterministic,
                    gpt2_param_slots(s->zero_stage, s->prefetch_layers), s->shard_grads ? 2 : 0, s->fuse_gelu, s->tf32};
    return sh;
}

// The settings the memory planner may change (gpu/host/memory_budget.h), as this run has them
static MemorySetting gpu_memory_setting(const GpuSettings *s, int world) {
    const TrainOptions *o = &s->o;
    MemorySetting m;
    memset(&m, 0, sizeof m);
    m.B = o->B;
    m.recompute = s->recompute;
    m.ranks = world;
    m.zero_stage = s->zero_stage;
    // (before the data is read: -d -1 is resolved there, to B*T*ranks)
    m.total_batch = o->total_batch == -1 ? (long)o->B * o->T * world : o->total_batch;
    m.T = o->T;
    m.moments_bf16 = s->moments_bf16;
    m.total_batch_implied = o->total_batch == -1 || s->total_batch_implied;
    m.offload = s->offload;
    m.no_zero3 = s->fp8 || s->cuda_graph;
    return m;
}
