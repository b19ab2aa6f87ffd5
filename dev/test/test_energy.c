// test_energy.c: common/energy.h, the board energy counter behind train_gpt2cu's J/step
// line, against dev/test/fake_nvml.c (run with LD_LIBRARY_PATH at the fake library's
// folder, as `make test` does): the counter read in joules, and each way of failing
// (NVML not starting, an unknown GPU, no counter) reported with its reason, never a crash.
#include "testutil.h"
#include "../../common/energy.h"
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

int main(void) {
    run_case("reads the counter in joules", test_reads_joules);
    run_case("an unknown GPU: unavailable, with the bus id", test_unknown_gpu);
    run_case("no energy counter: unavailable, reads -1", test_no_counter);
    run_case("NVML does not start: unavailable", test_init_fails);
    return test_summary();
}
