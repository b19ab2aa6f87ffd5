// kernels/offload.cuh: where the optimizer's state lives, and how the update reaches it
// when it is in host memory. --offload keeps the fp32 master weights and AdamW's moments in
// pinned host memory instead of on the device, which then holds only the parameters,
// gradients and activations. Two ways to update them, both with the same AdamW kernel
// (kernels/adamw.cuh), so either computes exactly what a run without offload does:
//   --offload 1 (mapped): the memory is mapped, so under unified addressing one pointer
//     serves both sides; the kernel's threads read and write the state in place over PCIe.
//   --offload 2 (staged): the copy engines move the state through two device buffers of
//     OFFLOAD_STAGE_CHUNK elements, chunk by chunk: chunk i+1 comes in while the kernel
//     updates chunk i and chunk i-1 goes back (three streams, ordered by events). Bulk copies
//     reach the bus's bandwidth however the kernel accesses memory; the price is the two
//     buffers on the device.
// Either way each element crosses the bus once each way per step: 12 bytes of state per
// parameter with fp32 master weights and moments, 8 with bf16 moments (docs/memory.md).
// Why the device runs the update rather than the host's cores: the arithmetic and stochastic
// rounding stay those of the run without offload, bit for bit, and nothing could overlap
// anyway, since the update waits for the whole backward (the clip needs the global norm).
// The checkpoint code copies the state with cudaMemcpyDefault, as it does device memory.
#pragma once
#include "common.cuh"

// bytes of zeroed, pinned and mapped host memory that kernels reach through the host pointer;
// what: the run's flags and the data, for the message when it cannot be had (e.g. "--offload 2",
// "the optimizer state")
static void *pinned_mapped_alloc(size_t bytes, const char *flags, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess)
        fatal("%s: cannot pin %.2f GiB of host memory for %s (%s); free host memory, or keep it on the device "
              "(--offload 0)", flags, bytes / (1024.0 * 1024 * 1024), what, cudaGetErrorString(e));
    void *dev = NULL;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, p, 0));
    // the kernels and the copies use one pointer: true wherever CUDA has unified addressing
    if (dev != p) fatal("%s needs unified addressing (a 64-bit host); the host and device addresses differ", flags);
    memset(p, 0, bytes);
    return p;
}

// bytes of zeroed optimizer state, on the device or (offload) in mapped pinned host memory
static void *optimizer_state_alloc(size_t bytes, int offload) {
    void *p = NULL;
    if (!offload) {
        CUDA_CHECK(cudaMalloc(&p, bytes));
        CUDA_CHECK(cudaMemset(p, 0, bytes));
        return p;
    }
    return pinned_mapped_alloc(bytes, offload == 1 ? "--offload 1" : "--offload 2", "the optimizer state");
}

static void optimizer_state_free(void *p, int offload) {
    if (!p) return;
    if (offload) CUDA_CHECK(cudaFreeHost(p));
    else CUDA_CHECK(cudaFree(p));
}

// The fp32 array p of the optimizer state as host memory, or NULL where it is not (no
// offload, or bf16 moments, which a checkpoint holds as fp32). With offload a checkpoint
// reads and writes such an array in place: staged through another host buffer each moment
// would take 4 bytes a parameter more host memory, 12.5 GB at GPT-2 1.5B for the two.
static float *offload_host_fp32(void *p, int offload, int is_fp32) { return offload && is_fp32 ? (float *)p : NULL; }

// --offload 2: elements per staged chunk. 4M elements: 48 MiB of fp32 state a buffer, about
// a millisecond of PCIe per chunk, so the pipeline's fill and drain cost little
#define OFFLOAD_STAGE_CHUNK ((size_t)1 << 22)
enum { OFFLOAD_NONE, OFFLOAD_MAPPED, OFFLOAD_STAGED };

typedef struct {
    int has_master;
    size_t moment_bytes;
    char *buf[2];  // device: master (OFFLOAD_STAGE_CHUNK floats, if any), then m, then v
    cudaStream_t h2d, d2h;
    cudaEvent_t loaded[2], updated[2], freed[2];
} OffloadStage;

// device bytes of the two staging buffers
static size_t offload_stage_bytes(int has_master, size_t moment_bytes) {
    return 2 * OFFLOAD_STAGE_CHUNK * ((has_master ? sizeof(float) : 0) + 2 * moment_bytes);
}

static void offload_stage_init(OffloadStage *st, int has_master, size_t moment_bytes) {
    st->has_master = has_master;
    st->moment_bytes = moment_bytes;
    // blocking streams: the synchronous copies of the checkpoint code wait for them
    CUDA_CHECK(cudaStreamCreate(&st->h2d));
    CUDA_CHECK(cudaStreamCreate(&st->d2h));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMalloc(&st->buf[i], offload_stage_bytes(has_master, moment_bytes) / 2));
        CUDA_CHECK(cudaEventCreateWithFlags(&st->loaded[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&st->updated[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&st->freed[i], cudaEventDisableTiming));
    }
}

static void offload_stage_free(OffloadStage *st) {
    if (!st->h2d) return;
    for (int i = 0; i < 2; i++) {
        cudaFree(st->buf[i]);
        cudaEventDestroy(st->loaded[i]);
        cudaEventDestroy(st->updated[i]);
        cudaEventDestroy(st->freed[i]);
    }
    cudaStreamDestroy(st->h2d);
    cudaStreamDestroy(st->d2h);
    memset(st, 0, sizeof *st);
}

// Updates the n elements of host state (master may be NULL) chunk by chunk: update(ctx, c0,
// c1, master, m, v) enqueues on `compute` the update of elements [c0, c1), whose state it
// finds at the device pointers given (element c0 first). `compute` waits for the last copy
// back, so whatever follows it on that stream, and any synchronous copy, sees the new state.
typedef void (*StagedUpdateFn)(void *ctx, size_t c0, size_t c1, float *master, void *m, void *v);
static void offload_staged_update(OffloadStage *st, float *master, void *m, void *v, size_t n, StagedUpdateFn update,
                                  void *ctx, cudaStream_t compute) {
    const size_t mb = st->moment_bytes, C = OFFLOAD_STAGE_CHUNK;
    for (size_t c0 = 0, i = 0; c0 < n; c0 += C, i++) {
        const int b = (int)(i & 1);
        const size_t c = n - c0 < C ? n - c0 : C;
        float *dm = st->has_master ? (float *)st->buf[b] : NULL;
        char *dmo = st->buf[b] + (st->has_master ? C * sizeof(float) : 0), *dv = dmo + C * mb;
        char *hm = (char *)m + c0 * mb, *hv = (char *)v + c0 * mb;
        // the buffer is free once the copy back of the chunk before last has read it
        CUDA_CHECK(cudaStreamWaitEvent(st->h2d, st->freed[b], 0));
        if (dm) CUDA_CHECK(cudaMemcpyAsync(dm, master + c0, c * sizeof(float), cudaMemcpyHostToDevice, st->h2d));
        CUDA_CHECK(cudaMemcpyAsync(dmo, hm, c * mb, cudaMemcpyHostToDevice, st->h2d));
        CUDA_CHECK(cudaMemcpyAsync(dv, hv, c * mb, cudaMemcpyHostToDevice, st->h2d));
        CUDA_CHECK(cudaEventRecord(st->loaded[b], st->h2d));
        CUDA_CHECK(cudaStreamWaitEvent(compute, st->loaded[b], 0));
        update(ctx, c0, c0 + c, dm, dmo, dv);
        CUDA_CHECK(cudaEventRecord(st->updated[b], compute));
        CUDA_CHECK(cudaStreamWaitEvent(st->d2h, st->updated[b], 0));
        if (dm) CUDA_CHECK(cudaMemcpyAsync(master + c0, dm, c * sizeof(float), cudaMemcpyDeviceToHost, st->d2h));
        CUDA_CHECK(cudaMemcpyAsync(hm, dmo, c * mb, cudaMemcpyDeviceToHost, st->d2h));
        CUDA_CHECK(cudaMemcpyAsync(hv, dv, c * mb, cudaMemcpyDeviceToHost, st->d2h));
        CUDA_CHECK(cudaEventRecord(st->freed[b], st->d2h));
    }
    for (int b = 0; b < 2; b++) CUDA_CHECK(cudaStreamWaitEvent(compute, st->freed[b], 0));
}
