// kernels/comm.cuh: the collectives of data-parallel training on GPU buffers (all-reduce of
// the gradients, reduce-scatter and all-gather for ZeRO, small fp32 sums such as the loss
// or the squared gradient norm), behind one small API with two backends:
//   NCCL: one GPU per rank, asynchronous on the communication stream; the real thing.
//   MPI:  through host memory (copy out, sum on the host, copy back). Slow, but several
//         ranks can share ONE GPU, so the multi-rank paths of the trainer can be tested on
//         a single-GPU machine; and its sums are deterministic by construction (rank order,
//         fp32, one rounding), so tests can demand bitwise equality.
// With one rank every call is a no-op (or a device copy where in != out) and neither NCCL
// nor MPI is touched. Every call is issued on Comm.stream, a non-blocking stream: callers
// order it after their compute stream with events, and their compute after it likewise.
// NCCL calls can be captured in a CUDA graph; the MPI backend's cannot (it waits on the host).
#pragma once
#include "common.cuh"
#include "../common/distributed.h"
#include <nccl.h>

enum { COMM_BACKEND_NONE = 0, COMM_BACKEND_NCCL = 1, COMM_BACKEND_MPI = 2 };
typedef enum { COMM_SUM, COMM_MAX } CommOp;  // comm_allreduce_f32's reduction

// Elements per MPI exchange: MPI counts and displacements are int, and the pageable
// scratch of an exchange grows with it (world * piece elements at most).
#define COMM_MPI_PIECE ((size_t)1 << 24)

typedef struct {
    int rank, world, backend;
    cudaStream_t stream;  // every collective is issued here; created by comm_init
    ncclComm_t nccl;      // NCCL backend
    // MPI backend. host_in/host_out: pinned staging of the device data (device-to-host
    // into host_in, host-to-device from host_out or host_in); send/recv: pageable scratch of
    // the MPI exchange; all grow to the largest size asked for so far, never shrink.
    void *host_in, *host_out, *send, *recv;
    size_t host_in_bytes, host_out_bytes, send_bytes, recv_bytes;
    int *counts;          // 4 * world ints: counts and displacements of the variable-size exchanges
    size_t mpi_piece;     // elements per MPI exchange (COMM_MPI_PIECE; tests lower it to exercise the cut)
} Comm;

#if PRECISION == PRECISION_FP32
#define COMM_NCCL_FLOATX ncclFloat
#elif PRECISION == PRECISION_BF16
#define COMM_NCCL_FLOATX ncclBfloat16
#else
#define COMM_NCCL_FLOATX ncclHalf
#endif

static inline void nccl_check_impl(ncclResult_t r, const char *what, const char *file, int line) {
    if (r != ncclSuccess) {
        fflush(stdout);
        // the last error's text names the cause (a duplicate GPU, a network failure), the code alone does not
        const char *detail = ncclGetLastError(NULL);
        fprintf(stderr, "error: NCCL: %s (%s) at %s:%d%s%s\n", ncclGetErrorString(r), what, file, line,
                detail && detail[0] ? ": " : "", detail ? detail : "");
        fatal_exit();
    }
}
#define NCCL_CHECK(call) nccl_check_impl((call), #call, __FILE__, __LINE__)

static const char *comm_backend_name(int backend) {
    switch (backend) {
    case COMM_BACKEND_NONE: return "none";
    case COMM_BACKEND_NCCL: return "nccl";
    case COMM_BACKEND_MPI: return "mpi";
    default: return "unknown";
    }
}

// "nccl" or "mpi" (a command-line value) to the backend; -1 when it is neither
static int comm_backend_parse(const char *s) {
    if (strcmp(s, "nccl") == 0) return COMM_BACKEND_NCCL;
    if (strcmp(s, "mpi") == 0) return COMM_BACKEND_MPI;
    return -1;
}

// floatX/fp32 conversions on the host (the cuda_fp16/cuda_bf16 ones are host-callable):
// to_float() from common.cuh one way, round-to-nearest-even the other.
static inline void comm_host_round(float x, float *out) { *out = x; }
static inline void comm_host_round(float x, __nv_bfloat16 *out) { *out = __float2bfloat16_rn(x); }
static inline void comm_host_round(float x, __half *out) { *out = __float2half_rn(x); }

// ---------------------------------------------------------------------------
// NCCL unique id: rank 0 makes it, every rank needs it before ncclCommInitRank.

// For launchers without MPI (torchrun, SLURM): rank 0 publishes the id in a file that every
// rank can read. The file must not exist at launch: a stale one would hand the other ranks
// a dead id, so rank 0 refuses it (and removes its own once every rank has joined).
static void comm_nccl_id_via_file(const char *path, int rank, ncclUniqueId *id) {
    if (rank == 0) {
        if (file_exists(path))
            fatal("GPT2_NCCL_ID_FILE=%s already exists (left by an earlier launch that failed during setup?): "
                  "delete it, or name a fresh path for every launch", path);
        AtomicFile f = atomic_open(path);  // <path>.tmp, fsync, rename: readers never see a partial id
        xfwrite(id, sizeof *id, 1, f.f, f.tmp_path);
        atomic_commit(&f);
        return;
    }
    double start = wall_seconds();
    while (!file_exists(path)) {
        if (wall_seconds() - start > 300.0)
            fatal("rank %d waited 300 s for rank 0 to write the NCCL id file %s (named by GPT2_NCCL_ID_FILE): "
                  "is rank 0 running, and is the path on a file system that every rank sees?", rank, path);
        usleep(100 * 1000);
    }
    FILE *f = xfopen(path, "rb");
    int64_t size = xfile_size(f, path);
    if (size != (int64_t)sizeof *id)
        fatal("NCCL id file %s (GPT2_NCCL_ID_FILE) holds %lld bytes, expected %zu: another program's file?", path,
              (long long)size, sizeof *id);
    xfread(id, sizeof *id, 1, f, path);
    xfclose(f, path);
}

static void comm_init_nccl(Comm *c, const ProcessGroup *pg) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (pg->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    const char *id_file = NULL;
#ifdef USE_MPI
    if (pg->using_mpi) MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    else
#endif
    {
        id_file = getenv("GPT2_NCCL_ID_FILE");
        if (!id_file || !id_file[0])
            fatal("%d ranks without MPI: NCCL needs rank 0's id shared with every rank; launch with mpirun "
                  "(an MPI build, -DUSE_MPI), or set GPT2_NCCL_ID_FILE to a path on a file system all ranks see",
                  pg->world);
        comm_nccl_id_via_file(id_file, pg->rank, &id);
    }
    NCCL_CHECK(ncclCommInitRank(&c->nccl, pg->world, id, pg->rank));
    // init returns only once every rank has joined, so every rank has read the file by now
    if (id_file && pg->rank == 0 && unlink(id_file) != 0)
        fprintf(stderr, "warning: cannot remove the NCCL id file %s: %s\n", id_file, strerror(errno));
}

// ---------------------------------------------------------------------------
// MPI backend: host-memory collectives with deterministic sums. Each element is summed by
// exactly one rank, over the ranks in rank order, in fp32, then rounded once to its type;
// every rank then receives that rank's bits, so all ranks agree bitwise and so do repeats.
// MPI does no arithmetic here, only moves bits (MPI_Allreduce's summation order is not fixed).

#ifdef USE_MPI
template <typename T>
static MPI_Datatype comm_mpi_type(void) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- or 32-bit elements");
    return sizeof(T) == 2 ? MPI_UINT16_T : MPI_UINT32_T;
}

static void comm_grow_pinned(Comm *c, void **p, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return;
    // an earlier call's host-to-device copy may still be reading the old buffer
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    if (*p) CUDA_CHECK(cudaFreeHost(*p));
    *p = NULL;
    *cap = 0;
    cudaError_t e = cudaMallocHost(p, bytes);
    if (e != cudaSuccess)  // CUDA_CHECK's advice is about device memory; this is host memory
        fatal("cannot allocate %zu bytes of pinned host memory for the MPI communication backend: %s", bytes,
              cudaGetErrorString(e));
    *cap = bytes;
}

static void comm_grow_host(void **p, size_t *cap, size_t bytes) {
    if (bytes < 64) bytes = 64;  // never a NULL buffer, even for an empty exchange
    if (bytes <= *cap) return;
    free(*p);
    *p = xmalloc(bytes);
    *cap = bytes;
}

// h[n] (host) = the sum over ranks of every rank's h, in place
template <typename T>
static void comm_mpi_allreduce_host(Comm *c, T *h, size_t n) {
    const int W = c->world, me = c->rank;
    int *len = c->counts, *off = c->counts + W, *rcount = c->counts + 2 * W, *roff = c->counts + 3 * W;
    for (size_t p0 = 0; p0 < n; p0 += c->mpi_piece) {
        size_t m = n - p0 < c->mpi_piece ? n - p0 : c->mpi_piece;
        size_t shard = (m + (size_t)W - 1) / (size_t)W;
        // rank q sums [off[q], off[q] + len[q]) of the piece; trailing ranks may own nothing
        for (int q = 0; q < W; q++) {
            size_t lo = (size_t)q * shard < m ? (size_t)q * shard : m;
            size_t hi = lo + shard < m ? lo + shard : m;
            off[q] = (int)lo;
            len[q] = (int)(hi - lo);
        }
        size_t mine = (size_t)len[me];
        for (int q = 0; q < W; q++) {
            rcount[q] = (int)mine;
            roff[q] = (int)((size_t)q * mine);
        }
        comm_grow_host(&c->recv, &c->recv_bytes, (size_t)W * mine * sizeof(T));
        T *recv = (T *)c->recv, *dst = h + p0 + off[me];
        MPI_Alltoallv(h + p0, len, off, comm_mpi_type<T>(), recv, rcount, roff, comm_mpi_type<T>(), MPI_COMM_WORLD);
        for (size_t i = 0; i < mine; i++) {
            float s = to_float(recv[i]);
            for (int q = 1; q < W; q++) s += to_float(recv[(size_t)q * mine + i]);
            comm_host_round(s, &dst[i]);
        }
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h + p0, len, off, comm_mpi_type<T>(), MPI_COMM_WORLD);
    }
}

// out[chunk] (host) = the sum over ranks of every rank's in[rank * chunk ...]
template <typename T>
static void comm_mpi_reduce_scatter_host(Comm *c, const T *in, T *out, size_t chunk) {
    const int W = c->world;
    for (size_t p0 = 0; p0 < chunk; p0 += c->mpi_piece) {
        size_t m = chunk - p0 < c->mpi_piece ? chunk - p0 : c->mpi_piece;
        const T *send = in;  // one piece: in's layout (rank q's part at q * chunk) is what Alltoall sends
        if (m != chunk) {    // several: gather each rank's part of this piece side by side
            comm_grow_host(&c->send, &c->send_bytes, (size_t)W * m * sizeof(T));
            for (int q = 0; q < W; q++)
                memcpy((T *)c->send + (size_t)q * m, in + (size_t)q * chunk + p0, m * sizeof(T));
            send = (const T *)c->send;
        }
        comm_grow_host(&c->recv, &c->recv_bytes, (size_t)W * m * sizeof(T));
        T *recv = (T *)c->recv;
        MPI_Alltoall(send, (int)m, comm_mpi_type<T>(), recv, (int)m, comm_mpi_type<T>(), MPI_COMM_WORLD);
        for (size_t i = 0; i < m; i++) {
            float s = to_float(recv[i]);
            for (int q = 1; q < W; q++) s += to_float(recv[(size_t)q * m + i]);
            comm_host_round(s, &out[p0 + i]);
        }
    }
}

// out[world * chunk] (host) = every rank's in[chunk], rank q's at q * chunk
template <typename T>
static void comm_mpi_allgather_host(Comm *c, const T *in, T *out, size_t chunk) {
    const int W = c->world;
    for (size_t p0 = 0; p0 < chunk; p0 += c->mpi_piece) {
        size_t m = chunk - p0 < c->mpi_piece ? chunk - p0 : c->mpi_piece;
        if (m == chunk) {  // one piece: Allgather's layout is out's
            MPI_Allgather(in, (int)m, comm_mpi_type<T>(), out, (int)m, comm_mpi_type<T>(), MPI_COMM_WORLD);
            break;
        }
        comm_grow_host(&c->recv, &c->recv_bytes, (size_t)W * m * sizeof(T));
        T *recv = (T *)c->recv;
        MPI_Allgather(in + p0, (int)m, comm_mpi_type<T>(), recv, (int)m, comm_mpi_type<T>(), MPI_COMM_WORLD);
        for (int q = 0; q < W; q++) memcpy(out + (size_t)q * chunk + p0, recv + (size_t)q * m, m * sizeof(T));
    }
}

// The device wrappers: the device-to-host copy is queued on c->stream, so it waits for
// whatever the caller ordered before the call; the host then waits for it (this backend
// blocks the host), and the copy back is left queued on c->stream. The pinned buffers are
// written by the host only after that synchronisation, so no copy still in flight from an
// earlier call can read them half-written.
// A max has no summation order to fix, so MPI's own reduction serves it (fp32 only).
template <typename T>
static void comm_mpi_allreduce(Comm *c, T *buf, size_t n, CommOp op = COMM_SUM) {
    size_t bytes = n * sizeof(T);
    comm_grow_pinned(c, &c->host_in, &c->host_in_bytes, bytes);
    CUDA_CHECK(cudaMemcpyAsync(c->host_in, buf, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    if (op == COMM_MAX) {
        if (!std::is_same<T, float>::value) fatal("internal: an all-reduce max of other than fp32");
        MPI_Allreduce(MPI_IN_PLACE, c->host_in, (int)n, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    } else {
        comm_mpi_allreduce_host(c, (T *)c->host_in, n);
    }
    CUDA_CHECK(cudaMemcpyAsync(buf, c->host_in, bytes, cudaMemcpyHostToDevice, c->stream));
}

template <typename T>
static void comm_mpi_reduce_scatter(Comm *c, const T *in, T *out, size_t chunk) {
    size_t bytes = chunk * sizeof(T);
    comm_grow_pinned(c, &c->host_in, &c->host_in_bytes, bytes * (size_t)c->world);
    comm_grow_pinned(c, &c->host_out, &c->host_out_bytes, bytes);
    CUDA_CHECK(cudaMemcpyAsync(c->host_in, in, bytes * (size_t)c->world, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    comm_mpi_reduce_scatter_host(c, (const T *)c->host_in, (T *)c->host_out, chunk);
    CUDA_CHECK(cudaMemcpyAsync(out, c->host_out, bytes, cudaMemcpyHostToDevice, c->stream));
}

template <typename T>
static void comm_mpi_allgather(Comm *c, const T *chunk_in, T *out, size_t chunk) {
    size_t bytes = chunk * sizeof(T);
    comm_grow_pinned(c, &c->host_in, &c->host_in_bytes, bytes);
    comm_grow_pinned(c, &c->host_out, &c->host_out_bytes, bytes * (size_t)c->world);
    // in place (chunk_in == out + rank * chunk) is fine: chunk_in is copied out before out is written
    CUDA_CHECK(cudaMemcpyAsync(c->host_in, chunk_in, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    comm_mpi_allgather_host(c, (const T *)c->host_in, (T *)c->host_out, chunk);
    CUDA_CHECK(cudaMemcpyAsync(out, c->host_out, bytes * (size_t)c->world, cudaMemcpyHostToDevice, c->stream));
}
#endif  // USE_MPI

// ---------------------------------------------------------------------------
// the API

// The NCCL backend assumes the caller already chose this rank's GPU (cudaSetDevice(
// local_rank % device count)). comm_init is collective: every rank calls it.
static void comm_init(Comm *c, const ProcessGroup *pg, int backend) {
    memset(c, 0, sizeof *c);
    if (backend != COMM_BACKEND_NONE && backend != COMM_BACKEND_NCCL && backend != COMM_BACKEND_MPI)
        fatal("internal: unknown communication backend %d", backend);
    c->rank = pg->rank;
    c->world = pg->world;
    c->mpi_piece = COMM_MPI_PIECE;
    // highest priority: NCCL's kernels hold few SMs and mostly wait on links, so they should
    // start as soon as their turn comes, not queue behind the compute kernels that fill the GPU
    int least, greatest;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, greatest));
    if (c->world == 1) return;  // backend NONE: nothing to talk to
    if (backend == COMM_BACKEND_NONE)
        fatal("%d ranks need a communication backend (nccl or mpi)", c->world);
    c->backend = backend;
    if (backend == COMM_BACKEND_NCCL) {
        comm_init_nccl(c, pg);
        return;
    }
#ifdef USE_MPI
    if (!pg->using_mpi) fatal("the MPI communication backend needs the ranks to come from mpirun");
    c->counts = (int *)xcalloc(4 * (size_t)c->world, sizeof(int));
#else
    fatal("the MPI communication backend (several ranks sharing one GPU) needs the MPI build: compile with "
          "-DUSE_MPI and launch with mpirun, or use the NCCL backend");
#endif
}

// Waits for the stream, then frees everything. Collective for NCCL (every rank calls it).
static void comm_free(Comm *c) {
    if (c->stream) CUDA_CHECK(cudaStreamSynchronize(c->stream));
    if (c->nccl) {
        NCCL_CHECK(ncclCommFinalize(c->nccl));  // flushes outstanding work before the local teardown
        NCCL_CHECK(ncclCommDestroy(c->nccl));
    }
    if (c->host_in) CUDA_CHECK(cudaFreeHost(c->host_in));
    if (c->host_out) CUDA_CHECK(cudaFreeHost(c->host_out));
    free(c->send);
    free(c->recv);
    free(c->counts);
    if (c->stream) CUDA_CHECK(cudaStreamDestroy(c->stream));
    memset(c, 0, sizeof *c);
}

// Batches the NCCL calls between them into one launch (e.g. a reduce-scatter per layer).
// The MPI backend runs each call at once; it needs no batching.
static void comm_group_start(Comm *c) {
    if (c->backend == COMM_BACKEND_NCCL) NCCL_CHECK(ncclGroupStart());
}
static void comm_group_end(Comm *c) {
    if (c->backend == COMM_BACKEND_NCCL) NCCL_CHECK(ncclGroupEnd());
}

// buf[n] = the sum over ranks of every rank's buf[n], in place
static void comm_allreduce_sum(Comm *c, floatX *buf, size_t n) {
    if (c->world == 1 || n == 0) return;
    if (c->backend == COMM_BACKEND_NCCL) {
        NCCL_CHECK(ncclAllReduce(buf, buf, n, COMM_NCCL_FLOATX, ncclSum, c->nccl, c->stream));
        return;
    }
#ifdef USE_MPI
    comm_mpi_allreduce(c, buf, n);
#endif
}

// out[chunk] = the sum over ranks of every rank's in[rank * chunk, (rank + 1) * chunk);
// in holds world * chunk elements. out may be in + rank * chunk (in place).
static void comm_reduce_scatter_sum(Comm *c, const floatX *in, floatX *out, size_t chunk) {
    if (chunk == 0) return;
    if (c->world == 1) {
        if (in != out)
            CUDA_CHECK(cudaMemcpyAsync(out, in, chunk * sizeof(floatX), cudaMemcpyDeviceToDevice, c->stream));
        return;
    }
    if (c->backend == COMM_BACKEND_NCCL) {
        NCCL_CHECK(ncclReduceScatter(in, out, chunk, COMM_NCCL_FLOATX, ncclSum, c->nccl, c->stream));
        return;
    }
#ifdef USE_MPI
    comm_mpi_reduce_scatter(c, in, out, chunk);
#endif
}

// out[world * chunk] = every rank's chunk_in[chunk], rank r's at r * chunk.
// chunk_in may be out + rank * chunk (in place).
static void comm_allgather(Comm *c, const floatX *chunk_in, floatX *out, size_t chunk) {
    if (chunk == 0) return;
    if (c->world == 1) {
        if (chunk_in != out)
            CUDA_CHECK(cudaMemcpyAsync(out, chunk_in, chunk * sizeof(floatX), cudaMemcpyDeviceToDevice, c->stream));
        return;
    }
    if (c->backend == COMM_BACKEND_NCCL) {
        NCCL_CHECK(ncclAllGather(chunk_in, out, chunk, COMM_NCCL_FLOATX, c->nccl, c->stream));
        return;
    }
#ifdef USE_MPI
    comm_mpi_allgather(c, chunk_in, out, chunk);
#endif
}

// buf[n] (fp32, device) = the sum (COMM_SUM) or the element-wise largest (COMM_MAX) over
// ranks, in place: a few floats such as the loss, the squared gradient norm, FP8's amaxes
static void comm_allreduce_f32(Comm *c, float *buf, size_t n, CommOp op) {
    if (c->world == 1 || n == 0) return;
    if (c->backend == COMM_BACKEND_NCCL) {
        NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, op == COMM_MAX ? ncclMax : ncclSum, c->nccl, c->stream));
        return;
    }
#ifdef USE_MPI
    comm_mpi_allreduce(c, buf, n, op);
#endif
}
