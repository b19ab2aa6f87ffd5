// gpu/fp8_auto.cuh: --fp8-layers auto (the default with --fp8 1). FP8 pays only where the
// matmul it speeds up outweighs the casts it adds, which depends on the layer's shape and the
// micro-batch (docs/fp8.md): so at start-up each kind of linear layer (qkv, attproj, fc,
// fcproj, the lm_head) runs its forward and backward through the trainer's own functions at
// the run's shapes, in FP8 with its casts and in bf16, on layer 0's buffers filled with
// random values; the kinds FP8 makes faster run in FP8. With several ranks the times are
// summed over the ranks first, so that every rank makes the same choice. The choice joins
// the checkpoint (the FP8 state's site shapes), so a resume keeps it (gpu/checkpoint.cuh).
#pragma once
#include "model.cuh"
#include "data_parallel.cuh"

// FP8 must beat bf16 by this much: a kind within the timing's noise stays in bf16
#define FP8_AUTO_MARGIN 0.98f
#define FP8_AUTO_REPEATS 5

// Layer 0's linear layer of this kind (LINEAR_*), forward then backward, in FP8 at site (-1:
// bf16), through the model's own functions and buffers. qkv is timed as beside flash
// attention, whose backward sums its bias gradient: with plain attention the layer's own bias
// pass is left out of the timing.
static void fp8_auto_layer(GPT2 *m, int kind, int site) {
    const BlockActs b = gpt2_block_acts(m, 0);
    gpt2_linear_forward_at(m, kind, 0, &b, m->B * m->T, site);
    gpt2_linear_backward_at(m, kind, 0, &b, site, 1);
}

// ms of one run of the layer's forward and backward
static float fp8_auto_once(GPT2 *m, int kind, int site, cudaEvent_t e0, cudaEvent_t e1) {
    CUDA_CHECK(cudaEventRecord(e0, m->stream));
    fp8_auto_layer(m, kind, site);
    CUDA_CHECK(cudaEventRecord(e1, m->stream));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

// The layer's forward and backward in bf16 (ms[0]) and in FP8 at site (ms[1]): the fastest of
// FP8_AUTO_REPEATS runs each, after one of each to warm up (matmul plans, first launches),
// the two alternating so that both see the same clock (the board slows as it heats)
static void fp8_auto_time(GPT2 *m, int kind, int site, cudaEvent_t e0, cudaEvent_t e1, float ms[2]) {
    fp8_auto_layer(m, kind, -1);
    fp8_auto_layer(m, kind, site);
    ms[0] = ms[1] = INFINITY;
    for (int r = 0; r < FP8_AUTO_REPEATS; r++)
        for (int i = 0; i < 2; i++) ms[i] = fminf(ms[i], fp8_auto_once(m, kind, i ? site : -1, e0, e1));
}

// Times every kind both ways (f: built with every kind in FP8, its weights cast; dp: the
// ranks); returns the FP8_* bits of the kinds to run in FP8 and prints the table (verbose).
// Leaves the activations and gradients with timing data: the caller zeroes the gradients.
static int fp8_auto_choose(GPT2 *m, Fp8Layers *f, DataParallel *dp, int verbose) {
    const size_t N = (size_t)m->B * m->T, C = m->config.channels, Vp = m->config.padded_vocab_size;
    const BlockActs b = gpt2_block_acts(m, 0);
    Activations *a = &m->acts;
    cudaStream_t s = m->stream;
    // inputs of order 1 (layernorm outputs, GELU, attention), gradients of order 1e-3
    fill_uniform(b.ln1, N * C, 1.0f, 1, s);
    fill_uniform(b.ln2, N * C, 1.0f, 2, s);
    fill_uniform(b.atty, N * C, 1.0f, 3, s);
    fill_uniform(b.fch, N * 4 * C, 1.0f, 4, s);
    fill_uniform(b.fch_gelu, N * 4 * C, 1.0f, 5, s);
    fill_uniform(a->lnf, N * C, 1.0f, 6, s);
    fill_uniform(a->dqkv, N * 3 * C, 1e-3f, 7, s);
    fill_uniform(a->dresidual, N * C, 1e-3f, 8, s);
    fill_uniform(a->dfch, N * 4 * C, 1e-3f, 9, s);
    // delayed scaling times the casts it will run: without the amax passes
    const int rolled = f->f8.rolled;
    f->f8.rolled = 1;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float h[2 * LINEAR_KINDS], *d;
    for (int k = 0; k < LINEAR_KINDS; k++) {
        // (the lm_head's forward writes the logits its backward reads: after the first run they
        // are the forward's output, of the logits' order 1 rather than their gradient's; that
        // changes the time of neither path)
        if (k == LINEAR_HEAD) fill_uniform(a->logits, N * Vp, 1e-5f, 10, s);
        fp8_auto_time(m, k, fp8_site(f, k, 0), e0, e1, h + 2 * k);
    }
    f->f8.rolled = rolled;
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaMalloc(&d, sizeof h));  // every rank decides from the same sums
    CUDA_CHECK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    dp_allreduce_f32(dp, d, 2 * LINEAR_KINDS, COMM_SUM);
    CUDA_CHECK(cudaStreamSynchronize(s));  // (the all-reduce is ordered before the stream's next work)
    CUDA_CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    cudaFree(d);
    int mask = 0;
    for (int k = 0; k < LINEAR_KINDS; k++)
        if (h[2 * k + 1] < FP8_AUTO_MARGIN * h[2 * k]) mask |= 1 << k;
    if (verbose) {
        printf("fp8 auto: one layer's forward + backward at B=%d T=%d, %s scaling (ms, summed over %d rank(s)):\n",
               m->B, m->T, f->f8.delayed ? "delayed" : "current", dp->world);
        for (int k = 0; k < LINEAR_KINDS; k++)
            printf("  %-8s bf16 %8.3f  FP8 with its casts %8.3f  (%.2fx)  %s\n", LINEAR_KIND_NAMES[k], h[2 * k],
                   h[2 * k + 1], h[2 * k] / h[2 * k + 1], mask & (1 << k) ? "FP8" : "bf16");
    }
    return mask;
}
