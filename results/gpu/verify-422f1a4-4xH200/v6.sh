#!/bin/bash
# session 51 call 7 (2 x H200), after the reread: the engine tests find rank 0's GPU for nvidia-smi by
# the PCI bus id the report gives (one helper with the clock tests, which now also read the index):
# both sets, on GPUs 1,0.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt > $OUT/summary.txt
nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader >> $OUT/summary.txt
export CUDA_VISIBLE_DEVICES=1,0 CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_MAX_WORLD=2 ZL_MPIEXEC="mpirun --oversubscribe --bind-to none"
for f in '*/allgather_engine*' 'clocks/*'; do
  timeout 100 build/gpu-tests/test_report -j1 --filter "$f" > /tmp/t.txt 2>&1
  echo "$f rc=$?" >> $OUT/summary.txt
  grep -E '^\[(PASS|FAIL)|^\[----\].*[Aa]ssert|Synthesis' /tmp/t.txt >> $OUT/summary.txt
done
cat $OUT/summary.txt
