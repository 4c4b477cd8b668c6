#!/bin/sh
# install-deps.sh — install what zerolab needs to build and test on Debian/Ubuntu:
# an MPI (MPICH; Open MPI where the archive's MPICH cannot start a job of several ranks), Criterion
# (tests), cJSON (checkpoint manifests; the tests read the programs' JSON)
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
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Ubuntu 24.04's MPICH (libmpich12 4.2.0-5build3) is built against PMIx, which its own mpiexec
# (Hydra) does not speak: `mpiexec -n 4` starts 4 one-rank jobs (Launchpad bug 2072338). Where the
# archive's libmpich12 depends on libpmix, install Open MPI instead (the Makefile takes either).
if apt-cache depends libmpich12 2>/dev/null | grep -q 'Depends: libpmix'; then
    echo "install-deps: this distribution's MPICH starts one-rank jobs (built with PMIx); using Open MPI"
    PKGS=$(echo "$PKGS" | sed 's/mpich libmpich-dev/openmpi-bin libopenmpi-dev/')
fi
echo "install-deps: installing $PKGS"
# shellcheck disable=SC2086 # $PKGS is a word list on purpose
$SUDO apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
# The tests' fp16 reference is the compiler's _Float16 (GCC >= 12): where mpicc's gcc lacks it
# (Ubuntu 22.04: gcc 11), install the newest gcc-14, gcc-13 or gcc-12 the archive has; the Makefile
# finds it and has mpicc use it.
if ! printf '_Float16 x;\n' | mpicc -x c -c - -o /dev/null >/dev/null 2>&1; then
    for cc in gcc-14 gcc-13 gcc-12; do
        if apt-cache show "$cc" >/dev/null 2>&1; then
            echo "install-deps: $(mpicc -v 2>&1 | tail -1 | cut -d' ' -f1-3) lacks _Float16; installing $cc"
            $SUDO apt-get install -y -qq --no-install-recommends "$cc" >/dev/null
            break
        fi
    done
fi
echo "install-deps: done ($(mpicc -show 2>/dev/null | cut -d' ' -f1) via mpicc, $(mpiexec --version 2>&1 | grep -m1 -i -e version -e '[0-9]\.[0-9]' | tr -s ' \t' ' ' | sed 's/^ //'))"
