#!/bin/bash
# stop 34 call 6 (one H100): the energy counter on an H100 — how often it moves (NVML read in a
# tight loop) beside nvidia-smi's instant and one-second power, and the report's moves-timed
# energy (3ba30f6) for DDP at N = 1 on lab-1b, 10 and 30 steps.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/h1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv >> $S
cp results/gpu/speed/energy-h200/counter.py $R/ 2>/dev/null || tar -xzOf results/gpu/speed/energy-h200/e2.tgz e2/counter.py > $R/counter.py
for steps in 10 30; do
  nvidia-smi -i 0 --query-gpu=timestamp,power.draw.instant,power.draw.average,clocks.sm --format=csv,noheader,nounits -lms 20 > $R/smi_$steps.csv 2>&1 & SMI=$!
  python3 $R/counter.py $R/counter_$steps.txt & CNT=$!
  sleep 1
  timeout 100 mpirun -n 1 --bind-to none build/cuda/stage0_ddp --layers 8 --dim 4096 --batch 8192 --steps $steps --quiet --json $R/ddp_$steps.json > $R/ddp_$steps.txt 2>&1
  echo "ddp N=1 steps=$steps rc=$? ($((SECONDS-T0)) s): $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/ddp_$steps.txt)" >> $S
  sleep 1; kill $SMI; kill -TERM $CNT; wait $CNT
  grep -h "rank 0: host" $R/ddp_$steps.txt | sed 's/.*| SM/  SM/' >> $S
  python3 - $R $steps <<'PY' >> $S
import sys, statistics as st
R, steps = sys.argv[1], sys.argv[2]
ch = [l.split() for l in open("%s/counter_%s.txt" % (R, steps)) if not l.startswith("#")]
t = [float(a) for a, b in ch]; g = [b - a for a, b in zip(t, t[1:])]
inst = []
for line in open("%s/smi_%s.csv" % (R, steps)):
    f = [x.strip() for x in line.split(",")]
    try: inst.append(float(f[1]))
    except (ValueError, IndexError): pass
busy = [x for x in inst if x > 300]
print("  counter: %d moves, interval median %.1f ms (min %.1f, max %.1f); instant W over busy samples: median %.0f, max %.0f (%d samples)"
      % (len(ch), 1e3 * st.median(g), 1e3 * min(g), 1e3 * max(g), st.median(busy) if busy else -1, max(busy) if busy else -1, len(busy)))
PY
  sleep 2
done
cat $S; tar -C /tmp -czf $OUT/h1.tgz h1; cp $S $OUT/
