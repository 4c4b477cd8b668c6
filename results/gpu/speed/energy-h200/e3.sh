#!/bin/bash
# stop 34 call 4: the energy timed by the counter's moves (uncommitted change on f01bb55) on GPUs —
# test_report (the clock checks and the new energy test), lab-1b ZeRO-2 N = 4 at 10, 20 and 40
# steps, and the peer's reader (FSDP1, N = 2, 10 and 20 steps).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/e3; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
timeout 220 build/gpu-tests/test_report -j1 > $R/report.txt 2>&1
echo "report rc=$? ($((SECONDS-T0)) s): $(grep -E 'Synthesis' $R/report.txt | tail -1)" >> $S
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert\|^\[SKIP\]' $R/report.txt | head -20 >> $S
grep -h 'J a step\|too few' $R/report.txt | head -4 >> $S
LAB="--layers 8 --dim 4096 --batch 8192"
for steps in 10 20 40; do
  timeout 120 mpirun -n 4 --bind-to none build/cuda/stage2 $LAB --steps $steps --quiet --json $R/s2_$steps.json > $R/s2_$steps.txt 2>&1
  echo "stage2 N=4 steps=$steps rc=$? ($((SECONDS-T0)) s): $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/s2_$steps.txt)" >> $S
  grep -h "rank .: host" $R/s2_$steps.txt | sed 's/.*| SM/  SM/' >> $S
done
for steps in 10 20; do
  timeout 120 python3 -m torch.distributed.run --standalone --nproc_per_node 2 bench/torch_peer.py --stage 2 $LAB \
     --steps $steps --json $R/peer2_$steps.json > $R/peer2_$steps.txt 2>&1
  echo "peer FSDP1 N=2 steps=$steps rc=$? ($((SECONDS-T0)) s)" >> $S
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); c=j["clocks"]; print("  ms %.2f median %.2f" % (j["ms"], j["ms_median"]), {k: v for k, v in c.items() if k.startswith("energy") or k.startswith("power")})' $R/peer2_$steps.json >> $S 2>&1
done
cat $S; tar -C /tmp -czf $OUT/e3.tgz e3; cp $S $OUT/
