#!/bin/bash
# stop 26 call 1 (4 GPUs): the gradient buffers as NCCL symmetric windows too (lease/gradwin.patch),
# so the reduce-scatters may take NCCL's symmetric kernels; CTA policy 1 (efficiency) and 2 (zero-CTA)
# vs the default and vs windows on the gathers only. Fill model at N = 4, lab-1b hashes.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
rm -rf /tmp/var && cp -a . /tmp/var && (cd /tmp/var && git apply lease/gradwin.patch && make -j32 GIT_COMMIT=$(cat lease/commit)-gradwin build/cuda/stage1 build/cuda/stage2 build/cuda/stage3 > /tmp/var.log 2>&1) || { tail -20 /tmp/var.log; exit 1; }
echo "variant built at $((SECONDS-T0)) s"
R=/tmp/e1; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt
FILL="--layers 14 --dim 8192 --batch 1024 --steps 6 --no-param-hash"
# run NAME STAGE VARIANT(0 base, 1 gradwin) WINDOWS POLICY ARGS...
run() { local name=$1 p=$2 v=$3 w=$4 pol=$5; shift 5
  local bin=build/cuda/$p; [ $v = 1 ] && bin=/tmp/var/build/cuda/$p
  timeout 90 mpirun -n 4 env ZL_NCCL_WINDOWS=$w ZL_NCCL_CTA_POLICY=$pol $bin --quiet --check --json $R/$name.json "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'ms=[0-9.]*\|tflops=[0-9.]*\|hash=[0-9a-f]*' | tr '\n' ' ') $(grep -m1 -o '(median [0-9.]*)' $R/$name.txt) $(grep -m1 -o 'exposed communication [0-9.]* ms' $R/$name.txt) at $((SECONDS-T0)) s" | tee -a $S; }
for r in 1 2; do
  run fill_s2_base_def_$r stage2 0 0 0 $FILL
  run fill_s2_base_w1p2_$r stage2 0 1 2 $FILL
  run fill_s2_gw_w1p2_$r stage2 1 1 2 $FILL
  run fill_s2_gw_w1p1_$r stage2 1 1 1 $FILL
  run fill_s2_gw_w1p0_$r stage2 1 1 0 $FILL
done
run fill_s1_base_def stage1 0 0 0 $FILL
run fill_s1_base_w1p2 stage1 0 1 2 $FILL
run fill_s1_gw_w1p2 stage1 1 1 2 $FILL
run fill_s1_gw_w1p1 stage1 1 1 1 $FILL
run fill_s3_base_def stage3 0 0 0 $FILL
run fill_s3_gw_w1p1 stage3 1 1 1 $FILL
run fill_s3_gw_w1p0 stage3 1 1 0 $FILL
run lab1b_s2_base_def stage2 0 0 0 --preset lab-1b
run lab1b_s2_gw_w1p1 stage2 1 1 1 --preset lab-1b
run lab1b_s2_gw_w1p2 stage2 1 1 2 --preset lab-1b
run lab1b_s1_gw_w1p2 stage1 1 1 2 --preset lab-1b
run lab1b_s3_gw_w1p1 stage3 1 1 1 --preset lab-1b
echo "--- traces at $((SECONDS-T0)) s" >> $S
for c in "base_w1p2 0 1 2" "gw_w1p1 1 1 1"; do set -- $c
  run fill_s2_${1}_trace stage2 $2 $3 $4 $FILL --trace $R/trace_s2_$1.json; python3 lease/tsum.py $R/trace_s2_$1.json >> $S 2>&1; gzip $R/trace_s2_$1.json; done
timeout 60 mpirun -n 4 env ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL,REG,TUNING /tmp/var/build/cuda/stage2 --preset lab-1b --steps 2 --quiet > $R/nccl_debug_gw_w1p1.txt 2>&1
echo "debug rc=$? $(grep -ci 'symk\|symmetric' $R/nccl_debug_gw_w1p1.txt) sym lines" | tee -a $S
cat $S
cd /tmp && tar czf $OUT/e1.tgz e1
