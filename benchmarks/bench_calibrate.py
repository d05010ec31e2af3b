"""How long `calibrate` takes over a log of many repeated KV-cache lines (issue 16: it was quadratic in them,
5,000 lines 6 s, 20,000 86 s, 40,000 past 300 s). Medians of a few runs, in-process (servesize.calibrate),
the same call POST /api/calibrate makes.

    PYTHONPATH=src python benchmarks/bench_calibrate.py [--repeats 3]

With ``--long-log N``: one start-up's KV lines after N debug lines (issue 31: 2,000,000 lines took 47 s and
1.7 GB), written to a temporary file and given to `servesize calibrate --vllm-log` in a child process: its wall
time and peak memory (the child's maximum resident set).

    PYTHONPATH=src python benchmarks/bench_calibrate.py --long-log 2000000
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import servesize as s
from servesize.errors import ServesizeError

LINE = "INFO 12-01 12:00:00 [kv_cache_utils.py:1] GPU KV cache size: 290,864 tokens"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--long-log", type=int, default=None, metavar="N", help="time one log of N debug lines instead")
    args = ap.parse_args()
    if args.long_log is not None:
        long_log(args.long_log, args.repeats)
        return
    for n in (5_000, 20_000, 40_000, 100_000):
        text = "\n".join([LINE] * n)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            try:
                s.calibrate(text, source="bench")
            except ServesizeError:
                pass
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(f"{n:>7,} repeated lines: median {median:.2f} s ({n / median:,.0f} lines/s, {args.repeats} runs)")


DEBUG = "(EngineCore_DP0 pid=6302) DEBUG 11-13 11:03:06 [core.py:712] EngineCore loop active, waiting for work.\n"
KV_LINES = ("INFO [kv_cache_utils.py:1319] GPU KV cache size: 290,864 tokens\n"
            "INFO [kv_cache_utils.py:1324] Maximum concurrency for 32,768 tokens per request: 33.04x\n")


def long_log(n: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "long.log"
        with open(path, "w") as f:
            f.write("INFO 11-13 11:00:00 [api_server.py:1] vLLM API server version 0.19.0\n")
            for _ in range(n):
                f.write(DEBUG)
            f.write(KV_LINES)
        env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[1] / "src"))
        walls, peaks = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "servesize", "calibrate", "--vllm-log", str(path),
                                   "--block-size", "784", "--json"], env=env, capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            # the largest resident set of any child so far: each run's own is at most this
            peaks.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
            if done.returncode:
                raise SystemExit(f"calibrate exited {done.returncode}: {done.stderr.strip()}")
        median = statistics.median(walls)
        size = path.stat().st_size
        print(f"{n:,} debug lines ({size / 1e6:.0f} MB): median {median:.1f} s of {repeats} "
              f"({', '.join(f'{w:.1f}' for w in walls)}), {size / 1e6 / median:.0f} MB/s, peak {max(peaks):.0f} MiB")

if __name__ == "__main__":
    main()
