// fault_shim.c: an LD_PRELOAD library that makes one file-system call inside one directory
// fail, for dev/test/fault_inject.py. It wraps the libc entry points a program reaches
// through the PLT (open*, creat, write, pwrite, fsync, fdatasync, rename*, unlink*,
// *truncate, mkdir; close only to forget descriptors) and counts the calls that touch
// FAULT_DIR or a file in it. Calls glibc makes internally (fopen, fwrite, remove, ...) never
// pass through here: only what the shim sees counts.
//
//   FAULT_DIR=path      the directory watched (unset: every call passes straight through)
//   FAULT_OP=kind       open|write|fsync|rename|unlink|truncate|mkdir|any: the calls counted
//                       towards FAULT_AT (default any)
//   FAULT_AT=k          the k-th counted call, from 1, gets the fault (unset or 0: none)
//   FAULT_ACTION=what   eio, enospc: that call fails with -1 and the errno (after enospc every
//                       later write to the same descriptor fails too, as on a full disk);
//                       kill: SIGKILL before the call; torn: a write writes its first half,
//                       then SIGKILL (other calls: as kill)
//   FAULT_LOG=file      one line per watched call of every kind, "op<TAB>path" (a rename adds
//                       "<TAB>destination", an open "<TAB>w" or "<TAB>r"), and "fault<TAB>action<TAB>k" just after the
//                       call that got the fault: the driver learns from a clean run how many
//                       calls of each kind it makes, and from a faulty one what was done first
//
// Descriptors are named by /proc/self/fd/N rather than remembered from open: a file opened
// by fopen (which the shim never sees) and fsync'ed through the PLT still counts, and a
// directory renamed while open is named where it is now. The wrappers take no locks and
// allocate nothing: they run on the trainer's threads, between its own calls.
//
// The library also exports fault_crc32c(), the CRC-32C of docs/formats.md, which the driver
// loads with ctypes to check checkpoints: a pure-Python CRC runs at about 11 MB/s.
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum { OP_OPEN, OP_WRITE, OP_FSYNC, OP_RENAME, OP_UNLINK, OP_TRUNCATE, OP_MKDIR, OP_ANY };
static const char *const op_names[] = {"open", "write", "fsync", "rename", "unlink", "truncate", "mkdir", "any"};
enum { ACT_NONE, ACT_EIO, ACT_ENOSPC, ACT_KILL, ACT_TORN };

#define FULL_FDS 4096  // descriptors past this are never marked full (the trainer opens a handful)

static struct {
    int ready, active, op, action, log_fd;
    long at;
    long count;  // counted calls so far (atomic)
    int fired;   // the fault happened (atomic)
    size_t dir_len;
    char dir[PATH_MAX];
    unsigned char full[FULL_FDS];  // descriptors that got ENOSPC: their later writes fail too
} S = {.log_fd = -1};

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_open_2)(const char *, int);
static int (*real_open64_2)(const char *, int);
static int (*real_openat_2)(int, const char *, int);
static int (*real_openat64_2)(int, const char *, int);
static int (*real_creat)(const char *, mode_t);
static int (*real_creat64)(const char *, mode_t);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_truncate64)(const char *, off_t);
static int (*real_close)(int);
static int (*real_mkdir)(const char *, mode_t);

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

// Lexically: drops "." and empty parts, resolves "..", in place. Symbolic links are left
// as they are: a link inside the directory is a name inside it.
static void normalize(char *p) {
    char *out = p, *in = p;
    while (*in) {
        while (*in == '/') in++;
        if (!*in) break;
        char *end = strchr(in, '/');
        size_t n = end ? (size_t)(end - in) : strlen(in);
        if (n == 1 && in[0] == '.') {
        } else if (n == 2 && in[0] == '.' && in[1] == '.') {
            while (out > p && *--out != '/') {}
        } else {
            *out++ = '/';
            memmove(out, in, n);
            out += n;
        }
        in += n;
    }
    if (out == p) *out++ = '/';
    *out = 0;
}

// The absolute path of descriptor fd (as the kernel names it now) into buf, or 0.
static int fd_path(int fd, char *buf, size_t cap) {
    char link[32] = "/proc/self/fd/";
    char digits[16];
    int n = 0;
    unsigned v = (unsigned)fd;
    do digits[n++] = (char)('0' + v % 10); while ((v /= 10) && n < 15);
    size_t at = strlen(link);
    while (n) link[at++] = digits[--n];
    link[at] = 0;
    ssize_t got = readlink(link, buf, cap - 1);
    if (got <= 0 || buf[0] != '/') return 0;
    buf[got] = 0;
    static const char deleted[] = " (deleted)";
    size_t d = sizeof deleted - 1;
    if ((size_t)got > d && !strcmp(buf + got - d, deleted)) buf[got - d] = 0;
    return 1;
}

// path, taken relative to dirfd (AT_FDCWD: the working directory), as an absolute path.
static int abs_path(int dirfd, const char *path, char *buf, size_t cap) {
    if (!path) return 0;
    if (path[0] == '/') {
        if (strlen(path) >= cap) return 0;
        strcpy(buf, path);
    } else {
        if (dirfd == AT_FDCWD) {
            if (!getcwd(buf, cap)) return 0;
        } else if (!fd_path(dirfd, buf, cap)) return 0;
        size_t a = strlen(buf), b = strlen(path);
        if (a + 1 + b >= cap) return 0;
        buf[a] = '/';
        memcpy(buf + a + 1, path, b + 1);
    }
    normalize(buf);
    return 1;
}

static int inside(const char *abs) {
    return !strncmp(abs, S.dir, S.dir_len) && (abs[S.dir_len] == 0 || abs[S.dir_len] == '/');
}

static void init(void) {
    if (S.ready) return;
#define LOAD(var, name) var = (__typeof__(var))next(name)
    LOAD(real_open, "open"); LOAD(real_open64, "open64"); LOAD(real_openat, "openat");
    LOAD(real_openat64, "openat64"); LOAD(real_open_2, "__open_2"); LOAD(real_open64_2, "__open64_2");
    LOAD(real_openat_2, "__openat_2"); LOAD(real_openat64_2, "__openat64_2");
    LOAD(real_creat, "creat"); LOAD(real_creat64, "creat64");
    LOAD(real_write, "write"); LOAD(real_pwrite, "pwrite"); LOAD(real_pwrite64, "pwrite64");
    LOAD(real_fsync, "fsync"); LOAD(real_fdatasync, "fdatasync");
    LOAD(real_rename, "rename"); LOAD(real_renameat, "renameat"); LOAD(real_renameat2, "renameat2");
    LOAD(real_unlink, "unlink"); LOAD(real_unlinkat, "unlinkat");
    LOAD(real_ftruncate, "ftruncate"); LOAD(real_ftruncate64, "ftruncate64");
    LOAD(real_truncate, "truncate"); LOAD(real_truncate64, "truncate64");
    LOAD(real_close, "close"); LOAD(real_mkdir, "mkdir");
#undef LOAD
    const char *dir = getenv("FAULT_DIR");
    if (dir && *dir) {
        // the directory as the kernel names it (the driver may pass a path through a link);
        // one not made yet is taken as written
        if (!realpath(dir, S.dir) && !abs_path(AT_FDCWD, dir, S.dir, sizeof S.dir)) S.dir[0] = 0;
        S.dir_len = strlen(S.dir);
        S.active = S.dir_len > 1;  // never "/": that would watch everything
    }
    const char *op = getenv("FAULT_OP");
    S.op = OP_ANY;
    for (int i = 0; op && i <= OP_ANY; i++)
        if (!strcmp(op, op_names[i])) S.op = i;
    const char *at = getenv("FAULT_AT");
    S.at = at ? atol(at) : 0;
    const char *act = getenv("FAULT_ACTION");
    S.action = !act ? ACT_NONE : !strcmp(act, "eio") ? ACT_EIO : !strcmp(act, "enospc") ? ACT_ENOSPC
             : !strcmp(act, "kill") ? ACT_KILL : !strcmp(act, "torn") ? ACT_TORN : ACT_NONE;
    if (S.action == ACT_NONE) S.at = 0;
    const char *log = getenv("FAULT_LOG");
    if (S.active && log && *log) S.log_fd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    S.ready = 1;
}

__attribute__((constructor)) static void fault_shim_init(void) { init(); }

static void log_line(const char *a, const char *b, const char *c) {
    if (S.log_fd < 0) return;
    char line[3 * PATH_MAX + 8];
    size_t n = 0;
    const char *parts[3] = {a, b, c};
    for (int i = 0; i < 3 && parts[i]; i++) {
        size_t m = strlen(parts[i]);
        if (n + m + 2 > sizeof line) break;
        if (i) line[n++] = '\t';
        memcpy(line + n, parts[i], m);
        n += m;
    }
    line[n++] = '\n';
    real_write(S.log_fd, line, n);  // O_APPEND and one write: lines from threads do not mix
}

// Counts one watched call of kind op (naming path, and a rename's destination) and says
// which fault, if any, it gets.
static int count(int op, const char *path, const char *dest) {
    log_line(op_names[op], path, dest);
    if (!S.at || (S.op != OP_ANY && S.op != op)) return ACT_NONE;
    long k = __atomic_add_fetch(&S.count, 1, __ATOMIC_SEQ_CST);
    if (k != S.at || __atomic_exchange_n(&S.fired, 1, __ATOMIC_SEQ_CST)) return ACT_NONE;
    char num[24];
    snprintf(num, sizeof num, "%ld", k);
    static const char *const acts[] = {"", "eio", "enospc", "kill", "torn"};
    log_line("fault", acts[S.action], num);
    return S.action;
}

// The fault of a call that is not a write: -1 with errno for eio/enospc (marking fd full for
// enospc), SIGKILL for kill and torn; 0 to go ahead.
static int fail(int action, int fd) {
    switch (action) {
    case ACT_EIO: errno = EIO; return -1;
    case ACT_ENOSPC:
        if (fd >= 0 && fd < FULL_FDS) S.full[fd] = 1;
        errno = ENOSPC;
        return -1;
    case ACT_KILL:
    case ACT_TORN: raise(SIGKILL); return -1;
    default: return 0;
    }
}

// The watched calls on descriptors. The path is looked up only while the shim is active.
static int fd_check(int op, int fd) {
    if (!S.ready) init();
    if (!S.active) return ACT_NONE;
    char p[PATH_MAX];
    if (!fd_path(fd, p, sizeof p) || !inside(p)) return ACT_NONE;
    return count(op, p, NULL);
}

static int path_check(int op, int dirfd, const char *path) {
    if (!S.ready) init();
    if (!S.active) return ACT_NONE;
    char p[PATH_MAX];
    if (!abs_path(dirfd, path, p, sizeof p) || !inside(p)) return ACT_NONE;
    return count(op, p, NULL);
}

// An open says whether it may write ("w") or only reads ("r"): a failed read of a finished
// checkpoint may be survived, a failed open of a temporary may not.
static int open_check(int dirfd, const char *path, int flags) {
    if (!S.ready) init();
    if (!S.active) return ACT_NONE;
    char p[PATH_MAX];
    if (!abs_path(dirfd, path, p, sizeof p) || !inside(p)) return ACT_NONE;
    int writes = (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC));
    return count(OP_OPEN, p, writes ? "w" : "r");
}

static int rename_check(int olddirfd, const char *from, int newdirfd, const char *to) {
    if (!S.ready) init();
    if (!S.active) return ACT_NONE;
    char a[PATH_MAX], b[PATH_MAX];
    int ina = abs_path(olddirfd, from, a, sizeof a) && inside(a);
    int inb = abs_path(newdirfd, to, b, sizeof b) && inside(b);
    if (!ina && !inb) return ACT_NONE;
    return count(OP_RENAME, ina ? a : from, inb ? b : to);
}

static int has_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

#define OPEN_BODY(call, dirfd)                                   \
    mode_t mode = 0;                                             \
    if (has_mode(flags)) {                                       \
        va_list ap;                                              \
        va_start(ap, flags);                                     \
        mode = (mode_t)va_arg(ap, int);                          \
        va_end(ap);                                              \
    }                                                            \
    if (fail(open_check(dirfd, path, flags), -1)) return -1;     \
    return call;

int open(const char *path, int flags, ...) { OPEN_BODY(real_open(path, flags, mode), AT_FDCWD) }
int open64(const char *path, int flags, ...) { OPEN_BODY(real_open64(path, flags, mode), AT_FDCWD) }
int openat(int dirfd, const char *path, int flags, ...) { OPEN_BODY(real_openat(dirfd, path, flags, mode), dirfd) }
int openat64(int dirfd, const char *path, int flags, ...) {
    OPEN_BODY(real_openat64(dirfd, path, flags, mode), dirfd)
}

// what _FORTIFY_SOURCE builds call for an open whose flags are not known at compile time
int __open_2(const char *path, int flags) {
    if (fail(open_check(AT_FDCWD, path, flags), -1)) return -1;
    return real_open_2(path, flags);
}
int __open64_2(const char *path, int flags) {
    if (fail(open_check(AT_FDCWD, path, flags), -1)) return -1;
    return real_open64_2(path, flags);
}
int __openat_2(int dirfd, const char *path, int flags) {
    if (fail(open_check(dirfd, path, flags), -1)) return -1;
    return real_openat_2(dirfd, path, flags);
}
int __openat64_2(int dirfd, const char *path, int flags) {
    if (fail(open_check(dirfd, path, flags), -1)) return -1;
    return real_openat64_2(dirfd, path, flags);
}

int creat(const char *path, mode_t mode) {
    if (fail(open_check(AT_FDCWD, path, O_CREAT | O_WRONLY), -1)) return -1;
    return real_creat(path, mode);
}
int creat64(const char *path, mode_t mode) {
    if (fail(open_check(AT_FDCWD, path, O_CREAT | O_WRONLY), -1)) return -1;
    return real_creat64(path, mode);
}

// A write with its fault: a torn one writes its first half (where it was going) and dies.
static ssize_t faulty_write(int fd, const void *buf, size_t n, off_t off, int positioned,
                            ssize_t (*pw)(int, const void *, size_t, off_t)) {
    int action = fd_check(OP_WRITE, fd);
    if (fd >= 0 && fd < FULL_FDS && S.full[fd]) { errno = ENOSPC; return -1; }
    if (action == ACT_TORN) {
        if (positioned) pw(fd, buf, n / 2, off);
        else real_write(fd, buf, n / 2);
        raise(SIGKILL);
    }
    if (fail(action, fd)) return -1;
    return positioned ? pw(fd, buf, n, off) : real_write(fd, buf, n);
}

ssize_t write(int fd, const void *buf, size_t n) {
    if (!S.ready) init();
    if (!S.active) return real_write(fd, buf, n);
    return faulty_write(fd, buf, n, 0, 0, NULL);
}
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    if (!S.ready) init();
    if (!S.active) return real_pwrite(fd, buf, n, off);
    return faulty_write(fd, buf, n, off, 1, real_pwrite);
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    if (!S.ready) init();
    if (!S.active) return real_pwrite64(fd, buf, n, off);
    return faulty_write(fd, buf, n, off, 1, real_pwrite64);
}

int fsync(int fd) {
    if (fail(fd_check(OP_FSYNC, fd), fd)) return -1;
    return real_fsync(fd);
}
int fdatasync(int fd) {
    if (fail(fd_check(OP_FSYNC, fd), fd)) return -1;
    return real_fdatasync(fd);
}

int rename(const char *from, const char *to) {
    if (fail(rename_check(AT_FDCWD, from, AT_FDCWD, to), -1)) return -1;
    return real_rename(from, to);
}
int renameat(int olddirfd, const char *from, int newdirfd, const char *to) {
    if (fail(rename_check(olddirfd, from, newdirfd, to), -1)) return -1;
    return real_renameat(olddirfd, from, newdirfd, to);
}
int renameat2(int olddirfd, const char *from, int newdirfd, const char *to, unsigned flags) {
    if (fail(rename_check(olddirfd, from, newdirfd, to), -1)) return -1;
    return real_renameat2(olddirfd, from, newdirfd, to, flags);
}

int unlink(const char *path) {
    if (fail(path_check(OP_UNLINK, AT_FDCWD, path), -1)) return -1;
    return real_unlink(path);
}
int unlinkat(int dirfd, const char *path, int flags) {
    if (fail(path_check(OP_UNLINK, dirfd, path), -1)) return -1;
    return real_unlinkat(dirfd, path, flags);
}

int ftruncate(int fd, off_t len) {
    if (fail(fd_check(OP_TRUNCATE, fd), fd)) return -1;
    return real_ftruncate(fd, len);
}
int ftruncate64(int fd, off_t len) {
    if (fail(fd_check(OP_TRUNCATE, fd), fd)) return -1;
    return real_ftruncate64(fd, len);
}
int truncate(const char *path, off_t len) {
    if (fail(path_check(OP_TRUNCATE, AT_FDCWD, path), -1)) return -1;
    return real_truncate(path, len);
}
int truncate64(const char *path, off_t len) {
    if (fail(path_check(OP_TRUNCATE, AT_FDCWD, path), -1)) return -1;
    return real_truncate64(path, len);
}

int mkdir(const char *path, mode_t mode) {
    if (fail(path_check(OP_MKDIR, AT_FDCWD, path), -1)) return -1;
    return real_mkdir(path, mode);
}

// A descriptor number is reused by the next open: a full mark must not outlive its file.
int close(int fd) {
    if (!S.ready) init();
    if (fd >= 0 && fd < FULL_FDS) S.full[fd] = 0;
    return real_close(fd);
}

// CRC-32C (Castagnoli, reflected, as docs/formats.md): crc of a previous part (0 to start)
// extended by n bytes. For the driver through ctypes; never called by the trainer.
uint32_t fault_crc32c(uint32_t crc, const void *data, size_t n) {
    static uint32_t table[8][256];
    static int made;
    if (!__atomic_load_n(&made, __ATOMIC_ACQUIRE)) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[0][i] = c;
        }
        for (int t = 1; t < 8; t++)
            for (int i = 0; i < 256; i++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
        __atomic_store_n(&made, 1, __ATOMIC_RELEASE);
    }
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
    for (; n >= 8; n -= 8, p += 8) {  // slicing by 8: the driver checks tens of MB a scenario
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
              table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^ table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
    }
    while (n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}
