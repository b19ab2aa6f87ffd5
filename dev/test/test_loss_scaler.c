// test_loss_scaler.c: fp16's dynamic loss scaler (gpu/host/loss_scaler.h): an overflow
// halves the scale (never below 1) and restarts the count; a window of clean steps in a
// row doubles it (never above 2^24); a non-finite loss leaves it alone; the test hooks
// (common/test_hooks.h) parse, once until a reload. The GPU test script checks the same in
// a training run, resume included.
#include "testutil.h"
#include "../../gpu/host/loss_scaler.h"
#include "../../common/train_common.h"

static void test_halve_and_double(void) {
    unsetenv("GPT2_TEST_LOSS_SCALE_WINDOW");
    test_hooks_reload();
    LossScaler s;
    loss_scaler_init(&s, LOSS_SCALE_INIT);
    CHECK(s.window == 1000 && s.scale == 65536.0f, "defaults: window %d, scale %g", s.window, s.scale);
    CHECK(loss_scaler_update(&s, 3.0f, INFINITY) == -1 && s.scale == 32768.0f && s.good_steps == 0, "overflow halves");
    CHECK(loss_scaler_update(&s, 3.0f, NAN) == -1 && s.scale == 16384.0f, "a NaN norm is an overflow too");
    for (int i = 0; i < 999; i++) CHECK(loss_scaler_update(&s, 3.0f, 1.0f) == 0, "clean step %d changes nothing", i);
    CHECK(s.good_steps == 999 && s.scale == 16384.0f, "999 clean steps: %d, %g", s.good_steps, s.scale);
    CHECK(loss_scaler_update(&s, 3.0f, 1.0f) == 1 && s.scale == 32768.0f && s.good_steps == 0, "the 1000th doubles");
    for (int i = 0; i < 500; i++) loss_scaler_update(&s, 3.0f, 1.0f);
    loss_scaler_update(&s, 3.0f, INFINITY);
    CHECK(s.good_steps == 0 && s.scale == 16384.0f, "an overflow restarts the count");
    CHECK(loss_scaler_update(&s, NAN, NAN) == 0 && s.scale == 16384.0f && s.good_steps == 0,
          "a non-finite loss is not an overflow of the scale");
}

static void test_bounds(void) {
    LossScaler s;
    loss_scaler_init(&s, 2.0f);
    loss_scaler_update(&s, 1.0f, INFINITY);
    loss_scaler_update(&s, 1.0f, INFINITY);
    CHECK(s.scale == LOSS_SCALE_MIN, "never below 1: %g", s.scale);
    loss_scaler_init(&s, LOSS_SCALE_MAX);
    s.window = 2;
    loss_scaler_update(&s, 1.0f, 1.0f);
    CHECK(loss_scaler_update(&s, 1.0f, 1.0f) == 0 && s.scale == LOSS_SCALE_MAX, "never above 2^24: %g", s.scale);
    loss_scaler_init(&s, 1.5e7f);  // a scale that is no power of two (a state file may hold one)
    s.window = 1;
    CHECK(loss_scaler_update(&s, 1.0f, 1.0f) == 1 && s.scale == LOSS_SCALE_MAX, "1.5e7 doubled stops at 2^24: %g",
          s.scale);
    loss_scaler_init(&s, 1.5f);
    loss_scaler_update(&s, 1.0f, INFINITY);
    CHECK(s.scale == LOSS_SCALE_MIN, "1.5 halved stops at 1: %g", s.scale);
}

static void test_hook_values(void) {
    setenv("GPT2_TEST_LOSS_SCALE_WINDOW", "3", 1);
    test_hooks_reload();  // (the hooks are read once, as a run reads them)
    LossScaler s;
    loss_scaler_init(&s, 8.0f);
    CHECK(s.window == 3, "window from the environment: %d", s.window);
    setenv("GPT2_TEST_LOSS_SCALE_WINDOW", "-4", 1);
    test_hooks_reload();
    loss_scaler_init(&s, 8.0f);
    CHECK(s.window == LOSS_SCALE_WINDOW, "a bad window is ignored: %d", s.window);
    unsetenv("GPT2_TEST_LOSS_SCALE_WINDOW");
    setenv("GPT2_TEST_OVERFLOW_STEPS", "5,12", 1);
    test_hooks_reload();
    CHECK(!test_overflow_step(4) && test_overflow_step(5) && test_overflow_step(12) && !test_overflow_step(1),
          "overflow steps 5 and 12");
    unsetenv("GPT2_TEST_OVERFLOW_STEPS");
    test_hooks_reload();
    CHECK(!test_overflow_step(5), "no hook, no overflow");
    setenv("GPT2_TEST_OVERFLOW_STEPS", "3,7 9,,11", 1);  // read up to the first non-number
    test_hooks_reload();
    CHECK(test_overflow_step(3) && test_overflow_step(7) && test_overflow_step(9) && !test_overflow_step(11),
          "overflow steps 3, 7 and 9");
    unsetenv("GPT2_TEST_OVERFLOW_STEPS");
    test_hooks_reload();
}

// the hooks of the other modules, as common/test_hooks.h reads them: once, until a reload
static void test_other_hooks(void) {
    setenv("GPT2_TEST_GPU_CAP", "86", 1);
    setenv("GPT2_TEST_HELLASWAG_CHOICES", "", 1);
    setenv("GPT2_TEST_READ_DELAY_MS", "20", 1);
    test_hooks_reload();
    const TestHooks *h = test_hooks();
    CHECK(h->gpu_cap == 86 && h->gpu_cap_smem_optin == 99 * 1024, "cap 86: %d, %d bytes", h->gpu_cap,
          h->gpu_cap_smem_optin);
    CHECK(!h->hellaswag_choices, "an empty choices path is no path");
    CHECK(h->read_delay_ms == 20, "read delay %d ms", h->read_delay_ms);
    setenv("GPT2_TEST_GPU_CAP", "90", 1);
    CHECK(test_hooks()->gpu_cap == 86, "read once: %d", test_hooks()->gpu_cap);
    test_hooks_reload();  // 90 is refused by device_caps, when a GPU is first asked
    CHECK(test_hooks()->gpu_cap == -1 && strcmp(test_hooks()->gpu_cap_text, "90") == 0, "cap 90: %d",
          test_hooks()->gpu_cap);
    unsetenv("GPT2_TEST_GPU_CAP");
    unsetenv("GPT2_TEST_HELLASWAG_CHOICES");
    unsetenv("GPT2_TEST_READ_DELAY_MS");
    test_hooks_reload();
    CHECK(!test_hooks()->gpu_cap && !test_hooks()->read_delay_ms, "unset: no hooks");
}

int main(void) {
    run_case("overflow halves, a clean window doubles", test_halve_and_double);
    run_case("the scale stays in [1, 2^24]", test_bounds);
    run_case("test hooks: window and overflow steps", test_hook_values);
    run_case("test hooks: the others, read once", test_other_hooks);
    return test_summary();
}
