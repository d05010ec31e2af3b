"""Wall time of real vLLM CPU engine starts, one alone and N at once (median of repeats).

    python benchmarks/bench_vllm_starts.py [--repeats 3] [--parallel 2]

Why: tests/integration/test_architectures.py starts 38 engines and runs two at a time on worker threads. That
pays where a start is mostly one interpreter's single-threaded set-up: if two at once take about as long each
as one alone, the 38 starts take about half the time on two cores. This measures both on this machine: the
tiny Llama of tests/integration/make_tiny_model.py, started as the architecture tests start it (setting A:
the engine's default block, 16 MiB of KV, in-process engine), stopped once healthy. Needs the vLLM venv
(scripts/vllm-cpu-env.sh). Prints figures; asserts nothing.
"""

import argparse
import concurrent.futures
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))

from vllm_server import ServerConfig, VllmServer  # noqa: E402


def start_once(python: pathlib.Path, model: str, log: pathlib.Path) -> float:
    cfg = ServerConfig(model=model, block_size=None, max_model_len=4096, kv_cache_memory_bytes=16 * 2**20,
                       max_num_seqs_flag=False, in_process=True, prefix_caching=None)
    srv = VllmServer(python, cfg, log)
    srv.start(timeout_s=300)
    srv.stop()
    return srv.startup_s or 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=2)
    args = ap.parse_args()
    python = pathlib.Path(os.environ.get("VLLM_VENV") or REPO / ".venv-vllm") / "bin" / "python"
    with tempfile.TemporaryDirectory() as tmp:
        model = pathlib.Path(tmp) / "model"
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
        subprocess.run([str(python), str(REPO / "tests" / "integration" / "make_tiny_model.py"), str(model)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        logs = pathlib.Path(tmp)
        start_once(python, str(model), logs / "warm-up.log")  # the first start fills vLLM's caches
        alone = [start_once(python, str(model), logs / f"alone-{i}.log") for i in range(args.repeats)]
        together = []
        for i in range(args.repeats):
            with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
                n = args.parallel
                together += pool.map(start_once, [python] * n, [str(model)] * n,
                                     [logs / f"together-{i}-{j}.log" for j in range(n)])
    print(f"load average {os.getloadavg()[0]:.2f} at end; {os.cpu_count()} CPUs")
    print(f"one start alone:      median {statistics.median(alone):5.1f} s  (n={len(alone)})")
    print(f"{args.parallel} starts at once: median {statistics.median(together):5.1f} s each  (n={len(together)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
