// test_run_dir.c: unit tests of the run directory's rules (common/run_dir.h, common/logger.h):
// paths that do not fit their buffers stop the program instead of being cut; the -o length
// check at start; the exact names a run owns (and the user's files of similar names it does
// not); the lock (held by one process, refused to another naming the holder, never through a
// symbolic link, never taken by ranks other than 0, no obstacle once its holder is gone);
// --overwrite 1 removing only the run's own files, and only at run_dir_start; -y 1 refusing
// model files without states, and setting aside (never deleting) what it does not resume;
// -nk keeping only checkpoints read back intact; writes through the directory held open
// (a renamed directory keeps its run's files); a failed write leaving no temporary and
// naming the checkpoint to resume from; a log write that fails (the file size limit, SIGXFSZ
// ignored) stops the program naming the file. Built with AddressSanitizer and UBSan.
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
                   "state_2147483647.rank2147483647.bin.corrupt.99999", "at most 4045");
    free(d);
    char *err;
    d = name_of_length(4045);  // 4045 + "/" + 49 = 4095 characters, and the NUL
    CHECK(run_child(length_child, d, &err) == 0, "-o of 4,045 characters refused: %s", err);
    free(err);
    free(d);
    d = name_of_length(4046);
    expect_failure("-o of 4,046 characters", length_child, d, "4046", NULL, NULL);
    free(d);
}

static void test_file_names(void) {
    struct { const char *name; int kind, step, rank, suffix; } ours[] = {
        {"model_00000005.bin", RUN_NAME_MODEL, 5, 0, RUN_SUFFIX_NONE},
        {"state_00000005.bin", RUN_NAME_STATE, 5, 0, RUN_SUFFIX_NONE},
        {"state_00000005.rank3.bin", RUN_NAME_STATE, 5, 3, RUN_SUFFIX_NONE},
        {"model_00000005.bin.tmp", RUN_NAME_MODEL, 5, 0, RUN_SUFFIX_TMP},
        {"state_00000005.rank12.bin.tmp", RUN_NAME_STATE, 5, 12, RUN_SUFFIX_TMP},
        {"state_00000020.bin.corrupt", RUN_NAME_STATE, 20, 0, RUN_SUFFIX_CORRUPT},
        {"model_00000020.bin.orphan.3", RUN_NAME_MODEL, 20, 0, RUN_SUFFIX_ORPHAN},
        {"model_123456789.bin", RUN_NAME_MODEL, 123456789, 0, RUN_SUFFIX_NONE},
        {"state_2147483647.rank2147483647.bin", RUN_NAME_STATE, INT_MAX, INT_MAX, RUN_SUFFIX_NONE},
        {"main.log", RUN_NAME_LOG, -1, 0, RUN_SUFFIX_NONE},
        {"metrics.jsonl", RUN_NAME_LOG, -1, 0, RUN_SUFFIX_NONE},
        {".lock", RUN_NAME_LOCK, -1, 0, RUN_SUFFIX_NONE},
    };
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
        RunName n = run_name_parse(ours[i].name);
        CHECK(n.kind == ours[i].kind && n.step == ours[i].step && n.rank == ours[i].rank &&
              n.suffix == ours[i].suffix, "%s: kind %d step %d rank %d suffix %d", ours[i].name, n.kind, n.step,
              n.rank, n.suffix);
    }
    // names a user may give files of their own: never the run's
    const char *other[] = {"model_best.bin", "model_ finetuned.bin", "state_of_the_art.bin", "model_1.bin",
                           "model_00000005.bin.bak", "model_000000005.bin", "state_00000005.rank0.bin",
                           "state_00000005.rank03.bin", "model_00000005.bin.corrupt.1", "model_00000005.bin.orphan.02",
                           "model_-0000005.bin", "model_+0000005.bin", "model_4294967296.bin", "main.log.old",
                           "metrics.jsonl.bak", "state_00000005_00000.bin", "model_00000005.binx", "notes.txt",
                           "model_00000005.safetensors", "model.bin", ".lock.tmp"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        CHECK(run_name_parse(other[i]).kind == RUN_NAME_OTHER, "%s is not a run's file", other[i]);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[PATH_CAP];
    path_join(path, sizeof path, dir, "%s", name);
    FILE *f = xfopen(path, "wb");
    xfwrite(text, 1, strlen(text), f, path);
    xfclose(f, path);
}

static int exists_in(const char *dir, const char *name) {
    char path[PATH_CAP];
    struct stat st;
    return lstat(path_join(path, sizeof path, dir, "%s", name), &st) == 0;
}

// the user's files with names close to a run's, and what each holds
static const char *const g_user_files[] = {"model_best.bin", "model_ finetuned.bin", "state_of_the_art.bin",
                                           "model_1.bin", "model_00000003.bin.bak", "notes.txt"};

static void plant_user_files(const char *d) {
    for (size_t i = 0; i < sizeof g_user_files / sizeof g_user_files[0]; i++) write_file(d, g_user_files[i], "mine");
    char sub[PATH_CAP];
    mkdir(path_join(sub, sizeof sub, d, "model_archive.bin"), 0755);
    mkdir(path_join(sub, sizeof sub, d, "state_old.bin"), 0755);
    write_file(sub, "inside.txt", "mine");
    char link[PATH_CAP];
    if (symlink("../elsewhere", path_join(link, sizeof link, d, "model_link.bin")) != 0) CHECK(0, "symlink");
}

static void check_user_files(const char *d, const char *when) {
    for (size_t i = 0; i < sizeof g_user_files / sizeof g_user_files[0]; i++) {
        char path[PATH_CAP];
        size_t len = 0;
        uint8_t *b = exists_in(d, g_user_files[i]) ? xread_file(path_join(path, sizeof path, d, "%s", g_user_files[i]),
                                                                  &len) : NULL;
        CHECK(b && len == 4 && !memcmp(b, "mine", 4), "%s: %s changed or removed", when, g_user_files[i]);
        free(b);
    }
    CHECK(exists_in(d, "model_archive.bin") && exists_in(d, "state_old.bin/inside.txt") &&
          exists_in(d, "model_link.bin"), "%s: a user's directory or link is gone", when);
}

static RunDir open_dir(const char *d, int lock) {
    RunDir rd;
    run_dir_open(&rd, d, 0, lock);
    return rd;
}

// --overwrite 1: the exact files of the run, removed only by run_dir_start
static void test_overwrite(void) {
    char *d = dir_in("overwrite");
    plant_user_files(d);
    const char *run_files[] = {"model_00000002.bin", "state_00000002.bin", "main.log", "metrics.jsonl",
                               "state_00000002.rank1.bin.tmp"};
    for (size_t i = 0; i < sizeof run_files / sizeof run_files[0]; i++) write_file(d, run_files[i], "run");
    write_file(d, "model_00000001.bin.corrupt", "aside");
    RunDir rd = open_dir(d, 0);
    run_dir_claim(&rd, 0, 1, NULL);
    CHECK(rd.n_earlier == 5, "the earlier run has %d files, want 5", rd.n_earlier);
    for (size_t i = 0; i < sizeof run_files / sizeof run_files[0]; i++)
        CHECK(exists_in(d, run_files[i]), "%s removed by the claim, before the start-up checks", run_files[i]);
    run_dir_start(&rd, 0, -1, 1);
    for (size_t i = 0; i < sizeof run_files / sizeof run_files[0]; i++)
        CHECK(!exists_in(d, run_files[i]), "%s left by --overwrite 1", run_files[i]);
    CHECK(exists_in(d, "model_00000001.bin.corrupt"), "a set-aside file removed");
    check_user_files(d, "--overwrite 1");
    run_dir_close(&rd);
    fatal_note_set(NULL);
    free(d);
}

static void claim_child(const char *d) {
    RunDir rd = open_dir(d, 0);
    run_dir_claim(&rd, 0, 0, NULL);
}

static void claim_overwrite_e_child(const char *d) {
    char e[PATH_CAP];
    RunDir rd = open_dir(d, 0);
    run_dir_claim(&rd, 0, 1, path_join(e, sizeof e, d, "model_00000002.bin"));
}

static void test_claim(void) {
    char *d = dir_in("claim_users"), *err;
    plant_user_files(d);
    CHECK(run_child(claim_child, d, &err) == 0, "user files alone are no earlier run: %s", err);
    free(err);
    free(d);
    d = dir_in("claim_dir");
    char sub[PATH_CAP];
    mkdir(path_join(sub, sizeof sub, d, "model_00000003.bin"), 0755);
    expect_failure("a directory under a checkpoint's name", claim_child, d, "model_00000003.bin is not a regular file",
                   "left alone", NULL);
    free(d);
    d = dir_in("claim_e");
    write_file(d, "model_00000002.bin", "run");
    expect_failure("--overwrite 1 over -e's file", claim_overwrite_e_child, d, "would remove",
                   "the model -e names", NULL);
    CHECK(exists_in(d, "model_00000002.bin"), "-e's file removed");
    expect_failure("an earlier run without -y 1 or --overwrite 1", claim_child, d, "holds an earlier run",
                   "model_00000002.bin", NULL);
    free(d);
}

static void lock_child(const char *dir) { RunDir rd = open_dir(dir, 1); (void)rd; }

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
    RunDir rd = open_dir(held, 1);
    (void)rd;
    snprintf(pid, sizeof pid, "pid %ld on ", (long)getpid());
    expect_failure("a second lock", lock_child, held, "in use by another run", pid, held);
    // a lock file that is a symbolic link is never followed: its target is not touched
    char *linked = dir_in("lock_link"), target[PATH_CAP];
    write_file(linked, "precious.txt", "mine");
    if (symlink("precious.txt", path_join(lock_path, sizeof lock_path, linked, RUN_LOCK_NAME)) != 0)
        CHECK(0, "symlink");
    expect_failure("a .lock that is a symbolic link", lock_child, linked, ".lock is a symbolic link", "never followed",
                   NULL);
    size_t len;
    uint8_t *b = xread_file(path_join(target, sizeof target, linked, "precious.txt"), &len);
    CHECK(len == 4 && !memcmp(b, "mine", 4), "the link's target was written: %zu bytes", len);
    free(b);
    // a .lock of another tool's (not "<pid> <host>") is not rewritten
    char *other = dir_in("lock_other");
    write_file(other, RUN_LOCK_NAME, "locked by the backup tool\n");
    expect_failure("a .lock another program wrote", lock_child, other, "did not write", "left alone", NULL);
    b = xread_file(path_join(target, sizeof target, other, RUN_LOCK_NAME), &len);
    CHECK(len == 26 && !memcmp(b, "locked by the backup tool\n", 26), "another program's .lock was rewritten");
    free(b);
    free(other);
    free(free_dir);
    free(held);
    free(linked);
}

// a small checkpoint pair of step, written through the run directory as a trainer does
static const GPT2Config g_small = {16, 300, 384, 2, 2, 8};

static void write_checkpoint(RunDir *rd, int step) {
    char mn[64], sn[64];
    float *params = (float *)xcalloc(gpt2_num_params(&g_small), sizeof(float));
    params[0] = (float)step;
    TrainState s;
    memset(&s, 0, sizeof s);
    s.n = 10;
    s.m = (float *)xcalloc(s.n, sizeof(float));
    s.v = (float *)xcalloc(s.n, sizeof(float));
    s.world_size = 1;
    s.step = step;
    s.loader_pos_bytes = 24;
    run_checkpoint_name(mn, sizeof mn, RUN_NAME_MODEL, step, 0);
    run_checkpoint_name(sn, sizeof sn, RUN_NAME_STATE, step, 0);
    AtomicFile mf = run_dir_begin(rd, mn);
    s.model_crc = gpt2_checkpoint_write_to(&mf, &g_small, params, 0);
    AtomicFile sf = run_dir_begin(rd, sn);
    train_state_write_to(&sf, &s);
    run_dir_finish_checkpoint(rd, step, &mf, &sf);
    free(s.m), free(s.v), free(params);
}

static void flip_last_byte(const char *dir, const char *name) {
    char path[PATH_CAP];
    size_t len;
    path_join(path, sizeof path, dir, "%s", name);
    uint8_t *b = xread_file(path, &len);
    b[len - 1] ^= 1;
    FILE *f = xfopen(path, "wb");
    xfwrite(b, 1, len, f, path);
    xfclose(f, path);
    free(b);
}

static int quiet_stderr(void) {
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
    return saved;
}

static void restore_stderr(int saved) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

static void pick_child(const char *d) {
    RunDir rd = open_dir(d, 0);
    printf("%d\n", resume_pick_step(&rd, 0, 0, NULL, NULL));
}

// -y 1: model files without their states; what is newer than the resumed checkpoint
static void test_resume(void) {
    char *d = dir_in("resume_orphans");
    write_file(d, "model_00000003.bin", "a model");
    expect_failure("-y 1 over model files whose states were removed", pick_child, d, "no training state",
                   "would overwrite", "--overwrite 1");
    write_file(d, "state_00000003.bin.tmp", "unfinished");
    char *err;
    CHECK(run_child(pick_child, d, &err) == 0 && strstr(err, ""), "the first checkpoint unfinished: a fresh start");
    free(err);
    free(d);
    d = dir_in("resume_aside");
    RunDir rd = open_dir(d, 0);
    for (int step = 3; step <= 9; step += 3) write_checkpoint(&rd, step);
    flip_last_byte(d, "state_00000009.bin");
    write_file(d, "model_00000012.bin", "a model without its state");
    write_file(d, "state_00000012.bin.tmp", "unfinished");
    int saved = quiet_stderr();
    int pick = resume_pick_step(&rd, 0, 1, NULL, NULL);
    run_dir_start(&rd, 1, pick, 1);
    restore_stderr(saved);
    CHECK(pick == 6, "picked step %d, want 6", pick);
    CHECK(exists_in(d, "state_00000009.bin.corrupt"), "state 9 set aside as corrupt");
    CHECK(exists_in(d, "model_00000009.bin.orphan"), "model 9 set aside");
    CHECK(exists_in(d, "model_00000012.bin.corrupt"), "model 12 (not a model file) set aside as corrupt");
    CHECK(!exists_in(d, "state_00000009.bin") && !exists_in(d, "model_00000009.bin") &&
          !exists_in(d, "model_00000012.bin") && !exists_in(d, "state_00000012.bin.tmp"),
          "a newer checkpoint or a temporary left in place");
    CHECK(exists_in(d, "model_00000006.bin") && exists_in(d, "model_00000003.bin"), "older checkpoints kept");
    CHECK(strstr(g_fatal_note, "step 6") != NULL, "the note: %s", g_fatal_note);
    // the same step set aside twice: the second gets its own name
    write_checkpoint(&rd, 9);
    flip_last_byte(d, "state_00000009.bin");
    saved = quiet_stderr();
    pick = resume_pick_step(&rd, 0, 1, NULL, NULL);
    run_dir_start(&rd, 1, pick, 1);
    restore_stderr(saved);
    CHECK(exists_in(d, "state_00000009.bin.corrupt.2") && exists_in(d, "state_00000009.bin.corrupt"),
          "a second corrupt state of step 9 next to the first");
    run_dir_close(&rd);
    fatal_note_set(NULL);
    free(d);
}

// -nk 1 with a newer checkpoint corrupt: the intact ones are never all removed
static void test_prune(void) {
    char *d = dir_in("prune");
    RunDir rd = open_dir(d, 0);
    write_checkpoint(&rd, 3);
    write_checkpoint(&rd, 6);
    write_checkpoint(&rd, 20);
    flip_last_byte(d, "state_00000020.bin");
    int saved = quiet_stderr();
    run_dir_prune(&rd, 1, 0, NULL, NULL);
    restore_stderr(saved);
    CHECK(exists_in(d, "state_00000006.bin") && exists_in(d, "model_00000006.bin"),
          "the newest intact checkpoint was removed");
    CHECK(exists_in(d, "state_00000020.bin"), "the corrupt checkpoint was removed (it is -y 1's to set aside)");
    CHECK(!exists_in(d, "state_00000003.bin") && !exists_in(d, "model_00000003.bin"), "step 3 kept past -nk 1");
    write_checkpoint(&rd, 9);  // (the corrupt 20 is still the newest by number)
    saved = quiet_stderr();
    run_dir_prune(&rd, 1, 0, NULL, NULL);
    restore_stderr(saved);
    CHECK(exists_in(d, "state_00000009.bin") && !exists_in(d, "state_00000006.bin"), "-nk 1 keeps 9, removes 6");
    run_dir_close(&rd);
    free(d);
}

// a directory renamed while its run goes on: the run's files follow it
static void test_renamed(void) {
    char *d = dir_in("renamed"), moved[PATH_CAP];
    RunDir rd = open_dir(d, 0);
    snprintf(moved, sizeof moved, "%s_old", d);
    CHECK(rename(d, moved) == 0, "rename");
    mkdir(d, 0755);  // another run's directory now has the name
    write_checkpoint(&rd, 5);
    CHECK(exists_in(moved, "model_00000005.bin") && exists_in(moved, "state_00000005.bin"),
          "the checkpoint is not in the renamed directory");
    CHECK(!exists_in(d, "model_00000005.bin"), "the checkpoint went into the directory of the new name");
    run_dir_close(&rd);
    free(d);
}

// a checkpoint write that fails (the file size limit): no temporary left, the note names
// the checkpoint to resume from
static void big_write_child(const char *d) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit r = {4096, 4096};
    if (setrlimit(RLIMIT_FSIZE, &r) != 0) fatal("setrlimit: %s", strerror(errno));
    RunDir rd = open_dir(d, 0);
    rd.last_step = 40;
    run_dir_note(&rd);
    write_checkpoint(&rd, 50);
}

// the state's commit fails once the model is in place (here: something else under its name)
static void state_fails_child(const char *d) {
    RunDir rd = open_dir(d, 0);
    write_checkpoint(&rd, 7);
}

static void test_failed_write(void) {
    char *d = dir_in("full");
    expect_failure("a checkpoint past the file size limit", big_write_child, d, "model_00000050.bin.tmp",
                   "the checkpoint of step 40", "-y 1 resumes from it");
    CHECK(!exists_in(d, "model_00000050.bin.tmp") && !exists_in(d, "model_00000050.bin"), "a partial file is left");
    char sub[PATH_CAP];
    mkdir(path_join(sub, sizeof sub, d, "state_00000007.bin"), 0755);
    expect_failure("a state that cannot be committed", state_fails_child, d, "state_00000007.bin", "not a regular file",
                   NULL);
    CHECK(!exists_in(d, "model_00000007.bin") && !exists_in(d, "state_00000007.bin.tmp"),
          "the model of a checkpoint whose state failed is left: -y 1 would refuse it as an earlier run's");
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
    RunDir rd = open_dir(d, 0);
    Logger lg;
    run_logger_open(&lg, &rd, -1, NULL, 0);
    rd.last_step = g_ckpt_step;
    run_dir_note(&rd);
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
                   "the checkpoint of step 40 in");
    expect_failure("metrics.jsonl past the limit", log_child, "json", "json/metrics.jsonl: File too large", "step 40",
                   NULL);
    g_ckpt_step = -1;
    expect_failure("before any checkpoint", log_child, "log", "main.log", "holds no checkpoint of this run yet", NULL);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "build/test_run_dir_%d", (int)getpid());
    mkdir("build", 0755);
    if (mkdir(g_dir, 0755) != 0) fatal("cannot create %s", g_dir);
    run_case("paths: cut short is an error", test_paths);
    run_case("the names a run owns, and those it does not", test_file_names);
    run_case("--overwrite 1: the run's files only, at the start", test_overwrite);
    run_case("the claim: user files, non-files, -e's file", test_claim);
    run_case("the lock: one holder, never through a link", test_lock);
    run_case("-y 1: orphan models refused, newer checkpoints set aside", test_resume);
    run_case("-nk: only checkpoints read back intact are kept", test_prune);
    run_case("a renamed run directory keeps its run's files", test_renamed);
    run_case("a failed checkpoint write leaves no temporary", test_failed_write);
    run_case("a failed log write stops, naming the file", test_log_write_fails);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    return test_summary();
}
