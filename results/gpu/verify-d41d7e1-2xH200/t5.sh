#!/bin/bash
# stop 35 call 8 (2 × H200): the trace's optimizer thread (every (pid, tid) must nest), a save
# mid-run keeping every update in the timed steps, diverged runs' last_step — on GPUs.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/trace.log
ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe" ZL_MAX_WORLD=2 timeout 200 build/gpu-tests/test_report --filter 'trace/*' -j1 >> $OUT/trace.log 2>&1
echo "test_report trace/* rc=$?" >> $OUT/trace.log
ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe" ZL_MAX_WORLD=2 timeout 100 build/gpu-tests/test_ckpt --filter 'save_dir/*' -j1 >> $OUT/trace.log 2>&1
echo "test_ckpt save_dir/* rc=$?" >> $OUT/trace.log
grep -E "Synthesis|rc=|FAIL|overlap" $OUT/trace.log | head -30
