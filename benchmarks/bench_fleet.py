"""Time the fleet search in-process: the whole GPU catalogue for one workload, and a three-team split.

    python benchmarks/bench_fleet.py [--repeats 5] [--case NAME ...] [--cold]

Measured, not asserted. Targets (docs/benchmarks.md): a search over the whole GPU catalogue, up to 64
GPUs, for one workload in <= 2 s; a three-team split in <= 1 s. Each case is ``servesize.fleet(...)``
end to end (resolving, memory reports, fills, decode, ranking, the winner's plan or teams panel, with
teams each team alone too); the phases are split at the search's own progress lines. ``--cold`` also
times each case as the first call in a fresh interpreter (imports and catalogue parsing included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import servesize as s
from servesize.model.hardware import load_gpus
from servesize.sizing.prices import gpu_hour_prices

TEAMS = ["agents=120:coding-agent", "support=300:chat", "research=40:rag"]


def _every_gpu_priced() -> list[str]:
    """A price for each catalogue GPU data/prices.toml has none for, so the search covers all of them."""
    return [f"{gpu}=2.0" for gpu in load_gpus() if gpu not in gpu_hour_prices()]


CASES = {
    "catalogue, every GPU priced, 400 users (qwen3.6-27b)": dict(users=400, models="qwen3.6-27b",
                                                                  gpu_hour_price=_every_gpu_priced()),
    "catalogue, the GPUs prices.toml prices, 400 users": dict(users=400, models="qwen3.6-27b"),
    "three-team split on H200": dict(team=TEAMS, models="qwen3.6-27b", gpus_from="H200"),
    "three-team split, every GPU priced": dict(team=TEAMS, models="qwen3.6-27b", gpu_hour_price=_every_gpu_priced()),
}


def run(options: dict) -> tuple[float, dict[str, float], object]:
    """(seconds, seconds per phase, result) of one search."""
    marks: list[tuple[str, float]] = []
    t0 = time.perf_counter()
    result = s.fleet(progress=lambda line: marks.append((line, time.perf_counter())), **options)
    total = time.perf_counter() - t0
    phases, last = {}, t0
    names = ["resolve", "memory reports", "fills, decode, latency, ranking, winner", "each team alone"]
    for (_, at), name in zip(marks, names):
        phases[name] = at - last
        last = at
    phases[names[len(marks)]] = t0 + total - last
    return total, phases, result


def cold(name: str) -> float:
    """The case as the first call of a fresh interpreter."""
    code = (f"import time; t = time.perf_counter(); import servesize as s; import benchmarks.bench_fleet as b; "
            f"s.fleet(**b.CASES[{name!r}]); print(time.perf_counter() - t)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--case", action="append", choices=list(CASES))
    parser.add_argument("--cold", action="store_true", help="also time the first call in a fresh interpreter")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = {}
    for name in args.case or CASES:
        runs = [run(CASES[name]) for _ in range(args.repeats)]
        result = runs[-1][2]
        phases = {k: statistics.median(r[1].get(k, 0.0) for r in runs) for k in runs[0][1]}
        report[name] = {"median_s": statistics.median(r[0] for r in runs), "min_s": min(r[0] for r in runs),
                        "phases_median_s": phases, "shapes": result.shapes_searched,
                        "winner": None if result.winner is None else result.winner.gpus}
        if args.cold:
            report[name]["cold_s"] = cold(name)
        if not args.json:
            r = report[name]
            print(f"{name}: median {r['median_s']:.2f} s, min {r['min_s']:.2f} s over {args.repeats} "
                  f"({r['shapes']} shapes; cheapest {r['winner']})"
                  + (f"; first call in a fresh interpreter {r['cold_s']:.2f} s" if args.cold else ""))
            print("    " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    if args.json:
        print(json.dumps(report, indent=2))
    print(f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
