#!/bin/bash
# stop 28 call 4 (4 GPUs): after the aligned full buffers — N = 3 bits and speed, then tests at N <= 4
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/g4; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L > $R/machine.txt; cat /tmp/build.txt >> $S
run() { local name=$1 n=$2 prog=$3; shift 3
  timeout 60 mpirun -n $n build/cuda/$prog $P > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'states_measured=[0-9]*\|ms=[0-9.]*\|tflops=[0-9.]*\|hash=[0-9a-f]*' | tr '\n' ' ') at $((SECONDS-T0)) s" | tee -a $S; }
P="--layers 2 --dim 16 --batch 2 --steps 5 --clip-grad-norm 0.05 --quiet --check"
for prog in stage0_ddp stage1 stage2 stage3; do run tiny_${prog}_N3 3 $prog; done
P="--layers 2 --dim 31 --batch 2 --steps 5 --quiet --check"
for prog in stage0_ddp stage1 stage2 stage3; do run d31_${prog}_N2 2 $prog; done
P="--layers 8 --dim 4096 --batch 8192 --steps 10 --quiet --check"
for prog in stage0_ddp stage1 stage2 stage3; do run lab_${prog}_N3 3 $prog; done
for prog in stage1 stage3; do run lab_${prog}_N4 4 $prog; done
export CRITERION_VERBOSITY_LEVEL=1
ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe" ZL_MAX_WORLD=4 timeout 100 build/gpu-tests/test_mixed -j1 --filter 'norm/*' > $R/norm.txt 2>&1
echo "mixed norm rc=$? at $((SECONDS-T0)) s" | tee -a $S; grep -E '^\[(PASS|FAIL)|Synthesis|----' $R/norm.txt | tee -a $S
ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MPIEXEC="mpirun --oversubscribe" ZL_MAX_WORLD=4 timeout $((330-SECONDS+T0)) build/gpu-tests/test_integration -j1 > $R/integration.txt 2>&1
echo "integration rc=$? at $((SECONDS-T0)) s" | tee -a $S; grep -c '^\[PASS' $R/integration.txt | tee -a $S; grep -E '^\[FAIL|Synthesis' $R/integration.txt | tee -a $S
tar -C /tmp -czf $OUT/g4.tgz g4; cp $S $OUT/
