#!/bin/bash
# stop 32 call 1 (4 GPUs): the parts of the GPU suite not run since the clocks work (bfdb9ca ran loud,
# integration exact/*, kernels, sanitizer), at HEAD, side by side (own logs, --bind-to none).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/v1; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L > $R/machine.txt; cat /tmp/build.txt >> $S; nproc >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
LIM=${LIM:-540}
part() { local name=$1; shift; local t=$SECONDS
  timeout $((LIM-SECONDS+T0)) "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS-t)) s (ended at $((SECONDS-T0)) s): $(grep -c '^\[PASS' $R/$name.txt) PASS lines; $(grep -E 'Synthesis' $R/$name.txt | tail -1)" >> $S; }
( part report build/gpu-tests/test_report -j1; part mixed build/gpu-tests/test_mixed -j1 ) &
( part integration_rest build/gpu-tests/test_integration -j1 --filter '!(exact)/*' ) &
( part gpt build/gpu-tests/test_gpt_integration -j1 ) &
( part ckpt build/gpu-tests/test_ckpt -j1 ) &
( part offload build/gpu-tests/test_offload -j1 ) &
( MPIEXEC=mpirun PARTS="kernels benches" timeout $((LIM-SECONDS+T0)) scripts/test-gpu.sh > $R/kb.txt 2>&1
  echo "kernels+benches rc=$? (ended at $((SECONDS-T0)) s)" >> $S ) &
wait
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -40 >> $S
grep -h 'rc=\|^(' $R/kb.txt >> $S
grep -h ' | SM ' $R/report.txt | head -4 >> $S
cat $S; tar -C /tmp -czf $OUT/v1.tgz v1; cp $S $OUT/
