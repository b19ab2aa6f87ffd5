#!/usr/bin/env bash
# install_deps.sh: installs what the build and the tests need on a Debian/Ubuntu machine:
# compilers, OpenBLAS (optional BLAS build), OpenMPI, Debian's PyTorch (the reference),
# and tiktoken, regex, unicodedata2 from PyPI (the tokenizer's reference). Needs root (or sudo).
#   --check   only report whether everything is there (exit 1 if not)
set -euo pipefail
PKGS="build-essential python3-torch python3-numpy libopenblas-dev libopenmpi-dev openmpi-bin"

have_all() {
    command -v gcc > /dev/null && command -v make > /dev/null && command -v mpicc > /dev/null || return 1
    local torch_ok=0
    for p in python3 /usr/bin/python3; do $p -c 'import torch' 2> /dev/null && torch_ok=1 && break; done
    [ $torch_ok = 1 ] || return 1
    python3 -c 'import tiktoken, regex, unicodedata2' 2> /dev/null || return 1
    return 0
}

if [ "${1:-}" = "--check" ]; then
    have_all
    exit $?
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo > /dev/null; then SUDO=sudo
    else echo "error: installing packages needs root; run: sudo $0" >&2; exit 1; fi
fi
echo "installing: $PKGS (apt), tiktoken regex unicodedata2 (pip)"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $PKGS > /dev/null
python3 -m pip install -q tiktoken regex unicodedata2==16.0.0 2>&1 | grep -v 'WARNING: Running pip as' || true
have_all || { echo "error: dependencies still missing after install" >&2; exit 1; }
