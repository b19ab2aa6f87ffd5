// gpu/phases.cuh: the phases of a training step, marked where the trainer calls them, not
// inside the model: each is an NVTX range (Nsight Systems shows the step's timeline by
// phase), a span of the host's main thread in --trace's timeline (common/trace.h) when the
// step is traced, and with --profile 1 a pair of CUDA events on the compute stream, whose times are
// added up per phase after the step's one host sync and printed as means at the end of the
// run. Without --profile no event is recorded; an NVTX range with no tool attached costs a
// function call. (Events inside a captured CUDA graph would time the capture, not the
// replay: the trainer refuses --profile 1 with --cuda-graph 1.)
#pragma once
#include <nvtx3/nvToolsExt.h>
#include "../common/trace.h"
#include "../kernels/common.cuh"

enum { PHASE_BATCH, PHASE_FORWARD, PHASE_LOSS, PHASE_BACKWARD, PHASE_UPDATE, PHASES };
// the names of the NVTX ranges and trace spans, and the profile table's labels
static const char *const PHASE_NAMES[PHASES] = {"batch", "forward", "loss", "backward", "update"};
static const char *const PHASE_LABELS[PHASES] = {"batch upload", "forward", "loss", "backward",
                                                "update (norm, AdamW)"};

// phase spans per step that the event pool holds: each micro-step has four
#define PHASE_MAX_SPANS 4096

typedef struct {
    Trace *trace;  // --trace: the phases as spans of the host's main thread (NULL: none)
    int on;        // --profile 1
    int n, dropped, steps;
    cudaEvent_t *ev;  // 2 per span
    int *phase;       // each span's phase
    double total_ms[PHASES];
} PhaseTimer;

static void phase_timer_init(PhaseTimer *p, int on) {
    memset(p, 0, sizeof *p);
    p->on = on;
    if (!on) return;
    p->ev = (cudaEvent_t *)xmalloc(2 * PHASE_MAX_SPANS * sizeof(cudaEvent_t));
    p->phase = (int *)xmalloc(PHASE_MAX_SPANS * sizeof(int));
    for (int i = 0; i < 2 * PHASE_MAX_SPANS; i++) CUDA_CHECK(cudaEventCreate(&p->ev[i]));
}

static void phase_timer_free(PhaseTimer *p) {
    if (p->on)
        for (int i = 0; i < 2 * PHASE_MAX_SPANS; i++) cudaEventDestroy(p->ev[i]);
    free(p->ev);
    free(p->phase);
    memset(p, 0, sizeof *p);
}

static void phase_begin(PhaseTimer *p, int phase, cudaStream_t s) {
    nvtxRangePushA(PHASE_NAMES[phase]);
    if (p) trace_begin(p->trace, PHASE_NAMES[phase], TRACE_CAT_PHASE);
    if (!p || !p->on) return;
    if (p->n >= PHASE_MAX_SPANS) { p->dropped++; return; }
    CUDA_CHECK(cudaEventRecord(p->ev[2 * p->n], s));
}

static void phase_end(PhaseTimer *p, int phase, cudaStream_t s) {
    nvtxRangePop();
    if (p) trace_end(p->trace);
    if (!p || !p->on || p->n >= PHASE_MAX_SPANS) return;
    CUDA_CHECK(cudaEventRecord(p->ev[2 * p->n + 1], s));
    p->phase[p->n++] = phase;
}

// After the step's sync: adds this step's phase times (count 0: drops them, e.g. warm-up)
static void phase_timer_collect(PhaseTimer *p, int count) {
    if (!p->on) return;
    for (int i = 0; count && i < p->n; i++) {
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]));
        p->total_ms[p->phase[i]] += ms;
    }
    if (count) p->steps++;
    p->n = 0;
}

// The mean time of each phase per counted step, and their sum
static void phase_timer_print(const PhaseTimer *p) {
    if (!p->on || p->steps == 0) return;
    double sum = 0.0;
    printf("profile: mean ms per step over %d steps (CUDA events on the compute stream; excludes the first step)%s\n",
           p->steps, p->dropped ? " [some phases dropped: event pool full]" : "");
    for (int i = 0; i < PHASES; i++) {
        printf("  %-22s %8.2f ms\n", PHASE_LABELS[i], p->total_ms[i] / p->steps);
        sum += p->total_ms[i] / p->steps;
    }
    printf("  %-22s %8.2f ms\n", "sum of phases", sum);
}
