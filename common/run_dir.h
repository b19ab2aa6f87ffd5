// run_dir.h: the run directory (-o) belongs to one run at a time. The run holds an advisory
// lock on <dir>/.lock for its whole life, so that a second run into the same directory is
// refused instead of tearing metrics.jsonl, mixing main.log and overwriting checkpoints;
// the files an earlier run left there (its checkpoints and logs) are listed, for a new run
// to refuse, resume or remove them; and every path a run will write is checked at start
// against the path buffers (PATH_CAP), instead of being cut short when first written.
#ifndef COMMON_RUN_DIR_H
#define COMMON_RUN_DIR_H
#include "util.h"
#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <sys/file.h>

#define RUN_LOCK_NAME ".lock"

// The longest name a run writes in its directory: a ZeRO rank's state temporary, with the
// largest step and rank an int holds (longer than main.log, metrics.jsonl and the lock).
static inline size_t run_dir_longest_name(char *name, size_t cap) {
    return (size_t)snprintf(name, cap, "state_%08d.rank%d.bin.tmp", INT_MAX, INT_MAX);
}

// Stops, naming -o, when the run's paths would not fit PATH_CAP: at start, not at the first
// checkpoint after hours of training.
static inline void run_dir_check_path_length(const char *dir) {
    char name[64];
    size_t longest = run_dir_longest_name(name, sizeof name), len = strlen(dir);
    if (len + 1 + longest >= PATH_CAP)
        fatal("-o: the directory name is %zu characters; with the longest file name a run writes there (%s, %zu "
              "characters) its paths would be %zu characters, over the %d this program allows: choose an -o of at "
              "most %zu characters", len, name, longest, len + 1 + longest, PATH_CAP - 1,
              (size_t)PATH_CAP - 2 - longest);
}

// Takes <dir>/.lock for the life of the process: the descriptor is never closed, and the lock
// goes with the process, however it ends (a lock file left behind by a crash is only a file:
// it blocks nothing). The file holds the holder's pid and host, for the refusal to name.
static inline void run_dir_lock(const char *dir) {
    char path[PATH_CAP];
    path_join(path, sizeof path, dir, RUN_LOCK_NAME);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) fatal("-o: cannot open the lock file %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {  // a file system without locks: run, as before there was a lock
            fprintf(stderr, "warning: -o: cannot lock %s (%s): nothing stops a second run into %s\n", path,
                    strerror(errno), dir);
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
              "and overwrite each other's checkpoints; wait for it to end, stop it, or choose another -o", dir,
              holder, path);
    }
    char host[128] = "unknown";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    char text[200];
    int len = snprintf(text, sizeof text, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != (ssize_t)len)
        fatal("-o: cannot write the lock file %s: %s", path, strerror(errno));
}

// What a run leaves in its directory: its checkpoints (model_*.bin; state_*.bin, ZeRO ranks'
// shards included; the temporaries of both) and its logs.
enum { RUN_FILE_OTHER, RUN_FILE_CHECKPOINT, RUN_FILE_LOG };

static inline int run_file_kind(const char *name) {
    if (!strcmp(name, "main.log") || !strcmp(name, "metrics.jsonl")) return RUN_FILE_LOG;
    static const char *const checkpoint_names[] = {"model_*.bin", "model_*.bin.tmp", "state_*.bin",
                                                   "state_*.bin.tmp"};
    for (size_t i = 0; i < sizeof checkpoint_names / sizeof checkpoint_names[0]; i++)
        if (fnmatch(checkpoint_names[i], name, 0) == 0) return RUN_FILE_CHECKPOINT;
    return RUN_FILE_OTHER;
}

typedef struct {
    char **names;  // sorted
    int n, checkpoints, logs;
} RunFiles;

static inline int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static inline void run_files_list(const char *dir, RunFiles *f) {
    memset(f, 0, sizeof *f);
    DIR *d = opendir(dir);
    if (!d) fatal("-o: cannot list %s: %s", dir, strerror(errno));
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int kind = run_file_kind(e->d_name);
        if (kind == RUN_FILE_OTHER) continue;
        if (f->n == cap) f->names = (char **)xrealloc(f->names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(char *));
        f->names[f->n++] = xstrdup(e->d_name);
        if (kind == RUN_FILE_LOG) f->logs++;
        else f->checkpoints++;
    }
    closedir(d);
    if (f->n) qsort(f->names, (size_t)f->n, sizeof(char *), cmp_names);
}

static inline void run_files_free(RunFiles *f) {
    for (int i = 0; i < f->n; i++) free(f->names[i]);
    free(f->names);
    memset(f, 0, sizeof *f);
}

// "main.log, metrics.jsonl, model_00000005.bin, ... and 3 more" (the first few names: a run
// of -n 1 leaves thousands)
static inline const char *run_files_text(const RunFiles *f, char *buf, size_t cap) {
    const int shown = 6;
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < f->n && i < shown && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", f->names[i]);
    if (f->n > shown && at < cap) snprintf(buf + at, cap - at, " and %d more", f->n - shown);
    return buf;
}

// --overwrite 1: removes what run_files_list found, the training states first, so that a
// removal stopped half way never leaves a checkpoint that -y 1 would take for a whole one.
static inline void run_files_remove(const char *dir, const RunFiles *f) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < f->n; i++) {
            if ((strncmp(f->names[i], "state_", 6) == 0) != (pass == 0)) continue;
            char path[PATH_CAP];
            path_join(path, sizeof path, dir, "%s", f->names[i]);
            if (remove(path) != 0 && errno != ENOENT)
                fatal("--overwrite 1: cannot remove %s: %s", path, strerror(errno));
        }
}

#endif // COMMON_RUN_DIR_H
