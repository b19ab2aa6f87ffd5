// test_hooks.h: the environment variables through which the tests reach behaviour that a
// short run on a small machine would not otherwise show. Product code reads them only
// here, once per process, into one TestHooks (test_hooks()); a run that sets none of them
// behaves as if this file did not exist.
//
//   GPT2_TEST_OVERFLOW_STEPS=5,9     those steps' gradients are made non-finite: the skipped
//                                    update, and in the fp16 build the loss scaler's halving
//                                    (test_overflow_step, common/run_state.h)
//   GPT2_TEST_LOSS_SCALE_WINDOW=N    N clean steps in a row double fp16's loss scale instead
//                                    of 1000, so that a short run doubles it too
//                                    (gpu/host/loss_scaler.h); anything but 1..999999 is ignored
//   GPT2_TEST_HELLASWAG_CHOICES=FILE a one-rank HellaSwag evaluation writes each example's
//                                    chosen completion there, one a line, to be held against
//                                    dev/hellaswag_ref.py's (common/hellaswag.h)
//   GPT2_TEST_READ_DELAY_MS=N        every read of the data loader sleeps N ms (a slow disk),
//                                    so that the loader thread's hiding of it can be measured
//                                    (common/dataloader.h)
//   GPT2_TEST_GPU_CAP=80|86|89       the GPU's compute capability and the shared memory a
//                                    block may opt in to are lowered to an A100's (80), an RTX
//                                    30xx's or A10's (86) or an RTX 40xx's or L4's (89), so that
//                                    a newer GPU runs the kernels and tile shapes those GPUs
//                                    would (device_caps, kernels/common.cuh); any other value
//                                    is refused there, when a GPU is first asked (so a program
//                                    that asks none, the CPU trainer, never refuses it)
//
// A unit test that sets a variable between its cases calls test_hooks_reload() after it.
// Header-only C11 that also compiles as C++; every program is one translation unit, so
// test_hooks()'s instance is the process's.
#ifndef COMMON_TEST_HOOKS_H
#define COMMON_TEST_HOOKS_H
#include "util.h"

typedef struct {
    long *overflow_steps;     // GPT2_TEST_OVERFLOW_STEPS, in the order given
    int n_overflow_steps;
    int loss_scale_window;    // GPT2_TEST_LOSS_SCALE_WINDOW; 0: unset or ignored (the scaler's own)
    char *hellaswag_choices;  // GPT2_TEST_HELLASWAG_CHOICES; NULL: unset or empty
    int read_delay_ms;        // GPT2_TEST_READ_DELAY_MS; 0 (or less): no delay
    int gpu_cap;              // GPT2_TEST_GPU_CAP: 80, 86 or 89; 0: unset or empty; -1: another value
    int gpu_cap_smem_optin;   // with a cap: that architecture's shared memory a block may opt in to (bytes)
    char *gpu_cap_text;       // the variable's value, for the refusal of another value
} TestHooks;

// GPT2_TEST_OVERFLOW_STEPS as it has always been read: numbers separated by commas (or
// white space), up to the first thing that is not a number
static inline void test_hooks_read_overflow_steps(TestHooks *h, const char *e) {
    int cap = 0;
    for (const char *p = e; p && *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (h->n_overflow_steps == cap) {
            cap = cap ? 2 * cap : 8;
            h->overflow_steps = (long *)xrealloc(h->overflow_steps, (size_t)cap * sizeof(long));
        }
        h->overflow_steps[h->n_overflow_steps++] = v;
        p = *end == ',' ? end + 1 : end;
    }
}

// GPT2_TEST_GPU_CAP: the three caps and their architectures' opt-in shared memory
static inline void test_hooks_read_gpu_cap(TestHooks *h, const char *e) {
    static const struct { const char *name; int cc, smem; } caps[] = {
        {"80", 80, 163 * 1024}, {"86", 86, 99 * 1024}, {"89", 89, 99 * 1024}};
    if (!e || !*e) return;
    h->gpu_cap_text = xstrdup(e);
    h->gpu_cap = -1;
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        if (strcmp(e, caps[i].name) == 0) {
            h->gpu_cap = caps[i].cc;
            h->gpu_cap_smem_optin = caps[i].smem;
        }
}

// Reads and checks every hook from the environment.
static inline TestHooks test_hooks_read(void) {
    TestHooks h;
    memset(&h, 0, sizeof h);
    test_hooks_read_overflow_steps(&h, getenv("GPT2_TEST_OVERFLOW_STEPS"));
    long w;
    const char *e = getenv("GPT2_TEST_LOSS_SCALE_WINDOW");
    if (e && parse_long(e, &w) && w > 0 && w < 1000000) h.loss_scale_window = (int)w;
    e = getenv("GPT2_TEST_HELLASWAG_CHOICES");
    if (e && *e) h.hellaswag_choices = xstrdup(e);
    e = getenv("GPT2_TEST_READ_DELAY_MS");
    h.read_delay_ms = e ? atoi(e) : 0;
    test_hooks_read_gpu_cap(&h, getenv("GPT2_TEST_GPU_CAP"));
    return h;
}

static inline void test_hooks_free(TestHooks *h) {
    free(h->overflow_steps);
    free(h->hellaswag_choices);
    free(h->gpu_cap_text);
    memset(h, 0, sizeof *h);
}

// The process's hooks, read on the first call; reread: read the environment again.
static inline const TestHooks *test_hooks_get(int reread) {
    static TestHooks h;
    static int read;
    if (read && reread) test_hooks_free(&h);
    if (!read || reread) {
        h = test_hooks_read();
        read = 1;
    }
    return &h;
}
static inline const TestHooks *test_hooks(void) { return test_hooks_get(0); }
// for unit tests only: the environment again, after they changed it
static inline void test_hooks_reload(void) { (void)test_hooks_get(1); }

#endif // COMMON_TEST_HOOKS_H
