#!/bin/bash
# session 40 call 3 (1 × H100 asked): lab-1b's GEMM table for H100 (bench_gemm_tune --sustain 0.5),
# then stage0_ddp at N = 1 without and with it, alternating (A B A B), then bench-gpu.sh lab-1b
# NS=1 with it (zerolab beside the peer on one GPU).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt | tee $OUT/log.txt
export NCCL_NVLS_ENABLE=0
T0=$SECONDS
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,memory.total --format=csv >> $OUT/log.txt
timeout 150 build/cuda/bench_gemm_tune --reps 20 --rounds 2 --warmup 5 --sustain 0.5 --table $OUT/table.json > /tmp/h1_tune.txt 2>&1
echo "table rc=$? after $((SECONDS-T0)) s" >> $OUT/log.txt
grep -h "^table:" /tmp/h1_tune.txt >> $OUT/log.txt
mkdir -p /tmp/h1_ab
for r in 1 2; do
  for t in none table; do
    if [ $t = none ]; then tab=""; else tab=$OUT/table.json; fi
    ZL_GEMM_TABLE=$tab timeout 60 mpirun --bind-to none -n 1 build/cuda/stage0_ddp --layers 8 --dim 4096 --batch 8192 --steps 20 --quiet --json /tmp/h1_ab/${t}_$r.json > /tmp/h1_ab/${t}_$r.txt 2>&1
    echo "ab $t $r rc=$?: $(grep -m1 '^summary:' /tmp/h1_ab/${t}_$r.txt | cut -c1-160) $(grep -m1 -o '(median [0-9.]*)' /tmp/h1_ab/${t}_$r.txt) $(grep -m1 'gemm table' /tmp/h1_ab/${t}_$r.txt)" >> $OUT/log.txt
  done
done
ZL_GEMM_TABLE=$OUT/table.json NS="1" STEPS=20 OUT=/tmp/h1_peer timeout 300 scripts/bench-gpu.sh lab-1b > $OUT/peer.log 2>&1
echo "peer rc=$? $((SECONDS-T0)) s" >> $OUT/log.txt
echo "wall $((SECONDS-T0)) s" >> $OUT/log.txt
tar -C /tmp -czf $OUT/h1.tgz h1_ab h1_peer h1_tune.txt
cat $OUT/log.txt $OUT/peer.log
