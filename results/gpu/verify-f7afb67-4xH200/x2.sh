#!/bin/bash
# session 38 call 2 (4 GPUs): the GPU suite's parts the join waits reach, at HEAD: integration,
# offload, loud, gpt, mixed and benches side by side on GPUs 0,1 (test-gpu.sh PARALLEL=1,
# MAX_WORLD=2), the whole ckpt binary on GPUs 2,3 (-j2).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
mkdir -p /tmp/x2
T0=$SECONDS
( CUDA_VISIBLE_DEVICES=2,3 ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" ZL_MAX_WORLD=2 \
  timeout 540 build/gpu-tests/test_ckpt -j2 > /tmp/x2/ckpt.log 2>&1; echo "ckpt rc=$? after $((SECONDS-T0)) s" >> /tmp/x2/ckpt.log ) < /dev/null &
CK=$!
PARTS="integration offload loud gpt mixed benches" CUDA_VISIBLE_DEVICES=0,1 LOGDIR=/tmp/x2/suite MPIEXEC=mpirun PARALLEL=1 MAX_WORLD=2 \
  timeout 540 scripts/test-gpu.sh > /tmp/x2/suite.txt 2>&1
echo "test-gpu rc=$? wall $((SECONDS-T0)) s" >> /tmp/x2/suite.txt
wait $CK
cat /tmp/x2/suite.txt >> $OUT/log.txt
grep -E "FAIL|Synthesis|rc=" /tmp/x2/ckpt.log >> $OUT/log.txt
for f in /tmp/x2/suite/*; do echo "== $f: $(grep -E 'Synthesis' $f | tail -1)"; done >> $OUT/log.txt 2>/dev/null
tar -C /tmp -czf $OUT/x2logs.tgz x2
tail -45 $OUT/log.txt
