// kernels/pdl.cuh: programmatic dependent launch (compute capability 9.0 on), which the
// generation step's kernels use: a kernel launched with it may start while the kernel before
// it on the stream is still running, do what needs nothing of that kernel (read its weights),
// and wait only where it reads that kernel's outputs.
// The rules every such kernel keeps:
//   - pdl_trigger() early: the next kernel may then start as this one's blocks finish;
//   - pdl_wait() in every block before anything the previous kernel wrote is read, and before
//     the block exits: a kernel whose blocks all returned without waiting would count as done
//     before the kernel it follows, and the one after it would wait on nothing.
// Below 9.0, or from code built for less (sm90_code), both are no-ops and the launch is an
// ordinary one.
#pragma once
#include "common.cuh"

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__global__ void pdl_probe_kernel() {}

// Whether this GPU runs code compiled for compute capability 9.0 or newer: code for less (an
// older build target, or compute_80 PTX that the driver compiles) has neither griddepcontrol
// nor cluster barriers, so programmatic launches and clusters must then stay off even on a 9.0
// GPU (a kernel without the wait would read what the kernel before it has not yet written).
static int sm90_code(void) {
    enum { MAX_DEVICES = 64 };
    static int known[MAX_DEVICES];  // 0 unknown, 1 no, 2 yes
    int dev = 0, major;
    CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= MAX_DEVICES) fatal("device %d: at most %d devices", dev, MAX_DEVICES);
    if (!known[dev]) {
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaFuncGetAttributes(&fa, pdl_probe_kernel));
        known[dev] = major >= 9 && fa.ptxVersion >= 90 ? 2 : 1;
    }
    return known[dev] == 2;
}

// kernel<<<grid, block, smem, s>>>(args...), with programmatic dependent launch when pdl is
// set and the GPU has it
template <typename... KArgs, typename... Args>
static void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, int pdl,
                       Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl && sm90_code() ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...));
}
