#!/bin/bash
# stop 32 call 3 (4 GPUs): (A) the gathers on the copy engines (ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2)
# on lab-1b, judged by the median step and rank 0's SM clock (fewer SM cycles in NCCL = less energy a
# step under the 700 W cap?), default vs windows alternating, 2 rounds, 20 steps; (B) test_loud at HEAD.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/o1; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L > $R/machine.txt; cat /tmp/build.txt >> $S
run() { local name=$1 n=$2 prog=$3; shift 3
  env "$@" timeout 60 mpirun --bind-to none -n $n build/cuda/$prog --preset lab-1b --steps 20 --quiet --check --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) | $(grep -m1 -oE 'SM [0-9]+ MHz median[^,]*, [0-9]+ W of [0-9]+, power cap [0-9]+% of [0-9]+ readings' $R/$name.txt) | $(grep -m1 -oE 'device used \(end\) *\| *[0-9]+' $R/$name.txt)" >> $S; }
for r in 1 2; do
  for n in 4 2; do for s in stage1 stage2; do
    run ${s}_N${n}_def_$r $n $s ZL_NCCL_WINDOWS=0
    run ${s}_N${n}_win_$r $n $s ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2
  done; done
  [ $((SECONDS-T0)) -gt 200 ] && break
done
echo "A ended at $((SECONDS-T0)) s" >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_MAX_WORLD=4 ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
timeout $((430-SECONDS+T0)) build/gpu-tests/test_loud -j1 > $R/loud.txt 2>&1
echo "loud rc=$? (ended at $((SECONDS-T0)) s): $(grep -c '^\[PASS' $R/loud.txt) PASS lines; $(grep Synthesis $R/loud.txt)" >> $S
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/loud.txt | head -20 >> $S
cat $S; tar -C /tmp -czf $OUT/o1.tgz o1; cp $S $OUT/
