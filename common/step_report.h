// step_report.h: what a run says: its logs in -o opened, the first record of
// metrics.jsonl, the model's banner, and each step's line, warning and record.
#ifndef COMMON_STEP_REPORT_H
#define COMMON_STEP_REPORT_H
#include "train_options.h"
#include "checkpoint.h"
#include "logger.h"
#include "run_dir.h"
#include "update_rule.h"

// run (resume_step >= 0) cuts them back to their length at its checkpoint (run: what
// train_state_resume read) and appends; any other run starts them anew: -o held nothing of
// an earlier run, --overwrite 1 removed it, or -y 1 found nothing that could be resumed.
static inline void run_logger_open(Logger *lg, const RunDir *rd, int resume_step, const TrainState *run, int quiet) {
    FILE *log = NULL, *jsonl = NULL;
    char log_path[PATH_CAP] = "", jsonl_path[PATH_CAP] = "";
    if (rd->fd >= 0 && !quiet) {
        if (resume_step >= 0) {
            run_dir_cut_log(rd, "main.log", run->log_bytes);
            run_dir_cut_log(rd, "metrics.jsonl", run->json_bytes);
        }
        log = run_dir_open_log(rd, "main.log", resume_step >= 0);
        jsonl = run_dir_open_log(rd, "metrics.jsonl", resume_step >= 0);
        run_dir_path(rd, log_path, "main.log");
        run_dir_path(rd, jsonl_path, "metrics.jsonl");
    }
    logger_init(lg, log, log_path, jsonl, jsonl_path, quiet);
}

// One step, as the step line, its warning and its metrics record report it.
typedef struct {
    int step1, max_steps;
    float loss, norm, lr;
    double dt, mfu;             // seconds; MFU (NAN where there is none: the CPU trainer)
    double gflops;              // the CPU trainer's GFLOP/s (NAN for the GPU trainer)
    long tokens_per_step;
    double elapsed, eta;        // seconds since this run started, and to its last step
    UpdateFate fate;
    const AdamWConfig *h;       // the limits the update was given
} StepReport;

// Seconds since the run's first step started, and an estimate of those to its last step
// at the mean pace so far.
static inline void run_progress(double t_start, int start_step, int step1, int max_steps, double *elapsed,
                                double *eta) {
    *elapsed = wall_seconds() - t_start;
    *eta = *elapsed / (step1 - start_step) * (max_steps - step1);
}

// "1h02m", "4m05s", "12s"
static inline const char *duration_text(char *buf, size_t cap, double s) {
    long t = s > 0 && s < 1e8 ? (long)(s + 0.5) : 0;  // nothing to say before the first step
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
    return buf;
}

// The step line, the warning when the update was skipped, and the step's metrics record.
static inline void log_step(Logger *lg, const StepReport *r) {
    char perf[32], el[32], eta[32];
    if (isfinite(r->mfu)) snprintf(perf, sizeof perf, "MFU %.1f%%", 100.0 * r->mfu);
    else snprintf(perf, sizeof perf, "%.1f GFLOP/s", r->gflops);
    logger_printf(lg, "step %5d/%d | loss %.6f | norm %.4f | lr %.3e | %.1f ms | %.0f tok/s | %s | %s, ETA %s\n",
                  r->step1, r->max_steps, r->loss, r->norm, r->lr, r->dt * 1e3, r->tokens_per_step / r->dt, perf,
                  duration_text(el, sizeof el, r->elapsed), duration_text(eta, sizeof eta, r->eta));
    if (r->fate == UPDATE_NONFINITE)
        logger_printf(lg, "warning: step %d: non-finite %s; update skipped\n", r->step1,
                      isfinite(r->loss) ? "gradient norm" : "loss");
    else if (r->fate != UPDATE_APPLIED) {
        int is_loss = r->fate == UPDATE_OUTLIER_LOSS;
        logger_printf(lg, "warning: step %d: outlier %s (%.4g, above %.4g: -%s); update skipped\n", r->step1,
                      is_loss ? "loss" : "gradient norm", is_loss ? r->loss : r->norm,
                      is_loss ? r->h->max_loss : r->h->max_norm, is_loss ? "sl" : "sg");
    }
    char b[7][32];
    logger_json(lg, "{\"type\": \"step\", \"step\": %d, \"loss\": %s, \"norm\": %s, \"lr\": %s, \"ms\": %s, "
                "\"tokens_per_s\": %s, \"mfu\": %s, \"tokens\": %lld, \"skipped\": %d, \"elapsed_s\": %s}",
                r->step1, json_num(b[0], r->loss), json_num(b[1], r->norm), json_num(b[2], r->lr),
                json_num(b[3], r->dt * 1e3), json_num(b[4], r->tokens_per_step / r->dt), json_num(b[5], r->mfu),
                (long long)r->step1 * r->tokens_per_step, r->fate != UPDATE_APPLIED, json_num(b[6], r->elapsed));
}

// The first record of a run (and of each resumed part of it) in metrics.jsonl: what ran,
// on what model, with which settings. resumed_from: the checkpoint's step, or -1.
static inline void metrics_header(Logger *lg, const char *program, const char *build, const GPT2Config *c,
                                  const TrainOptions *o, int max_steps, int world, int resumed_from) {
    char b[6][32], from[32];
    if (resumed_from >= 0)
        snprintf(from, sizeof from, "%d", resumed_from);
    else
        snprintf(from, sizeof from, "null");
#ifndef GIT_COMMIT
#define GIT_COMMIT "unknown"
#endif
    logger_json(
        lg,
        "{\"type\": \"run\", \"program\": \"%s\", \"build\": \"%s\", \"git\": \"%s\", \"model\": "
        "{\"layers\": %d, \"heads\": %d, \"channels\": %d, \"max_seq_len\": %d, \"vocab\": %d, \"params\": %zu}, "
        "\"config\": {\"batch\": %d, \"seq_len\": %d, \"total_batch\": %d, \"max_steps\": %d, \"lr\": %s, "
        "\"schedule\": \"%s\", \"warmup\": %d, \"final_lr_fraction\": %s, \"weight_decay\": %s, "
        "\"grad_clip\": %s, \"skip_loss_z\": %s, \"skip_norm_z\": %s, \"ranks\": %d, \"seed\": %d}, "
        "\"resumed_from\": %s}",
        program, build, GIT_COMMIT, c->num_layers, c->num_heads, c->channels, c->max_seq_len, c->vocab_size,
        gpt2_num_real_params(c), o->B, o->T, o->total_batch, max_steps, json_num(b[0], o->lr),
        lr_schedule_name(o->sched.kind), o->warmup, json_num(b[1], o->final_frac), json_num(b[2], o->weight_decay),
        json_num(b[3], o->grad_clip), json_num(b[4], o->skip_loss_z), json_num(b[5], o->skip_norm_z), world, o->seed,
        from);
}

static inline void print_model_banner(const GPT2Config *cfg) {
    printf("model: L=%d H=%d C=%d maxT=%d V=%d (padded %d), %.2fM parameters\n", cfg->num_layers, cfg->num_heads,
           cfg->channels, cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size, gpt2_num_real_params(cfg) / 1e6);
}
#endif // COMMON_STEP_REPORT_H
