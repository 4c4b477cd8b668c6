#!/bin/bash
# session 45 call 3 (1 x H200): call 2 again with loads that really run (its bench load was refused at
# once: --table-margin without --table; its stage2 load was mostly start-up). B: the benchmark while
# a second bench_gemm_tune loops on the GPU. C: while one stage2 rank trains a larger MLP on it.
# E: while the suite's first neighbours run beside it (kernels, sanitizer, reference parts,
# PARALLEL=1). Each line gives the first GEMM's default TFLOP/s, which a load that overlaps lowers
# (alone: 438.6 in call 2), and the kernel log's Xid lines.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
mkdir -p /tmp/k3
B="build/cuda/bench_gemm_tune --dim 1024 --rows 1024 --layers 2 --algos 8 --sustain 0.2"
xids() { dmesg 2>/dev/null | grep -i -c "xid"; }
one() { # label i
  timeout 150 $B --table /tmp/k3/$1$2.json --table-margin -100 > /tmp/k3/$1$2.log 2>&1; local rc=$?
  echo "$1 $2 rc=$rc $((SECONDS-T0)) s xid-lines=$(xids) first: $(grep -m1 -o 'default [0-9.]* TFLOP/s' /tmp/k3/$1$2.log) $(grep -m1 -o 'gemm_tune.cu:[0-9]*: [^(]*' /tmp/k3/$1$2.log)" >> $OUT/log.txt
}
echo "xid lines before: $(xids)" >> $OUT/log.txt
( n=0; while :; do $B --sustain 0.5 > /tmp/k3/load.log 2>&1; echo "load run $((++n)) rc=$?" >> /tmp/k3/loadruns.txt; done ) & L=$!
sleep 3
for i in 1 2 3; do [ $((SECONDS-T0)) -lt 150 ] && one gemmload $i; done
kill $L; pkill -f "bench_gemm_tune --dim 1024 --rows 1024 --layers 2 --algos 8 --sustain 0.5"; wait $L 2>/dev/null
echo "bench load: $(tail -1 /tmp/k3/loadruns.txt)" >> $OUT/log.txt
timeout 200 mpirun -n 1 --bind-to none build/cuda/stage2 --layers 8 --dim 2048 --batch 8192 --steps 100000 --quiet --timeout 0 > /tmp/k3/trainload.log 2>&1 & L=$!
sleep 8
for i in 1 2 3; do [ $((SECONDS-T0)) -lt 260 ] && one trainload $i; done
kill $L; pkill -f "build/cuda/stage2"; wait $L 2>/dev/null
echo "train load: $(tail -2 /tmp/k3/trainload.log | tr '\n' ' ')" >> $OUT/log.txt
for i in 1 2 3; do
  [ $((SECONDS-T0)) -lt 420 ] || break
  PARTS="kernels sanitizer reference" PARALLEL=1 MAX_WORLD=1 MPIEXEC=mpirun LOGDIR=/tmp/k3/s$i timeout 120 scripts/test-gpu.sh > /tmp/k3/suite$i.txt 2>&1 & L=$!
  sleep 2; one suite $i; wait $L; echo "  neighbours rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
done
dmesg 2>/dev/null | grep -i -E "xid|nvrm" | tail -30 > /tmp/k3/dmesg.txt
echo "done $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/k3.tgz k3
cat $OUT/log.txt
