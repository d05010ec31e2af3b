"""Time one warm_capacity call: 1,500 fills (target <= 50 ms). Measured, not asserted.

Run:  .venv/bin/python benchmarks/bench_warm_capacity.py [--repeats 21]
Case: the seed's reference workload, Qwen3.6-27B FP8 KV on one H200 (pool 2.77m tokens,
32,768 B/token, 75 MiB state per session). Each fill draws only the sessions it reaches (about
100 here, in column blocks of 64), so ``draws`` (2,000) no longer sets the work. Two figures: a
fresh call (its random numbers drawn), and a call on a bank already drawn, as a sensitivity scan
or a sweep makes it (only the arithmetic).
"""

from __future__ import annotations

import argparse
import statistics
import time

from servesize.planning.warm_capacity import warm_capacity
from servesize.workload.draws import RandomBank
from servesize.workload.model import SessionClass, Workload

GiB = 2**30
POOL_TOKENS = (141e9 - 28.8 * GiB - 19_308_875_468.8) / 32_768
KV_BYTES_PER_TOKEN = 32_768
STATE_BYTES = 78_643_200


def timed_ms(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    wl = Workload.seed_reference()
    result = warm_capacity(wl, POOL_TOKENS, KV_BYTES_PER_TOKEN, STATE_BYTES, fills=1500, draws=2000)
    fresh = timed_ms(lambda: warm_capacity(wl, POOL_TOKENS, KV_BYTES_PER_TOKEN, STATE_BYTES, fills=1500, draws=2000),
                     args.repeats)
    bank = RandomBank(0)
    longer = wl.replace(user=SessionClass("user", 45_000, 0.81, 15_000))  # a sweep step: other lengths, same numbers
    shared = timed_ms(lambda: warm_capacity(longer, POOL_TOKENS, KV_BYTES_PER_TOKEN, STATE_BYTES, fills=1500, bank=bank),
                      args.repeats)
    print(f"warm_capacity, 1,500 fills: median {statistics.median(fresh):.1f} ms "
          f"(min {min(fresh):.1f}, max {max(fresh):.1f}, {args.repeats} repeats; target <= 50 ms)")
    print(f"  the same on a bank already drawn (median 45k): median {statistics.median(shared):.1f} ms "
          f"(min {min(shared):.1f}, max {max(shared):.1f})")
    print(f"  warm users p5/p50/p95 {result.users}; sessions {result.sessions}; draws_used {result.draws_used:,}")


if __name__ == "__main__":
    main()
