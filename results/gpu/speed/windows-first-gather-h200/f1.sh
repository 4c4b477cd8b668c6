#!/bin/bash
# session 49 call 3 (4 x H200): where the first windowed all-gather's one-time cost goes (ZeRO-1, lab-1b, N = 4).
# stage1, 5 steps, per-step lines: (a) the knob (windows, zero-CTA: copy engines) with NCCL's INFO log, every
# subsystem, timestamps, a file per rank; (b) the same with --trace; (c) windows under the default CTA policy
# (symmetric kernels, not the copy engines); (d) no knob.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/f1; mkdir -p $R/nccl; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
LAB="--layers 8 --dim 4096 --batch 8192 --steps 5"
run() { local name=$1 extra=$2; shift 2
  env "$@" timeout 60 mpirun --bind-to none -n 4 build/cuda/stage1 $LAB $extra --json $R/$name.json > $R/$name.txt 2>&1
  echo "$name rc=$? steps(ms): $(grep -oE '^step +[0-9]+ .*' $R/$name.txt | grep -oE '[0-9.]+ ms' | tr '\n' ' ') at $((SECONDS-T0)) s" >> $S; }
run a_ce_log "" ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALL \
  NCCL_DEBUG_TIMESTAMP_FORMAT="[%T.%6f] " NCCL_DEBUG_FILE=$R/nccl/a.%h.%p.log
run b_ce_trace "--trace $R/b_trace.json" ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2
run c_symk "" ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=0
run d_default "" ZL_NCCL_WINDOWS=0
run e_ce_again "" ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2
head -3 $R/a_ce_log.txt >> $S; grep -m3 '^step' $R/a_ce_log.txt >> $S
ls $R/nccl | head -3 >> $S; wc -l $R/nccl/* | tail -1 >> $S
cat $S; tar -C /tmp -czf $OUT/f1.tgz f1; cp $S $OUT/
