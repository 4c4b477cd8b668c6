#!/bin/bash
# session 45 call 4 (1 x H200): after call 3 (the benchmark's channel reset, Xid 43, twice in three
# runs beside a training process): P1, is a second training process hurt the same way? stage2 runs
# with small GEMMs (like the benchmark's) beside a larger stage2, one after another for ~100 s.
# P2, does the benchmark fail beside the trainer without its sustained phase (no NVML reads, short
# timed rounds only)? Runs one after another for ~100 s. Xid lines after each.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
mkdir -p /tmp/k4
xids() { dmesg 2>/dev/null | grep -i -c "xid"; }
echo "xid lines before: $(xids)" >> $OUT/log.txt
load() { timeout $1 mpirun -n 1 --bind-to none build/cuda/stage2 --layers 8 --dim 2048 --batch 8192 --steps 100000 --quiet --timeout 0 > /tmp/k4/load$2.log 2>&1; echo "load $2 rc=$? (124: stopped by its timeout) $(tail -c 300 /tmp/k4/load$2.log | tr '\n' ' ')" >> $OUT/log.txt; }
load 110 1 & sleep 6
i=0; while [ $((SECONDS-T0)) -lt 105 ]; do i=$((i+1))
  timeout 60 mpirun -n 1 --bind-to none build/cuda/stage2 --layers 2 --dim 1024 --batch 1024 --steps 3000 --quiet --timeout 0 > /tmp/k4/small$i.log 2>&1
  echo "P1 small trainer $i rc=$? $((SECONDS-T0)) s xid-lines=$(xids) $(grep -m1 -o '[a-z_/]*\.c[u]*:[0-9]*: [^(]*' /tmp/k4/small$i.log)" >> $OUT/log.txt
done
wait
load 110 2 & sleep 6
i=0; while [ $((SECONDS-T0)) -lt 225 ]; do i=$((i+1))
  timeout 60 build/cuda/bench_gemm_tune --dim 1024 --rows 1024 --layers 2 --algos 8 --rounds 20 > /tmp/k4/bench$i.log 2>&1
  echo "P2 bench without --sustain $i rc=$? $((SECONDS-T0)) s xid-lines=$(xids) $(grep -m1 -o 'gemm_tune.cu:[0-9]*: [^(]*' /tmp/k4/bench$i.log)" >> $OUT/log.txt
done
wait
dmesg 2>/dev/null | grep -i -E "xid" | tail -30 > /tmp/k4/dmesg.txt
echo "done $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/k4.tgz k4
cat $OUT/log.txt
