#!/bin/bash
# session 49 call 5 (4 x H200): the synthetic batch 8 columns a thread (data_generate8_kernel) against
# the one-column kernel before it (lease/before/: HEAD's kernels_cuda.cu and zl_math.h, built beside).
# The kernels' GPU checks (fp16 and bf16, dims divisible by 8 and not); then lab-1b, 20 steps, GEMM
# table, --check: ZeRO-1 N = 4 and DDP N = 4, each A B B A (A = before, B = after).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/d1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
rm -rf /tmp/before && mkdir /tmp/before && tar --exclude=./build --exclude=./.git --exclude=./results -cf - . | tar -C /tmp/before -xf -
cp lease/before/kernels_cuda.cu /tmp/before/kernels/cuda/; cp lease/before/zl_math.h /tmp/before/kernels/
(cd /tmp/before && make -j32 MPICC=mpicc GIT_COMMIT=before cuda > /tmp/before.log 2>&1) || { tail -20 /tmp/before.log >> $S; cat $S; exit 1; }
echo "before built at $((SECONDS-T0)) s" >> $S
build/cuda/test_kernels_gpu > $R/kernels.txt 2>&1; echo "test_kernels_gpu rc=$? $(grep -c 'zl_data_generate' $R/kernels.txt) data lines; $(grep -E 'ALL PASSED|FAILED' $R/kernels.txt | tail -1)" >> $S
grep 'zl_data_generate' $R/kernels.txt | head -20 >> $S
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
run() { local name=$1 dir=$2 prog=$3 n=$4
  timeout 60 mpirun --bind-to none -n $n $dir/build/cuda/$prog --preset lab-1b --steps 20 --quiet --check --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) load_batch $(python3 -c "import json;print(round(json.load(open('$R/$name.json'))['ranks'][0]['timeline']['phase_ms_per_step']['load_batch'],3))" 2>/dev/null) ms at $((SECONDS-T0)) s" >> $S; }
i=0; for p in stage1 stage0_ddp; do for c in A B B A; do i=$((i+1))
  if [ $c = A ]; then run ${p}_N4_before_$i /tmp/before $p 4; else run ${p}_N4_after_$i . $p 4; fi; done; done
[ $((SECONDS-T0)) -lt 250 ] && run stage0_ddp_N1_after_9 . stage0_ddp 1
[ $((SECONDS-T0)) -lt 265 ] && run stage0_ddp_N1_before_10 /tmp/before stage0_ddp 1
cat $S; tar -C /tmp -czf $OUT/d1.tgz d1; cp $S $OUT/
