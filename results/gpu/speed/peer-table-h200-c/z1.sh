#!/bin/bash
# session 39 call 2 (4 × H100): lab-1b's GEMM table for H100 from bench_gemm_tune --sustain on each
# GPU at once (GPU 0's kept), then the peer beside zerolab with it (bench-gpu.sh lab-1b, NS="4 2",
# 20 steps); the loud table test first.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --bind-to none" ZL_MAX_WORLD=2 timeout 60 \
  build/gpu-tests/test_loud --filter 'flags/a_gemm_table*' -j1 > /tmp/z1_loud.txt 2>&1
echo "loud table test rc=$? $((SECONDS-T0)) s: $(grep Synthesis /tmp/z1_loud.txt)" >> $OUT/log.txt
for g in 0 1 2 3; do
  CUDA_VISIBLE_DEVICES=$g timeout 120 build/cuda/bench_gemm_tune --reps 20 --rounds 2 --warmup 5 --sustain 0.5 --table /tmp/z1_table_gpu$g.json > /tmp/z1_tune$g.txt 2>&1 &
done
wait
echo "tables after $((SECONDS-T0)) s" >> $OUT/log.txt
grep -h "^table:" /tmp/z1_tune*.txt >> $OUT/log.txt
cp /tmp/z1_table_gpu0.json $OUT/table_gpu0.json
ZL_GEMM_TABLE=/tmp/z1_table_gpu0.json NS="4 2" STEPS=20 OUT=/tmp/z1_peer timeout 480 scripts/bench-gpu.sh lab-1b > /tmp/z1_peer.log 2>&1
echo "peer rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
cp /tmp/z1_peer.log $OUT/peer.log
echo "wall $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/z1.tgz z1_loud.txt z1_peer $(cd /tmp && ls z1_tune*.txt z1_table_gpu*.json 2>/dev/null)
cat $OUT/log.txt
