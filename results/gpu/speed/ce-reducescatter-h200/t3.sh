#!/bin/bash
# stop 33, prototype: the reduce-scatters as copy-engine ncclAlltoAll + a sum in the ring's order
# (ZL_CE_RS=1, lease-only patch) against the same windows/zero-CTA gathers without it, alternating.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
R=/tmp/t3; mkdir -p $R; T0=$SECONDS
LAB="--layers 8 --dim 4096 --batch 8192"; FILL="--layers 14 --dim 8192 --batch 1024"
run() { # run TAG N PROG MODEL ENV...
  local tag=$1 n=$2 prog=$3 model=$4; shift 4
  local shape=$LAB; [ $model = fill ] && shape=$FILL
  env "$@" ZL_NCCL_WINDOWS=1 ZL_NCCL_CTA_POLICY=2 timeout 100 mpirun -n $n --bind-to none build/cuda/$prog $shape \
     --steps 20 --quiet --json $R/${model}_${prog}_N${n}_$tag.json > $R/${model}_${prog}_N${n}_$tag.txt 2>&1
  echo "$tag $model $prog N=$n rc=$? ($((SECONDS-T0)) s) $(grep -h 'ce-rs check' $R/${model}_${prog}_N${n}_$tag.txt | head -4 | tr '\n' ' ')"
}
for round in 1 2; do
  for cfg in "4 stage2 lab" "4 stage2 fill" "4 stage3 lab" "4 stage3 fill" "2 stage2 lab"; do
    set -- $cfg
    if [ $round = 1 ]; then run base$round $1 $2 $3 ZL_CE_RS=0; run ce$round $1 $2 $3 ZL_CE_RS=1
    else run ce$round $1 $2 $3 ZL_CE_RS=1; run base$round $1 $2 $3 ZL_CE_RS=0; fi
    [ $((SECONDS-T0)) -gt 480 ] && break 2
  done
done
python3 - $R <<'PY' | tee $R/summary.txt
import json, glob, os, statistics as st, sys
R = sys.argv[1]
for f in sorted(glob.glob(R + "/*.json")):
    j = json.load(open(f)); s = j["step_ms"]
    print("%-28s median %.2f  mean %.2f  tflops %.1f  hash %s  exposed %.2f  MHz %s" % (os.path.basename(f)[:-5],
          st.median(s[1:]), j["ms_per_step"], j["tflops_per_gpu"], j["param_hash"], j.get("exposed_comm_ms_per_step") or -1,
          j["ranks"][0]["clocks"].get("sm_mhz_median")))
PY
tail -5 $R/lab_stage2_N4_ce1.txt
tar -C /tmp -czf $OUT/t3.tgz t3; cp $R/summary.txt $OUT/
