"""Wall time of whole CLI invocations, interpreter start included (median of repeats).

    python benchmarks/bench_cli.py [--repeats 15]

Targets (issue 'Core'): `servesize fit --gpus 8xH100 --json` over the whole catalogue within 0.5 s,
`servesize --help` within 0.3 s, on the project's 2-core machines. Prints figures; asserts nothing.
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import time

CASES = {
    "servesize --help": ["--help"],
    "servesize fit --gpus 8xH100 --json": ["fit", "--gpus", "8xH100", "--json"],
    "servesize memory qwen3.6-27b --gpus 1xH200 --json": ["memory", "qwen3.6-27b", "--gpus", "1xH200", "--json"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    exe = shutil.which("servesize")
    base = [exe] if exe else [sys.executable, "-m", "servesize"]
    for label, argv in CASES.items():
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            subprocess.run(base + argv, check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        print(f"{label:55s} median {statistics.median(times) * 1000:7.1f} ms   "
              f"min {min(times) * 1000:7.1f} ms   max {max(times) * 1000:7.1f} ms   (n={args.repeats})")


if __name__ == "__main__":
    main()
