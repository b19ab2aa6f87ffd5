// test_distributed.c: the multi-process logic that needs no GPU, run under
// `mpirun -np N` (N = 1, 2, 3): ZeRO shard ownership, the deterministic host
// collectives, the data loader's split of every batch across ranks, and gathering
// sharded weights into one checkpoint. Every rank checks; rank 0 prints each case and the
// "N passed, M failed" line (failures summed over the ranks).
#include "../../common/distributed.h"
#include "../../common/checkpoint.h"
#include "../../common/dataloader.h"
#include "../../common/rng.h"

static ProcessGroup g_pg;
static int g_passed = 0, g_failed = 0;
static long g_case_failures = 0;

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            if (g_case_failures++ < 3) {                                          \
                printf("  rank %d: check failed at line %d: ", g_pg.rank, __LINE__); \
                printf(__VA_ARGS__);                                              \
                printf("\n");                                                     \
            }                                                                     \
        }                                                                         \
    } while (0)

static void run_case(const char *name, void (*fn)(void)) {
    g_case_failures = 0;
    fn();
    fflush(stdout);
    long total = pg_sum_long(&g_pg, g_case_failures);
    if (total) g_failed++;
    else g_passed++;
    if (g_pg.rank == 0) printf("%-60s %s\n", name, total ? "FAIL" : "ok");
    fflush(stdout);
}

// the values rank r contributes: the same on every rank, so each can compute the truth
static void rank_values(int r, float *x, size_t n) {
    uint64_t s = rng_seed(1000 + (uint64_t)r);
    rng_fill_normal(&s, x, n, 0.0f, 1.0f);
}

static void test_shard_layout(void) {
    size_t ns[] = {1, 7, 100, 1000, 124475904, 3};
    int worlds[] = {1, 2, 3, 4, 8, 7};
    size_t aligns[] = {1, 4, 64, 128};
    for (size_t a = 0; a < 4; a++)
        for (size_t i = 0; i < 6; i++)
            for (size_t w = 0; w < 6; w++) {
                ShardLayout l = zero_shard_layout(ns[i], worlds[w], aligns[a]);
                CHECK(l.shard_elems % aligns[a] == 0 && l.padded_total >= ns[i], "n=%zu world=%d align=%zu", ns[i], worlds[w], aligns[a]);
                size_t covered = 0;
                for (int r = 0; r < worlds[w]; r++) {
                    size_t s, c;
                    zero_shard_range(&l, r, &s, &c);
                    CHECK(s == covered || c == 0, "ranges must tile [0,n): rank %d starts at %zu, expected %zu", r, s, covered);
                    covered += c;
                }
                CHECK(covered == ns[i], "ranges cover %zu of %zu", covered, ns[i]);
            }
}

// allreduce equals the rank-ordered serial sum bit for bit, and equals
// reduce-scatter followed by all-gather
static void test_collectives(void) {
    size_t n = 100003;
    ShardLayout l = zero_shard_layout(n, g_pg.world, 64);
    float *buf = (float *)xcalloc(l.padded_total, sizeof(float));
    float *want = (float *)xcalloc(l.padded_total, sizeof(float));
    float *tmp = (float *)xcalloc(l.padded_total, sizeof(float));
    rank_values(g_pg.rank, buf, n);
    for (int r = 0; r < g_pg.world; r++) {
        rank_values(r, tmp, n);
        for (size_t i = 0; i < n; i++) want[i] = r == 0 ? tmp[i] : want[i] + tmp[i];
    }
    float *shard = (float *)xmalloc(l.shard_elems * sizeof(float));
    pg_reduce_scatter_sum(&g_pg, &l, buf, shard);
    size_t s, c;
    zero_shard_range(&l, g_pg.rank, &s, &c);
    CHECK(memcmp(shard, want + s, c * sizeof(float)) == 0, "reduce-scatter shard differs from the serial sum");
    pg_allreduce_sum(&g_pg, &l, buf);
    CHECK(memcmp(buf, want, n * sizeof(float)) == 0, "allreduce differs from the rank-ordered serial sum");
    free(buf); free(want); free(tmp); free(shard);
}

// each rank's loader part, gathered, is the single-process global batch
static void test_batch_split(void) {
    const char *path = "build/test_distributed_shard.bin";
    int B = 2, T = 8, world = g_pg.world;
    if (g_pg.rank == 0) {
        int ntok = B * T * world * 5 + 1;
        int h[HEADER_INTS] = {0};
        h[0] = 20240520; h[1] = 1; h[2] = ntok;
        AtomicFile a = atomic_open(path);
        xfwrite(h, sizeof(int), HEADER_INTS, a.f, a.tmp_path);
        for (int i = 0; i < ntok; i++) { uint16_t t = (uint16_t)((i * 7919) % 50257); xfwrite(&t, 2, 1, a.f, a.tmp_path); }
        atomic_commit(&a);
    }
#ifdef USE_MPI
    if (g_pg.using_mpi) MPI_Barrier(MPI_COMM_WORLD);
#endif
    DataLoader mine, all;
    dataloader_init(&mine, path, B, T, g_pg.rank, world, 1, 7, 50257);
    dataloader_init(&all, path, B * world, T, 0, 1, 1, 7, 50257);
    size_t part = (size_t)B * T;
    int *in = (int *)xmalloc(part * sizeof(int)), *tg = (int *)xmalloc(part * sizeof(int));
    int *gin = (int *)xmalloc(part * world * sizeof(int)), *gtg = (int *)xmalloc(part * world * sizeof(int));
    for (int step = 0; step < 7; step++) {  // crosses an epoch (5 batches per epoch)
        dataloader_next(&mine, in, tg);
        dataloader_next(&all, gin, gtg);
        CHECK(memcmp(in, gin + g_pg.rank * part, part * sizeof(int)) == 0, "step %d: inputs are not this rank's part", step);
        CHECK(memcmp(tg, gtg + g_pg.rank * part, part * sizeof(int)) == 0, "step %d: targets are not this rank's part", step);
    }
    free(in); free(tg); free(gin); free(gtg);
    dataloader_free(&mine);
    dataloader_free(&all);
}

// weights sharded across ranks, gathered, written by rank 0, read back whole
static void test_checkpoint_gather(void) {
    GPT2Config c = {16, 300, 384, 2, 2, 8};
    size_t n = gpt2_num_params(&c);
    ShardLayout l = zero_shard_layout(n, g_pg.world, 32);
    float *full = (float *)xcalloc(l.padded_total, sizeof(float));
    rank_values(99, full, n);  // the truth, known to every rank
    size_t s, cnt;
    zero_shard_range(&l, g_pg.rank, &s, &cnt);
    float *shard = (float *)xcalloc(l.shard_elems, sizeof(float));
    memcpy(shard, full + s, cnt * sizeof(float));
    float *gathered = (float *)xcalloc(l.padded_total, sizeof(float));
    pg_allgather(&g_pg, &l, shard, gathered);
    const char *path = "build/test_distributed_model.bin";
    if (g_pg.rank == 0) gpt2_checkpoint_write(path, &c, gathered, 0);
#ifdef USE_MPI
    if (g_pg.using_mpi) MPI_Barrier(MPI_COMM_WORLD);
#endif
    GPT2Config rc;
    float *back = gpt2_checkpoint_read(path, &rc);
    CHECK(memcmp(back, full, n * sizeof(float)) == 0, "gathered checkpoint differs from the unsharded weights");
    free(back); free(full); free(shard); free(gathered);
}

// the slice layout the GPU trainer shards by: every rank's chunks, scattered back, tile
// the flat parameters exactly once; zero_owned_index agrees with the gather; the GPT-2
// shape refuses a world size that does not divide its slices
static void test_zero_slices(void) {
    GPT2Config c = {64, 1000, 256, 3, 4, 96};
    size_t sizes[NUM_PARAM_TENSORS];
    int layers[NUM_PARAM_TENSORS];
    gpt2_param_sizes(&c, sizes);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) layers[k] = gpt2_param_layers(&c, k);
    int world = g_pg.world;
    ZeroLayout z;
    const char *bad = zero_layout_init(&z, sizes, layers, GPT2_PARAM_NAMES, NUM_PARAM_TENSORS, world);
    CHECK(bad == NULL, "world %d should divide C=96's slices: %s", world, bad ? bad : "");
    if (bad) return;
    size_t n = gpt2_num_params(&c);
    CHECK(z.n == n && z.shard_elems * (size_t)world == n, "shard %zu x %d ranks != %zu parameters", z.shard_elems, world, n);
    float *full = (float *)xmalloc(n * sizeof(float)), *back = (float *)xmalloc(n * sizeof(float));
    float *shard = (float *)xmalloc(z.shard_elems * sizeof(float));
    int *hits = (int *)xcalloc(n, sizeof(int));
    rank_values(7, full, n);
    for (size_t i = 0; i < n; i++) back[i] = NAN;
    for (int r = 0; r < world; r++) {
        zero_gather_shard(&z, r, full, shard);
        for (int k = 0; k < z.ntensors; k++)
            for (size_t i = 0; i < (size_t)z.t[k].layers * z.t[k].chunk; i++) {
                size_t p = zero_owned_index(&z.t[k], r, i);
                hits[p]++;
                CHECK(shard[z.t[k].shard_offset + i] == full[p], "rank %d tensor %d element %zu: index map differs from the gather", r, k, i);
            }
        zero_scatter_shard(&z, r, shard, back);
    }
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += hits[i] != 1;
    CHECK(wrong == 0, "%zu parameters owned by other than exactly one rank", wrong);
    CHECK(memcmp(back, full, n * sizeof(float)) == 0, "scattered shards differ from the flat parameters");
    ZeroLayout z7;
    CHECK(zero_layout_init(&z7, sizes, layers, NULL, NUM_PARAM_TENSORS, 7) != NULL, "7 ranks cannot split C=96 slices, must be refused");
    free(full); free(back); free(shard); free(hits);
}

int main(int argc, char **argv) {
    pg_init(&g_pg, &argc, &argv);
    mkdir("build", 0755);
    if (g_pg.rank == 0) printf("test_distributed: %d rank(s)%s\n", g_pg.world, g_pg.using_mpi ? " (MPI)" : "");
    run_case("ZeRO shard layout tiles [0, n) for any world and alignment", test_shard_layout);
    run_case("deterministic reduce-scatter and allreduce == serial sum", test_collectives);
    run_case("data loader: rank parts == the single-process global batch", test_batch_split);
    run_case("sharded weights gathered into one checkpoint", test_checkpoint_gather);
    run_case("ZeRO slices: rank chunks tile the parameters, index map == gather", test_zero_slices);
    int failed = g_failed;
    if (g_pg.rank == 0) printf("%d passed, %d failed\n", g_passed, g_failed);
    pg_finalize(&g_pg);
    return failed ? 1 : 0;
}
