// kernels/decode_step.cuh: the bookkeeping kernels of generation's step (gpu/generate.cuh),
// which keep each row's text on the device so that a step needs nothing from the host: the
// embedding of each row's token at its position, and after the logits the draw and the move
// to the next position.
// A row's text is hist[0..n) (its context window); pos is the position this step computes,
// whose key and value join the cache. While pos < n - 1 the row is still reading its prompt
// (one position a step) and draws nothing; at pos == n - 1 it draws the next token from the
// logits, which joins the text. A text that fills the context (n == maxT) slides as
// common/generate.h says: the newest half of it stays, the new token included, and the row
// reads it again from position 0. A row with nothing left to draw computes its last position
// again, which changes nothing.
#pragma once
#include "../common/rng.h"
#include "common.cuh"
#include "pdl.cuh"
#include "sample.cuh"

typedef struct {
    int *hist;          // (B, maxT): each row's text
    int *n, *pos;       // (B): its length, the position the step computes
    int *left;          // (B): tokens still to draw
    uint64_t *rng;      // (B): its random stream (common/rng.h)
    int *emit;          // (gen, B), in mapped host memory: row b's i-th token at emit[i * B + b]
} DecodeRows;

// x (B, C) = wte[token] + wpe[pos] of each row, as encoder_forward rounds it. grid (B)
__global__ void decode_embed_kernel(floatX *x, DecodeRows r, const floatX *wte, const floatX *wpe, int maxT, int C) {
    pdl_trigger();
    pdl_wait();
    const int b = blockIdx.x, p = r.pos[b], token = r.hist[(size_t)b * maxT + p];
    for (int c = threadIdx.x * X128::size; c < C; c += blockDim.x * X128::size) {
        X128 a = load128(wte + (size_t)token * C + c), q = load128(wpe + (size_t)p * C + c), o;
        for (int k = 0; k < X128::size; k++) o[k] = from_float<floatX>(to_float(a[k]) + to_float(q[k]));
        store128(x + (size_t)b * C + c, o);
    }
}

static void decode_embed(floatX *x, const DecodeRows *r, const floatX *wte, const floatX *wpe, int B, int maxT, int C,
                         int pdl, cudaStream_t s) {
    launch_pdl(decode_embed_kernel, dim3(B), dim3(128), 0, s, pdl, x, *r, wte, wpe, maxT, C);
}

// Each row's draw from its logits row (ld apart), then its next position. grid (B), SAMPLE_THREADS.
__global__ void __launch_bounds__(SAMPLE_THREADS)
decode_sample_kernel(DecodeRows r, const floatX *logits, int ld, int V, int maxT, int gen, float temperature,
                     int top_k, float top_p, float *scratch) {
    pdl_trigger();
    pdl_wait();
    const int b = blockIdx.x, B = gridDim.x, pos = r.pos[b], n = r.n[b], left = r.left[b];
    if (pos < n - 1) {  // the prompt: on to its next position
        if (threadIdx.x == 0) r.pos[b] = pos + 1;
        return;
    }
    if (left == 0) return;
    const int id = sample_row_draw(&r.rng[b], logits + (size_t)b * ld, V, temperature, top_k, top_p,
                                   scratch + (size_t)b * V);
    if (threadIdx.x != 0) return;
    r.emit[(size_t)(gen - left) * B + b] = id;
    r.left[b] = left - 1;
    int *hist = r.hist + (size_t)b * maxT;
    if (n == maxT) {  // the context is full: its newest half - 1 tokens and the new one, read again from 0
        const int keep = (maxT + 1) / 2 - 1;
        for (int i = 0; i < keep; i++) hist[i] = hist[n - keep + i];
        hist[keep] = id;
        r.n[b] = keep + 1;
        r.pos[b] = 0;
    } else {
        hist[n] = id;
        r.n[b] = n + 1;
        r.pos[b] = n;
    }
}

static void decode_sample(const DecodeRows *r, const floatX *logits, int ld, int V, int B, int maxT, int gen,
                          float temperature, int top_k, float top_p, float *scratch, int pdl, cudaStream_t s) {
    const size_t smem = sample_row_smem(decode_sample_kernel, V);  // (0: the row in scratch)
    launch_pdl(decode_sample_kernel, dim3(B), dim3(SAMPLE_THREADS), smem, s, pdl, *r, logits, ld, V, maxT, gen,
               temperature, top_k, top_p, scratch);
}
