#!/bin/bash
# session 48 call 3: at HEAD (stage0_ddp's per-unit grads_synced events): DDP on lab-1b, 20 steps,
# --check, at N = 2 (and 4 with 4 GPUs) for param_hash and the median step; then the GPU suite's
# parts that launch training, by default (no ZL_ knob), side by side: kernels, integration, gpt,
# offload, mixed, report. PARALLEL=1, MAX_WORLD = the GPUs here.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS; G=$(nvidia-smi -L | grep -c ^GPU)
for n in 2 4; do
  [ $n -le $G ] || continue
  timeout 60 mpirun --bind-to none -n $n build/cuda/stage0_ddp --preset lab-1b --steps 20 --quiet --check --json /tmp/ddp_N$n.json > /tmp/ddp_N$n.txt 2>&1
  echo "ddp N=$n rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' /tmp/ddp_N$n.txt) $(grep -oE 'param_hash [0-9a-f]+' /tmp/ddp_N$n.txt) at $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/ddp_N$n.txt $OUT/
done
PARTS="kernels integration gpt offload mixed report" PARALLEL=1 MAX_WORLD=$G MPIEXEC=mpirun LOGDIR=/tmp/q3s \
  timeout -s TERM $((500-SECONDS+T0)) scripts/test-gpu.sh > /tmp/q3_suite.txt 2>&1
echo "suite MAX_WORLD=$G rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "^\(|Synthesis|FAIL|SKIPPED|ended|UNFINISHED|Xid|stopped|failed" /tmp/q3_suite.txt | head -80 >> $OUT/log.txt
gzip -c /tmp/q3_suite.txt > $OUT/suite.txt.gz
tar -C /tmp -czf $OUT/q3s.tgz q3s
cat $OUT/log.txt
