"""Regenerate the warm-capacity seed's tables and sweeps, timed (issue 'Plan': <= 5 s in all).

    python benchmarks/bench_seed_tables.py

Runs each `servesize plan` below in-process (the same code path as the CLI, minus interpreter start),
prints the headline figure of each and the total wall time. Asserts nothing.
"""

import contextlib
import io
import json
import time

from servesize.cli import main

R = 19_308_875_468.8  # the seed's calibrated reserve per GPU (working-set-model.md 2.4)
GIB = 2**30
BASE = ["plan", "qwen3.6-27b", "-q", "fp8", "--state-dtype", "bfloat16", "--assumptions", "seed", "--vllm-version", "0.19.0",
        "--no-sensitivity", "--json"]
MOE = ["plan", "qwen3.6-35b-a3b", "-q", "fp8", "--state-dtype", "bfloat16", "--assumptions", "seed", "--vllm-version", "0.19.0",
       "--no-sensitivity", "--json", "--gpus", "1xH200",
       "--kv-cache-dtype", "fp8", "--pool-tokens", str(int((141e9 - 35.5e9 - R) / 10240))]
FP8 = ["--gpus", "1xH200", "--kv-cache-dtype", "fp8", "--pool-tokens", str(int((141e9 - 28.8 * GIB - R) / 32768))]
CASES = {
    "27B FP8 KV, 1xH200": BASE + FP8,
    "27B FP8 KV, no MTP": BASE + FP8 + ["--mtp-speedup", "1.0"],
    "27B FP16 KV": BASE + ["--gpus", "1xH200", "--kv-cache-dtype", "auto", "--pool-tokens", str(int((141e9 - 28.8 * GIB - R) / 65536))],
    "27B TP2": BASE + ["--gpus", "2xH200", "-tp", "2", "--kv-cache-dtype", "fp8",
                       "--pool-tokens", str(int((2 * 141e9 - 28.8 * GIB - 2 * R) / 32768))],
    "27B by median": BASE + FP8 + ["--sweep", "median=31k,45k,60k,80k,100k,140k"],
    "35B-A3B by prefix": MOE + ["--sweep", "prefix=3k,15k,30k"],
    "35B-A3B 600 GiB offload": MOE + ["--cpu-offload-gib", "600", "--fills", "400"],
}


def run(argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def headline(doc) -> str:
    if doc.get("sweep"):
        rows = doc["sweep"].get("rows") or []
        return ("warm users p50 " + "/".join(f"{r['warm_users']['p50']:.0f}" for r in rows)
                + "; p5 " + "/".join(f"{r['warm_users']['p5']:.0f}" for r in rows)
                + "; sessions p50 " + "/".join(f"{r['warm_sessions']['p50']:.0f}" for r in rows))
    w, c = doc["warm_users"], doc["ceilings"]
    return (f"warm users p5 {w['p5']:.0f} p50 {w['p50']:.0f}; sessions p50 {doc['warm_sessions']['p50']:.0f}; "
            f"decode {c['decode']:.0f}; binding {doc['binding']}")


def main_() -> None:
    t_all = time.perf_counter()
    for label, argv in CASES.items():
        t0 = time.perf_counter()
        doc = run(argv)
        print(f"{label:28s} {time.perf_counter() - t0:6.2f} s   {headline(doc)}")
    print(f"{'all of the above':28s} {time.perf_counter() - t_all:6.2f} s")


if __name__ == "__main__":
    main_()
