// mpi_testutil.h: the harness of the multi-process tests run under mpirun
// (test_distributed, test_comm): every rank checks, a case fails when a check failed on
// any rank (the counts are summed over the ranks), and rank 0 prints.
#ifndef DEV_TEST_MPI_TESTUTIL_H
#define DEV_TEST_MPI_TESTUTIL_H
#include "../../common/distributed.h"

static ProcessGroup g_pg;
static int g_passed = 0, g_failed = 0;
static long g_case_failures = 0;  // this rank's failed checks in the current case

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            if (g_case_failures++ < 3) {                                              \
                printf("  rank %d: check failed at line %d: ", g_pg.rank, __LINE__);  \
                printf(__VA_ARGS__);                                                  \
                printf("\n");                                                         \
            }                                                                         \
        }                                                                             \
    } while (0)

// Ends the current case (collective): counts it passed or failed and returns the number
// of failed checks over all ranks.
static inline long mpi_case_end(void) {
    fflush(stdout);
    long total = pg_sum_long(&g_pg, g_case_failures);
    g_case_failures = 0;
    if (total) g_failed++;
    else g_passed++;
    return total;
}

#endif // DEV_TEST_MPI_TESTUTIL_H
