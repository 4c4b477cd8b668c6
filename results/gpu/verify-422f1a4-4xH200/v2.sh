#!/bin/bash
# session 51 call 3 (4 x H200): the declined-window check rewritten (NCCL 2.28 hands back its local
# registration's handle, not NULL, where the communicator has no symmetric support): test_report's
# allgather_engine tests, NCCL_WIN_ENABLE=0 among them (GPUs 0,1); stage 2 with NCCL_P2P_DISABLE=1
# by hand (the engine the report names, NCCL's "Init CE" lines); beside them on GPUs 2,3 the ckpt
# tests call 1 did not reach (save_dir's refusals, zlckpt).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
T0=$SECONDS; R=/tmp/v2; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=2
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
LIM=${LIM:-200}
part() { local name=$1 gpus=$2; shift 2; local t=$SECONDS
  CUDA_VISIBLE_DEVICES=$gpus timeout $((LIM-SECONDS+T0)) "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name (GPUs $gpus) rc=$rc $((SECONDS-t)) s (ended at $((SECONDS-T0)) s): $(grep -c '^\[PASS' $R/$name.txt) PASS lines; $(grep -E 'Synthesis' $R/$name.txt | tail -1)" >> $S; }
byhand() { local name=$1; shift; mkdir -p $R/$name
  env "$@" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL NCCL_DEBUG_FILE=$R/$name/r.%p.log CUDA_VISIBLE_DEVICES=0,1 \
    timeout 60 mpirun --bind-to none -n 2 build/cuda/stage2 --steps 3 --check --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name ($*) rc=$? engine $(grep -oE '"allgather_engine":\s*"[a-z_]+"' $R/$name.json | grep -oE '[a-z_]+"$') Init CE lines $(cat $R/$name/*.log | grep -c 'Init CE') $(grep -m1 -h 'Symmetric\|symmetric' $R/$name/*.log | cut -c1-160)" >> $S; }
( part report_engine 0,1 build/gpu-tests/test_report -j1 --filter '*/allgather_engine*'
  byhand p2p_disabled NCCL_P2P_DISABLE=1
  byhand win_disabled NCCL_WIN_ENABLE=0
  byhand by_default ZL_X=1 ) &
( part ckpt_zlckpt 2,3 build/gpu-tests/test_ckpt -j1 --filter 'zlckpt/*'
  part ckpt_unwritable 2,3 build/gpu-tests/test_ckpt -j1 --filter 'save_dir/unwritable*' ) &
wait
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -40 >> $S
grep -h 'allgather_engine\|^\[RUN' $R/report_engine.txt $R/ckpt_*.txt | head -30 >> $S
cat $S; tar -C /tmp -czf $OUT/v2.tgz v2; cp $S $OUT/
