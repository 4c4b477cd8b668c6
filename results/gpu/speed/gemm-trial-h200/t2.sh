#!/bin/bash
# stop 33, second call: the in-run trial restricted to one GEMM at a time (ZL_GEMM_TRIAL_ONLY),
# against the default, lab-1b N = 4, 40 steps, rotating order; medians of steps 21-40.
source lease/setup.sh > /tmp/build.txt 2>&1 || { cat /tmp/build.txt; exit 1; }
cat /tmp/build.txt
R=/tmp/t2; mkdir -p $R; T0=$SECONDS
run() { # run TAG PROG ENV...
  local tag=$1 prog=$2; shift 2
  env "$@" ZL_GEMM_TUNE=log timeout 120 mpirun -n 4 --bind-to none build/cuda/$prog --layers 8 --dim 4096 --batch 8192 \
     --steps 40 --quiet --json $R/${prog}_N4_$tag.json > $R/${prog}_N4_$tag.txt 2>&1
  echo "$tag $prog rc=$? ($((SECONDS-T0)) s)"
}
v_base="ZL_GEMM_TRIAL=0"; v_dW1="ZL_GEMM_TRIAL=1 ZL_GEMM_TRIAL_ONLY=dW1"
v_dh="ZL_GEMM_TRIAL=1 ZL_GEMM_TRIAL_ONLY=⊙"; v_fwdy="ZL_GEMM_TRIAL=1 ZL_GEMM_TRIAL_ONLY=a·W2"
for round in 1 2; do
  if [ $round = 1 ]; then order="base dW1 dh fwdy"; else order="fwdy dh dW1 base"; fi
  for prog in stage2 stage1; do
    for v in $order; do eval "e=\$v_$v"; run $v$round $prog $e; done
    [ $((SECONDS-T0)) -gt 480 ] && break 2
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
grep -h "gemm-trial" $R/*.txt | sed 's/^.*gemm-trial: //' | sort | uniq -c > $R/trial-lines.txt; cat $R/trial-lines.txt | cut -c1-220
tar -C /tmp -czf $OUT/t2.tgz t2; cp $R/summary.txt $OUT/
