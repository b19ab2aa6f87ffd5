// loss_scaler.h: fp16's dynamic loss scaling, as a small state machine the GPU trainer
// calls once a step (and the unit test drives directly). The backward computes the
// gradient of S * loss, so small gradients stay above fp16's smallest normal; the
// gradients are divided by S before they are used. A step whose gradient norm is not
// finite (an overflow) skips its update and halves S; WINDOW clean steps in a row double
// it. The state (S and the clean-step count) is part of the training state.
#ifndef COMMON_LOSS_SCALER_H
#define COMMON_LOSS_SCALER_H
#include "../../common/util.h"
#include "../../common/test_hooks.h"
#include <math.h>

#define LOSS_SCALE_INIT 65536.0f
#define LOSS_SCALE_WINDOW 1000
#define LOSS_SCALE_MIN 1.0f
#define LOSS_SCALE_MAX 16777216.0f

typedef struct {
    float scale;     // S
    int good_steps;  // clean steps since S last changed
    int window;      // clean steps that double S
} LossScaler;

// Test hook (common/test_hooks.h): GPT2_TEST_LOSS_SCALE_WINDOW=N replaces the window of
// 1000 steps, so that a short run exercises the doubling (and GPT2_TEST_OVERFLOW_STEPS the
// halving).
static inline void loss_scaler_init(LossScaler *s, float scale) {
    s->scale = scale;
    s->good_steps = 0;
    int w = test_hooks()->loss_scale_window;
    s->window = w > 0 ? w : LOSS_SCALE_WINDOW;
}

// After a step with its (unscaled) loss and gradient norm: returns -1 if S was halved
// (an overflow: the update was skipped), 1 if it was doubled, 0 otherwise. A non-finite
// loss is the model's failure, not an overflow of the scaled gradients: S stays.
static inline int loss_scaler_update(LossScaler *s, float loss, float norm) {
    if (!isfinite(loss)) return 0;
    if (!isfinite(norm)) {
        s->scale = fmaxf(s->scale * 0.5f, LOSS_SCALE_MIN);
        s->good_steps = 0;
        return -1;
    }
    if (++s->good_steps >= s->window) {
        s->good_steps = 0;
        if (s->scale < LOSS_SCALE_MAX) {
            s->scale = fminf(s->scale * 2.0f, LOSS_SCALE_MAX);
            return 1;
        }
    }
    return 0;
}

#endif // COMMON_LOSS_SCALER_H
