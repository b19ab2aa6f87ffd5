// train_data.h: the data side of a run: tokenizer, train and validation loaders (read
// ahead by a thread with --loader-threads 1), the HellaSwag examples, the micro-steps per
// step, the number of steps and the learning-rate schedule.
#ifndef COMMON_TRAIN_DATA_H
#define COMMON_TRAIN_DATA_H
#include "train_options.h"
#include "dataloader.h"
#include "hellaswag.h"
#include "loader_thread.h"
#include "tokenizer.h"

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
// tokens); o->total_batch (resolved: train_options_resolve_total_batch) must be a multiple of that.
static inline void train_data_open(TrainData *d, const TrainOptions *o, int vocab_size, int rank, int world) {
    memset(d, 0, sizeof *d);  // what a run does not use (no -h 1: no HellaSwag) stays empty for train_data_close
    if (o->total_batch == -1) fatal("internal: -d -1 reached the data unresolved");
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
#endif // COMMON_TRAIN_DATA_H
