#!/bin/bash
# stop 37 call 1 (4 GPUs): the GPU suite at HEAD (N <= 2) on GPUs 0,1, parts side by side; the
# ckpt part's binary on GPUs 2,3 two tests at a time; then lab-1b at N = 4, 20 steps, every stage:
# param_hash against the tenth peer lease (fa60d18: DDP 4568f9c6f8eb1afb, ZeRO f3c28d8318f3a617).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/suite.log
nvidia-smi --query-gpu=name,power.limit,driver_version --format=csv >> $OUT/suite.log
mkdir -p /tmp/vlogs
T0=$SECONDS
( CUDA_VISIBLE_DEVICES=2,3 ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" ZL_MAX_WORLD=2 \
  timeout 430 build/gpu-tests/test_ckpt -j2 > /tmp/vlogs/ckpt.log 2>&1; echo "ckpt rc=$? after $((SECONDS-T0)) s" >> /tmp/vlogs/ckpt.log ) < /dev/null &
CK=$!
PARTS="kernels integration loud report gpt offload mixed sanitizer reference benches" CUDA_VISIBLE_DEVICES=0,1 \
  LOGDIR=/tmp/vlogs/suite MPIEXEC=mpirun PARALLEL=1 MAX_WORLD=2 timeout 430 scripts/test-gpu.sh >> $OUT/suite.log 2>&1
echo "test-gpu rc=$? wall $((SECONDS-T0)) s" >> $OUT/suite.log
wait $CK
tail -5 /tmp/vlogs/ckpt.log >> $OUT/suite.log
H=$OUT/hashes.txt
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for s in stage0_ddp stage1 stage2 stage3; do
  echo "$s lab-1b N=4 20 steps: $(mpirun --bind-to none -n 4 build/cuda/$s --layers 8 --dim 4096 --batch 8192 --steps 20 --quiet 2>&1 | grep -o 'hash=[0-9a-f]*\|param_hash [0-9a-f]*\|ms/step.*\|median[^,]*' | tr '\n' ' ')" >> $H
done
cat $H
grep -E "^===|Synthesis|rc=|FAIL|SKIP|UNFINISHED|ended after|ALL PASSED|FAILURES|\(.*: [0-9]+ s\)" $OUT/suite.log | tail -60
grep -E "Synthesis|FAIL|rc=" /tmp/vlogs/ckpt.log | tail -5
tar -C /tmp -czf $OUT/vlogs.tgz vlogs
