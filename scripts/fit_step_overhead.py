"""Fit decode.step_overhead_s (data/assumptions.toml) to the published decode benchmarks.

    PYTHONPATH=src python scripts/fit_step_overhead.py

For every case of tests/fixtures/decode-benchmarks.json where nothing else shares the GPU during the
decode (one user, or the vLLM latency test's batch whose 32-token prefills run together before the
decode), the measured step is 1 / measured tok/s (x the speculative tokens per step, 1 here) and the
modelled step is the plan's roofline at the default bandwidth and compute efficiencies with no overhead
(the same contexts as tests/test_decode_benchmarks.py: the prompt plus half the output). The overhead is
the median of (measured step - roofline step), rounded to 0.1 ms: a fixed cost per step that the roofline
does not price (scheduling, kernel launches, sampling). The NIM cases at 5, 25 and 50 users are left out:
their 5,000-token prefills interleave with the decode, a cost the overhead is not meant to absorb.
tests/test_load_model.py runs this fit and checks the default equals it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import statistics

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "decode-benchmarks.json"


def isolated(case: dict) -> bool:
    """Cases whose decode has the GPU to itself: one user, or a fixed batch with a negligible shared prefill."""
    return case["concurrency"] == 1 or case["input_tokens"] <= 64


def roofline_step_s(case: dict) -> float:
    """The plan's p50 step at the case's batch with no per-step overhead (defaults otherwise)."""
    from servesize.engine.deployment import Deployment
    from servesize.engine.memory import memory_report
    from servesize.model.catalogue import resolve_model
    from servesize.model.hardware import parse_gpus
    from servesize.planning.ceilings import CeilingCache, contexts_of, decode_setup
    from servesize.planning.decode import median_speed
    from servesize.planning.inputs import Knobs, fixed_from_memory
    from servesize.workload.model import EmpiricalClass, Workload

    arch = resolve_model(case["model"]).architecture
    dep = Deployment(tensor_parallel_size=case["tensor_parallel_size"], quantization=case["quantization"],
                     kv_cache_dtype=case["kv_cache_dtype"], max_model_len=8192)
    fixed = fixed_from_memory(memory_report(arch, parse_gpus(case["gpus"]), dep), arch)
    context = case["input_tokens"] + case["output_tokens"] / 2
    workload = Workload(EmpiricalClass("user", [context]), subagent=None, invalidation=0.0, max_model_len=8192)
    knobs = Knobs()
    setup = dataclasses.replace(decode_setup(fixed, knobs), step_overhead_s=0.0)
    bank = contexts_of(workload, knobs, setup.topk_tokens, CeilingCache())
    return setup.spec_speedup / median_speed(setup, bank, case["concurrency"])


def residuals() -> list[tuple[str, float, float]]:
    """(case id, measured step s, roofline step s) for every isolated case."""
    cases = json.loads(FIXTURE.read_text())["cases"]
    return [(c["id"], 1.0 / c["per_user_tok_s"], roofline_step_s(c)) for c in cases if isolated(c)]


def fitted_overhead_s() -> float:
    """The median residual step, rounded to 0.1 ms."""
    return round(statistics.median(m - r for _, m, r in residuals()), 4)


if __name__ == "__main__":
    for cid, measured, roof in residuals():
        print(f"{cid:45s} measured {measured * 1e3:7.2f} ms  roofline {roof * 1e3:7.2f} ms  residual {(measured - roof) * 1e3:6.2f} ms")
    print(f"decode.step_overhead_s = {fitted_overhead_s()}")
