#!/bin/bash
# stop 36 call 4 (2 GPUs): the kernels part after the plan table grew, and the checkpoint tests
# new this session (the ckpt part had not ended when call 3's limit came).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
export ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" ZL_MAX_WORLD=2 CRITERION_VERBOSITY_LEVEL=1
T0=$SECONDS
(MPIEXEC=mpirun PARTS=kernels timeout 150 scripts/test-gpu.sh > $OUT/kernels.log 2>&1; echo "kernels rc=$? at $((SECONDS-T0)) s" >> $OUT/sum.txt) &
(timeout 150 build/gpu-tests/test_ckpt -j1 --filter '@(save_dir|zlckpt)/*' > $OUT/ckpt1.log 2>&1; echo "ckpt save_dir,zlckpt rc=$? at $((SECONDS-T0)) s" >> $OUT/sum.txt) &
(timeout 150 build/gpu-tests/test_ckpt -j1 --filter 'diverged/stage[23]_*' > $OUT/ckpt2.log 2>&1; echo "ckpt diverged rc=$? at $((SECONDS-T0)) s" >> $OUT/sum.txt;
 timeout $((150-SECONDS+T0)) build/gpu-tests/test_ckpt -j1 --filter '@(reshard/the_resumed*|refused/a_save_cut*)' > $OUT/ckpt3.log 2>&1; echo "ckpt resumed-line, cut rc=$? at $((SECONDS-T0)) s" >> $OUT/sum.txt) &
wait
cat $OUT/sum.txt; grep -h "Synthesis\|^\[FAIL\|ALL PASSED\|FAILED\|checks failed" $OUT/*.log
