"""Run vmirq sweep jobs on a Dask distributed cluster.

Started by `vmirq sim sweep --engine dask` (crates/vmirq-sim/src/sweep/dask.rs), which
passes this file's text with `python -c`. Reads one JSON job per line on stdin; submits
each to the cluster as a task that runs `VMIRQ sim point -` with the job on its stdin (the
simulator itself is never re-implemented here); prints one line per finished job on stdout,
in completion order, flushed:

    OK <index> <the point's JSON line, verbatim>
    ERR <index> <message on one line>

Arguments: --scheduler ADDRESS | local:N, --vmirq PATH (on the workers).
"""

import argparse
import subprocess
import sys


def run_point(vmirq, job_line):
    """Run one job in a vmirq process; return its JSON line untouched."""
    p = subprocess.run(
        [vmirq, "sim", "point", "-"],
        input=job_line,
        capture_output=True,
        text=True,
        check=False,
    )
    if p.returncode != 0:
        raise RuntimeError(
            "vmirq sim point exited with %d: %s" % (p.returncode, p.stderr.strip())
        )
    return p.stdout.strip()


def one_line(text):
    return " ".join(str(text).split())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheduler", required=True)
    ap.add_argument("--vmirq", required=True)
    a = ap.parse_args()

    import dask
    from distributed import Client, LocalCluster, as_completed

    # Quiet by default: the driver prints progress; Dask's own logs stay at warnings.
    dask.config.set({"logging.distributed": "warning"})
    jobs = [line for line in sys.stdin.read().splitlines() if line.strip()]
    cluster = None
    if a.scheduler.startswith("local"):
        n = int(a.scheduler.partition(":")[2] or "0") or None
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        )
        client = Client(cluster)
    else:
        client = Client(a.scheduler)
    try:
        futures = {}
        for i, job in enumerate(jobs):
            # pure=False: every job is its own task, even with equal arguments.
            f = client.submit(run_point, a.vmirq, job, pure=False)
            futures[f] = i
        for f in as_completed(futures):
            i = futures[f]
            try:
                line = f.result()
                print("OK %d %s" % (i, line), flush=True)
            except Exception as e:  # a failed point is reported, the others go on
                print("ERR %d %s" % (i, one_line(e)), flush=True)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
