// train_common.h: what the CPU and GPU trainers share around the model, one concern a
// header: the options (train_options.h), -e into parameters (model_source.h), the data
// (train_data.h), what a run carries (run_state.h), what it says (step_report.h), sampling
// (sampling.h) and the work between steps (between_steps.h); the run directory is
// common/run_dir.h.
#ifndef COMMON_TRAIN_COMMON_H
#define COMMON_TRAIN_COMMON_H
#include "train_options.h"
#include "model_source.h"
#include "train_data.h"
#include "run_state.h"
#include "step_report.h"
#include "sampling.h"
#include "between_steps.h"
#endif // COMMON_TRAIN_COMMON_H
