#!/bin/bash
# session 38 call 5 (4 GPUs): GEMM tables on GPUs. (1) test-gpu's benches part (its table round
# trip: bench --table, the trainer with ZL_GEMM_TABLE, every entry taken, param_hash unchanged);
# (2) lab-1b's table from bench_gemm_tune --sustain 0.5 on each GPU at once; (3) ZeRO-2 N = 4 and
# ZeRO-1 N = 2 with GPU 0's table and without, 20 steps, each pair back to back.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
PARTS=benches LOGDIR=/tmp/x5/suite MPIEXEC=mpirun MAX_WORLD=4 timeout 90 scripts/test-gpu.sh > /tmp/x5_suite.txt 2>&1
echo "benches part rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "rc=|round trip|FAIL|PASSED" /tmp/x5_suite.txt >> $OUT/log.txt
for g in 0 1 2 3; do
  CUDA_VISIBLE_DEVICES=$g timeout 120 build/cuda/bench_gemm_tune --reps 20 --rounds 2 --warmup 5 --sustain 0.5 --table $OUT/table_gpu$g.json > /tmp/x5_tune$g.txt 2>&1 &
done
wait
echo "tables after $((SECONDS-T0)) s" >> $OUT/log.txt
grep -h "^table:" /tmp/x5_tune*.txt >> $OUT/log.txt
L="--layers 8 --dim 4096 --batch 8192 --steps 20 --quiet"
one() { # $1 N, $2 stage, $3 table path or ""
  local f=/tmp/x5_$2_N$1_$([ -n "$3" ] && echo table || echo first)
  ZL_GEMM_TABLE=$3 mpirun --bind-to none -x ZL_GEMM_TABLE -n $1 build/cuda/$2 $L --json $f.json > $f.txt 2>&1
  echo "N=$1 $2 table=${3:-none} rc=$? $(python3 -c "
import json; j=json.load(open('$f.json')); t=j['run']['gemm_table']
print('median %.2f ms mean %.2f hash %s table %s' % (j['ms_per_step_median'], j['ms_per_step'], j['param_hash'], t and (t['used'], t['entries'], t['in_use'])))")" >> $OUT/log.txt
  grep -h "ZL_GEMM_TABLE" $f.txt | sort | uniq -c | head -5 >> $OUT/log.txt
}
one 4 stage2 ""; one 4 stage2 $OUT/table_gpu0.json; one 2 stage1 $OUT/table_gpu0.json; one 2 stage1 ""
echo "wall $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/x5.tgz x5_suite.txt $(cd /tmp && ls x5_tune*.txt x5_stage*.txt 2>/dev/null)
cat $OUT/log.txt
