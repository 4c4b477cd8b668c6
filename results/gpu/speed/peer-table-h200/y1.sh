#!/bin/bash
# session 39 call 1 (4 × H200): (1) the beta-keyed GEMM plans: the new accum test and the loud table
# test; (2) test-gpu's benches part (the table round trip with the post-review table code);
# (3) lab-1b tables from bench_gemm_tune --sustain on each GPU at once (the 2 % rule); (4) the peer
# beside zerolab with tables/lab-1b-h200.json (bench-gpu.sh lab-1b, NS="4 2", 20 steps); (5) zerolab
# without the table, the same runs, for the A/B in this lease.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MPIEXEC="mpirun --bind-to none" ZL_MAX_WORLD=2 timeout 120 \
  build/gpu-tests/test_integration --filter 'accum/*' -j1 --verbose > /tmp/y1_accum.txt 2>&1
echo "accum tests rc=$? $((SECONDS-T0)) s: $(grep Synthesis /tmp/y1_accum.txt)" >> $OUT/log.txt
ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --bind-to none" ZL_MAX_WORLD=2 timeout 60 \
  build/gpu-tests/test_loud --filter 'flags/*' -j1 > /tmp/y1_loud.txt 2>&1
echo "loud flags rc=$? $((SECONDS-T0)) s: $(grep Synthesis /tmp/y1_loud.txt)" >> $OUT/log.txt
PARTS=benches LOGDIR=/tmp/y1/suite MPIEXEC=mpirun MAX_WORLD=4 timeout 90 scripts/test-gpu.sh > /tmp/y1_suite.txt 2>&1
echo "benches part rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
grep -E "rc=|round trip|FAIL|PASSED" /tmp/y1_suite.txt >> $OUT/log.txt
for g in 0 1 2 3; do
  CUDA_VISIBLE_DEVICES=$g timeout 120 build/cuda/bench_gemm_tune --reps 20 --rounds 2 --warmup 5 --sustain 0.5 --table /tmp/y1_table_gpu$g.json > /tmp/y1_tune$g.txt 2>&1 &
done
wait
echo "tables after $((SECONDS-T0)) s" >> $OUT/log.txt
grep -h "^table:" /tmp/y1_tune*.txt >> $OUT/log.txt
python3 -c "
import json,sys
for g in range(4):
    try: t=json.load(open('/tmp/y1_table_gpu%d.json'%g))
    except Exception as e: print('gpu',g,'no table',e); continue
    print('gpu',g,[(e['what'],round(e['ms'],4),round(e['first_ms'],4)) for e in t['gemms']])
" >> $OUT/log.txt 2>&1
OUT_B=/tmp/y1_peer NS="4 2" STEPS=20 OUT=/tmp/y1_peer timeout 330 scripts/bench-gpu.sh lab-1b > /tmp/y1_peer.log 2>&1
echo "peer rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
cp /tmp/y1_peer.log $OUT/peer.log
L="--layers 8 --dim 4096 --batch 8192 --steps 20 --quiet"
for n in 4 2; do for s in stage0_ddp stage1 stage2 stage3; do
  [ $((SECONDS-T0)) -lt 530 ] || break
  f=/tmp/y1_notable_${s}_N$n
  ZL_GEMM_TABLE= mpirun --bind-to none -x ZL_GEMM_TABLE -n $n build/cuda/$s $L --json $f.json > $f.txt 2>&1
  echo "no table N=$n $s rc=$? $(python3 -c "
import json; j=json.load(open('$f.json'))
print('median %.2f ms mean %.2f hash %s' % (j['ms_per_step_median'], j['ms_per_step'], j['param_hash']))" 2>&1)" >> $OUT/log.txt
done; done
echo "wall $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/y1.tgz y1_accum.txt y1_loud.txt y1_suite.txt y1_peer $(cd /tmp && ls y1_tune*.txt y1_table_gpu*.json y1_notable_* 2>/dev/null)
cat $OUT/log.txt
