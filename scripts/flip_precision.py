"""How precisely the sensitivity panel can place a flip: each flip at Monte-Carlo seeds 0-3, found with 10 and with
planning.sensitivity.FLIP_BISECTIONS bisection steps (docs/benchmarks.md, 'The panel's precision').

    PYTHONPATH=src python scripts/flip_precision.py                 # the reference case, ~3 s

For each row: the flips (10 steps) at each seed, their spread ((max - min) / median: what the fills cannot tell
apart), and the largest gap between the two step counts at one seed (what fewer steps give up).
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from servesize.planning.ceilings import CeilingCache, ceilings
from servesize.planning.sensitivity import FLIP_BISECTIONS, sensitivity
from servesize.resolve import plan_inputs
from servesize.scenario import SENSITIVITY_ROWS, Scenario

SEEDS = (0, 1, 2, 3)


def flips(steps: int, seed: int, scenario: Scenario) -> dict[str, float | None]:
    """The panel as planning.plan.make_plan computes it (its ceilings' cache handed on), at ``seed``."""
    inputs = plan_inputs(scenario)
    fixed = inputs.memory_and_fixed(check_prefixes=False)[1]
    knobs = replace(inputs.knobs, seed=seed)
    cache = CeilingCache()
    base = ceilings(fixed, inputs.workload, knobs, cache).binding
    out = sensitivity(fixed, inputs.workload, knobs, base, SENSITIVITY_ROWS, iterations=steps, cache=cache)
    return {name: row.get("flip_at") for name, row in out.items()}


def main() -> None:
    scenario = Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")
    fine = {s: flips(10, s, scenario) for s in SEEDS}
    coarse = {s: flips(FLIP_BISECTIONS, s, scenario) for s in SEEDS}
    print(f"| row | flips at seeds {', '.join(map(str, SEEDS))} (10 steps) | seed spread | "
          f"largest gap, {FLIP_BISECTIONS} vs 10 steps |")
    print("|---|---|---:|---:|")
    for name in fine[0]:
        values = [fine[s][name] for s in SEEDS]
        found = [v for v in values if v is not None]
        if not found:
            continue
        spread = (max(found) - min(found)) / statistics.median(found)
        gaps = [abs(coarse[s][name] - fine[s][name]) / fine[s][name] for s in SEEDS
                if fine[s][name] is not None and coarse[s][name] is not None]
        shown = ", ".join("none" if v is None else f"{v:.4g}" for v in values)
        print(f"| {name} | {shown} | {spread:.1%} | {max(gaps):.1%} |")


if __name__ == "__main__":
    main()
