#!/bin/bash
# stop 33 call 1 (4 × H100): the GPU suite's parts not run since bfdb9ca / 719876b, at HEAD:
# loud, integration exact/*, report (the clock summary carried in rank_identity), mixed,
# kernels and compute-sanitizer over every stage — side by side (own logs, --bind-to none).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/a1; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L > $R/machine.txt; cat /tmp/build.txt >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
LIM=${LIM:-560}
part() { local name=$1; shift; local t=$SECONDS
  timeout $((LIM-SECONDS+T0)) "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS-t)) s (ended at $((SECONDS-T0)) s): $(grep -c '^\[PASS' $R/$name.txt) PASS lines; $(grep -E 'Synthesis' $R/$name.txt | tail -1)" >> $S; }
( part loud build/gpu-tests/test_loud -j1 ) &
( part integration_exact build/gpu-tests/test_integration -j1 --filter 'exact/*' ) &
( part report build/gpu-tests/test_report -j1 ) &
( MPIEXEC=mpirun PARALLEL=1 PARTS="kernels sanitizer" timeout $((LIM-SECONDS+T0)) scripts/test-gpu.sh > $R/ks.txt 2>&1
  echo "kernels+sanitizer rc=$? (ended at $((SECONDS-T0)) s)" >> $S ) &
wait
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -40 >> $S
grep -h 'rc=\|^(' $R/ks.txt >> $S
grep -h ' | SM ' $R/report.txt | head -4 >> $S
cat $S; tar -C /tmp -czf $OUT/a1.tgz a1; cp $S $OUT/
