// test_gpt2.c: checks the CPU trainer (train_gpt2.c) against the PyTorch reference.
// Loads the reference model and debug state written by dev/gpt2_ref.py, compares the
// logits, the loss and every gradient tensor, then takes the reference's AdamW steps on
// the same batch and compares each step's loss. Prints every measured error; exits 1 on
// any miss of the fp32 tolerances (docs/testing.md).
#define TESTING
#include "train_gpt2.c"

int main(int argc, char **argv) {
    const char *dir = "build/ref";
    float logits_tol = 1e-4f, grad_tol = 1e-3f, step_tol = 1e-4f;
    ArgSpec specs[] = {
        {NULL, "--ref-dir", ARG_STRING, &dir, "directory with model.bin and debug_state.bin from dev/gpt2_ref.py"},
        {NULL, "--logits-tol", ARG_FLOAT, &logits_tol, "tolerance on logits and loss (relative)"},
        {NULL, "--grad-tol", ARG_FLOAT, &grad_tol, "tolerance on each gradient tensor (max abs err / max abs ref)"},
        {NULL, "--step-tol", ARG_FLOAT, &step_tol, "tolerance on each AdamW step's loss (absolute)"},
    };
    args_parse(argc, argv, specs, (int)(sizeof specs / sizeof specs[0]),
               "usage: test_gpt2 [options]\n\nCompares train_gpt2.c with the PyTorch reference.");
    char model_path[4096], state_path[4096];
    snprintf(model_path, sizeof model_path, "%s/model.bin", dir);
    snprintf(state_path, sizeof state_path, "%s/debug_state.bin", dir);

    GPT2 model;
    GPT2Config cfg;
    float *params = gpt2_checkpoint_read(model_path, &cfg);
    gpt2_build(&model, &cfg, params);
    const GPT2Config *c = &model.config;
    DebugState ref;
    debug_state_read(state_path, c, &ref);
    int B = ref.B, T = ref.T, V = c->vocab_size, Vp = c->padded_vocab_size;
    printf("model L=%d H=%d C=%d V=%d, batch B=%d T=%d, %d threads\n", c->num_layers, c->num_heads, c->channels, V, B,
           T, num_threads());
    gpt2_alloc_activations(&model, B, T);
    int failures = 0, checks = 0;

    // forward: logits (only the V real columns) and loss
    double t0 = wall_seconds();
    gpt2_forward(&model, ref.x, ref.y, B, T);
    double t_fwd = wall_seconds() - t0;
    double err_max = 0.0, err_abs;
    for (int i = 0; i < B * T; i++) {
        rel_error(model.acts.logits + (size_t)i * Vp, ref.logits + (size_t)i * V, (size_t)V,
                  &err_abs);  // the abs error
        if (!(err_abs <= err_max)) err_max = err_abs;
    }
    double logit_scale = 0.0;
    for (size_t i = 0; i < (size_t)B * T * V; i++)
        if (fabs(ref.logits[i]) > logit_scale) logit_scale = fabs(ref.logits[i]);
    double logits_err = err_max / logit_scale;
    int ok = logits_err <= logits_tol;
    failures += !ok; checks++;
    printf("%-10s rel err %.3e (max abs %.3e)  tol %.0e  %s\n", "logits", logits_err, err_max, logits_tol,
           ok ? "ok" : "FAIL");
    double loss_err = fabs(model.mean_loss - ref.loss) / fabs(ref.loss);
    ok = loss_err <= logits_tol;
    failures += !ok; checks++;
    printf("%-10s ours %.6f ref %.6f rel err %.3e  %s\n", "loss", model.mean_loss, ref.loss, loss_err,
           ok ? "ok" : "FAIL");

    // backward: every gradient tensor
    gpt2_zero_grad(&model);
    t0 = wall_seconds();
    gpt2_backward(&model, ref.x, ref.y, 1.0f);
    double t_bwd = wall_seconds() - t0;
    const float *ref_grad = ref.grads;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        double e = rel_error(model.grad[k], ref_grad, model.param_sizes[k], &err_abs);
        ok = e <= grad_tol;
        failures += !ok; checks++;
        printf("grad %-9s rel err %.3e (max abs %.3e)  tol %.0e  %s\n", GPT2_PARAM_NAMES[k], e, err_abs, grad_tol,
               ok ? "ok" : "FAIL");
        ref_grad += model.param_sizes[k];
    }
    printf("forward %.1f ms, backward %.1f ms\n", t_fwd * 1e3, t_bwd * 1e3);

    // AdamW steps on the same batch, with the reference's hyperparameters
    if (ref.nsteps > 0) {
        AdamWConfig h = {ref.hparams[0], ref.hparams[1], ref.hparams[2],
                         ref.hparams[3], ref.hparams[4], ref.hparams[5], 0.0f, 0.0f};
        printf("AdamW: lr %g beta1 %g beta2 %g eps %g weight decay %g grad clip %g\n", h.lr, h.beta1, h.beta2, h.eps,
               h.weight_decay, h.grad_clip);
        for (int step = 0; step < ref.nsteps; step++) {
            gpt2_forward(&model, ref.x, ref.y, B, T);
            float loss = model.mean_loss;
            gpt2_zero_grad(&model);
            gpt2_backward(&model, ref.x, ref.y, 1.0f);
            float norm = gpt2_update(&model, &h, step + 1, loss);
            double e = fabs((double)loss - ref.losses[step]);
            ok = e <= step_tol;
            failures += !ok; checks++;
            printf("step %2d loss ours %.6f ref %.6f abs err %.2e (grad norm %.4f)  %s\n", step, loss, ref.losses[step],
                   e, norm, ok ? "ok" : "FAIL");
        }
    } else {
        printf("debug state has no AdamW steps (version 2): step check skipped\n");
    }
    debug_state_free(&ref);
    gpt2_free(&model);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
