"""How long `workload fit` takes on a large trace: the CPU seconds of ``servesize.api.fit_workload`` in a child
process (interpreter start and imports excluded), median of a few runs; with ``--against SRC`` the tree at SRC
(a ``src`` folder, e.g. ``git archive <commit> src | tar -x -C /tmp/base``) runs alternately with this one, so
both see the same load.

    PYTHONPATH=src python benchmarks/bench_workload_fit.py [--trace ../shared/traces/claude-code-sessions.jsonl.gz]
                                                           [--repeats 3] [--against /tmp/base/src]

The Claude Code trace (31 MB gzip, 710 sessions, 48,658 requests, ~46M block ids kept) is optional large data
outside the clone (docs/simulate.md names its public source).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
TRACE = HERE.parent.parent / "shared" / "traces" / "claude-code-sessions.jsonl.gz"
CHILD = ("import sys, time\nfrom servesize.api import fit_workload\n"
         "t = time.process_time(); fit_workload(sys.argv[1]); print(time.process_time() - t)")


def cpu_seconds(src: pathlib.Path, trace: pathlib.Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", CHILD, str(trace)], env=env, capture_output=True, text=True,
                         check=True, timeout=1800)
    return float(out.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=pathlib.Path, default=TRACE)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", type=pathlib.Path, default=None, metavar="SRC", help="a baseline src folder")
    args = ap.parse_args()
    if not args.trace.exists():
        sys.exit(f"bench_workload_fit: {args.trace} not found (--trace names another file)")
    if not 1 <= args.repeats <= 50:
        sys.exit("bench_workload_fit: --repeats must be 1 to 50")
    trees = {"this tree": HERE.parent / "src"}
    if args.against is not None:
        trees["baseline"] = args.against
    times: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.repeats):
        for name, src in trees.items():
            times[name].append(cpu_seconds(src, args.trace))
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts):.1f} s CPU of {len(ts)} ({', '.join(f'{t:.1f}' for t in ts)}); "
              f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
