#!/bin/bash
# session 52 call 3 (2 x H200): at b3d8727 (ZeRO-3 on the copy engines at N = 2 by default): the
# report's engine tests, bench-gpu.sh lab-1b at N = 2, 20 steps, with --keep-activations and then
# by default (each beside the peer), then the GPU integration suite while time is left.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/k3; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=2
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
timeout 120 build/gpu-tests/test_report -j1 --filter '*/allgather_engine*' > $R/report_engine.txt 2>&1
echo "report engine tests rc=$? $(grep Synthesis $R/report_engine.txt) at $((SECONDS-T0)) s" >> $S
unset ZL_BUILD ZL_REFERENCE_BUILD ZL_MAX_WORLD ZL_MPIEXEC CRITERION_VERBOSITY_LEVEL
NS=2 STEPS=20 OUT=$R/bench-keep ZEROLAB_FLAGS=--keep-activations timeout 170 scripts/bench-gpu.sh lab-1b > $R/bench-keep.log 2>&1
echo "bench keep rc=$? at $((SECONDS-T0)) s" >> $S
NS=2 STEPS=20 OUT=$R/bench-default timeout 170 scripts/bench-gpu.sh lab-1b > $R/bench-default.log 2>&1
echo "bench default rc=$? at $((SECONDS-T0)) s" >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=2
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
timeout $((560-SECONDS+T0)) build/gpu-tests/test_integration -j1 > $R/integration.txt 2>&1
echo "integration rc=$? $(grep -c '^\[PASS' $R/integration.txt) PASS lines; $(grep Synthesis $R/integration.txt) at $((SECONDS-T0)) s" >> $S
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -30 >> $S
for f in keep default; do echo "== $f"; tail -8 $R/bench-$f.log; done >> $S
cat $S; tar -C /tmp -czf $OUT/k3.tgz k3; cp $S $R/bench-default.log $R/bench-keep.log $OUT/
