// test_distributed.c: the multi-process logic that needs no GPU, run under
// `mpirun -np N` (N = 1, 2, 3): the data loader's split of every batch across ranks, the
// trainer's ZeRO shard ownership, gathering sharded weights into one checkpoint, -y 1's
// choice of a checkpoint intact on every rank, the run directory's lock, which rank 0 takes
// for all the ranks of its run, and -nk's agreement between the ranks. Every rank checks; rank 0 prints each case and the
// "N passed, M failed" line (failures summed over the ranks).
#include "mpi_testutil.h"
#include "../../common/checkpoint.h"
#include "../../common/dataloader.h"
#include "../../common/rng.h"
#include "../../common/train_common.h"
#include <fcntl.h>

static void run_case(const char *name, void (*fn)(void)) {
    g_case_failures = 0;
    fn();
    long total = mpi_case_end();
    if (g_pg.rank == 0) printf("%-60s %s\n", name, total ? "FAIL" : "ok");
    fflush(stdout);
}

// the values rank r contributes: the same on every rank, so each can compute the truth
static void rank_values(int r, float *x, size_t n) {
    uint64_t s = rng_seed(1000 + (uint64_t)r);
    rng_fill_normal(&s, x, n, 0.0f, 1.0f);
}

// each rank's loader part, gathered, is the single-process global batch
static void test_batch_split(void) {
    const char *path = "build/test_distributed_shard.bin";
    int B = 2, T = 8, world = g_pg.world;
    if (g_pg.rank == 0) {
        int ntok = B * T * world * 5 + 1;
        int h[HEADER_INTS] = {0};
        h[0] = 20240520; h[1] = 1; h[2] = ntok;
        AtomicFile a = atomic_open(path);
        xfwrite(h, sizeof(int), HEADER_INTS, a.f, a.tmp_path);
        for (int i = 0; i < ntok; i++) { uint16_t t = (uint16_t)((i * 7919) % 50257); xfwrite(&t, 2, 1, a.f, a.tmp_path); }
        atomic_commit(&a);
    }
#ifdef USE_MPI
    if (g_pg.using_mpi) MPI_Barrier(MPI_COMM_WORLD);
#endif
    DataLoader mine, all;
    dataloader_init(&mine, path, B, T, g_pg.rank, world, 1, 7, 50257);
    dataloader_init(&all, path, B * world, T, 0, 1, 1, 7, 50257);
    size_t part = (size_t)B * T;
    int *in = (int *)xmalloc(part * sizeof(int)), *tg = (int *)xmalloc(part * sizeof(int));
    int *gin = (int *)xmalloc(part * world * sizeof(int)), *gtg = (int *)xmalloc(part * world * sizeof(int));
    for (int step = 0; step < 7; step++) {  // crosses an epoch (5 batches per epoch)
        dataloader_next(&mine, in, tg);
        dataloader_next(&all, gin, gtg);
        CHECK(memcmp(in, gin + g_pg.rank * part, part * sizeof(int)) == 0, "step %d: inputs are not this rank's part", step);
        CHECK(memcmp(tg, gtg + g_pg.rank * part, part * sizeof(int)) == 0, "step %d: targets are not this rank's part", step);
    }
    free(in); free(tg); free(gin); free(gtg);
    dataloader_free(&mine);
    dataloader_free(&all);
}

// the trainer's ZeRO shards of the weights, exchanged between the ranks (MPI_Allgather
// of the compact shards), put back in place, written by rank 0, read back whole
static void test_checkpoint_gather(void) {
    GPT2Config c = {16, 300, 384, 2, 2, 24};  // C=24 splits over 1, 2, 3, 4, 6, 8 ranks
    size_t sizes[NUM_PARAM_TENSORS];
    int layers[NUM_PARAM_TENSORS];
    gpt2_param_sizes(&c, sizes);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) layers[k] = gpt2_param_layers(&c, k);
    ZeroLayout z;
    const char *bad = zero_layout_init(&z, sizes, layers, GPT2_PARAM_NAMES, NUM_PARAM_TENSORS, g_pg.world);
    CHECK(bad == NULL, "world %d should divide C=24's slices: %s", g_pg.world, bad ? bad : "");
    if (bad) return;
    size_t n = gpt2_num_params(&c);
    float *full = (float *)xmalloc(n * sizeof(float));
    rank_values(99, full, n);  // the truth, known to every rank
    float *shard = (float *)xmalloc(z.shard_elems * sizeof(float));
    zero_gather_shard(&z, g_pg.rank, full, shard);
    float *all = (float *)xmalloc(z.shard_elems * (size_t)g_pg.world * sizeof(float));
#ifdef USE_MPI
    if (g_pg.using_mpi)
        MPI_Allgather(shard, (int)z.shard_elems, MPI_FLOAT, all, (int)z.shard_elems, MPI_FLOAT, MPI_COMM_WORLD);
    else
#endif
        memcpy(all, shard, z.shard_elems * sizeof(float));
    float *gathered = (float *)xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) gathered[i] = NAN;
    for (int r = 0; r < g_pg.world; r++) zero_scatter_shard(&z, r, all + (size_t)r * z.shard_elems, gathered);
    const char *path = "build/test_distributed_model.bin";
    if (g_pg.rank == 0) gpt2_checkpoint_write(path, &c, gathered, 0);
#ifdef USE_MPI
    if (g_pg.using_mpi) MPI_Barrier(MPI_COMM_WORLD);
#endif
    GPT2Config rc;
    float *back = gpt2_checkpoint_read(path, &rc);
    CHECK(memcmp(back, full, n * sizeof(float)) == 0, "gathered checkpoint differs from the unsharded weights");
    free(back); free(full); free(shard); free(all); free(gathered);
}

// the slice layout the GPU trainer shards by: every rank's chunks, scattered back, tile
// the flat parameters exactly once; zero_owned_index agrees with the gather; the GPT-2
// shape refuses a world size that does not divide its slices
static void test_zero_slices(void) {
    GPT2Config c = {64, 1000, 256, 3, 4, 96};
    size_t sizes[NUM_PARAM_TENSORS];
    int layers[NUM_PARAM_TENSORS];
    gpt2_param_sizes(&c, sizes);
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) layers[k] = gpt2_param_layers(&c, k);
    int world = g_pg.world;
    ZeroLayout z;
    const char *bad = zero_layout_init(&z, sizes, layers, GPT2_PARAM_NAMES, NUM_PARAM_TENSORS, world);
    CHECK(bad == NULL, "world %d should divide C=96's slices: %s", world, bad ? bad : "");
    if (bad) return;
    size_t n = gpt2_num_params(&c);
    CHECK(z.n == n && z.shard_elems * (size_t)world == n, "shard %zu x %d ranks != %zu parameters", z.shard_elems, world, n);
    float *full = (float *)xmalloc(n * sizeof(float)), *back = (float *)xmalloc(n * sizeof(float));
    float *shard = (float *)xmalloc(z.shard_elems * sizeof(float));
    int *hits = (int *)xcalloc(n, sizeof(int));
    rank_values(7, full, n);
    for (size_t i = 0; i < n; i++) back[i] = NAN;
    for (int r = 0; r < world; r++) {
        zero_gather_shard(&z, r, full, shard);
        for (int k = 0; k < z.ntensors; k++)
            for (size_t i = 0; i < (size_t)z.t[k].layers * z.t[k].chunk; i++) {
                size_t p = zero_owned_index(&z.t[k], r, i);
                hits[p]++;
                CHECK(shard[z.t[k].shard_offset + i] == full[p], "rank %d tensor %d element %zu: index map differs from the gather", r, k, i);
            }
        zero_scatter_shard(&z, r, shard, back);
    }
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += hits[i] != 1;
    CHECK(wrong == 0, "%zu parameters owned by other than exactly one rank", wrong);
    CHECK(memcmp(back, full, n * sizeof(float)) == 0, "scattered shards differ from the flat parameters");
    ZeroLayout z7;
    CHECK(zero_layout_init(&z7, sizes, layers, NULL, NUM_PARAM_TENSORS, 7) != NULL, "7 ranks cannot split C=96 slices, must be refused");
    free(full); free(back); free(shard); free(hits);
}

// -z 3: a layer's parameters are gathered from every rank's chunk of it (zero_chunk_at in the
// rank's compact shard, MPI_Allgather here, NCCL's or the MPI backend's all-gather in the
// trainer): the result must be the layer's slice of each tensor, wte and the other one-slice
// tensors whole. And the update writes the shard at the optimizer state's own index: under a
// staged cut [c0, c1) each piece's shard_offset + grad_at (the compact gradients' and
// parameters' place) equals c0 + q (the state's).
static void test_zero3_layer_gather(void) {
    GPT2Config c = {64, 1000, 256, 3, 4, 96};
    size_t sizes[NUM_PARAM_TENSORS], offsets[NUM_PARAM_TENSORS];
    int layers[NUM_PARAM_TENSORS];
    gpt2_param_sizes(&c, sizes);
    size_t n = 0;
    for (int k = 0; k < NUM_PARAM_TENSORS; k++) {
        layers[k] = gpt2_param_layers(&c, k);
        offsets[k] = n;
        n += sizes[k];
    }
    const int world = g_pg.world;
    ZeroLayout z;
    const char *bad = zero_layout_init(&z, sizes, layers, GPT2_PARAM_NAMES, NUM_PARAM_TENSORS, world);
    CHECK(bad == NULL, "world %d should divide C=96's slices: %s", world, bad ? bad : "");
    if (bad) return;
    float *full = (float *)xmalloc(n * sizeof(float)), *shard = (float *)xmalloc(z.shard_elems * sizeof(float));
    rank_values(11, full, n);
    zero_gather_shard(&z, g_pg.rank, full, shard);
    size_t most = 0;
    for (int k = 0; k < z.ntensors; k++) most = z.t[k].slice > most ? z.t[k].slice : most;
    float *slot = (float *)xmalloc(most * sizeof(float));
    size_t wrong = 0, gathered = 0;
    for (int k = 0; k < z.ntensors; k++) {
        const ZeroTensor *t = &z.t[k];
        for (int l = 0; l < t->layers; l++) {
            const float *mine = shard + zero_chunk_at(t, l);
            if (world > 1)
                MPI_Allgather(mine, (int)t->chunk, MPI_FLOAT, slot, (int)t->chunk, MPI_FLOAT, MPI_COMM_WORLD);
            else memcpy(slot, mine, t->chunk * sizeof(float));
            wrong += memcmp(slot, full + offsets[k] + (size_t)l * t->slice, t->slice * sizeof(float)) != 0;
            gathered++;
        }
    }
    CHECK(wrong == 0, "%zu of %zu gathered layer slices differ from the model's", wrong, gathered);
    // the staged update's cuts, at random
    uint64_t s = rng_seed(77);
    size_t mismatched = 0;
    for (int trial = 0; trial < 200; trial++) {
        size_t c0 = (size_t)(rng_uniform(&s) * (double)z.shard_elems), c1 = c0 + 1 + (size_t)(rng_uniform(&s) * 5000.0);
        if (c1 > z.shard_elems) c1 = z.shard_elems;
        for (int k = 0; k < z.ntensors; k++) {
            const ZeroTensor *t = &z.t[k];
            int pieces = update_piece_count(t->shard_offset, t->layers, t->chunk, c0, c1);
            for (int i = 0; i < pieces; i++) {
                UpdatePiece p;
                if (!update_piece(t->shard_offset, t->layers, t->chunk, t->slice, t->chunk, c0, c1, i, &p)) continue;
                mismatched += t->shard_offset + p.grad_at != c0 + p.q;
            }
        }
    }
    CHECK(mismatched == 0, "%zu update pieces whose compact shard index is not the state's", mismatched);
    free(full); free(shard); free(slot);
}

static long sum_over_ranks(const void *ctx, long v) { return pg_sum_long((const ProcessGroup *)ctx, v); }

// -y 1 under ZeRO: every rank writes its state file of steps 3 and 6 (rank 0 the model too),
// the last rank's file of step 6 is then corrupted, and every rank must resume from step 3:
// a checkpoint counts only when it is intact on all of them (with one rank, step 6 is)
// This rank's training state of step: 10 optimizer elements, all zero (the caller frees m, v).
static TrainState rank_state(int step) {
    TrainState s;
    memset(&s, 0, sizeof s);
    s.n = 10;
    s.m = (float *)xcalloc(s.n, sizeof(float));
    s.v = (float *)xcalloc(s.n, sizeof(float));
    s.world_size = g_pg.world;
    s.rank = g_pg.rank;
    s.step = step;
    s.loader_pos_bytes = 24;
    return s;
}

static void test_resume_pick_all_ranks(void) {
    char dir[64], mp[4096], sp[4096];
    snprintf(dir, sizeof dir, "build/test_distributed_resume_np%d", g_pg.world);
    mkdir(dir, 0755);
    GPT2Config c = {16, 300, 384, 2, 2, 24};
    float *params = (float *)xcalloc(gpt2_num_params(&c), sizeof(float));
    for (int step = 3; step <= 6; step += 3) {
        path_join(mp, sizeof mp, dir, "model_%08d.bin", step);
        TrainState s = rank_state(step);
        if (g_pg.rank == 0) s.model_crc = gpt2_checkpoint_write(mp, &c, params, 0);
        char sn[64];
        run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, g_pg.rank);
        path_join(sp, sizeof sp, dir, "%s", sn);
        train_state_write(sp, &s);
        free(s.m);
        free(s.v);
    }
    pg_sum_long(&g_pg, 0);  // every file written before any rank looks
    if (g_pg.world > 1 && g_pg.rank == g_pg.world - 1) {
        size_t len;
        uint8_t *buf = xread_file(sp, &len);  // this rank's state of step 6
        buf[len - 1] ^= 1;
        FILE *f = xfopen(sp, "wb");
        xfwrite(buf, 1, len, f, sp);
        xfclose(f, sp);
        free(buf);
    }
    pg_sum_long(&g_pg, 0);
    fflush(stderr);  // the corrupt rank's warning about step 6 is expected: kept off the output
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    RunDir rd;
    run_dir_open(&rd, dir, g_pg.rank, 0);
    int got = resume_pick_step(&rd, g_pg.rank, 1, g_pg.world > 1 ? sum_over_ranks : NULL, &g_pg);
    close(rd.fd);
    fflush(stderr);
    dup2(saved, 2);
    close(null);
    close(saved);
    int want = g_pg.world > 1 ? 3 : 6;
    CHECK(got == want, "-y 1 picked step %d, want %d (the last rank's step 6 is corrupt)", got, want);
    free(params);
}

// -nk 1 under ZeRO, as the trainer does it: every rank commits its shard, then rank 0 its model
// and state (slowly here: a large file's fsync), and every rank prunes at once after its own
// part. The ranks must make the same collective calls, about the same checkpoints: each ends
// with only step 6 of its files (a rank that listed the directory before rank 0's state of
// step 6 was there would pair its sums with other steps, or wait for ever)
static void test_prune_all_ranks(void) {
    char dir[64];
    snprintf(dir, sizeof dir, "build/test_distributed_prune_np%d", g_pg.world);
    if (g_pg.rank == 0) {  // fresh: an earlier run's files would be set aside, not pruned
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) CHECK(0, "%s", cmd);
        mkdir(dir, 0755);
    }
    pg_sum_long(&g_pg, 0);
    RunDir rd;
    run_dir_open(&rd, dir, g_pg.rank, 0);
    GPT2Config c = {16, 300, 384, 2, 2, 24};
    float *params = (float *)xcalloc(gpt2_num_params(&c), sizeof(float));
    alarm(60);  // a rank left waiting in a collective fails the test instead of hanging it
    for (int step = 2; step <= 6; step += 2) {
        TrainState s = rank_state(step);
        char mn[64], sn[64];
        run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, step, 0);
        run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, g_pg.rank);
        AtomicFile mf = {0}, sf;
        if (g_pg.rank == 0) {
            mf = run_dir_begin(&rd, mn);
            s.model_crc = gpt2_checkpoint_write_to(&mf, &c, params, 0);
        }
        sf = run_dir_begin(&rd, sn);
        train_state_write_to(&sf, &s);
        if (g_pg.rank != 0) run_dir_finish(&rd, &sf);
        pg_sum_long(&g_pg, 0);  // trainer_save_checkpoint's barrier
        if (g_pg.rank == 0) {
            usleep(200000);
            run_dir_finish_checkpoint(&rd, step, &mf, &sf);
        }
        free(s.m);
        free(s.v);
        run_dir_prune(&rd, 1, 0, g_pg.world > 1 ? sum_over_ranks : NULL, &g_pg);
    }
    alarm(0);
    for (int step = 2; step <= 6; step += 2) {
        char sn[64];
        run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, g_pg.rank);
        CHECK(run_dir_has(&rd, sn) == (step == 6), "rank %d: %s %s", g_pg.rank, sn,
              step == 6 ? "removed" : "kept past -nk 1");
    }
    run_dir_close(&rd);
    free(params);
}

// The ranks of one run share its -o: rank 0 holds the lock, and no other rank is refused
// (each process would be another holder to flock)
static void test_run_dir_lock_ranks(void) {
    char dir[64], lock_path[PATH_CAP];
    snprintf(dir, sizeof dir, "build/test_distributed_lock_np%d", g_pg.world);
    if (g_pg.rank == 0) mkdir(dir, 0755);
    pg_sum_long(&g_pg, 0);
    RunDir rd;
    run_dir_open(&rd, dir, g_pg.rank == 0 ? 0 : -1, g_pg.rank == 0);  // a refusal stops every rank: the case fails
    if (g_pg.rank == 0) run_dir_claim(&rd, 0, 0, NULL);
    pg_sum_long(&g_pg, 0);
    if (g_pg.rank > 0) {
        int fd = open(path_join(lock_path, sizeof lock_path, dir, RUN_LOCK_NAME), O_RDWR | O_CLOEXEC);
        CHECK(fd >= 0, "rank %d: no lock file %s", g_pg.rank, lock_path);
        if (fd >= 0) {
            CHECK(flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK, "rank %d: the lock of %s is not held",
                  g_pg.rank, dir);
            close(fd);
        }
    }
    pg_sum_long(&g_pg, 0);  // rank 0 holds the lock until the others have looked
}

int main(int argc, char **argv) {
    pg_init(&g_pg, &argc, &argv);
    mkdir("build", 0755);
    if (g_pg.rank == 0) printf("test_distributed: %d rank(s)%s\n", g_pg.world, g_pg.using_mpi ? " (MPI)" : "");
    run_case("data loader: rank parts == the single-process global batch", test_batch_split);
    run_case("sharded weights gathered into one checkpoint", test_checkpoint_gather);
    run_case("ZeRO slices: rank chunks tile the parameters, index map == gather", test_zero_slices);
    run_case("ZeRO-3: layers gathered from the shards == the model's slices", test_zero3_layer_gather);
    run_case("-y 1: the newest checkpoint intact on every rank", test_resume_pick_all_ranks);
    run_case("-o: rank 0 locks it for the run's ranks, none refused", test_run_dir_lock_ranks);
    run_case("-nk under ZeRO: the ranks prune the same checkpoints", test_prune_all_ranks);
    int failed = g_failed;
    if (g_pg.rank == 0) printf("%d passed, %d failed\n", g_passed, g_failed);
    pg_finalize(&g_pg);
    return failed ? 1 : 0;
}
