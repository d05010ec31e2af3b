"""Time one plan in-process: memory report + Fixed + make_plan, without and with the sensitivity panel.

    python benchmarks/bench_plan.py [--repeats 15] [--case NAME ...] [--against OLD/src] [--profile]

Measured, not asserted. Targets (docs/benchmarks.md): <= 20 ms median without sensitivity and
<= 250 ms with it, on the reference case `servesize plan qwen3.6-27b -q fp8 --gpus 1xH200
--kv-cache-dtype fp8` (default workload). The inputs are built once from library calls, the way
`servesize plan` builds them (the seed's reference workload capped at the model's own context; the
model's MTP head sized into the memory as the recipe serves it), so this survives the command's
rewrite; the timed part is what a caller with resolved inputs pays: memory_report,
fixed_from_memory and make_plan. The memory report's own share is printed separately.
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
from dataclasses import replace
from functools import partial

from servesize.engine.deployment import Deployment, derived_max_model_len
from servesize.engine.memory import memory_report
from servesize.model.catalogue import resolve_model
from servesize.model.hardware import parse_gpus
from servesize.planning.inputs import Knobs, fixed_from_memory, spec_tokens_of
from servesize.planning.plan import make_plan
from servesize.workload.model import Workload

CASES = {
    "27B 1xH200 fp8 (reference)": dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"),
    "27B 2xH200 TP2 fp8": dict(model="qwen3.6-27b", gpus="2xH200", quantization="fp8", kv_cache_dtype="fp8", tp=2),
    "llama-3.1-8b 1xH100": dict(model="llama-3.1-8b", gpus="1xH100"),
}


def resolve(model: str, gpus: str, quantization: str = "native", kv_cache_dtype: str = "auto", tp: int = 1, dp: int = 1):
    """Everything make_plan takes, built as `servesize plan` builds it with default flags."""
    resolved = resolve_model(model)
    arch = resolved.architecture
    wl = Workload.seed_reference()
    limit = derived_max_model_len(arch)
    if limit and wl.max_model_len > limit:
        wl = wl.replace(max_model_len=limit)
    knobs = Knobs()
    dep = Deployment(tensor_parallel_size=tp, data_parallel_size=dp, quantization=quantization,
                     kv_cache_dtype=kv_cache_dtype, max_model_len=wl.max_model_len)
    if arch.mtp_layers:
        dep = replace(dep, num_speculative_tokens=spec_tokens_of(knobs))
    group = parse_gpus(gpus)
    name = getattr(resolved, "name", None) or arch.name
    hf_id = getattr(getattr(resolved, "entry", None), "hf_id", None) or name
    return arch, group, dep, wl, knobs, name, hf_id


def plan_once(inputs, with_sensitivity: bool):
    arch, group, dep, wl, knobs, name, hf_id = inputs
    report = memory_report(arch, group, dep, name=name)
    fixed = fixed_from_memory(report, arch, hf_id=hf_id)
    return make_plan(fixed, dep, wl, knobs, with_sensitivity=with_sensitivity)


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
    arch, group, dep, _, _, name, _ = inputs
    plan = plan_once(inputs, False)
    return {
        "memory": median_ms(partial(memory_report, arch, group, dep, name=name), repeats),
        "without": median_ms(partial(plan_once, inputs, False), repeats),
        "with": median_ms(partial(plan_once, inputs, True), max(3, repeats // 3)),
        "binding": plan.result.binding, "values": plan.result.values,
    }


def against(src: str, labels: list, repeats: int) -> dict:
    """The same figures from another checkout's src/ (the old code), in a child interpreter."""
    env = {**os.environ, "PYTHONPATH": src}
    argv = [sys.executable, __file__, "--json", "--repeats", str(repeats)] + [a for label in labels for a in ("--case", label)]
    return json.loads(subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--case", action="append", choices=list(CASES), help="default: every case")
    p.add_argument("--against", metavar="SRC", help="also time another checkout's src/ and print the ratio, e.g. "
                   "git archive db91321 src | tar -x -C /tmp/old && ... --against /tmp/old/src")
    p.add_argument("--json", action="store_true", help="print the figures as JSON (for --against)")
    p.add_argument("--profile", action="store_true", help="cProfile one plan with sensitivity (top 25 by cumulative time)")
    args = p.parse_args(argv)
    labels = args.case or list(CASES)
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
                                  ("with", "plan with sensitivity", "<= 250 ms")):
            med, lo, hi = f[key]
            line = f"  {what:26s} median {med:7.1f} (min {lo:.1f}, max {hi:.1f}{'; target ' + target if target else ''})"
            if label in old:
                line += f"   old {old[label][key][0]:7.1f}: x{old[label][key][0] / med:.1f} faster"
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
