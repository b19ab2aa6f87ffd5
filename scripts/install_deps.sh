#!/usr/bin/env bash
# install_deps.sh: what the build and the tests need on a Debian/Ubuntu machine:
# compilers, OpenMPI, Debian's PyTorch (the reference), OpenBLAS (the optional BLAS
# build), and from PyPI tiktoken, regex, unicodedata2 (the tokenizer's reference) and
# pyarrow (the FineWeb parquet checks).
#   install_deps.sh           install what is missing (as root, else through sudo)
#   install_deps.sh --ensure  the same, but never through sudo: not root and something
#                             missing, it names what is missing and exits 1 (make test)
#   install_deps.sh --check   only name what is missing (exit 1 if anything is)
# PYTHON (default python3) is the python that gets the PyPI packages; MPICC (default
# mpicc) the MPI compiler the Makefile uses.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
MPICC="${MPICC:-mpicc}"
APT_PKGS="build-essential python3-torch python3-numpy libopenblas-dev libopenmpi-dev openmpi-bin"
# the tokenizer tests compare against this exact Unicode version (dev/gen_unicode_tables.py)
PIP_PKGS="tiktoken regex unicodedata2==16.0.0 pyarrow matplotlib"
TORCH_PIP_PKGS="safetensors"

mode=install
case "${1:-}" in
    "") ;;
    --ensure) mode=ensure ;;
    --check) mode=check ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (see --help)" >&2; exit 1 ;;
esac

# fills MISSING (one line each), APT_NEEDED, PIP_NEEDED and TORCH_PIP_NEEDED (for the
# python that has PyTorch: TORCH_PY)
find_missing() {
    MISSING=""
    APT_NEEDED=0
    PIP_NEEDED=""
    TORCH_PIP_NEEDED=""
    TORCH_PY=""
    local c
    for c in gcc make; do
        command -v $c > /dev/null || { MISSING+="  $c (apt: build-essential)"$'\n'; APT_NEEDED=1; }
    done
    command -v "$MPICC" > /dev/null || { MISSING+="  $MPICC (apt: libopenmpi-dev)"$'\n'; APT_NEEDED=1; }
    command -v mpirun > /dev/null || { MISSING+="  mpirun (apt: openmpi-bin)"$'\n'; APT_NEEDED=1; }
    # Debian's python3-torch lives under /usr/bin/python3, which need not be the python3 on PATH
    local p torch_ok=0
    for p in "$PYTHON" /usr/bin/python3; do
        "$p" -c 'import torch' 2> /dev/null && torch_ok=1 && TORCH_PY=$p && break
    done
    if [ $torch_ok = 0 ]; then
        MISSING+="  PyTorch for $PYTHON or /usr/bin/python3 (apt: python3-torch)"$'\n'
        APT_NEEDED=1
    elif ! "$TORCH_PY" -c 'import safetensors' 2> /dev/null; then
        # the Hugging Face export's tests read and write safetensors files beside PyTorch
        MISSING+="  python module safetensors for $TORCH_PY (pip: $TORCH_PIP_PKGS)"$'\n'
        TORCH_PIP_NEEDED="$TORCH_PIP_PKGS"
    fi
    if ! command -v "$PYTHON" > /dev/null; then
        MISSING+="  $PYTHON (apt: python3)"$'\n'
        APT_NEEDED=1
        PIP_NEEDED="$PIP_PKGS"
        return
    fi
    local pkg mod
    for pkg in $PIP_PKGS; do
        mod=${pkg%%=*}
        if ! "$PYTHON" -c "import $mod" 2> /dev/null; then
            MISSING+="  python module $mod for $PYTHON (pip: $pkg)"$'\n'
            PIP_NEEDED+="$pkg "
        fi
    done
}

find_missing
if [ -z "$MISSING" ]; then
    [ $mode = check ] || echo "install_deps.sh: every dependency is installed"
    exit 0
fi
echo "install_deps.sh: missing:"
printf '%s' "$MISSING"
[ $mode = check ] && exit 1

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if [ $mode = install ] && command -v sudo > /dev/null; then
        SUDO=sudo
    else
        echo "error: installing them needs root; run: sudo ./scripts/install_deps.sh" >&2
        [ $APT_NEEDED = 1 ] && echo "  (it runs: apt-get install -y $APT_PKGS)" >&2
        [ -n "$PIP_NEEDED" ] && echo "  (it runs: $PYTHON -m pip install ${PIP_NEEDED% })" >&2
        [ -n "$TORCH_PIP_NEEDED" ] && echo "  (it runs: $TORCH_PY -m pip install $TORCH_PIP_NEEDED)" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
if [ $APT_NEEDED = 1 ] || ! "$PYTHON" -m pip --version > /dev/null 2>&1; then
    pkgs="$APT_PKGS"
    # a fresh Debian's python3 has no pip
    "$PYTHON" -m pip --version > /dev/null 2>&1 || pkgs+=" python3-pip"
    echo "install_deps.sh: apt-get install $pkgs"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends $pkgs > /dev/null
fi
# pip_install PYTHON PACKAGES...
pip_install() {
    local py=$1 pip_flags=""
    shift
    if ! "$py" -m pip --version > /dev/null 2>&1; then
        $SUDO apt-get update -qq
        $SUDO apt-get install -y -qq --no-install-recommends python3-pip > /dev/null
    fi
    # Debian marks its python as managed by apt (PEP 668); pip refuses it without this flag
    if "$py" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
        pip_flags=--break-system-packages
    fi
    echo "install_deps.sh: $py -m pip install $*"
    $SUDO "$py" -m pip install -q $pip_flags "$@" 2>&1 | grep -v 'WARNING: Running pip as' || true
}
# what apt brought changes what pip must add: Debian's PyTorch arrives without safetensors
[ $APT_NEEDED = 1 ] && find_missing
[ -n "$PIP_NEEDED" ] && pip_install "$PYTHON" $PIP_NEEDED
[ -n "$TORCH_PIP_NEEDED" ] && pip_install "$TORCH_PY" $TORCH_PIP_NEEDED
find_missing
if [ -n "$MISSING" ]; then
    echo "error: still missing after the install:" >&2
    printf '%s' "$MISSING" >&2
    exit 1
fi
echo "install_deps.sh: every dependency is installed"
