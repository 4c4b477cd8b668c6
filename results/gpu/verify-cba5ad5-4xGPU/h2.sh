#!/bin/bash
# stop 29 call 2 (4 GPUs): the loud part alone; where host Adam runs on a GPU (early path traces)
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/h2; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_MAX_WORLD=4
( ZL_MPIEXEC="mpirun --oversubscribe" timeout 300 build/gpu-tests/test_loud -j1 > $R/loud.txt 2>&1
  echo "loud rc=$? (ended at $((SECONDS-T0)) s): $(grep -E 'Synthesis' $R/loud.txt)" >> $S ) &
M="mpirun --oversubscribe --bind-to none"
for s in 2 3; do for L in 2 4 8; do for extra in "--loss-scale 1024" ""; do for i in 1 2; do
  t=$R/tr_s${s}_L${L}_${extra:+static}_$i.json
  timeout 60 $M -n 2 build/cuda/stage$s --layers $L --steps 3 --offload $extra --trace $t --quiet > $t.log 2>&1 || echo "rc=$? $t" >> $S
  python3 lease/early.py $t >> $S 2>&1
done; done; done; done
echo "traces done at $((SECONDS-T0)) s" >> $S
ZL_MPIEXEC="$M" timeout 200 build/gpu-tests/test_offload -j1 --filter 'early/*' > $R/offload_early.txt 2>&1
echo "offload early rc=$? (ended at $((SECONDS-T0)) s): $(grep -E 'Synthesis' $R/offload_early.txt)" >> $S
grep -h '^\[FAIL' $R/*.txt >> $S
wait; cat $S; tar -C /tmp -czf $OUT/h2.tgz h2; cp $S $OUT/
