#!/bin/bash
# stop 27 call 5 (4 GPUs): is the GPU build repeatable on test_ckpt's TINY model? The same straight
# run three times per setting: GEMM choice by timing (default), the first answer (ZL_GEMM_TUNE=0),
# the choice logged, and CUDA_LAUNCH_BLOCKING=1 (no overlap between streams).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/f5; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L > $R/machine.txt
P="--layers 2 --dim 31 --quiet --batch 2 --steps 5"
run() { local name=$1 n=$2 prog=$3; shift 3
  timeout 40 mpirun -n $n env "$@" build/cuda/$prog $P > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'hash=[0-9a-f]*') at $((SECONDS-T0)) s" | tee -a $S; }
for prog in stage1 stage0_ddp stage3; do
  for i in 1 2 3; do run ${prog}_tune_$i 2 $prog ZL_GEMM_TUNE=1; done
  for i in 1 2 3; do run ${prog}_first_$i 2 $prog ZL_GEMM_TUNE=0; done
  [ $((SECONDS-T0)) -gt 150 ] && break
done
for i in 1 2; do run stage1_log_$i 2 stage1 ZL_GEMM_TUNE=log; done
for i in 1 2 3; do run stage1_blocking_$i 2 stage1 CUDA_LAUNCH_BLOCKING=1; done
for i in 1 2 3; do run stage1_n1_$i 1 stage1 ZL_GEMM_TUNE=1; done
for i in 1 2; do echo "## log $i" >> $S; grep -i 'tune\|kept\|candidate' $R/stage1_log_$i.txt | sort | uniq -c | head -30 >> $S; done
