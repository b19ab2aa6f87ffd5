// kernels/offload.cuh: where the optimizer's state lives. --offload 1 keeps the fp32 master
// weights and AdamW's moments in pinned host memory instead of on the device: the device
// then holds only the parameters, gradients and activations. The memory is mapped, so under
// unified addressing one pointer serves both sides: the AdamW kernel (kernels/adamw.cuh)
// reads and writes the state in place over PCIe, each element crossing the bus once each
// way per step, and the checkpoint code copies it like device memory. The update's
// arithmetic is the same kernel's either way, so a run with offload computes exactly what a
// run without it does. Why the device runs the update rather than the host's cores: the
// arithmetic and stochastic rounding stay those of the run without offload, bit for bit, and
// nothing could overlap anyway, since the update waits for the whole backward (the clip
// needs the global gradient norm). The cost is bus traffic: 12 bytes of state per parameter
// each way with fp32 master weights and moments, 8 with bf16 moments (docs/memory.md
// estimates its time).
#pragma once
#include "common.cuh"

// bytes of zeroed optimizer state, on the device or (offload) in mapped pinned host memory
static void *optimizer_state_alloc(size_t bytes, int offload) {
    void *p = NULL;
    if (!offload) {
        CUDA_CHECK(cudaMalloc(&p, bytes));
        CUDA_CHECK(cudaMemset(p, 0, bytes));
        return p;
    }
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess)
        fatal("--offload 1: cannot pin %.2f GiB of host memory for the optimizer state (%s); free host memory, or "
              "use --offload 0", bytes / (1024.0 * 1024 * 1024), cudaGetErrorString(e));
    void *dev = NULL;
    CUDA_CHECK(cudaHostGetDevicePointer(&dev, p, 0));
    // the kernels and the copies use one pointer: true wherever CUDA has unified addressing
    if (dev != p) fatal("--offload 1 needs unified addressing (a 64-bit host); the host and device addresses differ");
    memset(p, 0, bytes);
    return p;
}

static void optimizer_state_free(void *p, int offload) {
    if (!p) return;
    if (offload) CUDA_CHECK(cudaFreeHost(p));
    else CUDA_CHECK(cudaFree(p));
}
