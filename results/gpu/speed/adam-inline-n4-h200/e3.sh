#!/bin/bash
# stop 26 call 3 (4 GPUs): (1) fill ZeRO-2 N = 4 with zero-CTA gathers, Adam beside the forward vs
# in line on the compute stream (lease/adamcompute.patch), traced: each part's time alone in this
# lease; (2) the PyTorch peer at N = 2, 4 (bench-gpu.sh lab-1b); (3) test-gpu's offload part at HEAD.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
rm -rf /tmp/var && cp -a . /tmp/var && (cd /tmp/var && git apply lease/adamcompute.patch && make -j32 GIT_COMMIT=$(cat lease/commit)-adamcompute build/cuda/stage2 > /tmp/var.log 2>&1) || { tail -20 /tmp/var.log; exit 1; }
R=/tmp/e3; mkdir -p $R; S=$R/summary.txt; nvidia-smi -L | tee $R/machine.txt
FILL="--layers 14 --dim 8192 --batch 1024 --steps 6 --no-param-hash"
for v in 0 1 0 1; do
  bin=build/cuda/stage2; e=""; [ $v = 1 ] && bin=/tmp/var/build/cuda/stage2 && e="ZL_ADAM_ON_COMPUTE=1"
  n=fill_s2_N4_w1p2_inline${v}_$SECONDS
  timeout 90 mpirun -n 4 env ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 $e $bin $FILL --quiet --check --json $R/$n.json --trace $R/$n.trace.json > $R/$n.txt 2>&1
  echo "$n rc=$? $(grep -m1 '^summary:' $R/$n.txt | grep -o 'ms=[0-9.]*\|tflops=[0-9.]*' | tr '\n' ' ') $(grep -m1 -o '(median [0-9.]*)' $R/$n.txt) $(grep -m1 -o 'exposed communication [0-9.]* ms' $R/$n.txt)" | tee -a $S
  python3 lease/tsum.py $R/$n.trace.json >> $S 2>&1; gzip $R/$n.trace.json
done
echo "fill done at $((SECONDS-T0)) s" | tee -a $S
OUT=$R/peer timeout 280 scripts/bench-gpu.sh lab-1b > $R/peer.txt 2>&1; echo "peer rc=$? at $((SECONDS-T0)) s" | tee -a $S
MPIEXEC=mpirun PARTS="offload" timeout $((540-SECONDS+T0)) scripts/test-gpu.sh > $R/offload.txt 2>&1; echo "offload rc=$? at $((SECONDS-T0)) s" | tee -a $S
grep -E "Synthesis|FAIL|ALL PASSED|checks failed" $R/offload.txt | tail -5 | tee -a $S
