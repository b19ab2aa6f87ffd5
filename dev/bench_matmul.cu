// dev/bench_matmul.cu: the cuBLASLt matmuls of one GPT-2 training step, each timed with
// every algorithm cuBLASLt's heuristic offers (up to 16), to see how far the first choice
// (the one kernels/matmul.cuh takes) is from the best. Prints one line per call shape and
// the per-step totals. GPU only.
//   build/bench_matmul [B T C L Vp]      (default 64 1024 768 12 50304: GPT-2 124M, B=64)
#include "kernels/common.cuh"
#include "kernels/matmul.cuh"

__global__ void fill_kernel(floatX *p, size_t n, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        p[i] = (floatX)(((h & 0xFFFF) / 65536.0f - 0.5f) * 0.1f);
    }
}

typedef struct {
    const char *layer, *call;
    int per_step;  // calls per training step
    int m, n, k, ta, tb, lda, ldb, ldd;
    float beta;
    cublasLtEpilogue_t epi;
    int bias, aux, ldaux;  // bias: a bias vector (added; or, for DGELU_BGRAD, the fp32 gradient written)
    int rowD;              // D stored row-major (CUBLASLT_ORDER_ROW; ldd = n)
} Shape;

int main(int argc, char **argv) {
    int B = 64, T = 1024, C = 768, L = 12, Vp = 50304;
    if (argc == 6) { B = atoi(argv[1]); T = atoi(argv[2]); C = atoi(argv[3]); L = atoi(argv[4]); Vp = atoi(argv[5]); }
    else if (argc != 1) { fprintf(stderr, "usage: %s [B T C L Vp]\n", argv[0]); return 2; }
    const int N = B * T;
    matmul_init(0);
    // forward: matmul_lt(out, W, inp, bias, OC, N, Cin, 1, 0, Cin, Cin, OC)
    // dinp:    matmul_lt(dinp, W, dout, NULL, Cin, N, OC, 0, 0, Cin, OC, Cin)
    // dweight: matmul_lt(dW, inp, dout, NULL, Cin, OC, N, 0, 1, Cin, OC, Cin, beta 1)
    struct { const char *name; int cin, oc, per_step; cublasLtEpilogue_t fwd, bwd; int bias; } layers[] = {
        {"qkv", C, 3 * C, L, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"attproj", C, C, L, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"fc", C, 4 * C, L, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DEFAULT, 1},
        {"fcproj", 4 * C, C, L, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_DGELU, 1},
        {"lm_head", C, Vp, 1, CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_DEFAULT, 0},
    };
    Shape shapes[40];
    int ns = 0;
    for (auto &l : layers) {
        int aux = l.fwd == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        shapes[ns++] = {l.name, "fwd", l.per_step, l.oc, N, l.cin, 1, 0, l.cin, l.cin, l.oc, 0.0f, l.fwd, l.bias, aux, l.oc};
        aux = l.bwd == CUBLASLT_EPILOGUE_DGELU;
        shapes[ns++] = {l.name, "dinp", l.per_step, l.cin, N, l.oc, 0, 0, l.cin, l.oc, l.cin, 0.0f, l.bwd, 0, aux, l.cin};
        shapes[ns++] = {l.name, "dweight", l.per_step, l.cin, l.oc, N, 0, 1, l.cin, l.oc, l.cin, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, 0, 0, 0};
        if (aux) {  // the same dGELU GEMM also summing the input layer's bias gradient (fp32 out)
            shapes[ns++] = {l.name, "dinp+bgrad", l.per_step, l.cin, N, l.oc, 0, 0, l.cin, l.oc, l.cin, 0.0f, CUBLASLT_EPILOGUE_DGELU_BGRAD, 1, 1, l.cin};
        }
        if (l.bias) {  // the weight gradient transposed (dW^T = dout^T inp, dout as a plain A operand),
                       // alone and with the bias gradient as A's k-sum in the epilogue (BGRADA)
            shapes[ns++] = {l.name, "dwT", l.per_step, l.oc, l.cin, N, 0, 1, l.oc, l.cin, l.oc, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, 0, 0, 0};
            shapes[ns++] = {l.name, "dwT+bgradA", l.per_step, l.oc, l.cin, N, 0, 1, l.oc, l.cin, l.oc, 0.0f, CUBLASLT_EPILOGUE_BGRADA, 1, 0, 0};
            // the same with D row-major, which is dW's own layout (accumulating, beta 1)
            shapes[ns++] = {l.name, "dwT rowD", l.per_step, l.oc, l.cin, N, 0, 1, l.oc, l.cin, l.cin, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, 0, 0, 0, 1};
            shapes[ns++] = {l.name, "dwT+bgA rowD", l.per_step, l.oc, l.cin, N, 0, 1, l.oc, l.cin, l.cin, 1.0f, CUBLASLT_EPILOGUE_BGRADA, 1, 0, 0, 1};
        }
    }
    // operands: the largest of each role (the lm_head's N x Vp output, 4C-wide activations)
    size_t big = (size_t)N * (Vp > 4 * C ? Vp : 4 * C), act = (size_t)N * 4 * C, wts = (size_t)Vp * C;
    if ((size_t)4 * C * C > wts) wts = (size_t)4 * C * C;
    floatX *X, *Y, *W, *Z, *bias;
    float *bgrad;
    CUDA_CHECK(cudaMalloc(&bgrad, (size_t)(Vp > 4 * C ? Vp : 4 * C) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&X, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&Y, big * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&Z, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&W, wts * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&bias, (size_t)(Vp > 4 * C ? Vp : 4 * C) * sizeof(floatX)));
    fill_kernel<<<1024, 256>>>(X, act, 1);
    fill_kernel<<<1024, 256>>>(Y, big, 2);
    fill_kernel<<<1024, 256>>>(Z, act, 3);
    fill_kernel<<<1024, 256>>>(W, wts, 4);
    fill_kernel<<<64, 256>>>(bias, (size_t)(Vp > 4 * C ? Vp : 4 * C), 5);
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    printf("cuBLASLt matmuls of one step, N=%d C=%d L=%d Vp=%d (%s); ms per call, heuristic's first vs fastest\n", N, C,
           L, Vp, PRECISION_NAME);
    printf("%-8s %-11s%5s %6s %9s %8s %9s %8s %5s\n", "layer", "call", "/step", "algos", "first_ms", "TFLOP/s", "best_ms", "TFLOP/s",
           "best#");
    double tot_first = 0, tot_best = 0, tot_flops = 0;
    for (int i = 0; i < ns; i++) {
        Shape *sh = &shapes[i];
        // A is (m x k) or its transpose, B (k x n); D (m x n). Which buffers: by role
        const floatX *A, *Bm;
        floatX *D;
        if (sh->ta) { A = W; Bm = sh->k == 4 * C ? Z : X; D = Y; }                 // forward: A weight, B activation
        else if (sh->tb) { A = X; Bm = Y; D = W; }                                 // dweight: A input, B dout
        else { A = W; Bm = Y; D = X; }                                             // dinp: A weight, B dout
        LtCall c;
        const void *bptr = !sh->bias ? NULL : epilogue_is_bgrad(sh->epi) ? (const void *)bgrad : (const void *)bias;
        lt_call_create(&c, bptr, sh->m, sh->n, sh->k, sh->ta, sh->tb, sh->lda, sh->ldb, sh->ldd,
                       sh->epi, sh->aux ? Z : NULL, sh->ldaux);
        if (sh->rowD) {
            cublasLtOrder_t order = CUBLASLT_ORDER_ROW;
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(c.ld, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
        }
        cublasLtMatmulHeuristicResult_t h[16];
        int na = lt_call_heuristic(&c, h, 16);
        double flops = 2.0 * sh->m * (double)sh->n * sh->k;
        float first = -1, best = 1e30f;
        int besti = -1;
        for (int a = 0; a < na; a++) {
            float alpha = 1.0f, beta = sh->beta, ms = 0;
            bool ok = true;
            for (int it = 0; it < 2 && ok; it++)
                ok = cublasLtMatmul(g_cublaslt, c.desc, &alpha, A, c.la, Bm, c.lb, &beta, D, c.ld, D, c.ld, &h[a].algo,
                                    g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, 0) == CUBLAS_STATUS_SUCCESS;
            if (!ok) continue;
            const int iters = 10;
            CUDA_CHECK(cudaEventRecord(e0));
            for (int it = 0; it < iters; it++)
                cublasLtMatmul(g_cublaslt, c.desc, &alpha, A, c.la, Bm, c.lb, &beta, D, c.ld, D, c.ld, &h[a].algo,
                               g_cublaslt_workspace, CUBLASLT_WORKSPACE_BYTES, 0);
            CUDA_CHECK(cudaEventRecord(e1));
            CUDA_CHECK(cudaEventSynchronize(e1));
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            ms /= iters;
            if (a == 0) first = ms;
            if (ms < best) { best = ms; besti = a; }
        }
        lt_call_destroy(&c);
        if (first < 0) { printf("%-8s %-11s%5d %6d  (no working algorithm)\n", sh->layer, sh->call, sh->per_step, na); continue; }
        printf("%-8s %-11s%5d %6d %9.4f %8.1f %9.4f %8.1f %5d\n", sh->layer, sh->call, sh->per_step, na, first, flops / first * 1e-9,
               best, flops / best * 1e-9, besti);
        if (epilogue_is_bgrad(sh->epi) || !strncmp(sh->call, "dwT", 3)) continue;
        tot_first += first * sh->per_step;
        tot_best += best * sh->per_step;
        tot_flops += flops * sh->per_step;
    }
    CUDA_CHECK(cudaGetLastError());
    // (the dinp+bgrad and dwT rows are alternatives to rows counted: not in the totals)
    printf("per step: first %.2f ms (%.1f TFLOP/s), fastest %.2f ms (%.1f TFLOP/s), %.1f TFLOP\n", tot_first,
           tot_flops / tot_first * 1e-9, tot_best, tot_flops / tot_best * 1e-9, tot_flops * 1e-12);
    return 0;
}
