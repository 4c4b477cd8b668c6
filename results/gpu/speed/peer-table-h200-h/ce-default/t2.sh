#!/bin/bash
# session 50 call 4 (4 x H200): lab-1b beside the PyTorch peer at N = 4 with ZeRO-1/2's copy-engine gathers by default (dfc46ff)
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/t2; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
NS="4" STEPS=20 OUT=$R/def timeout 200 scripts/bench-gpu.sh lab-1b > $R/def.log 2>&1
echo "def NS=4 rc=$? at $((SECONDS-T0)) s" >> $S; tail -8 $R/def.log >> $S
cat $S; tar -C /tmp -czf $OUT/t2.tgz t2; cp $S $OUT/
