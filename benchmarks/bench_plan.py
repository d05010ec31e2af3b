"""Time one plan in-process: memory report + Fixed + make_plan, without and with the sensitivity panel.

    python benchmarks/bench_plan.py [--repeats 15] [--case NAME ...] [--against OLD/src] [--profile]
    python benchmarks/bench_plan.py --against OLD/src --alternate 5     # the panel, CPU time, trees alternating

Measured, not asserted. Targets (docs/benchmarks.md): <= 20 ms median without sensitivity and
<= 250 ms with it, on the reference case `servesize plan qwen3.6-27b -q fp8 --gpus 1xH200
--kv-cache-dtype fp8` (default workload). The inputs are resolved once (servesize.resolve.plan_inputs,
as servesize.plan resolves a Scenario); the timed part is what a caller with resolved inputs pays:
memory_report, fixed_from_memory and make_plan. The memory report's own share is printed
separately, and so is servesize.plan(Scenario(...)) end to end (resolving included).
``--against`` times another checkout's src/ the same way (in a child interpreter) and prints
the speed-up.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from functools import partial

from servesize.engine.memory import memory_report
from servesize.planning.inputs import fixed_from_memory
from servesize.planning.plan import make_plan

try:
    from servesize.api import plan as api_plan
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario
except ImportError:  # a checkout from before the library API (--against an old src/)
    api_plan = plan_inputs = Scenario = None

CASES = {
    "27B 1xH200 fp8 (reference)": dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"),
    "27B 2xH200 TP2 fp8": dict(model="qwen3.6-27b", gpus="2xH200", quantization="fp8", kv_cache_dtype="fp8",
                               tensor_parallel_size=2),
    "llama-3.1-8b 1xH100": dict(model="llama-3.1-8b", gpus="1xH100"),
}


def resolve(**scenario):
    """Everything make_plan takes, resolved once from a Scenario as ``servesize.plan`` resolves it."""
    if plan_inputs is not None:
        return plan_inputs(Scenario(**scenario))
    return _resolve_by_hand(**scenario)


def _resolve_by_hand(model, gpus, quantization="native", kv_cache_dtype="auto", tensor_parallel_size=1):
    """The same inputs without servesize.resolve (checkouts before the API): what `servesize plan` built."""
    from dataclasses import replace
    from types import SimpleNamespace

    from servesize.engine.deployment import Deployment, derived_max_model_len
    from servesize.model.catalogue import resolve_model
    from servesize.model.hardware import parse_gpus
    from servesize.planning.inputs import Knobs, spec_tokens_of
    from servesize.workload.model import Workload

    resolved = resolve_model(model)
    wl = Workload.seed_reference()
    limit = derived_max_model_len(resolved.architecture)
    wl = wl.replace(max_model_len=limit) if limit and wl.max_model_len > limit else wl
    knobs = Knobs()
    dep = Deployment(tensor_parallel_size=tensor_parallel_size, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
                     max_model_len=wl.max_model_len)
    if resolved.architecture.mtp_layers:
        dep = replace(dep, num_speculative_tokens=spec_tokens_of(knobs))
    name = getattr(resolved, "name", None) or resolved.architecture.name
    return SimpleNamespace(model=resolved, gpus=parse_gpus(gpus), deployment=dep, workload=wl, knobs=knobs, name=name,
                           hf_id=getattr(getattr(resolved, "entry", None), "hf_id", None) or name, pool_tokens=None,
                           pool_source=None, scenario=SimpleNamespace(budget="engine", assumptions="default"))


def plan_once(inputs, with_sensitivity: bool):
    """What ``servesize.plan`` does after resolving: the memory report, Fixed, make_plan."""
    if hasattr(inputs, "memory_and_fixed"):  # the one place resolved inputs become the planner's
        _report, fixed = inputs.memory_and_fixed(check_prefixes=False)
    else:  # a checkout from before it (--against an old src/): what its api did
        arch = inputs.model.architecture
        report = memory_report(arch, inputs.gpus, inputs.deployment, budget=inputs.scenario.budget, name=inputs.name)
        fixed = fixed_from_memory(report, arch, inputs.pool_tokens, inputs.pool_source,
                                  seed_convention=inputs.scenario.assumptions == "seed", hf_id=inputs.hf_id)
    try:  # the panel's rows are the Scenario's declarations (servesize.scenario.SENSITIVITY_ROWS), as the api passes them
        from servesize.scenario import SENSITIVITY_ROWS
    except ImportError:  # a checkout from before the rows were declared: its make_plan took a flag
        return make_plan(fixed, inputs.deployment, inputs.workload, inputs.knobs, with_sensitivity=with_sensitivity)
    return make_plan(fixed, inputs.deployment, inputs.workload, inputs.knobs,
                     sensitivity_rows=SENSITIVITY_ROWS if with_sensitivity else None)


def median_ms(fn, repeats: int) -> tuple[float, float, float]:
    fn()  # warm-up: imports, catalogue and assumption caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), min(times), max(times)


def measure(label: str, repeats: int) -> dict:
    """Median, min and max in ms of the memory report alone and of the plan without and with sensitivity."""
    inputs = resolve(**CASES[label])
    plan = plan_once(inputs, False)
    return {
        "memory": median_ms(partial(memory_report, inputs.model.architecture, inputs.gpus, inputs.deployment,
                                    budget=inputs.scenario.budget, name=inputs.name), repeats),
        "without": median_ms(partial(plan_once, inputs, False), repeats),
        "with": median_ms(partial(plan_once, inputs, True), max(3, repeats // 3)),
        "binding": plan.result.binding, "values": plan.result.values,
    } | ({} if api_plan is None else {"api": median_ms(partial(api_plan, Scenario(**CASES[label]), sensitivity=False), repeats)})


def against(src: str, labels: list, repeats: int) -> dict:
    """The same figures from another checkout's src/ (the old code), in a child interpreter."""
    env = {**os.environ, "PYTHONPATH": src}
    argv = [sys.executable, __file__, "--json", "--repeats", str(repeats)] + [a for label in labels for a in ("--case", label)]
    return json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)


_PANEL_ROUNDS = r"""
import json, resource, sys
from servesize.api import plan
from servesize.scenario import Scenario
cases = [Scenario(**kw) for kw in json.loads(sys.argv[1])]
for s in cases:
    plan(s)  # warm-up: imports, catalogues, the first call of every record's eq and hash
r0 = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(4):
    for s in cases:
        plan(s)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1000 / 4)
"""


def alternate(src: str, labels: list, processes: int) -> None:
    """``servesize.plan`` with the panel, every case four times a process, in child processes that alternate between
    this tree and ``src``: CPU time a round (user + sys), the median over processes. Both trees see the same load and
    the same state of the machine, where the two sequential runs above do not (a collection or a frequency step
    landing in one tree's repeats)."""
    cases = json.dumps([CASES[label] for label in labels])
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    times: dict[str, list[float]] = {here: [], src: []}
    for _ in range(processes):
        for tree in times:
            out = subprocess.run([sys.executable, "-c", _PANEL_ROUNDS, cases], env={**os.environ, "PYTHONPATH": tree},
                                 check=True, capture_output=True, text=True).stdout
            times[tree].append(float(out.split()[-1]))
    new, old = (statistics.median(times[t]) for t in (here, src))
    print(f"servesize.plan with the panel, {len(labels)} case(s) a round, CPU ms a round, median of {processes} "
          f"processes alternating: this tree {new:.1f}, {src} {old:.1f} (x{old / new:.3f})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--case", action="append", choices=list(CASES), help="default: every case")
    p.add_argument("--against", metavar="SRC", help="also time another checkout's src/ and print the ratio, e.g. "
                   "git archive db91321 src | tar -x -C /tmp/old && ... --against /tmp/old/src")
    p.add_argument("--json", action="store_true", help="print the figures as JSON (for --against)")
    p.add_argument("--profile", action="store_true", help="cProfile one plan with sensitivity (top 25 by cumulative time)")
    p.add_argument("--alternate", type=int, metavar="PROCESSES", help="with --against: only the plan with the panel, "
                   "CPU time, in child processes alternating between the two trees (the fairer before/after)")
    args = p.parse_args(argv)
    labels = args.case or list(CASES)
    if args.alternate:
        if not args.against:
            p.error("--alternate compares two trees: give --against SRC")
        alternate(args.against, labels, args.alternate)
        return 0
    figures = {label: measure(label, args.repeats) for label in labels}
    if args.json:
        print(json.dumps(figures))
        return 0
    old = against(args.against, labels, args.repeats) if args.against else {}
    print(f"median of {args.repeats} repeats (with sensitivity: {max(3, args.repeats // 3)}); ms")
    for label, f in figures.items():
        v = f["values"]
        print(f"{label}: binding {f['binding']}; cache {v['cache']:.0f} decode {v['decode']:.0f} "
              f"latency {v['latency']:.0f} saturation {v['saturation']:.0f}")
        for key, what, target in (("memory", "memory report alone", ""), ("without", "plan without sensitivity", "<= 20 ms"),
                                  ("with", "plan with sensitivity", "<= 250 ms"),
                                  ("api", "servesize.plan (resolving too)", "")):
            if key not in f:
                continue
            med, lo, hi = f[key]
            line = f"  {what:31s} median {med:7.1f} (min {lo:.1f}, max {hi:.1f}{'; target ' + target if target else ''})"
            if key in old.get(label, {}):
                line += f"   old {old[label][key][0]:7.1f} (x{old[label][key][0] / med:.1f})"
            print(line)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            plan_once(resolve(**CASES[label]), True)
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
