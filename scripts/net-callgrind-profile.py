#!/usr/bin/env python3
"""Per-frame profile of a callgrind output of serve-net (scripts/net-poll64-callgrind.sh
with KEEP=dir): instructions per frame per function, inlined pieces summed by function.

  scripts/net-callgrind-profile.py CALLGRIND_OUT FRAMES [TOP] [incl]

Without `incl`: self cost (what the function's own code runs, inlined code included),
sorted; with `incl`: inclusive cost (the function and what it calls).
"""
import re,subprocess,sys
f = sys.argv[1]
frames = int(sys.argv[2])
top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
incl = len(sys.argv) > 4 and sys.argv[4] == 'incl'
args=['callgrind_annotate','--threshold=100','--auto=no','--tree=none']
if incl: args.append('--inclusive=yes')
out=subprocess.run(args+[f],capture_output=True,text=True).stdout
agg={}
for line in out.splitlines():
    m=re.match(r'\s*([\d,]+)\s+\([\s\d.]+%\)\s+(.*?):(.*?)( \[.*\])?$',line)
    if not m: continue
    ir=int(m.group(1).replace(',',''))
    fn=m.group(3)
    fn=re.sub(r'<impl [^>]*>','',fn)
    fn=re.sub(r'<([^<>]* as )?([^<>]*)>::','\\2::',fn)
    if incl: agg[fn]=max(agg.get(fn,0),ir)
    else: agg[fn]=agg.get(fn,0)+ir
for fn,ir in sorted(agg.items(),key=lambda x:-x[1])[:top]:
    print(f"{ir/frames:8.1f}  {fn[:140]}")
if not incl: print(f"{sum(agg.values())/frames:8.1f}  TOTAL (self, all functions)")
