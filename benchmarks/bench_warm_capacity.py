"""Time one warm_capacity call: 1,500 fills of 2,000 sessions (target <= 50 ms). Measured, not asserted.

Run:  .venv/bin/python benchmarks/bench_warm_capacity.py [--repeats 21]
Case: the seed's reference workload, Qwen3.6-27B FP8 KV on one H200 (pool 2.77M tokens,
32,768 B/token, 75 MiB state per session).
"""

from __future__ import annotations

import argparse
import statistics
import time

from servesize.planning.warm_capacity import warm_capacity
from servesize.workload.model import Workload

GiB = 2**30
POOL_TOKENS = (141e9 - 28.8 * GiB - 19_308_875_468.8) / 32_768
KV_BYTES_PER_TOKEN = 32_768
STATE_BYTES = 78_643_200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    wl = Workload.seed_reference()
    result = warm_capacity(wl, POOL_TOKENS, KV_BYTES_PER_TOKEN, STATE_BYTES, fills=1500, draws=2000)  # warm-up
    times_ms = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        warm_capacity(wl, POOL_TOKENS, KV_BYTES_PER_TOKEN, STATE_BYTES, fills=1500, draws=2000)
        times_ms.append((time.perf_counter() - start) * 1e3)
    print(f"warm_capacity, 1,500 fills x 2,000 sessions: median {statistics.median(times_ms):.1f} ms "
          f"(min {min(times_ms):.1f}, max {max(times_ms):.1f}, {args.repeats} repeats; target <= 50 ms)")
    print(f"  warm users p5/p50/p95 {result.users}; sessions {result.sessions}")


if __name__ == "__main__":
    main()
