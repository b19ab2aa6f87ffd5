// step_meter.h: the GPU trainer's timing and energy over a run's steps. Steps after the
// warm-up (the steady state) are timed: after the first 10 steps, or after the first alone
// when a step holds 10 micro-steps or more (it warms up within itself, and a GPT-2 1.5B step
// of 524,288 tokens takes seconds); the board's energy counter (gpu/host/energy.h) is
// read where the timed steps start and end, and around the work between steps
// (evaluation, sampling, checkpoints), whose energy is not the steps'. It is never read
// inside a step: a read takes milliseconds (docs/performance.md), and the counter moves
// every ~100 ms.
#ifndef COMMON_STEP_METER_H
#define COMMON_STEP_METER_H
#include "../../common/util.h"
#include "energy.h"
#include "../../common/run_summary.h"

#define STEP_METER_WARMUP 10  // steps left out of the means (micro-steps, for long steps)
// The shortest timed window whose J/step is printed: the counter moves about every 100 ms,
// so over a shorter window the figure is off by 10% or more
#define STEP_METER_MIN_ENERGY_S 1.0

typedef struct {
    int start_step, warmup, timed_steps;
    double t0, sum_dt, e_start, e_other, e_pause;
    EnergyMeter energy;
} StepMeter;

// pci_bus_id: the GPU whose board is measured (as cudaDeviceGetPCIBusId writes it);
// micro_steps: per step.
// the steps left out of the means for steps of micro_steps each
static inline int step_meter_warmup_steps(int micro_steps) { return micro_steps >= STEP_METER_WARMUP ? 1 : STEP_METER_WARMUP; }

static inline void step_meter_init(StepMeter *sm, int start_step, int micro_steps, const char *pci_bus_id) {
    memset(sm, 0, sizeof *sm);
    sm->start_step = start_step;
    sm->warmup = step_meter_warmup_steps(micro_steps);
    energy_open(&sm->energy, pci_bus_id);
}

static inline int step_meter_timed(const StepMeter *sm, int step) {
    return step - sm->start_step >= sm->warmup;
}

static inline void step_meter_begin(StepMeter *sm, int step) {
    if (step - sm->start_step == sm->warmup) sm->e_start = energy_joules(&sm->energy);
    sm->t0 = wall_seconds();
}

// The step's wall time (after its host sync), counted when the step is timed.
static inline double step_meter_end(StepMeter *sm, int step) {
    double dt = wall_seconds() - sm->t0;
    if (step_meter_timed(sm, step)) {
        sm->sum_dt += dt;
        sm->timed_steps++;
    }
    return dt;
}

// Around work between steps (other: whether there is any): its energy is left out.
static inline void step_meter_pause(StepMeter *sm, int step, int other) {
    if (other && step_meter_timed(sm, step)) sm->e_pause = energy_joules(&sm->energy);
}

static inline void step_meter_resume(StepMeter *sm, int step, int other) {
    if (other && step_meter_timed(sm, step)) sm->e_other += energy_joules(&sm->energy) - sm->e_pause;
}

// Whether the timed steps have a J/step: every read of the counter worked and the window
// lasted STEP_METER_MIN_ENERGY_S or more.
static inline int step_meter_energy_measured(const StepMeter *sm) {
    return sm->energy.get_energy && sm->sum_dt >= STEP_METER_MIN_ENERGY_S;
}

// The energy line of step_meter_report for the timed steps first..last_step.
static inline void step_meter_print_energy(FILE *f, const StepMeter *sm, double joules, int first, int last_step,
                                           const char *board) {
    if (!sm->energy.get_energy)
        fprintf(f, "energy: not measured (%s)\n", sm->energy.why);
    else if (!step_meter_energy_measured(sm))
        fprintf(f, "energy over steps %d..%d: not measured (the timed steps took %.2f s; the board's counter, which "
                "moves about every 100 ms, needs %.0f s or more)\n", first, last_step, sm->sum_dt,
                STEP_METER_MIN_ENERGY_S);
    else
        fprintf(f, "energy over steps %d..%d (NVML board counter%s): %.1f J/step, %.0f W mean\n", first, last_step,
                board, joules / sm->timed_steps, joules / sm->sum_dt);
}

// Prints the means over the timed steps (last_step: the run's last step, from 1), puts them
// into out (when not NULL: the timed window, ms/step, tokens/s, MFU and J/step, NAN where
// the console says there is none; its other figures are left as they are) and closes the
// energy counter.
static inline void step_meter_report(StepMeter *sm, int last_step, double tokens_per_step, double flops_per_step,
                                     double peak_flops, int print, const char *board, RunSummary *out) {
    const int n = sm->timed_steps;
    double joules = n > 0 ? energy_joules(&sm->energy) - sm->e_start - sm->e_other : 0.0;
    if (print && n > 0) {
        int first = sm->start_step + sm->warmup + 1;
        printf("mean over steps %d..%d: %.1f ms/step, %.0f tok/s, MFU %.1f%%\n", first, last_step, 1e3 * sm->sum_dt / n,
               tokens_per_step * n / sm->sum_dt, 100.0 * flops_per_step * n / sm->sum_dt / peak_flops);
        step_meter_print_energy(stdout, sm, joules, first, last_step, board);
    }
    if (out) {
        run_summary_window(out, last_step, n, sm->sum_dt, tokens_per_step);
        out->mfu = n > 0 ? flops_per_step * n / sm->sum_dt / peak_flops : NAN;
        out->joules_per_step = n > 0 && step_meter_energy_measured(sm) ? joules / n : NAN;
    }
    energy_close(&sm->energy);
}

#endif // COMMON_STEP_METER_H
