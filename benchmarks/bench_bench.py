"""Time `servesize bench` in-process: the engine simulator over vllm bench serve's random-dataset load.

    python benchmarks/bench_bench.py [--repeats 7]

Measured, not asserted. Target (#28, docs/benchmarks.md): a 1,000-prompt run <= 5 s on one core, median. The
cases: the issue's reference (1,000 prompts at --max-concurrency 64), the same all at once, and the heaviest
measured run the accuracy table replays (gpt-oss-120b on 2 x H100, 5,120 prompts of 8,192 tokens at 512 clients,
a queue hundreds of requests deep). CPU time (time.process_time) of the whole command: parsing, resolving the
deployment, the simulation and the metrics.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time

from servesize.cli import main

CASES = {
    "llama-3.1-8b 1xH100, 1,000 prompts 1024 -> 128, --max-concurrency 64":
        ["llama-3.1-8b", "--gpus", "1xH100", "--random-input-len", "1024", "--random-output-len", "128",
         "--num-prompts", "1000", "--max-concurrency", "64"],
    "qwen3.6-27b fp8 1xH200, 1,000 prompts 8192 -> 1024, all at once":
        ["qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--random-input-len", "8192",
         "--random-output-len", "1024", "--num-prompts", "1000"],
    "gpt-oss-120b 2xH100 TP2, 5,120 prompts 8192 -> 1024, --max-concurrency 512 (the accuracy table's heaviest)":
        ["gpt-oss-120b", "--gpus", "2xH100-SXM", "-tp", "2", "--max-model-len", "auto", "--random-input-len", "8192",
         "--random-output-len", "1024", "--max-concurrency", "512", "--num-prompts", "5120"],
}


def once(argv: list[str]) -> float:
    start = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["bench", *argv, "--json"]) == 0
    return time.process_time() - start


def run() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    for label, argv in CASES.items():
        once(argv)  # warm: imports, the catalogue
        times = [once(argv) for _ in range(args.repeats if "heaviest" not in label else max(1, args.repeats // 3))]
        print(f"{label}: median {statistics.median(times):.2f} s CPU (min {min(times):.2f}, {len(times)} runs)")


if __name__ == "__main__":
    run()
