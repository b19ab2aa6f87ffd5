// logger.h: the one logger. Step lines and evaluation lines go to stdout and, when a
// log directory is set, appended to <dir>/main.log (a resumed run appends).
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

static inline void logger_close(Logger *lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}

#endif // COMMON_LOGGER_H
