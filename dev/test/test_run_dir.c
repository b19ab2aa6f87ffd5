// test_run_dir.c: unit tests of the run directory's rules (common/run_dir.h, common/logger.h,
// common/train_common.h): paths that do not fit their buffers stop the program instead of
// being cut; the -o length check at start; which files are an earlier run's; the lock (held
// by one process, refused to another naming the holder, never taken by ranks other than 0,
// no obstacle once its holder is gone); -y 1's reading of model files without a state; and
// a log write that fails (the file size limit, SIGXFSZ ignored) stops the program naming the
// file and the checkpoint to resume from. Built with AddressSanitizer and UBSan.
#include "testutil.h"
#include "../../common/train_common.h"
#include <signal.h>
#include <sys/resource.h>

static char g_dir[256];

static char *dir_in(const char *name) {
    char *p = (char *)xmalloc(strlen(g_dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", g_dir, name);
    mkdir(p, 0755);
    return p;
}

static void touch(const char *dir, const char *name) {
    char path[PATH_CAP];
    path_join(path, sizeof path, dir, "%s", name);
    FILE *f = xfopen(path, "wb");
    xfclose(f, path);
}

// a directory name of n characters (the characters only: nothing is created)
static char *name_of_length(size_t n) {
    char *s = (char *)xmalloc(n + 1);
    memset(s, 'd', n);
    s[n] = 0;
    return s;
}

static void join_child(const char *dir) {
    char path[PATH_CAP];
    path_join(path, sizeof path, dir, "metrics.jsonl");
}

static void join_small_child(const char *dir) {
    char path[24];
    path_join(path, sizeof path, dir, "main.log");
}

static void length_child(const char *dir) { run_dir_check_path_length(dir); }

static void test_paths(void) {
    char path[PATH_CAP];
    CHECK(!strcmp(path_join(path, sizeof path, "run", "model_%08d.bin", 40), "run/model_00000040.bin"), "%s", path);
    // 4,085 characters and "/metrics.jsonl" do not fit 4,096 bytes: snprintf made "metrics.j"
    char *d = name_of_length(4085);
    expect_failure("a path cut short", join_child, d, "metrics.jsonl", "4099 characters", "-o");
    char small[24];
    path_join(small, sizeof small, "run", "main.log");
    CHECK(!strcmp(small, "run/main.log"), "a path that just fits: %s", small);
    expect_failure("one byte short", join_small_child, "run/a_longer_na", "main.log", "24 characters, more than the 23",
                   NULL);
    expect_failure("-o of 4,085 characters", length_child, d, "-o: the directory name is 4085 characters",
                   "state_2147483647.rank2147483647.bin.tmp", "at most 4055");
    free(d);
    char *err;
    d = name_of_length(4055);  // 4055 + "/" + 39 = 4095 characters, and the NUL
    CHECK(run_child(length_child, d, &err) == 0, "-o of 4,055 characters refused: %s", err);
    free(err);
    free(d);
    d = name_of_length(4056);
    expect_failure("-o of 4,056 characters", length_child, d, "4056", NULL, NULL);
    free(d);
}

static void test_file_kinds(void) {
    const char *ckpt[] = {"model_00000005.bin", "state_00000005.bin", "state_00000005.rank3.bin",
                          "model_00000005.bin.tmp", "state_00000005.bin.tmp", "state_00000005.rank3.bin.tmp",
                          "state_00000005_00000.bin"};
    const char *logs[] = {"main.log", "metrics.jsonl"};
    const char *other[] = {".lock", "notes.txt", "model.bin", "main.log.old", "metrics.jsonl.bak", "state.txt",
                           "train.bin", "model_5.safetensors"};
    for (size_t i = 0; i < sizeof ckpt / sizeof ckpt[0]; i++)
        CHECK(run_file_kind(ckpt[i]) == RUN_FILE_CHECKPOINT, "%s is a checkpoint file", ckpt[i]);
    for (size_t i = 0; i < sizeof logs / sizeof logs[0]; i++)
        CHECK(run_file_kind(logs[i]) == RUN_FILE_LOG, "%s is a log", logs[i]);
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        CHECK(run_file_kind(other[i]) == RUN_FILE_OTHER, "%s is not a run's", other[i]);
    char *d = dir_in("kinds");
    touch(d, "notes.txt");
    touch(d, "state_00000002.bin");
    touch(d, "main.log");
    touch(d, "model_00000002.bin");
    RunFiles f;
    run_files_list(d, &f);
    char text[200];
    CHECK(f.n == 3 && f.checkpoints == 2 && f.logs == 1, "listed %d files, %d checkpoint, %d log", f.n, f.checkpoints,
          f.logs);
    CHECK(!strcmp(run_files_text(&f, text, sizeof text), "main.log, model_00000002.bin, state_00000002.bin"), "%s",
          text);
    run_files_remove(d, &f);
    run_files_free(&f);
    run_files_list(d, &f);
    CHECK(f.n == 0, "after the removal %d files are left", f.n);
    run_files_free(&f);
    CHECK(file_exists("build") && access(d, F_OK) == 0, "the directory stays");
    char notes[PATH_CAP];
    CHECK(file_exists(path_join(notes, sizeof notes, d, "notes.txt")), "a file of no run's stays");
    free(d);
}

static void lock_child(const char *dir) { run_dir_lock(dir); }

static TrainOptions g_claim;
static void claim_rank1_child(const char *dir) {
    (void)dir;
    run_dir_claim(&g_claim, 0);
}
static void claim_rank0_child(const char *dir) {
    (void)dir;
    run_dir_claim(&g_claim, 1);
}

static void test_lock(void) {
    // a lock whose holder is gone blocks nothing; its file stays
    char *free_dir = dir_in("lock_free"), *err;
    CHECK(run_child(lock_child, free_dir, &err) == 0, "a first lock: %s", err);
    free(err);
    CHECK(run_child(lock_child, free_dir, &err) == 0, "a lock after its holder ended: %s", err);
    free(err);
    char lock_path[PATH_CAP];
    CHECK(file_exists(path_join(lock_path, sizeof lock_path, free_dir, RUN_LOCK_NAME)), "the lock file stays");
    // held by this process for the rest of the test: another process is refused, naming it
    char *held = dir_in("lock_held"), pid[64];
    train_options_defaults(&g_claim, 64);
    g_claim.out_dir = held;
    run_dir_claim(&g_claim, 1);
    snprintf(pid, sizeof pid, "pid %ld on ", (long)getpid());
    expect_failure("a second lock", lock_child, held, "in use by another run", pid, held);
    expect_failure("a second run's rank 0", claim_rank0_child, NULL, "in use by another run", pid, NULL);
    // the other ranks of a run share its directory: they neither lock nor look
    touch(held, "model_00000003.bin");
    CHECK(run_child(claim_rank1_child, NULL, &err) == 0, "a rank other than 0 was refused: %s", err);
    free(err);
    free(free_dir);
    free(held);
}

// -y 1 finding model files and no training state
static void test_models_without_state(void) {
    char *d = dir_in("orphans");
    int *steps, n = models_without_state(d, -1, &steps);
    CHECK(n == 0 && !fresh_start_keeps_logs(d, steps, n), "an empty directory: nothing to keep");
    free(steps);
    touch(d, "model_00000003.bin");
    touch(d, "state_00000003.bin.tmp");
    n = models_without_state(d, -1, &steps);
    CHECK(n == 1 && steps[0] == 3 && !fresh_start_keeps_logs(d, steps, n),
          "the first checkpoint stopped in its state's write: the logs start over");
    free(steps);
    char path[PATH_CAP];
    remove(path_join(path, sizeof path, d, "state_00000003.bin.tmp"));
    touch(d, "state_00000003.rank1.bin");
    n = models_without_state(d, -1, &steps);
    CHECK(n == 1 && !fresh_start_keeps_logs(d, steps, n), "a ZeRO rank's state of the same step: stopped mid-write");
    free(steps);
    remove(path_join(path, sizeof path, d, "state_00000003.rank1.bin"));
    n = models_without_state(d, -1, &steps);
    CHECK(n == 1 && fresh_start_keeps_logs(d, steps, n), "a model file alone: an earlier run's, its logs kept");
    free(steps);
    touch(d, "model_00000006.bin");
    touch(d, "state_00000006.bin.tmp");
    n = models_without_state(d, -1, &steps);
    CHECK(n == 2 && steps[0] == 6 && fresh_start_keeps_logs(d, steps, n),
          "two model files: an earlier run's, whatever the newest one's state");
    free(steps);
    n = models_without_state(d, 3, &steps);
    CHECK(n == 1 && steps[0] == 6, "after step 3: step 6 only");
    free(steps);
    free(d);
}

// writes lines to main.log (arg "log") or metrics.jsonl ("json") under a 16 KiB file size
// limit until one fails
static int g_ckpt_step;
static void log_child(const char *which) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit r = {16384, 16384};
    if (setrlimit(RLIMIT_FSIZE, &r) != 0) fatal("setrlimit: %s", strerror(errno));
    char *d = dir_in(which);
    Logger lg;
    logger_init(&lg, d, 0, 0);
    lg.ckpt_step = g_ckpt_step;
    int out = dup(1), null = open("/dev/null", O_WRONLY);  // the console copy of each line: not the test's output
    dup2(null, 1);
    for (int i = 0; i < 1000; i++) {
        if (!strcmp(which, "log")) logger_printf(&lg, "step %5d | a line of the log, some eighty characters long\n", i);
        else logger_json(&lg, "{\"type\": \"step\", \"step\": %d, \"note\": \"some eighty characters long\"}", i);
    }
    fflush(stdout);
    dup2(out, 1);
    logger_close(&lg);
    free(d);
}

static void test_log_write_fails(void) {
    g_ckpt_step = 40;
    expect_failure("main.log past the limit", log_child, "log", "cannot write", "log/main.log: File too large",
                   "the checkpoint of step 40 is intact: -y 1 resumes from it");
    expect_failure("metrics.jsonl past the limit", log_child, "json", "json/metrics.jsonl: File too large", "step 40",
                   NULL);
    g_ckpt_step = -1;
    expect_failure("before any checkpoint", log_child, "log", "main.log", "no checkpoint was written yet", NULL);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "build/test_run_dir_%d", (int)getpid());
    mkdir("build", 0755);
    if (mkdir(g_dir, 0755) != 0) fatal("cannot create %s", g_dir);
    run_case("paths: cut short is an error", test_paths);
    run_case("which files are an earlier run's", test_file_kinds);
    run_case("the lock: one holder, rank 0 only", test_lock);
    run_case("-y 1: model files without a state", test_models_without_state);
    run_case("a failed log write stops, naming the file", test_log_write_fails);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return test_summary();
}
