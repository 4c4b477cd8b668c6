#!/bin/sh
# mpi-kind.sh LAUNCHER [ARGS...] — which MPI a launcher belongs to: prints "openmpi" or "mpich"
# ("other" for any else). Open MPI 5's mpiexec says "Open MPI", 4's "mpiexec (OpenRTE)"; MPICH's
# Hydra says "HYDRA". One place for the test, so the scripts that need Open MPI's options
# (--oversubscribe, --allow-run-as-root, --bind-to none) cannot drift apart (they all missed
# OpenRTE once). Used by demo.sh, results-cpu.sh, gpu-pending.sh and test-gpu.sh.
[ $# -ge 1 ] || { echo "usage: $0 LAUNCHER [ARGS...]" >&2; exit 2; }
v=$("$@" --version 2>&1)
if printf '%s\n' "$v" | grep -qi -e "open mpi" -e openrte; then echo openmpi
elif printf '%s\n' "$v" | grep -qi -e hydra -e mpich; then echo mpich
else echo other
fi
