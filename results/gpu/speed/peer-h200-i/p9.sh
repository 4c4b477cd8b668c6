#!/bin/bash
# stop 35 call 2: zerolab beside its PyTorch peers at N = 2, 20 steps a run, both sides' energy
# timed by the counter's moves — the first GPU run of bench-gpu.sh's "J (W)" cell.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
MPIEXEC=mpirun MAX_WORLD=2 PARTS=report timeout 200 scripts/test-gpu.sh > $OUT/report-part.log 2>&1; echo "report part rc=$?"; grep -E "Synthesis|FAIL|\(report" $OUT/report-part.log
mkdir -p /tmp/p9
OUT_SAVE=$OUT; OUT=/tmp/p9 NS=2 STEPS=20 timeout 370 scripts/bench-gpu.sh lab-1b > $OUT_SAVE/peer.log 2>&1
echo "bench rc=$?" >> $OUT_SAVE/peer.log
cat $OUT_SAVE/peer.log | tail -40
tar -C /tmp -czf $OUT_SAVE/p9.tgz p9
