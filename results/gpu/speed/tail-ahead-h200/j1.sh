#!/bin/bash
# next session (4 GPUs): lease-only levers on lab-1b's step tail (lease/tailhi.patch), stages 1-3:
# EXP_HI=1 unit 0's step-start all-gather alone on a stream of the greatest priority;
# EXP_AG0START=1 Adam of unit 1 waits until that gather has started; and (lease/loadahead.patch,
# every stage) EXP_LOADAHEAD=1 the next step's batch loads right after the backward, beside its
# last collective, instead of at the start of the next step. Alternating, 2 rounds.
patch -p1 < lease/tailhi.patch > /dev/null || exit 1
patch -p1 < lease/loadahead.patch > /dev/null || exit 1
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/j1; mkdir -p $R/tr; S=$R/summary.txt; cat /tmp/build.txt >> $S; nvidia-smi -L > $R/machine.txt
gpus=$(nvidia-smi -L | grep -c '^GPU')
run() { local name=$1 n=$2 prog=$3; shift 3
  [ "$n" -le "$gpus" ] || return 0
  env "$@" timeout 60 mpirun --bind-to none -n $n build/cuda/$prog --preset lab-1b --steps 10 --quiet --check \
    --trace $R/tr/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step' $R/$name.txt) | $(grep -oE 'compute busy [0-9.]+ ms' $R/$name.txt), $(grep -oE 'exposed communication [0-9.]+ ms' $R/$name.txt) | $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt)" >> $S; }
for r in 1 2; do
  for s in stage2 stage1 stage3; do
    run ${s}_N4_base_$r 4 $s X=0; run ${s}_N4_hi_$r 4 $s EXP_HI=1
    run ${s}_N4_start_$r 4 $s EXP_AG0START=1; run ${s}_N4_ahead_$r 4 $s EXP_LOADAHEAD=1
  done
  run stage0_ddp_N4_base_$r 4 stage0_ddp X=0; run stage0_ddp_N4_ahead_$r 4 stage0_ddp EXP_LOADAHEAD=1
  run stage2_N2_base_$r 2 stage2 X=0; run stage2_N2_hi_$r 2 stage2 EXP_HI=1
  run stage0_ddp_N2_base_$r 2 stage0_ddp X=0; run stage0_ddp_N2_ahead_$r 2 stage0_ddp EXP_LOADAHEAD=1
  echo "round $r at $((SECONDS-T0)) s" >> $S
  [ $((SECONDS-T0)) -gt 250 ] && break
done
python3 lease/tail.py $R/tr/*.json >> $S 2>&1
gzip $R/tr/*.json; cat $S; tar -C /tmp -czf $OUT/j1.tgz j1; cp $S $OUT/
