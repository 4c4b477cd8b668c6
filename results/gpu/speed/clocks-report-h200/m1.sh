#!/bin/bash
# stop 31 call 4 (4 GPUs): the clocks reader after the fix (reading ends with the last step):
# (A) test_report's clocks test on GPUs, (B) the report's clocks beside nvidia-smi's, same run,
# (C) step time: without the reader (old), reading every 20 ms (new), every 100 ms (p100), alternating.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/m1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt >> $S; nvidia-smi -L > $R/machine.txt
rm -rf /tmp/new /tmp/p100 && cp -r build/cuda /tmp/new
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
timeout 100 build/gpu-tests/test_report -j1 --filter 'clocks/*' > $R/test_clocks.txt 2>&1
echo "test_report clocks rc=$? $((SECONDS-T0)) s: $(grep -E 'Synthesis' $R/test_clocks.txt | tail -1)" >> $S
grep -h '^\[FAIL\|^\[----\]' $R/test_clocks.txt | head -20 >> $S
Q=timestamp,index,pci.bus_id,clocks.current.sm,power.draw,clocks_event_reasons.active
nvidia-smi --query-gpu=$Q --format=csv -lms 20 > $R/beside.clocks.csv 2>&1 & p=$!; sleep 1
date +%s.%N > $R/beside.t0
timeout 90 mpirun --bind-to none -n 4 /tmp/new/stage2 --preset lab-1b --steps 30 --quiet --check --json $R/beside.json --trace $R/beside.trace.json > $R/beside.txt 2>&1
echo "beside rc=$?" >> $S; date +%s.%N > $R/beside.t1; sleep 1; kill $p
grep -E "^rank|ms/step" $R/beside.txt >> $S
sed -i 's/#define ZL_CLOCK_PERIOD_MS 20/#define ZL_CLOCK_PERIOD_MS 100/' common/clocks.h
make -j32 GIT_COMMIT=cc000ea+clocks100 cuda > /tmp/build-100.log 2>&1 || tail -20 /tmp/build-100.log >> $S
cp -r build/cuda /tmp/p100; sed -i 's/#define ZL_CLOCK_PERIOD_MS 100/#define ZL_CLOCK_PERIOD_MS 20/' common/clocks.h
patch -R -p1 < lease/clocks.patch > /dev/null || echo "patch -R failed" >> $S
make -j32 GIT_COMMIT=cc000ea cuda > /tmp/build-old.log 2>&1 || tail -20 /tmp/build-old.log >> $S
run() { local name=$1 n=$2 dir=$3 prog=$4
  timeout 60 mpirun --bind-to none -n $n $dir/$prog --preset lab-1b --steps 10 --quiet --check > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) | $(grep -m1 -oE 'SM [0-9]+ MHz median[^,]*, [0-9]+ W of [0-9]+, power cap [0-9]+% of [0-9]+ readings' $R/$name.txt)" >> $S; }
for r in 1 2 3; do
  for s in stage2 stage3; do
    run ${s}_N4_old_$r 4 build/cuda $s; run ${s}_N4_new_$r 4 /tmp/new $s; run ${s}_N4_p100_$r 4 /tmp/p100 $s
  done
  [ $((SECONDS-T0)) -gt 380 ] && break
done
echo "ended at $((SECONDS-T0)) s" >> $S
gzip $R/beside.clocks.csv $R/beside.trace.json; cat $S; tar -C /tmp -czf $OUT/m1.tgz m1; cp $S $OUT/
