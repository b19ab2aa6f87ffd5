# testlib.sh: how the shell tests count and report; each dev/test/*.sh sources it from the
# repository root. ok, bad and skip print a line and count it; test_finish prints
# "N passed, M failed" (", K skipped" when any were) and exits 1 when something failed, 77
# when something was skipped and nothing failed (run_all.sh counts that run as skipped),
# 0 otherwise. (The C tests report the same way through testutil.h.)
TEST_PASSED=0
TEST_FAILED=0
TEST_SKIPPED=0
ok() { echo "ok    $*"; TEST_PASSED=$((TEST_PASSED + 1)); }
bad() { echo "FAIL  $*"; TEST_FAILED=$((TEST_FAILED + 1)); }
skip() { echo "skip  $*"; TEST_SKIPPED=$((TEST_SKIPPED + 1)); }
test_finish() {
    local skipped=""
    [ "$TEST_SKIPPED" -gt 0 ] && skipped=", $TEST_SKIPPED skipped"
    echo "$TEST_PASSED passed, $TEST_FAILED failed$skipped"
    [ "$TEST_FAILED" -eq 0 ] || exit 1
    [ "$TEST_SKIPPED" -eq 0 ] || exit 77
    exit 0
}
