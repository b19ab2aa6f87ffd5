// testutil.h: the small harness shared by the C unit tests: CHECK() inside named cases,
// run_case() to run and count them, run_child() to run a function that is expected to
// fail in a forked child and capture its exit status and stderr, and the final
// "N passed, M failed" line.
#ifndef DEV_TEST_TESTUTIL_H
#define DEV_TEST_TESTUTIL_H
#include "../../common/util.h"
#include <sys/wait.h>

static int g_passed = 0, g_failed = 0, g_case_failed = 0;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (!(cond)) {                                                \
            if (!g_case_failed) printf("\n");                         \
            if (g_case_failed++ < 5) { /* the first few only */       \
                printf("    check failed at line %d: ", __LINE__);    \
                printf(__VA_ARGS__);                                  \
                printf("\n");                                         \
            }                                                         \
        }                                                             \
    } while (0)

static inline void run_case(const char *name, void (*fn)(void)) {
    printf("%-48s", name);
    fflush(stdout);
    g_case_failed = 0;
    fn();
    if (g_case_failed) { g_failed++; printf("  FAIL %s\n", name); }
    else { g_passed++; printf("ok\n"); }
    fflush(stdout);
}

typedef void (*child_fn)(const char *arg);

// Runs fn(arg) in a child with stderr captured; returns its exit status (0 if fn
// returned, -1 if it was killed by a signal) and the captured stderr in *err (malloc'd).
static inline int run_child(child_fn fn, const char *arg, char **err) {
    int fds[2];
    if (pipe(fds) != 0) fatal("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) fatal("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0, cap = 1024;
    char *buf = (char *)xmalloc(cap);
    for (;;) {
        if (len + 512 > cap) { cap *= 2; buf = (char *)xrealloc(buf, cap); }
        ssize_t n = read(fds[0], buf + len, cap - len - 1);
        if (n <= 0) break;
        len += (size_t)n;
    }
    buf[len] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    *err = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Expects fn(arg) to fail cleanly: exit status 1 (what fatal() gives) and an stderr that
// starts with "error: " and contains each non-NULL needle.
static inline void expect_failure(const char *what, child_fn fn, const char *arg, const char *n1,
                                  const char *n2, const char *n3) {
    char *err;
    int rc = run_child(fn, arg, &err);
    CHECK(rc == 1, "%s: exit status %d (expected 1, a clean failure)", what, rc);
    CHECK(strncmp(err, "error: ", 7) == 0, "%s: stderr does not start with 'error: ': %s", what, err);
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i]) CHECK(strstr(err, needles[i]) != NULL, "%s: stderr lacks '%s': %s", what, needles[i], err);
    free(err);
}

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}

#endif // DEV_TEST_TESTUTIL_H
