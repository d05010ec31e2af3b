"""How long `calibrate` takes over a log of many repeated KV-cache lines (issue 16: it was quadratic in them,
5,000 lines 6 s, 20,000 86 s, 40,000 past 300 s). Medians of a few runs, in-process (servesize.calibrate),
the same call POST /api/calibrate makes.

    PYTHONPATH=src python benchmarks/bench_calibrate.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import servesize as s
from servesize.errors import ServesizeError

LINE = "INFO 12-01 12:00:00 [kv_cache_utils.py:1] GPU KV cache size: 290,864 tokens"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
