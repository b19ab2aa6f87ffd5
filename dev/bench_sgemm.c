// bench_sgemm.c: times common/sgemm.h on the GPT-2 d12 (124M) linear-layer shapes.
// For each shape (N tokens, C in, OC out) it times the three products of a linear layer:
//   fwd  Y  = X . W^T     sgemm(0,1, N, OC, C)
//   dX   dX += dY . W     sgemm(0,0, N, C, OC)
//   dW   dW += dY^T . X   sgemm(1,0, OC, C, N)
// with 1 and 2 threads, best of several runs, and sums an estimated d12 step (12 layers of
// qkv/attproj/fc/fcproj plus the lm_head, all three products) at each N.
//
//   gcc -O3 -march=native -fopenmp dev/bench_sgemm.c -o build/bench_sgemm -lm
//   gcc -O3 -march=native -fopenmp -DUSE_CBLAS dev/bench_sgemm.c -o build/bench_sgemm_cblas -lopenblas -lm
//   ./build/bench_sgemm [--full]     (--full adds N=1024 for the lm_head: ~80 GFLOP a product)
#include "../common/util.h"
#include "../common/sgemm.h"
#ifdef USE_CBLAS
#include <cblas.h>
#endif

static void print_load(const char *when) {
    FILE *f = fopen("/proc/loadavg", "r");
    char buf[64] = "?";
    if (f) {
        if (!fgets(buf, sizeof buf, f)) strcpy(buf, "?");
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    printf("load average %s: %s\n", when, buf);
}

static void set_threads(int t) {
#ifdef USE_CBLAS
    openblas_set_num_threads(t);
#endif
#ifdef _OPENMP
    omp_set_num_threads(t);
#endif
    (void)t;
}

static float *rand_buf(size_t n, uint32_t seed) {
    float *p = (float *)xmalloc(n * sizeof(float));
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
    return p;
}

// best-of time in seconds of one product form
static double time_form(int form, int N, int C, int OC, const float *X, const float *W,
                        const float *dY, float *Y, float *dX, float *dW) {
    double best = 1e30, total = 0.0;
    for (int rep = 0; rep < 20; rep++) {
        double t0 = wall_seconds();
        if (form == 0) sgemm(0, 1, N, OC, C, X, C, W, C, 0.0f, Y, OC);
        else if (form == 1) sgemm(0, 0, N, C, OC, dY, OC, W, C, 1.0f, dX, C);
        else sgemm(1, 0, OC, C, N, dY, OC, X, C, 1.0f, dW, C);
        double t = wall_seconds() - t0;
        if (rep > 0 || t < 0.05) { if (t < best) best = t; }  // first run warms caches/buffers
        total += t;
        if (rep >= 2 && total > 0.3) break;
    }
    return best;
}

int main(int argc, char **argv) {
    int full = argc > 1 && strcmp(argv[1], "--full") == 0;
    if (argc > 1 && !full) fatal("usage: %s [--full]", argv[0]);
    printf("bench_sgemm: %s (best of up to 20 runs, wall clock)\n", sgemm_backend());
    print_load("before");
    static const char *names[] = {"qkv", "attproj", "fc", "fcproj", "lm_head"};
    static const int shp[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}, {768, 50304}};
    static const char *forms[] = {"fwd  Y=X.Wt", "dX+=dY.W", "dW+=dYt.X"};
    static const int Ns[] = {256, 1024};
    static const int thr[] = {1, 2};
    // step estimate: [N index][thread index]
    double step[2][2] = {{0}};
    printf("%-8s %5s %5s %6s  %-11s | %9s %8s | %9s %8s\n", "layer", "N", "C", "OC", "form",
           "1t ms", "GFLOP/s", "2t ms", "GFLOP/s");
    for (int ni = 0; ni < 2; ni++) {
        int N = Ns[ni];
        for (int s = 0; s < 5; s++) {
            int C = shp[s][0], OC = shp[s][1];
            int skip = (s == 4 && N > 256 && !full);
            float *X = rand_buf((size_t)N * C, 1), *W = rand_buf((size_t)OC * C, 2);
            float *dY = rand_buf((size_t)N * OC, 3), *Y = rand_buf((size_t)N * OC, 4);
            float *dX = rand_buf((size_t)N * C, 5), *dW = rand_buf((size_t)OC * C, 6);
            for (int f = 0; f < 3; f++) {
                double gflop = 2.0 * N * C * OC * 1e-9;
                printf("%-8s %5d %5d %6d  %-11s |", names[s], N, C, OC, forms[f]);
                for (int ti = 0; ti < 2; ti++) {
                    if (skip) { printf(" %9s %8s |", "-", "-"); continue; }
                    set_threads(thr[ti]);
                    double t = time_form(f, N, C, OC, X, W, dY, Y, dX, dW);
                    printf(" %9.2f %8.1f |", t * 1e3, gflop / t);
                    step[ni][ti] += t * (s == 4 ? 1 : 12);
                }
                printf("\n");
                fflush(stdout);
            }
            free(X); free(W); free(dY); free(Y); free(dX); free(dW);
        }
    }
    for (int ni = 0; ni < 2; ni++) {
        if (ni == 1 && !full) {
            printf("d12 step GEMMs at N=1024: run with --full (needs the lm_head)\n");
            continue;
        }
        double gf = 0;
        for (int s = 0; s < 5; s++) gf += 3 * 2.0 * Ns[ni] * shp[s][0] * shp[s][1] * 1e-9 * (s == 4 ? 1 : 12);
        printf("d12 step GEMMs at N=%d (%.1f GFLOP): 1 thread %.1f ms (%.1f GFLOP/s), 2 threads %.1f ms (%.1f GFLOP/s)\n",
               Ns[ni], gf, step[ni][0] * 1e3, gf / step[ni][0], step[ni][1] * 1e3, gf / step[ni][1]);
    }
    print_load("after");
    sgemm_release_buffers();
    return 0;
}
