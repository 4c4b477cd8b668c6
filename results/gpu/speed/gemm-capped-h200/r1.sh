#!/bin/bash
# stop 32 call 5 (4 GPUs): the same-bits GEMM choice with a 3 % margin and 20 timed launches
# (lease-only: ZL_TUNE_MARGIN 0.97, ZL_TUNE_LAUNCHES 20) against the default (10 %, 3), lab-1b,
# N = 4, alternating; 20 steps, judged by the median. Call 4 had dW1's same-bits candidates
# 2.5-4.5 % faster by median at the power cap on every GPU.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/r1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt >> $S
rm -rf /tmp/def /tmp/m97; cp -r build/cuda /tmp/def
sed -i 's/#define ZL_TUNE_MARGIN 0.9f/#define ZL_TUNE_MARGIN 0.97f/; s/#define ZL_TUNE_LAUNCHES 3/#define ZL_TUNE_LAUNCHES 20/' kernels/cuda/kernels_cuda.cu
make -j32 MPICC=mpicc GIT_COMMIT=719876b+m97 cuda > /tmp/m97.log 2>&1 || { tail -20 /tmp/m97.log >> $S; cat $S; exit 1; }
cp -r build/cuda /tmp/m97; echo "m97 built at $((SECONDS-T0)) s" >> $S
ZL_GEMM_TUNE=log timeout 60 mpirun --bind-to none -n 4 /tmp/m97/stage2 --preset lab-1b --steps 3 --quiet > $R/log_m97.txt 2>&1
grep -h "gemm-tune" $R/log_m97.txt | sort | uniq -c | head -24 >> $S
run() { local name=$1 dir=$2 prog=$3
  timeout 60 mpirun --bind-to none -n 4 $dir/$prog --preset lab-1b --steps 20 --quiet --check > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) | $(grep -m1 -oE 'SM [0-9]+ MHz median[^,]*, [0-9]+ W of [0-9]+' $R/$name.txt)" >> $S; }
for r in 1 2 3 4; do
  for s in stage2 stage1; do run ${s}_def_$r /tmp/def $s; run ${s}_m97_$r /tmp/m97 $s; done
  [ $((SECONDS-T0)) -gt 220 ] && break
done
echo "ended at $((SECONDS-T0)) s" >> $S
cat $S; tar -C /tmp -czf $OUT/r1.tgz r1; cp $S $OUT/
