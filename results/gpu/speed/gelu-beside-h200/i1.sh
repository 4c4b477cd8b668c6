#!/bin/bash
# stop 30 call 1 (4 GPUs): GELU recompute beside the GEMMs (side stream) — before/after on
# lab-1b, every stage, N = 4 (twice) and 2, alternating (scripts/gpu-levers.sh OUT BASE)
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/i1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt >> $S; nvidia-smi -L > $R/machine.txt
rm -rf /tmp/before; cp -a . /tmp/before && (cd /tmp/before && patch -p1 < lease/sidebefore.patch > /dev/null && make -j32 GIT_COMMIT=before cuda > /tmp/before.log 2>&1) || { tail /tmp/before.log; exit 1; }
echo "before built at $((SECONDS-T0)) s" >> $S
MPIEXEC="mpirun --bind-to none" STEPS=10 timeout $((560-SECONDS+T0)) scripts/gpu-levers.sh $R/ab /tmp/before >> $S 2>&1
echo "levers rc=$? at $((SECONDS-T0)) s" >> $S
rm -rf $R/ab/traces/*before_b* $R/ab/traces/*after_b*; gzip $R/ab/traces/*.json
cat $S; tar -C /tmp -czf $OUT/i1.tgz i1; cp $S $OUT/
