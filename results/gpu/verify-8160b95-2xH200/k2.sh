#!/bin/bash
# session 43 call 2: the launcher check (runtime.c), demo.sh's one-job check, run-criterion, the output renames on GPUs:
# demo on the GPUs, then the loud, report, mixed and integration parts (PARALLEL=1, MAX_WORLD=2).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit --format=csv >> $OUT/log.txt
MPIEXEC=mpirun timeout 120 scripts/demo.sh cuda 2 > $OUT/demo.txt 2>&1; echo "demo rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
tail -8 $OUT/demo.txt >> $OUT/log.txt
PMI_SIZE=2 build/cuda/stage1 --preset tiny --steps 1 --quiet > /tmp/s.txt 2>&1; echo "singleton with PMI_SIZE=2: rc=$? $(head -c 200 /tmp/s.txt)" >> $OUT/log.txt
mpirun -n 2 build/cuda/stage1 --preset tiny --steps 1 --quiet > /tmp/s.txt 2>&1; echo "mpirun -n 2: rc=$? $(tail -1 /tmp/s.txt | head -c 100)" >> $OUT/log.txt
PARTS="loud report mixed integration" PARALLEL=1 MAX_WORLD=2 MPIEXEC=mpirun LOGDIR=/tmp/k2s timeout -s TERM $((560-SECONDS+T0)) scripts/test-gpu.sh > /tmp/k2_suite.txt 2>&1
echo "suite rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|unfinished|failed" /tmp/k2_suite.txt | head -60 >> $OUT/log.txt
gzip -c /tmp/k2_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/k2s.tgz k2s 2>/dev/null
cat $OUT/log.txt
