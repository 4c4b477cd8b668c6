#!/bin/bash
# stop 28 call 1 (4 GPUs): verify 835ec20/1ba30e0/5ecb18d — the TINY straight run repeated,
# test_integration's repeatable group, then test-gpu.sh's ckpt part at MAX_WORLD=4
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/g1; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt; cat /tmp/build.txt >> $S
P="--layers 2 --dim 31 --quiet --batch 2 --steps 5"
run() { local name=$1 prog=$2 n=$3
  timeout 30 mpirun -n $n build/cuda/$prog $P > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'hash=[0-9a-f]*') at $((SECONDS-T0)) s" | tee -a $S; }
for n in 4; do for prog in stage0_ddp stage1 stage2 stage3; do for i in 1 2 3; do run ${prog}_N${n}_$i $prog $n; done; done; done
export CRITERION_VERBOSITY_LEVEL=1
ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe" ZL_MAX_WORLD=4 timeout 120 build/gpu-tests/test_integration -j1 --filter 'repeatable/*' > $R/repeatable.txt 2>&1
echo "repeatable rc=$? at $((SECONDS-T0)) s" | tee -a $S; grep -E 'PASS|FAIL|Synthesis' $R/repeatable.txt | tee -a $S
MPIEXEC=mpirun MAX_WORLD=4 PARTS="ckpt" timeout $((560-SECONDS+T0)) scripts/test-gpu.sh > $R/ckpt.txt 2>&1; echo "ckpt rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|^\(ckpt" $R/ckpt.txt | tail -8 | tee -a $S
grep -c '^\[PASS\]' $R/ckpt.txt | tee -a $S
tar -C /tmp -czf $OUT/g1.tgz g1; cp $S $OUT/
