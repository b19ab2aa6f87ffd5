// run_summary.h: the record that ends a run's metrics.jsonl: the run's speed, energy and
// memory in one place (docs/formats.md#metrics-file). Scripts and studies read a run's figures
// from it, so that neither the console's wording nor its rounding is an interface. Both
// trainers fill one at the end of a run, the GPU trainer's timed steps through
// gpu/host/step_meter.h; a figure a run does not have is NAN and written as null.
#ifndef COMMON_RUN_SUMMARY_H
#define COMMON_RUN_SUMMARY_H
#include "logger.h"
#include "util.h"
#include <math.h>

typedef struct {
    int first_step, last_step, timed_steps;  // the steps the means are over, from 1; 0 timed: none
    double ms_per_step, tokens_per_s;        // means over the timed steps
    double mfu;                              // a fraction of the peak (the GPU trainer)
    double gflops;                           // GFLOP/s (the CPU trainer)
    double joules_per_step;                  // the GPU board's energy counter
    double device_peak_mib, host_peak_mib;   // memory at peak, MiB
    double data_stall_ms;                    // per step, the time spent getting the training batches
    int skipped_updates;                     // since the run began (a resumed run's earlier parts included)
} RunSummary;

static inline void run_summary_init(RunSummary *s) {
    s->first_step = s->last_step = s->timed_steps = 0;
    s->ms_per_step = s->tokens_per_s = s->mfu = s->gflops = s->joules_per_step = NAN;
    s->device_peak_mib = s->host_peak_mib = s->data_stall_ms = NAN;
    s->skipped_updates = 0;
}

// The timed steps are the last timed_steps of a run ending at last_step, which took `seconds`
// in all: the window and its mean time and throughput. With none timed, first_step is
// last_step + 1 (an empty window) and the means stay NAN.
static inline void run_summary_window(RunSummary *s, int last_step, int timed_steps, double seconds,
                                      double tokens_per_step) {
    if (timed_steps < 0) timed_steps = 0;
    s->last_step = last_step;
    s->timed_steps = timed_steps;
    s->first_step = last_step - timed_steps + 1;
    if (timed_steps == 0) return;
    s->ms_per_step = 1e3 * seconds / timed_steps;
    s->tokens_per_s = tokens_per_step * timed_steps / seconds;
}

// This process's peak resident host memory, MiB; NAN where /proc does not say.
static inline double run_host_peak_mib(void) {
    size_t bytes = host_peak_bytes();
    return bytes ? bytes / (1024.0 * 1024.0) : NAN;
}

static inline void log_run_summary(Logger *lg, const RunSummary *s) {
    char b[8][32];
    logger_json(lg,
                "{\"type\": \"summary\", \"first_step\": %d, \"last_step\": %d, \"timed_steps\": %d, "
                "\"ms_per_step\": %s, \"tokens_per_s\": %s, \"mfu\": %s, \"gflops\": %s, \"joules_per_step\": %s, "
                "\"device_peak_mib\": %s, \"host_peak_mib\": %s, \"data_stall_ms\": %s, \"skipped_updates\": %d}",
                s->first_step, s->last_step, s->timed_steps, json_num(b[0], s->ms_per_step),
                json_num(b[1], s->tokens_per_s), json_num(b[2], s->mfu), json_num(b[3], s->gflops),
                json_num(b[4], s->joules_per_step), json_num(b[5], s->device_peak_mib),
                json_num(b[6], s->host_peak_mib), json_num(b[7], s->data_stall_ms), s->skipped_updates);
}

#endif // COMMON_RUN_SUMMARY_H
