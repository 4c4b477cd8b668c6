#!/bin/bash
# session 40 call 1 (2 × H100 asked): lab-1b's GEMM table for H100 from bench_gemm_tune --sustain on
# both GPUs at once (GPU 0's kept), then the peer beside zerolab with it, twice (bench-gpu.sh lab-1b,
# NS="2", 20 steps).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv >> $OUT/log.txt
for g in 0 1; do
  CUDA_VISIBLE_DEVICES=$g timeout 120 build/cuda/bench_gemm_tune --reps 20 --rounds 2 --warmup 5 --sustain 0.5 --table /tmp/h2_table_gpu$g.json > /tmp/h2_tune$g.txt 2>&1 &
done
wait
echo "tables after $((SECONDS-T0)) s" >> $OUT/log.txt
grep -h "^table:" /tmp/h2_tune*.txt >> $OUT/log.txt
cp /tmp/h2_table_gpu0.json $OUT/table_gpu0.json
for r in a b; do
  ZL_GEMM_TABLE=/tmp/h2_table_gpu0.json NS="2" STEPS=20 OUT=/tmp/h2_peer_$r timeout 240 scripts/bench-gpu.sh lab-1b > /tmp/h2_peer_$r.log 2>&1
  echo "peer $r rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/h2_peer_$r.log $OUT/peer_$r.log
done
echo "wall $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/h2.tgz h2_peer_a h2_peer_b $(cd /tmp && ls h2_tune*.txt h2_table_gpu*.json 2>/dev/null)
cat $OUT/log.txt
