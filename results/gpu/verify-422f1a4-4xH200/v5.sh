#!/bin/bash
# session 51 call 6 (2 x H200): test_report's allgather_engine tests now read NVLink from nvidia-smi
# (the first GPU of CUDA_VISIBLE_DEVICES) instead of assuming it: run them on GPUs 1,0 (2 x H200).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt > $OUT/summary.txt
nvidia-smi nvlink --status -i 1 | head -3 >> $OUT/summary.txt
CUDA_VISIBLE_DEVICES=1,0 CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_MAX_WORLD=2 ZL_MPIEXEC="mpirun --oversubscribe --bind-to none" \
  timeout 120 build/gpu-tests/test_report -j1 --filter '*/allgather_engine*' > /tmp/engine.txt 2>&1
echo "engine tests rc=$?" >> $OUT/summary.txt
grep -E '^\[(PASS|FAIL)|^\[----\].*[Aa]ssert|Synthesis' /tmp/engine.txt >> $OUT/summary.txt
cat $OUT/summary.txt
