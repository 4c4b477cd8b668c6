#!/bin/bash
# session 44 call 3: the GEMM table benchmark that stopped once with an unspecified launch failure
# (call 1, beside the other parts of the suite): under compute-sanitizer memcheck (our diff and fill
# kernels and cuBLASLt's), then six times beside a load of other jobs on the same GPUs.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
mkdir -p /tmp/k3
B="build/cuda/bench_gemm_tune --dim 1024 --rows 1024 --layers 2 --algos 8 --table-margin -100"
timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $B --reps 2 --rounds 1 --warmup 0 --sustain 0.05 --table /tmp/k3/ts.json > /tmp/k3/memcheck.log 2>&1
echo "memcheck rc=$? $((SECONDS-T0)) s: $(grep 'ERROR SUMMARY' /tmp/k3/memcheck.log | tail -1)" >> $OUT/log.txt
# a load beside it: the GPT and MLP programs at N = 2 on both GPUs, over and over
( while [ $((SECONDS-T0)) -lt 330 ]; do
    mpirun -n 2 build/cuda/stage3 --preset gpt-tiny --steps 200 --quiet > /dev/null 2>&1
    mpirun -n 2 build/cuda/stage2 --dim 2048 --layers 4 --batch 4096 --steps 40 --quiet > /dev/null 2>&1
  done ) &
LOAD=$!
for i in 1 2 3 4 5 6; do
  timeout 120 $B --sustain 0.2 --table /tmp/k3/t$i.json > /tmp/k3/rt$i.log 2>&1
  echo "bench beside the load $i rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
done
kill $LOAD 2>/dev/null; wait
dmesg 2>/dev/null | grep -i -E "xid" | tail -20 > /tmp/k3/xid.txt
echo "Xid lines: $(wc -l < /tmp/k3/xid.txt)" >> $OUT/log.txt
tar -C /tmp -czf $OUT/k3.tgz k3
cat $OUT/log.txt
