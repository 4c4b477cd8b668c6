#!/bin/bash
# session 42 call 2: the held-rank join-wait test alone (it read 176 of 200 ms once in the whole suite at
# d31e46f): each stage held 1:200 at N = 2, three rounds, HEAD (trace anchors) and HEAD~1's trace (no anchors)
# alternating; then the test itself alone. On H100: the peer at N = 2 after.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
T0=$SECONDS
rm -rf /tmp/old && mkdir /tmp/old && tar --exclude=./build --exclude=./results --exclude=./.git --exclude=./.deps -cf - . | tar -C /tmp/old -xf -
cp lease/old/trace.c lease/old/trace.h lease/old/comm.c /tmp/old/common/
(cd /tmp/old && make -j32 MPICC=mpicc GIT_COMMIT=old cuda > /tmp/old.log 2>&1) || { tail -20 /tmp/old.log >> $OUT/log.txt; }
echo "old build $((SECONDS-T0)) s: $(ls /tmp/old/build/cuda/ 2>&1 | tr '\n' ' ')" >> $OUT/log.txt
for round in 1 2 3; do
  for b in build/cuda /tmp/old/build/cuda; do
    for s in stage0_ddp stage1 stage2 stage3; do
      ZL_TEST_HOLD_RANK=1:200 mpirun -n 2 $b/$s --layers 3 --dim 24 --steps 4 --quiet --json /tmp/h.json > /dev/null 2>/tmp/h.err || { echo "$b $s rc=$?"; cat /tmp/h.err; }
      python3 - "$round" "$b" "$s" >> $OUT/log.txt <<'PY'
import json,sys
j=json.load(open('/tmp/h.json'));r=[x['timeline'] for x in j['ranks']]
print(sys.argv[1], sys.argv[2][:9], sys.argv[3], 'wait0 %.1f late1 %.1f exposed0 %.1f after0 %.2f off1 %.1f' % (r[0]['join_wait_ms_per_step'], r[1]['late_join_ms_per_step'], r[0]['exposed_comm_ms_per_step'], r[0]['exposed_after_join_ms_per_step'], r[1]['clock_offset_ms']))
PY
    done
  done
done
echo "rounds done $((SECONDS-T0)) s" >> $OUT/log.txt
for i in 1 2; do ZL_BUILD=build/cuda ZL_MPIEXEC=mpirun ZL_MAX_WORLD=2 build/gpu-tests/test_report -j1 --filter 'timeline/join*' 2>&1 | grep -v '^\[----\] *$' | tail -8 >> $OUT/log.txt; done
ZL_BUILD=build/cuda ZL_MPIEXEC=mpirun ZL_MAX_WORLD=2 build/gpu-tests/test_report -j1 --filter 'trace/spans_keep*' 2>&1 | tail -3 >> $OUT/log.txt
echo "tests done $((SECONDS-T0)) s" >> $OUT/log.txt
if nvidia-smi -L | head -1 | grep -q H100; then
  NS=2 STEPS=20 OUT=/tmp/j2_peer_N2 timeout $((560-SECONDS+T0)) scripts/bench-gpu.sh lab-1b > /tmp/j2_N2.log 2>&1
  echo "peer N=2 rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/j2_N2.log $OUT/peer_N2.log
  tar -C /tmp -czf $OUT/j2_N2.tgz j2_peer_N2
fi
cat $OUT/log.txt
