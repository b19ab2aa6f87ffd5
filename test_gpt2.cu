// test_gpt2.cu: checks the GPU trainer (gpu/trainer.cuh, built as train_gpt2cu builds it)
// against the PyTorch reference. Loads DIR/model.bin and DIR/debug_state.bin written by
// dev/gpt2_ref.py, compares the logits, the loss and every gradient tensor, then takes the
// reference's AdamW steps on the same batch and compares each step's loss. Prints the
// measured error of every check (max abs error / max abs reference value), exits 1 on any
// miss. The model's options are the trainer's own (-r, --offload, --fp8, ...).
//
// Tolerances per build (why, and the errors measured against them: docs/testing.md):
//   fp32: logits and loss 1e-4 relative, each gradient tensor 1e-3, step losses 1e-4 abs.
//   bf16: loss 1e-2 relative, step losses 2e-2 abs; logits 5e-2 relative to their max;
//         gradients 5e-2 (see grad_tolerance below for why).
//   fp16: loss 1e-2, step losses 2e-2 as bf16; logits and gradients 1e-2 (fp16 keeps 3
//         more mantissa bits than bf16). The test runs with a fixed loss scale of 1024
//         and unscales the gradients before comparing.
#include "common/args.h"
#include "common/checkpoint.h"
#include "gpu/settings.cuh"
#include "gpu/trainer.cuh"

static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

// bf16 gradient tolerances. bf16 keeps 8 significant bits (relative rounding 2^-9 = 2e-3
// per operation); the activations feeding each gradient are rounded several times on the
// way (each layer's input, the attention scores and probabilities, the dlogits), and a
// weight gradient sums B*T such products, so errors of a few 1e-2 of the tensor's largest
// entry are expected (llm.c's bf16 tests accept similar). The measured worst per tensor
// (docs/testing.md) shows no class of tensor (weights, biases, layernorm parameters)
// standing out, so one tolerance for all, about 3x the worst; --grad-tol overrides.
static float grad_tolerance(int k, float override_tol) {
    if (override_tol > 0) return override_tol;
#if PRECISION == PRECISION_FP32
    (void)k;
    return 1e-3f;
#elif PRECISION == PRECISION_FP16
    (void)k;
    return 1e-2f;
#else
    (void)k;
    return 5e-2f;
#endif
}

// --fp8 1 (bf16 build): the linear layers' operands in FP8, E4M3 (3 mantissa bits) forward
// and E5M2 (2 bits) for the output gradients, against the exact reference. The tolerances
// are about twice the format's own error as the reference's FP8 emulation measures it, for
// the bf16 activations and the GPU's accumulation on top. A reference that emulates FP8 is
// no closer: an FP8 rounding step is 6-25% of a value, so the slightest difference upstream
// flips some roundings, and the flips compound over the layers (the measurements:
// docs/fp8.md, "Checks"). The FP8 kernels are held tightly per layer instead, on identical
// inputs (dev/test/test_fp8.cu).
#define FP8_LOGITS_TOL 0.2f
#define FP8_LOSS_TOL 1e-2f
#define FP8_GRAD_TOL 0.45f
#define FP8_STEP_TOL 0.2f

int main(int argc, char **argv) {
    const char *dir = "build/ref";
#if PRECISION == PRECISION_FP32
    float logits_tol = 1e-4f, loss_tol = 1e-4f, step_tol = 1e-4f;
#elif PRECISION == PRECISION_FP16
    float logits_tol = 1e-2f, loss_tol = 1e-2f, step_tol = 2e-2f;
#else
    float logits_tol = 5e-2f, loss_tol = 1e-2f, step_tol = 2e-2f;
#endif
    float grad_tol = 0.0f;
    const float build_tols[3] = {logits_tol, loss_tol, step_tol};
    // the trainer's settings, its model options from its own table (-r defaults to 0 here)
    GpuSettings gs;
    gpu_settings_defaults(&gs);
    gs.recompute = 0;
    ARG_TABLE(options, GPU_OPTIONS_CAPACITY);
    args_add(&options, NULL, "--ref-dir", ARG_STRING, &dir,
             "directory with model.bin and debug_state.bin from dev/gpt2_ref.py");
    args_add(&options, NULL, "--logits-tol", ARG_FLOAT, &logits_tol, "tolerance on logits (max abs err / max abs ref)");
    args_add(&options, NULL, "--loss-tol", ARG_FLOAT, &loss_tol, "tolerance on the loss (relative)");
    args_add(&options, NULL, "--grad-tol", ARG_FLOAT, &grad_tol,
             "tolerance on every gradient tensor (0: per-class defaults)");
    args_add(&options, NULL, "--step-tol", ARG_FLOAT, &step_tol, "tolerance on each AdamW step's loss (absolute)");
    gpu_settings_add_options(&options, &gs, GPU_OPTIONS_MODEL);
    args_parse_table(argc, argv, &options,
                     "usage: test_gpt2cu [options]\n\nCompares train_gpt2.cu (" PRECISION_NAME
                     " build) with the PyTorch reference; --fp8 1 uses FP8's tolerances where the command line "
                     "leaves the build's.");
    ProcessGroup one;  // this test runs one rank
    memset(&one, 0, sizeof one);
    one.world = 1;
    gpu_settings_check(&gs, &one);
    if (gs.fp8_mask & FP8_LAYERS_AUTO) gs.fp8_mask = FP8_LAYERS_ALL;  // under test: every FP8 layer, not a timing's choice
    if (gs.fp8_cast < 0) gs.fp8_cast = 0;  // --fp8-weights auto: kept at these sizes
    if (gs.fp8_mask) {  // FP8's tolerances where the command line left the build's
        if (logits_tol == build_tols[0]) logits_tol = FP8_LOGITS_TOL;
        if (loss_tol == build_tols[1]) loss_tol = FP8_LOSS_TOL;
        if (step_tol == build_tols[2]) step_tol = FP8_STEP_TOL;
        if (grad_tol == 0.0f) grad_tol = FP8_GRAD_TOL;
    }
    char model_path[4096], state_path[4096];
    snprintf(model_path, sizeof model_path, "%s/model.bin", dir);
    snprintf(state_path, sizeof state_path, "%s/debug_state.bin", dir);

    GPT2Config cfg;
    float *host_params = gpt2_checkpoint_read(model_path, &cfg);
    gpu_settings_for_model(&gs, &cfg, model_path);
    DebugState ref;
    debug_state_read(state_path, &cfg, &ref);
    const int B = ref.B, T = ref.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    const size_t BT = (size_t)B * T;
    gs.o.B = B;  // the reference's batch
    gs.o.T = T;
    GpuTrainer t;
    trainer_build(&t, &cfg, host_params, &gs, NULL, 0, 1);
    free(host_params);
    GPT2 *model = &t.model;
    if (!gs.deterministic) trainer_tune_matmuls(&t);  // the tuned matmul algorithms are under test too
    // fp16: a fixed loss scale for the test (gradients are divided by it before comparing)
    if (PRECISION == PRECISION_FP16) t.scaler.scale = 1024.0f;
    const GPT2Config *c = &model->config;
    char kinds[64];
    printf("[%s build] model L=%d H=%d C=%d V=%d, batch B=%d T=%d, recompute %d, gelu %s, %s attention%s, "
           "%s moments%s%s%s%s\n",
           PRECISION_NAME, c->num_layers, c->num_heads, c->channels, V, B, T, gs.recompute,
           model->modes.fuse_gelu ? "fused" : "separate", gs.flash ? "flash" : "plain",
           gs.flash && !gs.deterministic ? " (atomic-dq backward)" : "", gs.moments_bf16 ? "bf16" : "fp32",
           gs.offload == OFFLOAD_STAGED ? ", optimizer state in host memory (staged)"
           : gs.offload                 ? ", optimizer state in host memory (mapped)"
                                        : "", gs.cuda_graph ? ", micro-steps and updates from CUDA graphs" : "",
           gs.fp8_mask ? ", FP8 in " : "", gs.fp8_mask ? fp8_kinds_text(gs.fp8_mask, kinds, sizeof kinds) : "");
    int failures = 0, checks = 0;
    cudaStream_t s = model->stream;

    // forward: logits (the V real columns) and loss
    batch_upload(&t.batch, ref.x, ref.y, B, T, s);
    const DeviceBatch batch = batch_on_device(&t.batch, gs.cuda_graph);
    gpt2_forward(model, &batch, B, T);
    floatX *logits_dev = (floatX *)xmalloc(BT * Vp * sizeof(floatX));
    CUDA_CHECK(cudaMemcpyAsync(logits_dev, model->acts.logits, BT * Vp * sizeof(floatX), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemsetAsync(t.info + INFO_LOSS, 0, sizeof(float), s));
    gpt2_loss(model, &batch, t.info + INFO_LOSS, 1.0f / (float)BT, trainer_grad_scale(&t), 1, B, T);
    float info[INFO_SLOTS];
    CUDA_CHECK(cudaMemcpyAsync(info, t.info, sizeof info, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    float *logits = (float *)xmalloc(BT * V * sizeof(float));
    for (size_t i = 0; i < BT; i++)
        for (int v = 0; v < V; v++) logits[i * V + v] = to_float(logits_dev[i * Vp + v]);
    free(logits_dev);
    double err_abs;
    double e = rel_error(logits, ref.logits, BT * V, &err_abs);
    int ok = e <= logits_tol;
    failures += !ok; checks++;
    printf("%-14s err %.3e (max abs %.3e)  tol %.0e  %s\n", "logits", e, err_abs, logits_tol, ok ? "ok" : "FAIL");
    float loss = info[INFO_LOSS];
    e = fabs(loss - ref.loss) / fabs(ref.loss);
    ok = e <= loss_tol;
    failures += !ok; checks++;
    printf("%-14s ours %.6f ref %.6f rel err %.3e  tol %.0e  %s\n", "loss", loss, ref.loss, e, loss_tol,
           ok ? "ok" : "FAIL");
    free(logits);

    // backward: every gradient tensor
    gpt2_zero_grad(model);  // (not trainer_step_begin: the loss in info is step 0's)
    gpt2_backward(model, &batch, NULL);
    CUDA_CHECK(cudaStreamSynchronize(s));
    float *grads = (float *)xmalloc(model->num_params * sizeof(float));
    download_floatX(grads, model->grads, model->num_params);
    for (size_t i = 0; i < model->num_params; i++) grads[i] /= t.scaler.scale;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        size_t off = model->param_offsets[k], n = model->param_sizes[k];
        float tol = grad_tolerance(k, grad_tol);
        e = rel_error(grads + off, ref.grads + off, n, &err_abs);
        ok = e <= tol;
        failures += !ok; checks++;
        printf("grad %-9s err %.3e (max abs %.3e, max ref %.3e)  tol %.0e  %s\n", GPT2_PARAM_NAMES[k], e, err_abs,
               max_abs(ref.grads + off, n), tol, ok ? "ok" : "FAIL");
    }
    free(grads);

    // AdamW steps on the same batch, with the reference's hyperparameters
    if (ref.nsteps > 0) {
        AdamWConfig h = {ref.hparams[0], ref.hparams[1], ref.hparams[2],
                         ref.hparams[3], ref.hparams[4], ref.hparams[5], 0.0f, 0.0f};
        printf("AdamW: lr %g beta1 %g beta2 %g eps %g weight decay %g grad clip %g\n", h.lr, h.beta1, h.beta2, h.eps,
               h.weight_decay, h.grad_clip);
        // step 0 reuses the gradients just checked
        for (int step = 0; step < ref.nsteps; step++) {
            if (step > 0) {
                trainer_step_begin(&t, 0);
                const DeviceBatch batch = batch_on_device(&t.batch, gs.cuda_graph);
                trainer_micro_step(&t, &batch, 1, 1.0f / (float)BT);  // with --cuda-graph 1: eager once, then replayed
            }
            trainer_update(&t, &h, step + 1);
            CUDA_CHECK(cudaMemcpyAsync(info, t.info, sizeof info, cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaStreamSynchronize(s));
            e = fabs((double)info[INFO_LOSS] - ref.losses[step]);
            ok = e <= step_tol;
            failures += !ok; checks++;
            printf("step %2d loss ours %.6f ref %.6f abs err %.2e (grad norm %.4f)  tol %.0e  %s\n", step,
                   info[INFO_LOSS], ref.losses[step], e, info[INFO_NORM], step_tol, ok ? "ok" : "FAIL");
        }
        if (gs.cuda_graph) {  // or the graphs were not under test: micro-steps of steps 2.. and updates of
                              // steps 1.. must be replays of one capture each (the update eager with staged offload)
            const StepGraph *mg = &t.micro_graph, *ug = &t.opt.graph;
            ok = ref.nsteps < 3 || (mg->replays == ref.nsteps - 2 && mg->captures == 1);
            failures += !ok; checks++;
            printf("CUDA graph of the micro-step: %d capture(s), %d replays  %s\n", mg->captures, mg->replays,
                   ok ? "ok" : "FAIL");
            const int staged = gs.offload == OFFLOAD_STAGED, want = staged ? 0 : ref.nsteps - 1;
            ok = ref.nsteps < 2 || (ug->replays == want && ug->captures == !staged);
            failures += !ok; checks++;
            printf("CUDA graph of the update: %d capture(s), %d replays%s  %s\n", ug->captures, ug->replays,
                   staged ? " (staged offload: eager)" : "", ok ? "ok" : "FAIL");
        }
    } else {
        printf("debug state has no AdamW steps (version 2): step check skipped\n");
    }
    debug_state_free(&ref);
    trainer_free(&t);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
