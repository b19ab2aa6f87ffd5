// dev/test/gpu_testutil.cuh: what the GPU tests share: a seeded random stream on the host
// (xorshift; the tests print the seed so a run can be repeated), the check line and the
// final count ("N checks, M failed"), and device buffers to and from host vectors.
#pragma once
#include "kernels/common.cuh"
#include <cmath>
#include <cstdarg>
#include <algorithm>
#include <vector>

static uint64_t g_rng;  // seeded by the test's main (never 0)
static double uniform01() {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return ((g_rng >> 11) + 0.5) / 9007199254740992.0;
}
static double normal() { return sqrt(-2 * log(uniform01())) * cos(6.283185307179586 * uniform01()); }
// n normal values of the given mean and standard deviation, rounded to floatX
static std::vector<floatX> randn(size_t n, double mean, double sd) {
    std::vector<floatX> v(n);
    for (auto &x : v) x = (floatX)(float)(mean + normal() * sd);
    return v;
}

// One check: its line, "ok" or "FAIL" at the end, counted
static int g_checks = 0, g_failures = 0;
static void report(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(bool ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("  ");
    vprintf(fmt, ap);
    printf(" %s\n", ok ? "ok" : "FAIL");
    va_end(ap);
    fflush(stdout);
    g_checks++;
    g_failures += !ok;
}
// The last line, and the exit status: 1 when a check failed
static int report_finish(void) {
    printf("%d checks, %d failed\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}

// A device copy of h, extra_bytes more allocated after it
template <class T> static T *upload(const std::vector<T> &h, size_t extra_bytes = 0) {
    T *d;
    CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(h.size() * sizeof(T) + extra_bytes, 1)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
// n values of d, after everything queued on the device
template <class T> static std::vector<T> download(const T *d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
