// test_step_rules.c: the two rules the trainers apply at every step before the update, each
// against the formula it implements, computed here in double precision:
//   - the learning rate (common/schedule.h): linear warmup, then cosine, linear, constant
//     or warmup-stable-decay down to lr * final_frac, and lo past the last step;
//   - the outlier limit of -sl / -sg (common/outlier.h): no limit until the window of 128
//     values is full, then mean + z * population deviation; non-finite values stay out of
//     the window; the oldest value leaves it first.
#include "testutil.h"
#include "../../common/schedule.h"
#include "../../common/outlier.h"

static int close_to(double got, double want) { return fabs(got - want) <= 1e-6 * fmax(1.0, fabs(want)); }

static LRSchedule schedule(LRScheduleKind kind, int warmup, int total) {
    LRSchedule s = {kind, 6e-4f, 0.1f, 0.2f, warmup, total};
    return s;
}

// the schedule after warmup as a function of t in [0, 1] (the share of the steps after warmup)
static double after_warmup(LRScheduleKind kind, double lr, double lo, double t) {
    if (kind == LR_LINEAR) return lr + (lo - lr) * t;
    if (kind == LR_CONSTANT) return lr;
    return lo + 0.5 * (lr - lo) * (1.0 + cos(M_PI * t));
}

static void test_warmup(void) {
    for (LRScheduleKind k = LR_COSINE; k <= LR_WSD; k = (LRScheduleKind)(k + 1)) {
        LRSchedule s = schedule(k, 10, 100);
        for (int step = 0; step < 10; step++)
            CHECK(close_to(lr_at_step(&s, step), 6e-4 * (step + 1) / 10.0), "%s warmup step %d: %g",
                  lr_schedule_name(k), step, lr_at_step(&s, step));
        CHECK(close_to(lr_at_step(&s, 10), 6e-4), "%s: the peak right after warmup: %g", lr_schedule_name(k),
              lr_at_step(&s, 10));
    }
}

static void test_decay(void) {
    const LRScheduleKind kinds[] = {LR_COSINE, LR_LINEAR, LR_CONSTANT};
    for (int i = 0; i < 3; i++) {
        LRSchedule s = schedule(kinds[i], 10, 110);
        double lo = kinds[i] == LR_CONSTANT ? 6e-4 : 6e-5;
        for (int step = 10; step <= 130; step++) {
            double t = fmin(1.0, (step - 10) / 100.0), want = after_warmup(kinds[i], 6e-4, 6e-5, t);
            CHECK(close_to(lr_at_step(&s, step), want), "%s step %d: %g, want %g", lr_schedule_name(kinds[i]), step,
                  lr_at_step(&s, step), want);
        }
        CHECK(close_to(lr_at_step(&s, 110), lo) && close_to(lr_at_step(&s, 1000), lo), "%s ends at %g: %g, %g",
              lr_schedule_name(kinds[i]), lo, lr_at_step(&s, 110), lr_at_step(&s, 1000));
    }
    LRSchedule c = schedule(LR_COSINE, 10, 110);
    CHECK(close_to(lr_at_step(&c, 60), (6e-4 + 6e-5) / 2), "cosine halfway is the mean of lr and lo: %g",
          lr_at_step(&c, 60));
    for (int total = 5; total <= 10; total += 5) {
        LRSchedule none = schedule(LR_COSINE, 10, total);
        CHECK(close_to(lr_at_step(&none, 7), 6e-4 * 8 / 10.0) && close_to(lr_at_step(&none, 10), 6e-4) &&
                  close_to(lr_at_step(&none, 12), 6e-4),
              "a run of %d steps, no longer than its warmup, stays at lr after it: %g, %g", total,
              lr_at_step(&none, 10), lr_at_step(&none, 12));
    }
}

static void test_wsd(void) {
    LRSchedule s = schedule(LR_WSD, 10, 100);  // the last 20 steps decay
    for (int step = 10; step < 80; step++)
        CHECK(close_to(lr_at_step(&s, step), 6e-4), "wsd stable at step %d: %g", step, lr_at_step(&s, step));
    for (int step = 80; step <= 120; step++) {
        double want = 6e-4 + (6e-5 - 6e-4) * fmin(1.0, (step - 80) / 20.0);
        CHECK(close_to(lr_at_step(&s, step), want), "wsd decay at step %d: %g, want %g", step, lr_at_step(&s, step),
              want);
    }
    s.decay_frac = 0.0f;
    CHECK(close_to(lr_at_step(&s, 99), 6e-4), "wsd without decay stays at lr: %g", lr_at_step(&s, 99));
}

static void test_names(void) {
    LRScheduleKind k;
    for (int i = LR_COSINE; i <= LR_WSD; i++)
        CHECK(lr_schedule_kind_from_name(lr_schedule_name((LRScheduleKind)i), &k) && k == (LRScheduleKind)i,
              "name %d round trip", i);
    CHECK(!lr_schedule_kind_from_name("exp", &k) && !lr_schedule_kind_from_name("", &k), "unknown names refused");
}

static double population_limit(const double *x, int n, double z) {
    double mean = 0.0, sq = 0.0;
    for (int i = 0; i < n; i++) mean += x[i] / n;
    for (int i = 0; i < n; i++) sq += (x[i] - mean) * (x[i] - mean);
    return mean + z * sqrt(sq / n);
}

static void test_outlier_limit(void) {
    RecentValues r;
    memset(&r, 0, sizeof r);
    double x[OUTLIER_WINDOW + 1];
    for (int i = 0; i <= OUTLIER_WINDOW; i++) x[i] = 3.0 + 0.01 * ((i * 37) % 23);
    for (int i = 0; i < OUTLIER_WINDOW - 1; i++) recent_push(&r, (float)x[i]);
    CHECK(recent_limit(&r, 3.0f) == 0.0f, "no limit with %d of %d values", r.count, OUTLIER_WINDOW);
    recent_push(&r, NAN);
    recent_push(&r, INFINITY);
    CHECK(r.count == OUTLIER_WINDOW - 1, "non-finite values stay out of the window: count %d", r.count);
    recent_push(&r, (float)x[OUTLIER_WINDOW - 1]);
    double xf[OUTLIER_WINDOW + 1];
    for (int i = 0; i <= OUTLIER_WINDOW; i++) xf[i] = (float)x[i];  // what the window holds
    CHECK(close_to(recent_limit(&r, 3.0f), population_limit(xf, OUTLIER_WINDOW, 3.0)),
          "a full window: mean + 3 population deviations: %.9g, want %.9g", recent_limit(&r, 3.0f),
          population_limit(xf, OUTLIER_WINDOW, 3.0));
    CHECK(recent_limit(&r, 0.0f) == 0.0f, "z = 0: no limit");
    recent_push(&r, (float)x[OUTLIER_WINDOW]);
    CHECK(r.count == OUTLIER_WINDOW && r.values[0] == (float)x[1] &&
              r.values[OUTLIER_WINDOW - 1] == (float)x[OUTLIER_WINDOW],
          "the oldest value leaves first");
    CHECK(close_to(recent_limit(&r, 2.5f), population_limit(xf + 1, OUTLIER_WINDOW, 2.5)),
          "the slid window's limit: %.9g, want %.9g", recent_limit(&r, 2.5f),
          population_limit(xf + 1, OUTLIER_WINDOW, 2.5));
    RecentValues flat;
    memset(&flat, 0, sizeof flat);
    for (int i = 0; i < OUTLIER_WINDOW; i++) recent_push(&flat, 2.0f);
    CHECK(recent_limit(&flat, 3.0f) == 0.0f, "equal values (deviation 0): no limit, got %g", recent_limit(&flat, 3.0f));
}

int main(void) {
    run_case("warmup, every schedule", test_warmup);
    run_case("cosine, linear, constant after warmup", test_decay);
    run_case("warmup-stable-decay", test_wsd);
    run_case("schedule names", test_names);
    run_case("outlier limit: window, deviation, sliding", test_outlier_limit);
    return test_summary();
}
