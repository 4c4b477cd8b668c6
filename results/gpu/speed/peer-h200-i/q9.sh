#!/bin/bash
# stop 35 call 3 (2 × H100): zerolab beside its PyTorch peers at N = 2, 20 steps a run, both sides' energy
# timed by the counter's moves — the first GPU run of bench-gpu.sh's "J (W)" cell.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
mkdir -p /tmp/q9
OUT_SAVE=$OUT; OUT=/tmp/q9 NS=2 STEPS=20 timeout 370 scripts/bench-gpu.sh lab-1b > $OUT_SAVE/peer.log 2>&1
echo "bench rc=$?" >> $OUT_SAVE/peer.log
cat $OUT_SAVE/peer.log | tail -40
tar -C /tmp -czf $OUT_SAVE/q9.tgz q9
