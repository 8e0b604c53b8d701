#!/usr/bin/env python3
"""Repeat `vmirq kvm halt --json` and summarise each cell as median [min, max] over rounds.

Cells are keyed by gap distribution (`--gaps`, or `--interval-us` as `const:us=N`) and poller.

Usage: halt-compare.py OUT.jsonl ROUNDS BINARY [vmirq kvm halt args...]

Before each round it waits (up to 60 s) until the host was at least 85 % idle over one
second, because KVM stops halt polling whenever another task is runnable on the vCPU's CPU;
the idle share and /proc/loadavg are stored with each round. Prints a table of medians.
"""
import json, subprocess, sys, time, statistics


def idle_share(dt=1.0):
    def read():
        f = open('/proc/stat').readline().split()[1:]
        v = list(map(int, f))
        return v[3] + v[4], sum(v)
    i0, t0 = read(); time.sleep(dt); i1, t1 = read()
    return (i1 - i0) / max(1, t1 - t0)


def main():
    out, rounds, binary, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    with open(out, 'a') as f:
        for r in range(rounds):
            deadline = time.time() + 60
            idle = idle_share()
            while idle < 0.85 and time.time() < deadline:
                idle = idle_share()
            load = open('/proc/loadavg').read().split()[:3]
            res = subprocess.run([binary, 'kvm', 'halt', '--json', *args],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                print(res.stderr, file=sys.stderr)
                continue
            cells = json.loads(res.stdout)['cells']
            f.write(json.dumps({'round': r, 'binary': binary, 'idle': idle, 'loadavg': load,
                                'time': time.strftime('%H:%M:%S'), 'cells': cells}) + '\n')
            f.flush()
            print(f'round {r}: idle {idle:.2f} load {" ".join(load)}', file=sys.stderr)
    summarise(out)


def load_rows(path, binary=None):
    """Cells of the rounds in `path` as {(gaps, poller): [per-round metrics]} (also used by
    halt-target.py)."""
    rows = {}
    for line in open(path):
        rec = json.loads(line)
        if binary and rec['binary'] != binary:
            continue
        for c in rec['cells']:
            # Rounds from before the gap distributions have no `gaps`: a constant interval.
            key = (c.get('gaps', f"const:us={c['interval_ns'] // 1000}"), c['poller'])
            h = max(1, c['halts'])
            polled = c['polled']
            rows.setdefault(key, []).append({
                'p50': c['lat_ns']['p50'] / 1e3,
                'mean': c['lat_ns']['mean'] / 1e3,
                'p90': c['lat_ns']['p90'] / 1e3,
                'p99': c['lat_ns']['p99'] / 1e3,
                'polled%': 100 * polled / h,
                # Also the polling in ms per 1000 halts.
                'poll_us/halt': c['poll_ns'] / h / 1e3,
                'fail_us/halt': c.get('poll_fail_ns', 0) / h / 1e3,
                'start_us': (c['handler_to_send_ns'] - c['poll_success_ns'] / polled) / 1e3
                if polled and 'handler_to_send_ns' in c else float('nan'),
                'window_us': c.get('max_window_ns', 0) / 1e3,
                # Polls that ran out, % of halts (cells from before `attempted`: NaN).
                'ran_out%': 100 * (c['attempted'] - polled) / h if 'attempted' in c
                else float('nan'),
            })
    return rows


def summarise(path, binary=None):
    rows = load_rows(path, binary)
    # poll_us/halt is also the polling in ms per 1000 halts.
    cols = ['p50', 'mean', 'p90', 'p99', 'polled%', 'poll_us/halt', 'fail_us/halt', 'start_us']
    print(f'{"gaps":<46} {"poller":<32} {"n":>2} ' + ' '.join(f'{c:>22}' for c in cols))
    for (gaps, p), rs in sorted(rows.items()):
        cells = []
        for c in cols:
            v = sorted(r[c] for r in rs)
            cells.append(f'{statistics.median(v):7.1f} [{v[0]:6.1f},{v[-1]:6.1f}]')
        print(f'{gaps:<46} {p:<32} {len(rs):>2} ' + ' '.join(f'{c:>22}' for c in cells))


if __name__ == '__main__':
    if len(sys.argv) == 2 or (len(sys.argv) == 3 and not sys.argv[2].isdigit()):
        summarise(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None)
    else:
        main()
