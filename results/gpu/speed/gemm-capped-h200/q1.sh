#!/bin/bash
# stop 32 call 4 (4 GPUs): the block GEMMs' same-bits candidates under sustained load, at the power
# cap: bench_gemm_tune on all four GPUs at once (as in training), 6 rounds x (20 warm-up + 50 timed)
# per candidate, two passes; nvidia-smi beside. Question: ranked by median at the capped clock, is a
# same-bits candidate faster than the heuristic's first answer (by median it was 0.1-6.8 % in short runs)?
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/q1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt >> $S
Q=timestamp,index,clocks.current.sm,power.draw,clocks_event_reasons.active
nvidia-smi --query-gpu=$Q --format=csv -lms 50 > $R/clocks.csv 2>&1 & p=$!
for pass in a b; do
  for g in 0 1 2 3; do
    CUDA_VISIBLE_DEVICES=$g timeout 200 build/cuda/bench_gemm_tune --reps 50 --rounds 6 --warmup 20 > $R/tune_${pass}_gpu$g.txt 2>&1 &
  done; wait $(jobs -p | grep -v "^$p$")
  echo "pass $pass ended at $((SECONDS-T0)) s" >> $S
  [ $((SECONDS-T0)) -gt 150 ] && break
done
kill $p; gzip $R/clocks.csv
for f in $R/tune_*; do echo "== $f"; sed -n '/^| GEMM/,/^$/p' $f; done >> $S
cat $S; tar -C /tmp -czf $OUT/q1.tgz q1; cp $S $OUT/
