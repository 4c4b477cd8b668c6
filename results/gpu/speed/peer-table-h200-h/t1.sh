#!/bin/bash
# session 50 call 2 (4 x H200): lab-1b beside the PyTorch peer at HEAD (the batch kernel 8 columns a thread):
# (A) bench-gpu.sh lab-1b by default, NS="2 4", 20 steps; (B) with the copy-engine knob, NS=4.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/t1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $S
NS="2 4" STEPS=20 OUT=$R/def timeout 310 scripts/bench-gpu.sh lab-1b > $R/def.log 2>&1
echo "A def NS=2,4 rc=$? at $((SECONDS-T0)) s" >> $S
[ $((SECONDS-T0)) -lt 390 ] && { ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 NS="4" STEPS=20 OUT=$R/win timeout $((575-SECONDS+T0)) scripts/bench-gpu.sh lab-1b > $R/win.log 2>&1
echo "B win NS=4 rc=$? at $((SECONDS-T0)) s" >> $S; }
for f in def win; do tail -14 $R/$f.log >> $S; done
cat $S; tar -C /tmp -czf $OUT/t1.tgz t1; cp $S $R/def.log $R/win.log $OUT/
