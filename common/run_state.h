// run_state.h: what a run carries from step to step and through its checkpoints besides
// the weights and moments: its settings (so that a resume says what changed), the skipped
// updates and the recent losses and norms of -sl / -sg, and the training state's common
// fields (common/checkpoint.h's TrainState).
#ifndef COMMON_RUN_STATE_H
#define COMMON_RUN_STATE_H
#include "train_options.h"
#include "checkpoint.h"
#include "dataloader.h"
#include "outlier.h"
#include "update_rule.h"
#include "test_hooks.h"

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

// Test hook: whether GPT2_TEST_OVERFLOW_STEPS (common/test_hooks.h) names step step1, whose
// gradients the trainer then makes non-finite, so that a short run exercises the skipped
// update (and in the fp16 build the loss scaler).
static inline int test_overflow_step(int step1) {
    const TestHooks *h = test_hooks();
    for (int i = 0; i < h->n_overflow_steps; i++)
        if (h->overflow_steps[i] == step1) return 1;
    return 0;
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
#endif // COMMON_RUN_STATE_H
