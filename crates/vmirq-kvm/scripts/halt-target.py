#!/usr/bin/env python3
"""Issue 7's histogram target over halt-compare.py rounds: per gap workload, `histogram`
against the best fixed window and fixed 200 us, median [min, max] over rounds.

Usage: halt-target.py ROUNDS.jsonl [HISTOGRAM_POLLER]

Best fixed window (fixed before measuring): the `user:fixed:ns=N` cell with the lowest median
p50 latency; windows whose median p50 is within 5 % of that lowest are tied, and the tied
window with the lowest median polling (ms per 1000 halts) is the best. The target is met when
histogram's median p50 is at most 1.10 x the best window's and it polls less: its median
polling at least 5 % below the best window's (a cell's polling moves by 1-3 % between rounds;
a 0.1 % difference is the same polling, not less). A second view ranks the windows by mean
latency the same way (reported, not the target).
"""
import importlib.util, os, statistics, sys

# The rounds are read by halt-compare.py's loader (one definition of every metric).
_spec = importlib.util.spec_from_file_location(
    'halt_compare', os.path.join(os.path.dirname(os.path.abspath(__file__)), 'halt-compare.py'))
halt_compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(halt_compare)

TIE = 1.05
WITHIN = 1.10
LESS = 0.95


def med(rs, k):
    return statistics.median(r[k] for r in rs)


def fmt(rs, k, d=1):
    v = sorted(r[k] for r in rs if r[k] == r[k])  # NaN (not recorded) left out
    if not v:
        return '-'
    return f'{statistics.median(v):.{d}f} [{v[0]:.{d}f}, {v[-1]:.{d}f}]'


def best_fixed(rows, gaps, by):
    fixed = {p: rs for (g, p), rs in rows.items() if g == gaps and p.startswith('user:fixed:')}
    low = min(med(rs, by) for rs in fixed.values())
    tied = [p for p, rs in fixed.items() if med(rs, by) <= low * TIE]
    return min(tied, key=lambda p: med(fixed[p], 'poll_us/halt'))


def main():
    rows = halt_compare.load_rows(sys.argv[1])
    hist_name = sys.argv[2] if len(sys.argv) > 2 else 'user:histogram'
    for gaps in sorted({g for g, _ in rows}):
        if (gaps, hist_name) not in rows:
            continue
        hist = rows[(gaps, hist_name)]
        print(f'\n{gaps} ({len(hist)} rounds)')
        print('| poller | p50 us | p99 us | mean us | polled % | polling ms / 1000 halts '
              '| largest window us | polls ran out, % of halts |')
        print('|---|---|---|---|---|---|---|---|')
        best = best_fixed(rows, gaps, 'p50')
        shown = [hist_name, best] + [p for p in ['user:fixed:ns=200000'] if (gaps, p) in rows]
        shown += [p for (g, p) in sorted(rows) if g == gaps and p not in shown]
        for p in shown:
            rs = rows[(gaps, p)]
            tag = ' (best fixed)' if p == best else ''
            print(f'| {p}{tag} | {fmt(rs, "p50")} | {fmt(rs, "p99")} | {fmt(rs, "mean")} | '
                  f'{fmt(rs, "polled%")} | {fmt(rs, "poll_us/halt", 2)} | {fmt(rs, "window_us")} | '
                  f'{fmt(rs, "ran_out%")} |')
        for by in ('p50', 'mean'):
            b = rows[(gaps, best_fixed(rows, gaps, by))]
            lat = med(hist, by) / med(b, by)
            poll = med(hist, 'poll_us/halt') / max(1e-9, med(b, 'poll_us/halt'))
            # Rounds where histogram polled less than the best window of the same round.
            n = min(len(hist), len(b))
            less = sum(1 for i in range(n) if hist[i]['poll_us/halt'] < b[i]['poll_us/halt'])
            met = lat <= WITHIN and poll <= LESS
            print(f'by {by}: best fixed {best_fixed(rows, gaps, by)}; histogram {by} '
                  f'{lat:.3f}x, polling {poll:.3f}x (less in {less} of {n} rounds): '
                  f'{"met" if met else "not met"}')


if __name__ == '__main__':
    main()
