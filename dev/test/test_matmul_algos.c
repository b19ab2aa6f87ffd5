// test_matmul_algos.c: common/matmul_algos.h, the tuning file of train_gpt2cu --matmul-algos:
// what the writer writes the reader reads back; lookups by shape; a file made for another
// GPU, cuBLASLt or precision refused; every malformed file refused with a message naming
// the file and line, never a crash.
#include "testutil.h"
#include "../../common/matmul_algos.h"

static char g_dir[256];

static const char *write_text(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = xfopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static const int KEYS[3][MATMUL_ALGO_KEY] = {
    {2304, 65536, 768, 1, 0, 768, 768, 2304, 3, 1, 0},
    {768, 65536, 3072, 0, 0, 768, 3072, 768, 192, 0, 0},
    {768, 50304, 65536, 0, 1, 768, 50304, 768, 1, 0, 1},
};

static void test_round_trip(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/rt.algos", g_dir);
    int cand[3] = {0, 5, 7};
    matmul_algos_write(path, "NVIDIA H200", 130100, "bf16", KEYS, cand, 3, "made by the test");
    MatmulAlgos t;
    matmul_algos_read(&t, path);
    CHECK(t.n == 3, "%d shapes read back", t.n);
    CHECK(!strcmp(t.gpu, "NVIDIA H200") && t.cublaslt == 130100 && !strcmp(t.precision, "bf16"),
          "header read back as '%s' %ld '%s'", t.gpu, t.cublaslt, t.precision);
    for (int i = 0; i < 3; i++) {
        MatmulAlgoEntry *e = matmul_algos_find(&t, KEYS[i]);
        CHECK(e && e->candidate == cand[i], "shape %d: %s", i, e ? "wrong candidate" : "not found");
    }
    int other[MATMUL_ALGO_KEY];
    memcpy(other, KEYS[0], sizeof other);
    other[10] = 1;  // the same shape accumulating (beta 1) is another call
    CHECK(matmul_algos_find(&t, other) == NULL, "a shape not in the file was found");
    CHECK(matmul_algos_used(&t) == 3, "%d used, expected 3", matmul_algos_used(&t));
    CHECK(matmul_algos_find(NULL, KEYS[0]) == NULL, "lookup without a file");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!file_exists(tmp), "the temporary file was left behind");
}

static void read_it(const char *path) {
    MatmulAlgos t;
    matmul_algos_read(&t, path);
}

static void check_other_gpu(const char *path) {
    MatmulAlgos t;
    matmul_algos_read(&t, path);
    matmul_algos_check(&t, "NVIDIA H100 80GB HBM3", 130100, "bf16");
}

static void check_other_precision(const char *path) {
    MatmulAlgos t;
    matmul_algos_read(&t, path);
    matmul_algos_check(&t, "NVIDIA H200", 130100, "fp16");
}

static void test_refused(void) {
    const char *head = "gpu NVIDIA H200\ncublaslt 130100\nprecision bf16\n";
    const char *row = "2304 65536 768 1 0 768 768 2304 3 1 0 0\n";
    char text[1024];
    expect_failure("missing file", read_it, "/nonexistent/dir/x.algos", "cannot open", "/nonexistent/dir/x.algos", NULL);
    expect_failure("no header", read_it, write_text("h.algos", row), "h.algos", "missing header", NULL);
    expect_failure("no shapes", read_it, write_text("e.algos", head), "e.algos", "no shapes", NULL);
    snprintf(text, sizeof text, "%s# comment\n\n2304 65536 768 1 0 768 768 2304 3 1 0\n", head);
    expect_failure("a short row", read_it, write_text("s.algos", text), "s.algos:6", "expected 12 integers", NULL);
    snprintf(text, sizeof text, "%s2304 65536 768 1 0 768 768 2304 3 1 0 0 9\n", head);
    expect_failure("a long row", read_it, write_text("l.algos", text), "l.algos:4", "expected 12 integers", NULL);
    snprintf(text, sizeof text, "%s2304 65536 768 1 0 768 768 2304 3 1 0 x\n", head);
    expect_failure("not a number", read_it, write_text("x.algos", text), "x.algos:4", NULL, NULL);
    snprintf(text, sizeof text, "%s2304 65536 768 1 0 768 768 2304 3 1 0 8\n", head);
    expect_failure("candidate out of range", read_it, write_text("c.algos", text), "c.algos:4", "between 0 and 7", NULL);
    snprintf(text, sizeof text, "%s2304 -1 768 1 0 768 768 2304 3 1 0 0\n", head);
    expect_failure("negative", read_it, write_text("n.algos", text), "n.algos:4", "negative", NULL);
    snprintf(text, sizeof text, "%s%s%s", head, row, row);
    expect_failure("a shape twice", read_it, write_text("d.algos", text), "d.algos:5", "line 4", NULL);
    snprintf(text, sizeof text, "gpu NVIDIA H200\ncublaslt 13.1\nprecision bf16\n%s", row);
    expect_failure("a bad version", read_it, write_text("v.algos", text), "v.algos:2", "version", NULL);
    snprintf(text, sizeof text, "%s%s", head, row);
    const char *good = write_text("g.algos", text);
    expect_failure("another GPU", check_other_gpu, good, "tuned for NVIDIA H200", "H100", "--tune");
    expect_failure("another precision", check_other_precision, good, "bf16", "fp16", NULL);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_matmul_algos_%d", (int)getpid());
    if (mkdir(g_dir, 0700) != 0) fatal("cannot create %s: %s", g_dir, strerror(errno));
    run_case("writes and reads back; lookup by shape", test_round_trip);
    run_case("bad files and other GPUs refused", test_refused);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("(could not remove %s)\n", g_dir);
    return test_summary();
}
