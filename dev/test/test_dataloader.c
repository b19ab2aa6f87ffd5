// test_dataloader.c: tests of common/dataloader.h on small synthetic shards.
//
// Build and run (from the repo root):
//   mkdir -p build && gcc -std=c11 -O1 -g -Wall -Wextra -fsanitize=address,undefined
//       -o build/test_dataloader dev/test/test_dataloader.c && ./build/test_dataloader
//
// Shards are written into a temporary directory under build/ and removed afterwards.
// Failure cases run in forked children; the parent checks the exit status and stderr.
#include "testutil.h"
#include "../../common/dataloader.h"
#include "../../common/loader_thread.h"
#include <dirent.h>

static char g_dir[512];

// ---------------------------------------------------------------------------------------
// synthetic shards: token i of shard s is tok(s, i), unique within a dataset

#define VOCAB 50257
static uint32_t tok(int s, int64_t i) { return (uint32_t)(s * 1000 + i); }

static char *path_in(const char *name) {
    char *p = (char *)xmalloc(strlen(g_dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", g_dir, name);
    return p;
}

// Writes a shard with a custom header (magic, version, count) and ntok tokens of the
// given width (2 or 4 bytes); the tokens are tok(s, i) unless bad_pos >= 0, where bad_id
// is stored instead.
static void write_shard_raw(const char *name, int32_t magic, int32_t version, int32_t count,
                            int s, int64_t ntok, int width, int64_t bad_pos, uint32_t bad_id) {
    char *p = path_in(name);
    FILE *f = xfopen(p, "wb");
    int32_t header[SHARD_HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = magic; header[1] = version; header[2] = count;
    xfwrite(header, sizeof(header), 1, f, p);
    for (int64_t i = 0; i < ntok; i++) {
        uint32_t v = i == bad_pos ? bad_id : tok(s, i);
        if (width == 2) { uint16_t h = (uint16_t)v; xfwrite(&h, 2, 1, f, p); }
        else xfwrite(&v, 4, 1, f, p);
    }
    xfclose(f, p);
    free(p);
}

static void write_shard(const char *name, int s, int64_t ntok) {
    write_shard_raw(name, SHARD_MAGIC, 1, (int32_t)ntok, s, ntok, 2, -1, 0);
}

static void remove_all(const char *prefix) {
    DIR *d = opendir(g_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        char *p = path_in(e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) rmdir(p);
        else remove(p);
        free(p);
    }
    closedir(d);
}

// The good dataset: shards "good_0.bin" .. "good_2.bin" (names sort in shard order).
static const int64_t GOOD_NTOK[3] = {101, 150, 61};
static char *good_pattern(void) { return path_in("good_*.bin"); }

// For the sequential check: decode a token back to (shard, index).
static void untok(uint32_t v, int *s, int64_t *i) { *s = (int)(v / 1000); *i = v % 1000; }

// ---------------------------------------------------------------------------------------
// cases

static void t_sequential(void) {
    char *pat = good_pattern();
    int B = 2, T = 5;
    DataLoader dl;
    dataloader_init(&dl, pat, B, T, 0, 1, 0, 1, VOCAB);
    // windows of 10 tokens: (101-1)/10=10, (150-1)/10=14, (61-1)/10=6
    CHECK(dataloader_batches_per_epoch(&dl) == 30, "got %lld", (long long)dataloader_batches_per_epoch(&dl));
    int in[10], tg[10];
    for (int epoch = 0; epoch < 3; epoch++) {
        for (int s = 0; s < 3; s++) {
            int64_t nw = (GOOD_NTOK[s] - 1) / 10;
            for (int64_t w = 0; w < nw; w++) {
                dataloader_next(&dl, in, tg);
                for (int k = 0; k < B * T; k++) {
                    CHECK(in[k] == (int)tok(s, w * 10 + k), "epoch %d shard %d win %lld k %d: input %d",
                          epoch, s, (long long)w, k, in[k]);
                    CHECK(tg[k] == (int)tok(s, w * 10 + k + 1), "epoch %d shard %d win %lld k %d: target %d",
                          epoch, s, (long long)w, k, tg[k]);
                }
            }
        }
        DataLoaderPos p = dataloader_get_pos(&dl);
        CHECK(p.epoch == epoch + 1 && p.shard_index == 0 && p.sample_index == 0,
              "after epoch %d: pos %lld/%lld/%lld", epoch, (long long)p.epoch,
              (long long)p.shard_index, (long long)p.sample_index);
    }
    // reset returns to the start of epoch 0
    dataloader_reset(&dl);
    dataloader_next(&dl, in, tg);
    CHECK(in[0] == (int)tok(0, 0) && tg[0] == (int)tok(0, 1), "after reset: %d %d", in[0], tg[0]);
    dataloader_free(&dl);
    free(pat);
}

// The ranks' parts of every global batch are disjoint and together equal the world=1
// batch of the same window (B*world rows).
static void check_ranks(int world, int shuffle) {
    char *pat = good_pattern();
    int B = 1, T = 3; // window = 3*world tokens
    DataLoader ref;
    dataloader_init(&ref, pat, B * world, T, 0, 1, shuffle, 7, VOCAB);
    DataLoader *dls = (DataLoader *)xcalloc((size_t)world, sizeof(DataLoader));
    for (int r = 0; r < world; r++) dataloader_init(&dls[r], pat, B, T, r, world, shuffle, 7, VOCAB);
    int64_t nb = dataloader_batches_per_epoch(&ref);
    CHECK(nb == dataloader_batches_per_epoch(&dls[0]), "batches %lld vs %lld", (long long)nb,
          (long long)dataloader_batches_per_epoch(&dls[0]));
    int n = B * world * T;
    int *rin = (int *)xmalloc(sizeof(int) * (size_t)n), *rtg = (int *)xmalloc(sizeof(int) * (size_t)n);
    int *in = (int *)xmalloc(sizeof(int) * (size_t)(B * T)), *tg = (int *)xmalloc(sizeof(int) * (size_t)(B * T));
    for (int64_t b = 0; b < 2 * nb + 3; b++) {
        dataloader_next(&ref, rin, rtg);
        for (int r = 0; r < world; r++) {
            dataloader_next(&dls[r], in, tg);
            for (int k = 0; k < B * T; k++) {
                CHECK(in[k] == rin[r * B * T + k], "world %d batch %lld rank %d k %d", world, (long long)b, r, k);
                CHECK(tg[k] == rtg[r * B * T + k], "world %d batch %lld rank %d k %d (target)", world, (long long)b, r, k);
            }
        }
        if (g_case_failed) break;
    }
    for (int r = 0; r < world; r++) dataloader_free(&dls[r]);
    dataloader_free(&ref);
    free(dls); free(rin); free(rtg); free(in); free(tg);
    free(pat);
}

static void t_ranks(void) {
    check_ranks(2, 0);
    check_ranks(3, 0);
    check_ranks(2, 1);
    check_ranks(3, 1);
}

// The sequence of first input tokens of n batches.
static int64_t *first_tokens(uint64_t seed, int shuffle, int64_t n) {
    char *pat = good_pattern();
    DataLoader dl;
    dataloader_init(&dl, pat, 2, 5, 0, 1, shuffle, seed, VOCAB);
    int in[10], tg[10];
    int64_t *out = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)n);
    for (int64_t b = 0; b < n; b++) {
        dataloader_next(&dl, in, tg);
        out[b] = in[0];
        for (int k = 0; k < 10; k++) // a window is still consecutive tokens of one shard
            CHECK(in[k] == in[0] + k && tg[k] == in[0] + k + 1, "batch %lld not consecutive", (long long)b);
    }
    dataloader_free(&dl);
    free(pat);
    return out;
}

static void t_shuffle(void) {
    const int64_t nb = 30, n = 3 * nb;
    int64_t *a = first_tokens(1234, 1, n), *b = first_tokens(1234, 1, n), *c = first_tokens(99, 1, n);
    int64_t *seq = first_tokens(1234, 0, n);
    CHECK(memcmp(a, b, sizeof(int64_t) * (size_t)n) == 0, "same seed gave different orders");
    CHECK(memcmp(a, c, sizeof(int64_t) * (size_t)n) != 0, "different seeds gave the same order");
    CHECK(memcmp(a, seq, sizeof(int64_t) * (size_t)nb) != 0, "shuffled epoch equals sequential order");
    CHECK(memcmp(a, a + nb, sizeof(int64_t) * (size_t)nb) != 0, "epochs 0 and 1 have the same order");
    // every window exactly once per epoch: the sorted first tokens equal the sequential ones
    for (int e = 0; e < 3; e++) {
        for (int64_t w = 0; w < nb; w++) {
            int cnt = 0;
            for (int64_t k = 0; k < nb; k++) cnt += a[e * nb + k] == seq[w];
            CHECK(cnt == 1, "epoch %d: window starting with token %lld seen %d times", e, (long long)seq[w], cnt);
        }
        // windows of one shard come together (shard order, then window order)
        int seen_shards = 0, prev = -1;
        for (int64_t k = 0; k < nb; k++) {
            int s; int64_t i;
            untok((uint32_t)a[e * nb + k], &s, &i);
            if (s != prev) { seen_shards++; prev = s; }
        }
        CHECK(seen_shards == 3, "epoch %d: shards interleaved (%d runs)", e, seen_shards);
    }
    // the window order within a shard changes between epochs too (shard 1 has 14 windows)
    int64_t w0[14], w1[14];
    int n0 = 0, n1 = 0;
    for (int64_t k = 0; k < nb; k++) {
        if (a[k] / 1000 == 1 && n0 < 14) w0[n0++] = a[k];
        if (a[nb + k] / 1000 == 1 && n1 < 14) w1[n1++] = a[nb + k];
    }
    CHECK(n0 == 14 && n1 == 14 && memcmp(w0, w1, sizeof(w0)) != 0, "shard 1's window order is the same in epochs 0 and 1");
    free(a); free(b); free(c); free(seq);
    // the shard order is any permutation: over 60 epochs every shard comes first, and some
    // orders leave a shard in its place (a shuffle that never does is biased: Sattolo's)
    char *pat = good_pattern();
    DataLoader dl;
    dataloader_init(&dl, pat, 2, 4, 0, 1, 1, 1234, VOCAB);
    int first[3] = {0, 0, 0}, fixed = 0;
    for (int64_t e = 0; e < 60; e++) {
        first[dl_shard_at(&dl, e, 0)]++;
        int any = 0;
        for (int k = 0; k < 3; k++) any |= dl_shard_at(&dl, e, k) == k;
        fixed += any;
    }
    CHECK(first[0] && first[1] && first[2], "over 60 epochs the first shard was 0/1/2 %d/%d/%d times", first[0],
          first[1], first[2]);
    CHECK(fixed > 0, "no epoch's shard order left a shard in its place (60 epochs; a uniform shuffle does in 2 of 3)");
    dataloader_free(&dl);
    free(pat);
}

// Run k batches, save, restore in a fresh loader (initialised with another seed, which
// the position overrides), and compare the next m batches (across epoch boundaries).
static void check_resume(int shuffle, int world, int64_t k, int64_t m) {
    char *pat = good_pattern();
    int B = 1, T = 4, bt = B * T;
    int in1[4], tg1[4], in2[4], tg2[4];
    for (int r = 0; r < world; r++) {
        DataLoader a, b;
        dataloader_init(&a, pat, B, T, r, world, shuffle, 42, VOCAB);
        for (int64_t i = 0; i < k; i++) dataloader_next(&a, in1, tg1);
        DataLoaderPos p = dataloader_get_pos(&a);
        // through bytes, as a checkpoint would store it
        unsigned char bytes[sizeof(DataLoaderPos)];
        memcpy(bytes, &p, sizeof(p));
        DataLoaderPos q;
        memcpy(&q, bytes, sizeof(q));
        dataloader_init(&b, pat, B, T, r, world, shuffle, 4242, VOCAB);
        dataloader_set_pos(&b, q);
        for (int64_t i = 0; i < m; i++) {
            dataloader_next(&a, in1, tg1);
            dataloader_next(&b, in2, tg2);
            CHECK(memcmp(in1, in2, sizeof(int) * (size_t)bt) == 0 && memcmp(tg1, tg2, sizeof(int) * (size_t)bt) == 0,
                  "shuffle %d world %d rank %d: resumed after %lld batches, batch %lld differs",
                  shuffle, world, r, (long long)k, (long long)i);
        }
        DataLoaderPos pa = dataloader_get_pos(&a), pb = dataloader_get_pos(&b);
        CHECK(memcmp(&pa, &pb, sizeof(pa)) == 0, "positions differ after resume");
        dataloader_free(&a);
        dataloader_free(&b);
    }
    free(pat);
}

static void t_resume(void) {
    // windows of 4 tokens: 25 + 37 + 15 = 77 batches per epoch (world 1)
    const int64_t ks[] = {0, 1, 24, 25, 26, 76, 77, 78, 150};
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) check_resume(shuffle, 1, ks[i], 90);
    check_resume(1, 2, 30, 50);
    check_resume(0, 3, 20, 40);
}

// The loader thread (--loader-threads 1) against plain reads: the same batches in the same
// order, over epochs, with shuffling and ranks, started at a restored position; after each
// batch taken, the same position as the plain loader's (not the thread's read-ahead); and
// freed while it waits on a full ring, or mid-read. Run under ASan/UBSan.
static void check_thread(int shuffle, int world, int64_t start, int64_t m) {
    char *pat = good_pattern();
    int B = 1, T = 4, bt = B * T;
    int in1[4], tg1[4], in2[4], tg2[4];
    for (int r = 0; r < world; r++) {
        DataLoader a, b;
        dataloader_init(&a, pat, B, T, r, world, shuffle, 42, VOCAB);
        dataloader_init(&b, pat, B, T, r, world, shuffle, 42, VOCAB);
        for (int64_t i = 0; i < start; i++) dataloader_next(&a, in1, tg1);
        dataloader_set_pos(&b, dataloader_get_pos(&a));
        loader_thread_start(&b);
        DataLoaderPos pa = dataloader_get_pos(&a), pb = dataloader_get_pos(&b);
        CHECK(memcmp(&pa, &pb, sizeof pa) == 0, "shuffle %d world %d: the thread's position before any batch",
              shuffle, world);
        for (int64_t i = 0; i < m; i++) {
            dataloader_next(&a, in1, tg1);
            dataloader_next(&b, in2, tg2);
            CHECK(memcmp(in1, in2, sizeof(int) * (size_t)bt) == 0 && memcmp(tg1, tg2, sizeof(int) * (size_t)bt) == 0,
                  "shuffle %d world %d rank %d: batch %lld from the thread differs", shuffle, world, r, (long long)i);
            pa = dataloader_get_pos(&a);
            pb = dataloader_get_pos(&b);
            CHECK(memcmp(&pa, &pb, sizeof pa) == 0, "shuffle %d world %d rank %d: position after batch %lld differs",
                  shuffle, world, r, (long long)i);
        }
        dataloader_free(&a);
        dataloader_free(&b);  // the thread is stopped first, waiting on its full ring or mid-read
    }
    free(pat);
}

static void t_thread(void) {
    // 77 batches per epoch at world 1: three epochs cross every shard and epoch boundary
    check_thread(0, 1, 0, 240);
    check_thread(1, 1, 30, 240);
    check_thread(1, 2, 5, 100);
    check_thread(0, 3, 11, 60);
    // started and freed at once, and freed right after one batch
    char *pat = good_pattern();
    int in[4], tg[4];
    for (int k = 0; k < 20; k++) {
        DataLoader d;
        dataloader_init(&d, pat, 1, 4, 0, 1, 1, 7, VOCAB);
        loader_thread_start(&d);
        if (k % 2) dataloader_next(&d, in, tg);
        dataloader_free(&d);
    }
    free(pat);
}

static void t_version2(void) {
    // uint32 tokens with ids above 65535
    write_shard_raw("v2_0.bin", SHARD_MAGIC, 2, 50, 0, 50, 4, 7, 70000);
    char *pat = path_in("v2_*.bin");
    DataLoader dl;
    dataloader_init(&dl, pat, 1, 8, 0, 1, 0, 0, 100000);
    CHECK(dataloader_batches_per_epoch(&dl) == 6, "got %lld", (long long)dataloader_batches_per_epoch(&dl));
    int in[8], tg[8];
    dataloader_next(&dl, in, tg);
    CHECK(in[7] == 70000 && tg[6] == 70000 && in[6] == 6 && tg[7] == 8, "got %d %d %d %d", in[7], tg[6], in[6], tg[7]);
    dataloader_free(&dl);
    free(pat);
    remove_all("v2_");
}

// ---------------------------------------------------------------------------------------
// failure cases, in forked children


// Open the dataset and read two epochs, so every shard is opened and checked.
static void child_read_all(const char *pattern) {
    DataLoader dl;
    dataloader_init(&dl, pattern, 2, 4, 0, 1, 0, 0, VOCAB);
    int in[8], tg[8];
    for (int64_t b = 0; b < 2 * dataloader_batches_per_epoch(&dl); b++) dataloader_next(&dl, in, tg);
    dataloader_free(&dl);
}

// One bad shard "bad_1.bin" after a good "bad_0.bin"; the message must name bad_1.bin.
static void bad_case(const char *what, const char *needle, const char *needle2,
                     int32_t magic, int32_t version, int32_t count, int64_t ntok, int width,
                     int64_t bad_pos, uint32_t bad_id) {
    remove_all("bad_");
    write_shard("bad_0.bin", 0, 40);
    write_shard_raw("bad_1.bin", magic, version, count, 1, ntok, width, bad_pos, bad_id);
    char *pat = path_in("bad_*.bin");
    char *file = path_in("bad_1.bin");
    expect_failure(what, child_read_all, pat, file, needle, needle2);
    free(pat);
    free(file);
}

static void t_bad_magic(void) { bad_case("wrong magic", "bad magic", "20240519", 20240519, 1, 40, 40, 2, -1, 0); }
static void t_bad_version(void) { bad_case("wrong version", "unsupported version 3", NULL, SHARD_MAGIC, 3, 40, 40, 2, -1, 0); }
static void t_bad_count(void) { bad_case("count vs size", "header says 41 tokens", NULL, SHARD_MAGIC, 1, 41, 40, 2, -1, 0); }
static void t_bad_count_v2(void) { bad_case("count vs size (v2)", "header says 40 tokens", NULL, SHARD_MAGIC, 2, 40, 40, 2, -1, 0); }
static void t_bad_short(void) { bad_case("shorter than a batch", "fewer than one global batch", NULL, SHARD_MAGIC, 1, 8, 8, 2, -1, 0); }
static void t_bad_id(void) { bad_case("id >= vocab", "token 37 has id 60000", NULL, SHARD_MAGIC, 1, 40, 40, 2, 37, 60000); }
// the start-up check (dataloader_check_all_ids) finds an id no batch has read yet: V itself,
// in the last token of the shard
static void child_check_all(const char *pattern) {
    DataLoader dl;
    dataloader_init(&dl, pattern, 2, 4, 0, 1, 0, 0, VOCAB);
    dataloader_check_all_ids(&dl, 0);
    dataloader_free(&dl);
}
static void t_bad_id_at_start(void) {
    remove_all("bad_");
    write_shard("bad_0.bin", 0, 40);
    write_shard_raw("bad_1.bin", SHARD_MAGIC, 1, 40, 1, 40, 2, 39, VOCAB);
    char *pat = path_in("bad_*.bin"), *file = path_in("bad_1.bin");
    expect_failure("id == vocab, checked at start", child_check_all, pat, file, "token 39 has id 50257", NULL);
    free(pat);
    free(file);
}
static void t_bad_id_v2(void) { bad_case("id >= vocab (v2)", "token 0 has id 50257", NULL, SHARD_MAGIC, 2, 40, 40, 4, 0, 50257); }

// Reads two epochs, with the loader thread when arg is "1", saying on stderr after each
// batch taken that it was taken.
static void child_read_counting(const char *arg) {
    char *pat = path_in("bad_*.bin");
    DataLoader dl;
    dataloader_init(&dl, pat, 2, 4, 0, 1, 0, 0, VOCAB);
    if (arg[0] == '1') loader_thread_start(&dl);
    int in[8], tg[8];
    for (int64_t b = 0; b < 2 * dataloader_batches_per_epoch(&dl); b++) {
        dataloader_next(&dl, in, tg);
        fprintf(stderr, "taken\n");
    }
    dataloader_free(&dl);
    free(pat);
}

static int count_taken(const char *err) {
    int n = 0;
    for (const char *p = err; (p = strstr(p, "taken\n")) != NULL; p++) n++;
    return n;
}

// A bad shard read by the loader thread stops the reader when it takes the batch that
// read was for, with the same message from the same place: not earlier (its read-ahead).
static void t_bad_id_thread(void) {
    remove_all("bad_");
    write_shard("bad_0.bin", 0, 40);
    write_shard_raw("bad_1.bin", SHARD_MAGIC, 1, 40, 1, 40, 2, 37, 60000);
    char *plain, *thread;
    int rc0 = run_child(child_read_counting, "0", &plain), rc1 = run_child(child_read_counting, "1", &thread);
    CHECK(rc0 == 1 && rc1 == 1, "exit status %d without the thread, %d with it (expected 1, 1)", rc0, rc1);
    CHECK(count_taken(plain) == count_taken(thread) && count_taken(plain) > 0,
          "batches taken before the error: %d without the thread, %d with it", count_taken(plain),
          count_taken(thread));
    // the error lines (a leak report of the exiting process may follow them)
    char *e0 = strstr(plain, "error: "), *e1 = strstr(thread, "error: ");
    if (e0 && strchr(e0, '\n')) *strchr(e0, '\n') = 0;
    if (e1 && strchr(e1, '\n')) *strchr(e1, '\n') = 0;
    CHECK(e0 && e1 && strcmp(e0, e1) == 0 && strstr(e1, "bad_1.bin") && strstr(e1, "token 37 has id 60000"),
          "the messages differ or miss the shard: '%s' vs '%s'", e0 ? e0 : "", e1 ? e1 : "");
    free(plain);
    free(thread);
}

static void t_bad_truncated_header(void) {
    remove_all("bad_");
    write_shard("bad_0.bin", 0, 40);
    char *file = path_in("bad_1.bin");
    FILE *f = xfopen(file, "wb");
    int32_t h[25] = {SHARD_MAGIC, 1, 40};
    xfwrite(h, sizeof(h), 1, f, file);
    xfclose(f, file);
    char *pat = path_in("bad_*.bin");
    expect_failure("truncated header", child_read_all, pat, file, "truncated", NULL);
    free(pat);
    free(file);
}

static void t_bad_directory(void) {
    remove_all("bad_");
    write_shard("bad_0.bin", 0, 40);
    char *file = path_in("bad_1.bin");
    if (mkdir(file, 0755) != 0) fatal("mkdir %s: %s", file, strerror(errno));
    char *pat = path_in("bad_*.bin");
    expect_failure("a directory in the glob", child_read_all, pat, file, "not a regular file", NULL);
    free(pat);
    free(file);
}

static void t_no_match(void) {
    char *pat = path_in("nothing_here_*.bin");
    expect_failure("no glob match", child_read_all, pat, pat, "no data shards match", NULL);
    free(pat);
}

// set_pos refusals
static void child_pos_other_B(const char *pattern) {
    DataLoader a, b;
    dataloader_init(&a, pattern, 2, 4, 0, 1, 0, 0, VOCAB);
    dataloader_init(&b, pattern, 1, 4, 0, 1, 0, 0, VOCAB);
    dataloader_set_pos(&b, dataloader_get_pos(&a));
}
static void child_pos_out_of_range(const char *pattern) {
    DataLoader a;
    dataloader_init(&a, pattern, 2, 4, 0, 1, 0, 0, VOCAB);
    DataLoaderPos p = dataloader_get_pos(&a);
    p.sample_index = 1000;
    dataloader_set_pos(&a, p);
}
static void child_pos_shard_past_end(const char *pattern) {
    DataLoader a;
    dataloader_init(&a, pattern, 2, 4, 0, 1, 0, 0, VOCAB);
    DataLoaderPos p = dataloader_get_pos(&a);
    p.shard_index = 3;  // one past the last of the 3 shards
    dataloader_set_pos(&a, p);
}
static void child_pos_other_shuffle(const char *pattern) {
    DataLoader a, b;
    dataloader_init(&a, pattern, 2, 4, 0, 1, 1, 5, VOCAB);
    dataloader_init(&b, pattern, 2, 4, 0, 1, 0, 5, VOCAB);
    dataloader_set_pos(&b, dataloader_get_pos(&a));
}
static void child_pos_corrupt(const char *pattern) {
    DataLoader a;
    dataloader_init(&a, pattern, 2, 4, 0, 1, 0, 0, VOCAB);
    DataLoaderPos p = dataloader_get_pos(&a);
    p.magic = 0;
    dataloader_set_pos(&a, p);
}
static void child_pos_other_dataset(const char *pattern) {
    DataLoader a, b;
    dataloader_init(&a, pattern, 2, 4, 0, 1, 0, 0, VOCAB);
    char *other = path_in("good_0.bin"); // a dataset of one of the shards
    dataloader_init(&b, other, 2, 4, 0, 1, 0, 0, VOCAB);
    dataloader_set_pos(&b, dataloader_get_pos(&a));
}
static void child_pos_ok(const char *pattern) {
    DataLoader a, b;
    dataloader_init(&a, pattern, 2, 4, 0, 1, 1, 5, VOCAB);
    dataloader_init(&b, pattern, 2, 4, 0, 1, 1, 6, VOCAB);
    dataloader_set_pos(&b, dataloader_get_pos(&a));
    dataloader_free(&a);
    dataloader_free(&b);
}

static void t_set_pos_checks(void) {
    char *pat = good_pattern();
    expect_failure("pos with other B", child_pos_other_B, pat, "B=2", "B=1", NULL);
    expect_failure("pos out of range", child_pos_out_of_range, pat, "out of range", "sample 1000", NULL);
    expect_failure("corrupt pos", child_pos_corrupt, pat, "corrupt", NULL, NULL);
    expect_failure("pos one shard past the end", child_pos_shard_past_end, pat, "out of range", "shard 3", NULL);
    expect_failure("pos saved with shuffling, run without", child_pos_other_shuffle, pat, "shuffle=1", "shuffle=0",
                   NULL);
    expect_failure("pos of another dataset", child_pos_other_dataset, pat, "does not fit this dataset", NULL, NULL);
    char *err;
    int rc = run_child(child_pos_ok, pat, &err);
    CHECK(rc == 0 && err[0] == 0, "a valid position was refused (%d): %s", rc, err);
    free(err);
    free(pat);
}

int main(void) {
    struct stat st;
    if (stat("build", &st) != 0 && mkdir("build", 0755) != 0) fatal("cannot create build/: %s", strerror(errno));
    snprintf(g_dir, sizeof(g_dir), "build/test_dataloader_XXXXXX");
    if (!mkdtemp(g_dir)) fatal("mkdtemp %s: %s", g_dir, strerror(errno));
    for (int s = 0; s < 3; s++) {
        char name[32];
        snprintf(name, sizeof(name), "good_%d.bin", s);
        write_shard(name, s, GOOD_NTOK[s]);
    }

    run_case("sequential batches, epoch wrap, reset", t_sequential);
    run_case("rank split (world 2, 3)", t_ranks);
    run_case("shuffle determinism and coverage", t_shuffle);
    run_case("save/restore position", t_resume);
    run_case("loader thread: same batches and positions", t_thread);
    run_case("version 2 (uint32) shards", t_version2);
    run_case("bad shard: wrong magic", t_bad_magic);
    run_case("bad shard: wrong version", t_bad_version);
    run_case("bad shard: count vs file size", t_bad_count);
    run_case("bad shard: count vs file size (v2)", t_bad_count_v2);
    run_case("bad shard: truncated header", t_bad_truncated_header);
    run_case("bad shard: shorter than one batch", t_bad_short);
    run_case("bad shard: id >= vocab", t_bad_id);
    run_case("bad shard: id >= vocab (v2)", t_bad_id_v2);
    run_case("bad shard: id == vocab, checked at start", t_bad_id_at_start);
    run_case("bad shard read by the loader thread", t_bad_id_thread);
    run_case("bad shard: directory", t_bad_directory);
    run_case("no glob match", t_no_match);
    run_case("set_pos validation", t_set_pos_checks);

    remove_all("");
    rmdir(g_dir);
    return test_summary();
}
