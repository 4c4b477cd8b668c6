#!/bin/bash
# stop 33: the same-bits GEMM candidates timed in the run, after the power cap sets in
# (ZL_GEMM_TRIAL=1, a lease-only patch of kernels_cuda.cu) against the default, alternating,
# lab-1b, 40 steps; medians of steps 21-40 (the trial ends by about step 18).
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
R=/tmp/t1; mkdir -p $R; T0=$SECONDS
run() { # run TAG N PROG ENV...
  local tag=$1 n=$2 prog=$3; shift 3
  env "$@" ZL_GEMM_TUNE=log timeout 120 mpirun -n $n --bind-to none build/cuda/$prog --layers 8 --dim 4096 --batch 8192 \
     --steps 40 --quiet --json $R/${prog}_N${n}_$tag.json > $R/${prog}_N${n}_$tag.txt 2>&1
  echo "$tag $prog N=$n rc=$? ($((SECONDS-T0)) s)"
}
for round in 1 2; do
  for cfg in "4 stage1" "4 stage2" "4 stage3" "4 stage0_ddp" "2 stage1" "2 stage2"; do
    set -- $cfg
    if [ $round = 1 ]; then run base$round $1 $2 ZL_GEMM_TRIAL=0; run trial$round $1 $2 ZL_GEMM_TRIAL=1
    else run trial$round $1 $2 ZL_GEMM_TRIAL=1; run base$round $1 $2 ZL_GEMM_TRIAL=0; fi
    [ $((SECONDS-T0)) -gt 500 ] && break 2
  done
done
python3 - $R <<'PY' | tee $R/summary.txt
import json, glob, os, statistics as st, sys
R = sys.argv[1]
rows = {}
for f in sorted(glob.glob(R + "/*.json")):
    j = json.load(open(f)); name = os.path.basename(f)[:-5]
    prog, n, tag = name.rsplit("_", 2)
    s = j["step_ms"]
    rows.setdefault((prog, n), []).append((tag, st.median(s[20:]), st.median(s[1:]), j["ms_per_step"], j["param_hash"],
        j["ranks"][0]["clocks"].get("sm_mhz_median")))
for k, v in rows.items():
    for r in sorted(v): print(k[0], k[1], "%-7s late-median %.2f  median %.2f  mean %.2f  hash %s  MHz %s" % r)
PY
grep -h "gemm-trial" $R/*_trial1.txt | sort | uniq -c | head -40 > $R/trial-lines.txt; head -40 $R/trial-lines.txt
tar -C /tmp -czf $OUT/t1.tgz t1; cp $R/summary.txt $OUT/
