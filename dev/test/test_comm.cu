// dev/test/test_comm.cu: the GPU collectives of kernels/comm.cuh against a host reference,
// under mpirun (N = 1, 2, 4 ranks). Every rank's inputs come from a seed that every rank
// knows, so each rank computes the expected result itself, in double, from all ranks'
// inputs. Outputs are poisoned with NaN and fenced by guard bytes before each call, so
// unwritten and out-of-bounds elements are caught. The MPI backend must also match its
// contract bit for bit (rank-order fp32 sum, one rounding), agree across ranks and repeat
// exactly; for NCCL those two are only reported. At one rank with --backend nccl the cases
// run twice: through comm.cuh's one-rank paths, then through its NCCL calls on a one-rank
// communicator. Rank 0 prints one line per case and "N passed, M failed"; the exit status
// is 1 on any failure.
//   mpirun -np 1 build/test_comm --backend nccl   also on a machine of one GPU
//   mpirun -np 2 build/test_comm --backend nccl   one GPU per rank
//   mpirun -np 4 build/test_comm --backend mpi    every rank on GPU local_rank % count, via host memory
//   --seed S     the inputs of an earlier run (its seed is printed first)
//   --bench      after the tests: all-reduce bandwidth at 100 MiB (a measurement, not a test)
#include "kernels/comm.cuh"
#include "common/rng.h"
#include "dev/test/mpi_testutil.h"

static Comm g_comm;
static uint64_t g_seed;
static int g_case = 0;  // the case number: part of every input's seed

#if PRECISION == PRECISION_BF16
#define TOL_FLOATX 1e-2
#elif PRECISION == PRECISION_FP16
#define TOL_FLOATX 2e-3
#else
#define TOL_FLOATX 1e-6
#endif
#define TOL_F32 1e-6

// ---------------------------------------------------------------------------
// inputs: rank r's values of the current case, in the element type: uniform in [-1, 1)
// times 2^-k, k uniform in 0..19. The spread of magnitudes makes fp32 sums inexact, so the
// order of summation shows in the bits (with values of one scale the sums of a few bf16 are
// exact in fp32 whatever the order, and the rank-order check would prove nothing).

template <typename T>
static void rank_input(int r, T *x, size_t n) {
    uint64_t s = rng_seed(rng_seed(g_seed + (uint64_t)g_case * 0x10001ull) + (uint64_t)r);
    for (size_t i = 0; i < n; i++) {
        float u = 2.0f * rng_uniform(&s) - 1.0f;
        comm_host_round(ldexpf(u, -(int)(rng_next_u64(&s) % 20)), &x[i]);
    }
}

static uint64_t hash_bytes(const void *p, size_t n) {  // FNV-1a
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

// whether every rank holds the same hash
static int same_on_all_ranks(uint64_t h) {
    uint64_t *all = (uint64_t *)xmalloc((size_t)g_pg.world * sizeof *all);
    MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    int same = 1;
    for (int r = 0; r < g_pg.world; r++) same &= all[r] == all[0];
    free(all);
    return same;
}

// ---------------------------------------------------------------------------
// device buffers with guard bytes on both sides; all traffic on the comm stream, waited for

#define GUARD 256
#define GUARD_BYTE 0x5A

typedef struct {
    unsigned char *base;
    void *p;  // the usable bytes: base + GUARD
    size_t bytes;
} DevBuf;

static void sync_comm(void) { CUDA_CHECK(cudaStreamSynchronize(g_comm.stream)); }

static DevBuf dev_alloc(size_t bytes) {
    DevBuf b;
    b.bytes = bytes;
    CUDA_CHECK(cudaMalloc(&b.base, bytes + 2 * GUARD));
    CUDA_CHECK(cudaMemsetAsync(b.base, GUARD_BYTE, bytes + 2 * GUARD, g_comm.stream));
    sync_comm();
    b.p = b.base + GUARD;
    return b;
}
static void dev_free(DevBuf *b) { CUDA_CHECK(cudaFree(b->base)); }
// all-ones bytes are a NaN in fp32, bf16 and fp16 alike
static void dev_poison(void *p, size_t bytes) {
    CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, g_comm.stream));
    sync_comm();
}
static void upload(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_comm.stream));
    sync_comm();
}
static void download(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_comm.stream));
    sync_comm();
}
static void check_guards(const DevBuf *b, const char *what) {
    unsigned char g[2 * GUARD];
    download(g, b->base, GUARD);
    download(g + GUARD, b->base + GUARD + b->bytes, GUARD);
    int bad = 0;
    for (int i = 0; i < 2 * GUARD; i++) bad += g[i] != GUARD_BYTE;
    CHECK(bad == 0, "%s: %d guard bytes around the buffer were overwritten", what, bad);
}

// ---------------------------------------------------------------------------
// results: every rank measures its own; rank 0 prints the worst over the ranks

typedef struct {
    double err, maxexp, scale;  // max |got - expected|, max |expected|, max_i sum_r |x_r[i]|
    int ranks_same, repeat_same;  // -1: not measured
} Measure;

static void measure_init(Measure *m) {
    m->err = m->maxexp = m->scale = 0.0;
    m->ranks_same = m->repeat_same = -1;
}
static void measure_add(Measure *m, double got, double want) {
    double d = fabs(got - want);
    if (!(d <= m->err)) m->err = d == d ? d : INFINITY;  // NaN (unwritten) counts as infinite
    if (fabs(want) > m->maxexp) m->maxexp = fabs(want);
}

// The tolerance is relative to the largest sum of magnitudes, which bounds the partial
// sums of any summation order (max |expected| alone can be tiny for one or two elements).
static void finish_case(const char *name, Measure m, double tol) {
    if (m.scale == 0.0) m.scale = 1.0;
    CHECK(m.err <= tol * m.scale, "max |err| %.3e exceeds %.0e * %.3f", m.err, tol, m.scale);
    int is_mpi = g_comm.backend == COMM_BACKEND_MPI;
    if (is_mpi && m.ranks_same == 0) CHECK(0, "ranks hold different bits");
    if (is_mpi && m.repeat_same == 0) CHECK(0, "a repeated call gave different bits");
    fflush(stdout);
    double worst[3] = {m.err, m.maxexp, m.scale}, all[3];
    MPI_Allreduce(worst, all, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long bad = mpi_case_end();
    if (g_pg.rank == 0) {
        // bitwise agreement (across ranks, with a repeat): checked for mpi, only reported for nccl
        char extra[64] = "";
        if (m.ranks_same >= 0)
            snprintf(extra, sizeof extra, "  ranks %s", m.ranks_same ? "same" : "DIFFER");
        if (m.repeat_same >= 0)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "%s repeat %s", m.ranks_same >= 0 ? "," : " ",
                     m.repeat_same ? "same" : "DIFFERS");
        printf("%-52s max|err| %.3e  max|exp| %.3e  err/max %.2e (tol %.0e)%s  %s\n", name, all[0], all[1],
               all[1] > 0 ? all[0] / all[1] : all[0], tol, extra, bad ? "FAIL" : "ok");
    }
    fflush(stdout);
    g_case++;
}

// ---------------------------------------------------------------------------
// the cases

// all-reduce of n elements of T (floatX, or fp32 through comm_allreduce_f32)
template <typename T>
static void case_allreduce(size_t n, int f32, const char *label) {
    const int W = g_pg.world, me = g_pg.rank;
    T *mine = (T *)xmalloc((n + 1) * sizeof(T)), *x = (T *)xmalloc((n + 1) * sizeof(T));
    T *got = (T *)xmalloc((n + 1) * sizeof(T)), *contract = (T *)xmalloc((n + 1) * sizeof(T));
    double *want = (double *)xcalloc(n + 1, sizeof(double)), *absum = (double *)xcalloc(n + 1, sizeof(double));
    float *s32 = (float *)xcalloc(n + 1, sizeof(float));
    for (int r = 0; r < W; r++) {
        rank_input(r, x, n);
        if (r == me) memcpy(mine, x, n * sizeof(T));
        for (size_t i = 0; i < n; i++) {
            float v = to_float(x[i]);
            want[i] += v;
            absum[i] += fabs(v);
            s32[i] = r == 0 ? v : s32[i] + v;  // the MPI backend's contract: rank order, fp32
        }
    }
    for (size_t i = 0; i < n; i++) comm_host_round(s32[i], &contract[i]);

    DevBuf buf = dev_alloc(n * sizeof(T));
    uint64_t h[2];
    Measure m;
    measure_init(&m);
    for (int rep = 0; rep < 2; rep++) {
        upload(buf.p, mine, n * sizeof(T));  // in place: the input is the only thing to poison it with
        if (f32) comm_allreduce_f32(&g_comm, (float *)buf.p, n, COMM_SUM);
        else comm_allreduce_sum(&g_comm, (floatX *)buf.p, n);
        sync_comm();
        download(got, buf.p, n * sizeof(T));
        h[rep] = hash_bytes(got, n * sizeof(T));
    }
    for (size_t i = 0; i < n; i++) {
        measure_add(&m, to_float(got[i]), want[i]);
        if (absum[i] > m.scale) m.scale = absum[i];
    }
    if (g_comm.backend == COMM_BACKEND_MPI) {
        size_t diff = 0, first = 0;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&got[i], &contract[i], sizeof(T)) != 0 && diff++ == 0) first = i;
        CHECK(diff == 0, "%zu elements differ from the rank-order fp32 sum, first at %zu: got %.8g, expected %.8g",
              diff, first, diff ? to_float(got[first]) : 0.0f, diff ? to_float(contract[first]) : 0.0f);
    }
    check_guards(&buf, "all-reduce");
    m.ranks_same = same_on_all_ranks(h[1]);
    m.repeat_same = h[0] == h[1];
    char name[96];
    snprintf(name, sizeof name, "%s n=%zu%s", f32 ? "allreduce_f32" : "allreduce", n, label);
    finish_case(name, m, f32 ? TOL_F32 : TOL_FLOATX);
    dev_free(&buf);
    free(mine); free(x); free(got); free(contract); free(want); free(absum); free(s32);
}

// all-reduce max of n fp32 (comm_allreduce_f32 COMM_MAX: FP8's amaxes): exact, every rank the
// same bits, the largest of the ranks' inputs element by element
static void case_allreduce_max(size_t n, const char *label) {
    const int W = g_pg.world, me = g_pg.rank;
    float *mine = (float *)xmalloc((n + 1) * sizeof(float)), *x = (float *)xmalloc((n + 1) * sizeof(float));
    float *want = (float *)xmalloc((n + 1) * sizeof(float)), *got = (float *)xmalloc((n + 1) * sizeof(float));
    for (int r = 0; r < W; r++) {
        rank_input(r, x, n);
        if (r == me) memcpy(mine, x, n * sizeof(float));
        for (size_t i = 0; i < n; i++) want[i] = r == 0 || x[i] > want[i] ? x[i] : want[i];
    }
    DevBuf buf = dev_alloc(n * sizeof(float));
    upload(buf.p, mine, n * sizeof(float));
    comm_allreduce_f32(&g_comm, (float *)buf.p, n, COMM_MAX);
    sync_comm();
    download(got, buf.p, n * sizeof(float));
    Measure m;
    measure_init(&m);
    for (size_t i = 0; i < n; i++) measure_add(&m, got[i], want[i]);
    check_guards(&buf, "all-reduce max");
    m.ranks_same = same_on_all_ranks(hash_bytes(got, n * sizeof(float)));
    char name[96];
    snprintf(name, sizeof name, "allreduce_max_f32 n=%zu%s", n, label);
    finish_case(name, m, 0.0);
    dev_free(&buf);
    free(mine); free(x); free(want); free(got);
}

static void case_reduce_scatter(size_t chunk, int in_place, const char *label) {
    const int W = g_pg.world, me = g_pg.rank;
    size_t total = (size_t)W * chunk, bytes = chunk * sizeof(floatX);
    floatX *mine = (floatX *)xmalloc((total + 1) * sizeof(floatX));
    floatX *x = (floatX *)xmalloc((total + 1) * sizeof(floatX));
    floatX *got = (floatX *)xmalloc(bytes + sizeof(floatX)), *contract = (floatX *)xmalloc(bytes + sizeof(floatX));
    floatX *in_after = (floatX *)xmalloc((total + 1) * sizeof(floatX));
    double *want = (double *)xcalloc(chunk + 1, sizeof(double)), *absum = (double *)xcalloc(chunk + 1, sizeof(double));
    float *s32 = (float *)xcalloc(chunk + 1, sizeof(float));
    for (int r = 0; r < W; r++) {
        rank_input(r, x, total);
        if (r == me) memcpy(mine, x, total * sizeof(floatX));
        const floatX *part = x + (size_t)me * chunk;  // what rank r contributes to my chunk
        for (size_t i = 0; i < chunk; i++) {
            float v = to_float(part[i]);
            want[i] += v;
            absum[i] += fabs(v);
            s32[i] = r == 0 ? v : s32[i] + v;
        }
    }
    for (size_t i = 0; i < chunk; i++) comm_host_round(s32[i], &contract[i]);

    DevBuf in = dev_alloc(total * sizeof(floatX)), out = dev_alloc(in_place ? 0 : bytes);
    floatX *dst = in_place ? (floatX *)in.p + (size_t)me * chunk : (floatX *)out.p;
    uint64_t h[2];
    Measure m;
    measure_init(&m);
    for (int rep = 0; rep < 2; rep++) {
        upload(in.p, mine, total * sizeof(floatX));
        if (!in_place) dev_poison(out.p, bytes);
        comm_reduce_scatter_sum(&g_comm, (const floatX *)in.p, dst, chunk);
        sync_comm();
        download(got, dst, bytes);
        h[rep] = hash_bytes(got, bytes);
    }
    for (size_t i = 0; i < chunk; i++) {
        measure_add(&m, to_float(got[i]), want[i]);
        if (absum[i] > m.scale) m.scale = absum[i];
    }
    if (g_comm.backend == COMM_BACKEND_MPI) {
        size_t diff = 0;
        for (size_t i = 0; i < chunk; i++) diff += memcmp(&got[i], &contract[i], sizeof(floatX)) != 0;
        CHECK(diff == 0, "%zu elements differ from the rank-order fp32 sum", diff);
    }
    if (!in_place) {  // the input is const
        download(in_after, in.p, total * sizeof(floatX));
        CHECK(memcmp(in_after, mine, total * sizeof(floatX)) == 0, "the input was modified");
        check_guards(&out, "reduce-scatter out");
    }
    check_guards(&in, "reduce-scatter in");
    m.repeat_same = h[0] == h[1];
    char name[96];
    snprintf(name, sizeof name, "reduce_scatter chunk=%zu%s%s", chunk, in_place ? " in place" : "", label);
    finish_case(name, m, TOL_FLOATX);
    dev_free(&in);
    dev_free(&out);
    free(mine); free(x); free(got); free(contract); free(in_after); free(want); free(absum); free(s32);
}

static void case_allgather(size_t chunk, int in_place, const char *label) {
    const int W = g_pg.world, me = g_pg.rank;
    size_t total = (size_t)W * chunk, bytes = chunk * sizeof(floatX);
    floatX *want = (floatX *)xmalloc((total + 1) * sizeof(floatX));
    floatX *got = (floatX *)xmalloc((total + 1) * sizeof(floatX));
    for (int r = 0; r < W; r++) rank_input(r, want + (size_t)r * chunk, chunk);

    DevBuf out = dev_alloc(total * sizeof(floatX)), in = dev_alloc(in_place ? 0 : bytes);
    floatX *src = in_place ? (floatX *)out.p + (size_t)me * chunk : (floatX *)in.p;
    const floatX *mine = want + (size_t)me * chunk;
    uint64_t h[2];
    Measure m;
    measure_init(&m);
    for (int rep = 0; rep < 2; rep++) {
        dev_poison(out.p, total * sizeof(floatX));
        upload(src, mine, bytes);
        comm_allgather(&g_comm, src, (floatX *)out.p, chunk);
        sync_comm();
        download(got, out.p, total * sizeof(floatX));
        h[rep] = hash_bytes(got, total * sizeof(floatX));
    }
    // no arithmetic: every backend must deliver the exact bits
    size_t diff = 0;
    for (size_t i = 0; i < total; i++) {
        measure_add(&m, to_float(got[i]), to_float(want[i]));
        diff += memcmp(&got[i], &want[i], sizeof(floatX)) != 0;
    }
    m.scale = 1.0;
    CHECK(diff == 0, "%zu of %zu elements are not the sender's bits", diff, total);
    check_guards(&out, "all-gather out");
    if (!in_place) check_guards(&in, "all-gather in");
    m.ranks_same = same_on_all_ranks(h[1]);
    m.repeat_same = h[0] == h[1];
    char name[96];
    snprintf(name, sizeof name, "allgather chunk=%zu%s%s", chunk, in_place ? " in place" : "", label);
    finish_case(name, m, 0.0);
    dev_free(&out);
    dev_free(&in);
    free(want); free(got);
}

// every case, each name followed by label
static void run_cases(const char *label) {
    const size_t sizes[] = {0, 1, 7, 1000, 65537, 1000003, 4194304};
    const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);
    for (int i = 0; i < nsizes; i++) case_allreduce<floatX>(sizes[i], 0, label);
    for (int i = 0; i < nsizes; i++) case_reduce_scatter(sizes[i], 0, label);
    for (int i = 0; i < nsizes; i++) case_allgather(sizes[i], 0, label);
    case_reduce_scatter(7, 1, label);
    case_reduce_scatter(1000003, 1, label);
    case_allgather(7, 1, label);
    case_allgather(1000003, 1, label);
    const size_t small[] = {1, 2, 7, 1000, 65537};
    for (int i = 0; i < 5; i++) case_allreduce<float>(small[i], 1, label);
    for (int i = 0; i < 5; i++) case_allreduce_max(small[i], label);
    if (g_comm.backend == COMM_BACKEND_MPI) {
        // the cut of long buffers into several MPI exchanges (normally COMM_MPI_PIECE
        // elements), including pieces shorter than the number of ranks
        const size_t pieces[] = {3, 4099};
        const size_t ns[] = {7, 1000003};
        for (int k = 0; k < 2; k++) {
            char plabel[96];
            snprintf(plabel, sizeof plabel, " (pieces of %zu)%s", pieces[k], label);
            g_comm.mpi_piece = pieces[k];
            case_allreduce<floatX>(ns[k], 0, plabel);
            case_allreduce<float>(ns[k], 1, plabel);
            case_reduce_scatter(ns[k], 0, plabel);
            case_reduce_scatter(ns[k], 1, plabel);
            case_allgather(ns[k], 0, plabel);
            case_allgather(ns[k], 1, plabel);
        }
        g_comm.mpi_piece = COMM_MPI_PIECE;
    }
}

// all-reduce bandwidth at 100 MiB (not a test: printed only)
static void bench_allreduce(void) {
    size_t bytes = (size_t)100 << 20, n = bytes / sizeof(floatX);
    DevBuf buf = dev_alloc(bytes);
    CUDA_CHECK(cudaMemsetAsync(buf.p, 0, bytes, g_comm.stream));  // zeros: no overflow however often summed
    cudaEvent_t t0, t1;
    CUDA_CHECK(cudaEventCreate(&t0));
    CUDA_CHECK(cudaEventCreate(&t1));
    for (int i = 0; i < 5; i++) comm_allreduce_sum(&g_comm, (floatX *)buf.p, n);  // warm up (NCCL sets up its channels)
    sync_comm();
    MPI_Barrier(MPI_COMM_WORLD);
    const int iters = 20;
    CUDA_CHECK(cudaEventRecord(t0, g_comm.stream));
    for (int i = 0; i < iters; i++) comm_allreduce_sum(&g_comm, (floatX *)buf.p, n);
    CUDA_CHECK(cudaEventRecord(t1, g_comm.stream));
    CUDA_CHECK(cudaEventSynchronize(t1));
    float ms_total;
    CUDA_CHECK(cudaEventElapsedTime(&ms_total, t0, t1));
    double ms = ms_total / iters, worst;
    MPI_Allreduce(&ms, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (g_pg.rank == 0) {
        int W = g_pg.world;
        double algbw = bytes / (worst * 1e-3) / 1e9;
        // bus bandwidth: what each link carries in a ring all-reduce, comparable across world sizes
        printf("bench: all-reduce of 100 MiB (%zu %s), %d ranks, backend %s: %.3f ms, algbw %.1f GB/s, "
               "busbw %.1f GB/s\n",
               n, PRECISION_NAME, W, comm_backend_name(g_comm.backend), worst, algbw, algbw * 2.0 * (W - 1) / W);
    }
    CUDA_CHECK(cudaEventDestroy(t0));
    CUDA_CHECK(cudaEventDestroy(t1));
    dev_free(&buf);
}

static void usage_and_exit(const char *msg) {
    if (msg) fatal("%s (see --help)", msg);
    printf("usage: mpirun -np N build/test_comm [--backend nccl|mpi] [--seed S] [--bench]\n"
           "  --backend  nccl: one GPU per rank (default); mpi: through host memory, ranks may share one GPU\n"
           "  --seed     the run seed (default: from the clock; printed)\n"
           "  --bench    after the tests, time a 100 MiB all-reduce\n");
    exit(0);
}

int main(int argc, char **argv) {
    pg_init(&g_pg, &argc, &argv);
    int backend = COMM_BACKEND_NCCL, bench = 0, have_seed = 0;
    unsigned long long seed = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) usage_and_exit(NULL);
        else if (!strcmp(argv[a], "--bench")) bench = 1;
        else if (!strcmp(argv[a], "--backend") && a + 1 < argc) {
            backend = comm_backend_parse(argv[++a]);
            if (backend < 0) fatal("--backend %s: expected nccl or mpi", argv[a]);
        } else if (!strcmp(argv[a], "--seed") && a + 1 < argc) {
            char *end;
            seed = strtoull(argv[++a], &end, 10);
            if (!*argv[a] || *end) fatal("--seed %s: expected a non-negative integer", argv[a]);
            have_seed = 1;
        } else fatal("unknown or incomplete option '%s' (see --help)", argv[a]);
    }
    // rank 0 picks the seed so that every rank can regenerate every other rank's inputs
    if (!have_seed) seed = (unsigned long long)time(NULL) * 1000003ull + (unsigned long long)getpid();
    MPI_Bcast(&seed, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    g_seed = seed;

    int ndev;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    if (backend == COMM_BACKEND_NCCL && g_pg.world > 1) {
        MPI_Comm node;
        int local_size;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_pg.rank, MPI_INFO_NULL, &node);
        MPI_Comm_size(node, &local_size);
        MPI_Comm_free(&node);
        if (local_size > ndev)
            fatal("--backend nccl needs one GPU per rank: %d ranks on this node, %d GPUs; "
                  "--backend mpi lets ranks share a GPU",
                  local_size, ndev);
    }
    CUDA_CHECK(cudaSetDevice(g_pg.local_rank % ndev));
    comm_init(&g_comm, &g_pg, backend);
    if (g_pg.rank == 0)
        printf("test_comm: %d ranks, backend %s, %s, seed %llu (--seed %llu repeats these inputs)\n", g_pg.world,
               comm_backend_name(g_comm.backend), PRECISION_NAME, seed, seed);

    run_cases("");
    if (g_pg.world == 1 && backend == COMM_BACKEND_NCCL) {
        // At one rank comm.cuh answers every collective itself (a no-op or a device copy)
        // and never creates a communicator, so the pass above reached none of its NCCL
        // calls. This pass runs them on a one-rank NCCL communicator. The Comm claims two
        // ranks only so that each call takes its NCCL branch; NCCL sizes every buffer by
        // its communicator (one rank), and the expected results come from g_pg (one rank).
        int dev;
        CUDA_CHECK(cudaGetDevice(&dev));
        NCCL_CHECK(ncclCommInitAll(&g_comm.nccl, 1, &dev));
        g_comm.backend = COMM_BACKEND_NCCL;
        g_comm.world = 2;
        printf("test_comm: the same cases through NCCL, on a one-rank communicator\n");
        run_cases(" [nccl, 1 rank]");
        g_comm.world = 1;
    }

    if (bench) bench_allreduce();
    if (g_pg.rank == 0) printf("%d passed, %d failed\n", g_passed, g_failed);
    fflush(stdout);
    comm_free(&g_comm);
    pg_finalize(&g_pg);
    return g_failed ? 1 : 0;
}
