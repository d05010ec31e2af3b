"""servesize: how many users can these GPUs serve, comfortably, and which knob buys more?

    import servesize as s
    sc = s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")
    s.plan(sc).ceilings    # warm users (cache), decode, latency, saturation: users each allows
    s.memory(sc).pool      # the KV pool vLLM will build, down to the lines it logs
    s.fit("4xH100")        # every model x precision x placement four H100s can serve

The engine is a one-way pipeline of small pure functions over frozen dataclasses (docs/ENGINEERING.md):
model -> engine (deployment, weights, KV, budget, pool) -> workload -> planning -> Plan. The names
below are the public API; they are imported on first use, so ``servesize --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from servesize.lazy import load

__version__ = "0.2.0"

_EXPORTS = {
    "Scenario": "servesize.scenario",
    "FitQuery": "servesize.scenario",
    "resolve_model": "servesize.api",
    "models": "servesize.api",
    "memory": "servesize.api",
    "plan": "servesize.api",
    "sweep": "servesize.api",
    "fit": "servesize.api",
    "read_vllm_log": "servesize.api",
    "calibrate": "servesize.api",
    "fit_workload": "servesize.api",
    "simulate": "servesize.api",  # the Simulate issue: replay a trace through vLLM's prefix cache
    "fleet": "servesize.api",  # fleet: the cheapest fleet for N users, teams
    "teams": "servesize.api",
    "FleetQuery": "servesize.fleet_query",
    "FleetResult": "servesize.sizing.result",
    "Team": "servesize.workload.teams",
    "Plan": "servesize.planning.plan",
    "MemoryReport": "servesize.engine.memory",
    "FitResult": "servesize.engine.placement",
    "Calibration": "servesize.vllm_logs.calibration",
    "Workload": "servesize.workload.model",
    "SessionClass": "servesize.workload.model",
    "EmpiricalClass": "servesize.workload.model",
    "ServesizeError": "servesize.errors",
    "BadInput": "servesize.errors",
    "DoesNotFit": "servesize.errors",
    "UnsupportedArchitecture": "servesize.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    return load(globals(), _EXPORTS, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
