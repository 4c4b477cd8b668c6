#!/bin/bash
# session 51 call 5 (4 x H200): compute-sanitizer memcheck at N = 2 over the rewritten window check,
# both ways it goes: stage 2 with symmetric windows (by default), stage 2 gpt-tiny with NCCL_WIN_ENABLE=0
# and stage 1 with NCCL_P2P_DISABLE=1 (a window NCCL takes as a plain registration), side by side.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
T0=$SECONDS; R=/tmp/v4; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
san() { local name=$1 gpus=$2 prog=$3 preset=$4; shift 4
  env "$@" CUDA_VISIBLE_DEVICES=$gpus timeout 200 mpirun --oversubscribe --bind-to none -n 2 compute-sanitizer --tool memcheck \
    --report-api-errors no --error-exitcode 9 build/cuda/$prog --preset $preset --steps 2 --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name ($prog $preset $*) rc=$? $(grep -c 'ERROR SUMMARY: 0 errors' $R/$name.txt) clean summaries, engine $(grep -oE '"allgather_engine":\s*"[a-z_]+"' $R/$name.json | grep -oE '[a-z_]+"$') (ended at $((SECONDS-T0)) s)" >> $S; }
san default 0,1 stage2 tiny ZL_X=1 &
san win_disabled 2,3 stage2 gpt-tiny NCCL_WIN_ENABLE=0 &
wait
san p2p_disabled 0,1 stage1 tiny NCCL_P2P_DISABLE=1
cat $S; tar -C /tmp -czf $OUT/v4.tgz v4; cp $S $OUT/
