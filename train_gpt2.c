// train_gpt2.c: the CPU fp32 reference trainer of GPT-2. Every layer's forward and
// backward is written out below in plain C, parallelised with OpenMP; the matrix
// multiplies go through common/sgemm.h (our blocked AVX kernel, or OpenBLAS when built
// with USE_CBLAS). The training loop at the bottom reads like the algorithm:
// forward, loss, backward, clip, update, log. test_gpt2.c includes this file with
// TESTING defined and checks it against the PyTorch reference (dev/gpt2_ref.py).
#include "common/util.h"
#include "common/args.h"
#include "common/checkpoint.h"
#include "common/dataloader.h"
#include "common/logger.h"
#include "common/rng.h"
#include "common/run_summary.h"
#include "common/schedule.h"
#include "common/sgemm.h"
#include "common/tokenizer.h"
#include "common/train_common.h"
#include "common/generate.h"
#include <float.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// glibc's libmvec has vector versions of tanhf and expf, but math.h declares them only
// under -ffast-math. Declaring them here lets gcc vectorise the GELU and softmax loops
// (8 lanes with AVX2) without fast-math's other changes to floating point.
#if defined(__GLIBC__) && defined(__x86_64__) && defined(_OPENMP) && !defined(__FAST_MATH__)
#pragma omp declare simd notinbranch
float tanhf(float x);
#pragma omp declare simd notinbranch
float expf(float x);
#endif

static int num_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// ----------------------------------------------------------------------------
// Layers. Shapes: B batch, T time, C channels, NH heads, V vocab, Vp padded vocab.
// Backward functions accumulate (+=) into parameter gradients and input gradients.

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
static void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *te = wte + (size_t)inp[b * T + t] * C, *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
        }
    }
}

// Serial on purpose: a token id can repeat within the batch, and a fixed summation order
// keeps the result deterministic. It is a tiny share of the step.
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dte = dwte + (size_t)inp[b * T + t] * C, *dpe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                dte[c] += d[c];
                dpe[c] += d[c];
            }
        }
    }
}

// Normalise each row over C, then scale and shift. Keeps mean and 1/std for backward.
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float var = 0.0f;
        for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
        var /= C;
        float s = 1.0f / sqrtf(var + eps);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C) {
    // input gradient: rows are independent
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
        float m = mean[i], s = rstd[i];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float dnorm = w[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * (x[c] - m) * s;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        float *dx = dinp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            dx[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    // weight and bias gradients: each thread owns a range of channels and sums over rows
    // in order, so the result does not depend on scheduling
    #pragma omp parallel
    {
        int nt = num_threads(), id = thread_id();
        int c0 = (int)((long)C * id / nt), c1 = (int)((long)C * (id + 1) / nt);
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
            float m = mean[i], s = rstd[i];
            for (int c = c0; c < c1; c++) {
                dw[c] += (x[c] - m) * s * d[c];
                db[c] += d[c];
            }
        }
    }
}

// Causal self-attention. qkv is (B,T,3C) holding q|k|v; att keeps the softmax
// probabilities (B,NH,T,T) for backward; out is (B,T,C).
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -FLT_MAX;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
        }
    }
}

// Parallel over (batch, head) pairs only: the gradients of k and v of one head collect
// contributions from every later query, so one thread must own the whole head.
// scratch: T floats per thread (the gradient of one row of att).
static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                               int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel
    {
        float *datt = scratch + (size_t)thread_id() * T;
        #pragma omp for collapse(2)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) {
                    const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                    const float *d = dout + ((size_t)b * T + t) * C + h * hs;
                    const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                    float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                    // through out = att @ v
                    float dot = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                        float *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                        float s = 0.0f;
                        for (int i = 0; i < hs; i++) {
                            s += d[i] * v[i];
                            dv[i] += a[t2] * d[i];
                        }
                        datt[t2] = s;
                        dot += a[t2] * s;
                    }
                    // through the softmax, then the scaled q.k scores
                    for (int t2 = 0; t2 <= t; t2++) {
                        float dpre = a[t2] * (datt[t2] - dot) * scale;
                        const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                        float *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                        for (int i = 0; i < hs; i++) {
                            dq[i] += dpre * k[i];
                            dk[i] += dpre * q[i];
                        }
                    }
                }
            }
        }
    }
}

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

static void gelu_forward(float *out, const float *inp, size_t n) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    #pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}

static void residual_forward(float *out, const float *a, const float *b, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// Softmax over the V real columns of each row of logits (the Vp-V padded columns get
// probability 0), then the cross-entropy of each position's target.
static void softmax_crossentropy_forward(float *probs, float *losses, const float *logits, const int *targets,
                                         int N, int V, int Vp) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vp;
        float *p = probs + (size_t)i * Vp;
        float maxv = -FLT_MAX;
        #pragma omp simd reduction(max : maxv)
        for (int v = 0; v < V; v++) maxv = fmaxf(maxv, l[v]);
        double sum = 0.0;
        #pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) {
            p[v] = expf(l[v] - maxv);
            sum += p[v];
        }
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < V; v++) p[v] *= inv;
        for (int v = V; v < Vp; v++) p[v] = 0.0f;
        if (targets) losses[i] = -logf(p[targets[i]]);
    }
}

// d loss / d logits = (probs - onehot(target)) * dloss, written (not accumulated) over
// the logits buffer; padded columns get zero.
static void softmax_crossentropy_backward(float *dlogits, const float *probs, const int *targets, float dloss,
                                          int N, int V, int Vp) {
    #pragma omp parallel for
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * Vp;
        float *d = dlogits + (size_t)i * Vp;
        for (int v = 0; v < V; v++) d[v] = p[v] * dloss;
        for (int v = V; v < Vp; v++) d[v] = 0.0f;
        d[targets[i]] -= dloss;
    }
}

// ----------------------------------------------------------------------------
// The model

typedef struct {
    // per layer (L copies): sizes in gpt2_alloc_activations
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *residual3;
    // once
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs, *losses;
    // backward scratch, reused by every layer
    float *dresidual, *dln, *dqkv, *datty, *dfch, *dfch_gelu, *dlnf;
    float *datt_rows;  // attention backward: one row of T per thread
} Activations;

typedef struct {
    GPT2Config config;
    size_t param_sizes[NUM_PARAM_TENSORS], num_params;
    float *params, *param[NUM_PARAM_TENSORS];  // one buffer, checkpoint order
    float *grads, *grad[NUM_PARAM_TENSORS];
    float *m, *v;                              // AdamW moments
    int B, T;                                  // activation capacity
    Activations acts;
    float *act_memory;
    float mean_loss;                           // of the last forward with targets
} GPT2;

static void point_into(float *base, const size_t *sizes, float **ptrs) {
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        ptrs[i] = base;
        base += sizes[i];
    }
}

// Takes ownership of params (fp32, checkpoint order) and allocates gradients and moments;
// activations are allocated on the first forward (or by gpt2_alloc_activations).
static void gpt2_build(GPT2 *model, const GPT2Config *cfg, float *params) {
    model->config = *cfg;
    model->params = params;
    gpt2_param_sizes(&model->config, model->param_sizes);
    model->num_params = gpt2_num_params(&model->config);
    point_into(model->params, model->param_sizes, model->param);
    model->grads = (float *)xcalloc(model->num_params, sizeof(float));
    point_into(model->grads, model->param_sizes, model->grad);
    model->m = (float *)xcalloc(model->num_params, sizeof(float));
    model->v = (float *)xcalloc(model->num_params, sizeof(float));
    model->act_memory = NULL;
    model->B = model->T = 0;
    model->mean_loss = -1.0f;
}

static size_t activation_floats(const GPT2Config *c, int B, int T) {
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, BT = (size_t)B * T, Vp = c->padded_vocab_size;
    size_t per_layer = BT * C * 7 + BT * 4 + BT * 3 * C + (size_t)B * NH * T * T + BT * 4 * C * 2;
    size_t once = BT * C * 2 + BT * 2 + BT * Vp * 2 + BT;
    size_t scratch = BT * C * 4 + BT * 3 * C + BT * 4 * C * 2 + (size_t)num_threads() * T;
    return L * per_layer + once + scratch;
}

static void gpt2_alloc_activations(GPT2 *model, int B, int T) {
    const GPT2Config *c = &model->config;
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, BT = (size_t)B * T, Vp = c->padded_vocab_size;
    model->act_memory = (float *)xcalloc(activation_floats(c, B, T), sizeof(float));
    float *p = model->act_memory;
    Activations *a = &model->acts;
#define TAKE(field, count) do { a->field = p; p += (count); } while (0)
    TAKE(ln1, L * BT * C); TAKE(ln1_mean, L * BT); TAKE(ln1_rstd, L * BT);
    TAKE(qkv, L * BT * 3 * C); TAKE(atty, L * BT * C); TAKE(att, L * B * NH * T * T);
    TAKE(attproj, L * BT * C); TAKE(residual2, L * BT * C);
    TAKE(ln2, L * BT * C); TAKE(ln2_mean, L * BT); TAKE(ln2_rstd, L * BT);
    TAKE(fch, L * BT * 4 * C); TAKE(fch_gelu, L * BT * 4 * C);
    TAKE(fcproj, L * BT * C); TAKE(residual3, L * BT * C);
    TAKE(encoded, BT * C); TAKE(lnf, BT * C); TAKE(lnf_mean, BT); TAKE(lnf_rstd, BT);
    TAKE(logits, BT * Vp); TAKE(probs, BT * Vp); TAKE(losses, BT);
    TAKE(dresidual, BT * C); TAKE(dln, BT * C); TAKE(dqkv, BT * 3 * C); TAKE(datty, BT * C);
    TAKE(dfch, BT * 4 * C); TAKE(dfch_gelu, BT * 4 * C); TAKE(dlnf, BT * C);
    TAKE(datt_rows, (size_t)num_threads() * T);
#undef TAKE
    if ((size_t)(p - model->act_memory) != activation_floats(c, B, T)) fatal("internal: activation layout mismatch");
    model->B = B;
    model->T = T;
}

// Forward pass over inputs (B,T); with targets, also the per-position losses and their
// mean. B*T may be smaller than the allocated capacity (used by sampling).
static void gpt2_forward(GPT2 *model, const int *inputs, const int *targets, int B, int T) {
    const GPT2Config *c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, V = c->vocab_size, Vp = c->padded_vocab_size;
    if (!model->act_memory) gpt2_alloc_activations(model, B, T);
    if ((size_t)B * T > (size_t)model->B * model->T || T > model->T)
        fatal("internal: forward with B=%d T=%d beyond the allocated B=%d T=%d", B, T, model->B, model->T);
    for (int i = 0; i < B * T; i++)
        if (inputs[i] < 0 || inputs[i] >= V)
            fatal("token id %d at position %d is outside the vocabulary (%d)", inputs[i], i, V);
    // per-layer activations are laid out at the allocated capacity
    size_t BTcap = (size_t)model->B * model->T, N = (size_t)B * T;
    size_t attcap = (size_t)model->B * NH * model->T * model->T;
    Activations *a = &model->acts;
    float **p = model->param;

    encoder_forward(a->encoded, inputs, p[P_WTE], p[P_WPE], B, T, C);
    for (int l = 0; l < L; l++) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BTcap * C;
        float *ln1 = a->ln1 + l * BTcap * C, *qkv = a->qkv + l * BTcap * 3 * C, *atty = a->atty + l * BTcap * C;
        float *att = a->att + l * attcap, *attproj = a->attproj + l * BTcap * C;
        float *residual2 = a->residual2 + l * BTcap * C, *ln2 = a->ln2 + l * BTcap * C;
        float *fch = a->fch + l * BTcap * 4 * C, *fch_gelu = a->fch_gelu + l * BTcap * 4 * C;
        float *fcproj = a->fcproj + l * BTcap * C, *residual3 = a->residual3 + l * BTcap * C;

        layernorm_forward(ln1, a->ln1_mean + l * BTcap, a->ln1_rstd + l * BTcap, residual,
                          p[P_LN1W] + l * C, p[P_LN1B] + l * C, (int)N, C);
        matmul_forward(qkv, ln1, p[P_QKVW] + (size_t)l * 3 * C * C, p[P_QKVB] + l * 3 * C, (int)N, C, 3 * C);
        attention_forward(atty, att, qkv, B, T, C, NH);
        matmul_forward(attproj, atty, p[P_ATTPROJW] + (size_t)l * C * C, p[P_ATTPROJB] + l * C, (int)N, C, C);
        residual_forward(residual2, residual, attproj, N * C);
        layernorm_forward(ln2, a->ln2_mean + l * BTcap, a->ln2_rstd + l * BTcap, residual2,
                          p[P_LN2W] + l * C, p[P_LN2B] + l * C, (int)N, C);
        matmul_forward(fch, ln2, p[P_FCW] + (size_t)l * 4 * C * C, p[P_FCB] + l * 4 * C, (int)N, C, 4 * C);
        gelu_forward(fch_gelu, fch, N * 4 * C);
        matmul_forward(fcproj, fch_gelu, p[P_FCPROJW] + (size_t)l * C * 4 * C, p[P_FCPROJB] + l * C, (int)N, 4 * C, C);
        residual_forward(residual3, residual2, fcproj, N * C);
    }
    const float *last = a->residual3 + (L - 1) * BTcap * C;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, p[P_LNFW], p[P_LNFB], (int)N, C);
    matmul_forward(a->logits, a->lnf, p[P_WTE], NULL, (int)N, C, Vp);  // lm_head tied to wte
    if (targets) {
        for (size_t i = 0; i < N; i++)
            if (targets[i] < 0 || targets[i] >= V)
                fatal("target id %d at position %zu is outside the vocabulary (%d)", targets[i], i, V);
    }
    softmax_crossentropy_forward(a->probs, a->losses, a->logits, targets, (int)N, V, Vp);
    if (targets) {
        double sum = 0.0;
        for (size_t i = 0; i < N; i++) sum += a->losses[i];
        model->mean_loss = (float)(sum / (double)N);
    } else {
        model->mean_loss = -1.0f;
    }
}

static void gpt2_zero_grad(GPT2 *model) {
    memset(model->grads, 0, model->num_params * sizeof(float));
}

// Backward of the last forward (which must have had targets). loss_scale divides the
// mean loss, e.g. 1/grad_accum_steps when gradients are accumulated over micro-steps.
// Gradients accumulate into model->grads.
static void gpt2_backward(GPT2 *model, const int *inputs, const int *targets, float loss_scale) {
    const GPT2Config *c = &model->config;
    int B = model->B, T = model->T, L = c->num_layers, C = c->channels, NH = c->num_heads;
    int V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t N = (size_t)B * T, attsz = (size_t)B * NH * T * T;
    Activations *a = &model->acts;
    float **p = model->param, **g = model->grad;

    // the classifier: dlogits overwrite the logits buffer
    float *dlogits = a->logits;
    softmax_crossentropy_backward(dlogits, a->probs, targets, loss_scale / (float)N, (int)N, V, Vp);
    memset(a->dlnf, 0, N * C * sizeof(float));
    matmul_backward(a->dlnf, g[P_WTE], NULL, dlogits, a->lnf, p[P_WTE], (int)N, C, Vp);
    memset(a->dresidual, 0, N * C * sizeof(float));
    layernorm_backward(a->dresidual, g[P_LNFW], g[P_LNFB], a->dlnf, a->residual3 + (L - 1) * N * C,
                       p[P_LNFW], a->lnf_mean, a->lnf_rstd, (int)N, C);

    // dresidual carries the gradient of the residual stream down through the layers
    for (int l = L - 1; l >= 0; l--) {
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * N * C;
        const float *ln1 = a->ln1 + l * N * C, *qkv = a->qkv + l * N * 3 * C, *atty = a->atty + l * N * C;
        const float *att = a->att + l * attsz, *residual2 = a->residual2 + l * N * C, *ln2 = a->ln2 + l * N * C;
        const float *fch = a->fch + l * N * 4 * C, *fch_gelu = a->fch_gelu + l * N * 4 * C;

        // MLP: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        memset(a->dfch_gelu, 0, N * 4 * C * sizeof(float));
        matmul_backward(a->dfch_gelu, g[P_FCPROJW] + (size_t)l * C * 4 * C, g[P_FCPROJB] + l * C,
                        a->dresidual, fch_gelu, p[P_FCPROJW] + (size_t)l * C * 4 * C, (int)N, 4 * C, C);
        memset(a->dfch, 0, N * 4 * C * sizeof(float));
        gelu_backward(a->dfch, fch, a->dfch_gelu, N * 4 * C);
        memset(a->dln, 0, N * C * sizeof(float));
        matmul_backward(a->dln, g[P_FCW] + (size_t)l * 4 * C * C, g[P_FCB] + l * 4 * C,
                        a->dfch, ln2, p[P_FCW] + (size_t)l * 4 * C * C, (int)N, C, 4 * C);
        layernorm_backward(a->dresidual, g[P_LN2W] + l * C, g[P_LN2B] + l * C, a->dln, residual2,
                           p[P_LN2W] + l * C, a->ln2_mean + l * N, a->ln2_rstd + l * N, (int)N, C);

        // attention: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        memset(a->datty, 0, N * C * sizeof(float));
        matmul_backward(a->datty, g[P_ATTPROJW] + (size_t)l * C * C, g[P_ATTPROJB] + l * C,
                        a->dresidual, atty, p[P_ATTPROJW] + (size_t)l * C * C, (int)N, C, C);
        memset(a->dqkv, 0, N * 3 * C * sizeof(float));
        attention_backward(a->dqkv, a->datty, qkv, att, a->datt_rows, B, T, C, NH);
        memset(a->dln, 0, N * C * sizeof(float));
        matmul_backward(a->dln, g[P_QKVW] + (size_t)l * 3 * C * C, g[P_QKVB] + l * 3 * C,
                        a->dqkv, ln1, p[P_QKVW] + (size_t)l * 3 * C * C, (int)N, C, 3 * C);
        layernorm_backward(a->dresidual, g[P_LN1W] + l * C, g[P_LN1B] + l * C, a->dln, residual,
                           p[P_LN1W] + l * C, a->ln1_mean + l * N, a->ln1_rstd + l * N, (int)N, C);
    }
    encoder_backward(g[P_WTE], g[P_WPE], a->dresidual, inputs, B, T, C);
}

// Sum of squares with a fixed split over threads and a fixed combining order, so the
// result is bit-identical from run to run (needed for bit-exact resume).
#define MAX_THREADS 1024

static double sum_of_squares(const float *x, size_t n) {
    int nt = num_threads();
    if (nt > MAX_THREADS) fatal("OMP_NUM_THREADS=%d is above the %d this program supports", nt, MAX_THREADS);
    double partial[MAX_THREADS];
    #pragma omp parallel
    {
        int id = thread_id(), cnt = num_threads();
        size_t i0 = n * id / cnt, i1 = n * (id + 1) / cnt;
        double s = 0.0;
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        partial[id] = s;
    }
    double total = 0.0;
    for (int i = 0; i < nt; i++) total += partial[i];
    return total;
}

// Clips by global norm (if grad_clip > 0) and applies one AdamW step (t counts from 1).
// Returns the gradient norm before clipping; common/update_rule.h decides whether the update
// is skipped (a non-finite loss or norm, or one above h's limits).
static float gpt2_update(GPT2 *model, const AdamWConfig *h, int t, float loss) {
    float norm = (float)sqrt(sum_of_squares(model->grads, model->num_params));
    if (update_rule(loss, norm, h->max_loss, h->max_norm) != UPDATE_APPLIED) return norm;
    float clip = (h->grad_clip > 0.0f && norm > h->grad_clip) ? h->grad_clip / norm : 1.0f;
    float bc1 = 1.0f - powf(h->beta1, (float)t), bc2 = 1.0f - powf(h->beta2, (float)t);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        float wd = gpt2_param_is_decayed(k) ? h->weight_decay : 0.0f;
        float *p = model->param[k], *g = model->grad[k];
        float *m = model->m + (p - model->params), *v = model->v + (p - model->params);
        size_t n = model->param_sizes[k];
        #pragma omp parallel for
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] * clip;
            m[i] = h->beta1 * m[i] + (1.0f - h->beta1) * gi;
            v[i] = h->beta2 * v[i] + (1.0f - h->beta2) * gi * gi;
            float mhat = m[i] / bc1, vhat = v[i] / bc2;
            p[i] -= h->lr * (mhat / (sqrtf(vhat) + h->eps) + wd * p[i]);
        }
    }
    return norm;
}

static void gpt2_free(GPT2 *model) {
    free(model->params); free(model->grads); free(model->m); free(model->v); free(model->act_memory);
}

#ifndef TESTING
// ----------------------------------------------------------------------------
// Sampling

// The logits after ids[0..n), for sample_text.
static void next_logits(void *m, const int *ids, int n, float *logits) {
    GPT2 *model = (GPT2 *)m;
    gpt2_forward(model, ids, NULL, 1, n);
    memcpy(logits, model->acts.logits + (size_t)(n - 1) * model->config.padded_vocab_size,
           (size_t)model->config.vocab_size * sizeof(float));
}

// ----------------------------------------------------------------------------
// Sampling with a KV cache: each layer keeps the keys and values of the text so far, so a
// new token costs one position's forward pass instead of the whole text's (common/generate.h
// decides which positions a call must compute).

typedef struct {
    GPT2 *model;
    int maxT;
    float *k, *v;      // (L, maxT, C): each layer's key and value of each position
    int *ids, filled;  // the text whose keys and values k and v hold
    // one position's activations
    float *x, *ln, *qkv, *atty, *attproj, *residual2, *fch, *fch_gelu, *fcproj, *logits, *att, mean, rstd;
} KVCache;

static void kv_cache_init(KVCache *kv, GPT2 *model, int maxT) {
    const GPT2Config *c = &model->config;
    size_t L = c->num_layers, C = c->channels;
    kv->model = model;
    kv->maxT = maxT;
    kv->k = (float *)xmalloc(L * maxT * C * sizeof(float));
    kv->v = (float *)xmalloc(L * maxT * C * sizeof(float));
    kv->ids = (int *)xmalloc((size_t)maxT * sizeof(int));
    kv->filled = 0;
    kv->x = (float *)xmalloc(C * sizeof(float)); kv->ln = (float *)xmalloc(C * sizeof(float));
    kv->qkv = (float *)xmalloc(3 * C * sizeof(float)); kv->atty = (float *)xmalloc(C * sizeof(float));
    kv->attproj = (float *)xmalloc(C * sizeof(float)); kv->residual2 = (float *)xmalloc(C * sizeof(float));
    kv->fch = (float *)xmalloc(4 * C * sizeof(float)); kv->fch_gelu = (float *)xmalloc(4 * C * sizeof(float));
    kv->fcproj = (float *)xmalloc(C * sizeof(float));
    kv->logits = (float *)xmalloc((size_t)c->padded_vocab_size * sizeof(float));
    kv->att = (float *)xmalloc((size_t)c->num_heads * maxT * sizeof(float));
}

static void kv_cache_free(KVCache *kv) {
    free(kv->k); free(kv->v); free(kv->ids); free(kv->x); free(kv->ln); free(kv->qkv); free(kv->atty);
    free(kv->attproj); free(kv->residual2); free(kv->fch); free(kv->fch_gelu); free(kv->fcproj); free(kv->logits);
    free(kv->att);
}

// Position n-1's attention over the keys and values of positions 0..n-1 (k, v: rows of C):
// attention_forward's arithmetic for its last row, q the first C of that position's qkv.
static void attention_forward_position(float *out, float *att, const float *q, const float *k, const float *v,
                                       int n, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    #pragma omp parallel for
    for (int h = 0; h < NH; h++) {
        float *a = att + (size_t)h * n;
        float maxv = -FLT_MAX;
        for (int t2 = 0; t2 < n; t2++) {
            const float *kt = k + (size_t)t2 * C + h * hs;
            float s = 0.0f;
            for (int i = 0; i < hs; i++) s += q[h * hs + i] * kt[i];
            s *= scale;
            a[t2] = s;
            if (s > maxv) maxv = s;
        }
        float sum = 0.0f;
        for (int t2 = 0; t2 < n; t2++) {
            a[t2] = expf(a[t2] - maxv);
            sum += a[t2];
        }
        for (int t2 = 0; t2 < n; t2++) a[t2] /= sum;
        float *o = out + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int t2 = 0; t2 < n; t2++) {
            const float *vt = v + (size_t)t2 * C + h * hs;
            for (int i = 0; i < hs; i++) o[i] += a[t2] * vt[i];
        }
    }
}

// The forward of one position: its key and value join the cache, its logits land in kv->logits.
static void kv_forward_position(KVCache *kv, int token, int pos) {
    GPT2 *model = kv->model;
    const GPT2Config *c = &model->config;
    int L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    float **p = model->param;
    encoder_forward(kv->x, &token, p[P_WTE], p[P_WPE] + (size_t)pos * C, 1, 1, C);
    for (int l = 0; l < L; l++) {
        float *k = kv->k + (size_t)l * kv->maxT * C, *v = kv->v + (size_t)l * kv->maxT * C;
        layernorm_forward(kv->ln, &kv->mean, &kv->rstd, kv->x, p[P_LN1W] + l * C, p[P_LN1B] + l * C, 1, C);
        matmul_forward(kv->qkv, kv->ln, p[P_QKVW] + (size_t)l * 3 * C * C, p[P_QKVB] + l * 3 * C, 1, C, 3 * C);
        memcpy(k + (size_t)pos * C, kv->qkv + C, (size_t)C * sizeof(float));
        memcpy(v + (size_t)pos * C, kv->qkv + 2 * C, (size_t)C * sizeof(float));
        attention_forward_position(kv->atty, kv->att, kv->qkv, k, v, pos + 1, C, NH);
        matmul_forward(kv->attproj, kv->atty, p[P_ATTPROJW] + (size_t)l * C * C, p[P_ATTPROJB] + l * C, 1, C, C);
        residual_forward(kv->residual2, kv->x, kv->attproj, C);
        layernorm_forward(kv->ln, &kv->mean, &kv->rstd, kv->residual2, p[P_LN2W] + l * C, p[P_LN2B] + l * C, 1, C);
        matmul_forward(kv->fch, kv->ln, p[P_FCW] + (size_t)l * 4 * C * C, p[P_FCB] + l * 4 * C, 1, C, 4 * C);
        gelu_forward(kv->fch_gelu, kv->fch, 4 * (size_t)C);
        matmul_forward(kv->fcproj, kv->fch_gelu, p[P_FCPROJW] + (size_t)l * C * 4 * C, p[P_FCPROJB] + l * C, 1,
                       4 * C, C);
        residual_forward(kv->x, kv->residual2, kv->fcproj, C);
    }
    layernorm_forward(kv->ln, &kv->mean, &kv->rstd, kv->x, p[P_LNFW], p[P_LNFB], 1, C);
    matmul_forward(kv->logits, kv->ln, p[P_WTE], NULL, 1, C, Vp);
}

// next_logits with the cache: only the positions the cache lacks.
static void next_logits_cached(void *k, const int *ids, int n, float *logits) {
    KVCache *kv = (KVCache *)k;
    for (int pos = kv_cache_reuse(kv->ids, &kv->filled, ids, n); pos < n; pos++) {
        int id = ids[pos];
        if (id < 0 || id >= kv->model->config.vocab_size)
            fatal("token id %d at position %d is outside the vocabulary (%d)", id, pos, kv->model->config.vocab_size);
        kv_forward_position(kv, id, pos);
    }
    memcpy(logits, kv->logits, (size_t)kv->model->config.vocab_size * sizeof(float));
}

// A sample of the text generated from the start token and --prompt, within the context of
// maxT tokens: through the KV cache unless --kv-cache 0.
static void gpt2_sample(GPT2 *model, const Tokenizer *tok, const TrainOptions *o, uint64_t *rng, Logger *lg) {
    if (!o->kv_cache) {
        sample_text(tok, o, model->T, model->config.vocab_size, rng, lg, next_logits, model);
        return;
    }
    KVCache kv;
    kv_cache_init(&kv, model, model->T);
    sample_text(tok, o, model->T, model->config.vocab_size, rng, lg, next_logits_cached, &kv);
    kv_cache_free(&kv);
}

// --generate: no training; the model of -e continues --prompt for -g tokens within its
// whole context (its max_seq_len, not -t).
static int generate_main(const TrainOptions *o) {
    GPT2Config cfg;
    Tokenizer tok;
    GPT2 model;
    gpt2_build(&model, &cfg, generate_open(o, &cfg, &tok));
    int maxT = cfg.max_seq_len;
    if (o->kv_cache) {
        KVCache kv;
        kv_cache_init(&kv, &model, maxT);
        generate_text(&tok, o, maxT, cfg.vocab_size, next_logits_cached, &kv);
        kv_cache_free(&kv);
    } else {
        gpt2_alloc_activations(&model, 1, maxT);
        generate_text(&tok, o, maxT, cfg.vocab_size, next_logits, &model);
    }
    tokenizer_free(&tok);
    gpt2_free(&model);
    return 0;
}

// ----------------------------------------------------------------------------
// Checkpoints (file names and the order that keeps them whole: common/run_dir.h; formats: common/checkpoint.h)

// run carries what the run adds to the state (log length, skipped updates, settings). Both
// files are written in full before either is renamed into place, the state last: a step
// whose state file exists has a whole checkpoint, and one stopped between the two renames
// leaves the state's temporary to say so.
static void save_checkpoint(GPT2 *model, const DataLoader *loader, RunDir *rd, int step, uint64_t rng,
                            const TrainState *run) {
    char mn[64], sn[64];
    run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, step, 0);
    run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, 0);
    TrainState s = train_state_for(run, step, rng, loader);
    AtomicFile mf = run_dir_begin(rd, mn);
    s.model_crc = gpt2_checkpoint_write_to(&mf, &model->config, model->params, 0);
    s.n = model->num_params;
    s.m = model->m;
    s.v = model->v;
    s.fp8_n = 0;  // the GPU trainer's --fp8 state; none here
    s.fp8 = NULL;
    AtomicFile sf = run_dir_begin(rd, sn);
    train_state_write_to(&sf, &s);
    run_dir_finish_checkpoint(rd, step, &mf, &sf);
}

static void load_checkpoint(GPT2 *model, DataLoader *loader, const RunDir *rd, int step, TrainState *run,
                            uint64_t *rng) {
    char mn[64], sn[64], mp[PATH_CAP], sp[PATH_CAP];
    run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, step, 0);
    run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, 0);
    run_dir_path(rd, mp, mn);
    run_dir_path(rd, sp, sn);
    GPT2Config cfg;
    float *params = gpt2_checkpoint_read(mp, &cfg);
    if (memcmp(&cfg, &model->config, sizeof cfg) != 0)
        fatal("%s holds a different model shape than -e gave; resume with the same model", mp);
    memcpy(model->params, params, model->num_params * sizeof(float));
    free(params);
    TrainState s;
    memset(&s, 0, sizeof s);
    s.world_size = 1;
    s.loader_pos_bytes = (int)sizeof(DataLoaderPos);
    s.n = model->num_params;
    s.m = model->m;
    s.v = model->v;
    train_state_read(sp, &s);
    free(s.fp8);  // a GPU run's FP8 scaling state: nothing here uses it
    train_state_resume(&s, loader, run, rng);
    if (s.has_ext) run_settings_report(s.settings, run->settings);
}

// ----------------------------------------------------------------------------
// Main

// Evaluation: each batch's mean loss, weighted, summed in double.
typedef struct {
    GPT2 *model;
    double sum;
} EvalAcc;

static void eval_batch(void *ctx, const int *inputs, const int *targets, float weight) {
    EvalAcc *e = (EvalAcc *)ctx;
    gpt2_forward(e->model, inputs, targets, e->model->B, e->model->T);
    e->sum += (double)weight * e->model->mean_loss;
}

static float eval_result(void *ctx) { return (float)((EvalAcc *)ctx)->sum; }

static float trainer_evaluate(void *t) {
    Trainer *r = (Trainer *)t;
    EvalAcc e = {(GPT2 *)r->model, 0.0};
    EvalFns f = {eval_batch, eval_result};
    return evaluate_split(&r->data->val, r->o->val_batches, r->val_inputs, r->val_targets, f, &e);
}

// HellaSwag: one forward over a batch of (example, completion) rows, its per-position losses.
static void position_losses(void *m, const int *inputs, const int *targets, float *losses) {
    GPT2 *model = (GPT2 *)m;
    gpt2_forward(model, inputs, targets, model->B, model->T);
    memcpy(losses, model->acts.losses, (size_t)model->B * model->T * sizeof(float));
}

static HellaSwagScore trainer_hellaswag(void *t) {
    Trainer *r = (Trainer *)t;
    GPT2 *model = (GPT2 *)r->model;
    return hellaswag_evaluate(&r->data->hellaswag, model->B, model->T, 0, 1, r->val_inputs, r->val_targets,
                              position_losses, model, NULL);
}

static void trainer_sample(void *t) {
    Trainer *r = (Trainer *)t;
    gpt2_sample((GPT2 *)r->model, &r->data->tok, r->o, r->rng, r->lg);
}

static void trainer_save(void *t, int step1) {
    Trainer *r = (Trainer *)t;
    save_checkpoint((GPT2 *)r->model, &r->data->train, r->rd, step1, *r->rng, r->run);
    printf("checkpoint written: %s/model_%08d.bin\n", r->o->out_dir, step1);
}

// The steps a run's means are over: those after its first step, whose time holds the first
// touch of every buffer and the start of OpenMP's threads, or that step in a run of one step.
typedef struct {
    int from;        // the first timed step, from 0
    int n;           // steps timed so far
    double seconds;  // their time
} TimedSteps;

static TimedSteps timed_steps_for(int start_step, int max_steps) {
    TimedSteps t = {max_steps - start_step > 1 ? start_step + 1 : start_step, 0, 0.0};
    return t;
}

static void timed_steps_add(TimedSteps *t, int step, double dt) {
    if (step < t->from) return;
    t->n++;
    t->seconds += dt;
}

// The record that ends metrics.jsonl: the means over the timed steps (GFLOP/s where the GPU
// trainer has MFU), the host's memory at peak, the data stall; no energy or device memory.
static void log_cpu_run_summary(Logger *lg, const TimedSteps *t, int max_steps, double tokens_per_step,
                                double flops_per_step, double stall_ms, int skipped_updates) {
    RunSummary s;
    run_summary_init(&s);
    run_summary_window(&s, max_steps, t->n, t->seconds, tokens_per_step);
    if (t->n > 0) s.gflops = flops_per_step * t->n / t->seconds / 1e9;
    s.host_peak_mib = run_host_peak_mib();
    s.data_stall_ms = stall_ms;
    s.skipped_updates = skipped_updates;
    log_run_summary(lg, &s);
}

// --memory-trace: the arrays the CPU trainer holds (its figures of the memory line)
static void memory_trace_list(MemoryTrace *m, const GPT2 *model, int B, int T) {
    const size_t P = model->num_params * sizeof(float);
    memory_trace_add(m, "parameters", MEM_PARAMS, -1, P);
    memory_trace_add(m, "gradients", MEM_GRADS, -1, P);
    memory_trace_add(m, "AdamW m", MEM_OPTIMIZER, -1, P);
    memory_trace_add(m, "AdamW v", MEM_OPTIMIZER, -1, P);
    memory_trace_add(m, "activations", MEM_ACTS_KEPT, -1, activation_floats(&model->config, B, T) * sizeof(float));
}

int main(int argc, char **argv) {
    TrainOptions o;
    train_options_defaults(&o, 64);
    ARG_TABLE(options, TRAIN_OPTIONS_COUNT);
    train_options_add(&options, &o);
    args_parse_table(argc, argv, &options,
                     "usage: train_gpt2 [options]\n\nTrains GPT-2 on the CPU in fp32 (threads: OMP_NUM_THREADS).");
    train_options_validate(&o);  // before any large allocation
    if (o.generate) return generate_main(&o);
    int B = o.B, T = o.T;

    RunDir rd;  // -o: locked now; nothing there is removed or written before every check has passed
    run_dir_open(&rd, o.out_dir, 0, 1);
    GPT2Config cfg;
    float *params = gpt2_params_from_model_arg(o.model_arg, T, (uint64_t)o.seed, &cfg);
    run_dir_claim(&rd, o.resume, o.overwrite, o.model_arg);
    GPT2 model;
    gpt2_build(&model, &cfg, params);

    TrainData data;
    train_options_resolve_total_batch(&o, 1);
    train_data_open(&data, &o, cfg.vocab_size, 0, 1);
    const int accum = data.accum, max_steps = data.max_steps;
    AdamWConfig opt = {o.lr, 0.9f, 0.95f, 1e-8f, o.weight_decay, o.grad_clip, 0.0f, 0.0f};

    gpt2_alloc_activations(&model, B, T);
    double mb = 1.0 / (1024.0 * 1024.0);
    print_model_banner(&cfg);
    printf("memory: parameters %.0f MiB, gradients %.0f MiB, AdamW moments %.0f MiB, activations %.0f MiB\n",
           model.num_params * 4 * mb, model.num_params * 4 * mb, model.num_params * 8 * mb,
           activation_floats(&cfg, B, T) * 4 * mb);
    printf("training: B=%d T=%d, %d micro-steps per step (%d tokens), %d steps, %d threads, lr %g (%s)\n",
           B, T, accum, o.total_batch, max_steps, num_threads(), o.lr, o.sched_name);

    uint64_t rng = rng_seed((uint64_t)o.seed ^ 0x5eedULL);
    TrainState run;  // what the checkpoints carry besides the weights and moments
    memset(&run, 0, sizeof run);
    run_settings_pack(&o, max_steps, 1, run.settings);
    int start_step = o.resume ? resume_pick_step(&rd, 0, 0, NULL, NULL) : -1;
    if (start_step >= 0) {
        load_checkpoint(&model, &data.train, &rd, start_step, &run, &rng);
        printf("resumed from %s at step %d\n", o.out_dir, start_step);
        if (start_step >= max_steps)
            printf("the run finished at step %d (-x %d): nothing left to train\n", start_step, max_steps);
    }
    const int resume_step = start_step;
    if (start_step < 0) start_step = 0;
    Trace trace;  // --trace: the timeline of a few steps
    trace_start(&trace, "train_gpt2", &o, start_step, max_steps, 1, 1);
    memory_trace_list(&trace.mem, &model, B, T);
    int *inputs = (int *)xmalloc((size_t)B * T * sizeof(int));
    int *targets = (int *)xmalloc((size_t)B * T * sizeof(int));
    int *val_inputs = (int *)xmalloc((size_t)B * T * sizeof(int));
    int *val_targets = (int *)xmalloc((size_t)B * T * sizeof(int));

    // every check has passed: the run may change -o now
    run_dir_start(&rd, o.resume, resume_step, 0);
    Logger lg;
    run_logger_open(&lg, &rd, resume_step, &run, 0);
    metrics_header(&lg, "train_gpt2", "fp32", &cfg, &o, max_steps, 1, resume_step);
    const int can_sample = sampling_possible(&cfg, &o, &data.tok, T, 0);
    train_data_start_reading(&data, &o);
    Trainer tr = {&model, &data, &o, &run, &rng, &lg, val_inputs, val_targets, &rd, NULL, NULL, &trace};
    const BetweenStepsFns between = {trainer_evaluate, trainer_hellaswag, trainer_sample, trainer_save};
    double flops_per_step = gpt2_flops_per_token(&cfg, T) * o.total_batch;
    if (o.overfit) dataloader_next(&data.train, inputs, targets);
    TimedSteps timed = timed_steps_for(start_step, max_steps);
    const double t_run = wall_seconds();
    for (int step = start_step; step < max_steps; step++) {
        trace_step_begin(&trace, step + 1);
        trace_begin(&trace, "step", TRACE_CAT_STEP);
        double t0 = wall_seconds();
        // forward and backward over the micro-steps, gradients accumulating
        gpt2_zero_grad(&model);
        double loss_sum = 0.0;
        for (int micro = 0; micro < accum; micro++) {
            trace_begin(&trace, "batch", TRACE_CAT_PHASE);
            if (!o.overfit) dataloader_next(&data.train, inputs, targets);
            trace_end(&trace);
            trace_begin(&trace, "forward", TRACE_CAT_PHASE);
            gpt2_forward(&model, inputs, targets, B, T);
            trace_end(&trace);
            loss_sum += model.mean_loss;
            trace_begin(&trace, "backward", TRACE_CAT_PHASE);
            gpt2_backward(&model, inputs, targets, 1.0f / (float)accum);
            trace_end(&trace);
        }
        float loss = (float)(loss_sum / accum);
        if (test_overflow_step(step + 1)) model.grads[0] = INFINITY;
        // clip and update (a non-finite or outlier loss or norm skips the update)
        opt.lr = lr_at_step(&data.sched, step);
        outlier_limits(&o, &run, &opt);
        float norm = NAN;
        trace_begin(&trace, "update", TRACE_CAT_PHASE);
        if (isfinite(loss)) norm = gpt2_update(&model, &opt, adamw_step_count(&run, step + 1), loss);
        trace_end(&trace);
        double dt = wall_seconds() - t0;
        trace_end(&trace);  // the step
        timed_steps_add(&timed, step, dt);
        StepReport r = {step + 1, max_steps, loss, norm, opt.lr, dt, NAN, flops_per_step / dt / 1e9, o.total_batch,
                        0, 0, update_fate(loss, norm, &opt), &opt};
        run_progress(t_run, start_step, step + 1, max_steps, &r.elapsed, &r.eta);
        log_step(&lg, &r);
        updates_record(&run, step + 1, loss, norm, r.fate, o.max_skipped);
        // evaluation, sample, checkpoint
        after_step(&o, data.have_val, can_sample, &lg, &run, step + 1, step + 1 == max_steps, between, &tr);
        trace_step_end(&trace, step + 1, max_steps);
    }
    report_data_stall(&data, &o, max_steps - start_step);
    final_sample(&o, can_sample, max_steps, between, &tr);
    log_cpu_run_summary(&lg, &timed, max_steps, o.total_batch, flops_per_step,
                        data_stall_ms(&data, max_steps - start_step), run.skipped_total);
    free(val_inputs);
    free(val_targets);
    free(inputs);
    free(targets);
    logger_close(&lg);
    train_data_close(&data);
    gpt2_free(&model);
    return 0;
}
#endif // TESTING
