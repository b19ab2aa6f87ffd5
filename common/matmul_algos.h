// matmul_algos.h: the matmul tuning file of train_gpt2cu --matmul-algos, the one place that
// reads and writes its format. It fixes, per matmul call shape, which of cuBLASLt's first
// MATMUL_ALGO_CANDIDATES candidates the trainer runs.
//
// Why a file: on a board at its power limit a step's time is its energy, and the algorithm
// fastest in a short burst (what cuBLASLt's heuristic and --deterministic 0 go by) is not
// always the one cheapest in energy. Finding that one takes sustained measurement, seconds
// per candidate (build/bench_matmul --tune writes the file); a fixed file then keeps every
// run reproducible. The candidates are cuBLASLt's for one GPU model, cuBLASLt version and
// precision, so the file names them and the trainer refuses a file made for others.
//
//   # comment
//   gpu NVIDIA H200
//   cublaslt 130100
//   precision bf16
//   # m n k transa transb lda ldb ldd epilogue bias beta_nonzero candidate
//   2304 65536 768 1 0 768 768 2304 3 1 0 0
#ifndef COMMON_MATMUL_ALGOS_H
#define COMMON_MATMUL_ALGOS_H
#include "util.h"

#define MATMUL_ALGO_CANDIDATES 8  // candidates asked of cuBLASLt when a file or timing picks
#define MATMUL_ALGO_KEY 11        // m n k transa transb lda ldb ldd epilogue bias beta_nonzero
#define MATMUL_ALGO_MAX 128

typedef struct {
    int key[MATMUL_ALGO_KEY];
    int candidate;  // index into cuBLASLt's heuristic list for this shape
    int line;       // where it stands in the file, for messages
    int used;       // matched by a call of this run
} MatmulAlgoEntry;

typedef struct {
    char path[1024];
    char gpu[256], precision[16];
    long cublaslt;
    int n;
    MatmulAlgoEntry e[MATMUL_ALGO_MAX];
} MatmulAlgos;

// Reads and checks a tuning file; any fault is fatal, naming the file and line.
static inline void matmul_algos_read(MatmulAlgos *t, const char *path) {
    memset(t, 0, sizeof *t);
    t->cublaslt = -1;
    snprintf(t->path, sizeof t->path, "%s", path);
    FILE *f = fopen(path, "r");
    if (!f) fatal("--matmul-algos: cannot open %s: %s", path, strerror(errno));
    char buf[1024];
    int line = 0;
    while (fgets(buf, sizeof buf, f)) {
        line++;
        size_t len = strlen(buf);
        if (len == sizeof buf - 1 && buf[len - 1] != '\n') fatal("%s:%d: line too long", path, line);
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ')) buf[--len] = '\0';
        char *s = buf;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s || *s == '#') continue;
        if (!strncmp(s, "gpu ", 4)) {
            snprintf(t->gpu, sizeof t->gpu, "%s", s + 4);
        } else if (!strncmp(s, "precision ", 10)) {
            snprintf(t->precision, sizeof t->precision, "%s", s + 10);
        } else if (!strncmp(s, "cublaslt ", 9)) {
            char *end;
            t->cublaslt = strtol(s + 9, &end, 10);
            if (*end || t->cublaslt <= 0) fatal("%s:%d: 'cublaslt' needs a version number, got '%s'", path, line, s + 9);
        } else {
            MatmulAlgoEntry *e = &t->e[t->n];
            int v[MATMUL_ALGO_KEY + 1], used = 0, k;
            for (k = 0; k < MATMUL_ALGO_KEY + 1; k++) {
                int n = 0;
                if (sscanf(s + used, " %d%n", &v[k], &n) != 1) break;
                used += n;
            }
            while (s[used] == ' ' || s[used] == '\t') used++;
            if (k != MATMUL_ALGO_KEY + 1 || s[used])
                fatal("%s:%d: expected %d integers (m n k transa transb lda ldb ldd epilogue bias beta_nonzero "
                      "candidate), got '%s'", path, line, MATMUL_ALGO_KEY + 1, s);
            for (k = 0; k < MATMUL_ALGO_KEY; k++)
                if (v[k] < 0) fatal("%s:%d: negative value %d", path, line, v[k]);
            if (v[MATMUL_ALGO_KEY] < 0 || v[MATMUL_ALGO_KEY] >= MATMUL_ALGO_CANDIDATES)
                fatal("%s:%d: candidate %d is not between 0 and %d", path, line, v[MATMUL_ALGO_KEY],
                      MATMUL_ALGO_CANDIDATES - 1);
            for (int i = 0; i < t->n; i++)
                if (!memcmp(t->e[i].key, v, sizeof e->key))
                    fatal("%s:%d: the same shape as line %d", path, line, t->e[i].line);
            if (t->n == MATMUL_ALGO_MAX) fatal("%s:%d: more than %d shapes", path, line, MATMUL_ALGO_MAX);
            memcpy(e->key, v, sizeof e->key);
            e->candidate = v[MATMUL_ALGO_KEY];
            e->line = line;
            t->n++;
        }
    }
    if (ferror(f)) fatal("read error in %s: %s", path, strerror(errno));
    fclose(f);
    if (!t->gpu[0] || !t->precision[0] || t->cublaslt < 0)
        fatal("%s: missing header line(s): needs 'gpu', 'cublaslt' and 'precision' (build/bench_matmul --tune "
              "writes them)", path);
    if (t->n == 0) fatal("%s: no shapes", path);
}

// The file's candidates are for one GPU model, cuBLASLt version and precision only.
static inline void matmul_algos_check(const MatmulAlgos *t, const char *gpu, long cublaslt, const char *precision) {
    if (strcmp(t->gpu, gpu) || t->cublaslt != cublaslt || strcmp(t->precision, precision))
        fatal("%s was tuned for %s, cuBLASLt %ld, %s; this run has %s, cuBLASLt %ld, %s: tune again with "
              "build/bench_matmul --tune %s", t->path, t->gpu, t->cublaslt, t->precision, gpu, cublaslt, precision,
              t->path);
}

// The entry for a call shape, or NULL; marks it used.
static inline MatmulAlgoEntry *matmul_algos_find(MatmulAlgos *t, const int key[MATMUL_ALGO_KEY]) {
    for (int i = 0; t && i < t->n; i++)
        if (!memcmp(t->e[i].key, key, sizeof t->e[i].key)) {
            t->e[i].used = 1;
            return &t->e[i];
        }
    return NULL;
}

static inline int matmul_algos_used(const MatmulAlgos *t) {
    int u = 0;
    for (int i = 0; i < t->n; i++) u += t->e[i].used;
    return u;
}

// Writes a tuning file, replacing any old one atomically (util.h).
static inline void matmul_algos_write(const char *path, const char *gpu, long cublaslt, const char *precision,
                                      const int (*keys)[MATMUL_ALGO_KEY], const int *candidates, int n,
                                      const char *comment) {
    AtomicFile a = atomic_open(path);
    fprintf(a.f, "# train_gpt2cu --matmul-algos: cuBLASLt's candidate per matmul call shape\n");
    if (comment) fprintf(a.f, "# %s\n", comment);
    fprintf(a.f, "gpu %s\ncublaslt %ld\nprecision %s\n", gpu, cublaslt, precision);
    fprintf(a.f, "# m n k transa transb lda ldb ldd epilogue bias beta_nonzero candidate\n");
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < MATMUL_ALGO_KEY; k++) fprintf(a.f, "%d ", keys[i][k]);
        fprintf(a.f, "%d\n", candidates[i]);
    }
    atomic_commit(&a);
}

#endif // COMMON_MATMUL_ALGOS_H
