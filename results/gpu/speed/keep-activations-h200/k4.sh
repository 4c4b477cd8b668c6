#!/bin/bash
# session 52 call 4 (2 x H200): DDP's gradient statistics unit by unit, right after each unit's
# all-reduce (ddp-stats-per-unit.patch, a lease-only patch: the full-gradient pass leaves the
# step's tail), B, against the committed stage0_ddp, A: lab-1b at N = 2, 20 steps, GEMM table,
# --keep-activations A B B A, by default A B; then bench-gpu.sh with --keep-activations at N = 2
# again (a second sample of the 1.15x table in this lease).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/k4; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
git apply results/gpu/speed/keep-activations-h200/ddp-stats-per-unit.patch && make -j32 MPICC=mpicc GIT_COMMIT=$(cat lease/commit)-stats cuda > /tmp/make2.log 2>&1 &&
  cp build/cuda/stage0_ddp /tmp/stage0_B || { tail -20 /tmp/make2.log >> $S; cat $S; exit 1; }
git checkout stage0_ddp.c && make -j32 MPICC=mpicc GIT_COMMIT=$(cat lease/commit) cuda > /tmp/make3.log 2>&1 && cp build/cuda/stage0_ddp /tmp/stage0_A
echo "built A and B at $((SECONDS-T0)) s" >> $S
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
one() { local name=$1 bin=$2; shift 2
  timeout 45 mpirun --bind-to none -n 2 $bin --layers 8 --dim 4096 --batch 8192 --steps 20 --quiet --check --json $R/$name.json "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("norm", j["grad_norm"][-1], "exposed", j.get("exposed_comm_ms_per_step"))' $R/$name.json 2>/dev/null) at $((SECONDS-T0)) s" >> $S; }
one keep_A1 /tmp/stage0_A --keep-activations
one keep_B1 /tmp/stage0_B --keep-activations
one keep_B2 /tmp/stage0_B --keep-activations
one keep_A2 /tmp/stage0_A --keep-activations
one def_A1 /tmp/stage0_A
one def_B1 /tmp/stage0_B
one clip_A1 /tmp/stage0_A --clip-grad-norm 0.5 --steps 6
one clip_B1 /tmp/stage0_B --clip-grad-norm 0.5 --steps 6
unset ZL_GEMM_TABLE
NS=2 STEPS=20 OUT=$R/bench-keep ZEROLAB_FLAGS=--keep-activations timeout 170 scripts/bench-gpu.sh lab-1b > $R/bench-keep.log 2>&1
echo "bench keep rc=$? at $((SECONDS-T0)) s" >> $S
echo "== keep"; tail -8 $R/bench-keep.log >> $S
cat $S; tar -C /tmp -czf $OUT/k4.tgz k4; cp $S $R/bench-keep.log $OUT/
