#!/bin/bash
# session 51 call 1 (4 x H200): the GPU parts not rerun since ZeRO-1/2's all-gathers went to the copy
# engines by default (dfc46ff; the declined-window check 91a5803 and the NVLink gate 63c6eaa never ran):
# report (its allgather_engine tests first), ckpt, gpt, offload, mixed, loud, N <= 2, side by side,
# GPUs 0,1 for report and ckpt, GPUs 2,3 for the rest (own logs, --bind-to none).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
T0=$SECONDS; R=/tmp/v1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
nvidia-smi --query-gpu=name,power.limit,memory.total,driver_version --format=csv >> $S
nvidia-smi nvlink --status -i 0 | head -4 >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=2
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
LIM=${LIM:-540}
part() { local name=$1 gpus=$2; shift 2; local t=$SECONDS
  CUDA_VISIBLE_DEVICES=$gpus timeout $((LIM-SECONDS+T0)) "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name (GPUs $gpus) rc=$rc $((SECONDS-t)) s (ended at $((SECONDS-T0)) s): $(grep -c '^\[PASS' $R/$name.txt) PASS lines; $(grep -E 'Synthesis' $R/$name.txt | tail -1)" >> $S; }
( part report_engine 0,1 build/gpu-tests/test_report -j1 --filter '*/allgather_engine*'
  part report_all 0,1 build/gpu-tests/test_report -j1 ) &
( part ckpt_reshard 0,1 build/gpu-tests/test_ckpt -j1 --filter 'reshard/*' ) &
( part ckpt_rest 0,1 build/gpu-tests/test_ckpt -j1 --filter '!(reshard)/*' ) &
( part gpt 2,3 build/gpu-tests/test_gpt_integration -j1 ) &
( part offload 2,3 build/gpu-tests/test_offload -j1 ) &
( part mixed 2,3 build/gpu-tests/test_mixed -j1 ) &
( part loud 2,3 build/gpu-tests/test_loud -j1 ) &
wait
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -40 >> $S
grep -h 'allgather_engine' $R/report_engine.txt | head -12 >> $S
cat $S; tar -C /tmp -czf $OUT/v1.tgz v1; cp $S $OUT/
