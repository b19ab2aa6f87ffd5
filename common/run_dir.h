// run_dir.h: the one owner of a run directory (-o), shared by both trainers and every rank.
// It knows the exact names of the files a run writes, holds the directory open from the
// start (every file is reached through that descriptor, so a directory renamed during the
// run keeps its run's files together), never follows a symbolic link, writes every file by
// temporary name, fsync, rename and directory fsync, and is the only code that removes or
// renames anything there. The rules (docs/reliability.md):
// - A run owns model_%08d.bin, state_%08d.bin, state_%08d.rank%d.bin, each with ".tmp"
//   appended, main.log, metrics.jsonl and .lock. No other name is ever written or removed.
// - One run at a time: rank 0 holds an advisory lock on .lock for its whole life.
// - Nothing is removed until every start-up check has passed on every rank (run_dir_start).
// - A checkpoint file is never overwritten. Files of checkpoints newer than the one a run
//   resumes from are set aside under a new name: <name>.corrupt when they failed their check,
//   <name>.orphan otherwise (a model whose state is missing, a piece of an unfinished
//   checkpoint). Set-aside files are never removed. Only temporaries are removed freely.
// - -nk removes a checkpoint only once the newer ones it keeps have been read back intact.
#ifndef COMMON_RUN_DIR_H
#define COMMON_RUN_DIR_H
#include "util.h"
#include "checkpoint.h"
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>

#define RUN_LOCK_NAME ".lock"

// ---------------------------------------------------------------------------
// Names

enum { RUN_NAME_OTHER, RUN_NAME_MODEL, RUN_NAME_STATE, RUN_NAME_LOG, RUN_NAME_LOCK };
// what follows a checkpoint's name: nothing, the temporary's ".tmp", or a set-aside suffix
enum { RUN_SUFFIX_NONE, RUN_SUFFIX_TMP, RUN_SUFFIX_CORRUPT, RUN_SUFFIX_ORPHAN };

typedef struct {
    int kind;    // RUN_NAME_*
    int step;    // a checkpoint's step
    int rank;    // a state's shard rank: 0 for state_<step>.bin, r for state_<step>.rank<r>.bin
    int suffix;  // RUN_SUFFIX_*
} RunName;

// Reads a run of decimal digits at *p that printf would print for the value: "%08d" when
// width 8 (steps), "%d" when width 0 (ranks, at least 1). -1 when it is not one.
static inline int run_name_number(const char **p, int width) {
    const char *d = *p;
    while (isdigit((unsigned char)**p)) (*p)++;
    size_t n = (size_t)(*p - d);
    if (n == 0 || n > 10) return -1;
    char digits[16], canon[24];
    memcpy(digits, d, n);
    digits[n] = 0;
    long v = strtol(digits, NULL, 10);
    if (v > INT_MAX) return -1;
    snprintf(canon, sizeof canon, "%0*ld", width, v);
    return strcmp(canon, digits) == 0 ? (int)v : -1;
}

static inline RunName run_name_parse(const char *name) {
    RunName r = {RUN_NAME_OTHER, -1, 0, RUN_SUFFIX_NONE}, other = r;
    if (!strcmp(name, "main.log") || !strcmp(name, "metrics.jsonl")) r.kind = RUN_NAME_LOG;
    if (!strcmp(name, RUN_LOCK_NAME)) r.kind = RUN_NAME_LOCK;
    if (r.kind != RUN_NAME_OTHER) return r;
    const char *p = name + 6;
    if (!strncmp(name, "model_", 6)) r.kind = RUN_NAME_MODEL;
    else if (!strncmp(name, "state_", 6)) r.kind = RUN_NAME_STATE;
    else return other;
    if ((r.step = run_name_number(&p, 8)) < 0) return other;
    if (r.kind == RUN_NAME_STATE && !strncmp(p, ".rank", 5)) {
        p += 5;
        if ((r.rank = run_name_number(&p, 0)) < 1) return other;
    }
    if (strncmp(p, ".bin", 4)) return other;
    p += 4;
    static const char *const suffixes[] = {"", ".tmp", ".corrupt", ".orphan"};
    for (int s = 0; s < 4; s++) {
        size_t n = strlen(suffixes[s]);
        if (strncmp(p, suffixes[s], n)) continue;
        const char *q = p + n, *k = q + 1;
        // a second file set aside under the same name gets ".2", ".3", ...
        if (s >= RUN_SUFFIX_CORRUPT && *q == '.' && run_name_number(&k, 0) > 1) q = k;
        if (*q) continue;
        r.suffix = s;
        return r;
    }
    return other;
}

// The name of a checkpoint file: the model (kind RUN_NAME_MODEL) or a shard rank's state.
static inline void run_checkpoint_name(char *buf, size_t cap, int kind, int step, int rank) {
    if (kind == RUN_NAME_MODEL) snprintf(buf, cap, "model_%08d.bin", step);
    else if (rank == 0) snprintf(buf, cap, "state_%08d.bin", step);
    else snprintf(buf, cap, "state_%08d.rank%d.bin", step, rank);
}

// A file is set aside under the same name at most this many times.
#define RUN_ASIDE_MAX 99999

// The longest name a run gives a file in its directory: a ZeRO rank's state set aside the
// most times, with the largest step and rank an int holds.
static inline size_t run_dir_longest_name(char *name, size_t cap) {
    return (size_t)snprintf(name, cap, "state_%08d.rank%d.bin.corrupt.%d", INT_MAX, INT_MAX, RUN_ASIDE_MAX);
}

// Stops, naming -o, when the run's paths would not fit PATH_CAP: at start, not at the first
// checkpoint after hours of training.
static inline void run_dir_check_path_length(const char *dir) {
    char name[96];
    size_t longest = run_dir_longest_name(name, sizeof name), len = strlen(dir);
    if (len + 1 + longest >= PATH_CAP)
        fatal("-o: the directory name is %zu characters; with the longest file name a run writes there (%s, %zu "
              "characters) its paths would be %zu characters, over the %d this program allows: choose an -o of at "
              "most %zu characters", len, name, longest, len + 1 + longest, PATH_CAP - 1,
              (size_t)PATH_CAP - 2 - longest);
}

// ---------------------------------------------------------------------------
// The directory

typedef struct {
    const char *path;   // -o as given, for messages
    int fd;             // the directory, opened at start; -1: the run has no -o
    int files_rank;     // the checkpoint files this process writes: 0 the model and state_<step>.bin,
                        // r > 0 a ZeRO rank's state_<step>.rank<r>.bin, -1 none
    int last_step;      // the newest checkpoint written or resumed from (-1: none yet)
    int *verified;      // steps whose checkpoint files of this process were read back intact
    int n_verified;
    char **earlier;     // --overwrite 1: the earlier run's files, removed by run_dir_start
    int n_earlier;
    char earlier_text[600];  // the first few of their names, for the message
} RunDir;

// Makes the run directory (and its parents), or stops saying why it cannot.
static inline void make_run_dir(const char *dir) {
    char *p = xstrdup(dir);
    for (char *c = p + 1; ; c++) {
        if (*c != '/' && *c) continue;
        char keep = *c;
        *c = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            struct stat st;
            if (errno == ENOENT && lstat(p, &st) == 0 && S_ISLNK(st.st_mode))
                fatal("-o: %s is a symbolic link to a directory that does not exist: create its target, or choose "
                      "another -o", p);
            fatal("-o: cannot create directory %s: %s", p, strerror(errno));
        }
        *c = keep;
        if (!keep) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode))
            fatal("-o: %s is a symbolic link to something that is not a directory (or to nothing)", dir);
        fatal("-o: %s exists and is not a directory", dir);
    }
    if (access(dir, W_OK) != 0) fatal("-o: cannot write to directory %s: %s", dir, strerror(errno));
    free(p);
}

// Takes .lock for the life of the process: the descriptor is never closed, and the lock goes
// with the process, however it ends (a lock file left behind by a crash is only a file: it
// blocks nothing). The file holds the holder's pid and host, for the refusal to name.
static inline void run_dir_lock(const RunDir *rd) {
    char path[PATH_CAP];
    path_join(path, sizeof path, rd->path, RUN_LOCK_NAME);
    int fd = openat(rd->fd, RUN_LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    struct stat st;
    if (fd < 0 && errno == ELOOP)
        fatal("-o: %s is a symbolic link; the lock file is never followed (its target would be written): remove it",
              path);
    if (fd < 0) fatal("-o: cannot open the lock file %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        fatal("-o: the lock file %s is not a regular file: remove it", path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {  // a file system without locks: run, as before there was a lock
            fprintf(stderr, "warning: -o: cannot lock %s (%s): nothing stops a second run into %s\n", path,
                    strerror(errno), rd->path);
            close(fd);
            return;
        }
        char text[160] = "", host[128] = "";
        long pid = 0;
        for (int tries = 0; tries < 20 && !text[0]; tries++) {  // the holder writes its pid just after locking
            if (tries) usleep(10000);
            ssize_t got = pread(fd, text, sizeof text - 1, 0);
            if (got > 0) text[got] = 0;
        }
        char holder[200] = "its pid is not written yet";
        if (sscanf(text, "%ld %127s", &pid, host) == 2) snprintf(holder, sizeof holder, "pid %ld on %s", pid, host);
        fatal("-o %s is in use by another run (%s, holding %s): two runs in one directory would mix their logs "
              "and overwrite each other's checkpoints; wait for it to end, stop it, or choose another -o", rd->path,
              holder, path);
    }
    // a lock file of ours holds "<pid> <host>\n", or the start of it (a write cut short by a kill): anything
    // else is not ours to rewrite
    char was[160] = "";
    ssize_t got = pread(fd, was, sizeof was - 1, 0);
    size_t at = got > 0 ? (size_t)got : 0, k = strspn(was, "0123456789");
    if (k < at && was[k] == ' ') k += 1 + strcspn(was + k + 1, " \t\n");
    if (k < at && was[k] == '\n') k++;
    if (k != at)
        fatal("-o: %s holds something this program did not write (a lock file of another tool?): it is left alone; "
              "choose another -o", path);
    char host[128] = "unknown";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    char text[200];
    int len = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != (ssize_t)len)
        fatal("-o: cannot write the lock file %s: %s", path, strerror(errno));
}

// Opens -o for this process (path NULL: a run without one): makes it, holds it open, and
// (lock: rank 0) takes its lock. files_rank: which checkpoint files this process writes.
static inline void run_dir_open(RunDir *rd, const char *path, int files_rank, int lock) {
    memset(rd, 0, sizeof *rd);
    rd->fd = -1;
    rd->files_rank = path ? files_rank : -1;
    rd->last_step = -1;
    rd->path = path;
    if (!path) return;
    run_dir_check_path_length(path);
    make_run_dir(path);
    rd->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rd->fd < 0) fatal("-o: cannot open directory %s: %s", path, strerror(errno));
    if (lock) run_dir_lock(rd);
}

// Lets the directory go (the lock goes with the process).
static inline void run_dir_close(RunDir *rd) {
    if (rd->fd >= 0) close(rd->fd);
    for (int i = 0; i < rd->n_earlier; i++) free(rd->earlier[i]);
    free(rd->earlier);
    free(rd->verified);
    rd->fd = -1;
    rd->earlier = NULL;
    rd->verified = NULL;
    rd->n_earlier = rd->n_verified = 0;
}

// <dir>/<name>, for messages and for reading at start
static inline const char *run_dir_path(const RunDir *rd, char *buf, const char *name) {
    return path_join(buf, PATH_CAP, rd->path, "%s", name);
}

// One entry of the directory.
typedef struct {
    char *name;
    RunName n;
    int regular;  // a regular file (not a link, a directory, ...)
} RunEntry;

static inline int cmp_run_entries(const void *a, const void *b) {
    return strcmp(((const RunEntry *)a)->name, ((const RunEntry *)b)->name);
}

// The entries whose names are the run's (RunName kind other than RUN_NAME_OTHER), by name.
static inline RunEntry *run_dir_list(const RunDir *rd, int *count) {
    *count = 0;
    int fd = dup(rd->fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) fatal("-o: cannot list %s: %s", rd->path, strerror(errno));
    rewinddir(d);
    RunEntry *e = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        RunName nm = run_name_parse(de->d_name);
        if (nm.kind == RUN_NAME_OTHER) continue;
        if (n == cap) e = (RunEntry *)xrealloc(e, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *e);
        struct stat st;
        e[n].name = xstrdup(de->d_name);
        e[n].n = nm;
        e[n].regular = fstatat(rd->fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
        n++;
    }
    closedir(d);
    if (n) qsort(e, (size_t)n, sizeof *e, cmp_run_entries);
    *count = n;
    return e;
}

static inline void run_entries_free(RunEntry *e, int n) {
    for (int i = 0; i < n; i++) free(e[i].name);
    free(e);
}

// Whether the entry is a checkpoint file of this shard rank as written (no suffix): rank 0
// owns the models and state_<step>.bin, a ZeRO rank r its state_<step>.rank<r>.bin.
static inline int run_entry_of_rank(const RunEntry *e, int files_rank, int suffix) {
    if (!e->regular || e->n.suffix != suffix || files_rank < 0) return 0;
    if (e->n.kind == RUN_NAME_MODEL) return files_rank == 0;
    return e->n.kind == RUN_NAME_STATE && e->n.rank == files_rank;
}

static inline int run_dir_has(const RunDir *rd, const char *name) {
    struct stat st;
    return fstatat(rd->fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

// The directory's own entry on disk: a rename or removal is durable once it is.
static inline void run_dir_sync(const RunDir *rd) {
    if (fsync(rd->fd) != 0 && errno != EINVAL)
        fatal("cannot flush directory %s to disk: %s", rd->path, strerror(errno));
}

// Renames a file of the run aside as <name>.<why> (or <name>.<why>.2, ...: never over
// another file), and says so. Returns nothing: a rename that fails stops the run.
static inline void run_dir_set_aside(const RunDir *rd, const char *name, const char *why, const char *reason) {
    char aside[PATH_CAP], from[PATH_CAP], to[PATH_CAP];
    snprintf(aside, sizeof aside, "%s.%s", name, why);
    for (int k = 2;; k++) {
        // never over a file: RENAME_NOREPLACE, or where the file system lacks it, a look first
        int rc = renameat2(rd->fd, name, rd->fd, aside, RENAME_NOREPLACE);
        if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
            rc = -1;
            errno = EEXIST;
            if (!run_dir_has(rd, aside)) rc = renameat(rd->fd, name, rd->fd, aside);
        }
        if (rc == 0) break;
        if (errno != EEXIST)
            fatal("cannot rename %s to %s: %s", run_dir_path(rd, from, name), run_dir_path(rd, to, aside),
                  strerror(errno));
        if (k > RUN_ASIDE_MAX)
            fatal("%s has been set aside %d times: move the older %s.%s* files away", run_dir_path(rd, from, name),
                  RUN_ASIDE_MAX, name, why);
        snprintf(aside, sizeof aside, "%s.%s.%d", name, why, k);
    }
    run_dir_sync(rd);
    fprintf(stderr, "warning: %s set aside as %s: %s\n", run_dir_path(rd, from, name), aside, reason);
}

// Removes one file of the run: only a regular file under one of the run's names.
static inline void run_dir_remove(const RunDir *rd, const char *name, const char *option) {
    char path[PATH_CAP];
    struct stat st;
    RunName n = run_name_parse(name);
    if (n.kind == RUN_NAME_OTHER || n.kind == RUN_NAME_LOCK || n.suffix >= RUN_SUFFIX_CORRUPT)
        fatal("internal: %s is not a file the run may remove", run_dir_path(rd, path, name));
    if (fstatat(rd->fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;  // gone already
    if (!S_ISREG(st.st_mode)) fatal("%s: %s is not a regular file: left alone", option, run_dir_path(rd, path, name));
    if (unlinkat(rd->fd, name, 0) != 0 && errno != ENOENT)
        fatal("%s: cannot remove %s: %s", option, run_dir_path(rd, path, name), strerror(errno));
}

// ---------------------------------------------------------------------------
// Checkpoints in the directory

// The steps with a file of this kind (RUN_NAME_MODEL, or RUN_NAME_STATE of a shard rank) as
// written, newest first; returns their count.
static inline int run_dir_steps(const RunDir *rd, int kind, int rank, int **steps) {
    int n_e, n = 0;
    RunEntry *e = run_dir_list(rd, &n_e);
    *steps = (int *)xmalloc((size_t)(n_e + 1) * sizeof(int));
    for (int i = 0; i < n_e; i++)
        if (e[i].regular && e[i].n.suffix == RUN_SUFFIX_NONE && e[i].n.kind == kind &&
            (kind == RUN_NAME_MODEL || e[i].n.rank == rank))
            (*steps)[n++] = e[i].n.step;
    run_entries_free(e, n_e);
    for (int i = 1; i < n; i++)  // newest first
        for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) {
            int t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1];
            (*steps)[j - 1] = t;
        }
    return n;
}

// Whether the checkpoint of step was begun and not finished: its state's temporary, or a
// ZeRO rank's state or temporary, lies there (those are written before rank 0's state).
static inline int checkpoint_unfinished(const RunDir *rd, int step) {
    int n_e, found = 0;
    RunEntry *e = run_dir_list(rd, &n_e);
    for (int i = 0; i < n_e; i++)
        found |= e[i].n.kind == RUN_NAME_STATE && e[i].n.step == step &&
                 (e[i].n.suffix == RUN_SUFFIX_TMP || (e[i].n.rank > 0 && e[i].n.suffix == RUN_SUFFIX_NONE));
    run_entries_free(e, n_e);
    return found;
}

// What is wrong with the checkpoint at step for this shard rank, or NULL if its model and
// state files are whole, their checksums match, the state's step is the one its name says,
// and the state belongs to that model file. Read by path: only at start, before anything
// else can have been written there.
static inline const char *checkpoint_problem(const RunDir *rd, int step, int shard_rank, char *why, size_t cap) {
    char mn[64], sn[64], mp[PATH_CAP], sp[PATH_CAP], inner[512];
    int h[HEADER_INTS];
    uint32_t model_crc = 0;
    run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, step, 0);
    run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, shard_rank);
    run_dir_path(rd, mp, mn);
    run_dir_path(rd, sp, sn);
    if (model_file_problem(mp, &model_crc, inner, sizeof inner)) snprintf(why, cap, "%s: %s", mp, inner);
    else if (train_state_header_problem(sp, step, h, inner, sizeof inner)) snprintf(why, cap, "%s: %s", sp, inner);
    else if (file_checksum_problem(sp, inner, sizeof inner)) snprintf(why, cap, "%s: %s", sp, inner);
    else if (h[CKSUM_TAG_SLOT] == CKSUM_TAG && h[16] && model_crc && (uint32_t)h[16] != model_crc)
        snprintf(why, cap, "%s was not written with %s (their checksums do not pair)", sp, mp);
    else return NULL;
    return why;
}

// Reads one of the run's files back through the directory and checks its checksum (files
// without one count as not intact: every file this program writes has one). NULL or why;
// h gets its header.
static inline const char *run_dir_read_back(const RunDir *rd, const char *name, int *h, char *why, size_t cap) {
    int fd = openat(rd->fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0) { snprintf(why, cap, "cannot open it: %s", strerror(errno)); return why; }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        pread(fd, h, HEADER_INTS * sizeof(int), 0) != (ssize_t)(HEADER_INTS * sizeof(int))) {
        close(fd);
        snprintf(why, cap, "not a regular file of at least the 1024-byte header");
        return why;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) { close(fd); snprintf(why, cap, "cannot read it: %s", strerror(errno)); return why; }
    int tagged;
    if (stream_checksum_problem(f, &tagged, why, cap)) return why;
    if (!tagged) { snprintf(why, cap, "it carries no checksum"); return why; }
    return NULL;
}

// This process's files of the checkpoint at step, read back: NULL when intact.
static inline const char *run_dir_verify(const RunDir *rd, int step, char *why, size_t cap) {
    char mn[64], sn[64], inner[512];
    int mh[HEADER_INTS], sh[HEADER_INTS];
    if (rd->files_rank < 0) return NULL;
    run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, rd->files_rank);
    if (run_dir_read_back(rd, sn, sh, inner, sizeof inner)) { snprintf(why, cap, "%s: %s", sn, inner); return why; }
    if (rd->files_rank > 0) return NULL;
    run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, step, 0);
    if (run_dir_read_back(rd, mn, mh, inner, sizeof inner)) { snprintf(why, cap, "%s: %s", mn, inner); return why; }
    if ((uint32_t)sh[16] != header_checksum(mh)) {
        snprintf(why, cap, "%s was not written with %s (their checksums do not pair)", sn, mn);
        return why;
    }
    return NULL;
}

// Sums v over the ranks of a run (NULL: one process).
typedef long (*RankSumFn)(const void *ctx, long v);

// -y 1: the newest checkpoint in -o that is intact on every rank; each one skipped is
// reported with what is wrong. -1 when -o holds no checkpoint at all (start fresh). Stops
// when there are some but none is intact, and when -o holds model files whose states are
// gone (an earlier run's models, which a fresh start must not overwrite), unless they are
// the unfinished first checkpoint of a run stopped while writing it (a restart loop's).
static inline int resume_pick_step(const RunDir *rd, int shard_rank, int quiet, RankSumFn sum, const void *ctx) {
    int *steps, n = run_dir_steps(rd, RUN_NAME_STATE, 0, &steps), pick = -1;
    int *models, n_models = run_dir_steps(rd, RUN_NAME_MODEL, 0, &models), n_orphans = 0, unfinished = 0;
    long world = sum ? sum(ctx, 1) : 1;
    char why[9000];  // room for two paths and a reason
    for (int i = 0; i < n_models && models[i] > (n ? steps[0] : -1); i++) {
        models[n_orphans++] = models[i];
        unfinished += checkpoint_unfinished(rd, models[i]);
    }
    for (int i = 0; i < n_orphans && n > 0; i++) {
        char sn[64], sp[PATH_CAP];
        run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, models[i], 0);
        fprintf(stderr, "warning: -y 1: skipping the checkpoint of step %d: %s is missing (a checkpoint whose write "
                "did not finish, or a removed state)\n", models[i], run_dir_path(rd, sp, sn));
    }
    for (int i = 0; i < n && pick < 0; i++) {
        const char *bad = checkpoint_problem(rd, steps[i], shard_rank, why, sizeof why);
        if (bad) fprintf(stderr, "warning: -y 1: skipping the checkpoint of step %d: %s\n", steps[i], bad);
        long intact = sum ? sum(ctx, !bad) : !bad;
        if (intact == world) pick = steps[i];
    }
    free(steps);
    if (pick < 0 && n > 0)
        fatal("-y 1: none of the %d checkpoint(s) in %s is intact (see the warnings above); move them away to start "
              "fresh", n, rd->path);
    if (n == 0 && n_orphans > unfinished)
        fatal("-y 1: %s holds %d model file(s) but no training state (the newest model_%08d.bin): an earlier run "
              "whose states were removed, which cannot be resumed and whose models a fresh start would overwrite. "
              "Train from one with -e %s/model_%08d.bin and another -o, remove them with --overwrite 1, or choose "
              "another -o", rd->path, n_orphans, models[0], rd->path, models[0]);
    if (pick < 0 && !quiet) {
        if (n_orphans)
            printf("-y 1: no checkpoint in %s yet (the first, of step %d, was not finished): starting fresh\n",
                   rd->path, models[0]);
        else printf("-y 1: no checkpoint in %s yet: starting fresh\n", rd->path);
    }
    free(models);
    return pick;
}

// Before any large allocation: refuses an -o whose run-named entries are not regular files,
// and one that holds an earlier run unless -y 1 (resume_pick_step decides) or --overwrite 1
// (whose removal waits for run_dir_start). Rank 0 alone. model_file: -e's file, which
// --overwrite 1 must not remove.
static inline void run_dir_claim(RunDir *rd, int resume, int overwrite, const char *model_file) {
    if (rd->fd < 0) return;
    int n_e;
    RunEntry *e = run_dir_list(rd, &n_e);
    char path[PATH_CAP], names[600] = "";
    int n = 0, checkpoints = 0, logs = 0;
    struct stat model_st;
    int have_model = model_file && stat(model_file, &model_st) == 0;
    for (int i = 0; i < n_e; i++) {
        if (e[i].n.kind == RUN_NAME_LOCK) continue;
        if (!e[i].regular)
            fatal("-o: %s is not a regular file (a link or a directory) but has the name of a file a run writes; "
                  "it is not this program's, and it is left alone: move it away", run_dir_path(rd, path, e[i].name));
        if (e[i].n.suffix >= RUN_SUFFIX_CORRUPT) continue;  // set aside: kept, and no obstacle
        struct stat st;
        if (have_model && overwrite && fstatat(rd->fd, e[i].name, &st, 0) == 0 && st.st_ino == model_st.st_ino &&
            st.st_dev == model_st.st_dev)
            fatal("--overwrite 1 would remove %s, the model -e names: copy it out of -o first, or choose another -o",
                  run_dir_path(rd, path, e[i].name));
        if (n < 6) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", n ? ", " : "", e[i].name);
        n++;
        if (e[i].n.kind == RUN_NAME_LOG) logs++;
        else checkpoints++;
    }
    if (n > 6) snprintf(names + strlen(names), sizeof names - strlen(names), " and %d more", n - 6);
    if (n && !resume && overwrite) {
        snprintf(rd->earlier_text, sizeof rd->earlier_text, "%s", names);
        rd->earlier = (char **)xmalloc((size_t)n * sizeof(char *));
        for (int i = 0; i < n_e; i++)
            if (e[i].n.kind != RUN_NAME_LOCK && e[i].n.suffix < RUN_SUFFIX_CORRUPT)
                rd->earlier[rd->n_earlier++] = xstrdup(e[i].name);
    } else if (n && !resume) {
        char what[64];
        if (checkpoints && logs) snprintf(what, sizeof what, "%d checkpoint file(s) and its logs", checkpoints);
        else if (checkpoints) snprintf(what, sizeof what, "%d checkpoint file(s)", checkpoints);
        else snprintf(what, sizeof what, "its logs");
        fatal("-o %s holds an earlier run: %s (%s). Resume it with -y 1, or remove them and start afresh with "
              "--overwrite 1 (or choose another -o)", rd->path, what, names);
    }
    run_entries_free(e, n_e);
}

// Says, in every later error, where the run can be continued from.
static inline void run_dir_note(const RunDir *rd) {
    char note[PATH_CAP_NOTE];
    if (rd->fd < 0) return;
    if (rd->last_step >= 0)
        snprintf(note, sizeof note, "the checkpoint of step %d in %s is intact: -y 1 resumes from it", rd->last_step,
                 rd->path);
    else snprintf(note, sizeof note, "%s holds no checkpoint of this run yet: -y 1 starts it afresh", rd->path);
    fatal_note_set(note);
}

static inline void run_dir_mark_verified(RunDir *rd, int step) {
    rd->verified = (int *)xrealloc(rd->verified, (size_t)(rd->n_verified + 1) * sizeof(int));
    rd->verified[rd->n_verified++] = step;
}

static inline int run_dir_is_verified(const RunDir *rd, int step) {
    for (int i = 0; i < rd->n_verified; i++)
        if (rd->verified[i] == step) return 1;
    return 0;
}

// The first thing a run changes in -o, once every start-up check has passed on every rank
// (data found, model built, memory planned and allocated, checkpoint read): --overwrite 1
// removes the earlier run's files; -y 1 sets aside this process's files of checkpoints
// newer than resume_step (all of them when it starts fresh), which it would otherwise
// overwrite; temporaries a killed writer left are removed.
static inline void run_dir_start(RunDir *rd, int resume, int resume_step, int quiet) {
    if (rd->fd < 0) return;
    struct stat a, b;
    if (fstat(rd->fd, &a) != 0 || stat(rd->path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
        fatal("-o %s was moved or replaced while the run started: start it again", rd->path);
    for (int pass = 0; pass < 2; pass++)  // the states first: no half-removed checkpoint looks whole
        for (int i = 0; i < rd->n_earlier; i++) {
            RunName n = run_name_parse(rd->earlier[i]);
            if ((pass == 0) == (n.kind == RUN_NAME_STATE && n.suffix == RUN_SUFFIX_NONE))
                run_dir_remove(rd, rd->earlier[i], "--overwrite 1");
        }
    if (rd->n_earlier) {
        run_dir_sync(rd);
        if (!quiet)
            printf("--overwrite 1: removed %d file(s) of an earlier run from %s: %s\n", rd->n_earlier, rd->path,
                   rd->earlier_text);
        for (int i = 0; i < rd->n_earlier; i++) free(rd->earlier[i]);
        free(rd->earlier);
        rd->earlier = NULL;
        rd->n_earlier = 0;
    }
    // the newer checkpoints' files set aside first, so that nothing that failed its check stays under a
    // checkpoint's name should a temporary's removal fail after
    int n_e;
    RunEntry *e = run_dir_list(rd, &n_e);
    for (int i = 0; i < n_e; i++) {
        if (!resume || !run_entry_of_rank(&e[i], rd->files_rank, RUN_SUFFIX_NONE) || e[i].n.step <= resume_step)
            continue;
        char path[PATH_CAP], inner[512];
        int h[HEADER_INTS];
        uint32_t crc;
        run_dir_path(rd, path, e[i].name);
        const char *bad;
        if (e[i].n.kind == RUN_NAME_MODEL) bad = model_file_problem(path, &crc, inner, sizeof inner);
        else if (!(bad = train_state_header_problem(path, e[i].n.step, h, inner, sizeof inner)))
            bad = file_checksum_problem(path, inner, sizeof inner);
        char reason[700];
        snprintf(reason, sizeof reason, "%s%s", bad ? "it failed its check: " : "", bad ? bad :
                 "a checkpoint newer than the one resumed from, not whole (this run writes that step anew)");
        run_dir_set_aside(rd, e[i].name, bad ? "corrupt" : "orphan", reason);
    }
    for (int i = 0; i < n_e; i++)  // a killed writer's temporaries: its next write would remove them anyway
        if (run_entry_of_rank(&e[i], rd->files_rank, RUN_SUFFIX_TMP) && unlinkat(rd->fd, e[i].name, 0) != 0 &&
            errno != ENOENT)
            fprintf(stderr, "warning: cannot remove the temporary %s/%s: %s\n", rd->path, e[i].name, strerror(errno));
    run_entries_free(e, n_e);
    run_dir_sync(rd);
    rd->last_step = resume_step;
    if (resume_step >= 0) run_dir_mark_verified(rd, resume_step);
    run_dir_note(rd);
}

// Begins writing one of the run's checkpoint files (name as run_checkpoint_name makes it).
static inline AtomicFile run_dir_begin(const RunDir *rd, const char *name) {
    return atomic_open_at(rd->fd, rd->path, name);
}

// A file already under a's name (none should be: run_dir_start set them aside) is set aside,
// never overwritten.
static inline void run_dir_clear_target(const RunDir *rd, const AtomicFile *a) {
    if (atomic_target_taken(a)) run_dir_set_aside(rd, a->name, "orphan", "a file of that name appeared during the run");
}

// Commits a file begun with run_dir_begin.
static inline void run_dir_finish(const RunDir *rd, AtomicFile *a) {
    run_dir_clear_target(rd, a);
    atomic_commit(a);
}

// Commits the checkpoint of step: its model, then its state (rank 0). Should the state not
// get into place (an error from the model's rename on), the error exit removes the model
// again: a model alone would look like an earlier run's to -y 1, and the checkpoint before
// stays the newest. From the state's rename on, errors name this checkpoint as the one -y 1
// resumes from.
static inline void run_dir_finish_checkpoint(RunDir *rd, int step, AtomicFile *model, AtomicFile *state) {
    char *model_name = xstrdup(model->name), *state_name = xstrdup(state->name);
    run_dir_clear_target(rd, model);  // both before either is renamed
    run_dir_clear_target(rd, state);
    pending_file_add(rd->fd, model_name, state_name);
    atomic_commit(model);
    atomic_close(state);
    atomic_rename(state);
    pending_file_forget(model_name);
    rd->last_step = step;
    run_dir_note(rd);
    atomic_sync_dir(state);
    free(model_name);
    free(state_name);
}

// After the checkpoint of step is written by every process of the run.
static inline void run_dir_checkpoint_done(RunDir *rd, int step) {
    rd->last_step = step;
    run_dir_note(rd);
}

// -nk / -nm after a checkpoint: keeps the newest keep checkpoints that are intact on every
// rank (each read back once), and those of every major-th step; removes this process's files
// of the older ones. A checkpoint that fails its read-back is not counted, and not removed:
// -y 1 sets it aside. Every process of the run calls it (sum agrees the ranks' verdicts).
static inline void run_dir_prune(RunDir *rd, int keep, int major, RankSumFn sum, const void *ctx) {
    if (keep <= 0 || rd->fd < 0) return;
    // every rank is here (rank 0 has renamed its files) before any lists the directory
    long world = sum ? sum(ctx, 1) : 1;
    int *steps, n = run_dir_steps(rd, RUN_NAME_STATE, 0, &steps), kept = 0;
    if (sum && sum(ctx, n) != world * n) {  // a file system that shows the ranks different listings
        fprintf(stderr, "warning: -nk: the ranks see different checkpoints in %s: none removed this time\n",
                rd->path);
        free(steps);
        return;
    }
    char why[1200];
    for (int i = 0; i < n; i++) {
        if (kept < keep) {
            const char *bad = run_dir_is_verified(rd, steps[i]) ? NULL : run_dir_verify(rd, steps[i], why, sizeof why);
            if (bad) fprintf(stderr, "warning: -nk: the checkpoint of step %d in %s is not intact (%s): not counted "
                             "among the kept ones\n", steps[i], rd->path, bad);
            long intact = sum ? sum(ctx, !bad) : !bad;
            if (intact == world) {
                if (!kept++ && rd->last_step != steps[i]) {  // the newest intact: what -y 1 resumes from
                    rd->last_step = steps[i];
                    run_dir_note(rd);
                }
                if (!run_dir_is_verified(rd, steps[i])) run_dir_mark_verified(rd, steps[i]);
            }
            continue;
        }
        if ((major > 0 && steps[i] % major == 0) || rd->files_rank < 0) continue;
        char sn[64], mn[64];
        run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, steps[i], rd->files_rank);
        run_dir_remove(rd, sn, "-nk");  // the state first: a half-removed checkpoint is no longer one
        if (rd->files_rank == 0) {
            run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, steps[i], 0);
            run_dir_remove(rd, mn, "-nk");
        }
    }
    run_dir_sync(rd);
    free(steps);
}

// The run's log file name, opened for writing through the directory (append: at its end).
static inline FILE *run_dir_open_log(const RunDir *rd, const char *name, int append) {
    char path[PATH_CAP];
    int fd = openat(rd->fd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0) fatal("cannot open %s: %s", run_dir_path(rd, path, name), strerror(errno));
    FILE *f = fdopen(fd, append ? "a" : "w");
    if (!f) fatal("cannot open %s: %s", run_dir_path(rd, path, name), strerror(errno));
    return f;
}

// Cuts a log back to keep bytes (before a resumed run appends to it); a shorter file, or
// keep < 0 (not recorded), is left as it is.
static inline void run_dir_cut_log(const RunDir *rd, const char *name, int64_t keep) {
    char path[PATH_CAP];
    struct stat st;
    if (keep < 0 || rd->fd < 0) return;
    int fd = openat(rd->fd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return;
    if (fd < 0) fatal("cannot open %s: %s", run_dir_path(rd, path, name), strerror(errno));
    if (fstat(fd, &st) == 0 && st.st_size > keep && ftruncate(fd, (off_t)keep) != 0)
        fatal("cannot cut %s back to %lld bytes: %s", run_dir_path(rd, path, name), (long long)keep, strerror(errno));
    close(fd);
}

#endif // COMMON_RUN_DIR_H
