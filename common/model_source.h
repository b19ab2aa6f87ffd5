// model_source.h: -e into parameters: GPT-2's random initialisation for a descriptor
// (d12, l4h4c256, ...), a checkpoint file, or a Hugging Face directory.
#ifndef COMMON_MODEL_SOURCE_H
#define COMMON_MODEL_SOURCE_H
#include "util.h"
#include "checkpoint.h"
#include "rng.h"
#include "safetensors.h"
#include <math.h>

// GPT-2's initialisation: weights normal(0, 0.02), the residual output projections
// (attprojw, fcprojw) scaled by 1/sqrt(2L), biases 0, layernorm weights 1; the padded
// rows of wte stay zero. Returns a malloc'd array in checkpoint order.
static inline float *gpt2_init_random_params(const GPT2Config *cfg, uint64_t seed) {
    size_t sizes[NUM_PARAM_TENSORS];
    gpt2_param_sizes(cfg, sizes);
    float *params = (float *)xcalloc(gpt2_num_params(cfg), sizeof(float));
    uint64_t rng = rng_seed(seed);
    float resid_std = 0.02f / sqrtf(2.0f * cfg->num_layers);
    float *p = params;
    for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
        size_t n = i == P_WTE ? (size_t)cfg->vocab_size * cfg->channels : sizes[i];
        if (i == P_LN1W || i == P_LN2W || i == P_LNFW) {
            for (size_t j = 0; j < n; j++) p[j] = 1.0f;
        } else if (i == P_WTE || i == P_WPE || i == P_QKVW || i == P_FCW) {
            rng_fill_normal(&rng, p, n, 0.0f, 0.02f);
        } else if (i == P_ATTPROJW || i == P_FCPROJW) {
            rng_fill_normal(&rng, p, n, 0.0f, resid_std);
        }
        p += sizes[i];
    }
    return params;
}

// -e: a descriptor gives a random init from seed, a file a checkpoint. Returns the
// parameters (malloc'd, fp32) and fills cfg; checks T against the model's maxT.
static inline float *gpt2_params_from_model_arg(const char *model_arg, int T, uint64_t seed, GPT2Config *cfg) {
    float *params;
    if (gpt2_config_from_descriptor(model_arg, cfg)) {
        const char *problem = gpt2_config_problem(cfg);
        if (problem) fatal("-e %s: %s", model_arg, problem);
        params = gpt2_init_random_params(cfg, seed);
    } else if (st_is_dir(model_arg)) {
        params = gpt2_params_from_hf_dir(model_arg, cfg);
    } else if (file_exists(model_arg)) {
        params = gpt2_checkpoint_read(model_arg, cfg);
    } else {
        fatal("-e %s: not a model descriptor (d12, d24, d36, d48, l<L>h<H>c<C>[t<maxT>]) and no such file or "
              "directory", model_arg);
    }
    if (T > cfg->max_seq_len) fatal("-t %d exceeds the model's max sequence length %d", T, cfg->max_seq_len);
    return params;
}
#endif // COMMON_MODEL_SOURCE_H
