# One line a rank from zerolab JSON reports: exposed communication (and % of the median step;
# the figures are means over the timed steps), the join wait, its exposed part, exposed after the
# last joins, the late join charged to the rank, clock offset, end residuals, median SM clock.
import json, sys, os
for p in sys.argv[1:]:
    if p.endswith('.trace.json'): continue
    j = json.load(open(p))
    med = j['ms_per_step_median']
    print(f"{os.path.basename(p)}: median {med:.2f} ms, {j['tflops_per_gpu']:.1f} TFLOP/s by the mean, hash {j['param_hash']}")
    for r in j['ranks']:
        t = r['timeline']
        ex, w, ew, ea = t['exposed_comm_ms_per_step'], t['join_wait_ms_per_step'], t['exposed_join_wait_ms_per_step'], t['exposed_after_join_ms_per_step']
        print(f"  rank {r['rank']}: exposed {ex:.3f} ({100*ex/med:.2f} %) join wait {w:.3f} exposed wait {ew:.3f} "
              f"after join {ea:.3f} ({100*ea/med:.2f} %) late join {t['late_join_ms_per_step']:.3f} offset {t['clock_offset_ms']:.3f} "
              f"resid {t['end_residual_median_us']:.1f}/{t['end_residual_max_us']:.1f} us sm {r['clocks'].get('sm_mhz_median', 0)}")
