// distributed.h: who this process is in a multi-process run, how ZeRO divides the
// optimizer's elements among the ranks, and the host-memory collectives over MPI (the
// communication backend that lets several ranks share one GPU in tests, and the one the
// CPU tests of the multi-process logic use).
//
// Launch: with -DUSE_MPI (build with mpicc), `mpirun -np N prog` gives rank and world
// from MPI. Without MPI, a scheduler may set RANK, WORLD_SIZE and LOCAL_RANK in the
// environment (torchrun's names); with none of them set the process is rank 0 of 1.
//
// The collectives are deterministic: every sum is taken over the ranks in rank order,
// so results are bitwise identical from run to run (needed for bit-exact resume).
#ifndef COMMON_DISTRIBUTED_H
#define COMMON_DISTRIBUTED_H
#include "util.h"
#include <limits.h>
#ifdef USE_MPI
#include <mpi.h>
#endif

typedef struct {
    int rank, world, local_rank;
    int using_mpi;
} ProcessGroup;

static inline int env_int(const char *name, int fallback) {
    const char *s = getenv(name);
    if (!s) return fallback;
    long v;
    if (!parse_long(s, &v) || v < 0 || v > INT_MAX) fatal("environment variable %s=%s is not a non-negative integer", name, s);
    return (int)v;
}

static inline void pg_init(ProcessGroup *pg, int *argc, char ***argv) {
    memset(pg, 0, sizeof *pg);
#ifdef USE_MPI
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &pg->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &pg->world);
    pg->using_mpi = 1;
    // ranks on the same node, in rank order: the local rank picks the GPU
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, pg->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &pg->local_rank);
    MPI_Comm_free(&node);
#else
    (void)argc;
    (void)argv;
    pg->world = env_int("WORLD_SIZE", 1);
    pg->rank = env_int("RANK", 0);
    pg->local_rank = env_int("LOCAL_RANK", pg->rank);
    if (pg->world < 1) fatal("WORLD_SIZE must be at least 1, got %d", pg->world);
    if (pg->rank >= pg->world) fatal("RANK=%d must be below WORLD_SIZE=%d", pg->rank, pg->world);
#endif
}

static inline void pg_finalize(ProcessGroup *pg) {
#ifdef USE_MPI
    if (pg->using_mpi) MPI_Finalize();
#endif
    pg->using_mpi = 0;
}

// ---------------------------------------------------------------------------
// ZeRO: the optimizer's n elements are cut into `world` equal shards of shard_elems
// (a multiple of align, so that every rank's shard starts aligned and reduce-scatter
// chunks are equal); the last shard may run past n (the padding is never a parameter).

typedef struct {
    size_t n, shard_elems, padded_total;
    int world;
} ShardLayout;

static inline ShardLayout zero_shard_layout(size_t n, int world, size_t align) {
    if (world < 1 || align < 1) fatal("internal: zero_shard_layout(world=%d, align=%zu)", world, align);
    ShardLayout l;
    l.n = n;
    l.world = world;
    size_t per = (n + (size_t)world - 1) / (size_t)world;
    l.shard_elems = (per + align - 1) / align * align;
    l.padded_total = l.shard_elems * (size_t)world;
    return l;
}

// The real (unpadded) elements rank owns: [*start, *start + *count).
static inline void zero_shard_range(const ShardLayout *l, int rank, size_t *start, size_t *count) {
    size_t s = (size_t)rank * l->shard_elems;
    size_t e = s + l->shard_elems;
    if (s > l->n) s = l->n;
    if (e > l->n) e = l->n;
    *start = s;
    *count = e - s;
}

// ---------------------------------------------------------------------------
// Host-memory collectives (MPI). With one process they are copies.

#ifdef USE_MPI
static inline int mpi_count(size_t n) {
    if (n > (size_t)INT_MAX) fatal("internal: %zu elements exceed one MPI message; shard the call", n);
    return (int)n;
}
#endif

// out[shard_elems] = sum over ranks, in rank order, of rank r's in[rank*shard .. +shard).
// in holds padded_total elements on every rank.
static inline void pg_reduce_scatter_sum(const ProcessGroup *pg, const ShardLayout *l, const float *in, float *out) {
    size_t sh = l->shard_elems;
    if (pg->world == 1) {
        memcpy(out, in, sh * sizeof(float));
        return;
    }
#ifdef USE_MPI
    float *recv = (float *)xmalloc(sh * (size_t)pg->world * sizeof(float));
    MPI_Alltoall(in, mpi_count(sh), MPI_FLOAT, recv, mpi_count(sh), MPI_FLOAT, MPI_COMM_WORLD);
    for (size_t i = 0; i < sh; i++) out[i] = recv[i];
    for (int r = 1; r < pg->world; r++)
        for (size_t i = 0; i < sh; i++) out[i] += recv[(size_t)r * sh + i];
    free(recv);
#else
    fatal("collectives across %d processes need the MPI build (built with -DUSE_MPI, launched with mpirun)", pg->world);
#endif
}

// out[padded_total] = every rank's shard[shard_elems], in rank order.
static inline void pg_allgather(const ProcessGroup *pg, const ShardLayout *l, const float *shard, float *out) {
    size_t sh = l->shard_elems;
    if (pg->world == 1) {
        memcpy(out, shard, sh * sizeof(float));
        return;
    }
#ifdef USE_MPI
    MPI_Allgather(shard, mpi_count(sh), MPI_FLOAT, out, mpi_count(sh), MPI_FLOAT, MPI_COMM_WORLD);
#else
    fatal("collectives across %d processes need the MPI build (built with -DUSE_MPI, launched with mpirun)", pg->world);
#endif
}

// buf[padded_total] = the rank-ordered sum of every rank's buf: reduce-scatter, then
// all-gather, so each element is summed by exactly one rank in a fixed order.
static inline void pg_allreduce_sum(const ProcessGroup *pg, const ShardLayout *l, float *buf) {
    if (pg->world == 1) return;
    float *shard = (float *)xmalloc(l->shard_elems * sizeof(float));
    pg_reduce_scatter_sum(pg, l, buf, shard);
    pg_allgather(pg, l, shard, buf);
    free(shard);
}

// Sum of one int over the ranks (e.g. failure counts).
static inline long pg_sum_long(const ProcessGroup *pg, long v) {
#ifdef USE_MPI
    if (pg->world > 1) {
        long total = 0;
        MPI_Allreduce(&v, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        return total;
    }
#endif
    (void)pg;
    return v;
}

#endif // COMMON_DISTRIBUTED_H
