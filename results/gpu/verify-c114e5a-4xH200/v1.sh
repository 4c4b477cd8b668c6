#!/bin/bash
# session 50 call 1 (4 x H200): the GPU parts the batch kernel (data_generate8_kernel) touches, at HEAD, N <= 4,
# side by side (own logs, --bind-to none): integration in two halves, report, mixed, kernels+sanitizer+reference.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
T0=$SECONDS; R=/tmp/v1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
nvidia-smi --query-gpu=name,power.limit,memory.total,driver_version --format=csv >> $S; nproc >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
LIM=${LIM:-545}
part() { local name=$1; shift; local t=$SECONDS
  timeout $((LIM-SECONDS+T0)) "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS-t)) s (ended at $((SECONDS-T0)) s): $(grep -c '^\[PASS' $R/$name.txt) PASS lines; $(grep -E 'Synthesis' $R/$name.txt | tail -1)" >> $S; }
( part integration_exact build/gpu-tests/test_integration -j1 --filter 'exact/*' ) &
( part integration_rest build/gpu-tests/test_integration -j1 --filter '!(exact)/*' ) &
( part report build/gpu-tests/test_report -j1 ) &
( part mixed build/gpu-tests/test_mixed -j1 ) &
( MPIEXEC=mpirun PARTS="kernels sanitizer reference" timeout $((LIM-SECONDS+T0)) scripts/test-gpu.sh > $R/ksr.txt 2>&1
  echo "kernels+sanitizer+reference rc=$? (ended at $((SECONDS-T0)) s)" >> $S ) &
wait
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -40 >> $S
grep -h 'rc=\|^(\|SKIPPED\|checks failed' $R/ksr.txt >> $S
cat $S; tar -C /tmp -czf $OUT/v1.tgz v1; cp $S $OUT/
