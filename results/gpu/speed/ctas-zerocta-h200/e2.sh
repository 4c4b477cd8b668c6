#!/bin/bash
# stop 26 call 2 (4 GPUs): with the gathers on the copy engines (ZL_NCCL_WINDOWS=1
# ZL_NCCL_CTA_POLICY=2) only the reduce-scatters use SMs: cap their CTAs (NCCL_MAX_CTAS) so the
# backward's GEMMs keep more SMs, while the reduce-scatter still hides (it has ~1 ms of slack a unit)
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/e2; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt
FILL="--layers 14 --dim 8192 --batch 1024 --steps 6 --no-param-hash"
# run NAME STAGE N WINDOWS POLICY MAXCTAS(0: NCCL's default) ARGS...
run() { local name=$1 p=$2 n=$3 w=$4 pol=$5 c=$6; shift 6
  local e="env ZL_NCCL_WINDOWS=$w ZL_NCCL_CTA_POLICY=$pol"; [ $c != 0 ] && e="$e NCCL_MAX_CTAS=$c"
  timeout 90 mpirun -n $n $e build/cuda/$p --quiet --check --json $R/$name.json "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'ms=[0-9.]*\|tflops=[0-9.]*\|hash=[0-9a-f]*' | tr '\n' ' ') $(grep -m1 -o '(median [0-9.]*)' $R/$name.txt) $(grep -m1 -o 'exposed communication [0-9.]* ms' $R/$name.txt) at $((SECONDS-T0)) s" | tee -a $S; }
for r in 1 2; do for c in 0 16 8 4; do run fill_s2_N4_w1p2_c${c}_$r stage2 4 1 2 $c $FILL; done; run fill_s2_N4_def_$r stage2 4 0 0 0 $FILL; done
for c in 0 16 8 4; do run fill_s1_N4_w1p2_c$c stage1 4 1 2 $c $FILL; done
for c in 0 8; do run fill_s3_N4_def_c$c stage3 4 0 0 $c $FILL; run fill_s3_N4_w1p2_c$c stage3 4 1 2 $c $FILL; done
for c in 0 16 8 4; do run fill_s2_N2_w1p2_c$c stage2 2 1 2 $c $FILL; done
run fill_s3_N2_w1p2_c0 stage3 2 1 2 0 $FILL; run fill_s3_N2_w1p2_c8 stage3 2 1 2 8 $FILL
for c in 0 8; do run lab1b_s2_N4_w1p2_c$c stage2 4 1 2 $c --preset lab-1b; done
run lab1b_s2_N4_def_c8 stage2 4 0 0 8 --preset lab-1b; run lab1b_s2_N4_def_c0 stage2 4 0 0 0 --preset lab-1b
echo "--- traces at $((SECONDS-T0)) s" >> $S
for c in 8 4; do run fill_s2_N4_w1p2_c${c}_trace stage2 4 1 2 $c $FILL --trace $R/trace_s2_c$c.json; python3 lease/tsum.py $R/trace_s2_c$c.json >> $S 2>&1; gzip $R/trace_s2_c$c.json; done
timeout 60 mpirun -n 4 env ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING build/cuda/stage2 --preset lab-1b --steps 2 --quiet > $R/nccl_debug_w1p2.txt 2>&1
echo "debug rc=$?" >> $S
timeout 60 mpirun -n 4 env ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 NCCL_MAX_CTAS=8 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,TUNING build/cuda/stage2 --preset lab-1b --steps 2 --quiet > $R/nccl_debug_w1p2_c8.txt 2>&1
echo "debug c8 rc=$?" >> $S
