import json, sys, os
for p in sys.argv[1:]:
    if p.endswith('.trace.json'): continue
    j = json.load(open(p))
    med = j['ms_per_step_median']
    print(f"{os.path.basename(p)}: median {med:.2f} ms, hash {j['param_hash']}")
    for r in j['ranks']:
        t = r['timeline']
        ex, w, ew, el = t['exposed_comm_ms_per_step'], t['join_wait_ms_per_step'], t['exposed_join_wait_ms_per_step'], t['exposed_less_join_wait_ms_per_step']
        print(f"  rank {r['rank']}: exposed {ex:.3f} ({100*ex/med:.2f} %) join wait {w:.3f} exposed wait {ew:.3f} "
              f"less {el:.3f} ({100*el/med:.2f} %) last {100*t['last_to_join_share']:.0f} % offset {t['clock_offset_ms']:.3f} "
              f"resid {t['end_residual_median_us']:.1f}/{t['end_residual_max_us']:.1f} us sm {r['clocks'].get('sm_mhz_median', 0)}")
