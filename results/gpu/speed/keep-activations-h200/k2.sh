#!/bin/bash
# session 52 call 2 (2 x H200, the lease of k1): ZeRO-3's all-gathers on the copy engines at N = 2
# (ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2, B) against NCCL's kernels (the default, A): lab-1b with
# --keep-activations A B B A, lab-1b by default A B, the fill model (D = 8192, L = 14, 1024 rows,
# 10 steps) A B; 20 steps on lab-1b, --check everywhere.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
R=/tmp/k2; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt > $S; T0=$SECONDS
export ZL_GEMM_TABLE=tables/lab-1b-h200.json
one() { local name=$1 knob=$2 lim=$3; shift 3
  if [ "$knob" = B ]; then export ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2; else unset ZL_NCCL_WINDOWS ZL_NCCL_CTA_POLICY; fi
  timeout $lim mpirun --bind-to none -n 2 build/cuda/stage3 --quiet --check --json $R/$name.json "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -oE '[0-9.]+ ms/step \(median [0-9.]+\)' $R/$name.txt) $(grep -oE '[0-9.]+ TFLOP/s' $R/$name.txt | tail -1) $(grep -oE 'param_hash [0-9a-f]+' $R/$name.txt) $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["run"]["allgather_engine"], "used", j["ranks"][0]["memory"]["device_used"], "exposed", j.get("exposed_comm_ms_per_step"))' $R/$name.json 2>/dev/null) at $((SECONDS-T0)) s" >> $S; }
lab=(--layers 8 --dim 4096 --batch 8192 --steps 20)
one keep_A1 A 45 "${lab[@]}" --keep-activations
one keep_B1 B 45 "${lab[@]}" --keep-activations
one keep_B2 B 45 "${lab[@]}" --keep-activations
one keep_A2 A 45 "${lab[@]}" --keep-activations
one def_A1 A 45 "${lab[@]}"
one def_B1 B 45 "${lab[@]}"
unset ZL_GEMM_TABLE
one fill_A1 A 80 --layers 14 --dim 8192 --batch 1024 --steps 10
one fill_B1 B 80 --layers 14 --dim 8192 --batch 1024 --steps 10
cat $S; tar -C /tmp -czf $OUT/k2.tgz k2; cp $S $OUT/
