// util.h: the one place for fatal errors, checked allocation, checked file I/O,
// atomic file replacement and wall-clock time. Every program and test includes it.
#ifndef COMMON_UTIL_H
#define COMMON_UTIL_H

#define _GNU_SOURCE 1
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

// Set by a multi-process run (common/distributed.h): called before an error exits, so
// that the other ranks are stopped instead of waiting forever in a collective.
static void (*g_fatal_hook)(void) = NULL;

// What the program was doing, when that is not plain from the message (e.g. "sampling
// after step 40"): an error then reads "error: while sampling after step 40: ...".
static char g_fatal_context[256] = "";

static inline void fatal_context_set(const char *what) {
    snprintf(g_fatal_context, sizeof g_fatal_context, "%s", what ? what : "");
}

// Every error exit goes through here.
__attribute__((noreturn))
static inline void fatal_exit(void) {
    fflush(stdout);
    fflush(stderr);
    if (g_fatal_hook) g_fatal_hook();
    exit(1);
}

// A thread that must not end the process itself (the data loader's, common/loader_thread.h)
// sets its g_fatal_trap: fatal() in that thread then keeps the message and jumps back to
// the trap's setjmp, and the thread hands the message to the main thread, which stops the
// run when it reaches the failed work, as it would have stopped without the thread.
typedef struct {
    jmp_buf jump;
    char msg[1024];
} FatalTrap;
static __thread FatalTrap *g_fatal_trap = NULL;

// fatal: print "error: <message>" to stderr and exit(1). Messages should name the file
// or flag at fault and say what to change.
__attribute__((noreturn, format(printf, 1, 2)))
static inline void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (g_fatal_trap) {
        vsnprintf(g_fatal_trap->msg, sizeof g_fatal_trap->msg, fmt, ap);
        va_end(ap);
        longjmp(g_fatal_trap->jump, 1);
    }
    fflush(stdout);
    fprintf(stderr, "error: ");
    if (g_fatal_context[0]) fprintf(stderr, "while %s: ", g_fatal_context);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fatal_exit();
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fatal("out of host memory allocating %zu bytes", n);
    return p;
}

static inline void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fatal("out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

static inline void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) fatal("out of host memory reallocating to %zu bytes", n);
    return q;
}

static inline char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = (char *)xmalloc(n);
    memcpy(d, s, n);
    return d;
}

// What path is when it exists and is not a regular file ("a FIFO", "a directory", ...);
// NULL for a regular file or a path stat cannot see (opening it then says why). Readers of
// model files ask before they open one: opening a FIFO for reading waits for a writer,
// forever if none comes.
static inline const char *not_regular_file(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || S_ISREG(st.st_mode)) return NULL;
    return S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket"
           : S_ISCHR(st.st_mode) ? "a character device" : S_ISBLK(st.st_mode) ? "a block device"
           : "a special file";
}

static inline FILE *xfopen(const char *path, const char *mode) {
    // fopen opens a directory for reading, and its "size" is then 2^63 - 1 bytes
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) fatal("%s is a directory, not a file", path);
    FILE *f = fopen(path, mode);
    if (!f) fatal("cannot open %s (mode %s): %s", path, mode, strerror(errno));
    return f;
}

// Size of an open file in bytes (leaves the position at the start).
static inline int64_t xfile_size(FILE *f, const char *path) {
    if (fseeko(f, 0, SEEK_END) != 0) fatal("cannot seek in %s: %s", path, strerror(errno));
    off_t n = ftello(f);
    if (n < 0) fatal("cannot tell the size of %s: %s", path, strerror(errno));
    if (fseeko(f, 0, SEEK_SET) != 0) fatal("cannot seek in %s: %s", path, strerror(errno));
    return (int64_t)n;
}

// Read exactly count items or die naming the file: a short read means a truncated file.
static inline void xfread(void *dst, size_t size, size_t count, FILE *f, const char *path) {
    size_t got = fread(dst, size, count, f);
    if (got != count) {
        if (ferror(f)) fatal("read error in %s: %s", path, strerror(errno));
        fatal("%s is truncated: wanted %zu items of %zu bytes, got %zu", path, count, size, got);
    }
}

static inline void xfwrite(const void *src, size_t size, size_t count, FILE *f, const char *path) {
    if (fwrite(src, size, count, f) != count)
        fatal("write error in %s: %s (disk full?)", path, strerror(errno));
}

static inline void xfclose(FILE *f, const char *path) {
    if (fclose(f) != 0) fatal("error closing %s: %s", path, strerror(errno));
}

// Whole-file read into a malloc'd buffer (NUL-terminated for convenience).
static inline uint8_t *xread_file(const char *path, size_t *len_out) {
    FILE *f = xfopen(path, "rb");
    int64_t n = xfile_size(f, path);
    uint8_t *buf = (uint8_t *)xmalloc((size_t)n + 1);
    if (n > 0) xfread(buf, 1, (size_t)n, f, path);
    buf[n] = 0;
    fclose(f);
    *len_out = (size_t)n;
    return buf;
}

// Atomic replacement: write to "<path>.tmp", then atomic_commit() flushes it to disk and
// renames it over <path>. A crash mid-write leaves the previous <path> intact.
typedef struct {
    FILE *f;
    char *path;
    char *tmp_path;
} AtomicFile;

static inline AtomicFile atomic_open(const char *path) {
    AtomicFile a;
    a.path = xstrdup(path);
    a.tmp_path = (char *)xmalloc(strlen(path) + 8);
    sprintf(a.tmp_path, "%s.tmp", path);
    a.f = xfopen(a.tmp_path, "wb");
    return a;
}

static inline void atomic_commit(AtomicFile *a) {
    if (fflush(a->f) != 0) fatal("error writing %s: %s", a->tmp_path, strerror(errno));
    if (fsync(fileno(a->f)) != 0) fatal("error syncing %s: %s", a->tmp_path, strerror(errno));
    xfclose(a->f, a->tmp_path);
    if (rename(a->tmp_path, a->path) != 0)
        fatal("cannot rename %s to %s: %s", a->tmp_path, a->path, strerror(errno));
    free(a->path);
    free(a->tmp_path);
    a->f = NULL;
}

// The size of every path buffer that names a file in a run directory (the checkpoints, the
// logs, the lock): Linux's PATH_MAX. A run checks at start that its paths fit
// (common/run_dir.h), and path_join stops rather than cut one short.
#define PATH_CAP 4096

// Writes "<dir>/<name>" into buf (cap bytes), name formatted from name_fmt. A path that does
// not fit stops the program: cut short, it would name another file (metrics.jsonl becoming
// "metrics.j") and the run would fail, or write there, much later.
__attribute__((format(printf, 4, 5)))
static inline char *path_join(char *buf, size_t cap, const char *dir, const char *name_fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, name_fmt);
    int m = vsnprintf(name, sizeof name, name_fmt, ap);
    va_end(ap);
    if (m < 0 || (size_t)m >= sizeof name) fatal("internal: a file name of %d characters in %s", m, dir);
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        fatal("the path of %s in directory %.80s%s is %zu characters, more than the %zu this program allows: "
              "choose a shorter directory (-o)", name, dir, strlen(dir) > 80 ? "..." : "", strlen(dir) + 1 + (size_t)m,
              cap - 1);
    return buf;
}

static inline int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static inline double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The process's peak resident host memory (Linux's VmHWM, pinned buffers included); 0 where
// /proc does not say.
static inline size_t host_peak_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kib = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &kib) == 1) break;
    fclose(f);
    return kib * 1024;
}

// Strict number parsing for flags and config values: the whole string must be a number.
static inline int parse_long(const char *s, long *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end) return 0;
    *out = v;
    return 1;
}

// Finite numbers only: "nan" and "inf" poison a run (a NaN passes every range check).
static inline int parse_double(const char *s, double *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v - v == 0.0)) return 0;
    *out = v;
    return 1;
}

#endif // COMMON_UTIL_H
