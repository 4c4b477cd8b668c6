#!/bin/bash
# session 49 call 1 (4 x H200): the GPU suite at 0670c00, N <= 4, parts side by side (own logs, --bind-to none);
# integration and ckpt each split in two by Criterion filter so each half fits the call.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
T0=$SECONDS; R=/tmp/v1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
nvidia-smi --query-gpu=name,power.limit,memory.total,driver_version --format=csv >> $S; nproc >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
LIM=${LIM:-555}
part() { local name=$1; shift; local t=$SECONDS
  timeout $((LIM-SECONDS+T0)) "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS-t)) s (ended at $((SECONDS-T0)) s): $(grep -c '^\[PASS' $R/$name.txt) PASS lines; $(grep -E 'Synthesis' $R/$name.txt | tail -1)" >> $S; }
( MPIEXEC=mpirun PARTS="benches" timeout 120 scripts/test-gpu.sh > $R/benches.txt 2>&1; echo "benches rc=$? (ended at $((SECONDS-T0)) s)" >> $S )
( part integration_exact build/gpu-tests/test_integration -j1 --filter 'exact/*' ) &
( part integration_rest build/gpu-tests/test_integration -j1 --filter '!(exact)/*' ) &
( part ckpt_reshard build/gpu-tests/test_ckpt -j1 --filter 'reshard/*' ) &
( part ckpt_rest build/gpu-tests/test_ckpt -j1 --filter '!(reshard)/*' ) &
( part loud build/gpu-tests/test_loud -j1 ) &
( MPIEXEC=mpirun PARTS="kernels sanitizer reference" timeout $((LIM-SECONDS+T0)) scripts/test-gpu.sh > $R/ksr.txt 2>&1
  echo "kernels+sanitizer+reference rc=$? (ended at $((SECONDS-T0)) s)" >> $S ) &
wait
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -40 >> $S
grep -h 'rc=\|^(\|SKIPPED\|checks failed' $R/ksr.txt $R/benches.txt >> $S
cat $S; tar -C /tmp -czf $OUT/v1.tgz v1; cp $S $OUT/
