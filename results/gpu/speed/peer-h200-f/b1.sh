#!/bin/bash
# stop 33 call 2 (4 × H100, the machine of call 1): zerolab beside its PyTorch peers at HEAD,
# 20 steps a run, with both sides' clocks and the energy column.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
python3 -c 'import torch; print("torch", torch.__version__)'
mkdir -p /tmp/peer
OUT_SAVE=$OUT; OUT=/tmp/peer STEPS=20 timeout 570 scripts/bench-gpu.sh lab-1b 2>&1 | tee $OUT_SAVE/peer.log
tar -C /tmp -czf $OUT_SAVE/peer.tgz peer
