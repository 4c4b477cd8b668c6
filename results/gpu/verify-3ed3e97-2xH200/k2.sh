#!/bin/bash
# session 44 call 2: the GEMM table round trip's benchmark (which failed once in call 1 with an
# unspecified launch failure during its sustained phase) three times with full logs, then the
# benches part; on H100 also lab-1b beside the peer at N = 2 with tables/lab-1b-h100.json.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $OUT/log.txt
mkdir -p /tmp/k2
for i in 1 2 3; do
  timeout 120 build/cuda/bench_gemm_tune --dim 1024 --rows 1024 --layers 2 --algos 8 --sustain 0.2 --table /tmp/k2/t$i.json \
    --table-margin -100 > /tmp/k2/rt$i.log 2>&1
  echo "round-trip bench $i rc=$? $((SECONDS-T0)) s $(grep -c . /tmp/k2/t$i.json 2>/dev/null) table lines" >> $OUT/log.txt
done
nvidia-smi -q -d PAGE_RETIREMENT,ECC 2>/dev/null | grep -i -E "pending|retired|volatile|uncorr" | head -20 > /tmp/k2/ecc.txt
PARTS="benches" MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k2/s timeout -s TERM 200 scripts/test-gpu.sh > /tmp/k2/benches.txt 2>&1
echo "benches part rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "rc=|round trip|FAIL|PASSED" /tmp/k2/benches.txt | head >> $OUT/log.txt
if nvidia-smi -L | head -1 | grep -q H100; then
  NS=2 STEPS=20 OUT=/tmp/k2/peer_N2 timeout 250 scripts/bench-gpu.sh lab-1b > /tmp/k2/peer_N2.log 2>&1
  echo "peer N=2 rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/k2/peer_N2.log $OUT/peer_N2.log
fi
dmesg 2>/dev/null | grep -i -E "xid|nvrm" | tail -20 > /tmp/k2/dmesg.txt
tar -C /tmp -czf $OUT/k2.tgz k2
cat $OUT/log.txt
