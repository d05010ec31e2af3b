"""Wall time of whole CLI invocations, interpreter start included (median of repeats).

    python benchmarks/bench_cli.py [--repeats 15] [--kvfit /tmp/kvfit-venv/bin/kvfit] [--against OLD/src]

First the own-package import time of `import servesize.cli` (and of the api, for scale; target for the
cli: under 150 ms). Each command runs N times in a subprocess (after one warm-up run, with bytecode caching on, as an installed
package runs); printed per command: the median wall time, min and max, and the median CPU time of the child
(user + system, from its rusage): on a busy machine the wall includes waiting for a core, the CPU time does
not, so the CPU median is the nearer figure for a quiet machine. Targets (issue 18): `plan ... --json` within
0.6 s and `fit --gpus 8xH100 --json` within 0.3 s wall. With --kvfit, `servesize memory` (text, as a user runs
it) and the peer tool kvfit are run in alternating pairs in the same loop on the same question (issue 30: at most
kvfit's CPU time, median of pairs): kvfit reads a model's config.json from Hugging Face, so it runs offline through
the workspace's bench/kvfit-offline.py (which replaces only that fetch) on the fixture's Llama-3.1-8B config, with
--kvfit naming the Python of kvfit's own venv (`python3 -m venv /tmp/kvfit-venv && /tmp/kvfit-venv/bin/pip install
kvfit==0.3.0`). Prints figures; asserts nothing. The load average is printed beside them. With --against OLD/src
(another checkout's src, e.g. `git archive BASE src | tar -x -C /tmp/base`), each command also runs from that tree,
alternating run by run with this one, so both see the same load: the before/after of a change on a busy machine.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

CASES = {
    "servesize --help": ["--help"],
    "servesize fit --gpus 8xH100 --json": ["fit", "--gpus", "8xH100", "--json"],
    "servesize plan qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8 --json":
        ["plan", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--json"],
    "servesize memory llama-3.1-8b --gpus 1xH100 --max-model-len 8192 --json":
        ["memory", "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "8192", "--json"],
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KVFIT_OFFLINE = os.path.join(ROOT, "..", "shared", "bench", "kvfit-offline.py")  # the workspace's, beside the checkout
LLAMA_8B = os.path.join(ROOT, "tests", "fixtures", "model-configs", "meta-llama--Meta-Llama-3.1-8B")
# the same question: Llama-3.1-8B (8,030,261,248 bf16 parameters, 2 bytes each) on one H100 at 8,192 tokens
KVFIT_QUESTION = [LLAMA_8B, "16060522496", "meta-llama/Llama-3.1-8B", "--hardware", "h100-80", "--gpus", "1",
                  "--context", "8192"]
MEMORY_TEXT = ["memory", "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "8192"]


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode cached
    return env


def _env_for(src: str) -> dict:
    """The environment that makes ``python -m servesize`` import the checkout at ``src``."""
    return {**_env(), "PYTHONPATH": os.path.abspath(src)}


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def report(label: str, runs: list[tuple[float, float]]) -> None:
    walls, cpus = [w for w, _ in runs], [c for _, c in runs]
    print(f"{label}\n    wall median {statistics.median(walls) * 1000:7.1f} ms (min {min(walls) * 1000:.1f}, "
          f"max {max(walls) * 1000:.1f})   cpu median {statistics.median(cpus) * 1000:7.1f} ms   (n={len(runs)})")


def own_import_ms(module: str, env: dict) -> float:
    """The summed self time (ms) of servesize's own modules under ``python -X importtime -c 'import MODULE'``."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], env=env, check=True,
                         capture_output=True, text=True).stderr
    rows = [line.split("|") for line in err.splitlines() if line.startswith("import time:") and "self [us]" not in line]
    return sum(int(r[0].split(":")[1]) for r in rows if r[2].strip().startswith("servesize")) / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--kvfit", metavar="PYTHON", help="the Python of kvfit's own venv (pip install kvfit==0.3.0)")
    ap.add_argument("--against", metavar="OLD/src", help="another checkout's src: each command alternates with it")
    args = ap.parse_args()
    base = [sys.executable, "-m", "servesize"]  # the servesize this interpreter imports (PYTHONPATH=src: the checkout)
    env = _env()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at start; {os.cpu_count()} CPUs")
    for module in ("servesize.cli", "servesize.api"):
        own = [own_import_ms(module, env) for _ in range(args.repeats)]
        print(f"python -X importtime -c 'import {module}': servesize's own modules {statistics.median(own):.1f} ms "
              f"median self time (min {min(own):.1f}, n={args.repeats})")
    for label, argv in CASES.items():
        timed(base + argv, env)  # warm-up: bytecode written, files in the page cache
        if not args.against:
            report(label, [timed(base + argv, env) for _ in range(args.repeats)])
            continue
        old_env = _env_for(args.against)
        timed(base + argv, old_env)
        ours, theirs = [], []
        for _ in range(args.repeats):  # alternating: both trees see the same load
            ours.append(timed(base + argv, env))
            theirs.append(timed(base + argv, old_env))
        report(label, ours)
        report(f"    the same from {args.against}", theirs)
    if args.kvfit:
        kvfit = [args.kvfit, KVFIT_OFFLINE, *KVFIT_QUESTION]
        script = [os.path.join(os.path.dirname(sys.executable), "servesize"), *MEMORY_TEXT]  # as a user runs it
        ours, theirs = [], []
        timed(kvfit, env), timed(script, env)
        for _ in range(args.repeats):  # alternating pairs: both see the same load
            ours.append(timed(script, env))
            theirs.append(timed(kvfit, env))
        report(f"paired: servesize {' '.join(MEMORY_TEXT)}", ours)
        report("paired: kvfit 0.3.0 on the same question (offline, kvfit-offline.py)", theirs)
        ratio = statistics.median(c for _, c in ours) / statistics.median(c for _, c in theirs)
        print(f"    servesize / kvfit CPU medians: {ratio:.2f} (issue 30: at most 1)")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at end")


if __name__ == "__main__":
    main()
