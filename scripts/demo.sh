#!/bin/sh
# demo.sh BACKEND N — run the demo preset on N ranks with the given backend (cpu|cuda).
set -eu
backend=${1:-cpu}; n=${2:-4}
MPIEXEC=${MPIEXEC:-mpiexec}
if $MPIEXEC --version 2>&1 | grep -qi "open mpi"; then
    MPIEXEC="$MPIEXEC --allow-run-as-root --oversubscribe"; export NCCL_NVLS_ENABLE=0
fi
[ "$backend" = cuda ] && export NCCL_NVLS_ENABLE=0
echo "== zerolab demo: $n ranks, backend $backend, preset demo =="
$MPIEXEC -n "$n" "build/$backend/stage0_ddp" --preset demo --json "build/$backend/demo_stage0.json"
echo "(JSON report: build/$backend/demo_stage0.json)"
