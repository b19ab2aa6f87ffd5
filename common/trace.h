// trace.h: --trace FILE.json, a timeline of a few training steps as a trace-event file (the
// JSON that Chrome's about:tracing and Perfetto open; docs/formats.md#trace-files): each
// step and its phases (batch, forward, backward, update, ...) and the work between steps
// (evaluation, sampling, checkpoints) as spans of the host's main thread, on one clock in
// microseconds from the start of the run. The GPU trainer adds its GPU's work (kernels,
// copies, communication) from CUPTI on the same clock. Only the steps of --trace-steps are
// recorded: every other step pays one branch per span. The file is written when the last
// traced step is done, so a long run's trace exists long before the run ends.
#ifndef COMMON_TRACE_H
#define COMMON_TRACE_H
#include "util.h"
#include "memory_trace.h"
#include <stdarg.h>
#include <time.h>

#define TRACE_MAX_DEPTH 16  // nesting of open spans
// what a span is, for the viewer's colours and scripts/plot_trace.py's rows
#define TRACE_CAT_STEP "step"
#define TRACE_CAT_PHASE "phase"
#define TRACE_CAT_BETWEEN "between"
enum { TRACE_PID_HOST = 0, TRACE_PID_GPU = 1 };

// a span of the host's main thread, kept for the GPU's activity to be matched to
typedef struct {
    const char *name, *cat;
    int step;
    double ts, dur;
} TraceSpan;

typedef struct {
    const char *path;        // NULL: no trace
    const char *program;     // the trainer that writes it
    FILE *f;             // file.f while the trace is being written
    AtomicFile file;     // written under a temporary name, renamed over the path once complete
    int first, last;         // the traced steps (from 1), inclusive
    int active;              // the current step is traced
    int step;                // the current step (from 1)
    int events, done;
    struct timespec t0;      // the clock's zero
    // the open spans of the main thread
    int depth;
    const char *open_name[TRACE_MAX_DEPTH], *open_cat[TRACE_MAX_DEPTH];
    double open_ts[TRACE_MAX_DEPTH];
    // with keep_spans, the main thread's spans of the traced steps, in the order they ended
    int keep_spans, nkept, capkept;
    TraceSpan *kept;
    // --memory-trace: sampled at the start of its step and at the end of each phase, with the
    // bytes in use that in_use measures (NULL: the listed buffers alone)
    MemoryTrace mem;
    size_t (*in_use)(void *ctx);
    void *in_use_ctx;
} Trace;

// microseconds since t0 on the host's monotonic clock
static inline double trace_now_us(const Trace *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t->t0.tv_sec) * 1e6 + (double)(now.tv_nsec - t->t0.tv_nsec) * 1e-3;
}

// "11:12" (or "11", one step) into [first, last]; 0 when the text is not that
static inline int trace_steps_parse(const char *text, int *first, int *last) {
    long a, b;
    const char *colon = strchr(text, ':');
    char head[32];
    if (!colon) {
        if (!parse_long(text, &a) || a < 1 || a > INT32_MAX) return 0;
        *first = *last = (int)a;
        return 1;
    }
    size_t n = (size_t)(colon - text);
    if (n == 0 || n >= sizeof head) return 0;
    memcpy(head, text, n);
    head[n] = 0;
    if (!parse_long(head, &a) || !parse_long(colon + 1, &b) || a < 1 || b < a || b > INT32_MAX) return 0;
    *first = (int)a;
    *last = (int)b;
    return 1;
}

// Opens the trace file at the start of the run (so that an unwritable path is refused before
// any training) for the steps first..last; path NULL or empty: no trace.
static inline void trace_open(Trace *t, const char *program, const char *path, int first, int last) {
    memset(t, 0, sizeof *t);
    t->program = program;
    clock_gettime(CLOCK_MONOTONIC, &t->t0);
    if (!path || !*path) return;
    t->path = path;
    t->first = first;
    t->last = last;
    t->file = atomic_open(path);
    t->f = t->file.f;
    if (fputs("{\"traceEvents\": [\n", t->f) == EOF) fatal("--trace: error writing %s: %s", path, strerror(errno));
}

static inline int trace_on(const Trace *t) { return t && t->f && t->active; }
// spans are followed: for the trace file, or for the memory trace's samples
static inline int trace_following(const Trace *t) { return t && ((t->f && t->active) || t->mem.active); }

static inline void trace_memory_sample(Trace *t, const char *after) {
    MemoryTrace *m = &t->mem;
    memory_trace_sample(m, after, trace_now_us(t), t->in_use ? t->in_use(t->in_use_ctx) : memory_trace_listed(m));
}

// One event line; the comma goes before every event but the first.
__attribute__((format(printf, 2, 3)))
static inline void trace_event(Trace *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int ok = fputs(t->events ? ",\n" : "", t->f) != EOF && vfprintf(t->f, fmt, ap) >= 0;
    va_end(ap);
    if (!ok) fatal("--trace: error writing %s: %s", t->file.tmp_path, strerror(errno));
    t->events++;
}

// A name for a process (pid) or one of its threads (tid >= 0), as the viewer shows them.
static inline void trace_name(Trace *t, int pid, int tid, const char *name) {
    if (!t->f) return;
    if (tid < 0)
        trace_event(t, "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": {\"name\": \"%s\"}}", pid,
                    name);
    else
        trace_event(t, "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
                    pid, tid, name);
}

// A complete span at [ts, ts + dur) microseconds on (pid, tid), in the current step.
// text as the inside of a JSON string (kernel names come from the compiler), cut to fit
static inline const char *trace_json_text(char *buf, size_t cap, const char *text) {
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c && o + 7 < cap; c++) {
        if (*c == '"' || *c == '\\') { buf[o++] = '\\'; buf[o++] = (char)*c; }
        else if (*c < 0x20) o += (size_t)snprintf(buf + o, cap - o, "\\u%04x", *c);
        else buf[o++] = (char)*c;
    }
    buf[o] = 0;
    return buf;
}

// A step's span is named "step N".
static inline void trace_span(Trace *t, const char *name, const char *cat, int pid, int tid, double ts, double dur) {
    char step_name[32], text[512];
    if (!strcmp(cat, TRACE_CAT_STEP)) {
        snprintf(step_name, sizeof step_name, "step %d", t->step);
        name = step_name;
    }
    trace_event(t, "{\"ph\": \"X\", \"name\": \"%s\", \"cat\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
                "\"dur\": %.3f, \"args\": {\"step\": %d}}", trace_json_text(text, sizeof text, name), cat, pid, tid, ts,
                dur < 0 ? 0.0 : dur, t->step);
}

// Spans of the host's main thread, opened and closed in nested order (no-ops off the traced
// steps). The names must live as long as the trace (string literals).
static inline void trace_begin(Trace *t, const char *name, const char *cat) {
    if (!trace_following(t)) return;
    if (t->depth == TRACE_MAX_DEPTH) fatal("internal: trace spans nested deeper than %d", TRACE_MAX_DEPTH);
    t->open_name[t->depth] = name;
    t->open_cat[t->depth] = cat;
    t->open_ts[t->depth] = trace_now_us(t);
    t->depth++;
}

static inline void trace_end(Trace *t) {
    if (!trace_following(t)) return;
    if (t->depth == 0) fatal("internal: a trace span ended that was not begun");
    t->depth--;
    if (!strcmp(t->open_cat[t->depth], TRACE_CAT_PHASE)) trace_memory_sample(t, t->open_name[t->depth]);
    if (!trace_on(t)) return;
    const double ts = t->open_ts[t->depth], dur = trace_now_us(t) - ts;
    trace_span(t, t->open_name[t->depth], t->open_cat[t->depth], TRACE_PID_HOST, 0, ts, dur);
    if (!t->keep_spans) return;
    if (t->nkept == t->capkept)
        t->kept = (TraceSpan *)xrealloc(t->kept, (size_t)(t->capkept = t->capkept ? 2 * t->capkept : 256) *
                                                     sizeof(TraceSpan));
    TraceSpan k = {t->open_name[t->depth], t->open_cat[t->depth], t->step, ts, dur};
    t->kept[t->nkept++] = k;
}

// Writes the end of the file and closes it, checking that it reached the disk.
static inline void trace_finish(Trace *t) {
    if (!t->f || t->done) return;
    int ok = fprintf(t->f, "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"program\": \"%s\", \"steps\": [%d, "
                     "%d], \"clock\": \"host monotonic clock, microseconds from the start of the run\"}}\n", t->program,
                     t->first, t->last) >= 0;
    if (!ok) fatal("--trace: error writing %s: %s", t->file.tmp_path, strerror(errno));
    fatal_context_set("writing --trace");
    atomic_commit(&t->file);
    fatal_context_set(NULL);
    t->f = NULL;
    t->done = 1;
    free(t->kept);
    t->kept = NULL;
    t->nkept = t->capkept = 0;
    printf("trace of steps %d..%d written: %s\n", t->first, t->last, t->path);
}

// Around a training step (step1 from 1): opens the step's span when it is traced. The span
// is closed by trace_step_end, after the work between steps, which the trace holds too.
static inline void trace_step_begin(Trace *t, int step1) {
    t->step = step1;
    t->active = t->f && step1 >= t->first && step1 <= t->last;
    memory_trace_step_begin(&t->mem, step1);
    if (t->mem.active) trace_memory_sample(t, NULL);
    if (t->active && step1 == t->first) {
        trace_name(t, TRACE_PID_HOST, -1, "host");
        trace_name(t, TRACE_PID_HOST, 0, "main thread");
    }
}

// After the step and the work between steps; the file is complete after the last traced step
// (or at the run's last step, when the run ends first: trace_finish then says which steps it has).
static inline void trace_step_end(Trace *t, int step1, int last_step) {
    memory_trace_write(&t->mem, t->program);
    if (t->active && (step1 == t->last || step1 == last_step)) {
        if (step1 < t->last) t->last = step1;
        trace_finish(t);
    }
    t->active = 0;
}

#endif // COMMON_TRACE_H
