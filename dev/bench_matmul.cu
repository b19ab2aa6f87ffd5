// dev/bench_matmul.cu: the cuBLASLt matmuls of one GPT-2 training step, each timed with
// every algorithm cuBLASLt's heuristic offers (up to 16), to see how far the first choice
// (the one kernels/matmul.cuh takes) is from the best. Prints one line per call shape and
// the per-step totals. Then the step's matmuls back to back (each call its /step times),
// repeated for a few seconds with the heuristic's first algorithms and again with the
// fastest: ms and joules (the board's NVML energy counter) per step of matmuls under a
// sustained load, the clock the power limit then allows included; and a device-to-device
// copy's joules per GB, for the memory-bound kernels. GPU only.
//   build/bench_matmul [B T C L Vp]      (default 64 1024 768 12 50304: GPT-2 124M, B=64)
#include "gpu/host/energy.h"
#include "kernels/common.cuh"
#include "kernels/matmul.cuh"


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
    // inputs X, Y, Z (also the GELU aux), W keep their random fill: each product writes its
    // own output buffer (Dbig, Dact, Dw). An earlier form wrote outputs into the inputs of
    // later products (dweight accumulating into W), so the data drifted far from the step's
    // over the calls; sustained, the board then drew 480 W instead of 691 W and the table
    // read 11% fast (docs/performance-notes.md).
    floatX *X, *Y, *W, *Z, *bias, *Dbig, *Dact, *Dw;
    float *bgrad;
    CUDA_CHECK(cudaMalloc(&bgrad, (size_t)(Vp > 4 * C ? Vp : 4 * C) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&X, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&Y, big * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&Z, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&W, wts * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&Dbig, big * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&Dact, act * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&Dw, wts * sizeof(floatX)));
    CUDA_CHECK(cudaMemset(Dw, 0, wts * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc(&bias, (size_t)(Vp > 4 * C ? Vp : 4 * C) * sizeof(floatX)));
    fill_uniform(X, act, 0.05f, 1, 0);
    fill_uniform(Y, big, 0.05f, 2, 0);
    fill_uniform(Z, act, 0.05f, 3, 0);
    fill_uniform(W, wts, 0.05f, 4, 0);
    fill_uniform(bias, (size_t)(Vp > 4 * C ? Vp : 4 * C), 0.05f, 5, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    printf("cuBLASLt matmuls of one step, N=%d C=%d L=%d Vp=%d (%s); ms per call, heuristic's first vs fastest\n", N, C,
           L, Vp, PRECISION_NAME);
    printf("%-8s %-11s%5s %6s %9s %8s %9s %8s %5s\n", "layer", "call", "/step", "algos", "first_ms", "TFLOP/s", "best_ms", "TFLOP/s",
           "best#");
    double tot_first = 0, tot_best = 0, tot_flops = 0;
    // the counted calls kept for the sustained run: descriptor, operands, both algorithms
    struct Kept { LtCall c; const floatX *A, *Bm; floatX *D; float beta; int per_step; cublasLtMatmulAlgo_t first, best; };
    Kept kept[40];
    int nk = 0;
    for (int i = 0; i < ns; i++) {
        Shape *sh = &shapes[i];
        // A is (m x k) or its transpose, B (k x n); D (m x n). Which buffers: by role
        const floatX *A, *Bm;
        floatX *D;
        if (sh->ta) { A = W; Bm = X; D = Dbig; }    // forward: A weight, B activation
        else if (sh->tb) { A = X; Bm = Y; D = Dw; }  // dweight: A input, B dout
        else { A = W; Bm = Y; D = Dact; }           // dinp: A weight, B dout
        LtCall c;
        const void *bptr = !sh->bias ? NULL : epilogue_is_bgrad(sh->epi) ? (const void *)bgrad : (const void *)bias;
        lt_call_create(&c, CUBLAS_COMPUTE_32F, bptr, sh->m, sh->n, sh->k, sh->ta, sh->tb, sh->lda, sh->ldb, sh->ldd,
                       sh->epi, sh->aux ? Z : NULL, sh->ldaux);
        if (sh->rowD) {
            cublasLtOrder_t order = CUBLASLT_ORDER_ROW;
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(c.ld, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order));
        }
        cublasLtMatmulHeuristicResult_t h[16];
        int na = lt_call_heuristic(&c, h, 16, 256, 256, 256);  // whole cudaMalloc'd buffers
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
        int counted = !epilogue_is_bgrad(sh->epi) && strncmp(sh->call, "dwT", 3) != 0;
        if (first < 0 || !counted) lt_call_destroy(&c);
        if (first < 0) { printf("%-8s %-11s%5d %6d  (no working algorithm)\n", sh->layer, sh->call, sh->per_step, na); continue; }
        printf("%-8s %-11s%5d %6d %9.4f %8.1f %9.4f %8.1f %5d\n", sh->layer, sh->call, sh->per_step, na, first, flops / first * 1e-9,
               best, flops / best * 1e-9, besti);
        if (!counted) continue;
        kept[nk++] = {c, A, Bm, D, sh->beta, sh->per_step, h[0].algo, h[besti].algo};
        tot_first += first * sh->per_step;
        tot_best += best * sh->per_step;
        tot_flops += flops * sh->per_step;
    }
    CUDA_CHECK(cudaGetLastError());
    // (the dinp+bgrad and dwT rows are alternatives to rows counted: not in the totals)
    printf("per step: first %.2f ms (%.1f TFLOP/s), fastest %.2f ms (%.1f TFLOP/s), %.1f TFLOP\n", tot_first,
           tot_flops / tot_first * 1e-9, tot_best, tot_flops / tot_best * 1e-9, tot_flops * 1e-12);

    // sustained: a step's matmuls again and again for ~5 s, so that the board reaches the
    // clock its power limit allows, as it does in training
    EnergyMeter meter;
    char bus[32] = "";
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
    int have_energy = energy_open(&meter, bus);
    if (!have_energy) printf("energy: not measured (%s)\n", meter.why);
    for (int which = 0; which < 2; which++) {
        int reps = (int)(5000.0 / (which ? tot_best : tot_first)) + 1;
        for (int warm = 0; warm < 2; warm++) {
            if (!warm) CUDA_CHECK(cudaDeviceSynchronize());
            double e_start = energy_joules(&meter);
            CUDA_CHECK(cudaEventRecord(e0));
            for (int r = 0; r < (warm ? reps : 1); r++)
                for (int k = 0; k < nk; k++)
                    for (int j = 0; j < kept[k].per_step; j++) {
                        float alpha = 1.0f;
                        cublasLtMatmul(g_cublaslt, kept[k].c.desc, &alpha, kept[k].A, kept[k].c.la, kept[k].Bm, kept[k].c.lb,
                                       &kept[k].beta, kept[k].D, kept[k].c.ld, kept[k].D, kept[k].c.ld,
                                       which ? &kept[k].best : &kept[k].first, g_cublaslt_workspace,
                                       CUBLASLT_WORKSPACE_BYTES, 0);
                    }
            CUDA_CHECK(cudaEventRecord(e1));
            CUDA_CHECK(cudaEventSynchronize(e1));
            if (!warm) continue;
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            double joules = energy_joules(&meter) - e_start;
            printf("sustained, %s algorithms: %d steps of matmuls, %.2f ms/step (%.1f TFLOP/s)", which ? "fastest" : "first",
                   reps, ms / reps, tot_flops / (ms / reps) * 1e-9);
            if (have_energy) printf(", %.1f J/step, %.0f W mean", joules / reps, joules / (ms * 1e-3));
            printf("\n");
        }
    }
    // the same for a device-to-device copy: joules per GB moved (read + written), the price of
    // the memory-bound kernels' traffic
    {
        size_t half = big / 2 * sizeof(floatX);
        int reps = 0;
        double e_start = energy_joules(&meter);
        CUDA_CHECK(cudaEventRecord(e0));
        float ms = 0;
        for (; ms < 3000.0f; reps += 100) {
            for (int r = 0; r < 100; r++)
                CUDA_CHECK(cudaMemcpyAsync((char *)Dbig + half, Dbig, half, cudaMemcpyDeviceToDevice, 0));
            CUDA_CHECK(cudaEventRecord(e1));
            CUDA_CHECK(cudaEventSynchronize(e1));
            CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        }
        double joules = energy_joules(&meter) - e_start, gb = 2e-9 * half * reps;
        printf("sustained copy: %.1f GB moved, %.2f TB/s", gb, gb / ms);
        if (have_energy) printf(", %.1f J: %.3f J per GB, %.0f W mean", joules, joules / gb, joules / (ms * 1e-3));
        printf("\n");
    }
    CUDA_CHECK(cudaGetLastError());
    for (int k = 0; k < nk; k++) lt_call_destroy(&kept[k].c);
    return 0;
}
