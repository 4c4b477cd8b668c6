#!/bin/bash
# test-gpu.sh — the GPU test suite, for a machine with NVIDIA GPUs (make test-gpu).
#   1. each CUDA kernel against the CPU reference kernel (build/cuda/test_kernels_gpu)
#   2. the integration tests (MLP and GPT, --offload among them) against build/cuda for
#      N = 1 .. min(2, GPUs)
#   3. CUDA vs CPU stage0 on the tiny preset for 10 steps (inside the integration tests)
#   4. compute-sanitizer (memcheck, racecheck-free synccheck) over short runs of every stage
#   5. --model gpt against PyTorch (tests/gpu/gpt-reference.sh: step 1's loss and gradient norm
#      within 1e-3), when PYTHON (default python3) has torch; else a SKIPPED line
#   6. the benchmarks' own checks on small shapes (they exit 4 before timing on a mismatch):
#      fused attention forward and backward vs the trainer's (bench_attention, T not a multiple
#      of 64 included), cuBLASLt's candidate algorithms vs the trainer's GEMM (bench_gemm_tune)
# The integration-test binary needs Criterion and cJSON; where the machine has neither,
# build it elsewhere with `make build/gpu-tests/test_integration build/gpu-tests/test_report`
# (they carry their libraries).
set -u
export NCCL_NVLS_ENABLE=0
MPIEXEC=${MPIEXEC:-mpiexec}
if $MPIEXEC --version 2>&1 | grep -qi "open mpi"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    MPIEXEC="$MPIEXEC --oversubscribe"
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -gt 0 ] || { echo "test-gpu: needs an NVIDIA GPU and nvidia-smi -L lists none; make test runs the CPU suite" >&2; exit 1; }
maxw=${MAX_WORLD:-2} # ranks the integration tests go up to (MAX_WORLD=8 on an 8-GPU node)
maxw=$(( gpus < maxw ? gpus : maxw ))
fail=0
step() { echo; echo "=== $*"; }

step "CUDA kernels vs CPU reference"
build/cuda/test_kernels_gpu || fail=1

it=build/tests/test_integration
[ -x build/gpu-tests/test_integration ] && it=build/gpu-tests/test_integration
step "integration tests on build/cuda, N <= $maxw ($it)"
ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$it" -j1 || fail=1
loud=build/tests/test_loud
[ -x build/gpu-tests/test_loud ] && loud=build/gpu-tests/test_loud
step "failing loudly on build/cuda: outputs, preflight, watchdog (SIGSTOP), flags, --check ($loud)"
ZL_BUILD=build/cuda ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$loud" -j1 || fail=1

rt=build/tests/test_report
[ -x build/gpu-tests/test_report ] && rt=build/gpu-tests/test_report
if [ "$maxw" -ge 2 ]; then
    step "report schema and --trace on build/cuda, N = 2 ($rt)"
    ZL_BUILD=build/cuda ZL_MPIEXEC="$MPIEXEC" "$rt" -j1 || fail=1
fi

git=build/tests/test_gpt_integration
[ -x build/gpu-tests/test_gpt_integration ] && git=build/gpu-tests/test_gpt_integration
step "GPT integration tests on build/cuda, N <= $maxw ($git)"
ZL_BUILD=build/cuda ZL_MPIEXEC="$MPIEXEC" ZL_MAX_WORLD=$maxw "$git" -j1 || fail=1

off=build/tests/test_offload
[ -x build/gpu-tests/test_offload ] && off=build/gpu-tests/test_offload
# Host Adam's threads need the cores: Open MPI binds each rank to one core by default.
offmpi=$MPIEXEC
$MPIEXEC --version 2>&1 | grep -qi "open mpi" && offmpi="$MPIEXEC --bind-to none"
step "--offload on build/cuda, N <= $maxw: bitwise vs device Adam, memory, transfers ($off)"
ZL_BUILD=build/cuda ZL_MPIEXEC="$offmpi" ZL_MAX_WORLD=$maxw "$off" -j1 || fail=1

step "compute-sanitizer"
for prog in stage0_ddp stage1 stage2 stage3; do
    for tool in memcheck synccheck; do
        # API errors are not counted: NCCL probes cudaFuncGetAttributes for kernels not built
        # for this GPU and handles the error itself; our own API calls are all checked.
        out=$(compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 "build/cuda/$prog" --preset tiny --steps 2 --quiet 2>&1)
        rc=$?
        echo "$prog $tool: rc=$rc $(echo "$out" | grep -E 'ERROR SUMMARY' | tail -1)"
        [ $rc -eq 0 ] || { echo "$out" | tail -30; fail=1; }
        out=$(compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 "build/cuda/$prog" --preset gpt-tiny --steps 2 --quiet 2>&1)
        rc=$?
        echo "$prog --preset gpt-tiny $tool: rc=$rc $(echo "$out" | grep -E 'ERROR SUMMARY' | tail -1)"
        [ $rc -eq 0 ] || { echo "$out" | tail -30; fail=1; }
    done
done

py=${PYTHON:-python3}
if "$py" -c 'import torch' 2>/dev/null; then
    step "--model gpt vs PyTorch on build/cuda, N <= $maxw (tests/gpu/gpt-reference.sh)"
    PYTHON=$py ZL_MPIEXEC="$MPIEXEC" tests/gpu/gpt-reference.sh build/cuda "$maxw" || fail=1
else
    step "--model gpt vs PyTorch: SKIPPED — $py has no torch (PYTHON=/path/to/python with torch to run it)"
fi

step "benchmarks' checks on small shapes (bench_attention, bench_gemm_tune)"
for shape in 2,256,128,2 3,130,128,2 1,1000,768,12; do
    build/cuda/bench_attention --shape "$shape" --iters 1 > /tmp/zl_bench_attention.txt 2>&1
    rc=$?
    echo "bench_attention --shape $shape: rc=$rc"
    [ $rc -eq 0 ] || { tail -20 /tmp/zl_bench_attention.txt; fail=1; }
done
build/cuda/bench_gemm_tune --dim 256 --rows 512 --layers 2 --algos 4 > /tmp/zl_bench_gemm.txt 2>&1
rc=$?
echo "bench_gemm_tune --dim 256 --rows 512: rc=$rc"
[ $rc -eq 0 ] || { tail -20 /tmp/zl_bench_gemm.txt; fail=1; }

echo
[ $fail -eq 0 ] && echo "test-gpu: ALL PASSED" || echo "test-gpu: FAILURES"
exit $fail
