#!/bin/bash
# session 50 call 3 (4 x H200): ZeRO-1/2's all-gathers on the copy engines by default (dfc46ff), set-up paid at start-up.
# (1) lab-1b, 20 steps, GEMM table, --check: new default (A) vs ZL_NCCL_WINDOWS=0 (B, the old default), A B B A for
# stage1 and stage2 at N = 4, A B for stage1 at N = 2; (2) side by side: integration (two halves), report, loud,
# compute-sanitizer memcheck at N = 2 (stage1 tiny, stage2 gpt-tiny: the windows' path).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
T0=$SECONDS; R=/tmp/c1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $S
LAB="--layers 8 --dim 4096 --batch 8192 --steps 20"
run() { local name=$1 n=$2 prog=$3; shift 3
  env ZL_GEMM_TABLE=tables/lab-1b-h200.json "$@" timeout 60 mpirun --bind-to none -n $n build/cuda/$prog $LAB --quiet --check --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(python3 -c 'import json,sys,statistics as st
j=json.load(open(sys.argv[1])); s=j["step_ms"]; r=j["run"]
print(r.get("allgather_engine"), "mean %.2f median %.2f step2 %.1f max(3..) %.1f hash %s device_used %s" % (j["ms_per_step"], j["ms_per_step_median"], s[1], max(s[2:]), j["param_hash"], j["ranks"][0]["memory"].get("device_used")))' $R/$name.json 2>&1 | tail -1) at $((SECONDS-T0)) s" >> $S; }
run s1n4_A1 4 stage1; run s1n4_B1 4 stage1 ZL_NCCL_WINDOWS=0; run s1n4_B2 4 stage1 ZL_NCCL_WINDOWS=0; run s1n4_A2 4 stage1
run s2n4_A1 4 stage2; run s2n4_B1 4 stage2 ZL_NCCL_WINDOWS=0; run s2n4_B2 4 stage2 ZL_NCCL_WINDOWS=0; run s2n4_A2 4 stage2
run s1n2_A1 2 stage1; run s1n2_B1 2 stage1 ZL_NCCL_WINDOWS=0
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4
export ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
LIM=${LIM:-575}
part() { local name=$1; shift; local t=$SECONDS
  timeout $((LIM-SECONDS+T0)) "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS-t)) s (ended at $((SECONDS-T0)) s): $(grep -c '^\[PASS' $R/$name.txt) PASS lines; $(grep -E 'Synthesis' $R/$name.txt | tail -1)" >> $S; }
( part integration_exact build/gpu-tests/test_integration -j1 --filter 'exact/*' ) &
( part integration_rest build/gpu-tests/test_integration -j1 --filter '!(exact)/*' ) &
( part report build/gpu-tests/test_report -j1 ) &
( part loud build/gpu-tests/test_loud -j1 ) &
( for p in "stage1 tiny" "stage2 gpt-tiny"; do set -- $p
    timeout 150 mpirun --oversubscribe --bind-to none -n 2 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 build/cuda/$1 --preset $2 --steps 2 --quiet > $R/san_$1.txt 2>&1
    echo "sanitizer memcheck N=2 $1 $2 rc=$? $(grep -c 'ERROR SUMMARY: 0 errors' $R/san_$1.txt) clean summaries (ended at $((SECONDS-T0)) s)" >> $S; done ) &
wait
grep -h '^\[FAIL\|^\[----\].*[Aa]ssert' $R/*.txt | head -40 >> $S
cat $S; tar -C /tmp -czf $OUT/c1.tgz c1; cp $S $OUT/
