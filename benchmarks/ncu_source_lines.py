#!/usr/bin/env python3
"""Nsight Compute warp-state samples and executed instructions per source line.

Inputs: the SASS of one kernel section with inline line info (`nvdisasm -gi -c -fun <section symbol
index> cubin`, from a `-lineinfo` build, which has the same SASS) and the source page of an ncu report
(`ncu --section SourceCounters --warp-sampling-interval 0 -o rep ...`, then `ncu -i rep.ncu-rep --page
source --csv --print-source sass`). The CSV's addresses are made section-relative and matched to the
SASS offsets; shared-memory wavefronts beyond the ideal (bank conflicts) are shown per line where the
report has them. mode: inner (the innermost source line), row (the nearest frame in the sampler, two-pass,
filter, gathered-tail or rejection-tail file), outer (the kernel's own line).

    python benchmarks/ncu_source_lines.py kernel.sass source.csv [inner|row|outer] [N]
"""
import csv, re, sys, collections
def load_sass(path):
    """offset -> (sass text, chain of (file,line) innermost first)"""
    out = {}; pend = []; last = []
    fre = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
    ire = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?);')
    for ln in open(path):
        m = fre.search(ln)
        if m:
            pend.append((m.group(1).split('/')[-1], int(m.group(2))))
            continue
        m = ire.search(ln)
        if m:
            if pend: last = pend; pend = []
            out[int(m.group(1), 16)] = (m.group(2).strip(), last)
    return out
def load_csv(path):
    rows = list(csv.reader(open(path)))
    hdr = rows[1]; data = rows[2:]
    ia = hdr.index('Address'); isrc = hdr.index('Source'); ismp = hdr.index('Warp Stall Sampling (All Samples)')
    iex = hdr.index('Instructions Executed')
    stall_cols = [i for i, h in enumerate(hdr) if h.startswith('stall_') and 'Not Issued' not in h]
    iwf = hdr.index('L1 Wavefronts Shared') if 'L1 Wavefronts Shared' in hdr else None
    iwi = hdr.index('L1 Wavefronts Shared Ideal') if 'L1 Wavefronts Shared Ideal' in hdr else None
    base = int(data[0][ia], 16)
    res = []
    for r in data:
        try: a = int(r[ia], 16) - base
        except: continue
        st = {hdr[i][6:]: int(r[i] or 0) for i in stall_cols if (r[i] or '0') != '0'}
        # shared-memory wavefronts beyond the ideal (bank conflicts) as a pseudo stall entry
        if iwf is not None and iwi is not None:
            try:
                ex = int(r[iwf] or 0) - int(r[iwi] or 0)
            except ValueError:
                ex = 0
            if ex > 0: st['smem_excess_wavefronts'] = ex
        res.append((a, r[isrc].strip(), int(r[ismp] or 0), int(r[iex] or 0), st))
    return res
if __name__ == '__main__':
    sass = load_sass(sys.argv[1]); rows = load_csv(sys.argv[2]); mode = sys.argv[3] if len(sys.argv) > 3 else 'inner'
    tot = sum(r[2] for r in rows); totex = sum(r[3] for r in rows)
    agg = collections.defaultdict(lambda: [0, 0, collections.Counter(), 0])
    mism = 0
    for a, src, smp, ex, st in rows:
        s = sass.get(a)
        if s is None: key = ('?', 0); mism += 1
        else:
            if s[0].split()[0] != src.split()[0] and mism < 3: print('MISMATCH', hex(a), s[0], '|', src); mism += 1
            ch = s[1]
            if mode == 'inner': key = ch[0] if ch else ('?', 0)
            elif mode == 'row':  # the frame in sampler.cuh/twopass.cuh/gather_tail.cuh nearest the kernel
                key = ('?', 0)
                for f in ch:
                    if f[0] in ('gather_tail.cuh', 'reject_tail.cuh', 'twopass.cuh', 'sampler.cuh', 'filter.cuh'): key = f; break
            else:
                key = ch[-1] if ch else ('?', 0)
        g = agg[key]; g[0] += smp; g[1] += ex; g[2].update(st); g[3] += 1
    print(f'total samples {tot}, warp insts executed {totex}')
    for key, (smp, ex, st, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:int(sys.argv[4]) if len(sys.argv) > 4 else 40]:
        wf = st.pop('smem_excess_wavefronts', 0)
        top = ', '.join(f'{k}:{v}' for k, v in st.most_common(3)) + (f'  [smem excess wavefronts {wf}]' if wf else '')
        print(f'{key[0]}:{key[1]:<5} smp {smp:6d} ({100*smp/max(tot,1):5.1f}%) exec {ex:8d} sass {n:4d}  {top}')
