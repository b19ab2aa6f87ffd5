// logger.h: the one logger. Step lines and evaluation lines go to stdout and, when a
// log directory is set, to <dir>/main.log; the same events as JSON objects, one a line,
// go to <dir>/metrics.jsonl (logger_json), for plots and scripts (docs/formats.md). A
// resumed run appends to both, after cutting each back to its length at the checkpoint.
#ifndef COMMON_LOGGER_H
#define COMMON_LOGGER_H
#include "util.h"
#include <math.h>
#include <stdarg.h>

typedef struct {
    FILE *f;       // main.log
    FILE *jsonl;   // metrics.jsonl
    int quiet;     // 1: print nothing (the ranks other than 0 of a multi-process run)
} Logger;

static inline FILE *logger_open_file(const char *dir, const char *name, int append) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = xfopen(path, append ? "a" : "w");
    // where appending starts, so that logger_bytes counts from the file's start
    if (fseeko(f, 0, SEEK_END) != 0) fatal("cannot seek in %s: %s", path, strerror(errno));
    return f;
}

// quiet: print and write nothing (then dir is ignored)
static inline void logger_init(Logger *lg, const char *dir, int append, int quiet) {
    lg->f = lg->jsonl = NULL;
    lg->quiet = quiet;
    if (!dir || quiet) return;
    lg->f = logger_open_file(dir, "main.log", append);
    lg->jsonl = logger_open_file(dir, "metrics.jsonl", append);
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

// One line of metrics.jsonl (fmt: a JSON object without the newline).
__attribute__((format(printf, 2, 3)))
static inline void logger_json(Logger *lg, const char *fmt, ...) {
    if (!lg->jsonl) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(lg->jsonl, fmt, ap);
    va_end(ap);
    fputc('\n', lg->jsonl);
    fflush(lg->jsonl);
}

// A number for JSON, which has no NaN or infinity: those become null. buf: 32 bytes.
static inline const char *json_num(char *buf, double x) {
    if (isfinite(x)) snprintf(buf, 32, "%.9g", x);
    else snprintf(buf, 32, "null");
    return buf;
}

// Bytes written to a log file so far (0 without one): a checkpoint records them, so that
// a resumed run drops what a crashed run logged after its checkpoint.
static inline int64_t logger_file_bytes(FILE *f) {
    if (!f) return 0;
    if (fflush(f) != 0) fatal("error writing a log file: %s", strerror(errno));
    off_t n = ftello(f);
    return n < 0 ? 0 : (int64_t)n;
}
static inline int64_t logger_bytes(Logger *lg) { return logger_file_bytes(lg->f); }
static inline int64_t logger_json_bytes(Logger *lg) { return logger_file_bytes(lg->jsonl); }

// Cuts <dir>/<name> back to keep bytes (before a resumed run appends to it); a shorter
// file, or keep < 0 (not recorded), leaves it as it is.
static inline void logger_truncate_file(const char *dir, const char *name, int64_t keep) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    if (keep < 0 || stat(path, &st) != 0 || st.st_size <= keep) return;
    if (truncate(path, (off_t)keep) != 0)
        fatal("cannot cut %s back to %lld bytes: %s", path, (long long)keep, strerror(errno));
}

static inline void logger_truncate(const char *dir, int64_t keep_log, int64_t keep_json) {
    logger_truncate_file(dir, "main.log", keep_log);
    logger_truncate_file(dir, "metrics.jsonl", keep_json);
}

static inline void logger_close(Logger *lg) {
    if (lg->f) fclose(lg->f);
    if (lg->jsonl) fclose(lg->jsonl);
    lg->f = lg->jsonl = NULL;
}

#endif // COMMON_LOGGER_H
