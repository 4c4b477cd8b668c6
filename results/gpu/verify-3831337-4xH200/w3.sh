#!/bin/bash
# stop 37 call 3 (4 GPUs): (1) a side-by-side suite stopped after 45 s while its MPI tests run:
# nothing of it may be left (ps, nvidia-smi); (2) lab-1b at N = 4 and 2, every stage, 20 steps,
# two rounds alternating: HEAD's times and hashes on a clean machine.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
PARTS="integration offload" LOGDIR=/tmp/stoplogs MPIEXEC=mpirun PARALLEL=1 MAX_WORLD=2 timeout 45 scripts/test-gpu.sh > /tmp/stop.txt 2>&1
echo "stopped suite rc=$?" >> $OUT/log.txt
grep -E "stopped after|ending|UNFINISHED|FAILURES" /tmp/stop.txt >> $OUT/log.txt
sleep 1
echo "left after the stop: $(ps -eo pid,pgid,args | grep -E 'build/(cuda|gpu-tests)/|mpirun|orted|prterun' | grep -v grep | wc -l) processes" >> $OUT/log.txt
ps -eo pid,pgid,etimes,args | grep -E 'build/(cuda|gpu-tests)/|mpirun|orted' | grep -v grep | head >> $OUT/log.txt
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv >> $OUT/log.txt
for round in 1 2; do
  for n in 4 2; do
    for s in stage0_ddp stage1 stage2 stage3; do
      echo "r$round N=$n $s: $(mpirun --bind-to none -n $n build/cuda/$s --layers 8 --dim 4096 --batch 8192 --steps 20 --quiet 2>&1 | grep -o 'median [0-9.]*)\|param_hash [0-9a-f]*' | tr '\n' ' ')" >> $OUT/log.txt
    done
  done
done
cat $OUT/log.txt
