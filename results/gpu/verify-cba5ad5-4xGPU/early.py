# early.py TRACE: rank 0's last step — each optimizer span's start relative to the last backward
# span's start and end and to the verdict (the last control all-reduce), in microseconds
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))['traceEvents'] if e.get('ph') == 'X' and e.get('pid') == 0]
last = max(e['args']['step'] for e in ev)
ev = [e for e in ev if e['args']['step'] == last]
bw = [e for e in ev if e['name'].startswith('backward')]
b0 = max(bw, key=lambda e: e['ts'])
ctl = [e for e in ev if e['name'].startswith('all_reduce control')]
v = max(ctl, key=lambda e: e['ts']) if ctl else None
loss = max(e['ts'] for e in ev if e['name'] == 'loss')
opt = sorted([e for e in ev if e['name'].startswith('optimizer') and e['ts'] > loss], key=lambda e: e['ts'])
inside = sum(e['ts'] < b0['ts'] for e in opt)
print(f"{sys.argv[1]}: units {len(bw)}, before last backward start {inside}, before its end "
      f"{sum(e['ts'] < b0['ts'] + b0['dur'] for e in opt)}, before verdict end "
      f"{sum(e['ts'] < v['ts'] + v['dur'] for e in opt) if v else '-'}; last backward {b0['dur']:.0f} us; "
      + ' '.join(f"u{e['args']['unit']}:{e['ts'] - b0['ts']:+.0f}" for e in opt))
