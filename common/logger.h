// logger.h: the one logger. Step lines and evaluation lines go to stdout and, when a
// log directory is set, to <dir>/main.log; the same events as JSON objects, one a line,
// go to <dir>/metrics.jsonl (logger_json), for plots and scripts (docs/formats.md). A
// resumed run appends to both, after cutting each back to its length at the checkpoint
// (common/run_dir.h opens and cuts them).
// Every write to the files is checked: a full disk stops the run, naming the file, rather
// than losing the metrics silently.
#ifndef COMMON_LOGGER_H
#define COMMON_LOGGER_H
#include "util.h"
#include <math.h>
#include <stdarg.h>

typedef struct {
    FILE *f;       // main.log
    FILE *jsonl;   // metrics.jsonl
    int quiet;     // 1: print nothing (the ranks other than 0 of a multi-process run)
    char f_path[PATH_CAP], jsonl_path[PATH_CAP];
} Logger;

// log and jsonl: main.log and metrics.jsonl, opened by the run directory (NULL: a run
// without -o), named in messages as log_path and jsonl_path. quiet: print and write nothing.
static inline void logger_init(Logger *lg, FILE *log, const char *log_path, FILE *jsonl, const char *jsonl_path,
                               int quiet) {
    lg->f = quiet ? NULL : log;
    lg->jsonl = quiet ? NULL : jsonl;
    lg->quiet = quiet;
    snprintf(lg->f_path, sizeof lg->f_path, "%s", log_path ? log_path : "");
    snprintf(lg->jsonl_path, sizeof lg->jsonl_path, "%s", jsonl_path ? jsonl_path : "");
    // where appending starts, so that logger_bytes counts from the file's start
    if (lg->f && fseeko(lg->f, 0, SEEK_END) != 0) fatal("cannot seek in %s: %s", lg->f_path, strerror(errno));
    if (lg->jsonl && fseeko(lg->jsonl, 0, SEEK_END) != 0)
        fatal("cannot seek in %s: %s", lg->jsonl_path, strerror(errno));
}

// After a write to one of the log files (failed: the write itself reported an error, with
// errno set): flushes it, and stops the run if anything failed. The checkpoints are written
// apart (temporary file, then rename), so the newest stays intact, and the error's note says
// where -y 1 resumes (common/run_dir.h).
static inline void logger_check(const Logger *lg, FILE *f, const char *path, int failed) {
    (void)lg;
    int err = errno;
    if (fflush(f) != 0 && !failed) {
        failed = 1;
        err = errno;
    }
    if (!failed && !ferror(f)) return;
    fatal("cannot write %s: %s; the run stops here", path, err ? strerror(err) : "write error");
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
        errno = 0;
        int failed = vfprintf(lg->f, fmt, ap) < 0;
        va_end(ap);
        logger_check(lg, lg->f, lg->f_path, failed);
    }
}

// One line of metrics.jsonl (fmt: a JSON object without the newline).
__attribute__((format(printf, 2, 3)))
static inline void logger_json(Logger *lg, const char *fmt, ...) {
    if (!lg->jsonl) return;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int failed = vfprintf(lg->jsonl, fmt, ap) < 0;
    va_end(ap);
    if (!failed) failed = fputc('\n', lg->jsonl) == EOF;
    logger_check(lg, lg->jsonl, lg->jsonl_path, failed);
}

// A number for JSON, which has no NaN or infinity: those become null. buf: 32 bytes.
static inline const char *json_num(char *buf, double x) {
    if (isfinite(x)) snprintf(buf, 32, "%.9g", x);
    else snprintf(buf, 32, "null");
    return buf;
}

// Bytes written to a log file so far (0 without one): a checkpoint records them, so that
// a resumed run drops what a crashed run logged after its checkpoint.
static inline int64_t logger_file_bytes(const Logger *lg, FILE *f, const char *path) {
    if (!f) return 0;
    logger_check(lg, f, path, 0);
    off_t n = ftello(f);
    return n < 0 ? 0 : (int64_t)n;
}
static inline int64_t logger_bytes(Logger *lg) { return logger_file_bytes(lg, lg->f, lg->f_path); }
static inline int64_t logger_json_bytes(Logger *lg) { return logger_file_bytes(lg, lg->jsonl, lg->jsonl_path); }

static inline void logger_close(Logger *lg) {
    if (lg->f && fclose(lg->f) != 0) fatal("error closing %s: %s", lg->f_path, strerror(errno));
    if (lg->jsonl && fclose(lg->jsonl) != 0) fatal("error closing %s: %s", lg->jsonl_path, strerror(errno));
    lg->f = lg->jsonl = NULL;
}

#endif // COMMON_LOGGER_H
