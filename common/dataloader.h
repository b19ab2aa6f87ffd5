// dataloader.h: reads token shards (docs/formats.md) into (inputs, targets) micro-batches.
//
// A dataset is a glob pattern of shard files, taken in sorted name order. Each shard is a
// header of 256 int32 (magic 20240520, version 1 = uint16 tokens or 2 = uint32 tokens,
// token count) followed by the tokens.
//
// Batching: a global batch is a window of B*T*world consecutive tokens of one shard (plus
// one more token for the last target); rank r takes tokens [r*B*T, (r+1)*B*T) of the
// window as inputs and the same range shifted by one as targets. Windows never cross a
// shard boundary: a shard of n tokens yields floor((n-1) / (B*T*world)) windows. An epoch
// visits every window of every shard once; then the next epoch starts.
//
// Shuffling: with shuffle=1 each epoch visits the shards in an order, and each shard's
// windows in an order, drawn from (seed, epoch) by a small deterministic generator
// (splitmix64), so every rank computes the same order. shuffle=0 is sequential.
//
// Position: dataloader_get_pos() returns a fixed-size POD that a checkpoint stores
// verbatim; dataloader_set_pos() on a fresh loader continues with exactly the batches the
// saved loader would have produced next. The position is global (identical on all ranks).
//
// I/O: shard headers are checked for all shards at init (magic, version, count against
// the file size, at least one global batch). The token ids of a shard are checked in
// constant memory the first time the shard is opened, or of all shards at once by
// dataloader_check_all_ids. Afterwards each batch reads only
// its own B*T+1 tokens (seek + read), so shards of any size cost no memory.
//
// Background reading: common/loader_thread.h runs the reads on a thread ahead of the
// trainer (--loader-threads 1); dataloader_next and dataloader_get_pos then go through it
// (bg below). data_s counts the seconds the caller spent in dataloader_next: reading, or
// waiting for the thread (the data stall).
//
// Test hook (common/test_hooks.h): GPT2_TEST_READ_DELAY_MS=N makes every read sleep N ms
// (a slow disk).
//
// Header-only C11 that also compiles as C++ (the GPU trainer includes it).
#ifndef COMMON_DATALOADER_H
#define COMMON_DATALOADER_H

#include "util.h"
#include "test_hooks.h"
#include <glob.h>

#define SHARD_MAGIC 20240520
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define DATALOADER_POS_MAGIC 0x31504c44 // "DLP1" little-endian

// Saved verbatim in checkpoints: fixed size, no pointers, no padding.
typedef struct {
    int64_t epoch;         // number of completed epochs
    int64_t shard_index;   // index into this epoch's shard order of the next batch's shard
    int64_t sample_index;  // index into that shard's window order of the next batch
    uint64_t seed;         // shuffle seed
    uint64_t dataset_hash; // fingerprint of the shard count and every shard's token count
    int64_t num_shards;
    int32_t magic;         // DATALOADER_POS_MAGIC
    int32_t B, T, world;   // the window geometry the indices refer to
    int32_t shuffle;
    int32_t reserved;      // zero
} DataLoaderPos;

#ifdef __cplusplus
static_assert(sizeof(DataLoaderPos) == 72, "DataLoaderPos must be 72 bytes");
#else
_Static_assert(sizeof(DataLoaderPos) == 72, "DataLoaderPos must be 72 bytes");
#endif

typedef struct DataLoader {
    // configuration
    int B, T, rank, world, shuffle, vocab_size;
    uint64_t seed;
    int64_t window; // B*T*world: tokens per global batch, not counting the extra target
    char *pattern;
    // shards, in sorted name order
    int num_shards;
    char **paths;
    int64_t *ntok;       // tokens in each shard
    int *tok_bytes;      // 2 (version 1) or 4 (version 2)
    int64_t *nwin;       // global batches in each shard
    uint8_t *validated;  // token ids checked
    int64_t batches_per_epoch;
    uint64_t dataset_hash;
    // position of the next batch
    int64_t epoch, shard_index, sample_index;
    // cached orders (shuffle only)
    int64_t order_epoch;     // epoch that shard_order belongs to, -1 = none
    int32_t *shard_order;    // num_shards entries
    int64_t win_epoch;       // (epoch, shard) that win_order belongs to, -1 = none
    int win_shard;
    uint32_t *win_order;
    int64_t win_cap;
    // the open shard
    int cur_shard; // -1 = none
    FILE *f;
    uint8_t *buf;  // (B*T+1) tokens of up to 4 bytes
    // background reading (common/loader_thread.h): NULL, or the thread's state and its calls
    void *bg;
    void (*bg_next)(struct DataLoader *dl, int *inputs, int *targets);
    DataLoaderPos (*bg_pos)(const struct DataLoader *dl);
    void (*bg_stop)(struct DataLoader *dl);
    double data_s;       // seconds spent in dataloader_next (reading, or waiting for the thread)
    int read_delay_ms;   // test hook GPT2_TEST_READ_DELAY_MS
} DataLoader;

// ---------------------------------------------------------------------------------------
// deterministic random numbers (splitmix64)

static inline uint64_t dl_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Combine a hash with one more value.
static inline uint64_t dl_mix(uint64_t h, uint64_t v) {
    uint64_t s = h ^ (v * 0xD6E8FEB86659FD93ull + 0x632BE59BD9B4E019ull);
    return dl_splitmix64(&s);
}

// Uniform in [0, n), n > 0, without modulo bias.
static inline uint64_t dl_uniform(uint64_t *state, uint64_t n) {
    uint64_t threshold = (0 - n) % n; // 2^64 mod n
    for (;;) {
        uint64_t x = dl_splitmix64(state);
        if (x >= threshold) return x % n;
    }
}

// ---------------------------------------------------------------------------------------
// shard checks

static inline int dl_cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Reads and checks the header of shard i against its file size; fills ntok/tok_bytes/nwin.
static inline void dl_check_header(DataLoader *dl, int i) {
    const char *path = dl->paths[i];
    struct stat st;
    if (stat(path, &st) != 0) fatal("cannot stat data shard %s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fatal("data shard %s is not a regular file", path);
    FILE *f = fopen(path, "rb");
    if (!f) fatal("cannot open data shard %s: %s", path, strerror(errno));
    int64_t size = xfile_size(f, path);
    if (size < SHARD_HEADER_BYTES)
        fatal("data shard %s is truncated: %lld bytes, shorter than the %d-byte header",
              path, (long long)size, SHARD_HEADER_BYTES);
    int32_t header[SHARD_HEADER_INTS];
    if (fread(header, sizeof(int32_t), SHARD_HEADER_INTS, f) != SHARD_HEADER_INTS)
        fatal("cannot read the header of data shard %s: %s", path,
              ferror(f) ? strerror(errno) : "short read");
    fclose(f);
    if (header[0] != SHARD_MAGIC)
        fatal("data shard %s has bad magic %d (expected %d): not a token shard", path,
              header[0], SHARD_MAGIC);
    if (header[1] != 1 && header[1] != 2)
        fatal("data shard %s has unsupported version %d (expected 1 = uint16 tokens or "
              "2 = uint32 tokens)", path, header[1]);
    int tb = header[1] == 1 ? 2 : 4;
    int64_t n = (int64_t)(uint32_t)header[2];
    int64_t payload = size - SHARD_HEADER_BYTES;
    if (payload != n * tb)
        fatal("data shard %s: header says %lld tokens (%lld bytes) but the file holds %lld "
              "bytes after the header (truncated or corrupt)", path, (long long)n,
              (long long)(n * tb), (long long)payload);
    if (n < dl->window + 1)
        fatal("data shard %s has %lld tokens, fewer than one global batch needs "
              "(B*T*world+1 = %d*%d*%d+1 = %lld): use a smaller batch size or sequence "
              "length, or a bigger shard", path, (long long)n, dl->B, dl->T, dl->world,
              (long long)(dl->window + 1));
    dl->ntok[i] = n;
    dl->tok_bytes[i] = tb;
    dl->nwin[i] = (n - 1) / dl->window;
}

// Streams all token ids of the open shard i (constant memory) and checks them.
static inline void dl_validate_ids(DataLoader *dl, int i) {
    const char *path = dl->paths[i];
    const int64_t chunk = 1 << 18; // tokens per read
    uint8_t *tmp = (uint8_t *)xmalloc((size_t)chunk * 4);
    int tb = dl->tok_bytes[i];
    if (fseeko(dl->f, SHARD_HEADER_BYTES, SEEK_SET) != 0)
        fatal("cannot seek in data shard %s: %s", path, strerror(errno));
    for (int64_t done = 0; done < dl->ntok[i];) {
        int64_t n = dl->ntok[i] - done < chunk ? dl->ntok[i] - done : chunk;
        size_t got = fread(tmp, (size_t)tb, (size_t)n, dl->f);
        if (got != (size_t)n)
            fatal("cannot read data shard %s at token %lld: %s", path,
                  (long long)(done + (int64_t)got),
                  ferror(dl->f) ? strerror(errno) : "file shorter than its header says");
        for (int64_t k = 0; k < n; k++) {
            uint32_t id;
            if (tb == 2) { uint16_t v; memcpy(&v, tmp + 2 * k, 2); id = v; }
            else memcpy(&id, tmp + 4 * k, 4);
            if (id >= (uint32_t)dl->vocab_size)
                fatal("data shard %s: token %lld has id %u, not below the vocabulary size %d",
                      path, (long long)(done + k), id, dl->vocab_size);
        }
        done += n;
    }
    free(tmp);
    dl->validated[i] = 1;
}

static inline void dl_open_shard(DataLoader *dl, int i) {
    if (dl->cur_shard == i) return;
    if (dl->f) fclose(dl->f);
    dl->f = fopen(dl->paths[i], "rb");
    if (!dl->f) fatal("cannot open data shard %s: %s", dl->paths[i], strerror(errno));
    dl->cur_shard = i;
    if (!dl->validated[i]) dl_validate_ids(dl, i);
}

// ---------------------------------------------------------------------------------------
// orders

// Which shard (file index) is at position idx of the epoch's order.
static inline int dl_shard_at(DataLoader *dl, int64_t epoch, int64_t idx) {
    if (!dl->shuffle) return (int)idx;
    if (dl->order_epoch != epoch) {
        uint64_t s = dl_mix(dl_mix(dl->seed, 0x5348415244ull /* "SHARD" */), (uint64_t)epoch);
        for (int k = 0; k < dl->num_shards; k++) dl->shard_order[k] = k;
        for (int k = dl->num_shards - 1; k > 0; k--) {
            int j = (int)dl_uniform(&s, (uint64_t)k + 1);
            int32_t t = dl->shard_order[k];
            dl->shard_order[k] = dl->shard_order[j];
            dl->shard_order[j] = t;
        }
        dl->order_epoch = epoch;
    }
    return dl->shard_order[idx];
}

// Which window of shard `shard` is at position idx of the epoch's window order.
static inline int64_t dl_window_at(DataLoader *dl, int64_t epoch, int shard, int64_t idx) {
    if (!dl->shuffle) return idx;
    if (dl->win_epoch != epoch || dl->win_shard != shard) {
        int64_t n = dl->nwin[shard];
        if (n > dl->win_cap) {
            dl->win_order = (uint32_t *)xrealloc(dl->win_order, (size_t)n * sizeof(uint32_t));
            dl->win_cap = n;
        }
        uint64_t s = dl_mix(dl_mix(dl_mix(dl->seed, 0x57494e444f57ull /* "WINDOW" */),
                                   (uint64_t)epoch), (uint64_t)shard);
        for (int64_t k = 0; k < n; k++) dl->win_order[k] = (uint32_t)k;
        for (int64_t k = n - 1; k > 0; k--) {
            int64_t j = (int64_t)dl_uniform(&s, (uint64_t)k + 1);
            uint32_t t = dl->win_order[k];
            dl->win_order[k] = dl->win_order[j];
            dl->win_order[j] = t;
        }
        dl->win_epoch = epoch;
        dl->win_shard = shard;
    }
    return (int64_t)dl->win_order[idx];
}

// ---------------------------------------------------------------------------------------
// API

static inline void dataloader_init(DataLoader *dl, const char *pattern, int B, int T, int rank,
                            int world, int shuffle, uint64_t seed, int vocab_size) {
    memset(dl, 0, sizeof(*dl));
    if (B <= 0 || T <= 0) fatal("data loader: batch size B=%d and sequence length T=%d must be positive", B, T);
    if (world <= 0 || rank < 0 || rank >= world)
        fatal("data loader: rank %d is not in [0, world size %d)", rank, world);
    if (vocab_size <= 0) fatal("data loader: vocab_size %d must be positive", vocab_size);
    if ((int64_t)B * T >= ((int64_t)1 << 31))
        fatal("data loader: B*T = %lld is too large", (long long)B * T);
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world;
    dl->shuffle = shuffle ? 1 : 0;
    dl->seed = seed;
    dl->vocab_size = vocab_size;
    dl->window = (int64_t)B * T * world;
    dl->pattern = xstrdup(pattern);

    glob_t g;
    memset(&g, 0, sizeof(g));
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0))
        fatal("no data shards match the pattern '%s'", pattern);
    if (rc != 0) fatal("cannot expand the data pattern '%s' (glob error %d)", pattern, rc);
    if (g.gl_pathc > 0x7fffffff) fatal("too many data shards match '%s'", pattern);
    dl->num_shards = (int)g.gl_pathc;
    dl->paths = (char **)xcalloc((size_t)dl->num_shards, sizeof(char *));
    for (int i = 0; i < dl->num_shards; i++) dl->paths[i] = xstrdup(g.gl_pathv[i]);
    globfree(&g);
    // sort bytewise so the order does not depend on the locale (all ranks agree)
    qsort(dl->paths, (size_t)dl->num_shards, sizeof(char *), dl_cmp_str);

    dl->ntok = (int64_t *)xcalloc((size_t)dl->num_shards, sizeof(int64_t));
    dl->tok_bytes = (int *)xcalloc((size_t)dl->num_shards, sizeof(int));
    dl->nwin = (int64_t *)xcalloc((size_t)dl->num_shards, sizeof(int64_t));
    dl->validated = (uint8_t *)xcalloc((size_t)dl->num_shards, 1);
    dl->dataset_hash = dl_mix(0x44415441ull, (uint64_t)dl->num_shards);
    for (int i = 0; i < dl->num_shards; i++) {
        dl_check_header(dl, i);
        if (dl->nwin[i] > 0xffffffffll)
            fatal("data shard %s has too many windows (%lld)", dl->paths[i], (long long)dl->nwin[i]);
        dl->batches_per_epoch += dl->nwin[i];
        dl->dataset_hash = dl_mix(dl_mix(dl->dataset_hash, (uint64_t)dl->ntok[i]),
                                  (uint64_t)dl->tok_bytes[i]);
    }
    dl->shard_order = (int32_t *)xcalloc((size_t)dl->num_shards, sizeof(int32_t));
    dl->order_epoch = -1;
    dl->win_epoch = -1;
    dl->win_shard = -1;
    dl->cur_shard = -1;
    dl->buf = (uint8_t *)xmalloc(((size_t)B * T + 1) * 4);
    dl->epoch = dl->shard_index = dl->sample_index = 0;
    dl->read_delay_ms = test_hooks()->read_delay_ms;
}

// Reads the batch at the position and advances it (the thread's read, or the caller's).
static inline void dataloader_read(DataLoader *dl, int *inputs, int *targets) {
    if (dl->read_delay_ms > 0) {
        struct timespec ts = {dl->read_delay_ms / 1000, (long)(dl->read_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    int shard = dl_shard_at(dl, dl->epoch, dl->shard_index);
    dl_open_shard(dl, shard);
    int64_t w = dl_window_at(dl, dl->epoch, shard, dl->sample_index);
    int64_t bt = (int64_t)dl->B * dl->T;
    int64_t first = w * dl->window + (int64_t)dl->rank * bt; // token index in the shard
    int tb = dl->tok_bytes[shard];
    const char *path = dl->paths[shard];
    if (fseeko(dl->f, (off_t)(SHARD_HEADER_BYTES + first * tb), SEEK_SET) != 0)
        fatal("cannot seek in data shard %s: %s", path, strerror(errno));
    size_t got = fread(dl->buf, (size_t)tb, (size_t)(bt + 1), dl->f);
    if (got != (size_t)(bt + 1))
        fatal("cannot read data shard %s at token %lld: %s", path, (long long)first,
              ferror(dl->f) ? strerror(errno) : "file shorter than expected (changed on disk?)");
    for (int64_t k = 0; k <= bt; k++) {
        uint32_t id;
        if (tb == 2) { uint16_t v; memcpy(&v, dl->buf + 2 * k, 2); id = v; }
        else memcpy(&id, dl->buf + 4 * k, 4);
        if (id >= (uint32_t)dl->vocab_size) // the file changed since it was validated
            fatal("data shard %s: token %lld has id %u, not below the vocabulary size %d",
                  path, (long long)(first + k), id, dl->vocab_size);
        if (k < bt) inputs[k] = (int)id;
        if (k > 0) targets[k - 1] = (int)id;
    }
    // advance to the next global batch
    if (++dl->sample_index >= dl->nwin[shard]) {
        dl->sample_index = 0;
        if (++dl->shard_index >= dl->num_shards) {
            dl->shard_index = 0;
            dl->epoch++;
        }
    }
}

// The next micro-batch: read now, or (background reading) taken from the thread's ring.
static inline void dataloader_next(DataLoader *dl, int *inputs, int *targets) {
    double t0 = wall_seconds();
    if (dl->bg) dl->bg_next(dl, inputs, targets);
    else dataloader_read(dl, inputs, targets);
    dl->data_s += wall_seconds() - t0;
}

// Checks the token ids of every shard now (the trainer's start), instead of when each is
// first read; verbose: say what is checked and how long it took.
static inline void dataloader_check_all_ids(DataLoader *dl, int verbose) {
    double t0 = wall_seconds();
    int64_t bytes = 0;
    for (int i = 0; i < dl->num_shards; i++) {
        bytes += dl->ntok[i] * dl->tok_bytes[i];
        if (!dl->validated[i]) dl_open_shard(dl, i);
    }
    if (dl->f) fclose(dl->f);
    dl->f = NULL;
    dl->cur_shard = -1;
    if (verbose && wall_seconds() - t0 > 0.5)
        printf("data: token ids of %d shard(s) of '%s' checked (%.2f GB) in %.1f s\n", dl->num_shards, dl->pattern,
               (double)bytes / 1e9, wall_seconds() - t0);
}

static inline void dataloader_reset(DataLoader *dl) {
    if (dl->bg) fatal("internal: dataloader_reset on '%s' while its thread reads ahead", dl->pattern);
    dl->epoch = dl->shard_index = dl->sample_index = 0;
}

static inline int64_t dataloader_batches_per_epoch(const DataLoader *dl) {
    return dl->batches_per_epoch;
}

// The position of the next batch dataloader_read reads.
static inline DataLoaderPos dl_read_pos(const DataLoader *dl) {
    DataLoaderPos p;
    memset(&p, 0, sizeof(p));
    p.epoch = dl->epoch;
    p.shard_index = dl->shard_index;
    p.sample_index = dl->sample_index;
    p.seed = dl->seed;
    p.dataset_hash = dl->dataset_hash;
    p.num_shards = dl->num_shards;
    p.magic = DATALOADER_POS_MAGIC;
    p.B = dl->B; p.T = dl->T; p.world = dl->world;
    p.shuffle = dl->shuffle;
    return p;
}

// The position of the next batch the caller will get (with background reading: after
// the last batch taken, not the thread's read-ahead).
static inline DataLoaderPos dataloader_get_pos(const DataLoader *dl) {
    return dl->bg ? dl->bg_pos(dl) : dl_read_pos(dl);
}

static inline void dataloader_set_pos(DataLoader *dl, DataLoaderPos p) {
    const char *pat = dl->pattern;
    if (dl->bg) fatal("internal: dataloader_set_pos on '%s' while its thread reads ahead", pat);
    if (p.magic != DATALOADER_POS_MAGIC)
        fatal("data loader position for '%s' is corrupt (bad magic 0x%08x)", pat, (unsigned)p.magic);
    if (p.B != dl->B || p.T != dl->T || p.world != dl->world)
        fatal("data loader position for '%s' was saved with B=%d T=%d world=%d, but this run "
              "uses B=%d T=%d world=%d: resume with the same batch size, sequence length and "
              "number of processes", pat, p.B, p.T, p.world, dl->B, dl->T, dl->world);
    if (p.shuffle != dl->shuffle)
        fatal("data loader position for '%s' was saved with shuffle=%d, but this run uses "
              "shuffle=%d", pat, p.shuffle, dl->shuffle);
    if (p.num_shards != dl->num_shards || p.dataset_hash != dl->dataset_hash)
        fatal("data loader position for '%s' does not fit this dataset (saved for %lld shards "
              "with other token counts; now %d shards): the shards changed since the "
              "checkpoint", pat, (long long)p.num_shards, dl->num_shards);
    // an epoch count no run reaches (2^40) keeps dl->epoch++ far from overflow
    if (p.epoch < 0 || p.epoch > ((int64_t)1 << 40) || p.shard_index < 0 || p.shard_index >= dl->num_shards ||
        p.sample_index < 0)
        fatal("data loader position for '%s' is out of range (epoch %lld, shard %lld, sample %lld)",
              pat, (long long)p.epoch, (long long)p.shard_index, (long long)p.sample_index);
    if (p.seed != dl->seed) {
        dl->seed = p.seed; // the saved run's shuffle order
        dl->order_epoch = -1;
        dl->win_epoch = -1;
    }
    int shard = dl_shard_at(dl, p.epoch, p.shard_index);
    if (p.sample_index >= dl->nwin[shard])
        fatal("data loader position for '%s' is out of range: sample %lld of shard %s, which "
              "has %lld batches", pat, (long long)p.sample_index, dl->paths[shard],
              (long long)dl->nwin[shard]);
    dl->epoch = p.epoch;
    dl->shard_index = p.shard_index;
    dl->sample_index = p.sample_index;
}

static inline void dataloader_free(DataLoader *dl) {
    if (dl->bg) dl->bg_stop(dl);
    if (dl->f) fclose(dl->f);
    for (int i = 0; i < dl->num_shards; i++) free(dl->paths[i]);
    free(dl->paths);
    free(dl->ntok);
    free(dl->tok_bytes);
    free(dl->nwin);
    free(dl->validated);
    free(dl->shard_order);
    free(dl->win_order);
    free(dl->buf);
    free(dl->pattern);
    memset(dl, 0, sizeof(*dl));
    dl->cur_shard = -1;
}

#endif // COMMON_DATALOADER_H
