// test_nccl_id_file.cu: the environment launch's NCCL id exchange (kernels/comm.cuh,
// GPT2_NCCL_ID_FILE), which needs no GPU: rank 0 publishes the id in a file, the other
// ranks (here forked processes) wait for it and read it. Checks that every rank gets
// rank 0's bytes, that rank 0 refuses a stale file from an earlier launch, and that a
// file of the wrong size is refused with a message naming it.
#include "dev/test/testutil.h"
#include "kernels/comm.cuh"
#include "common/rng.h"

static char g_dir[] = "/tmp/test_nccl_id_XXXXXX";
static char g_path[4200];

static void make_id(ncclUniqueId *id, uint64_t seed) {
    uint64_t s = rng_seed(seed);
    for (size_t i = 0; i < sizeof id->internal; i++) id->internal[i] = (char)(rng_next_u64(&s) & 0xff);
}

// ranks 1..3 start first and wait; rank 0 writes after a delay; each reader checks the bytes
static void test_exchange(void) {
    unlink(g_path);
    ncclUniqueId want;
    make_id(&want, (uint64_t)time(NULL));
    pid_t kids[3];
    for (int r = 1; r <= 3; r++) {
        fflush(stdout);
        kids[r - 1] = fork();
        if (kids[r - 1] == 0) {
            ncclUniqueId got;
            memset(&got, 0, sizeof got);
            comm_nccl_id_via_file(g_path, r, &got);
            _exit(memcmp(&got, &want, sizeof got) == 0 ? 0 : 3);
        }
    }
    usleep(300 * 1000);  // the readers are polling by now
    comm_nccl_id_via_file(g_path, 0, &want);
    for (int r = 1; r <= 3; r++) {
        int status;
        waitpid(kids[r - 1], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d did not read rank 0's id (status %d)", r, status);
    }
    struct stat st;
    CHECK(stat(g_path, &st) == 0 && st.st_size == (off_t)sizeof(ncclUniqueId), "the id file holds %lld bytes",
          (long long)st.st_size);
}

static void write_stale(const char *arg) {
    (void)arg;
    ncclUniqueId id;
    make_id(&id, 1);
    comm_nccl_id_via_file(g_path, 0, &id);  // the file from test_exchange is still there
}

static void read_short(const char *arg) {
    (void)arg;
    FILE *f = fopen(g_path, "wb");
    fputs("not an id", f);
    fclose(f);
    ncclUniqueId id;
    comm_nccl_id_via_file(g_path, 1, &id);
}

static void test_refusals(void) {
    expect_failure("stale id file", write_stale, NULL, "GPT2_NCCL_ID_FILE", g_path, "already exists");
    expect_failure("id file of the wrong size", read_short, NULL, g_path, "9 bytes", NULL);
}

int main(void) {
    if (!mkdtemp(g_dir)) fatal("mkdtemp: %s", strerror(errno));
    snprintf(g_path, sizeof g_path, "%s/nccl_id", g_dir);
    run_case("id published by rank 0, read by 3 waiting ranks", test_exchange);
    run_case("stale and malformed id files refused", test_refusals);
    unlink(g_path);
    rmdir(g_dir);
    return test_summary();
}
