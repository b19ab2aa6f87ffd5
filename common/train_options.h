// train_options.h: the options both trainers take (TrainOptions: one table of flags, one set
// of defaults, one validation before any large allocation or GPU work) and AdamW's
// per-step settings; the output files options name are checked against the run's inputs
// and files here too.
#ifndef COMMON_TRAIN_OPTIONS_H
#define COMMON_TRAIN_OPTIONS_H
#include "util.h"
#include "args.h"
#include "run_dir.h"
#include "schedule.h"
#include "trace.h"
#include <glob.h>
#include <math.h>

typedef struct {
    const char *train_pattern, *val_pattern, *model_arg, *out_dir, *sched_name, *tokenizer_dir, *prompt;
    const char *hellaswag_file;
    const char *trace_path, *trace_steps;  // --trace FILE and its steps (common/trace.h)
    const char *memory_trace;             // --memory-trace FILE (common/memory_trace.h)
    const char *prompts_file;             // --prompts FILE: --generate's prompts, one a line
    int B, T, total_batch, max_steps, warmup, val_every, val_batches, sample_every, gen_tokens;
    int ckpt_every, resume, overwrite, overfit, seed, shuffle, check_data, max_skipped, hellaswag;
    int ckpt_keep, ckpt_major, top_k, loader_threads;
    int generate, kv_cache;  // --generate: sample from -e and exit (common/generate.h); sampling's KV cache
    int num_samples;         // --generate: samples of each prompt
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
    o->num_samples = 1;
}

// Options both trainers take: a trainer's option table starts with these and adds its own.
#define TRAIN_OPTIONS_COUNT 46
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
    args_add(t, NULL, "--num-samples", ARG_INT, &o->num_samples,
             "--generate: samples of each prompt, generated together (sample r of the run draws with --seed + r)");
    args_add(t, NULL, "--prompts", ARG_STRING, &o->prompts_file,
             "--generate: a text file of prompts, one a line, each continued --num-samples times (instead of "
             "--prompt)");
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
    // -1 becomes B*T*ranks once the ranks are known (train_options_resolve_total_batch)
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
    if (o->num_samples < 1) fatal("--num-samples must be >= 1, got %d", o->num_samples);
    if (!o->generate && (o->num_samples != 1 || (o->prompts_file && *o->prompts_file)))
        fatal("--num-samples and --prompts are --generate's: the samples printed during training continue --prompt "
              "once");
    if (o->prompts_file && *o->prompts_file && *o->prompt)
        fatal("--prompt and --prompts %s: give one of them", o->prompts_file);
    if (o->ckpt_every < -1) fatal("-n must be -1 (at the end only), 0 (never) or a number of steps");
    if (o->val_batches != -1 && o->val_batches < 1)
        fatal("-m (validation batches) must be -1 (whole split) or at least 1, got %d", o->val_batches);
    if (o->out_dir && !*o->out_dir) fatal("-o: an empty directory name (give a directory, or leave -o out)");
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

// -d -1 (llm.c's default): a step is one micro-batch on each of the world's ranks
static inline void train_options_resolve_total_batch(TrainOptions *o, int world) {
    if (o->total_batch != -1) return;
    if ((long)o->B * o->T * world > INT32_MAX) fatal("-b * -t * ranks is too large for one step");
    o->total_batch = o->B * o->T * world;
}
#endif // COMMON_TRAIN_OPTIONS_H
