#!/bin/bash
# stop 37 call 4 (4 GPUs): the parts call 1 did not see end — integration and offload side by
# side on GPUs 0,1 (test-gpu.sh PARALLEL=1), the whole ckpt binary on GPUs 2,3 (-j2, the refusals
# test's limit now 360 s) — at HEAD.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
mkdir -p /tmp/v4
T0=$SECONDS
( CUDA_VISIBLE_DEVICES=2,3 ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" ZL_MAX_WORLD=2 \
  timeout 460 build/gpu-tests/test_ckpt -j2 > /tmp/v4/ckpt.log 2>&1; echo "ckpt rc=$? after $((SECONDS-T0)) s" >> /tmp/v4/ckpt.log ) < /dev/null &
CK=$!
PARTS="integration offload" CUDA_VISIBLE_DEVICES=0,1 LOGDIR=/tmp/v4/suite MPIEXEC=mpirun PARALLEL=1 MAX_WORLD=2 \
  timeout 460 scripts/test-gpu.sh > /tmp/v4/suite.txt 2>&1
echo "test-gpu rc=$? wall $((SECONDS-T0)) s" >> /tmp/v4/suite.txt
wait $CK
cat /tmp/v4/suite.txt >> $OUT/log.txt
grep -E "FAIL|Synthesis|rc=" /tmp/v4/ckpt.log >> $OUT/log.txt
tar -C /tmp -czf $OUT/v4logs.tgz v4
cat $OUT/log.txt | tail -30
