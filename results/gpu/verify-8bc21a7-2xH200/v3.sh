#!/bin/bash
# stop 36 call 3 (2 GPUs): the whole GPU suite at HEAD (N <= 2), parts side by side, each part's
# end announced; then lab-1b's param_hash against the tenth peer lease's runs at fa60d18 (the GEMM
# plans' alignment class changed) and plain vs --checkpoint-activations on odd shapes.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/suite.log
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv >> $OUT/suite.log
T0=$SECONDS
LOGDIR=/tmp/vlogs MPIEXEC=mpirun PARALLEL=1 MAX_WORLD=2 timeout ${LIM:-430} scripts/test-gpu.sh >> $OUT/suite.log 2>&1
echo "test-gpu rc=$? wall $((SECONDS-T0)) s" >> $OUT/suite.log
H=$OUT/hashes.txt
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for s in stage0_ddp stage3; do
  echo "$s lab-1b N=2 20 steps (fa60d18: ff4324047a08fcc1): $(mpirun --bind-to none -n 2 build/cuda/$s --layers 8 --dim 4096 --batch 8192 --steps 20 --quiet 2>&1 | grep -o 'hash=[0-9a-f]*\|ms/step.*' | tr '\n' ' ')" >> $H
done
for ck in "" --checkpoint-activations; do
  for s in stage1 stage3; do
    echo "gpt odd $s $ck: $(mpirun --bind-to none -n 2 build/cuda/$s --model gpt --layers 3 --dim 12 --heads 2 --seq 7 --batch 1 --vocab 50 --steps 3 --quiet $ck 2>&1 | grep -o 'hash=[0-9a-f]*' )" >> $H
    echo "mlp odd $s $ck: $(mpirun --bind-to none -n 2 build/cuda/$s --layers 3 --dim 7 --batch 5 --steps 3 --quiet $ck 2>&1 | grep -o 'hash=[0-9a-f]*' )" >> $H
  done
done
cat $H
grep -E "^===|Synthesis|rc=|FAIL|SKIP|UNFINISHED|ended after|ALL PASSED|FAILURES|\(.*: [0-9]+ s\)" $OUT/suite.log | tail -60
grep -h "eps·max\|self-test\|worst" /tmp/vlogs/kernels.log 2>/dev/null | sort | uniq -c | sort -rn | head -5
tar -C /tmp -czf $OUT/vlogs.tgz vlogs
