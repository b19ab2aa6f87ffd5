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
#include <fcntl.h>

// Set by a multi-process run (common/distributed.h): called before an error exits, so
// that the other ranks are stopped instead of waiting forever in a collective.
static void (*g_fatal_hook)(void) = NULL;

// What the program was doing, when that is not plain from the message (e.g. "sampling
// after step 40"): an error then reads "error: while sampling after step 40: ...".
static char g_fatal_context[256] = "";
#define PATH_CAP_NOTE 4400

static inline void fatal_context_set(const char *what) {
    snprintf(g_fatal_context, sizeof g_fatal_context, "%s", what ? what : "");
}

// Once a run is under way, every error ends with where it can be continued from ("the
// checkpoint of step 40 in log/run is intact: -y 1 resumes from it"), kept current by the
// run directory (common/run_dir.h) as checkpoints are written.
static char g_fatal_note[PATH_CAP_NOTE] = "";

static inline void fatal_note_set(const char *note) {
    snprintf(g_fatal_note, sizeof g_fatal_note, "%s", note ? note : "");
}

// The files an error exit removes (pending_file_add): the temporaries of atomic files being
// written (AtomicFile below), so that a failed write (a full disk) leaves no partial file to
// keep the disk full; and a file committed ahead of the one that completes it (a checkpoint's
// model before its state), unless that one got into place. A process killed outright leaves
// its temporary, which the next start removes.
typedef struct {
    int dir_fd;
    const char *name;
    const char *unless;  // NULL, or a name whose presence (as a regular file) keeps name
} PendingFile;
static PendingFile *g_pending_files = NULL;
static int g_pending_file_count = 0, g_pending_file_cap = 0;

static inline void pending_files_remove(void) {
    for (int i = 0; i < g_pending_file_count; i++) {
        const PendingFile *p = &g_pending_files[i];
        struct stat st;
        if (!p->unless || fstatat(p->dir_fd, p->unless, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            unlinkat(p->dir_fd, p->name, 0);
    }
    g_pending_file_count = 0;
}

// Every error exit goes through here.
__attribute__((noreturn))
static inline void fatal_exit(void) {
    pending_files_remove();
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
    if (g_fatal_note[0]) fprintf(stderr, "note: %s\n", g_fatal_note);
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

// Atomic replacement: write <name>.tmp in a directory, then atomic_commit() flushes it to
// disk, renames it over <name> and flushes the directory, so that a crash at any moment
// leaves the previous <name> or the new one, whole. The directory is reached through a
// descriptor (a run directory's, held from the start of the run, or the parent of a path),
// and neither the temporary nor the target is followed if it is a symbolic link. Writes go
// through f, a stdio stream over write(2) calls of our own (so that a test's fault shim can
// fail them). Any error stops the program, naming the file, and removes the temporary.
typedef struct {
    FILE *f;
    int fd, dir_fd, own_dir_fd;  // the temporary; its directory; whether dir_fd is ours to close
    char *path, *tmp_path;       // for messages: <dir>/<name>, <dir>/<name>.tmp
    char *name, *tmp_name;       // in dir_fd
} AtomicFile;

static inline ssize_t atomic_cookie_write(void *cookie, const char *buf, size_t n) {
    int fd = (int)(intptr_t)cookie;
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return done ? (ssize_t)done : -1;
        done += (size_t)w;
    }
    return (ssize_t)done;
}

static inline int atomic_cookie_seek(void *cookie, off64_t *pos, int whence) {
    off_t at = lseek((int)(intptr_t)cookie, (off_t)*pos, whence);
    if (at < 0) return -1;
    *pos = at;
    return 0;
}

static inline int atomic_cookie_close(void *cookie) { (void)cookie; return 0; }  // atomic_close closes the fd

static inline char *atomic_join(const char *dir_shown, const char *name, const char *suffix) {
    size_t n = strlen(dir_shown) + strlen(name) + strlen(suffix) + 2;
    char *p = (char *)xmalloc(n);
    size_t d = strlen(dir_shown);
    snprintf(p, n, "%s%s%s%s", dir_shown, d && dir_shown[d - 1] != '/' ? "/" : "", name, suffix);
    return p;
}

// name (in dir_fd) is removed by an error exit, unless unless is there then; the strings
// stay the caller's until pending_file_forget(name).
static inline void pending_file_add(int dir_fd, const char *name, const char *unless) {
    if (g_pending_file_count == g_pending_file_cap) {
        g_pending_file_cap = g_pending_file_cap ? 2 * g_pending_file_cap : 8;
        g_pending_files = (PendingFile *)xrealloc(g_pending_files, (size_t)g_pending_file_cap * sizeof(PendingFile));
    }
    PendingFile p = {dir_fd, name, unless};
    g_pending_files[g_pending_file_count++] = p;
}

static inline void pending_file_forget(const char *name) {
    for (int i = 0; i < g_pending_file_count; i++)
        if (g_pending_files[i].name == name) {
            g_pending_files[i] = g_pending_files[--g_pending_file_count];
            return;
        }
}

// Opens <name>.tmp in the directory dir_fd (shown in messages as dir_shown). A temporary left
// by a killed writer is replaced; one that is not a regular file is refused.
static inline AtomicFile atomic_open_at(int dir_fd, const char *dir_shown, const char *name) {
    AtomicFile a;
    memset(&a, 0, sizeof a);
    a.dir_fd = dir_fd;
    a.path = atomic_join(dir_shown, name, "");
    a.tmp_path = atomic_join(dir_shown, name, ".tmp");
    a.name = xstrdup(name);
    a.tmp_name = (char *)xmalloc(strlen(name) + 5);
    sprintf(a.tmp_name, "%s.tmp", name);
    struct stat st;
    if (fstatat(dir_fd, a.tmp_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISREG(st.st_mode))
            fatal("%s exists and is not a regular file (a link or a directory): it is not a file this program "
                  "wrote, so it is left alone; move it away", a.tmp_path);
        if (unlinkat(dir_fd, a.tmp_name, 0) != 0 && errno != ENOENT)
            fatal("cannot remove the stale temporary %s: %s", a.tmp_path, strerror(errno));
    }
    a.fd = openat(dir_fd, a.tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (a.fd < 0) fatal("cannot create %s: %s", a.tmp_path, strerror(errno));
    pending_file_add(dir_fd, a.tmp_name, NULL);
    cookie_io_functions_t io = {NULL, atomic_cookie_write, atomic_cookie_seek, atomic_cookie_close};
    a.f = fopencookie((void *)(intptr_t)a.fd, "w", io);
    if (!a.f) fatal("cannot open a stream on %s: %s", a.tmp_path, strerror(errno));
    return a;
}

// The same for a path: its parent directory is opened for the write.
static inline AtomicFile atomic_open(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = xstrdup(slash ? path : ".");
    if (slash) dir[slash == path ? 1 : slash - path] = 0;  // "/name" lies in "/"
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) fatal("cannot open the directory of %s: %s", path, strerror(errno));
    AtomicFile a = atomic_open_at(dir_fd, slash ? dir : "", slash ? slash + 1 : path);
    free(dir);
    a.own_dir_fd = 1;
    return a;
}

// Drops the temporary from the error exit's list (it is renamed or removed now).
static inline void atomic_forget(const AtomicFile *a) { pending_file_forget(a->tmp_name); }

// Writes count items to the temporary or stops, removing it.
static inline void atomic_write(AtomicFile *a, const void *src, size_t size, size_t count) {
    if (fwrite(src, size, count, a->f) != count)
        fatal("cannot write %s: %s", a->tmp_path, errno ? strerror(errno) : "write error (disk full?)");
}

// Whether a regular file holds the target name (1) or it is free (0); anything else there (a
// link, a directory) stops the program: it is not a file to replace.
static inline int atomic_target_taken(const AtomicFile *a) {
    struct stat st;
    if (fstatat(a->dir_fd, a->name, &st, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (!S_ISREG(st.st_mode))
        fatal("%s exists and is not a regular file (a link or a directory): it is left alone; move it away",
              a->path);
    return 1;
}

// The two halves of atomic_commit, for a writer that finishes several files before it
// renames them (prepro's shards): atomic_close puts the temporary on disk whole,
// atomic_publish renames it into place.
static inline void atomic_close(AtomicFile *a) {
    errno = 0;
    if (fflush(a->f) != 0 || ferror(a->f))
        fatal("cannot write %s: %s", a->tmp_path, errno ? strerror(errno) : "write error (disk full?)");
    if (fsync(a->fd) != 0) fatal("cannot flush %s to disk: %s", a->tmp_path, strerror(errno));
    fclose(a->f);
    a->f = NULL;
    if (close(a->fd) != 0) fatal("cannot close %s: %s", a->tmp_path, strerror(errno));
}

// atomic_publish in two halves too: the rename, then the directory flushed to disk (the
// rename is on disk only once the directory is) and the file's record freed.
static inline void atomic_rename(AtomicFile *a) {
    atomic_target_taken(a);
    if (renameat(a->dir_fd, a->tmp_name, a->dir_fd, a->name) != 0)
        fatal("cannot rename %s to %s: %s", a->tmp_path, a->path, strerror(errno));
    atomic_forget(a);
}

static inline void atomic_sync_dir(AtomicFile *a) {
    if (fsync(a->dir_fd) != 0 && errno != EINVAL)
        fatal("cannot flush the directory of %s to disk: %s", a->path, strerror(errno));
    if (a->own_dir_fd) close(a->dir_fd);
    free(a->path), free(a->tmp_path), free(a->name), free(a->tmp_name);
}

static inline void atomic_publish(AtomicFile *a) {
    atomic_rename(a);
    atomic_sync_dir(a);
}

static inline void atomic_commit(AtomicFile *a) {
    atomic_close(a);
    atomic_publish(a);
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

// The host memory this process may still take: /proc/meminfo's MemAvailable (free memory
// and what the kernel can reclaim), or less where the process's cgroup (v2: memory.max less
// memory.current, a container's limit) leaves less; 0 where neither says.
static inline size_t host_available_bytes(void) {
    size_t avail = 0, kib = 0;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %zu kB", &kib) == 1) {
                avail = kib * 1024;
                break;
            }
        fclose(f);
    }
    unsigned long long max = 0, cur = 0;
    f = fopen("/sys/fs/cgroup/memory.max", "r");
    int limited = f && fscanf(f, "%llu", &max) == 1;  // ("max": no limit, not a number)
    if (f) fclose(f);
    f = limited ? fopen("/sys/fs/cgroup/memory.current", "r") : NULL;
    if (f && fscanf(f, "%llu", &cur) == 1) {
        const size_t left = cur < max ? (size_t)(max - cur) : 0;
        if (!avail || left < avail) avail = left;
    }
    if (f) fclose(f);
    return avail;
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
