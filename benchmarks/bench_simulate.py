"""Time the simulator, and run the PyPI kvcache-simulator beside it on the same trace. Measured, not asserted.

Run:  .venv/bin/python benchmarks/bench_simulate.py [--traces ../shared/traces] [--repeats 3] [--no-reference]
Needs the traces (optional large data outside the clone, public sources in docs/simulate.md; default
../shared/traces); the side-by-side needs `pip install kvcache-simulator` (not a
dependency of servesize: the benchmark skips that part without it) and a C++ compiler for its default backend.

Three figures:
1. the exact simulator's throughput on the 710 Claude Code sessions (main-agent requests, all sessions at
   t=0, the second half measured) at two pool sizes: block look-ups per second, where every full prompt
   block of every request is looked up in the hash map (then touched or allocated, cached and released);
   beside it, the probes vLLM itself would make (it stops at the first miss), per second of the same run.
   Target: >= 2 million look-ups per second.
2. the one-pass LRU curve over the same replay (every pool size at once). Target: under 30 s.
3. the same replay through kvcache-simulator (its own JSONL reader and its C++ batch backend) at the same
   budgets in blocks, LRU / FIFO / optimal beside servesize's LRU / FIFO / Belady, with both run times.
4. the engine simulator (simulate --engine: vLLM's scheduler, chunked prefill, the exact cache, preemption,
   the planner's step rooflines) on Qwen 3.6 27B FP8 on one H200: 1,000 sessions generated from the
   coding-agent and chat presets (100 users x 10 sessions), and 750 Claude Code sessions (50 users x 15):
   sessions/s and events/s (arrivals, admissions, finishes, preemptions) of the engine run alone, steps/s
   beside (a decode-only stretch is one vectorised jump but counts every step). Target: 1,000 sessions in
   seconds. `--engine-only` runs just this part.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time

from servesize.simulate.cache import CacheConfig, replay_exact
from servesize.simulate.curve import LruCurve, belady_hit_blocks, fifo_hit_blocks, lru_curve
from servesize.simulate.replay import ReplayOptions, build_replay
from servesize.simulate.traces import read_trace

HERE = pathlib.Path(__file__).resolve().parent
# The traces are optional large data outside the clone (public sources: docs/simulate.md); this default is
# where the project's workspace keeps them, and --traces names another folder.
TRACES = HERE.parent.parent / "shared" / "traces"
BUDGETS_BLOCKS = (1_000, 4_000, 16_000, 64_000, 256_000)  # LRU capacities compared, in 64-token blocks


def timed(fn, repeats: int):
    out, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        out.append(time.perf_counter() - start)
    return value, out


def bench_exact(replay, repeats: int) -> None:
    for num_blocks in (20_000, 200_000):
        res, seconds = timed(lambda nb=num_blocks: replay_exact(replay, CacheConfig(nb, replay.block_size)), repeats)
        med = statistics.median(seconds)
        print(f"exact simulator, {num_blocks:,} blocks of {replay.block_size}: median {med:.2f} s "
              f"(min {min(seconds):.2f}, {repeats} runs) for {replay.requests:,} requests; "
              f"{res.blocks_replayed / med / 1e6:.1f} M block look-ups/s (target >= 2 M; best run "
              f"{res.blocks_replayed / min(seconds) / 1e6:.1f} M), of which vLLM's own probes (to the first miss) "
              f"{res.lookups / med / 1e6:.1f} M/s; token hit rate {res.token_hit_rate:.4f}")


def write_reference_trace(replay, path: pathlib.Path) -> None:
    """kvcache-simulator's input: one request per line, our chained ids of its full blocks, and one id of its own
    for the partial tail so that its token weights add up to the prompt (as ours do)."""
    fresh = replay.num_nodes
    with open(path, "w") as fh:
        for i in range(replay.requests):
            ids = replay.nodes_of(i).tolist()
            n = int(replay.input_tokens[i])
            if n % replay.block_size:
                ids.append(fresh)
                fresh += 1
            fh.write(json.dumps({"block_size": replay.block_size, "hash_ids": ids, "input_length": n}) + "\n")


def bench_reference(replay, curve: LruCurve, curve_s: float, label: str) -> None:
    try:
        from kvcache_sim.cpp_backend import run_cpp_sweep
        from kvcache_sim.trace import parse_trace_file
    except ImportError:
        print("kvcache-simulator is not installed (pip install kvcache-simulator): side-by-side skipped")
        return
    budgets = [b for b in BUDGETS_BLOCKS if b < curve.max_distance]
    start = time.perf_counter()
    ours = {}
    for b in budgets:
        ours[b] = (float(curve.token_hit_rate(b)), fifo_hit_blocks(replay, b) * replay.block_size / replay.measured_tokens(),
                   belady_hit_blocks(replay, b) * replay.block_size / replay.measured_tokens())
    ours_bounds_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "trace.jsonl"
        write_reference_trace(replay, path)
        start = time.perf_counter()
        data = parse_trace_file(path)
        parsed_s = time.perf_counter() - start
        result = run_cpp_sweep(data, capacities=budgets, policies=["lru", "fifo", "optimal"],
                               warmup_requests=replay.measured_from)
        theirs_s = time.perf_counter() - start
    print(f"\n{label}: servesize vs kvcache-simulator 0.1.3 (C++ backend), token hit rate of the measured requests")
    print("  budget (blocks)   servesize LRU  kvcache-sim LRU   servesize FIFO  kvcache-sim FIFO   servesize Belady  kvcache-sim optimal")
    for b in budgets:
        lru, fifo, belady = ours[b]
        theirs = {p: result.results.get((p, b)) for p in ("lru", "fifo", "optimal")}
        shown = {p: f"{r.hitRate:.4f}" if r is not None and r.measurementMode == "fixed_window" else "underfilled"
                 for p, r in theirs.items()}
        print(f"  {b:>15,} {lru:>15.4f} {shown['lru']:>16} {fifo:>16.4f} {shown['fifo']:>17} {belady:>18.4f} {shown['optimal']:>20}")
    print(f"  unbounded: servesize {curve.ideal_token_hit_rate:.4f}, kvcache-sim ceiling {result.ceiling.hitRate:.4f}")
    print(f"  run time: kvcache-simulator {theirs_s:.1f} s for {len(budgets)} budgets x 3 policies "
          f"({parsed_s:.1f} s of it reading its JSONL); servesize: the LRU curve at every size "
          f"{curve_s:.2f} s, FIFO and Belady at the {len(budgets)} budgets {ours_bounds_s:.1f} s")


def bench_engine(traces: pathlib.Path, repeats: int) -> None:
    from servesize.api import plan_inputs
    from servesize.planning.ceilings import step_model_of
    from servesize.scenario import Scenario
    from servesize.simulate.engine import config_of, simulate_engine
    from servesize.simulate.synthetic import synthesize

    cases = []
    for preset in ("coding-agent", "chat"):
        sc = Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8", preset=preset)
        inputs = plan_inputs(sc)
        cases.append((f"{preset} preset, 1,000 generated sessions, 100 users x 10",
                      synthesize(inputs.workload, sessions=1000, seed=0), inputs, 100, 10))
    cc = traces / "claude-code-sessions.jsonl.gz"
    if cc.exists():
        sc = Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")
        cases.append(("Claude Code trace, 750 sessions, 50 users x 15", read_trace(cc), plan_inputs(sc), 50, 15))
    for label, trace, inputs, users, per_user in cases:
        report, fixed = inputs.memory_and_fixed(check_prefixes=False)
        cfg = config_of(report)
        times = step_model_of(fixed, inputs.knobs)
        replay = build_replay(trace, ReplayOptions(users=users, sessions_per_user=per_user, align="stagger", warmup=0.0,
                                                   block_size=cfg.block_size, max_model_len=report.pool.max_model_len))
        run, seconds = timed(lambda rp=replay, c=cfg, t=times: simulate_engine(rp, c, t), repeats)
        med = statistics.median(seconds)
        sessions = replay.sessions  # those that start before the first user runs out (replay.py's cut)
        print(f"engine simulator, {label}: median {med:.2f} s (min {min(seconds):.2f}, {repeats} runs) for "
              f"{replay.requests:,} requests of {sessions:,} sessions; {sessions / med:,.0f} sessions/s, {run.events / med:,.0f} events/s, "
              f"{run.steps / med:,.0f} steps/s ({run.steps:,} steps, {run.jumps:,} jumps, {run.events:,} events, "
              f"{run.preemptions.sum():,} preemptions, {run.clock_s / 3600:.1f} simulated hours)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=pathlib.Path, default=TRACES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true", help="skip the kvcache-simulator side-by-side")
    parser.add_argument("--engine-only", action="store_true", help="time only the engine simulator (figure 4)")
    args = parser.parse_args()
    if args.engine_only:
        bench_engine(args.traces, args.repeats)
        return
    start = time.perf_counter()
    trace = read_trace(args.traces / "claude-code-sessions.jsonl.gz")
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    replay = build_replay(trace, ReplayOptions(requests="main", align="t0", warmup=0.5))
    replay_s = time.perf_counter() - start
    print(f"Claude Code sessions: read {read_s:.1f} s ({trace.requests:,} requests, {trace.blocks.size:,} blocks); "
          f"replay built in {replay_s:.1f} s ({replay.requests:,} main-agent requests, {replay.nodes.size:,} blocks)")
    bench_exact(replay, args.repeats)
    curve, seconds = timed(lambda: lru_curve(replay), args.repeats)
    print(f"one-pass LRU curve, every pool size: median {statistics.median(seconds):.2f} s (min {min(seconds):.2f}; "
          f"target < 30 s; {read_s + replay_s + statistics.median(seconds):.1f} s with reading the trace); "
          f"unbounded {curve.ideal_token_hit_rate:.4f}, {curve.distances.size:,} distinct stack distances")
    if not args.no_reference:
        bench_reference(replay, curve, statistics.median(seconds), "Claude Code, main-agent requests, t=0, second half, 64-token blocks")
        moon = build_replay(read_trace(args.traces / "mooncake-conversation.jsonl.gz"), ReplayOptions(warmup=0.5))
        moon_curve, moon_s = timed(lambda: lru_curve(moon), 1)
        bench_reference(moon, moon_curve, moon_s[0], "Mooncake conversation, second half, 512-token blocks")
    bench_engine(args.traces, args.repeats)


if __name__ == "__main__":
    main()
