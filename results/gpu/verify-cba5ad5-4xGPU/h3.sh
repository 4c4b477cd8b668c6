#!/bin/bash
# stop 29 call 3 (4 GPUs): host Adam's team capped at the chunk count — before/after on small
# units (demo, tiny --offload), where host Adam runs now, then test_offload at N <= 4
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt; T0=$SECONDS
R=/tmp/h3; mkdir -p $R; S=$R/summary.txt; cat /tmp/build.txt >> $S; nvidia-smi -L > $R/machine.txt
rm -rf /tmp/before; cp -a . /tmp/before && (cd /tmp/before && patch -p1 < lease/capbefore.patch > /dev/null && make -j32 GIT_COMMIT=before cuda > /tmp/before.log 2>&1) || { tail /tmp/before.log; exit 1; }
echo "before built at $((SECONDS-T0)) s" >> $S
M="mpirun --oversubscribe --bind-to none"
run() { local name=$1 dir=$2 n=$3 prog=$4; shift 4
  timeout 90 $M -n $n $dir/build/cuda/$prog "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -m1 '^summary:' $R/$name.txt | grep -o 'ms=[0-9.]*\|hash=[0-9a-f]*' | tr '\n' ' ')" >> $S; }
for i in 1 2; do for p in stage2 stage3; do for preset in demo tiny; do
  run ${preset}_${p}_before_$i /tmp/before 2 $p --preset $preset --steps 20 --offload --quiet
  run ${preset}_${p}_after_$i . 2 $p --preset $preset --steps 20 --offload --quiet
  run ${preset}_${p}_device_$i . 2 $p --preset $preset --steps 20 --quiet
done; done; done
echo "timings done at $((SECONDS-T0)) s" >> $S
for s in 2 3; do for extra in "--loss-scale 1024" ""; do for i in 1 2; do
  t=$R/tr_s${s}_L8_${extra:+static}_$i.json
  timeout 60 $M -n 2 build/cuda/stage$s --layers 8 --steps 3 --offload $extra --trace $t --quiet > $t.log 2>&1 || echo "rc=$? $t" >> $S
  python3 lease/early.py $t >> $S 2>&1
  python3 -c "
import json,sys;ev=[e for e in json.load(open('$t'))['traceEvents'] if e.get('ph')=='X' and e.get('pid')==0 and e['name'].startswith('optimizer')]
d=sorted(e['dur'] for e in ev);print('  host Adam span us: min %.0f median %.0f max %.0f' % (d[0], d[len(d)//2], d[-1]))" >> $S
done; done; done
echo "traces done at $((SECONDS-T0)) s" >> $S
export CRITERION_VERBOSITY_LEVEL=1 ZL_BUILD=build/cuda ZL_MAX_WORLD=4
ZL_MPIEXEC="$M" timeout $((540-SECONDS+T0)) build/gpu-tests/test_offload -j1 > $R/offload.txt 2>&1
echo "offload rc=$? (ended at $((SECONDS-T0)) s): $(grep -E 'Synthesis' $R/offload.txt)" >> $S
grep -h '^\[FAIL' $R/offload.txt >> $S
cat $S; tar -C /tmp -czf $OUT/h3.tgz h3; cp $S $OUT/
