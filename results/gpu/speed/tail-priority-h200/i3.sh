#!/bin/bash
# stop 30 call 4 (4 GPUs): lease-only levers on lab-1b's step tail (lease/prio.patch):
# EXP_PRIO=2 the communication stream at the greatest priority; EXP_AG0FIRST=1 (stages 1, 2)
# the optimizer stream waits for unit 0's all-gather before Adam of unit 1. Alternating, 2 rounds.
patch -p1 < lease/prio.patch > /dev/null || exit 1
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/i3; mkdir -p $R/tr; S=$R/summary.txt; cat /tmp/build.txt >> $S; nvidia-smi -L > $R/machine.txt
run() { local name=$1 n=$2 prog=$3; shift 3
  env "$@" timeout 60 mpirun --bind-to none -n $n build/cuda/$prog --preset lab-1b --steps 10 --quiet --check \
    --trace $R/tr/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step' $R/$name.txt) | $(grep -oE 'compute busy [0-9.]+ ms' $R/$name.txt), $(grep -oE 'exposed communication [0-9.]+ ms' $R/$name.txt) | $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt)" >> $S; }
for r in 1 2; do
  for s in stage2 stage1; do
    run ${s}_N4_base_$r 4 $s X=0; run ${s}_N4_prio_$r 4 $s EXP_PRIO=2
    run ${s}_N4_ag0_$r 4 $s EXP_AG0FIRST=1; run ${s}_N4_both_$r 4 $s EXP_PRIO=2 EXP_AG0FIRST=1
  done
  for s in stage3 stage0_ddp; do run ${s}_N4_base_$r 4 $s X=0; run ${s}_N4_prio_$r 4 $s EXP_PRIO=2; done
  run stage2_N2_base_$r 2 stage2 X=0; run stage2_N2_prio_$r 2 stage2 EXP_PRIO=2
  run stage2_N2_ag0_$r 2 stage2 EXP_AG0FIRST=1; run stage2_N2_both_$r 2 stage2 EXP_PRIO=2 EXP_AG0FIRST=1
  echo "round $r at $((SECONDS-T0)) s" >> $S
  [ $((SECONDS-T0)) -gt 200 ] && break
done
gzip $R/tr/*.json; cat $S; tar -C /tmp -czf $OUT/i3.tgz i3; cp $S $OUT/
