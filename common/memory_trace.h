// memory_trace.h: --memory-trace FILE.json, where a trainer's memory goes over one training
// step (docs/formats.md#trace-files): every buffer the trainer allocates, with its category
// (parameters, gradients, optimizer state, each layer's kept activations, scratch, staging,
// communication, FP8 copies), and at the start of the step and after each of its phases the
// bytes live per category. The GPU trainer's samples also hold what the GPU's memory use
// shows beyond those buffers (the CUDA runtime's, cuBLAS's and NCCL's own memory) as
// "other", so that a sample's total is the device memory in use then, and the file's peak
// is the run's reported peak. Only the traced step samples: every other step pays a branch.
#ifndef COMMON_MEMORY_TRACE_H
#define COMMON_MEMORY_TRACE_H
#include "util.h"
#include "logger.h"  // json_num

enum {
    MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_ACTS_KEPT, MEM_SCRATCH, MEM_STAGING, MEM_COMM, MEM_FP8, MEM_OTHER,
    MEM_CATEGORIES
};
static const char *const MEM_CATEGORY_NAMES[MEM_CATEGORIES] = {
    "parameters", "gradients", "optimizer state", "activations (kept)", "scratch", "staging", "communication",
    "fp8 copies", "other (runtime, libraries)"};

typedef struct {
    const char *name;  // lives as long as the trace (a literal or the activation table's)
    int category, layer;  // layer -1: not a layer's
    size_t bytes;
} MemAlloc;

typedef struct {
    const char *at;  // the phase it follows ("forward", ...), NULL: the start of the step
    int micro;       // the micro-step (from 1), 0 at the start of the step
    double t_us;
    size_t other;    // bytes in use beyond the listed buffers
} MemSample;

typedef struct {
    const char *path;  // NULL: no memory trace
    int step;          // the traced step (from 1)
    int active, micro, done;  // micro: the step's micro-step so far (from 1)
    MemAlloc *allocs;
    int nallocs, capallocs;
    size_t listed[MEM_CATEGORIES];  // the listed buffers' bytes, per category
    MemSample *samples;
    int nsamples, capsamples;
    size_t peak;  // the largest sample's total, once written
} MemoryTrace;

// path NULL or empty: none. The file is written after the traced step.
static inline void memory_trace_init(MemoryTrace *m, const char *path, int step) {
    memset(m, 0, sizeof *m);
    if (path && *path) m->path = path, m->step = step;
}

// One buffer the trainer holds (during the traced step, as at the start).
static inline void memory_trace_add(MemoryTrace *m, const char *name, int category, int layer, size_t bytes) {
    if (!m->path || bytes == 0) return;
    if (m->nallocs == m->capallocs)
        m->allocs = (MemAlloc *)xrealloc(m->allocs, (size_t)(m->capallocs = m->capallocs ? 2 * m->capallocs : 64) *
                                                        sizeof(MemAlloc));
    MemAlloc a = {name, category, layer, bytes};
    m->allocs[m->nallocs++] = a;
    m->listed[category] += bytes;
}

// a buffer of `copies` equal slices, one per layer when there are `layers` of them
static inline void memory_trace_add_layers(MemoryTrace *m, const char *name, int category, size_t bytes, size_t copies,
                                           int layers) {
    if (copies != (size_t)layers || layers < 2) {
        memory_trace_add(m, name, category, -1, bytes);
        return;
    }
    for (int l = 0; l < layers; l++)  // the last takes the rounding's remainder: the sum stays exact
        memory_trace_add(m, name, category, l, l + 1 < layers ? bytes / copies : bytes - (copies - 1) * (bytes / copies));
}

static inline size_t memory_trace_listed(const MemoryTrace *m) {
    size_t s = 0;
    for (int c = 0; c < MEM_CATEGORIES; c++) s += m->listed[c];
    return s;
}

// Around the traced step
static inline void memory_trace_step_begin(MemoryTrace *m, int step1) {
    m->active = m->path && !m->done && step1 == m->step;
    m->micro = 0;
}

// A sample at a phase's end (at: its name), or at the start of the step (NULL); in_use: the bytes in
// use then as the trainer measures them (the GPU: cudaMemGetInfo less the use before the run;
// the listed buffers when it has no such measure)
static inline void memory_trace_sample(MemoryTrace *m, const char *at, double t_us, size_t in_use) {
    if (!m->active) return;
    if (m->nsamples == m->capsamples)
        m->samples = (MemSample *)xrealloc(m->samples, (size_t)(m->capsamples = m->capsamples ? 2 * m->capsamples : 64) *
                                                           sizeof(MemSample));
    // the micro-step: a phase seen n times before is in micro-step n + 1 (the update, once
    // a step, follows the last one)
    if (at) {
        int seen = 1;
        for (int i = 0; i < m->nsamples; i++) seen += m->samples[i].at && !strcmp(m->samples[i].at, at);
        if (seen > m->micro) m->micro = seen;
    }
    const size_t listed = memory_trace_listed(m);
    MemSample s = {at, at ? m->micro : 0, t_us, in_use > listed ? in_use - listed : 0};
    m->samples[m->nsamples++] = s;
}

// The largest sample's total (the listed buffers and the other bytes)
static inline size_t memory_trace_peak(const MemoryTrace *m) {
    size_t peak = 0, listed = memory_trace_listed(m);
    for (int i = 0; i < m->nsamples; i++)
        if (listed + m->samples[i].other > peak) peak = listed + m->samples[i].other;
    return peak;
}

// After the traced step: the file, checked as it is written
static inline void memory_trace_write(MemoryTrace *m, const char *program) {
    if (!m->active || m->done) return;
    m->active = 0;
    m->done = 1;
    fatal_context_set("writing --memory-trace");
    AtomicFile af = atomic_open(m->path);  // a temporary renamed over the path: never a half-written file
    FILE *f = af.f;
    int ok = fprintf(f, "{\"memoryTrace\": 1, \"program\": \"%s\", \"step\": %d, \"peak_bytes\": %zu, \"categories\": [",
                     program, m->step, memory_trace_peak(m)) >= 0;
    for (int c = 0; c < MEM_CATEGORIES; c++) ok &= fprintf(f, "%s\"%s\"", c ? ", " : "", MEM_CATEGORY_NAMES[c]) >= 0;
    ok &= fputs("],\n \"allocations\": [", f) != EOF;
    for (int i = 0; i < m->nallocs; i++) {
        const MemAlloc *a = &m->allocs[i];
        char layer[16];
        if (a->layer >= 0) snprintf(layer, sizeof layer, "%d", a->layer);
        else snprintf(layer, sizeof layer, "null");
        ok &= fprintf(f, "%s\n  {\"name\": \"%s\", \"category\": \"%s\", \"bytes\": %zu, \"layer\": %s}", i ? "," : "",
                      a->name, MEM_CATEGORY_NAMES[a->category], a->bytes, layer) >= 0;
    }
    ok &= fputs("],\n \"samples\": [", f) != EOF;
    const size_t listed = memory_trace_listed(m);
    for (int i = 0; i < m->nsamples; i++) {
        const MemSample *s = &m->samples[i];
        char at[96], t[32];
        if (!s->at) snprintf(at, sizeof at, "start of step");
        else if (s->micro) snprintf(at, sizeof at, "after %s (micro-step %d)", s->at, s->micro);
        else snprintf(at, sizeof at, "after %s", s->at);
        ok &= fprintf(f, "%s\n  {\"at\": \"%s\", \"t_us\": %s, \"bytes\": {", i ? "," : "", at, json_num(t, s->t_us)) >= 0;
        for (int c = 0; c < MEM_CATEGORIES; c++)
            ok &= fprintf(f, "%s\"%s\": %zu", c ? ", " : "", MEM_CATEGORY_NAMES[c],
                          c == MEM_OTHER ? m->listed[c] + s->other : m->listed[c]) >= 0;
        ok &= fprintf(f, "}, \"total\": %zu}", listed + s->other) >= 0;
    }
    ok &= fputs("]}\n", f) != EOF;
    if (!ok) fatal("cannot write %s: %s", af.tmp_path, strerror(errno));
    atomic_commit(&af);
    fatal_context_set(NULL);
    m->peak = memory_trace_peak(m);
    printf("memory trace of step %d written: %s (peak %.0f MiB)\n", m->step, m->path, m->peak / (1024.0 * 1024.0));
    free(m->allocs);
    free(m->samples);
    m->allocs = NULL;
    m->samples = NULL;
}

#endif // COMMON_MEMORY_TRACE_H
