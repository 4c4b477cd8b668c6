#!/bin/bash
# stop 28 call 3 (4 GPUs): why ZeRO-3 != ZeRO-1 at N = 3 on the GPU. Hypothesis: unit u >= 1 of a flat
# padded buffer starts at 2·off_pad[u] bytes, not a multiple of 16 at N = 3; ZeRO-3's gather buffers
# are 16-byte aligned; the GEMM key holds the alignment class, so another algorithm, other bits.
# (1) test_mixed's norm model at N = 3, stages 1-3; (2) the same with the alignment class capped at 4
# (lease patch aligncap.patch); (3) lab-1b at N = 3 vs N = 4 (speed of the misaligned GEMMs).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/g3; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L > $R/machine.txt; cat /tmp/build.txt >> $S
P="--layers 2 --dim 16 --batch 2 --steps 5 --clip-grad-norm 0.05 --quiet"
run() { local name=$1 n=$2 prog=$3; shift 3
  timeout 60 mpirun -n $n env "$@" build/cuda/$prog $P > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'ms=[0-9.]*\|tflops=[0-9.]*\|hash=[0-9a-f]*' | tr '\n' ' ') at $((SECONDS-T0)) s" | tee -a $S; }
for prog in stage1 stage2 stage3 stage0_ddp; do run tiny_${prog}_N3 3 $prog X=1; done
run tiny_stage3_N3_b 3 stage3 X=1
P="--layers 8 --dim 4096 --batch 8192 --steps 10 --quiet"
for prog in stage0_ddp stage1 stage2 stage3; do run lab_${prog}_N3 3 $prog X=1; done
for prog in stage1 stage3; do run lab_${prog}_N4 4 $prog X=1; done
git apply lease/aligncap.patch && make -j32 GIT_COMMIT=$(cat lease/commit) cuda > /tmp/b2.log 2>&1 || tail -20 /tmp/b2.log
P="--layers 2 --dim 16 --batch 2 --steps 5 --clip-grad-norm 0.05 --quiet"
for prog in stage1 stage3; do run tinycap_${prog}_N3 3 $prog ZL_ALIGN_CAP=4; done
for prog in stage1 stage3; do run tinycap2_${prog}_N3 3 $prog ZL_ALIGN_CAP=2; done
P="--layers 8 --dim 4096 --batch 8192 --steps 10 --quiet"
run labcap_stage3_N4 4 stage3 ZL_ALIGN_CAP=4
git checkout kernels/cuda/kernels_cuda.cu
tar -C /tmp -czf $OUT/g3.tgz g3; cp $S $OUT/
