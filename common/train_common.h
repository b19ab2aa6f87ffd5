// train_common.h: what the CPU and GPU trainers share around the model: the training
// options (one table of flags, one set of defaults, one validation), GPT-2's random
// initialisation, resolving -e into parameters, the run's logs, the work between steps
// and drawing a sample from a distribution (the run directory itself: common/run_dir.h).
#ifndef COMMON_TRAIN_COMMON_H
#define COMMON_TRAIN_COMMON_H
#include "util.h"
#include "args.h"
#include "checkpoint.h"
#include "dataloader.h"
#include "hellaswag.h"
#include "loader_thread.h"
#include "logger.h"
#include "rng.h"
#include "run_dir.h"
#include "safetensors.h"
#include "schedule.h"
#include "tokenizer.h"
#include "trace.h"
#include "update_rule.h"
#include <dirent.h>
#include <float.h>
#include <math.h>

typedef struct {
    const char *train_pattern, *val_pattern, *model_arg, *out_dir, *sched_name, *tokenizer_dir, *prompt;
    const char *hellaswag_file;
    const char *trace_path, *trace_steps;  // --trace FILE and its steps (common/trace.h)
    const char *memory_trace;             // --memory-trace FILE (common/memory_trace.h)
    int B, T, total_batch, max_steps, warmup, val_every, val_batches, sample_every, gen_tokens;
    int ckpt_every, resume, overwrite, overfit, seed, shuffle, check_data, max_skipped, hellaswag;
    int ckpt_keep, ckpt_major, top_k, loader_threads;
    int generate, kv_cache;  // --generate: sample from -e and exit (common/generate.h); sampling's KV cache
    float lr, final_frac, weight_decay, grad_clip, temperature, wsd_frac, skip_loss_z, skip_norm_z, top_p;
    LRSchedule sched;  // filled in by train_options_validate
} TrainOptions;

// One AdamW step's settings. max_loss and max_norm (0: none) skip the update of a step
// whose loss or gradient norm is above them (-sl / -sg, common/outlier.h).
typedef struct {
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    float max_loss, max_norm;
} AdamWConfig;

static inline void train_options_defaults(TrainOptions *o, int default_T) {
    memset(o, 0, sizeof *o);
    o->train_pattern = "data/tinyshakespeare/tiny_shakespeare_train_*.bin";
    o->val_pattern = "data/tinyshakespeare/tiny_shakespeare_val_*.bin";
    o->model_arg = "d12";
    o->sched_name = "cosine";
    o->tokenizer_dir = "data/gpt2";
    o->hellaswag_file = "data/hellaswag/hellaswag_val.bin";
    o->prompt = "";
    o->trace_steps = "";
    o->B = 4;
    o->T = default_T;
    o->total_batch = -1;
    o->max_steps = -1;
    o->val_every = 20;
    o->val_batches = 20;
    o->sample_every = 20;
    o->ckpt_every = -1;
    o->gen_tokens = 64;
    o->seed = 42;
    o->lr = 3e-4f;
    o->final_frac = 1.0f;
    o->grad_clip = 1.0f;
    o->temperature = 1.0f;
    o->wsd_frac = 0.2f;
    o->check_data = 1;
    o->top_p = 1.0f;
    o->max_skipped = 100;
    o->kv_cache = 1;
}

// Options both trainers take: a trainer's option table starts with these and adds its own.
#define TRAIN_OPTIONS_COUNT 44
static inline void train_options_add(ArgTable *t, TrainOptions *o) {
    const int n0 = t->n;
    args_add(t, "-i", "--train-data", ARG_STRING, &o->train_pattern, "training shards (glob)");
    args_add(t, "-j", "--val-data", ARG_STRING, &o->val_pattern, "validation shards (glob); empty string: none");
    args_add(t, "-e", "--model", ARG_STRING, &o->model_arg,
             "checkpoint file, Hugging Face GPT-2 directory, or descriptor "
             "d12|d24|d36|d48|l<L>h<H>c<C>[t<maxT>]");
    args_add(t, "-o", "--output-dir", ARG_STRING, &o->out_dir, "directory for main.log and checkpoints");
    args_add(t, "-b", "--batch-size", ARG_INT, &o->B, "micro-batch size B");
    args_add(t, "-t", "--seq-len", ARG_INT, &o->T, "sequence length T");
    args_add(t, "-d", "--total-batch-size", ARG_INT, &o->total_batch,
             "tokens per step, a multiple of B*T*ranks (-1: B*T*ranks, no accumulation)");
    args_add(t, "-x", "--max-steps", ARG_INT, &o->max_steps, "optimizer steps (-1: one epoch)");
    args_add(t, "-l", "--learning-rate", ARG_FLOAT, &o->lr, "peak learning rate");
    args_add(t, "-u", "--warmup-steps", ARG_INT, &o->warmup, "linear warmup steps");
    args_add(t, "-q", "--final-lr-fraction", ARG_FLOAT, &o->final_frac, "final lr as a fraction of the peak");
    args_add(t, "-k", "--lr-schedule", ARG_STRING, &o->sched_name, "cosine|linear|constant|wsd");
    args_add(t, NULL, "--wsd-decay-fraction", ARG_FLOAT, &o->wsd_frac, "wsd: fraction of steps spent decaying");
    args_add(t, "-c", "--weight-decay", ARG_FLOAT, &o->weight_decay, "AdamW weight decay (2-D weights only)");
    args_add(t, NULL, "--grad-clip", ARG_FLOAT, &o->grad_clip, "clip the global gradient norm to this (0: off)");
    args_add(t, "-sl", "--skip-loss-z", ARG_FLOAT, &o->skip_loss_z,
             "skip the update of a step whose loss has a z-score above this against the last 128 "
             "steps' (0: never)");
    args_add(t, "-sg", "--skip-norm-z", ARG_FLOAT, &o->skip_norm_z,
             "skip the update of a step whose gradient norm has a z-score above this against the last "
             "128 steps' (0: never)");
    args_add(t, "-v", "--val-every", ARG_INT, &o->val_every,
             "validation loss every N steps and at the end (0: never)");
    args_add(t, "-m", "--val-batches", ARG_INT, &o->val_batches, "batches per validation (-1: whole split)");
    args_add(t, "-s", "--sample-every", ARG_INT, &o->sample_every, "sample every N steps and at the end (0: never)");
    args_add(t, "-g", "--gen-tokens", ARG_INT, &o->gen_tokens, "tokens to generate per sample (0: no samples)");
    args_add(t, NULL, "--prompt", ARG_STRING, &o->prompt, "text the samples start from");
    args_add(t, NULL, "--temperature", ARG_FLOAT, &o->temperature, "sampling temperature");
    args_add(t, NULL, "--top-k", ARG_INT, &o->top_k, "sample among the k most likely tokens only (0: all)");
    args_add(t, NULL, "--top-p", ARG_FLOAT, &o->top_p,
             "sample among the most likely tokens whose probabilities add up to p (1: all)");
    args_add(t, NULL, "--generate", ARG_SWITCH, &o->generate,
             "generate -g tokens after --prompt from the model of -e, print them as they come and exit (no "
             "training, no data)");
    args_add(t, NULL, "--kv-cache", ARG_SWITCH, &o->kv_cache,
             "1: sampling keeps each layer's keys and values, so a token costs one position's forward; 0: the "
             "whole text's forward for each token");
    args_add(t, "-n", "--checkpoint-every", ARG_INT, &o->ckpt_every,
             "write a checkpoint to -o every N steps and at the end (-1: at the end only; 0: never)");
    args_add(t, "-nk", "--checkpoints-keep", ARG_INT, &o->ckpt_keep,
             "keep only the newest N checkpoints in -o, and the major ones (0: keep all)");
    args_add(t, "-nm", "--checkpoints-major", ARG_INT, &o->ckpt_major,
             "the checkpoints of every N-th step are major: -nk never removes them (0: none)");
    args_add(t, "-y", "--resume", ARG_SWITCH, &o->resume,
             "1: resume from the newest intact checkpoint in -o (none yet: start fresh)");
    args_add(t, NULL, "--overwrite", ARG_SWITCH, &o->overwrite,
             "1: remove the checkpoints and logs of an earlier run in -o and start afresh (without this or -y 1, "
             "a run into such a directory is refused)");
    args_add(t, "-a", "--overfit-batch", ARG_SWITCH, &o->overfit, "1: train on the first batch only (debugging)");
    args_add(t, NULL, "--shuffle", ARG_SWITCH, &o->shuffle, "1: shuffle shards and samples each epoch");
    args_add(t, NULL, "--seed", ARG_INT, &o->seed, "seed for init, shuffling and sampling");
    args_add(t, NULL, "--tokenizer-dir", ARG_STRING, &o->tokenizer_dir,
             "directory holding vocab.bpe and encoder.json");
    args_add(t, "-h", "--hellaswag", ARG_INT, &o->hellaswag,
             "1: HellaSwag accuracy every -v steps and at the end (llm.c's flag; -h alone: help)");
    args_add(t, NULL, "--hellaswag-file", ARG_STRING, &o->hellaswag_file,
             "the HellaSwag eval file for -h 1 (llm.c's format; dev/data/hellaswag.py builds it)");
    args_add(t, NULL, "--loader-threads", ARG_INT, &o->loader_threads,
             "1: read the training batches on a thread ahead of the step, 0: in the training loop");
    args_add(t, NULL, "--check-data", ARG_SWITCH, &o->check_data,
             "1: check every training token id at start, 0: each shard when first read (validation "
             "shards: always at start)");
    args_add(t, NULL, "--max-skipped-updates", ARG_INT, &o->max_skipped,
             "stop the run after this many updates in a row skipped for a non-finite or outlier loss or norm "
             "(0: never)");
    args_add(t, NULL, "--trace", ARG_STRING, &o->trace_path,
             "write a timeline of --trace-steps to this file: the steps' phases and the work between steps as a "
             "trace-event JSON (Chrome's tracing, Perfetto; scripts/plot_trace.py draws it)");
    args_add(t, NULL, "--trace-steps", ARG_STRING, &o->trace_steps,
             "with --trace, the steps it holds, FIRST[:LAST] counted from 1 (empty: the two steps after the "
             "warm-up the step times leave out); --memory-trace samples the first of them");
    args_add(t, NULL, "--memory-trace", ARG_STRING, &o->memory_trace,
             "write where the memory goes over one step to this file: every buffer by category (parameters, "
             "gradients, optimizer state, each layer's activations, ...) and the bytes in use after each phase "
             "(scripts/plot_trace.py --memory draws it)");
    if (t->n - n0 != TRAIN_OPTIONS_COUNT)
        fatal("internal: TRAIN_OPTIONS_COUNT is %d, the table has %d", TRAIN_OPTIONS_COUNT, t->n - n0);
}

// An output file named by an option: refused now, before any training, when it cannot be
// written (a directory, a missing or read-only folder); a file made to find out is removed.
static inline void output_file_check(const char *option, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) fatal("%s %s: that is a directory, not a file", option, path);
        if (access(path, W_OK) != 0) fatal("%s %s: cannot write it: %s", option, path, strerror(errno));
        return;
    }
    FILE *f = fopen(path, "w");
    if (!f) fatal("%s %s: cannot write it: %s", option, path, strerror(errno));
    fclose(f);
    remove(path);
}

// An output file named by an option must be neither one of the run's inputs (-e, the -i and
// -j shards, the HellaSwag file) nor a run's file (its logs, checkpoints, lock: in this run's
// -o, or any existing file of such a name): writing it would destroy what a run reads or keeps.
static inline void output_file_distinct(const char *option, const char *path, const TrainOptions *o) {
    struct stat out, st;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t dir_len = o->out_dir ? strlen(o->out_dir) : 0;
    while (dir_len > 1 && o->out_dir[dir_len - 1] == '/') dir_len--;
    const int in_out_dir = o->out_dir && base - path == (ptrdiff_t)dir_len + 1 && !strncmp(path, o->out_dir, dir_len);
    if (run_name_parse(base).kind != RUN_NAME_OTHER && (stat(path, &st) == 0 || in_out_dir))
        fatal("%s %s: that is a training run's file (its log, checkpoint or lock); name another file", option, path);
    if (o->out_dir && stat(o->out_dir, &st) == 0) {
        char *dir = xstrdup(path), *slash = strrchr(dir, '/');
        if (slash == dir) dir[1] = 0;  // "/name" lies in "/"
        else if (slash) *slash = 0;
        struct stat dst;
        if (stat(slash ? dir : ".", &dst) == 0 && dst.st_dev == st.st_dev && dst.st_ino == st.st_ino &&
            run_name_parse(base).kind != RUN_NAME_OTHER)
            fatal("%s %s: that is one of the run's own files in -o %s; name a file outside them", option, path,
                  o->out_dir);
        free(dir);
    }
    if (stat(path, &out) != 0) return;
    const char *inputs[] = {o->model_arg, o->hellaswag ? o->hellaswag_file : NULL, o->train_pattern, o->val_pattern};
    const char *what[] = {"the model -e reads", "the HellaSwag file", "a training shard (-i)",
                          "a validation shard (-j)"};
    for (int i = 0; i < 4; i++) {
        if (!inputs[i] || !*inputs[i]) continue;
        glob_t g;
        if (glob(inputs[i], GLOB_NOCHECK, NULL, &g) != 0) continue;
        for (size_t k = 0; k < g.gl_pathc; k++)
            if (stat(g.gl_pathv[k], &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino) {
                globfree(&g);
                fatal("%s %s is %s: writing it would destroy the run's input; name another file", option, path,
                      what[i]);
            }
        globfree(&g);
    }
}

// Checks the shared options before any large allocation or GPU work; fills in the
// total batch default and the schedule kind. Float flags
// are finite already (common/args.h refuses NaN and infinity).
static inline void train_options_validate(TrainOptions *o) {
    if (o->B < 1) fatal("-b (batch size) must be at least 1, got %d", o->B);
    if (o->T < 1) fatal("-t (sequence length) must be at least 1, got %d", o->T);
    if ((long)o->B * o->T > (1L << 30))
        fatal("-b times -t is too large (%ld tokens per micro-batch)", (long)o->B * o->T);
    // -1 becomes B*T*ranks once the ranks are known (train_data_open)
    if (o->total_batch != -1 && (o->total_batch < 1 || o->total_batch % (o->B * o->T)))
        fatal("-d (total batch size) must be a positive multiple of B*T = %d tokens, got %d", o->B * o->T,
              o->total_batch);
    if (o->max_steps != -1 && o->max_steps < 1)
        fatal("-x (max steps) must be -1 (one epoch) or at least 1, got %d", o->max_steps);
    LRSchedule s = {LR_COSINE, o->lr, o->final_frac, o->wsd_frac, o->warmup, 0};
    if (!lr_schedule_kind_from_name(o->sched_name, &s.kind))
        fatal("-k: unknown schedule '%s' (cosine, linear, constant, wsd)", o->sched_name);
    o->sched = s;
    char v[32];  // a refused decimal as given (float_text)
    if (!(o->lr >= 0)) fatal("-l (learning rate) must be a non-negative number, got %s", float_text(v, o->lr));
    if (!(o->final_frac >= 0 && o->final_frac <= 1))
        fatal("-q (final lr fraction) must be in [0, 1], got %s", float_text(v, o->final_frac));
    if (!(o->wsd_frac >= 0 && o->wsd_frac <= 1))
        fatal("--wsd-decay-fraction must be in [0, 1], got %s", float_text(v, o->wsd_frac));
    if (o->warmup < 0) fatal("-u (warmup steps) must be >= 0");
    if (!(o->weight_decay >= 0)) fatal("-c (weight decay) must be >= 0, got %s", float_text(v, o->weight_decay));
    if (!(o->grad_clip >= 0)) fatal("--grad-clip must be >= 0, got %s", float_text(v, o->grad_clip));
    if (o->gen_tokens < 0) fatal("-g (tokens to generate) must be >= 0");
    if (!(o->temperature > 0)) fatal("--temperature must be > 0, got %s", float_text(v, o->temperature));
    if (o->top_k < 0) fatal("--top-k must be >= 0 (0: every token), got %d", o->top_k);
    if (!(o->top_p > 0 && o->top_p <= 1)) fatal("--top-p must be in (0, 1], got %s", float_text(v, o->top_p));
    if (o->val_every < 0 || o->sample_every < 0) fatal("-v and -s must be >= 0");
    if (o->ckpt_every < -1) fatal("-n must be -1 (at the end only), 0 (never) or a number of steps");
    if (o->val_batches != -1 && o->val_batches < 1)
        fatal("-m (validation batches) must be -1 (whole split) or at least 1, got %d", o->val_batches);
    if (o->resume && !o->out_dir) fatal("-y 1 needs -o: the directory to resume from");
    if (o->overwrite && !o->out_dir) fatal("--overwrite 1 needs -o: the directory whose earlier run it removes");
    if (o->overwrite && o->resume)
        fatal("-y 1 resumes the run in -o and --overwrite 1 removes it: give one of them");
    if (o->loader_threads != 0 && o->loader_threads != 1)
        fatal("--loader-threads must be 0 or 1 (one thread reads ahead of any step: reads are sequential)");
    if (o->max_skipped < 0) fatal("--max-skipped-updates must be >= 0 (0: never stop)");
    if (!(o->skip_loss_z >= 0) || !(o->skip_norm_z >= 0)) fatal("-sl and -sg must be >= 0 (0: never skip)");
    if (o->hellaswag != 0 && o->hellaswag != 1) fatal("-h must be 0 or 1 (help: --help)");
    if (o->hellaswag && o->val_every == 0) fatal("-h 1 runs every -v steps: give -v a number of steps, not 0");
    if (o->hellaswag && !file_exists(o->hellaswag_file))
        fatal("-h 1: the HellaSwag eval file %s does not exist (build it with dev/data/hellaswag.py, or name it "
              "with --hellaswag-file)", o->hellaswag_file);
    if (o->ckpt_keep < 0 || o->ckpt_major < 0) fatal("-nk and -nm must be >= 0 (0: keep all, no major checkpoints)");
    int first, last;
    if (o->trace_steps && *o->trace_steps && !trace_steps_parse(o->trace_steps, &first, &last))
        fatal("--trace-steps must be FIRST or FIRST:LAST, steps counted from 1 with FIRST <= LAST, got '%s'",
              o->trace_steps);
    if (o->trace_steps && *o->trace_steps && !(o->trace_path && *o->trace_path) &&
        !(o->memory_trace && *o->memory_trace))
        fatal("--trace-steps %s: give --trace FILE.json (or --memory-trace FILE.json), the file the steps go to",
              o->trace_steps);
    if (o->trace_path && *o->trace_path) output_file_distinct("--trace", o->trace_path, o);
    if (o->memory_trace && *o->memory_trace) output_file_distinct("--memory-trace", o->memory_trace, o);
    if (o->trace_path && *o->trace_path) output_file_check("--trace", o->trace_path);
    if (o->memory_trace && *o->memory_trace) output_file_check("--memory-trace", o->memory_trace);
    if (o->trace_path && o->memory_trace && *o->trace_path && !strcmp(o->trace_path, o->memory_trace))
        fatal("--trace and --memory-trace name the same file, %s: give each its own", o->trace_path);
}

// GPT-2's initialisation: weights normal(0, 0.02), the residual output projections
// (attprojw, fcprojw) scaled by 1/sqrt(2L), biases 0, layernorm weights 1; the padded
// rows of wte stay zero. Returns a malloc'd array in checkpoint order.
static inline float *gpt2_init_random_params(const GPT2Config *cfg, uint64_t seed) {
    size_t sizes[NUM_PARAM_TENSORS];
    gpt2_param_sizes(cfg, sizes);
    float *params = (float *)xcalloc(gpt2_num_params(cfg), sizeof(float));
    uint64_t rng = rng_seed(seed);
    float resid_std = 0.02f / sqrtf(2.0f * cfg->num_layers);
    float *p = params;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = i == P_WTE ? (size_t)cfg->vocab_size * cfg->channels : sizes[i];
        if (i == P_LN1W || i == P_LN2W || i == P_LNFW) {
            for (size_t j = 0; j < n; j++) p[j] = 1.0f;
        } else if (i == P_WTE || i == P_WPE || i == P_QKVW || i == P_FCW) {
            rng_fill_normal(&rng, p, n, 0.0f, 0.02f);
        } else if (i == P_ATTPROJW || i == P_FCPROJW) {
            rng_fill_normal(&rng, p, n, 0.0f, resid_std);
        }
        p += sizes[i];
    }
    return params;
}

// -e: a descriptor gives a random init from seed, a file a checkpoint. Returns the
// parameters (malloc'd, fp32) and fills cfg; checks T against the model's maxT.
static inline float *gpt2_params_from_model_arg(const char *model_arg, int T, uint64_t seed, GPT2Config *cfg) {
    float *params;
    if (gpt2_config_from_descriptor(model_arg, cfg)) {
        const char *problem = gpt2_config_problem(cfg);
        if (problem) fatal("-e %s: %s", model_arg, problem);
        params = gpt2_init_random_params(cfg, seed);
    } else if (st_is_dir(model_arg)) {
        params = gpt2_params_from_hf_dir(model_arg, cfg);
    } else if (file_exists(model_arg)) {
        params = gpt2_checkpoint_read(model_arg, cfg);
    } else {
        fatal("-e %s: not a model descriptor (d12, d24, d36, d48, l<L>h<H>c<C>[t<maxT>]) and no such file or "
              "directory", model_arg);
    }
    if (T > cfg->max_seq_len) fatal("-t %d exceeds the model's max sequence length %d", T, cfg->max_seq_len);
    return params;
}

// The data side of a run: tokenizer, train and validation loaders, the HellaSwag examples
// (-h 1), the number of micro-steps per step, the number of steps, and the schedule.
typedef struct {
    Tokenizer tok;
    DataLoader train, val;
    HellaSwag hellaswag;
    int have_val, accum, max_steps;
    LRSchedule sched;
} TrainData;

// rank of world: each rank's loaders read its part of every global batch (B*T*world
// tokens); o->total_batch must be a multiple of that, and -1 becomes that (llm.c's default).
static inline void train_data_open(TrainData *d, TrainOptions *o, int vocab_size, int rank, int world) {
    memset(d, 0, sizeof *d);  // what a run does not use (no -h 1: no HellaSwag) stays empty for train_data_close
    if (o->total_batch == -1) {
        if ((long)o->B * o->T * world > INT32_MAX) fatal("-b * -t * ranks is too large for one step");
        o->total_batch = o->B * o->T * world;
    }
    if (o->total_batch % ((long)o->B * o->T * world))
        fatal("-d (total batch size) must be a multiple of B*T*ranks = %d*%d*%d = %ld tokens, got %d", o->B, o->T,
              world, (long)o->B * o->T * world, o->total_batch);
    tokenizer_init(&d->tok, o->tokenizer_dir);
    dataloader_init(&d->train, o->train_pattern, o->B, o->T, rank, world, o->shuffle, (uint64_t)o->seed, vocab_size);
    // -v 0 never evaluates, so its validation data is neither read nor held to the batch size
    d->have_val = o->val_pattern && *o->val_pattern && o->val_every > 0;
    if (d->have_val) dataloader_init(&d->val, o->val_pattern, o->B, o->T, rank, world, 0, 0, vocab_size);
    // token ids: a bad id found mid-run would stop it, so the validation split (read at
    // every evaluation) is checked now, and the training split too unless --check-data 0
    if (o->check_data) dataloader_check_all_ids(&d->train, rank == 0);
    if (d->have_val) dataloader_check_all_ids(&d->val, rank == 0);
    if (o->hellaswag) {
        hellaswag_load(&d->hellaswag, o->hellaswag_file, vocab_size);
        if (rank == 0)
            printf("hellaswag: %d examples from %s (longest %d tokens)\n", d->hellaswag.n, o->hellaswag_file,
                   d->hellaswag.longest);
    }
    d->accum = (int)(o->total_batch / ((long)o->B * o->T * world));
    d->max_steps = o->max_steps;
    if (d->max_steps < 0) {  // one epoch
        d->max_steps = (int)(dataloader_batches_per_epoch(&d->train) / d->accum);
        if (d->max_steps < 1) d->max_steps = 1;
    }
    d->sched = o->sched;
    d->sched.total_steps = d->max_steps;
}

// After any resume: --loader-threads 1 starts reading the training batches ahead.
static inline void train_data_start_reading(TrainData *d, const TrainOptions *o) {
    if (o->loader_threads) loader_thread_start(&d->train);
}

// The data stall over the run's steps: the time the training loop spent getting its
// batches (reading them, or waiting for the loader thread), ms per step; NAN without steps.
static inline double data_stall_ms(const TrainData *d, int steps) {
    return steps > 0 ? 1e3 * d->train.data_s / steps : NAN;
}

static inline void report_data_stall(const TrainData *d, const TrainOptions *o, int steps) {
    if (steps > 0)
        printf("data: %.2f ms per step getting the training batches (%s)\n", data_stall_ms(d, steps),
               o->loader_threads ? "from the loader thread" : "read in the training loop");
}

static inline void train_data_close(TrainData *d) {
    dataloader_free(&d->train);
    if (d->have_val) dataloader_free(&d->val);
    hellaswag_free(&d->hellaswag);
    tokenizer_free(&d->tok);
}

// Opens the run's logs in -o (rank 0; quiet: the other ranks, which log nothing). A resumed
// run (resume_step >= 0) cuts them back to their length at its checkpoint (run: what
// train_state_resume read) and appends; any other run starts them anew: -o held nothing of
// an earlier run, --overwrite 1 removed it, or -y 1 found nothing that could be resumed.
static inline void run_logger_open(Logger *lg, const RunDir *rd, int resume_step, const TrainState *run, int quiet) {
    FILE *log = NULL, *jsonl = NULL;
    char log_path[PATH_CAP] = "", jsonl_path[PATH_CAP] = "";
    if (rd->fd >= 0 && !quiet) {
        if (resume_step >= 0) {
            run_dir_cut_log(rd, "main.log", run->log_bytes);
            run_dir_cut_log(rd, "metrics.jsonl", run->json_bytes);
        }
        log = run_dir_open_log(rd, "main.log", resume_step >= 0);
        jsonl = run_dir_open_log(rd, "metrics.jsonl", resume_step >= 0);
        run_dir_path(rd, log_path, "main.log");
        run_dir_path(rd, jsonl_path, "metrics.jsonl");
    }
    logger_init(lg, log, log_path, jsonl, jsonl_path, quiet);
}

// ---------------------------------------------------------------------------
// The run's settings, recorded in the training state so that a resume can say what
// changed (TrainState.settings; the data loader's own position checks B, T and ranks).

enum { RS_STEPS, RS_B, RS_T, RS_TOTAL_BATCH, RS_LR, RS_SCHED, RS_WARMUP, RS_FINAL_FRAC, RS_WSD_FRAC,
       RS_WEIGHT_DECAY, RS_GRAD_CLIP, RS_WORLD, RS_SEED, RS_SHUFFLE, RS_OVERFIT };

static inline int32_t float_bits(float f) {
    int32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static inline void run_settings_pack(const TrainOptions *o, int max_steps, int world, int32_t r[STATE_SETTINGS]) {
    r[RS_STEPS] = max_steps;
    r[RS_B] = o->B;
    r[RS_T] = o->T;
    r[RS_TOTAL_BATCH] = o->total_batch;
    r[RS_LR] = float_bits(o->lr);
    r[RS_SCHED] = (int32_t)o->sched.kind;
    r[RS_WARMUP] = o->warmup;
    r[RS_FINAL_FRAC] = float_bits(o->final_frac);
    r[RS_WSD_FRAC] = float_bits(o->wsd_frac);
    r[RS_WEIGHT_DECAY] = float_bits(o->weight_decay);
    r[RS_GRAD_CLIP] = float_bits(o->grad_clip);
    r[RS_WORLD] = world;
    r[RS_SEED] = o->seed;
    r[RS_SHUFFLE] = o->shuffle;
    r[RS_OVERFIT] = o->overfit;
}

// Prints each setting that differs between the checkpoint's run and this one.
static inline void run_settings_report(const int32_t was[STATE_SETTINGS], const int32_t now[STATE_SETTINGS]) {
    static const char *const names[STATE_SETTINGS] = {
        "-x (steps)", "-b", "-t", "-d (tokens per step)", "-l (learning rate)", "-k (schedule)", "-u (warmup)",
        "-q (final lr fraction)", "--wsd-decay-fraction", "-c (weight decay)", "--grad-clip", "ranks", "--seed",
        "--shuffle", "-a"};
    static const int is_float[STATE_SETTINGS] = {0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0};
    for (int i = 0; i < STATE_SETTINGS; i++) {
        if (was[i] == now[i]) continue;
        if (i == RS_SCHED)
            printf("resume: %s was %s, now %s\n", names[i], lr_schedule_name((LRScheduleKind)was[i]),
                   lr_schedule_name((LRScheduleKind)now[i]));
        else if (is_float[i]) {
            float a, b;
            char ta[32], tb[32];
            memcpy(&a, &was[i], 4);
            memcpy(&b, &now[i], 4);
            printf("resume: %s was %s, now %s\n", names[i], float_text(ta, a), float_text(tb, b));
        } else printf("resume: %s was %d, now %d\n", names[i], was[i], now[i]);
    }
}

// ---------------------------------------------------------------------------
// What happens after a step (step1 = steps completed): each is due on its own period and
// at the end of the run; -v 0 and -g 0 mean never.

static inline int val_due(const TrainOptions *o, int have_val, int step1, int last) {
    return have_val && o->val_every > 0 && (step1 % o->val_every == 0 || last);
}

static inline int hellaswag_due(const TrainOptions *o, int step1, int last) {
    return o->hellaswag && o->val_every > 0 && (step1 % o->val_every == 0 || last);
}

static inline int sample_due(const TrainOptions *o, int can_sample, int step1, int last) {
    return can_sample && o->gen_tokens > 0 && o->sample_every > 0 && (step1 % o->sample_every == 0 || last);
}

// --trace and --memory-trace: opens program's trace for its steps and sets the memory
// trace's step (the first of them), checked against the run's steps (start_step: the steps
// done before this run, max_steps: its last); without --trace-steps, the two steps after the
// warm_up steps that the step times leave out, or the run's last ones. writer: this process
// writes the files (rank 0 of several).
static inline void trace_start(Trace *t, const char *program, const TrainOptions *o, int start_step, int max_steps,
                               int warm_up, int writer) {
    const int tracing = writer && o->trace_path && *o->trace_path;
    const int memory = writer && o->memory_trace && *o->memory_trace;
    int first = 0, last = 0;
    if (*o->trace_steps) {
        trace_steps_parse(o->trace_steps, &first, &last);  // checked by train_options_validate
        if (first <= start_step || last > max_steps)
            fatal("--trace-steps %s: this run trains steps %d to %d", o->trace_steps, start_step + 1, max_steps);
    } else {
        first = start_step + warm_up + 1;
        last = first + 1;
        if (last > max_steps) last = max_steps;
        if (first > last) first = last - 1 > start_step ? last - 1 : start_step + 1;
    }
    if ((tracing || memory) && start_step >= max_steps) {  // a finished run resumed: no step to trace
        printf("%s: the run has no step left to train (it finished at step %d): nothing is written\n",
               tracing ? "--trace" : "--memory-trace", max_steps);
        trace_open(t, program, NULL, first, last);
        memory_trace_init(&t->mem, NULL, first);
        return;
    }
    trace_open(t, program, tracing ? o->trace_path : NULL, first, last);
    memory_trace_init(&t->mem, memory ? o->memory_trace : NULL, first);
}

// -n: -1 at the end only, 0 never (llm.c's meaning), N every N steps and at the end
static inline int checkpoint_due(const TrainOptions *o, int step1, int last) {
    return o->out_dir && o->ckpt_every != 0 && ((o->ckpt_every > 0 && step1 % o->ckpt_every == 0) || last);
}

// How a sample fits its context of maxT tokens: the end-of-text token that starts it, the
// prompt's last *keep tokens, then *gen generated ones. Of the maxT - 1 positions after the
// start token, the prompt leaves room for -g tokens, or for half of them (rounded up) if -g
// asks for more, so that every sample generates something: a longer prompt keeps its last
// tokens, those the generated ones follow. -g beyond what is left is cut to it.
static inline void sample_fit(int prompt_len, int gen_tokens, int maxT, int *keep, int *gen) {
    int room = maxT > 1 ? maxT - 1 : 0, half = (room + 1) / 2;
    int reserve = gen_tokens < half ? gen_tokens : half;
    *keep = prompt_len < room - reserve ? prompt_len : room - reserve;
    *gen = gen_tokens < room - *keep ? gen_tokens : room - *keep;
}

static inline TokenVec prompt_tokens(const Tokenizer *tok, const char *prompt) {
    TokenVec tv = {0};
    if (prompt && *prompt) tokenizer_encode(tok, (const uint8_t *)prompt, strlen(prompt), &tv);
    return tv;
}

// Samples start from GPT-2's end-of-text token and print through its tokenizer, so a
// model whose vocabulary does not hold GPT-2's tokens cannot be sampled. When the run
// samples, says once what sample_fit will cut: a prompt too long for the context of maxT
// tokens (-t), and a -g beyond what the context leaves.
static inline int sampling_possible(const GPT2Config *cfg, const TrainOptions *o, const Tokenizer *tok, int maxT,
                                    int quiet) {
    if (cfg->vocab_size <= GPT2_EOT) {
        if (!quiet) printf("sampling: off: the model's vocabulary (%d tokens) does not hold GPT-2's (%d)\n",
                           cfg->vocab_size, GPT2_EOT + 1);
        return 0;
    }
    if (quiet || o->gen_tokens == 0 || o->sample_every == 0) return 1;
    TokenVec tv = prompt_tokens(tok, o->prompt);
    int keep, gen;
    sample_fit((int)tv.len, o->gen_tokens, maxT, &keep, &gen);
    if (keep < (int)tv.len)
        printf("sampling: --prompt is %zu tokens, too long for the samples' context (-t %d tokens, one of them the "
               "start token) with room to generate: samples start from its last %d tokens\n", tv.len, maxT, keep);
    if (gen < o->gen_tokens)
        printf("sampling: -g %d is more than the context (-t %d) leaves after the start token%s: samples generate "
               "%d tokens\n", o->gen_tokens, maxT, keep ? " and the prompt" : "", gen);
    tokenvec_free(&tv);
    return 1;
}

// Before a step's update: the limits above which its loss or gradient norm is an outlier
// (-sl / -sg against the recent steps' values; 0: none).
static inline void outlier_limits(const TrainOptions *o, const TrainState *run, AdamWConfig *h) {
    h->max_loss = recent_limit(&run->recent_loss, o->skip_loss_z);
    h->max_norm = recent_limit(&run->recent_norm, o->skip_norm_z);
}

// What became of a step's update: the rule of common/update_rule.h, which the update itself
// applied (AdamW on the host, or the GPU's kernel), under h's limits.
static inline UpdateFate update_fate(float loss, float norm, const AdamWConfig *h) {
    return update_rule(loss, norm, h->max_loss, h->max_norm);
}

// After a step: counts the skipped updates, adds the step's values to the recent ones
// (-sl / -sg), and stops the run after max skipped in a row (0: never), since a run that
// skips every update only burns time.
static inline void updates_record(TrainState *run, int step1, float loss, float norm, UpdateFate fate, int max) {
    int skipped = fate != UPDATE_APPLIED;
    run->skipped_in_a_row = skipped ? run->skipped_in_a_row + 1 : 0;
    run->skipped_total += skipped;
    recent_push(&run->recent_loss, loss);
    recent_push(&run->recent_norm, norm);
    if (max > 0 && run->skipped_in_a_row >= max)
        fatal("%d updates in a row were skipped for a non-finite or outlier loss or gradient norm (the last at step "
              "%d): the run has diverged, or its weights or data hold NaN/Inf; the checkpoints in -o are intact "
              "(lower -l, or raise --max-skipped-updates)", run->skipped_in_a_row, step1);
}

// AdamW's step count t for the update of step step1 (from 1): the updates applied so far
// plus this one, so that skipped steps do not advance the bias correction.
static inline int adamw_step_count(const TrainState *run, int step1) { return step1 - run->skipped_total; }

// Test hook: GPT2_TEST_OVERFLOW_STEPS=5,9 makes those steps' gradients non-finite, so that
// a short run exercises the skipped update (and in the fp16 build the loss scaler).
static inline int test_overflow_step(int step1) {
    const char *e = getenv("GPT2_TEST_OVERFLOW_STEPS");
    for (const char *p = e; p && *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v == step1) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

// One step, as the step line, its warning and its metrics record report it.
typedef struct {
    int step1, max_steps;
    float loss, norm, lr;
    double dt, mfu;             // seconds; MFU (NAN where there is none: the CPU trainer)
    double gflops;              // the CPU trainer's GFLOP/s (NAN for the GPU trainer)
    long tokens_per_step;
    double elapsed, eta;        // seconds since this run started, and to its last step
    UpdateFate fate;
    const AdamWConfig *h;       // the limits the update was given
} StepReport;

// Seconds since the run's first step started, and an estimate of those to its last step
// at the mean pace so far.
static inline void run_progress(double t_start, int start_step, int step1, int max_steps, double *elapsed,
                                double *eta) {
    *elapsed = wall_seconds() - t_start;
    *eta = *elapsed / (step1 - start_step) * (max_steps - step1);
}

// "1h02m", "4m05s", "12s"
static inline const char *duration_text(char *buf, size_t cap, double s) {
    long t = s > 0 && s < 1e8 ? (long)(s + 0.5) : 0;  // nothing to say before the first step
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
    return buf;
}

// The step line, the warning when the update was skipped, and the step's metrics record.
static inline void log_step(Logger *lg, const StepReport *r) {
    char perf[32], el[32], eta[32];
    if (isfinite(r->mfu)) snprintf(perf, sizeof perf, "MFU %.1f%%", 100.0 * r->mfu);
    else snprintf(perf, sizeof perf, "%.1f GFLOP/s", r->gflops);
    logger_printf(lg, "step %5d/%d | loss %.6f | norm %.4f | lr %.3e | %.1f ms | %.0f tok/s | %s | %s, ETA %s\n",
                  r->step1, r->max_steps, r->loss, r->norm, r->lr, r->dt * 1e3, r->tokens_per_step / r->dt, perf,
                  duration_text(el, sizeof el, r->elapsed), duration_text(eta, sizeof eta, r->eta));
    if (r->fate == UPDATE_NONFINITE)
        logger_printf(lg, "warning: step %d: non-finite %s; update skipped\n", r->step1,
                      isfinite(r->loss) ? "gradient norm" : "loss");
    else if (r->fate != UPDATE_APPLIED) {
        int is_loss = r->fate == UPDATE_OUTLIER_LOSS;
        logger_printf(lg, "warning: step %d: outlier %s (%.4g, above %.4g: -%s); update skipped\n", r->step1,
                      is_loss ? "loss" : "gradient norm", is_loss ? r->loss : r->norm,
                      is_loss ? r->h->max_loss : r->h->max_norm, is_loss ? "sl" : "sg");
    }
    char b[7][32];
    logger_json(lg, "{\"type\": \"step\", \"step\": %d, \"loss\": %s, \"norm\": %s, \"lr\": %s, \"ms\": %s, "
                "\"tokens_per_s\": %s, \"mfu\": %s, \"tokens\": %lld, \"skipped\": %d, \"elapsed_s\": %s}",
                r->step1, json_num(b[0], r->loss), json_num(b[1], r->norm), json_num(b[2], r->lr),
                json_num(b[3], r->dt * 1e3), json_num(b[4], r->tokens_per_step / r->dt), json_num(b[5], r->mfu),
                (long long)r->step1 * r->tokens_per_step, r->fate != UPDATE_APPLIED, json_num(b[6], r->elapsed));
}

// The first record of a run (and of each resumed part of it) in metrics.jsonl: what ran,
// on what model, with which settings. resumed_from: the checkpoint's step, or -1.
static inline void metrics_header(Logger *lg, const char *program, const char *build, const GPT2Config *c,
                                  const TrainOptions *o, int max_steps, int world, int resumed_from) {
    char b[6][32], from[32];
    if (resumed_from >= 0)
        snprintf(from, sizeof from, "%d", resumed_from);
    else
        snprintf(from, sizeof from, "null");
#ifndef GIT_COMMIT
#define GIT_COMMIT "unknown"
#endif
    logger_json(
        lg,
        "{\"type\": \"run\", \"program\": \"%s\", \"build\": \"%s\", \"git\": \"%s\", \"model\": "
        "{\"layers\": %d, \"heads\": %d, \"channels\": %d, \"max_seq_len\": %d, \"vocab\": %d, \"params\": %zu}, "
        "\"config\": {\"batch\": %d, \"seq_len\": %d, \"total_batch\": %d, \"max_steps\": %d, \"lr\": %s, "
        "\"schedule\": \"%s\", \"warmup\": %d, \"final_lr_fraction\": %s, \"weight_decay\": %s, "
        "\"grad_clip\": %s, \"skip_loss_z\": %s, \"skip_norm_z\": %s, \"ranks\": %d, \"seed\": %d}, "
        "\"resumed_from\": %s}",
        program, build, GIT_COMMIT, c->num_layers, c->num_heads, c->channels, c->max_seq_len, c->vocab_size,
        gpt2_num_real_params(c), o->B, o->T, o->total_batch, max_steps, json_num(b[0], o->lr),
        lr_schedule_name(o->sched.kind), o->warmup, json_num(b[1], o->final_frac), json_num(b[2], o->weight_decay),
        json_num(b[3], o->grad_clip), json_num(b[4], o->skip_loss_z), json_num(b[5], o->skip_norm_z), world, o->seed,
        from);
}

static inline void print_model_banner(const GPT2Config *cfg) {
    printf("model: L=%d H=%d C=%d maxT=%d V=%d (padded %d), %.2fM parameters\n", cfg->num_layers, cfg->num_heads,
           cfg->channels, cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size, gpt2_num_real_params(cfg) / 1e6);
}

// The training state's fields that every trainer fills the same way: the step, the RNG,
// the data loader's position and what the run carries (log length, skipped updates,
// settings). The trainer adds its optimizer arrays and its rank.
static inline TrainState train_state_for(const TrainState *run, int step, uint64_t rng, const DataLoader *loader) {
    TrainState s = *run;
    s.step = step;
    s.rng = rng;
    s.loss_scale = 1.0f;
    s.world_size = 1;
    DataLoaderPos pos = dataloader_get_pos(loader);
    memcpy(s.loader_pos, &pos, sizeof pos);
    s.loader_pos_bytes = (int)sizeof pos;
    return s;
}

// After train_state_read: the loader continues where the checkpoint's stopped, and the
// run's counters continue from the checkpoint's.
static inline void train_state_resume(const TrainState *s, DataLoader *loader, TrainState *run, uint64_t *rng) {
    DataLoaderPos pos;
    memcpy(&pos, s->loader_pos, sizeof pos);
    dataloader_set_pos(loader, pos);
    *rng = s->rng;
    run->skipped_in_a_row = s->skipped_in_a_row;
    run->skipped_total = s->skipped_total;
    run->recent_loss = s->recent_loss;
    run->recent_norm = s->recent_norm;
    run->log_bytes = s->log_bytes;  // where the logs are cut back to when they are opened
    run->json_bytes = s->json_bytes;
}

// Mean loss over max_batches (-1: all) batches of the validation split: batch_loss runs the
// model on one batch and adds its mean loss times weight to the trainer's accumulator;
// result returns the accumulated mean.
typedef struct {
    void (*batch_loss)(void *model, const int *inputs, const int *targets, float weight);
    float (*result)(void *model);
} EvalFns;

static inline float evaluate_split(DataLoader *val, int max_batches, int *inputs, int *targets, EvalFns f,
                                   void *model) {
    dataloader_reset(val);
    int64_t n = dataloader_batches_per_epoch(val);
    if (max_batches > 0 && n > max_batches) n = max_batches;
    for (int64_t i = 0; i < n; i++) {
        dataloader_next(val, inputs, targets);
        f.batch_loss(model, inputs, targets, 1.0f / (float)n);
    }
    return f.result(model);
}

// Fills logits[0..V) with the model's logits for the token after ids[0..n); ids has maxT
// entries, those past n hold the end-of-text token.
typedef void (*NextLogitsFn)(void *model, const int *ids, int n, float *logits);

// Draws an index from probs (n entries summing to ~1) with coin in [0,1).
static inline int sample_index(const float *probs, int n, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) return i;
    }
    return n - 1;
}

typedef struct {
    float p;
    int id;
} TokenProb;

// Most likely first; ties to the lower id, so the choice is the same on every machine.
static inline int cmp_token_prob(const void *a, const void *b) {
    const TokenProb *x = (const TokenProb *)a, *y = (const TokenProb *)b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

// Keeps in probs[0..V) the top_k most likely tokens (0: all) and, of those, the fewest
// whose probabilities reach top_p (1: all), renormalised; the others become 0.
static inline void truncate_distribution(float *probs, int V, int top_k, float top_p) {
    TokenProb *t = (TokenProb *)xmalloc((size_t)V * sizeof(TokenProb));
    for (int v = 0; v < V; v++) t[v] = (TokenProb){probs[v], v};
    qsort(t, (size_t)V, sizeof *t, cmp_token_prob);
    int keep = top_k > 0 && top_k < V ? top_k : V;
    double cum = 0.0;
    for (int i = 0; i < keep; i++) {
        cum += t[i].p;
        if (cum >= top_p) { keep = i + 1; break; }
    }
    double kept = 0.0;
    for (int i = 0; i < keep; i++) kept += t[i].p;
    for (int v = 0; v < V; v++) probs[v] = 0.0f;
    for (int i = 0; i < keep; i++) probs[t[i].id] = (float)(t[i].p / kept);
    free(t);
}

// Softmax of logits[0..V) at the given temperature into probs (may be the same array),
// cut to top_k / top_p (0 and 1: nothing cut), then a draw from it.
static inline int sample_from_logits(const float *logits, float *probs, int V, float temperature, int top_k,
                                     float top_p, uint64_t *rng) {
    float maxv = -FLT_MAX, sum = 0.0f, temp = temperature > 1e-4f ? temperature : 1e-4f;
    for (int v = 0; v < V; v++) maxv = fmaxf(maxv, logits[v]);
    for (int v = 0; v < V; v++) {
        probs[v] = expf((logits[v] - maxv) / temp);
        sum += probs[v];
    }
    for (int v = 0; v < V; v++) probs[v] /= sum;
    if ((top_k > 0 && top_k < V) || top_p < 1.0f) truncate_distribution(probs, V, top_k, top_p);
    return sample_index(probs, V, rng_uniform(rng));
}

// Prints "sample: <text>" for ids[1..n) (ids[0] is the end-of-text token that starts it).
static inline void log_sample(Logger *lg, const Tokenizer *tok, const int *ids, int n) {
    logger_printf(lg, "sample: ");
    for (int i = 1; i < n; i++) {
        size_t len;
        const uint8_t *bytes = tokenizer_token_bytes(tok, (uint32_t)ids[i], &len);
        if (bytes) logger_printf(lg, "%.*s", (int)len, (const char *)bytes);
    }
    logger_printf(lg, "\n");
}

// What the work between steps needs from a trainer (its model behind a pointer).
typedef struct {
    void *model;
    TrainData *data;
    const TrainOptions *o;
    TrainState *run;
    uint64_t *rng;
    Logger *lg;
    int *val_inputs, *val_targets;  // with --overfit, the training arrays hold the one batch
    RunDir *rd;                     // -o
    RankSumFn sum;                  // sums over the run's ranks (NULL: one process), for -nk's agreement
    const void *sum_ctx;
    Trace *trace;                   // --trace: the work between traced steps is in it too
} Trainer;

// What a trainer does between steps, behind its own functions (t: its Trainer).
typedef struct {
    float (*evaluate)(void *t);        // the mean validation loss
    HellaSwagScore (*hellaswag)(void *t);
    void (*sample)(void *t);           // prints a sample through the logger
    void (*save)(void *t, int step1);  // writes the checkpoint of step step1
} BetweenStepsFns;

// The HellaSwag score after step step1, on the console, in main.log and in metrics.jsonl.
static inline void log_hellaswag(Logger *lg, HellaSwagScore s, int T, int step1) {
    char b[32];
    double acc = (double)s.correct / (double)s.examples;
    logger_printf(lg, "hellaswag accuracy %.4f (%ld/%ld, step %d)\n", acc, s.correct, s.examples, step1);
    if (s.truncated)
        logger_printf(lg, "hellaswag: %d examples are longer than T+1 = %d tokens: their context was cut\n",
                      s.truncated, T + 1);
    logger_json(lg, "{\"type\": \"hellaswag\", \"step\": %d, \"accuracy\": %s, \"correct\": %ld, \"examples\": %ld}",
                step1, json_num(b, acc), s.correct, s.examples);
}

// After step step1: evaluation (validation loss, HellaSwag), then a sample, then the
// checkpoint (which records the log so far, for a resume to cut it back to). At the end of
// the run the sample comes after the checkpoint (final_sample), so a failing sample loses
// nothing. An error says which of these it came from.
static inline void after_step(const TrainOptions *o, int have_val, int can_sample, Logger *lg, TrainState *run,
                              int step1, int last, BetweenStepsFns f, Trainer *t) {
    char doing[64];
    if (val_due(o, have_val, step1, last)) {
        snprintf(doing, sizeof doing, "evaluating after step %d", step1);
        fatal_context_set(doing);
        trace_begin(t->trace, "evaluation", TRACE_CAT_BETWEEN);
        float vl = f.evaluate(t);
        trace_end(t->trace);
        char b[32];
        logger_printf(lg, "val loss %.6f (step %d)\n", vl, step1);
        logger_json(lg, "{\"type\": \"val\", \"step\": %d, \"val_loss\": %s}", step1, json_num(b, vl));
    }
    if (hellaswag_due(o, step1, last)) {
        snprintf(doing, sizeof doing, "running HellaSwag after step %d", step1);
        fatal_context_set(doing);
        trace_begin(t->trace, "hellaswag", TRACE_CAT_BETWEEN);
        HellaSwagScore score = f.hellaswag(t);
        trace_end(t->trace);
        log_hellaswag(lg, score, o->T, step1);
    }
    if (!last && sample_due(o, can_sample, step1, last)) {
        snprintf(doing, sizeof doing, "sampling after step %d", step1);
        fatal_context_set(doing);
        trace_begin(t->trace, "sample", TRACE_CAT_BETWEEN);
        f.sample(t);
        trace_end(t->trace);
    }
    if (checkpoint_due(o, step1, last)) {
        snprintf(doing, sizeof doing, "writing the checkpoint of step %d", step1);
        fatal_context_set(doing);
        run->log_bytes = logger_bytes(lg);
        run->json_bytes = logger_json_bytes(lg);
        trace_begin(t->trace, "checkpoint", TRACE_CAT_BETWEEN);
        f.save(t, step1);
        trace_end(t->trace);
        run_dir_checkpoint_done(t->rd, step1);
        run_dir_prune(t->rd, o->ckpt_keep, o->ckpt_major, t->sum, t->sum_ctx);
    }
    fatal_context_set(NULL);
}

// The end-of-run sample; also when a finished run is resumed, whose log was cut back to
// its checkpoint, before this sample.
static inline void final_sample(const TrainOptions *o, int can_sample, int max_steps, BetweenStepsFns f, Trainer *t) {
    if (!sample_due(o, can_sample, max_steps, 1)) return;
    char doing[64];
    snprintf(doing, sizeof doing, "sampling after the last step (%d)", max_steps);
    fatal_context_set(doing);
    f.sample(t);
    fatal_context_set(NULL);
}

// Generates up to gen_tokens tokens after the end-of-text token and the prompt (at most
// maxT in all: sample_fit) and prints them as text.
static inline void sample_text(const Tokenizer *tok, const TrainOptions *o, int maxT, int V, uint64_t *rng, Logger *lg,
                               NextLogitsFn next_logits, void *model) {
    int *ids = (int *)xmalloc((size_t)maxT * sizeof(int));
    for (int i = 0; i < maxT; i++) ids[i] = GPT2_EOT;
    TokenVec tv = prompt_tokens(tok, o->prompt);
    int keep, gen, n = 1;
    sample_fit((int)tv.len, o->gen_tokens, maxT, &keep, &gen);
    for (size_t i = tv.len - (size_t)keep; i < tv.len; i++) ids[n++] = (int)tv.data[i];
    tokenvec_free(&tv);
    float *probs = (float *)xmalloc((size_t)V * sizeof(float));
    for (int step = 0; step < gen; step++) {
        next_logits(model, ids, n, probs);
        ids[n++] = sample_from_logits(probs, probs, V, o->temperature, o->top_k, o->top_p, rng);
    }
    log_sample(lg, tok, ids, n);
    free(probs);
    free(ids);
}

#endif // COMMON_TRAIN_COMMON_H
