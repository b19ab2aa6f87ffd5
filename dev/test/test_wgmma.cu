// dev/test/test_wgmma.cu: the wgmma building blocks of kernels/attention_sm90.cuh against a
// double-precision CPU product, on fresh random tiles: the shared-memory descriptors in
// their K-major and MN-major readings, the 64- and 128-wide products, and an accumulator
// packed into the A operand of the next product (as P and dS are). One warpgroup, one
// block. A bf16 or fp16 build that includes sm_90a (GPU_ARCH=90a or all), run on a GPU of
// compute capability 9.0; exit 1 on any miss, 77 (skipped) with another build or GPU.
#include "kernels/attention.cuh"
#include <vector>
#include <time.h>

#if !FLASH_WGMMA || PRECISION == PRECISION_FP32
int main() {
    printf("test_wgmma: needs a bf16/fp16 build that includes sm_90a (GPU_ARCH=90a or all); this is a %s build%s\n",
           PRECISION_NAME, FLASH_WGMMA ? "" : " without sm_90a");
    return 77;
}
#else
using namespace flash90;

// X (64 x 64), Y (128 x 64), Z (64 x 64) row-major in global memory.
// s1 = X Y[0:64]^T (64 x 64), s2 = X Y^T (64 x 128), o = floatX(s1) Z (64 x 64),
// s3 = X Y[0:64]^T again with X as a register operand (ldmatrix fragments)
__global__ void wgmma_probe_kernel(float *s1, float *s2, float *o, float *s3, const floatX *X, const floatX *Y,
                                   const floatX *Z) {
#if FLASH90_DEVICE_CODE
    floatX *sX = smem_base(), *sY = sX + 64 * HS, *sZ = sY + 128 * HS;
    flash::load_tile<64, HS, 128>(sX, X, 0, HS, 64);
    flash::load_tile<128, HS, 128>(sY, Y, 0, HS, 128);
    flash::load_tile<64, HS, 128>(sZ, Z, 0, HS, 64);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    const int t = threadIdx.x, w = t / 32, g = (t & 31) >> 2, q = t & 3;
    float a[32], b[64], c[32], e[32];
    uint32_t xa[4][4];
    tile_to_a(xa, sX, w, t & 31);
    zero(c);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) mma_ss<64>(a, desc_k(sX, kk), desc_k(sY, kk), kk);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) mma_ss<128>(b, desc_k(sX, kk), desc_k(sY, kk), kk);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) mma_rs<0>(e, xa[kk], desc_k(sY, kk), kk);
    wg_commit();
    wg_wait();
    wg_fence_regs(a);
    wg_fence_regs(b);
    wg_fence_regs(e);
    uint32_t pa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; kk++) acc_to_a(pa[kk], a, kk);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) mma_rs_mn(c, pa[kk], desc_mn(sZ, kk));
    wg_commit();
    wg_wait();
    wg_fence_regs(c);
    for (int i = 0; i < 64; i++) {  // accumulator element i: row 16w + g + 8((i>>1)&1), column 8(i>>2) + 2q + (i&1)
        int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * q + (i & 1);
        if (i < 32) {
            s1[row * 64 + col] = a[i];
            o[row * 64 + col] = c[i];
            s3[row * 64 + col] = e[i];
        }
        s2[row * 128 + col] = b[i];
    }
#else
    __trap();  // (the build's other architectures: never launched, see main)
#endif
}

static uint64_t rng;
static float frand() {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
}
static int failed = 0;
static void check(const char *what, const std::vector<float> &got, const std::vector<double> &ref, double tol) {
    double e = 0, m = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double d = fabs(got[i] - ref[i]);
        e = d == d && e == e ? fmax(e, d) : NAN;
        m = fmax(m, fabs(ref[i]));
    }
    double rel = e / m;
    bool ok = rel <= tol;
    printf("  %-34s max rel err %.3e (tol %.0e) %s\n", what, rel, tol, ok ? "ok" : "FAIL");
    failed += !ok;
}

int main(int argc, char **argv) {
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : (uint64_t)time(NULL);
    rng = seed;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_wgmma: no GPU\n");
        return 77;
    }
    const DeviceCaps *caps = device_caps();
    const int cc = caps ? caps->cc : 0;
    if (cc != 90) {
        printf("test_wgmma: wgmma runs on GPUs of compute capability 9.0; this one is %d.%d\n", cc / 10, cc % 10);
        return 77;
    }
    if (!flash_wgmma_runs_here()) {  // (the launchers would take the mma.sync kernels here: a miss)
        printf("test_wgmma: FAIL: this 9.0 GPU does not run the build's sm_90a code (flash_wgmma_runs_here)\n");
        return 1;
    }
    printf("test_wgmma (%s), seed %llu\n", PRECISION_NAME, (unsigned long long)seed);
    std::vector<floatX> X(64 * 64), Y(128 * 64), Z(64 * 64);
    for (auto &x : X) x = (floatX)frand();
    for (auto &x : Y) x = (floatX)frand();
    for (auto &x : Z) x = (floatX)frand();
    floatX *dX, *dY, *dZ;
    float *ds1, *ds2, *dO, *ds3;
    CUDA_CHECK(cudaMalloc(&dX, X.size() * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dY, Y.size() * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&dZ, Z.size() * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&ds1, 64 * 64 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ds2, 64 * 128 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dO, 64 * 64 * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&ds3, 64 * 64 * sizeof(float)));
    CUDA_CHECK(cudaMemset(ds3, 0xFF, 64 * 64 * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(dX, X.data(), X.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dY, Y.data(), Y.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dZ, Z.data(), Z.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(ds1, 0xFF, 64 * 64 * sizeof(float)));  // NaN: unwritten outputs fail
    CUDA_CHECK(cudaMemset(ds2, 0xFF, 64 * 128 * sizeof(float)));
    CUDA_CHECK(cudaMemset(dO, 0xFF, 64 * 64 * sizeof(float)));
    size_t smem = (64 + 128 + 64) * HS * sizeof(floatX) + SMEM_SLACK;
    CUDA_CHECK(cudaFuncSetAttribute(wgmma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    wgmma_probe_kernel<<<1, 128, smem>>>(ds1, ds2, dO, ds3, dX, dY, dZ);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> s1(64 * 64), s2(64 * 128), o(64 * 64), s3(64 * 64);
    CUDA_CHECK(cudaMemcpy(s3.data(), ds3, s3.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(s1.data(), ds1, s1.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(s2.data(), ds2, s2.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(o.data(), dO, o.size() * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<double> r1(64 * 64), r2(64 * 128), ro(64 * 64, 0.0);
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 128; j++) {
            double acc = 0;
            for (int k = 0; k < 64; k++) acc += (double)(float)X[i * 64 + k] * (double)(float)Y[j * 64 + k];
            r2[i * 128 + j] = acc;
            if (j < 64) r1[i * 64 + j] = acc;
        }
    // the A operand is the fp32 accumulator rounded to floatX: use the GPU's own s1, rounded
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 64; j++) {
            double acc = 0;
            for (int k = 0; k < 64; k++) acc += (double)(float)(floatX)s1[i * 64 + k] * (double)(float)Z[k * 64 + j];
            ro[i * 64 + j] = acc;
        }
    // fp32 accumulation of exact products of 16-bit values: far under 1e-4
    check("X Y^T, n64, K-major A and B", s1, r1, 1e-4);
    check("X Y^T, n128, K-major A and B", s2, r2, 1e-4);
    check("acc->A regs, Z MN-major (P V)", o, ro, 1e-4);
    check("X Y^T, X ldmatrix regs, Y K-major", s3, r1, 1e-4);
    printf("%d failed\n", failed);
    return failed ? 1 : 0;
}
#endif
