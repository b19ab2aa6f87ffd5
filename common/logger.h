// logger.h: the one logger. Step lines and evaluation lines go to stdout and, when a
// log directory is set, to <dir>/main.log (a resumed run appends, after cutting the log
// back to its checkpoint's length).
#ifndef COMMON_LOGGER_H
#define COMMON_LOGGER_H
#include "util.h"
#include <stdarg.h>

typedef struct {
    FILE *f;
    int quiet;  // 1: print nothing (the ranks other than 0 of a multi-process run)
} Logger;

// quiet: print and write nothing (then dir is ignored)
static inline void logger_init(Logger *lg, const char *dir, int append, int quiet) {
    lg->f = NULL;
    lg->quiet = quiet;
    if (!dir || quiet) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/main.log", dir);
    lg->f = xfopen(path, append ? "a" : "w");
    // where appending starts, so that logger_bytes counts from the file's start
    if (fseeko(lg->f, 0, SEEK_END) != 0) fatal("cannot seek in %s: %s", path, strerror(errno));
}

__attribute__((format(printf, 2, 3)))
static inline void logger_printf(Logger *lg, const char *fmt, ...) {
    if (lg->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (lg->f) {
        va_start(ap, fmt);
        vfprintf(lg->f, fmt, ap);
        va_end(ap);
        fflush(lg->f);
    }
}

// Bytes written to the log file so far (0 without one): a checkpoint records it, so that
// a resumed run drops what a crashed run logged after its checkpoint.
static inline int64_t logger_bytes(Logger *lg) {
    if (!lg->f) return 0;
    if (fflush(lg->f) != 0) fatal("error writing main.log: %s", strerror(errno));
    off_t n = ftello(lg->f);
    return n < 0 ? 0 : (int64_t)n;
}

// Cuts <dir>/main.log back to keep bytes (before a resumed run appends to it); a shorter
// log is left as it is.
static inline void logger_truncate(const char *dir, int64_t keep) {
    char path[4096];
    snprintf(path, sizeof path, "%s/main.log", dir);
    struct stat st;
    if (keep < 0 || stat(path, &st) != 0 || st.st_size <= keep) return;
    if (truncate(path, (off_t)keep) != 0)
        fatal("cannot cut %s back to %lld bytes: %s", path, (long long)keep, strerror(errno));
}

static inline void logger_close(Logger *lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}

#endif // COMMON_LOGGER_H
