#!/bin/bash
# stop 31 call 3 (4 GPUs): the clocks in the report (lease/clocks.patch = the working tree's change):
# (A) test_report on GPUs (its clocks test checks against nvidia-smi), (B) the report's per-rank
# clocks beside nvidia-smi sampling the same run, (C) step time without / with the reader, alternating.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/l1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt >> $S; nvidia-smi -L > $R/machine.txt
rm -rf /tmp/new && cp -r build/cuda /tmp/new
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
timeout 200 build/gpu-tests/test_report -j1 > $R/test_report.txt 2>&1
echo "test_report rc=$? $((SECONDS-T0)) s: $(grep -E 'Synthesis' $R/test_report.txt | tail -1)" >> $S
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/test_report.txt | head -20 >> $S
Q=timestamp,index,pci.bus_id,clocks.current.sm,power.draw,clocks_event_reasons.active
nvidia-smi --query-gpu=$Q --format=csv -lms 20 > $R/beside.clocks.csv 2>&1 & p=$!; sleep 1
timeout 90 mpirun --bind-to none -n 4 /tmp/new/stage2 --preset lab-1b --steps 30 --quiet --check --json $R/beside.json > $R/beside.txt 2>&1
echo "beside rc=$?" >> $S; sleep 1; kill $p
grep -E "^rank|ms/step" $R/beside.txt >> $S
patch -R -p1 < lease/clocks.patch > /dev/null || { echo "patch -R failed" >> $S; }
make -j32 GIT_COMMIT=cc000ea cuda > /tmp/build-old.log 2>&1 || { tail -20 /tmp/build-old.log >> $S; }
run() { local name=$1 n=$2 dir=$3 prog=$4
  timeout 60 mpirun --bind-to none -n $n $dir/$prog --preset lab-1b --steps 10 --quiet --check > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) $(grep -c ' | SM ' $R/$name.txt) clock lines" >> $S; }
for r in 1 2 3; do
  run stage2_N4_old_$r 4 build/cuda stage2; run stage2_N4_new_$r 4 /tmp/new stage2
  run stage0_ddp_N2_old_$r 2 build/cuda stage0_ddp; run stage0_ddp_N2_new_$r 2 /tmp/new stage0_ddp
  [ $((SECONDS-T0)) -gt 420 ] && break
done
echo "ended at $((SECONDS-T0)) s" >> $S
gzip $R/beside.clocks.csv; cat $S; tar -C /tmp -czf $OUT/l1.tgz l1; cp $S $OUT/
