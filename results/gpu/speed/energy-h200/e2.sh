#!/bin/bash
# stop 34 call 3: why a 10-step run's energy a step divides out above the 700 W limit — the
# board's instant power beside its one-second average (nvidia-smi, every 20 ms) and how often the
# energy counter moves (NVML, read in a tight loop), through zerolab ZeRO-2 lab-1b N = 4 runs of
# 10, 20 and 40 steps.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/e2; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
nvidia-smi --help-query-gpu | grep -i -A1 "energy\|power.draw" > $R/fields.txt
cat > $R/counter.py <<'PY'
# read GPU 0's energy counter (mJ) as fast as NVML answers until killed; print each change
import ctypes, sys, time, signal
n = ctypes.CDLL("libnvidia-ml.so.1"); n.nvmlInit_v2(); d = ctypes.c_void_p()
n.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(d)); mj = ctypes.c_ulonglong(); last = None; reads = 0
out = open(sys.argv[1], "w"); t0 = time.perf_counter(); stop = False
def halt(*a):
    global stop; stop = True
signal.signal(signal.SIGTERM, halt)
while not stop:
    n.nvmlDeviceGetTotalEnergyConsumption(d, ctypes.byref(mj)); reads += 1
    if mj.value != last:
        out.write("%.6f %d\n" % (time.perf_counter() - t0, mj.value)); last = mj.value
out.write("# reads %d over %.3f s\n" % (reads, time.perf_counter() - t0)); out.close()
PY
for steps in 10 20 40; do
  nvidia-smi -i 0 --query-gpu=timestamp,power.draw.instant,power.draw.average,clocks.sm --format=csv,noheader,nounits -lms 20 > $R/smi_$steps.csv 2>&1 &
  SMI=$!
  python3 $R/counter.py $R/counter_$steps.txt & CNT=$!
  sleep 1
  timeout 120 mpirun -n 4 --bind-to none build/cuda/stage2 --layers 8 --dim 4096 --batch 8192 --steps $steps --quiet \
     --json $R/s2_$steps.json > $R/s2_$steps.txt 2>&1
  echo "steps=$steps rc=$? ($((SECONDS-T0)) s)" >> $S
  sleep 1; kill $SMI; kill -TERM $CNT; wait $CNT
  grep -h "rank 0: host\|ms/step" $R/s2_$steps.txt >> $S
  sleep 3
done
python3 - $R <<'PY' >> $S
import json, sys, statistics as st
R = sys.argv[1]
for steps in (10, 20, 40):
    j = json.load(open("%s/s2_%d.json" % (R, steps))); r0 = j["ranks"][0]; c = r0["clocks"]
    ms = j["ms_per_step"]
    print("steps %d: mean %.2f ms, median %.2f; counter %.1f J a step = %.0f W over the timed steps; power median %.0f W"
          % (steps, ms, st.median(j["step_ms"][1:]), c["energy_j_per_step"], c["energy_j_per_step"] / ms * 1e3, c["power_w_median"]))
    rows = []
    for line in open("%s/smi_%d.csv" % (R, steps)):
        f = [x.strip() for x in line.split(",")]
        try: rows.append((float(f[1]), float(f[2]), float(f[3])))
        except (ValueError, IndexError): pass
    busy = [x for x in rows if x[0] > 300]
    if busy:
        inst = [x[0] for x in busy]
        print("  nvidia-smi, %d busy samples of %d: instant W first 10 %s; max %.0f, median %.0f, last 10 median %.0f; average W max %.0f"
              % (len(busy), len(rows), [round(v) for v in inst[:10]], max(inst), st.median(inst), st.median(inst[-10:]), max(x[1] for x in busy)))
    ch = [l.split() for l in open("%s/counter_%d.txt" % (R, steps)) if not l.startswith("#")]
    t = [float(a) for a, b in ch]; e = [int(b) for a, b in ch]
    gaps = [b - a for a, b in zip(t, t[1:])]
    print("  counter: %d changes; interval median %.1f ms (min %.1f, max %.1f); %s"
          % (len(ch), 1e3 * st.median(gaps), 1e3 * min(gaps), 1e3 * max(gaps), open("%s/counter_%d.txt" % (R, steps)).read().strip().splitlines()[-1]))
    # power from the counter, per 100 ms, where busy
    w = []
    for i in range(1, len(t)):
        if t[i] - t[i - 1] > 0: w.append((e[i] - e[i - 1]) / (t[i] - t[i - 1]) / 1e3)
    print("  counter W per change, first 15 over 300 W:", [round(x) for x in w if x > 300][:15])
PY
cat $S; tar -C /tmp -czf $OUT/e2.tgz e2; cp $S $OUT/
