// gpu/device_check.cuh: whether this binary can run on the GPU it was given: compute
// capability 8.0 (A100) or newer, and code in the binary for it (machine code of its
// architecture, or PTX the driver compiles for it). A refusal names the GPU and the make
// command that builds for it; the kernels' own choices by GPU are theirs (kernels/*.cuh).
#pragma once
#include "../kernels/common.cuh"

// Every kernel of a program is built for the same GPU_ARCH: whether this one loads says it
// for all of them.
__global__ void device_check_probe_kernel(void) {}

// dev, prop: the GPU (cudaGetDeviceProperties); program: the binary, for the messages
static void device_check(int dev, const cudaDeviceProp *prop, const char *program) {
    const int cc = prop->major * 10 + prop->minor;
    if (cc < 80)
        fatal("GPU %d (%s) is compute capability %d.%d; %s needs 8.0 (A100) or newer", dev, prop->name, prop->major,
              prop->minor, program);
    cudaFuncAttributes fa;
    const cudaError_t e = cudaFuncGetAttributes(&fa, device_check_probe_kernel);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
        (void)cudaGetLastError();
        fatal("this %s has no code for GPU %d (%s, compute capability %d.%d): rebuild it with make on a machine "
              "with this GPU, or make GPU_ARCH=%d%s (GPU_ARCH=all: every GPU from 8.0 on)", program, dev, prop->name,
              prop->major, prop->minor, cc, cc == 90 ? "a" : "");
    }
    CUDA_CHECK(e);
}
