#!/bin/bash
# session 41 call 2 (1 GPU): the benches part again (its GEMM-table round trip failed in call 1 on
# 2 x H200 with the error unseen; stderr is now kept apart), twice, and the kernels part once.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
T0=$SECONDS
for i in 1 2; do
  PARTS="benches" MAX_WORLD=1 MPIEXEC=mpirun timeout -s TERM 200 scripts/test-gpu.sh > /tmp/i2_b$i.txt 2>&1
  echo "benches $i rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
  cp /tmp/i2_b$i.txt $OUT/
done
PARTS="kernels" MAX_WORLD=1 MPIEXEC=mpirun timeout -s TERM 120 scripts/test-gpu.sh > /tmp/i2_k.txt 2>&1
echo "kernels rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
tail -3 /tmp/i2_k.txt >> $OUT/log.txt
grep -A12 "round trip" $OUT/i2_b*.txt
cat $OUT/log.txt
