# tail.py TRACE...: rank 0, medians over steps: end of backward 0 -> next forward 0, unit 0's step gather, forward sum, optimizer span
import json, sys, statistics as st, collections, re
for f in sys.argv[1:]:
    j = json.load(open(f)); ev = j['traceEvents'] if isinstance(j, dict) else j
    ev = [e for e in ev if e.get('ph') == 'X' and e.get('pid') == 0]
    by = collections.defaultdict(list)
    for e in ev: by[e['name']].append(e)
    b0 = sorted(by['backward 0'], key=lambda e: e['ts']); f0 = sorted(by['forward 0'], key=lambda e: e['ts'])
    tail = [min((x['ts'] for x in f0 if x['ts'] > b['ts'] + b['dur']), default=None) for b in b0]
    tail = [(t - b['ts'] - b['dur']) / 1e3 for t, b in zip(tail, b0) if t]
    ag0 = [e['dur'] / 1e3 for e in by['all_gather 0']]
    tot = collections.defaultdict(float); steps = max(1, len(by['loss']))
    for e in ev: tot[re.sub(r' \d+$', '', e['name'])] += e['dur'] / 1e3
    print('%-28s tail %.2f  gather0 %.2f  forward %.1f  optimizer %.1f' % (f.split('/')[-1][:28],
          st.median(tail) if tail else -1, st.median(ag0) if ag0 else -1, tot['forward'] / steps, tot['optimizer'] / steps))
