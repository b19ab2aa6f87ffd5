// gpu/trace_gpu.cuh: the GPU's side of --trace (common/trace.h): every kernel, copy and
// memset of the traced steps, from CUPTI's activity records (the library that ships with
// the CUDA toolkit, opened at run time: a host without it runs, and --trace says what is
// missing), on one row per CUDA stream, in the host's clock. Each record is matched, through
// the runtime or driver call that launched it, to the host phase it was launched in, and
// each phase gets a span on the GPU from its first kernel's start to its last one's end
// (a row of its own: phases on different streams overlap). CUPTI records only between the
// first traced step's start and the last one's end, so untraced steps pay nothing.
#pragma once
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include "../common/trace.h"
#include "../kernels/common.cuh"

// one kernel, copy or memset (start, end: CUPTI's clock, ns), or one launching call
typedef struct {
    int kind;          // CUPTI_ACTIVITY_KIND_*
    uint64_t start, end;
    uint32_t stream, correlation;
    char *name;        // kernels: the demangled name up to its arguments
    uint64_t bytes;    // copies and memsets
    int copy_kind;     // CUPTI_ACTIVITY_MEMCPY_KIND_*
} GpuRecord;

typedef struct {
    int on;                     // --trace with a GPU tracer that started
    int recording;
    void *lib;                  // libcupti
    double offset_us;           // host clock (us) = CUPTI clock (ns) / 1000 + offset_us
    GpuRecord *rec;
    size_t n, cap;
    decltype(&cuptiActivityEnable) enable;
    decltype(&cuptiActivityDisable) disable;
    decltype(&cuptiActivityFlushAll) flush;
    decltype(&cuptiActivityGetNextRecord) next_record;
    decltype(&cuptiActivityRegisterCallbacks) register_callbacks;
    decltype(&cuptiGetTimestamp) timestamp;
} GpuTracer;

static GpuTracer g_gpu_tracer;  // CUPTI's buffer callbacks carry no context

#define GPU_TRACE_BUFFER_BYTES ((size_t)8 << 20)
static const CUpti_ActivityKind GPU_TRACE_KINDS[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                     CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                                     CUPTI_ACTIVITY_KIND_DRIVER};

static void CUPTIAPI gpu_trace_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = (uint8_t *)aligned_alloc(8, GPU_TRACE_BUFFER_BYTES);
    if (!*buffer) fatal("--trace: out of host memory for CUPTI's buffers");
    *size = GPU_TRACE_BUFFER_BYTES;
    *max_records = 0;
}

// "void flash::fwd<64>(const bf16*, ...)" -> "flash::fwd<64>": readable rows in the viewer
static char *kernel_display_name(const char *mangled) {
    int status = 0;
    char *d = abi::__cxa_demangle(mangled, NULL, NULL, &status);
    const char *s = status == 0 && d ? d : mangled;
    if (!strncmp(s, "void ", 5)) s += 5;
    const char *paren = strchr(s, '(');
    size_t n = paren ? (size_t)(paren - s) : strlen(s);
    char *out = (char *)xmalloc(n + 1);
    memcpy(out, s, n);
    out[n] = 0;
    free(d);
    return out;
}

static void gpu_trace_keep(const GpuRecord *r) {
    GpuTracer *g = &g_gpu_tracer;
    if (g->n == g->cap) g->rec = (GpuRecord *)xrealloc(g->rec, (g->cap = g->cap ? 2 * g->cap : 4096) * sizeof(GpuRecord));
    g->rec[g->n++] = *r;
}

static void CUPTIAPI gpu_trace_buffer_completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
    GpuTracer *g = &g_gpu_tracer;
    CUpti_Activity *a = NULL;
    while (g->next_record(buffer, valid, &a) == CUPTI_SUCCESS) {
        GpuRecord r;
        memset(&r, 0, sizeof r);
        r.kind = a->kind;
        if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
            r.start = k->start, r.end = k->end, r.stream = k->streamId, r.correlation = k->correlationId;
            r.name = kernel_display_name(k->name ? k->name : "kernel");
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *c = (const CUpti_ActivityMemcpy6 *)a;
            r.start = c->start, r.end = c->end, r.stream = c->streamId, r.correlation = c->correlationId;
            r.bytes = c->bytes, r.copy_kind = c->copyKind;
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
            r.start = m->start, r.end = m->end, r.stream = m->streamId, r.correlation = m->correlationId;
            r.bytes = m->bytes;
        } else if (a->kind == CUPTI_ACTIVITY_KIND_RUNTIME || a->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            const CUpti_ActivityAPI *c = (const CUpti_ActivityAPI *)a;
            r.start = c->start, r.end = c->end, r.correlation = c->correlationId;
        } else {
            continue;
        }
        gpu_trace_keep(&r);
    }
    free(buffer);
}

// Opens CUPTI and lines its clock up with the trace's; a host without it, or a CUPTI that
// refuses, stops the run here, before training, naming what is missing.
static void gpu_tracer_start(Trace *t) {
    GpuTracer *g = &g_gpu_tracer;
    memset(g, 0, sizeof *g);
    if (!t->f) return;
    const char *names[] = {"libcupti.so", "libcupti.so.13"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !g->lib; i++) g->lib = dlopen(names[i], RTLD_NOW);
    if (!g->lib)
        fatal("--trace: the GPU's activity comes from CUPTI, and libcupti.so is not found (%s): add the CUDA "
              "toolkit's lib folder (or extras/CUPTI/lib64) to LD_LIBRARY_PATH", dlerror());
#define GPU_TRACE_SYM(field, sym)                                                                     \
    if (!(*(void **)&g->field = dlsym(g->lib, #sym))) fatal("--trace: libcupti.so has no %s", #sym);
    GPU_TRACE_SYM(enable, cuptiActivityEnable);
    GPU_TRACE_SYM(disable, cuptiActivityDisable);
    GPU_TRACE_SYM(flush, cuptiActivityFlushAll);
    GPU_TRACE_SYM(next_record, cuptiActivityGetNextRecord);
    GPU_TRACE_SYM(register_callbacks, cuptiActivityRegisterCallbacks);
    GPU_TRACE_SYM(timestamp, cuptiGetTimestamp);
#undef GPU_TRACE_SYM
    if (g->register_callbacks(gpu_trace_buffer_requested, gpu_trace_buffer_completed) != CUPTI_SUCCESS)
        fatal("--trace: CUPTI refused its buffers (another profiler attached?)");
    // the two clocks read back to back, the CUPTI one between two host reads
    uint64_t ns = 0;
    double h0 = trace_now_us(t);
    if (g->timestamp(&ns) != CUPTI_SUCCESS) fatal("--trace: CUPTI gives no timestamp");
    double h1 = trace_now_us(t);
    g->offset_us = 0.5 * (h0 + h1) - (double)ns * 1e-3;
    t->keep_spans = 1;
    g->on = 1;
}

// At the start of a step: the first traced step starts the recording
static void gpu_tracer_step_begin(const Trace *t, int step1) {
    GpuTracer *g = &g_gpu_tracer;
    if (!g->on || g->recording || step1 != t->first) return;
    CUDA_CHECK(cudaDeviceSynchronize());  // earlier work stays out of the records
    for (size_t i = 0; i < sizeof GPU_TRACE_KINDS / sizeof GPU_TRACE_KINDS[0]; i++)
        if (g->enable(GPU_TRACE_KINDS[i]) != CUPTI_SUCCESS)
            fatal("--trace: CUPTI refused to record activity kind %d", (int)GPU_TRACE_KINDS[i]);
    g->recording = 1;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

// The innermost host span that holds host time us (phases only: a phase span), or -1
static int host_span_at(const Trace *t, double us, int phases_only) {
    int best = -1;
    for (int i = 0; i < t->nkept; i++) {
        const TraceSpan *s = &t->kept[i];
        if ((phases_only && strcmp(s->cat, TRACE_CAT_PHASE) != 0) || us < s->ts || us > s->ts + s->dur) continue;
        if (best < 0 || s->dur < t->kept[best].dur) best = i;
    }
    return best;
}

// The recorded activity into the trace, after the last traced step: rows per stream (named
// by what runs there), each record's span, and each host phase's span on the GPU.
static void gpu_tracer_write(Trace *t, int device, const char *device_name) {
    GpuTracer *g = &g_gpu_tracer;
    char name[300];
    snprintf(name, sizeof name, "GPU %d (%s)", device, device_name);
    trace_name(t, TRACE_PID_GPU, -1, name);
    trace_name(t, TRACE_PID_GPU, 0, "phases (from their launches)");
    // the launching calls' host times, by correlation id (sorted for a binary search)
    size_t ncall = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->rec[i].kind == CUPTI_ACTIVITY_KIND_RUNTIME || g->rec[i].kind == CUPTI_ACTIVITY_KIND_DRIVER) ncall++;
    uint32_t(*calls)[3] = (uint32_t(*)[3])xmalloc((ncall ? ncall : 1) * sizeof *calls);  // id, index, 0
    ncall = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->rec[i].kind == CUPTI_ACTIVITY_KIND_RUNTIME || g->rec[i].kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            calls[ncall][0] = g->rec[i].correlation;
            calls[ncall][1] = (uint32_t)i;
            calls[ncall++][2] = 0;
        }
    qsort(calls, ncall, sizeof *calls, cmp_u32);
    // each host phase span's GPU extent
    double *first = (double *)xmalloc((t->nkept ? t->nkept : 1) * sizeof(double));
    double *last = (double *)xmalloc((t->nkept ? t->nkept : 1) * sizeof(double));
    for (int i = 0; i < t->nkept; i++) first[i] = INFINITY, last[i] = -INFINITY;
    // streams seen, and what they carry
    uint32_t streams[64];
    int nstreams = 0, kernels[64] = {0}, comm[64] = {0}, copies[64] = {0};
    for (size_t i = 0; i < g->n; i++) {
        const GpuRecord *r = &g->rec[i];
        if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME || r->kind == CUPTI_ACTIVITY_KIND_DRIVER) continue;
        int s = 0;
        while (s < nstreams && streams[s] != r->stream) s++;
        if (s == nstreams && nstreams < 64) streams[nstreams++] = r->stream;
        const int is_kernel = r->kind != CUPTI_ACTIVITY_KIND_MEMCPY && r->kind != CUPTI_ACTIVITY_KIND_MEMSET;
        const int is_comm = is_kernel && r->name && strstr(r->name, "nccl") != NULL;
        if (s < 64) { kernels[s] += is_kernel && !is_comm; comm[s] += is_comm; copies[s] += !is_kernel; }
        const double ts = (double)r->start * 1e-3 + g->offset_us, dur = (double)(r->end - r->start) * 1e-3;
        char label[160];
        const char *cat = is_comm ? "comm" : is_kernel ? "kernel" : r->kind == CUPTI_ACTIVITY_KIND_MEMSET ? "memset"
                                                                                                          : "memcpy";
        if (!is_kernel)
            snprintf(label, sizeof label, "%s %.1f KiB", r->kind == CUPTI_ACTIVITY_KIND_MEMSET ? "memset"
                     : r->copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD ? "copy host to device"
                     : r->copy_kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "copy device to host" : "copy",
                     (double)r->bytes / 1024.0);
        // the host phase whose call launched it, and the step (or the work after it) it was in
        int phase = -1, owner = -1;
        uint32_t key[3] = {r->correlation, 0, 0};
        const uint32_t(*c)[3] = (const uint32_t(*)[3])bsearch(key, calls, ncall, sizeof *calls, cmp_u32);
        if (c) {
            const double launch = (double)g->rec[(*c)[1]].start * 1e-3 + g->offset_us;
            phase = host_span_at(t, launch, 1);
            owner = host_span_at(t, launch, 0);
        }
        if (phase >= 0) {
            if (ts < first[phase]) first[phase] = ts;
            if (ts + dur > last[phase]) last[phase] = ts + dur;
        }
        const int saved_step = t->step;
        if (owner >= 0) t->step = t->kept[owner].step;
        trace_span(t, is_kernel ? r->name : label, cat, TRACE_PID_GPU, (int)r->stream, ts, dur);
        t->step = saved_step;
    }
    for (int s = 0; s < nstreams; s++) {
        snprintf(name, sizeof name, "stream %u (%s)", streams[s], comm[s] ? "communication"
                 : kernels[s] ? "compute" : copies[s] ? "copies" : "other");
        trace_name(t, TRACE_PID_GPU, (int)streams[s], name);
    }
    const int saved_step = t->step;
    for (int i = 0; i < t->nkept; i++) {
        if (!(last[i] > first[i])) continue;
        t->step = t->kept[i].step;
        trace_span(t, t->kept[i].name, TRACE_CAT_PHASE, TRACE_PID_GPU, 0, first[i], last[i] - first[i]);
    }
    t->step = saved_step;
    free(first);
    free(last);
    free(calls);
}

// After a step and its work between steps: the last traced step stops the recording and
// writes what the GPU did into the trace, then the trace ends.
static void gpu_tracer_step_end(Trace *t, int step1, int last_step) {
    GpuTracer *g = &g_gpu_tracer;
    if (g->recording && t->active && (step1 == t->last || step1 == last_step)) {
        CUDA_CHECK(cudaDeviceSynchronize());
        for (size_t i = 0; i < sizeof GPU_TRACE_KINDS / sizeof GPU_TRACE_KINDS[0]; i++) g->disable(GPU_TRACE_KINDS[i]);
        if (g->flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != CUPTI_SUCCESS) fatal("--trace: CUPTI could not flush");
        g->recording = 0;
        int dev = 0;
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        gpu_tracer_write(t, dev, prop.name);
        for (size_t i = 0; i < g->n; i++) free(g->rec[i].name);
        free(g->rec);
        g->rec = NULL;
        g->n = g->cap = 0;
    }
    trace_step_end(t, step1, last_step);
}
