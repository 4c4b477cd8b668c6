#!/bin/bash
# session 52 call 1 (2 x H200): --keep-activations (the MLP keeps gelu(h) of every block, as the
# PyTorch peer's autograd does; backward recomputes nothing). Its GPU tests (checkpoint/*, the
# zerocalc matches), then bench-gpu.sh lab-1b at N = 2, 20 steps, by default and with
# ZEROLAB_FLAGS=--keep-activations (each beside the peer), then zerolab alone, alternating, while
# time is left.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/k1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $S
ZL_BUILD=build/cuda ZL_MAX_WORLD=2 ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" \
  timeout 120 build/gpu-tests/test_integration -j1 --filter 'checkpoint/*' > $R/gpu_checkpoint.txt 2>&1
echo "test_integration checkpoint/* rc=$? $(grep Synthesis $R/gpu_checkpoint.txt)" >> $S
ZL_BUILD=build/cuda ZL_MAX_WORLD=2 ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" \
  timeout 60 build/gpu-tests/test_integration -j1 --filter 'zerocalc/*' > $R/gpu_zerocalc.txt 2>&1
echo "test_integration zerocalc/* rc=$? $(grep Synthesis $R/gpu_zerocalc.txt) at $((SECONDS-T0)) s" >> $S
NS=2 STEPS=20 OUT=$R/bench-default timeout 170 scripts/bench-gpu.sh lab-1b > $R/bench-default.log 2>&1
echo "bench default rc=$? at $((SECONDS-T0)) s" >> $S
NS=2 STEPS=20 OUT=$R/bench-keep ZEROLAB_FLAGS=--keep-activations timeout 170 scripts/bench-gpu.sh lab-1b > $R/bench-keep.log 2>&1
echo "bench keep rc=$? at $((SECONDS-T0)) s" >> $S
one() { local prog=$1 flags=$2 name=$3
  timeout 40 mpirun --bind-to none -n 2 build/cuda/$prog --layers 8 --dim 4096 --batch 8192 --steps 20 --quiet $flags --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) used $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ranks"][0]["memory"]["device_used"])' $R/$name.json 2>/dev/null) at $((SECONDS-T0)) s" >> $S; }
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
for p in stage3 stage0_ddp; do
  [ $((SECONDS-T0)) -lt 500 ] && one $p "--keep-activations" ${p}_keep_a
  [ $((SECONDS-T0)) -lt 500 ] && one $p "" ${p}_default_a
done
for f in default keep; do echo "== $f"; tail -8 $R/bench-$f.log; done >> $S
cat $S; tar -C /tmp -czf $OUT/k1.tgz k1; cp $S $R/bench-default.log $R/bench-keep.log $OUT/
