#!/bin/bash
# stop 25 call 5 (4 GPUs, little budget): test_offload's model checks after the exact JSON numbers;
# ZeRO-3 fill at N = 4 with the gathers on a second communicator (lease/comm2.patch) vs default
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS; R=/tmp/v5; mkdir -p $R; nvidia-smi -L > $R/machine.txt
ZL_BUILD=build/cuda ZL_MPIEXEC="mpirun --bind-to none" ZL_MAX_WORLD=2 timeout 90 build/gpu-tests/test_offload -j1 --filter 'model/*' > $R/offload-model.txt 2>&1
echo "offload model rc=$? at $((SECONDS-T0)) s"; grep -E "Synthesis|FAIL|Assert" $R/offload-model.txt | tail -5
rm -rf /tmp/var && cp -a . /tmp/var && (cd /tmp/var && git apply lease/comm2.patch && make -j32 GIT_COMMIT=$(cat lease/commit)-comm2 build/cuda/stage3 > /tmp/var.log 2>&1) || { tail -20 /tmp/var.log; }
FILL="--layers 14 --dim 8192 --batch 1024 --steps 6 --no-param-hash"
run() { local name=$1 v=$2 z=$3; shift 3
  local bin=build/cuda/stage3 pre="env"; [ $v = 1 ] && bin=/tmp/var/build/cuda/stage3 && pre="$pre ZLX_COMM2=1"
  [ $z = 1 ] && pre="$pre ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2"
  timeout 60 mpirun -n 4 $pre $bin --quiet --check --json $R/$name.json "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'ms=[0-9.]*\|tflops=[0-9.]*' | tr '\n' ' ') $(grep -m1 -o '(median [0-9.]*)' $R/$name.txt) $(grep -m1 -o 'exposed communication [0-9.]* ms' $R/$name.txt) at $((SECONDS-T0)) s" | tee -a $R/summary.txt; }
for z in 0 1; do for v in 0 1; do run fill_s3_N4_comm2${v}_zcta${z} $v $z $FILL; done; done
for v in 0 1; do run fill_s3_N4_comm2${v}_zcta0_b $v 0 $FILL; done
cd /tmp && tar czf $OUT/v5.tgz v5
