// gpu/checkpoint.cuh: the GPU trainer's checkpoints in a run directory (names, formats and
// the order that keeps them intact: common/run_dir.h, common/checkpoint.h,
// docs/formats.md): <dir>/model_<step>.bin, the model exactly as trained (fp32 v3 in the
// fp32 build, bf16 v5 in the bf16 build), and <dir>/state_<step>.bin, the rest of the
// training state: the optimizer's arrays, the step, the RNG, the data loader's position,
// the fp16 loss scale, FP8's delayed-scaling state. Under ZeRO each rank writes its shard's
// state_<step>.rank<r>.bin, and rank 0's state file last, so a step whose state file exists
// has a complete checkpoint.
#pragma once
#include "../common/checkpoint.h"
#include "../common/train_common.h"
#include "trainer.cuh"

// run carries what the run adds to the state (log length, skipped updates, settings). Rank 0
// writes the model to its temporary, the ZeRO ranks commit their shards, then rank 0 writes
// its state and renames the model and the state into place, the state last: a step whose
// state file exists has a whole checkpoint (common/run_dir.h).
static void trainer_save_checkpoint(GpuTrainer *t, const DataLoader *loader, RunDir *rd, int step, uint64_t rng,
                                    const TrainState *run) {
    GPT2 *m = &t->model;
    const Optimizer *o = &t->opt;
    const int rank = t->dp.rank;
    if (o->shard_rank == 0 && rank != 0) {  // unsharded: rank 0 writes everything
        dp_barrier(&t->dp, t->info + INFO_BARRIER);
        return;
    }
    char mn[64], sn[64];
    run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, step, 0);
    run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, o->shard_rank);
    const size_t n = m->num_params, ns = o->zl.shard_elems;
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    float *host = (float *)xmalloc((n > ns ? n : ns) * sizeof(float));  // the parameters, then the master weights
    TrainState s = train_state_for(run, step, rng, loader);
    s.model_crc = 0;  // known to rank 0, which writes the model
    if (t->shards.shard) param_shards_download(&t->shards, rank == 0 ? host : NULL);  // -z 3: every rank takes part
    else if (rank == 0) download_floatX(host, m->params, n);         // every rank holds the same parameters
    AtomicFile mf = {};
    if (rank == 0) {
        mf = run_dir_begin(rd, mn);
        s.model_crc = gpt2_checkpoint_write_to(&mf, &m->config, host, PRECISION == PRECISION_BF16);
    }
    s.world_size = t->dp.world;
    s.rank = o->shard_rank;
    s.loss_scale = t->scaler.scale;
    s.loss_scale_good_steps = t->scaler.good_steps;
    optimizer_state_get(o, &s, host);  // offloaded fp32 state is written from where it lives
    s.fp8_n = t->fp8.on ? (int)fp8_linear_state_floats(&t->fp8.f8) : 0;
    s.fp8 = s.fp8_n ? (float *)xmalloc((size_t)s.fp8_n * sizeof(float)) : NULL;
    if (s.fp8_n) fp8_linear_state_get(&t->fp8.f8, s.fp8, m->stream);
    AtomicFile sf = run_dir_begin(rd, sn);
    train_state_write_to(&sf, &s);
    // rank 0's state file marks the checkpoint complete, so it is committed after the others'
    if (o->shard_rank != 0) run_dir_finish(rd, &sf);
    dp_barrier(&t->dp, t->info + INFO_BARRIER);
    if (rank == 0) run_dir_finish_checkpoint(rd, step, &mf, &sf);
    optimizer_state_release(o, &s);
    free(s.fp8);
    free(host);
}

static void trainer_load_checkpoint(GpuTrainer *t, DataLoader *loader, const RunDir *rd, int step, TrainState *run,
                                    uint64_t *rng) {
    GPT2 *m = &t->model;
    Optimizer *o = &t->opt;
    char mn[64], sn[64], mp[PATH_CAP], sp[PATH_CAP];
    run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, step, 0);
    run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, o->shard_rank);
    run_dir_path(rd, mp, mn);
    run_dir_path(rd, sp, sn);
    GPT2Config cfg;
    float *params = gpt2_checkpoint_read(mp, &cfg);
    if (memcmp(&cfg, &m->config, sizeof cfg) != 0)
        fatal("%s holds a different model shape than -e gave; resume with the same model", mp);
    if (t->shards.shard) param_shards_set(&t->shards, params);
    else upload_params(m->params, params, m->num_params);
    trainer_fp8_recast(t);
    TrainState s;
    memset(&s, 0, sizeof s);
    s.world_size = t->dp.world;
    s.rank = o->shard_rank;
    s.loader_pos_bytes = (int)sizeof(DataLoaderPos);
    optimizer_state_arrays(o, &s, params);  // (offloaded fp32 state is read in place: no update has run yet)
    train_state_read(sp, &s);
    optimizer_state_set(o, &s);
    train_state_resume(&s, loader, run, rng);
    if (t->dp.rank == 0) {
        if (s.has_ext) run_settings_report(s.settings, run->settings);
    }
    if (PRECISION == PRECISION_FP16) {
        if (!(s.loss_scale > 0.0f) || !isfinite(s.loss_scale)) fatal("%s: bad loss scale %g", sp, s.loss_scale);
        t->scaler.scale = s.loss_scale;
        t->scaler.good_steps = s.loss_scale_good_steps;
    }
    if (fp8_layers_resume(&t->fp8, &cfg, s.fp8, (size_t)s.fp8_n, sp, t->dp.rank == 0))
        trainer_fp8_recast(t);  // again, with the scales back
    free(s.fp8);
    optimizer_state_release(o, &s);
    free(params);
}
