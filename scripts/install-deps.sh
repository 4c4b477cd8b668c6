#!/bin/sh
# install-deps.sh — install what zerolab needs to build and test on Debian/Ubuntu:
# an MPI (MPICH), Criterion (tests), cJSON (checkpoint manifests; the tests read the programs' JSON)
# and xxHash (checkpoint checksums); python3 for make test's script checks (bench/nvml_clocks.py,
# the bench table's pretend runs), absent from minimal images.
# Runs apt-get as root, or through sudo. Says what it installs.
set -eu
PKGS="mpich libmpich-dev libcriterion-dev libcjson-dev libxxhash-dev make gcc python3"
if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root or sudo to install: $PKGS" >&2; exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: no apt-get here; install an MPI (mpicc, mpiexec), Criterion and cJSON yourself" >&2; exit 1
fi
echo "install-deps: installing $PKGS"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # $PKGS is a word list on purpose
$SUDO apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
echo "install-deps: done ($(mpicc -show 2>/dev/null | cut -d' ' -f1) via mpicc, $(mpiexec --version 2>&1 | head -1))"
