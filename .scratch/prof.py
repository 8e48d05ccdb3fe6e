import json,sys,glob,collections
p=json.load(open(glob.glob(sys.argv[1]+'/*.cpuprofile')[0]))
nodes={n['id']:n for n in p['nodes']}
parent={}
for n in p['nodes']:
    for c in n.get('children',[]): parent[c]=n['id']
dt=collections.Counter()
samples=p['samples']; deltas=p['timeDeltas']
# self time by url (package)
selft=collections.Counter()
for s,d in zip(samples,deltas):
    n=nodes[s]; url=n['callFrame']['url']
    # attribute to first package/file in stack
    key=url
    import re
    m=re.search(r'node_modules/((@[^/]+/)?[^/]+)',url)
    key = m.group(1) if m else (url.split('/perf/')[-1] if url else '('+n['callFrame']['functionName']+')')
    selft[key]+=d
tot=sum(deltas)
print('total ms',tot/1000)
for k,v in selft.most_common(25): print(f'{v/1000:8.1f} {k}')
