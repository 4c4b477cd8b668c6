#!/bin/bash
# stop 34 call 8 (4 × H200): zerolab beside its PyTorch peers at N = 4, 20 steps a run, both
# sides' energy timed by the counter's moves (3ba30f6) — an eighth peer lease.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
mkdir -p /tmp/p8
OUT_SAVE=$OUT; OUT=/tmp/p8 NS=4 STEPS=20 timeout 330 scripts/bench-gpu.sh lab-1b > $OUT_SAVE/peer.log 2>&1
echo "bench rc=$?" >> $OUT_SAVE/peer.log
cat $OUT_SAVE/peer.log
tar -C /tmp -czf $OUT_SAVE/p8.tgz p8
