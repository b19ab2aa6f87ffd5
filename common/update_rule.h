// update_rule.h: the one rule that decides whether a step's update is applied, for the CPU
// trainer's AdamW, the GPU's AdamW kernel (kernels/adamw.cuh, which decides on the device so
// that the host never waits for the step's loss and norm) and the step's report
// (common/run_state.h's update_fate). A non-finite loss or gradient norm skips the update,
// and so does one above its outlier limit (-sl / -sg, common/outlier.h; 0: no limit).
#ifndef COMMON_UPDATE_RULE_H
#define COMMON_UPDATE_RULE_H
#include <math.h>

#ifdef __CUDACC__
#define UPDATE_RULE_FN static inline __host__ __device__
#else
#define UPDATE_RULE_FN static inline
#endif

typedef enum { UPDATE_APPLIED, UPDATE_NONFINITE, UPDATE_OUTLIER_LOSS, UPDATE_OUTLIER_NORM } UpdateFate;

UPDATE_RULE_FN UpdateFate update_rule(float loss, float norm, float max_loss, float max_norm) {
    if (!isfinite(loss) || !isfinite(norm)) return UPDATE_NONFINITE;
    if (max_loss > 0.0f && loss > max_loss) return UPDATE_OUTLIER_LOSS;
    if (max_norm > 0.0f && norm > max_norm) return UPDATE_OUTLIER_NORM;
    return UPDATE_APPLIED;
}

#endif // COMMON_UPDATE_RULE_H
