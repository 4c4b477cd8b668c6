#!/bin/bash
# session 49 call 2 (4 x H200): does a deeper prefetch let ZeRO-3 keep the copy-engine gathers' gain at N = 4?
# lab-1b ZeRO-3 N = 4, 20 steps, GEMM table: default / knob (ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2) x --prefetch 1 / 2,
# order A B C D D C B A; then the fill model's ZeRO-3 N = 4 (10 steps): knob p2, default p1, knob p2;
# then the checkpoint tests the first call did not reach (N <= 4), in the time left.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/p1; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total,driver_version --format=csv >> $S
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
run() { local name=$1 shape=$2 pf=$3 lim=$4; shift 4
  env "$@" timeout $lim mpirun --bind-to none -n 4 build/cuda/stage3 $shape --prefetch $pf --quiet --check --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE '[0-9.]+ TFLOP/s' $R/$name.txt | tail -1) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) $(grep -m1 -oE 'device used \(end\)[^|]*' $R/$name.txt) at $((SECONDS-T0)) s" >> $S; }
LAB="--layers 8 --dim 4096 --batch 8192 --steps 20"
WIN="ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2"
i=0; for c in A B C D D C B A; do i=$((i+1))
  case $c in A) run lab_def_p1_$i "$LAB" 1 60 ZL_NCCL_WINDOWS=0 ;; B) run lab_win_p1_$i "$LAB" 1 60 $WIN ;;
             C) run lab_win_p2_$i "$LAB" 2 60 $WIN ;; D) run lab_def_p2_$i "$LAB" 2 60 ZL_NCCL_WINDOWS=0 ;; esac; done
FILL="--layers 14 --dim 8192 --batch 1024 --steps 10"
unset ZL_GEMM_TABLE
[ $((SECONDS-T0)) -lt 330 ] && run fill_win_p2_1 "$FILL" 2 80 $WIN
[ $((SECONDS-T0)) -lt 380 ] && run fill_def_p1_2 "$FILL" 1 80 ZL_NCCL_WINDOWS=0
[ $((SECONDS-T0)) -lt 430 ] && run fill_win_p2_3 "$FILL" 2 80 $WIN
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_REFERENCE_BUILD=build/cpu ZL_MAX_WORLD=4 ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
t=$SECONDS; timeout $((560-SECONDS+T0)) build/gpu-tests/test_ckpt -j1 --filter '@(resume/stage3*|resume/the_*|save_dir/*|zlckpt/*)' > $R/ckpt.txt 2>&1
echo "ckpt (resume/stage3*, resume/the_*, save_dir, zlckpt) rc=$? $((SECONDS-t)) s: $(grep -c '^\[PASS' $R/ckpt.txt) PASS; $(grep Synthesis $R/ckpt.txt)" >> $S
grep -h '^\[FAIL\|Assert' $R/ckpt.txt | head >> $S
cat $S; tar -C /tmp -czf $OUT/p1.tgz p1; cp $S $OUT/
