// kernels/common.cuh: what every kernel header shares: the one CUDA/cuBLAS error check,
// the floatX storage type chosen at build time (-DPRECISION=BF16|FP16|FP32; fp16 trains
// with dynamic loss scaling, gpu/host/loss_scaler.h), 16-byte vector load/store helpers, small
// warp/block reductions, the current GPU's capabilities the launchers choose by, and the
// rounding of fp32 master weights to floatX.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <math.h>
#include "../common/util.h"
#include "../common/test_hooks.h"

// ---------------------------------------------------------------------------
// error checks: every CUDA and cuBLAS call goes through one of these

static inline void cuda_check_impl(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) {
        fflush(stdout);
        fprintf(stderr, "error: CUDA: %s (%s) at %s:%d\n", cudaGetErrorString(e), what, file, line);
        if (e == cudaErrorMemoryAllocation)
            fprintf(stderr, "error: out of device memory: lower -b (and raise -d's accumulation to keep the "
                            "total batch), or raise -r (recompute more in backward)\n");
        fatal_exit();
    }
}
static inline void cublas_check_impl(cublasStatus_t s, const char *what, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        fflush(stdout);
        fprintf(stderr, "error: cuBLAS status %d (%s) at %s:%d\n", (int)s, what, file, line);
        fatal_exit();
    }
}
#define CUDA_CHECK(call) cuda_check_impl((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) cublas_check_impl((call), #call, __FILE__, __LINE__)
// after every kernel launch: catches bad launch configurations at once (no sync)
#define LAUNCH_CHECK() cuda_check_impl(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// ---------------------------------------------------------------------------
// storage precision of parameters, gradients and activations

#define PRECISION_FP32 0
#define PRECISION_BF16 1
#define PRECISION_FP16 2
#define FP32 PRECISION_FP32
#define BF16 PRECISION_BF16
#define FP16 PRECISION_FP16
#ifndef PRECISION
#define PRECISION BF16
#endif

#if PRECISION == PRECISION_FP32
typedef float floatX;
#define CUBLAS_FLOATX CUDA_R_32F
#define PRECISION_NAME "fp32"
#elif PRECISION == PRECISION_BF16
typedef __nv_bfloat16 floatX;
#define CUBLAS_FLOATX CUDA_R_16BF
#define PRECISION_NAME "bf16"
#elif PRECISION == PRECISION_FP16
typedef __half floatX;
#define CUBLAS_FLOATX CUDA_R_16F
#define PRECISION_NAME "fp16"
#else
#error "PRECISION must be BF16, FP16 or FP32"
#endif

__host__ __device__ __forceinline__ float to_float(float x) { return x; }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__host__ __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// ---------------------------------------------------------------------------
// 16-byte vectors: X128 holds 16 bytes of floatX (8 bf16 or 4 fp32)

template <typename T>
struct alignas(16) Vec128 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
    __device__ __forceinline__ T &operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T &operator[](int i) const { return v[i]; }
    __device__ static Vec128 zeros() {
        Vec128 r;
        for (int i = 0; i < size; i++) r.v[i] = from_float<T>(0.0f);
        return r;
    }
};
typedef Vec128<floatX> X128;
typedef Vec128<float> F128;

template <typename T>
__device__ __forceinline__ Vec128<T> load128(const T *p) { return *reinterpret_cast<const Vec128<T> *>(p); }
// load that bypasses L1 and marks the line evict-first (data read once)
template <typename T>
__device__ __forceinline__ Vec128<T> load128cs(const T *p) {
    Vec128<T> r;
    *reinterpret_cast<int4 *>(&r) = __ldcs(reinterpret_cast<const int4 *>(p));
    return r;
}
template <typename T>
__device__ __forceinline__ void store128(T *p, const Vec128<T> &x) { *reinterpret_cast<Vec128<T> *>(p) = x; }

// 16-byte asynchronous copy global -> shared (cp.async, bypassing L1), in commit groups;
// valid == false zero-fills the 16 bytes and reads nothing
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid = true) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
// the same for 4 bytes (through L1: .cg takes only 16)
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem, bool valid = true) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// wait until at most N of this thread's commit groups are still in flight
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// 2^x through the hardware unit (ex2.approx.ftz: about 2 ulp, denormal results flushed to
// 0, 2^-inf = 0): one instruction where exp2f/expf cost a handful
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// ---------------------------------------------------------------------------
// reductions (fixed order: deterministic)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float shared[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();  // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v) {
    __shared__ float shared[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(v);
}

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// ---------------------------------------------------------------------------
// What the launchers choose kernels and tile shapes by: the current GPU's compute capability
// and the dynamic shared memory a block may opt in to (99 KB on sm_86 and sm_89, 163 KB on
// sm_80, 227 KB on sm_90). Asked once per device, since launchers ask at every launch; NULL
// where no GPU answers (a memory plan made without one), and then asked again next time.
//
// The test hook GPT2_TEST_GPU_CAP=80|86|89 (common/test_hooks.h) lowers both to that
// architecture's, so that a newer GPU takes the kernels and tile shapes an A100 (80), an
// RTX 30xx/A10 (86) or an RTX 40xx/L4 (89) would: no wgmma below 9.0, no FP8 below 8.9,
// tiles that fit 163 or 99 KB. Registers per thread and per SM are the same on all of
// them; shared memory per SM only bounds how many blocks share an SM, which no launcher
// chooses by. With the build's compute_80 PTX (make GPU_ARCH=ptx) the code itself is then
// what those GPUs compile. A test mode: it says so on stderr once; a value other than
// those is refused here, when the GPU is first asked.
struct DeviceCaps {
    int cc;          // major * 10 + minor
    int smem_optin;  // bytes
};
// the test cap: 0 when unset; a value other than 80, 86, 89 is refused
static int device_caps_test_cap(int *smem_optin) {
    const TestHooks *h = test_hooks();
    if (h->gpu_cap < 0)
        fatal("GPT2_TEST_GPU_CAP=%s: the test cap is 80 (A100), 86 (RTX 30xx, A10) or 89 (RTX 40xx, L4)",
              h->gpu_cap_text);
    *smem_optin = h->gpu_cap_smem_optin;
    return h->gpu_cap;
}
static const DeviceCaps *device_caps(void) {
    enum { MAX_DEVICES = 64 };
    static DeviceCaps caps[MAX_DEVICES];
    int dev = -1, major = 0, minor = 0, smem = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEVICES) {
        (void)cudaGetLastError();  // (not an error of the next kernel launch)
        return NULL;
    }
    if (caps[dev].cc) return &caps[dev];
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    int cap_smem = 0, cc = major * 10 + minor;
    const int cap = device_caps_test_cap(&cap_smem);
    if (cap && cap < cc) {
        fprintf(stderr, "note: GPT2_TEST_GPU_CAP=%d: GPU %d (compute capability %d.%d, %d bytes of shared memory a "
                        "block) is treated as %d.%d with %d bytes\n", cap, dev, major, minor, smem, cap / 10, cap % 10,
                cap_smem);
        cc = cap;
        smem = cap_smem < smem ? cap_smem : smem;
    }
    caps[dev].smem_optin = smem;
    caps[dev].cc = cc;
    return &caps[dev];
}

// ---------------------------------------------------------------------------
// Second stage of the deterministic column sums (bias and layernorm parameter
// gradients): partials holds P rows of M fp32 partial sums, M = up to three runs of W
// columns; column c's total, summed over the rows in a fixed tree order, is added to
// out[c / W][c % W] (out1, out2 unused when M <= W, M <= 2W).
// A block is 32 columns x 32 row lanes: each lane walks every 32nd row, so the loads are
// coalesced and many are in flight (one thread per column walking all P rows serially
// was latency-bound: ~P dependent-latency loads per call).

#define PSUM_COLS 32
#define PSUM_LANES 32

__global__ void __launch_bounds__(PSUM_COLS * PSUM_LANES)
add_partial_sums_kernel(floatX *out0, floatX *out1, floatX *out2, int W, const float *partials, int P, int M) {
    __shared__ float part[PSUM_LANES][PSUM_COLS + 1];
    int c = blockIdx.x * PSUM_COLS + threadIdx.x;
    float v = 0.0f;
    if (c < M) {
#pragma unroll 4
        for (int p = threadIdx.y; p < P; p += PSUM_LANES) v += partials[(size_t)p * M + c];
    }
    part[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && c < M) {
        float sum = 0.0f;
        for (int k = 0; k < PSUM_LANES; k++) sum += part[k][threadIdx.x];
        floatX *dst = (c < W ? out0 : c < 2 * W ? out1 : out2) + c % W;
        *dst = from_float<floatX>(to_float(*dst) + sum);
    }
}

static void add_partial_sums(floatX *out0, floatX *out1, floatX *out2, int W, const float *partials, int P, int M,
                             cudaStream_t s) {
    add_partial_sums_kernel<<<ceil_div(M, PSUM_COLS), dim3(PSUM_COLS, PSUM_LANES), 0, s>>>(out0, out1, out2, W,
                                                                                           partials, P, M);
    LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------
// stochastic rounding fp32 -> bf16: add random low bits, then truncate. The random bits
// come from a hash of (seed, index), so a run is reproducible.

__device__ __forceinline__ uint32_t hash_u32(uint32_t x, uint32_t seed) {
    // a small integer hash (murmur-style finaliser)
    x ^= seed * 0x9E3779B9u;
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
__device__ __forceinline__ void stochastic_round(float in, float *out, uint32_t rnd) { *out = in; }
__device__ __forceinline__ void stochastic_round(float in, __nv_bfloat16 *out, uint32_t rnd) {
    uint32_t u = __float_as_uint(in);
    if ((u & 0x7f800000u) == 0x7f800000u) { *out = __float2bfloat16_rn(in); return; }  // inf/nan
    u += rnd & 0xffffu;
    *out = __ushort_as_bfloat16((unsigned short)(u >> 16));
}
// fp16: plain round-to-nearest (the fp32 master weights keep the small updates)
__device__ __forceinline__ void stochastic_round(float in, __half *out, uint32_t rnd) { *out = __float2half_rn(in); }

// p[i] uniform in [-amp, amp] from a hash of (i, seed): test and timing data, the same on
// every run (random bits rather than zeros: the tensor cores' power, and so the clock under
// the board's limit, depends on them)
__global__ void fill_uniform_kernel(floatX *p, size_t n, float amp, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = hash_u32((uint32_t)i ^ (uint32_t)(i >> 32) * 0x85EBCA6Bu, seed);
        p[i] = (floatX)((h * (1.0f / 4294967296.0f) * 2.0f - 1.0f) * amp);
    }
}
static void fill_uniform(floatX *p, size_t n, float amp, uint32_t seed, cudaStream_t s) {
    fill_uniform_kernel<<<1024, 256, 0, s>>>(p, n, amp, seed);
    LAUNCH_CHECK();
}
