// outlier.h: llm.c's -sl / -sg, skipping the update of a step whose loss or gradient norm
// is an outlier: its z-score against the last OUTLIER_WINDOW steps' values above the flag's
// threshold. The trainers turn the threshold into a limit on the value before the update
// (recent_limit), so the GPU decides on the device, with no extra host sync. The windows
// are part of the training state, so a resumed run skips exactly what the straight one did.
#ifndef COMMON_OUTLIER_H
#define COMMON_OUTLIER_H
#include <math.h>
#include <string.h>

#define OUTLIER_WINDOW 128

typedef struct {
    int count;                     // values held, up to OUTLIER_WINDOW
    float values[OUTLIER_WINDOW];  // oldest first
} RecentValues;

// Adds a step's value (non-finite values are not part of the statistics).
static inline void recent_push(RecentValues *r, float x) {
    if (!isfinite(x)) return;
    if (r->count < OUTLIER_WINDOW) {
        r->values[r->count++] = x;
        return;
    }
    memmove(r->values, r->values + 1, (OUTLIER_WINDOW - 1) * sizeof(float));
    r->values[OUTLIER_WINDOW - 1] = x;
}

// The largest value whose z-score against the window is at most z: mean + z * std (the
// population deviation, summed in a fixed order). 0, meaning no limit, with z == 0, before
// the window is full, or when its values are all equal (every z-score would be 0).
static inline float recent_limit(const RecentValues *r, float z) {
    if (z <= 0.0f || r->count < OUTLIER_WINDOW) return 0.0f;
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < r->count; i++) sum += r->values[i];
    double mean = sum / r->count;
    for (int i = 0; i < r->count; i++) sq += (r->values[i] - mean) * (r->values[i] - mean);
    double sd = sqrt(sq / r->count);
    return sd > 0.0 ? (float)(mean + z * sd) : 0.0f;
}

#endif  // COMMON_OUTLIER_H
