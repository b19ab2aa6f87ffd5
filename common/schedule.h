// schedule.h: learning-rate schedules. All share linear warmup over warmup_steps, then:
//   cosine    lr -> lr*final_frac along a half cosine
//   linear    lr -> lr*final_frac linearly
//   constant  lr
//   wsd       warmup-stable-decay: lr until the last decay_frac of the steps, then
//             linearly down to lr*final_frac
#ifndef COMMON_SCHEDULE_H
#define COMMON_SCHEDULE_H
#include "util.h"
#include <math.h>

typedef enum { LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD } LRScheduleKind;

typedef struct {
    LRScheduleKind kind;
    float lr, final_frac, decay_frac;
    int warmup_steps, total_steps;
} LRSchedule;

static const char *const LR_SCHEDULE_NAMES[] = {"cosine", "linear", "constant", "wsd"};

// Returns 0 if name is not a schedule.
static inline int lr_schedule_kind_from_name(const char *name, LRScheduleKind *kind) {
    for (int k = LR_COSINE; k <= LR_WSD; k++)
        if (!strcmp(name, LR_SCHEDULE_NAMES[k])) { *kind = (LRScheduleKind)k; return 1; }
    return 0;
}

static inline const char *lr_schedule_name(LRScheduleKind kind) {
    return kind >= LR_COSINE && kind <= LR_WSD ? LR_SCHEDULE_NAMES[kind] : "unknown";
}

// step counts from 0.
static inline float lr_at_step(const LRSchedule *s, int step) {
    if (step < s->warmup_steps) return s->lr * (float)(step + 1) / (float)s->warmup_steps;
    if (s->kind == LR_CONSTANT || s->total_steps <= s->warmup_steps) return s->lr;
    float lo = s->lr * s->final_frac;
    if (s->kind == LR_WSD) {
        int decay_steps = (int)(s->decay_frac * (float)s->total_steps);
        int decay_start = s->total_steps - decay_steps;
        if (step < decay_start || decay_steps <= 0) return s->lr;
        float t = (float)(step - decay_start) / (float)decay_steps;
        return s->lr + (lo - s->lr) * fminf(t, 1.0f);
    }
    float t = (float)(step - s->warmup_steps) / (float)(s->total_steps - s->warmup_steps);
    if (t > 1.0f) t = 1.0f;
    if (s->kind == LR_LINEAR) return s->lr + (lo - s->lr) * t;
    return lo + 0.5f * (s->lr - lo) * (1.0f + cosf((float)M_PI * t));
}

#endif // COMMON_SCHEDULE_H
