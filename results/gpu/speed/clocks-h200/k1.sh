#!/bin/bash
# stop 31 call 2 (4 GPUs): (A) H200 clocks beside lab-1b for 40 steps (is step 8's slow step power?),
# (B) ckpt's N = 2 variant (ZL_MAX_WORLD=2) and test_report (N <= 4) on GPUs, side by side.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/k1; mkdir -p $R/tr; S=$R/summary.txt; cat /tmp/build.txt >> $S; nvidia-smi -L > $R/machine.txt
nvidia-smi -q -d POWER,CLOCK > $R/power-clock.txt 2>&1
Q=timestamp,index,clocks.current.sm,clocks.current.memory,power.draw,temperature.gpu,clocks_event_reasons.active
clk() { local name=$1 n=$2 prog=$3 steps=$4
  nvidia-smi --query-gpu=$Q --format=csv -lms 20 > $R/$name.clocks.csv 2>&1 & local p=$!; sleep 1
  date +%s.%N > $R/$name.t0
  timeout 90 mpirun --bind-to none -n $n build/cuda/$prog --preset lab-1b --steps $steps --quiet --check \
    --trace $R/tr/$name.json --json $R/$name.json > $R/$name.txt 2>&1; local rc=$?
  date +%s.%N > $R/$name.t1; sleep 1; kill $p
  echo "$name rc=$rc $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt)" >> $S; }
clk stage2_N4_s40 4 stage2 40
clk stage0_ddp_N1_s40 1 stage0_ddp 40
clk stage2_N4_s10 4 stage2 10
echo "clocks part ended at $((SECONDS-T0)) s" >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
part() { local name=$1 w=$2; shift 2; local t=$SECONDS
  ZL_MAX_WORLD=$w timeout $((540-SECONDS+T0)) "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name (ZL_MAX_WORLD=$w) rc=$rc $((SECONDS-t)) s: $(grep -c '^\[PASS' $R/$name.txt) PASS, $(grep -c '^\[SKIP' $R/$name.txt) SKIP; $(grep -E 'Synthesis' $R/$name.txt | tail -1)" >> $S; }
( part ckpt_N2 2 build/gpu-tests/test_ckpt -j1 --verbose ) &
( part report 4 build/gpu-tests/test_report -j1 --verbose ) &
wait
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -40 >> $S
for f in $R/tr/*.json; do gzip $f; done; cat $S; tar -C /tmp -czf $OUT/k1.tgz k1; cp $S $OUT/
