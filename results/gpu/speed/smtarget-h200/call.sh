#!/bin/bash
# stop 27 call 1 (4 GPUs): cuBLASLt's SM_COUNT_TARGET (lease/smtarget.patch: ZL_GEMM_SM_TARGET=n) —
# GEMMs sized for the SMs NCCL's reduce-scatter leaves them. Fill model N = 4, zero-CTA gathers;
# lab-1b param_hash; one trace each.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
rm -rf /tmp/var && cp -a . /tmp/var && (cd /tmp/var && git apply lease/smtarget.patch && make -j32 GIT_COMMIT=$(cat lease/commit)-smt build/cuda/stage1 build/cuda/stage2 build/cuda/stage3 > /tmp/var.log 2>&1) || { tail -20 /tmp/var.log; exit 1; }
echo "variant built at $((SECONDS-T0)) s"
R=/tmp/f1; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt
FILL="--layers 14 --dim 8192 --batch 1024 --steps 6 --no-param-hash"
# run NAME STAGE VARIANT(0 base, 1 smt) TARGET ARGS...
run() { local name=$1 p=$2 v=$3 t=$4; shift 4
  local bin=build/cuda/$p; [ $v = 1 ] && bin=/tmp/var/build/cuda/$p
  timeout 90 mpirun -n 4 env ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 ZL_GEMM_SM_TARGET=$t ZL_GEMM_SM_LOG=1 $bin --quiet --check --json $R/$name.json "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'ms=[0-9.]*\|tflops=[0-9.]*\|hash=[0-9a-f]*' | tr '\n' ' ') $(grep -m1 -o '(median [0-9.]*)' $R/$name.txt) $(grep -m1 -o 'exposed communication [0-9.]* ms' $R/$name.txt) at $((SECONDS-T0)) s" | tee -a $S; }
for r in 1 2; do
  run fill_s2_base_$r stage2 0 0 $FILL
  run fill_s2_t108_$r stage2 1 108 $FILL
  run fill_s2_t116_$r stage2 1 116 $FILL
  run fill_s2_t0_$r stage2 1 0 $FILL
done
run fill_s1_base stage1 0 0 $FILL
run fill_s1_t108 stage1 1 108 $FILL
run lab1b_s2_base stage2 0 0 --preset lab-1b
run lab1b_s2_t108 stage2 1 108 --preset lab-1b
run lab1b_s2_t116 stage2 1 116 --preset lab-1b
echo "--- algorithms (rank lines, unique)" >> $S
for n in fill_s2_t0_1 fill_s2_t108_1 fill_s2_t116_1; do echo "## $n" >> $S; grep '^\[sm-target' $R/$n.txt | sort -u >> $S; done
echo "--- traces at $((SECONDS-T0)) s" >> $S
for c in "base 0 0" "t108 1 108"; do set -- $c
  [ $((SECONDS-T0)) -gt 470 ] && break
  run fill_s2_${1}_trace stage2 $2 $3 $FILL --trace $R/trace_s2_$1.json; python3 lease/tsum.py $R/trace_s2_$1.json >> $S 2>&1; gzip $R/trace_s2_$1.json; done
cat $S
cd /tmp && tar czf $OUT/f1.tgz f1
