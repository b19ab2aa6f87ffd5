// kernels/step_graph.cuh: --cuda-graph 1. A training micro-step (forward, loss, backward) is
// hundreds of kernel launches, the update (norm, clip, AdamW) a few dozen; at a small batch
// or a short sequence the host's launch time is a large part of the step. A StepGraph
// captures the launches once into a CUDA graph and then replays the graph with one launch.
// It is captured again when a value baked into the launches changes (its key: for the
// micro-step the shape and the loss scale, for the update the run's constant
// hyperparameters); everything else read per step (the batch, the bucket count of the
// embedding backward, the learning rate, bias corrections, loss scale and rounding seed of
// the update) lives in device memory that the host fills before the replay, at fixed
// addresses.
#pragma once
#include "common.cuh"

typedef struct {
    cudaGraphExec_t exec;
    unsigned char key[32];  // the values the launches were captured with
    int ready, captures, replays;
} StepGraph;

// Runs fn(ctx) on stream s: by replaying the graph captured for this key, or (the first time,
// and when the key changed) by capturing fn's launches first. fn must only launch work on s:
// no host synchronisation, allocation or host-side reads of device results.
static void step_graph_run(StepGraph *g, cudaStream_t s, const void *key, size_t key_bytes, void (*fn)(void *),
                           void *ctx) {
    if (key_bytes > sizeof g->key) fatal("internal: step graph key of %zu bytes", key_bytes);
    if (!g->ready || memcmp(g->key, key, key_bytes) != 0) {
        if (g->ready) CUDA_CHECK(cudaGraphExecDestroy(g->exec));
        g->ready = 0;
        cudaGraph_t graph;
        // thread-local: the loader thread never calls CUDA, and nothing else may break the capture
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        fn(ctx);
        cudaError_t e = cudaStreamEndCapture(s, &graph);
        if (e != cudaSuccess)
            fatal("--cuda-graph 1: the training step could not be captured into a CUDA graph (%s); use --cuda-graph 0",
                  cudaGetErrorString(e));
        CUDA_CHECK(cudaGraphInstantiate(&g->exec, graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
        memset(g->key, 0, sizeof g->key);
        memcpy(g->key, key, key_bytes);
        g->ready = 1;
        g->captures++;
    }
    CUDA_CHECK(cudaGraphLaunch(g->exec, s));
    g->replays++;
}

static void step_graph_free(StepGraph *g) {
    if (g->ready) cudaGraphExecDestroy(g->exec);
    g->ready = 0;
}
