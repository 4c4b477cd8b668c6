#!/bin/bash
# session 45 call 2 (1 x H200: the 2-GPU kind was no longer lent): does the GEMM table round trip's benchmark fail only while other
# processes share its GPU? It failed twice in the whole suite (PARALLEL=1: every part side by side),
# both times with "unspecified launch failure" in its sustained phase, and never in 10 runs alone.
# A: the benchmark alone on GPU 0. B: four times while a second bench_gemm_tune loops on the
# same GPU. C: three times while a stage2 job of one rank loops on the GPU. The kernel log's
# Xid lines after each.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
mkdir -p /tmp/k2
B="build/cuda/bench_gemm_tune --dim 1024 --rows 1024 --layers 2 --algos 8 --sustain 0.2 --table-margin -100"
xids() { dmesg 2>/dev/null | grep -i -c "xid"; }
one() { # label i
  timeout 150 $B --table /tmp/k2/$1$2.json > /tmp/k2/$1$2.log 2>&1; local rc=$?
  echo "$1 $2 rc=$rc $((SECONDS-T0)) s xid-lines=$(xids) $(grep -m1 -o 'gemm_tune.cu:[0-9]*: [^(]*' /tmp/k2/$1$2.log)" >> $OUT/log.txt
}
echo "xid lines before: $(xids)" >> $OUT/log.txt
one alone 1
( while :; do $B --sustain 0.5 > /dev/null 2>&1; done ) & L=$!
sleep 2
for i in 1 2 3 4; do [ $((SECONDS-T0)) -lt 300 ] && one gemmload $i; done
kill $L; pkill -f "bench_gemm_tune --dim 1024 --rows 1024 --layers 2 --algos 8 --sustain 0.5"; wait $L 2>/dev/null
( while :; do timeout 60 mpirun -n 1 --bind-to none build/cuda/stage2 --layers 4 --dim 1024 --batch 2048 --steps 200 --quiet > /dev/null 2>&1; done ) & L=$!
sleep 5
for i in 1 2 3; do [ $((SECONDS-T0)) -lt 430 ] && one ncclload $i; done
kill $L; pkill -f "build/cuda/stage2"; pkill mpirun; wait 2>/dev/null
dmesg 2>/dev/null | grep -i -E "xid|nvrm" | tail -30 > /tmp/k2/dmesg.txt
echo "done $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/k2.tgz k2
cat $OUT/log.txt
