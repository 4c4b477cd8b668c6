#!/bin/bash
# stop 37 call 2 (4 GPUs): lab-1b's six block GEMMs on all four GPUs at once, the heuristic's top 16
# interleaved (as gemm-capped-h200) and then each same-bits candidate alone for 1.5 s (--sustain);
# then the ckpt refusals test alone on GPUs 0,1 (timed), the exit of two test binaries timed on
# GPUs 2,3, and test-gpu's benches part (--sustain's own check).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
mkdir -p /tmp/t
T0=$SECONDS
for i in 0 1 2 3; do
  CUDA_VISIBLE_DEVICES=$i timeout 330 build/cuda/bench_gemm_tune --reps 50 --rounds 6 --warmup 20 --sustain 1.5 > /tmp/t/tune_gpu$i.txt 2>&1 &
done
wait
echo "tune: $((SECONDS-T0)) s" >> $OUT/log.txt
for i in 0 1 2 3; do echo "== GPU $i"; grep -E "^(fwd|bwd)|sustained|=> default|fastest with|^ +[0-9zl1st]+\*? +id .*mean|rc=|no NVML" /tmp/t/tune_gpu$i.txt; done >> $OUT/sustain-summary.txt
export NCCL_NVLS_ENABLE=0
ts() { while IFS= read -r l; do echo "$(date +%s.%N | cut -c1-14) $l"; done; }
T1=$SECONDS
( CUDA_VISIBLE_DEVICES=0,1 ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" ZL_MAX_WORLD=2 \
   build/gpu-tests/test_ckpt --filter 'refused/every_bad*' -j1 2>&1; echo "ckpt refused rc=$? after $((SECONDS-T1)) s" ) > /tmp/t/ckpt_refused.txt 2>&1 < /dev/null &
for t in "test_offload trace/*" "test_integration */peak_equals_measured_stage3_N2_L4*" "test_offload refuse/*"; do
  set -- $t
  echo "== $1 --filter $2 (start $(date +%s.%N | cut -c1-14))"
  ( CUDA_VISIBLE_DEVICES=2,3 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" ZL_MAX_WORLD=2 \
    build/gpu-tests/$1 --filter "$2" -j1 2>&1; echo "EXIT $?" ) < /dev/null | ts
done > /tmp/t/exit_probe.txt 2>&1
wait
cat /tmp/t/ckpt_refused.txt /tmp/t/exit_probe.txt >> $OUT/log.txt
PARTS=benches MPIEXEC=mpirun scripts/test-gpu.sh >> $OUT/log.txt 2>&1; echo "benches rc=$?" >> $OUT/log.txt
cat $OUT/log.txt | tail -30
cat $OUT/sustain-summary.txt | head -120
tar -C /tmp -czf $OUT/tune.tgz t
