#!/bin/bash
# stop 25 call 1 (2 GPUs): ZeRO-3's gathers on their own stream and communicator (lease-only patch
# lease/comm2.patch, ZLX_COMM2=1), fill + lab-1b at N = 2; then HEAD's kernels, loud, report parts.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
rm -rf /tmp/var && cp -a . /tmp/var && (cd /tmp/var && git apply lease/comm2.patch && make -j32 GIT_COMMIT=$(cat lease/commit)-comm2 build/cuda/stage3 > /tmp/var.log 2>&1) || { tail -20 /tmp/var.log; exit 1; }
echo "variant built at $((SECONDS-T0)) s"
R=/tmp/c2s; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt
FILL="--layers 14 --dim 8192 --batch 1024 --steps 6 --no-param-hash"
run() { local name=$1 v=$2 z=$3; shift 3
  local bin=build/cuda/stage3 pre="env"; [ $v = 1 ] && bin=/tmp/var/build/cuda/stage3 && pre="$pre ZLX_COMM2=1"
  [ $z = 1 ] && pre="$pre ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2"
  timeout 90 mpirun -n 2 $pre $bin --quiet --check --json $R/$name.json "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'ms=[0-9.]*\|tflops=[0-9.]*\|hash=[0-9a-f]*' | tr '\n' ' ') $(grep -m1 -o '(median [0-9.]*)' $R/$name.txt) at $((SECONDS-T0)) s" | tee -a $S; }
for r in 1 2; do for z in 0 1; do for v in 0 1; do run fill_s3_N2_comm2${v}_zcta${z}_$r $v $z $FILL; done; done; done
for v in 0 1; do run lab1b_s3_N2_comm2${v} $v 0 --preset lab-1b; done
for v in 0 1; do run fill_s3_N2_comm2${v}_trace $v 0 $FILL --trace $R/trace_comm2$v.json; python3 lease/tsum.py $R/trace_comm2$v.json >> $S 2>&1; gzip $R/trace_comm2$v.json; done
for v in 0 1; do run fill_s3_N2_comm2${v}_prefetch2 $v 0 $FILL --prefetch 2; done
cat $S
MPIEXEC=mpirun PARTS="kernels loud report" timeout $((570-SECONDS+T0)) scripts/test-gpu.sh > $R/kernels-loud-report.txt 2>&1; echo "kernels+loud+report rc=$? at $((SECONDS-T0)) s"
grep -E "ALL PASSED|checks failed|Synthesis|FAIL|^== " $R/kernels-loud-report.txt | tail -12
cd /tmp && tar czf $OUT/c2s.tgz c2s
