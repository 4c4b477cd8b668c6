#!/bin/bash
# Prepared at stop 33, run at stop 34 (f01bb55, 4 × H200; README.md): the copy-engine reduce-scatter in pieces (ZL_CE_RS_PIECES) and/or
# its sums on a stream of the greatest priority (ZL_CE_RS_PRIO), against the windows/zero-CTA
# baseline, fill ZeRO-2 at N = 4 (where the one-piece prototype lost 4.5 %) and lab-1b.
# Apply first, on the commit it was made on or a later one that still takes it:
#   git apply results/gpu/speed/ce-pieces-h200/ce-pieces.patch
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
R=/tmp/t4; mkdir -p $R; T0=$SECONDS
LAB="--layers 8 --dim 4096 --batch 8192"; FILL="--layers 14 --dim 8192 --batch 1024"
run() { # run TAG N PROG MODEL ENV...
  local tag=$1 n=$2 prog=$3 model=$4; shift 4
  local shape=$LAB; [ $model = fill ] && shape=$FILL
  env "$@" ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 timeout 100 mpirun -n $n --bind-to none build/cuda/$prog $shape \
     --steps 20 --quiet --json $R/${model}_${prog}_N${n}_$tag.json > $R/${model}_${prog}_N${n}_$tag.txt 2>&1
  echo "$tag $model $prog N=$n rc=$? ($((SECONDS-T0)) s) $(grep -h 'ce-rs check' $R/${model}_${prog}_N${n}_$tag.txt | grep -v ' 0 of' | head -2)"
}
declare -A V=([base]="ZL_CE_RS=0" [p1]="ZL_CE_RS=1" [p1hi]="ZL_CE_RS=1 ZL_CE_RS_PRIO=1"
              [p4]="ZL_CE_RS=1 ZL_CE_RS_PIECES=4" [p4hi]="ZL_CE_RS=1 ZL_CE_RS_PIECES=4 ZL_CE_RS_PRIO=1"
              [p8hi]="ZL_CE_RS=1 ZL_CE_RS_PIECES=8 ZL_CE_RS_PRIO=1")
for round in 1 2; do
  order="base p1 p1hi p4 p4hi p8hi"; [ $round = 2 ] && order="p8hi p4hi p4 p1hi p1 base"
  for v in $order; do run $v$round 4 stage2 fill ${V[$v]}; done
  for v in base p4hi; do run $v$round 4 stage2 lab ${V[$v]}; done
  [ $((SECONDS-T0)) -gt 520 ] && break
done
python3 - $R <<'PY' | tee $R/summary.txt
import json, glob, os, statistics as st, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); s = j["step_ms"]
    print("%-28s median %.2f  mean %.2f  tflops %.1f  hash %s  exposed %.2f" % (os.path.basename(f)[:-5],
          st.median(s[1:]), j["ms_per_step"], j["tflops_per_gpu"], j["param_hash"], j.get("exposed_comm_ms_per_step") or -1))
PY
tar -C /tmp -czf $OUT/t4.tgz t4; cp $R/summary.txt $OUT/
