// gpu/batch.cuh: micro-batches from the host to the device. A BatchStager holds one batch
// on the device and three pinned host buffers, each laid out as BATCH_FIELDS arrays of the
// capacity B*T (BATCH_*): two (HOST_BATCH_A, _B) taken in turn by batch_upload (evaluation,
// sampling), one (HOST_BATCH_STAGED) where training's next batch is prepared while the GPU
// still runs the current one. Preparing a batch checks its ids and groups its positions by
// token (encoder_build_buckets) for the deterministic embedding backward
// (kernels/encoder.cuh): host work that the GPU would otherwise wait for at every
// micro-step. TrainBatches feeds training from the data loader (or, with --overfit, its
// first batch again).
#pragma once
#include "../common/dataloader.h"
#include "../kernels/common.cuh"
#include "model.cuh"  // DeviceBatch

enum { BATCH_INPUTS, BATCH_TARGETS, BATCH_POSITIONS, BATCH_BUCKET_TOKEN, BATCH_BUCKET_START, BATCH_FIELDS };
enum { HOST_BATCH_A, HOST_BATCH_B, HOST_BATCH_STAGED };

typedef struct {
    int B, T, vocab_size;
    int *d_batch, *h_batch[3];
    cudaEvent_t h_batch_sent[3];
    int nb, upload_turn, staged_nb;  // nb: the uploaded batch's buckets
    int *bucket_counts;              // host scratch, vocab_size zeros
} BatchStager;

// ints in a batch buffer: BATCH_FIELDS arrays of B*T, one more for the bucket starts and
// the bucket count (read on the device by a graph-replayed step)
static size_t batch_ints(int B, int T) { return (size_t)BATCH_FIELDS * B * T + 2; }
// field f of a batch buffer laid out at the capacity
static int *batch_field(const BatchStager *b, int *buf, int f) { return buf + (size_t)f * b->B * b->T; }
static int *batch_bucket_count(const BatchStager *b, int *buf) { return buf + (size_t)BATCH_FIELDS * b->B * b->T + 1; }

static void batch_stager_init(BatchStager *b, int B, int T, int vocab_size) {
    memset(b, 0, sizeof *b);
    b->B = B;
    b->T = T;
    b->vocab_size = vocab_size;
    CUDA_CHECK(cudaMalloc(&b->d_batch, batch_ints(B, T) * sizeof(int)));
    for (int i = 0; i < 3; i++) {
        CUDA_CHECK(cudaMallocHost(&b->h_batch[i], batch_ints(B, T) * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&b->h_batch_sent[i], cudaEventDisableTiming));
    }
    b->upload_turn = HOST_BATCH_A;
    b->bucket_counts = (int *)xcalloc((size_t)vocab_size, sizeof(int));
}

static void batch_stager_free(BatchStager *b) {
    if (!b->d_batch) return;
    cudaFree(b->d_batch);
    for (int i = 0; i < 3; i++) {
        cudaFreeHost(b->h_batch[i]);
        cudaEventDestroy(b->h_batch_sent[i]);
    }
    free(b->bucket_counts);
    memset(b, 0, sizeof *b);
}

// The batch on the device, as the model reads it (for_graph: as a replayed graph does)
static DeviceBatch batch_on_device(BatchStager *b, int for_graph) {
    DeviceBatch d;
    d.inputs = batch_field(b, b->d_batch, BATCH_INPUTS);
    d.targets = batch_field(b, b->d_batch, BATCH_TARGETS);
    d.positions = batch_field(b, b->d_batch, BATCH_POSITIONS);
    d.bucket_token = batch_field(b, b->d_batch, BATCH_BUCKET_TOKEN);
    d.bucket_start = batch_field(b, b->d_batch, BATCH_BUCKET_START);
    const size_t N = (size_t)b->B * b->T, V = (size_t)b->vocab_size;
    d.nb = for_graph ? (int)(N < V ? N : V) : b->nb;
    d.bucket_count = for_graph ? batch_bucket_count(b, b->d_batch) : NULL;
    return d;
}

// Groups the B*T positions by token id for encoder_backward (kernels/encoder.cuh), a
// counting sort on the host. Writes, for nb distinct tokens in order of first appearance,
// bucket_token[i], bucket_start[i..i+1) into positions[]; positions within a bucket are
// increasing. counts is scratch of vocab_size ints, all zero on entry and on exit.
// Returns nb.
static int encoder_build_buckets(const int *inp, int BT, int vocab_size, int *counts, int *positions,
                                 int *bucket_token, int *bucket_start) {
    (void)vocab_size;
    int nb = 0;
    // counts[v] temporarily holds (bucket index + 1) of token v
    for (int i = 0; i < BT; i++) {
        int v = inp[i];
        if (counts[v] == 0) { bucket_token[nb] = v; bucket_start[nb] = 0; counts[v] = ++nb; }
        bucket_start[counts[v] - 1]++;
    }
    // sizes -> exclusive prefix sums
    int run = 0;
    for (int b = 0; b < nb; b++) { int sz = bucket_start[b]; bucket_start[b] = run; run += sz; }
    bucket_start[nb] = run;
    // scatter positions in increasing order (uses bucket_start as a moving cursor, then restores)
    for (int i = 0; i < BT; i++) positions[bucket_start[counts[inp[i]] - 1]++] = i;
    for (int b = nb; b > 0; b--) bucket_start[b] = bucket_start[b - 1];
    bucket_start[0] = 0;
    for (int b = 0; b < nb; b++) counts[bucket_token[b]] = 0;
    return nb;
}

// Fills the pinned buffer h with a micro-batch: the ids (checked against the vocabulary),
// and the per-token position buckets of the embedding backward. targets may be NULL.
// Returns the number of buckets.
static int fill_batch(BatchStager *b, int *h, const int *inputs, const int *targets, int B, int T) {
    int V = b->vocab_size;
    size_t BT = (size_t)B * T;
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V)
            fatal("token id %d at position %zu is outside the vocabulary (%d)", inputs[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            fatal("target id %d at position %zu is outside the vocabulary (%d)", targets[i], i, V);
    }
    memcpy(batch_field(b, h, BATCH_INPUTS), inputs, BT * sizeof(int));
    if (targets) memcpy(batch_field(b, h, BATCH_TARGETS), targets, BT * sizeof(int));
    int nb = encoder_build_buckets(inputs, (int)BT, V, b->bucket_counts, batch_field(b, h, BATCH_POSITIONS),
                                   batch_field(b, h, BATCH_BUCKET_TOKEN), batch_field(b, h, BATCH_BUCKET_START));
    *batch_bucket_count(b, h) = nb;
    return nb;
}

// host buffer k (holding nb buckets) to the device, asynchronously on stream s
static void send_batch(BatchStager *b, int k, int nb, cudaStream_t s) {
    CUDA_CHECK(cudaMemcpyAsync(b->d_batch, b->h_batch[k], batch_ints(b->B, b->T) * sizeof(int),
                               cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaEventRecord(b->h_batch_sent[k], s));
    b->nb = nb;
}

// Copies a micro-batch (B <= the capacity, T its T) to the device, asynchronously, from
// pinned memory. targets may be NULL. The host waits only for the copy issued two uploads
// earlier.
static void batch_upload(BatchStager *b, const int *inputs, const int *targets, int B, int T, cudaStream_t s) {
    int k = b->upload_turn;
    b->upload_turn = k == HOST_BATCH_A ? HOST_BATCH_B : HOST_BATCH_A;
    CUDA_CHECK(cudaEventSynchronize(b->h_batch_sent[k]));
    send_batch(b, k, fill_batch(b, b->h_batch[k], inputs, targets, B, T), s);
}

// Training's next micro-batch, prepared on the host now and sent by batch_upload_staged.
static void batch_stage(BatchStager *b, const int *inputs, const int *targets) {
    CUDA_CHECK(cudaEventSynchronize(b->h_batch_sent[HOST_BATCH_STAGED]));  // its last copy has left
    b->staged_nb = fill_batch(b, b->h_batch[HOST_BATCH_STAGED], inputs, targets, b->B, b->T);
}
static void batch_upload_staged(BatchStager *b, cudaStream_t s) { send_batch(b, HOST_BATCH_STAGED, b->staged_nb, s); }

// Training's micro-batches: the loader's next one, or with --overfit the first one again;
// with prefetch, read and staged on the host while the GPU runs the one before.
typedef struct {
    BatchStager *stager;
    DataLoader *train;
    int overfit, prefetch, staged;  // staged: the next batch waits in HOST_BATCH_STAGED
    int for_graph;                  // the batch as a CUDA graph's replays read it (batch_on_device)
    int *inputs, *targets;
} TrainBatches;

static void train_batches_stage(TrainBatches *b) {
    if (!b->overfit) dataloader_next(b->train, b->inputs, b->targets);
    batch_stage(b->stager, b->inputs, b->targets);
    b->staged = 1;
}

static void train_batches_init(TrainBatches *b, BatchStager *stager, DataLoader *train, int overfit, int prefetch,
                               int for_graph) {
    size_t BT = (size_t)stager->B * stager->T;
    b->stager = stager;
    b->train = train;
    b->overfit = overfit;
    b->prefetch = prefetch;
    b->for_graph = for_graph;
    b->staged = 0;
    b->inputs = (int *)xmalloc(BT * sizeof(int));
    b->targets = (int *)xmalloc(BT * sizeof(int));
    if (overfit) dataloader_next(train, b->inputs, b->targets);  // the one batch
}

// The next micro-batch to the device (read now if it was not staged); what the model reads of it
static DeviceBatch train_batches_upload(TrainBatches *b, cudaStream_t s) {
    if (!b->staged) train_batches_stage(b);
    batch_upload_staged(b->stager, s);
    b->staged = 0;
    return batch_on_device(b->stager, b->for_graph);
}

// Reads and stages the next micro-batch now, if prefetching.
static void train_batches_prefetch(TrainBatches *b) {
    if (b->prefetch) train_batches_stage(b);
}

static void train_batches_free(TrainBatches *b) {
    free(b->inputs);
    free(b->targets);
}
