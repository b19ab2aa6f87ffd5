// distributed.h: who this process is in a multi-process run, and how ZeRO divides the
// parameters among the ranks (by tensor slice; the trainer's collectives over NCCL or
// MPI are in kernels/comm.cuh).
//
// Launch: with -DUSE_MPI (build with mpicc), `mpirun -np N prog` gives rank and world
// from MPI. Otherwise a scheduler may set RANK, WORLD_SIZE and LOCAL_RANK in the
// environment (torchrun's names); with none of them set the process is rank 0 of 1.
#ifndef COMMON_DISTRIBUTED_H
#define COMMON_DISTRIBUTED_H
#include "util.h"
#include <limits.h>
#ifdef USE_MPI
#include <mpi.h>
#endif

typedef struct {
    int rank, world, local_rank;
    int local_world;  // ranks on this node (their host memory is shared): from MPI, or LOCAL_WORLD_SIZE (else 1)
    int using_mpi;
} ProcessGroup;

static inline int env_int(const char *name, int fallback) {
    const char *s = getenv(name);
    if (!s) return fallback;
    long v;
    if (!parse_long(s, &v) || v < 0 || v > INT_MAX)
        fatal("environment variable %s=%s is not a non-negative integer", name, s);
    return (int)v;
}

// Launched by an MPI launcher? (Open MPI's mpirun, Hydra/MPICH and Slurm's PMI/PMIx each
// set one of these.) Otherwise MPI is not initialised at all, so a plain single-process
// run needs no MPI runtime, and a scheduler can hand out ranks through the environment.
static inline int pg_launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

#ifdef USE_MPI
// an error on one rank stops them all (the others may be waiting in a collective)
static inline void pg_abort_all(void) { MPI_Abort(MPI_COMM_WORLD, 1); }
#endif

static inline void pg_init(ProcessGroup *pg, int *argc, char ***argv) {
    memset(pg, 0, sizeof *pg);
#ifdef USE_MPI
    if (pg_launched_by_mpi()) {
        MPI_Init(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &pg->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &pg->world);
        pg->using_mpi = 1;
        if (pg->world > 1) g_fatal_hook = pg_abort_all;
        // ranks on the same node, in rank order: the local rank picks the GPU
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, pg->rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &pg->local_rank);
        MPI_Comm_size(node, &pg->local_world);
        MPI_Comm_free(&node);
        return;
    }
#else
    if (pg_launched_by_mpi() && getenv("WORLD_SIZE") == NULL)
        fatal("launched by mpirun, but this program was built without MPI: rebuild with mpicc available (make), "
              "or launch the ranks with RANK, WORLD_SIZE and LOCAL_RANK set");
#endif
    (void)argc;
    (void)argv;
    pg->world = env_int("WORLD_SIZE", 1);
    if (pg->world > 1 && !getenv("RANK"))
        fatal("WORLD_SIZE=%d but RANK is not set: every process needs its RANK (0..%d)", pg->world, pg->world - 1);
    pg->rank = env_int("RANK", 0);
    pg->local_rank = env_int("LOCAL_RANK", pg->rank);
    pg->local_world = env_int("LOCAL_WORLD_SIZE", 1);
    if (pg->local_world < 1 || pg->local_world > pg->world)
        fatal("LOCAL_WORLD_SIZE=%d must be from 1 to WORLD_SIZE=%d", pg->local_world, pg->world);
    if (pg->world < 1) fatal("WORLD_SIZE must be at least 1, got %d", pg->world);
    if (pg->rank >= pg->world) fatal("RANK=%d must be below WORLD_SIZE=%d", pg->rank, pg->world);
}

static inline void pg_finalize(ProcessGroup *pg) {
#ifdef USE_MPI
    if (pg->using_mpi) MPI_Finalize();
#endif
    pg->using_mpi = 0;
}

// ---------------------------------------------------------------------------
// ZeRO over tensor slices (what the GPU trainer uses). The parameters are tensors of
// `layers` equal slices each (one per transformer layer, or one for wte/wpe/lnf); every
// slice is split into `world` equal chunks and rank r owns chunk r of every slice. A
// layer's gradients can then be reduce-scattered as soon as its backward is done, and a
// rank's optimizer state is the compact concatenation of its chunks, tensor by tensor.

#define ZERO_MAX_TENSORS 32

typedef struct {
    size_t offset;        // first element of the tensor in the flat parameter buffer
    size_t slice;         // elements per slice (per layer)
    size_t chunk;         // slice / world: elements a rank owns per slice
    size_t shard_offset;  // first element of this tensor's chunks in the rank's compact state
    int layers;           // slices in the tensor
} ZeroTensor;

typedef struct {
    int ntensors, world;
    ZeroTensor t[ZERO_MAX_TENSORS];
    size_t n;            // all parameters
    size_t shard_elems;  // compact state per rank: sum over tensors of layers * chunk
} ZeroLayout;

// sizes[k]: elements of tensor k; layers[k]: its slices; names[k] (or NULL) for messages.
// world = 1 gives the unsharded layout. Returns NULL on success, else a message naming
// the first tensor whose slices do not divide.
static inline const char *zero_layout_init(ZeroLayout *z, const size_t *sizes, const int *layers,
                                           const char *const *names, int ntensors, int world) {
    static char msg[160];
    if (ntensors < 1 || ntensors > ZERO_MAX_TENSORS || world < 1)
        fatal("internal: zero_layout_init(%d tensors, world %d)", ntensors, world);
    memset(z, 0, sizeof *z);
    z->ntensors = ntensors;
    z->world = world;
    for (int k = 0; k < ntensors; k++) {
        ZeroTensor *t = &z->t[k];
        if (layers[k] < 1 || sizes[k] % (size_t)layers[k])
            fatal("internal: tensor %d of %zu elements in %d slices", k, sizes[k], layers[k]);
        t->offset = z->n;
        t->layers = layers[k];
        t->slice = sizes[k] / (size_t)layers[k];
        if (t->slice % (size_t)world) {
            if (names)
                snprintf(msg, sizeof msg, "%s's slices of %zu elements do not split into %d equal parts", names[k],
                         t->slice, world);
            else
                snprintf(msg, sizeof msg, "tensor %d's slices of %zu elements do not split into %d equal parts", k,
                         t->slice, world);
            return msg;
        }
        t->chunk = t->slice / (size_t)world;
        t->shard_offset = z->shard_elems;
        z->n += sizes[k];
        z->shard_elems += (size_t)t->layers * t->chunk;
    }
    return NULL;
}

// Where layer l's chunk of tensor t starts in a rank's compact shard (l = 0 for a one-slice tensor)
static inline size_t zero_chunk_at(const ZeroTensor *t, int l) { return t->shard_offset + (size_t)l * t->chunk; }

// Flat parameter index of element i (0 <= i < layers * chunk) of rank's chunks of tensor t.
static inline size_t zero_owned_index(const ZeroTensor *t, int rank, size_t i) {
    size_t l = i / t->chunk, j = i % t->chunk;
    return t->offset + l * t->slice + (size_t)rank * t->chunk + j;
}

// The optimizer's update of one tensor runs over `slabs` runs of `len` elements: run s's
// element j is parameter s * stride + j (past the rank's first element), gradient
// s * grad_stride + j, and optimizer state o + s * len + j (the rank's compact state).
// When the state is updated a range [c0, c1) at a time (staged offload), a tensor's part
// of the range is one launch over all its runs if the tensor lies inside, else one launch
// per run that the range cuts: UpdatePiece i of update_piece_count's.
typedef struct {
    int slabs;       // runs in the piece: the tensor's all, or 1
    size_t len;      // elements per run
    size_t at;       // the piece's first parameter (and rounding-noise index), past the rank's first
    size_t grad_at;  // its first gradient
    size_t q;        // its first state element, past c0
} UpdatePiece;

// Pieces to ask update_piece for: 0 (the tensor lies outside [c0, c1)), 1 (inside), else
// slabs (one per run, some maybe empty)
static inline int update_piece_count(size_t o, int slabs, size_t len, size_t c0, size_t c1) {
    size_t e = o + (size_t)slabs * len;
    if (e <= c0 || o >= c1) return 0;
    return o >= c0 && e <= c1 ? 1 : slabs;
}

// Piece i; 0 when it is empty (a run the range does not reach)
static inline int update_piece(size_t o, int slabs, size_t len, size_t stride, size_t grad_stride, size_t c0,
                               size_t c1, int i, UpdatePiece *p) {
    if (o >= c0 && o + (size_t)slabs * len <= c1) {  // inside: one piece over every run
        p->slabs = slabs;
        p->len = len;
        p->at = p->grad_at = 0;
        p->q = o - c0;
        return 1;
    }
    size_t so = o + (size_t)i * len, lo = so > c0 ? so : c0, hi = so + len < c1 ? so + len : c1;
    if (lo >= hi) return 0;
    size_t j0 = lo - so;
    p->slabs = 1;
    p->len = hi - lo;
    p->at = (size_t)i * stride + j0;
    p->grad_at = (size_t)i * grad_stride + j0;
    p->q = lo - c0;
    return 1;
}

// Copies rank's elements of the flat array `full` (z->n) into its compact shard (z->shard_elems).
static inline void zero_gather_shard(const ZeroLayout *z, int rank, const float *full, float *shard) {
    for (int k = 0; k < z->ntensors; k++) {
        const ZeroTensor *t = &z->t[k];
        for (int l = 0; l < t->layers; l++)
            memcpy(shard + t->shard_offset + (size_t)l * t->chunk,
                   full + t->offset + (size_t)l * t->slice + (size_t)rank * t->chunk, t->chunk * sizeof(float));
    }
}

// The inverse: writes rank's compact shard into its places of the flat array `full`.
static inline void zero_scatter_shard(const ZeroLayout *z, int rank, const float *shard, float *full) {
    for (int k = 0; k < z->ntensors; k++) {
        const ZeroTensor *t = &z->t[k];
        for (int l = 0; l < t->layers; l++)
            memcpy(full + t->offset + (size_t)l * t->slice + (size_t)rank * t->chunk,
                   shard + t->shard_offset + (size_t)l * t->chunk, t->chunk * sizeof(float));
    }
}

// ---------------------------------------------------------------------------
// Host-side sums over the ranks (MPI). The GPU collectives are in kernels/comm.cuh.

// Sum of one int over the ranks (e.g. failure counts).
static inline long pg_sum_long(const ProcessGroup *pg, long v) {
#ifdef USE_MPI
    if (pg->world > 1 && pg->using_mpi) {
        long total = 0;
        MPI_Allreduce(&v, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        return total;
    }
#endif
    if (pg->world > 1)
        fatal("host collectives across %d processes need MPI (the MPI build, launched with mpirun)", pg->world);
    return v;
}

#endif // COMMON_DISTRIBUTED_H
