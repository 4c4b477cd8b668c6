#!/bin/bash
# stop 36 call 2 (4 × H200): tenth peer lease — the fused-unscale master AdamW in the DDP/ZeRO-1 peers
# and zerolab's ranks unbound (both since the ninth), N = 4 then N = 2, 20 steps a run.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
mkdir -p /tmp/p10; T0=$SECONDS
OUT_SAVE=$OUT; OUT=/tmp/p10 NS="4 2" STEPS=20 timeout 560 scripts/bench-gpu.sh lab-1b > $OUT_SAVE/peer.log 2>&1
echo "bench rc=$? wall $((SECONDS-T0)) s" >> $OUT_SAVE/peer.log
cat $OUT_SAVE/peer.log | tail -30
ls /tmp/p10 | wc -l
tar -C /tmp -czf $OUT_SAVE/p10.tgz p10
