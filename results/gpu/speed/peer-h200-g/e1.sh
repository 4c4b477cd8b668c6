#!/bin/bash
# stop 34 call 1: the energy counter path on GPUs for the first time — test_report (check_clocks'
# GPU branch bounds each rank's J a step by power limit × the steps' time), then zerolab beside its
# PyTorch peers (bench-gpu.sh: both sides' measured energy columns), at HEAD.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/e1; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L > $R/machine.txt; cat /tmp/build.txt >> $S
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv >> $S
python3 -c 'import torch; print("torch", torch.__version__)' >> $S 2>&1
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
timeout 150 build/gpu-tests/test_report -j1 > $R/report.txt 2>&1
echo "report rc=$? ($((SECONDS-T0)) s): $(grep -E 'Synthesis' $R/report.txt | tail -1)" >> $S
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/report.txt | head -20 >> $S
grep -h ' | SM \| J a step\| J over' $R/report.txt | head -6 >> $S
mkdir -p $R/peer
OUT=$R/peer STEPS=${STEPS:-10} timeout $((575-SECONDS+T0)) scripts/bench-gpu.sh lab-1b > $R/peer.log 2>&1
echo "bench rc=$? (ended at $((SECONDS-T0)) s)" >> $S
cat $R/peer.log >> $S
cat $S; tar -C /tmp -czf $OUT/e1.tgz e1; cp $S $OUT/
