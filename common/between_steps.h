// between_steps.h: the work between training steps, the same in both trainers behind
// their functions: when evaluation, HellaSwag, a sample and a checkpoint are due, the
// validation loss, --trace's window, and after_step's order (the checkpoint last, so
// that it records the log so far).
#ifndef COMMON_BETWEEN_STEPS_H
#define COMMON_BETWEEN_STEPS_H
#include "train_options.h"
#include "train_data.h"
#include "run_state.h"
#include "run_dir.h"
#include "sampling.h"
#include "hellaswag.h"
#include "logger.h"
#include "trace.h"

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
#endif // COMMON_BETWEEN_STEPS_H
