# common.sh: what every data step shares; sourced (not run) from the repository root.
# Sets LLMC_DATA_MIRROR's default (../shared/data when it exists), PREPRO (./prepro)
# and PYTHON (python3), and defines say, die, ensure_prepro and require_python.

DATA_STEP="$(basename "$0")"
PREPRO="${PREPRO:-./prepro}"
PYTHON="${PYTHON:-python3}"
if [ -z "${LLMC_DATA_MIRROR:-}" ] && [ -d ../shared/data ]; then
    LLMC_DATA_MIRROR=../shared/data
fi

say() { echo "$DATA_STEP: $*"; }
die() { echo "$DATA_STEP: error: $*" >&2; exit 1; }

# builds the tokenizing binary if it is missing
ensure_prepro() {
    if [ ! -x "$PREPRO" ]; then
        say "$PREPRO is missing, building it with 'make prepro'"
        make prepro || die "cannot build $PREPRO: run 'make prepro'"
    fi
}

require_python() {
    command -v "$PYTHON" > /dev/null 2>&1 || die "$PYTHON is not installed (needed by dev/data/to_jsonl.py)"
}
