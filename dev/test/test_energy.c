// test_energy.c: gpu/host/energy.h, the board energy counter behind train_gpt2cu's J/step
// line, against dev/test/fake_nvml.c (run with LD_LIBRARY_PATH at the fake library's
// folder, as `make test` does): the counter read in joules, and each way of failing
// (NVML not starting, an unknown GPU, no counter) reported with its reason, never a crash;
// and gpu/host/step_meter.h: J/step over a timed window of 1 s or more only, the steps it
// times, the energy of the work between steps left out, and the figures it reports for the
// run's summary record (common/run_summary.h).
#include "testutil.h"
#include "../../gpu/host/energy.h"
#include "../../gpu/host/step_meter.h"
#include <math.h>

static void test_reads_joules(void) {
    EnergyMeter m;
    CHECK(energy_open(&m, "0000:1b:00.0") == 1, "open failed: %s", m.why);
    CHECK(m.why[0] == '\0', "reason set on success: %s", m.why);
    double a = energy_joules(&m), b = energy_joules(&m);
    CHECK(a > 0 && fabs(b - a - 1.5) < 1e-9, "two reads %.3f and %.3f J, expected 1.5 J apart", a, b);
}

static void test_unknown_gpu(void) {
    EnergyMeter m;
    CHECK(energy_open(&m, "0000:99:00.0") == 0, "an unknown bus id opened");
    CHECK(strstr(m.why, "0000:99:00.0") && strstr(m.why, "error 6"), "reason: '%s'", m.why);
    CHECK(energy_joules(&m) == -1.0, "read on a failed meter gave %g", energy_joules(&m));
}

static void test_no_counter(void) {
    EnergyMeter m;
    setenv("FAKE_NVML_NO_COUNTER", "1", 1);
    int ok = energy_open(&m, "0000:1b:00.0");
    double j = energy_joules(&m);
    unsetenv("FAKE_NVML_NO_COUNTER");
    CHECK(ok == 0, "opened without a counter");
    CHECK(strstr(m.why, "no energy counter") && strstr(m.why, "error 3"), "reason: '%s'", m.why);
    CHECK(j == -1.0, "read gave %g", j);
    CHECK(energy_joules(&m) == -1.0, "a failed meter read the counter once it came back");
}

static void test_init_fails(void) {
    EnergyMeter m;
    setenv("FAKE_NVML_INIT_FAIL", "1", 1);
    int ok = energy_open(&m, "0000:1b:00.0");
    unsetenv("FAKE_NVML_INIT_FAIL");
    CHECK(ok == 0 && strstr(m.why, "nvmlInit failed"), "open %d, reason '%s'", ok, m.why);
}

static void test_fails_mid_run(void) {
    EnergyMeter m;
    setenv("FAKE_NVML_FAIL_AFTER", "3", 1);  // the open reads once, then two reads work
    int ok = energy_open(&m, "0000:1b:00.0");
    double a = energy_joules(&m), b = energy_joules(&m), c = energy_joules(&m);
    unsetenv("FAKE_NVML_FAIL_AFTER");
    double d = energy_joules(&m);
    CHECK(ok == 1 && a > 0 && b > a, "the first reads work: %g %g", a, b);
    CHECK(c == -1.0 && d == -1.0, "after a failed read the meter stays unavailable: %g %g", c, d);
    CHECK(strstr(m.why, "failed during the run") && strstr(m.why, "error 15"), "reason: '%s'", m.why);
    energy_close(&m);
}

// every nvmlInit is balanced by nvmlShutdown (the library stays loaded through a handle
// of the test's own, so its counters can be read after the meter lets go)
static void test_shutdown(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(lib != NULL, "the fake library is not on LD_LIBRARY_PATH");
    if (!lib) return;
    int (*inits)(void) = (int (*)(void))dlsym(lib, "fake_nvml_inits");
    int (*shutdowns)(void) = (int (*)(void))dlsym(lib, "fake_nvml_shutdowns");
    int i0 = inits(), s0 = shutdowns();
    EnergyMeter m;
    energy_open(&m, "0000:1b:00.0");
    energy_close(&m);
    energy_open(&m, "0000:99:00.0");  // fails after nvmlInit: shut down at once
    energy_close(&m);
    CHECK(inits() - i0 == 2 && shutdowns() - s0 == 2, "nvmlInit %d times, nvmlShutdown %d times", inits() - i0,
          shutdowns() - s0);
    dlclose(lib);
}

// the energy line of a meter whose timed steps took sum_dt seconds, into buf
static void energy_line(StepMeter *sm, double sum_dt, double joules, char *buf, size_t n) {
    sm->sum_dt = sum_dt;
    sm->timed_steps = 4;
    FILE *f = tmpfile();
    step_meter_print_energy(f, sm, joules, 11, 14, "");
    rewind(f);
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
}

static void test_energy_window(void) {
    StepMeter sm;
    memset(&sm, 0, sizeof sm);
    CHECK(energy_open(&sm.energy, "0000:1b:00.0") == 1, "open failed: %s", sm.energy.why);
    char line[512];
    energy_line(&sm, 2.0, 400.0, line, sizeof line);  // 4 steps of 0.5 s, 100 J each
    CHECK(strstr(line, "energy over steps 11..14") && strstr(line, ": 100.0 J/step, 200 W mean"),
          "a 2 s window: '%s'", line);
    energy_line(&sm, 0.45, 90.0, line, sizeof line);
    CHECK(!strstr(line, "J/step") && strstr(line, "not measured (the timed steps took 0.45 s"),
          "a 0.45 s window: '%s'", line);
    energy_line(&sm, 1.0, 200.0, line, sizeof line);  // the limit itself is long enough
    CHECK(strstr(line, ": 50.0 J/step"), "a 1 s window: '%s'", line);
    energy_close(&sm.energy);
    EnergyMeter failed;
    energy_open(&failed, "0000:99:00.0");
    sm.energy = failed;
    energy_line(&sm, 2.0, 0.0, line, sizeof line);
    CHECK(strstr(line, "energy: not measured (") && strstr(line, "0000:99:00.0"), "a failed meter: '%s'", line);
}

// stdout of step_meter_report, into buf; the figures it reports, into out (may be NULL)
static void report_line(StepMeter *sm, int last_step, char *buf, size_t n, RunSummary *out) {
    fflush(stdout);
    FILE *f = tmpfile();
    int saved = dup(1);
    dup2(fileno(f), 1);
    step_meter_report(sm, last_step, 1000.0, 1e9, 1e12, 1, "", out);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    rewind(f);
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
}

// A run of 15 steps through the meter, as the trainer drives it: which steps are timed
// (after 10, or after 1 when a step holds 10 micro-steps; counted from a resumed run's first
// step), and the energy of the work between steps left out. The fake counter moves 1.5 J a
// read, so the timed window's reads (its start, one pause and resume, the end) give 4.5 J,
// of which the pause holds 1.5 J.
static void test_step_window(void) {
    const int micro[3] = {1, 10, 1}, start[3] = {0, 0, 12}, want_timed[3] = {5, 14, 5};
    for (int c = 0; c < 3; c++) {
        StepMeter sm;
        step_meter_init(&sm, start[c], micro[c], "0000:1b:00.0");
        for (int step = start[c]; step < start[c] + 15; step++) {
            step_meter_begin(&sm, step);
            step_meter_end(&sm, step);
            int other = step == start[c] + 12;  // an evaluation after the run's 13th step
            step_meter_pause(&sm, step, other);
            step_meter_resume(&sm, step, other);
        }
        CHECK(sm.timed_steps == want_timed[c], "%d micro-steps, from step %d: %d timed steps, want %d", micro[c],
              start[c], sm.timed_steps, want_timed[c]);
        CHECK(sm.e_other == 1.5, "the pause's energy: %g J, want 1.5", sm.e_other);
        if (c == 1) { energy_close(&sm.energy); continue; }
        sm.sum_dt = 5.0;  // 1 s a step, long enough for a J/step line
        char line[1024], want[64];
        RunSummary s;
        run_summary_init(&s);
        s.device_peak_mib = 123.0;  // the trainer's own: left as it is
        report_line(&sm, start[c] + 15, line, sizeof line, &s);
        snprintf(want, sizeof want, "mean over steps %d..%d: 1000.0 ms/step", start[c] + 11, start[c] + 15);
        CHECK(strstr(line, want) && strstr(line, ": 0.6 J/step, 1 W mean"),
              "from step %d, 5 timed steps, 3 J without the pause: '%s'", start[c], line);
        // the same figures for the summary record: 1000 tokens and 1e9 FLOPs a step of 1 s, 1e12 peak
        CHECK(s.first_step == start[c] + 11 && s.last_step == start[c] + 15 && s.timed_steps == 5,
              "summary window %d..%d, %d timed", s.first_step, s.last_step, s.timed_steps);
        CHECK(s.ms_per_step == 1000.0 && s.tokens_per_s == 1000.0 && fabs(s.mfu - 1e-3) < 1e-15 &&
                  fabs(s.joules_per_step - 0.6) < 1e-9,
              "summary %g ms/step, %g tok/s, MFU %g, %g J/step", s.ms_per_step, s.tokens_per_s, s.mfu,
              s.joules_per_step);
        CHECK(isnan(s.gflops) && s.device_peak_mib == 123.0 && isnan(s.host_peak_mib) && isnan(s.data_stall_ms),
              "the figures the meter does not have were changed");
    }
}

// A meter after `steps` steps from step 0 of one micro-step each, timed steps summing to
// sum_dt seconds (none: left as measured), on the GPU at bus_id.
static void meter_after(StepMeter *sm, const char *bus_id, int steps, double sum_dt) {
    step_meter_init(sm, 0, 1, bus_id);
    for (int step = 0; step < steps; step++) {
        step_meter_begin(sm, step);
        step_meter_end(sm, step);
    }
    if (sum_dt > 0) sm->sum_dt = sum_dt;
}

// The summary's J/step is null (NAN) exactly where the console says "not measured": a window
// under 1 s, no counter; a run without timed steps has no means at all; and a report without
// a summary to fill (NULL) prints the same.
static void test_report_summary(void) {
    char line[1024], plain[1024];
    RunSummary s;
    StepMeter sm;
    run_summary_init(&s);
    meter_after(&sm, "0000:1b:00.0", 14, 0.5);  // 4 timed steps in 0.5 s
    report_line(&sm, 14, line, sizeof line, &s);
    CHECK(strstr(line, "not measured (the timed steps took 0.50 s") && isnan(s.joules_per_step) &&
              s.timed_steps == 4 && s.ms_per_step == 125.0,
          "a 0.5 s window: '%s', J/step %g, %d timed, %g ms/step", line, s.joules_per_step, s.timed_steps,
          s.ms_per_step);
    meter_after(&sm, "0000:1b:00.0", 14, 0.5);
    report_line(&sm, 14, plain, sizeof plain, NULL);
    CHECK(strcmp(line, plain) == 0, "with and without a summary the console differs: '%s' / '%s'", line, plain);

    run_summary_init(&s);
    meter_after(&sm, "0000:99:00.0", 14, 2.0);
    report_line(&sm, 14, line, sizeof line, &s);
    CHECK(strstr(line, "energy: not measured (") && isnan(s.joules_per_step) && s.ms_per_step == 500.0,
          "no counter: '%s', J/step %g, %g ms/step", line, s.joules_per_step, s.ms_per_step);

    run_summary_init(&s);
    meter_after(&sm, "0000:1b:00.0", 10, 0.0);
    report_line(&sm, 10, line, sizeof line, &s);
    CHECK(line[0] == '\0' && s.timed_steps == 0 && s.first_step == 11 && s.last_step == 10 && isnan(s.ms_per_step) &&
              isnan(s.tokens_per_s) && isnan(s.mfu) && isnan(s.joules_per_step),
          "10 steps, none timed: '%s', window %d..%d, %d timed, %g ms/step, MFU %g", line, s.first_step, s.last_step,
          s.timed_steps, s.ms_per_step, s.mfu);
}

int main(void) {
    run_case("reads the counter in joules", test_reads_joules);
    run_case("an unknown GPU: unavailable, with the bus id", test_unknown_gpu);
    run_case("no energy counter: unavailable, reads -1", test_no_counter);
    run_case("NVML does not start: unavailable", test_init_fails);
    run_case("a counter that fails mid-run: unavailable", test_fails_mid_run);
    run_case("nvmlShutdown balances nvmlInit", test_shutdown);
    run_case("J/step only over a timed window of 1 s or more", test_energy_window);
    run_case("timed steps; energy between steps left out", test_step_window);
    run_case("summary figures: null where not measured", test_report_summary);
    return test_summary();
}
