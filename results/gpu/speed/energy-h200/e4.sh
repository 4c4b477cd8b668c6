#!/bin/bash
# stop 34 call 5: test_report's clock tests again after the presence test in expect_energy was mended
# (zl_get fails on a missing key; call 4's short run had no energy_j, as designed).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/e4; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
timeout 200 build/gpu-tests/test_report -j1 > $R/report.txt 2>&1
echo "report rc=$? ($((SECONDS-T0)) s): $(grep -E 'Synthesis' $R/report.txt | tail -1)" >> $S
grep -h '^\[FAIL\|^\[----\]\|^\[SKIP\]' $R/report.txt | head -20 >> $S
mpirun -n 2 --bind-to none build/cuda/stage2 --steps 6 --quiet | grep "rank .: host" >> $S
cat $S; tar -C /tmp -czf $OUT/e4.tgz e4; cp $S $OUT/
