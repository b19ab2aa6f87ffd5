// kernels/profile.cuh: --profile 1, the time of each phase of a training step. CUDA events
// bracket each kernel group (prof_begin/prof_end); after the step's one sync prof_collect
// adds the pairs' times per phase, and prof_print gives the means at the end. When off,
// nothing is recorded, so the step pays nothing. (Events inside a captured CUDA graph would
// time the capture, not the replay: the trainer refuses --profile 1 with --cuda-graph 1.)
#pragma once
#include "common.cuh"

enum { PH_ENCODER, PH_LAYERNORM, PH_MATMUL, PH_ATTENTION, PH_GELU, PH_CLASSIFIER, PH_UPDATE, PH_NUM };
static const char *const PHASE_NAMES[PH_NUM] = {"encoder", "layernorm", "matmul (+bias grad)", "attention",
                                                "gelu recompute", "classifier", "grad norm + adamw"};
#define PROF_MAX_EVENTS 8192
typedef struct {
    int active, n, dropped, steps;
    cudaEvent_t ev[PROF_MAX_EVENTS];
    int cat[PROF_MAX_EVENTS / 2];
    double total_ms[PH_NUM];
} Profiler;
static Profiler g_prof;

static void prof_init(void) {
    for (int i = 0; i < PROF_MAX_EVENTS; i++) CUDA_CHECK(cudaEventCreate(&g_prof.ev[i]));
}
static void prof_begin(cudaStream_t s) {
    if (!g_prof.active) return;
    if (g_prof.n + 2 > PROF_MAX_EVENTS) { g_prof.dropped++; return; }
    CUDA_CHECK(cudaEventRecord(g_prof.ev[g_prof.n], s));
}
static void prof_end(int cat, cudaStream_t s) {
    if (!g_prof.active) return;
    if (g_prof.n + 2 > PROF_MAX_EVENTS) return;
    CUDA_CHECK(cudaEventRecord(g_prof.ev[g_prof.n + 1], s));
    g_prof.cat[g_prof.n / 2] = cat;
    g_prof.n += 2;
}
// after the step's sync: add this step's phase times (count = 0: discard, e.g. warm-up)
static void prof_collect(int count) {
    for (int i = 0; count && i < g_prof.n; i += 2) {
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, g_prof.ev[i], g_prof.ev[i + 1]));
        g_prof.total_ms[g_prof.cat[i / 2]] += ms;
    }
    if (count) g_prof.steps++;
    g_prof.n = 0;
}
// the mean time of each phase per counted step, and their sum (rank 0, at the end of a run)
static void prof_print(void) {
    if (g_prof.steps == 0) return;
    double sum = 0.0;
    printf("profile: mean ms per step over %d steps (CUDA events; excludes the first step)%s\n", g_prof.steps,
           g_prof.dropped ? " [some phases dropped: event pool full]" : "");
    for (int i = 0; i < PH_NUM; i++) {
        printf("  %-22s %8.2f ms\n", PHASE_NAMES[i], g_prof.total_ms[i] / g_prof.steps);
        sum += g_prof.total_ms[i] / g_prof.steps;
    }
    printf("  %-22s %8.2f ms\n", "sum of phases", sum);
}
