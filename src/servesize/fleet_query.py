"""``servesize fleet``'s query: the fields of a fleet search, declared once (what to search, how to price it),
taking the engine flags, the workload, the knobs and the Monte-Carlo fields from ``servesize.scenario``'s
declarations whole. Its own module so that a command other than ``fleet`` never creates it (start-up: #30)."""

from __future__ import annotations

from dataclasses import MISSING, replace
from typing import Any

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.scenario import KnobFields, MonteCarloFields, Param, WorkloadFields, _comma_list, _declared, _own_params, _p, _shared

# engine flags every searched deployment takes (the rest are what the search varies or sizes)
FLEET_ENGINE = ("gpu_memory_utilization", "max_model_len", "max_num_batched_tokens", "block_size", "enforce_eager",
                "moe_backend", "mamba_ssm_cache_dtype", "mamba_cache_mode", "num_speculative_tokens", "vllm_version",
                "budget")


@frozen
class FleetQuery(WorkloadFields, KnobFields, MonteCarloFields):
    """``servesize fleet``: the cheapest fleet for N users (or several teams), over GPU type x count x precision
    x KV dtype x TP/DP, priced per GPU-hour (data/prices.toml, or --gpu-hour-price)."""

    models: str = _p("text", "comma list of models to serve (catalogue names, Hugging Face ids or config paths)",
                     "fleet", default=MISSING, metavar="LIST")
    users: int | None = _p("int", "users to serve (one workload: the preset, file and fields below)", "fleet",
                           lo=1, hi=10_000_000, metavar="N")
    team: tuple[str, ...] | None = _p("list", "a team sharing the fleet, NAME=USERS[:WORKLOAD] (WORKLOAD: a preset name "
                                      "or a workload file; default the workload below); repeat per team", "fleet",
                                      metavar="NAME=USERS[:WORKLOAD]")
    priority: tuple[str, ...] | None = _p("list", "NAME=LEVEL: a team's prefill-queue priority (higher first; default 0 "
                                          "for all, one FCFS queue); repeat per team", "fleet", metavar="NAME=LEVEL")
    gpus_from: str | None = _p("text", "comma list of GPU types to search (default: every GPU with a price)", "fleet",
                               metavar="LIST")
    max_gpus: int = _p("int", "most GPUs in one fleet", "fleet", default=64, lo=1, hi=4096, metavar="N")
    gpu_hour_price: tuple[str, ...] | None = _p("list", "GPU=PRICE: your price per GPU-hour (in --currency), replacing "
                                                "the list's; repeat per GPU", "fleet", metavar="GPU=PRICE")
    precision: str = _p("text", "comma list of weight precisions (native = the checkpoint's own; bf16, fp8, int8, int4, "
                        "mxfp4, nvfp4)", "fleet", default="native,fp8", flags=("-q",), metavar="LIST")
    kv_cache_dtype: str = _p("text", "comma list of KV cache dtypes", "fleet", default="auto,fp8", metavar="LIST")
    tensor_parallel_size: str = _p("text", "comma list of GPUs per replica", "fleet", default="1,2,4,8", flags=("-tp",),
                                   metavar="LIST")
    top: int = _p("int", "how many of the cheapest fleets to list", "fleet", default=5, lo=1, hi=100, metavar="K")
    price_includes_power: bool = _p("bool", "the GPU-hour prices include electricity (cloud rental); "
                                    "--no-price-includes-power adds the power bill (owned GPUs at an amortised price)",
                                    "fleet", default=True)

    gpu_memory_utilization: float | None = _shared("gpu_memory_utilization")
    max_model_len: int | None = _shared("max_model_len")
    max_num_batched_tokens: int | None = _shared("max_num_batched_tokens")
    block_size: int | None = _shared("block_size")
    enforce_eager: bool = _shared("enforce_eager")
    moe_backend: str = _shared("moe_backend")
    mamba_ssm_cache_dtype: str | None = _shared("mamba_ssm_cache_dtype")
    mamba_cache_mode: str | None = _shared("mamba_cache_mode")
    num_speculative_tokens: int | None = _shared("num_speculative_tokens")
    vllm_version: str = _shared("vllm_version")
    budget: str = _shared("budget")

    def __post_init__(self) -> None:
        for name, param in FLEET_PARAMS.items():
            object.__setattr__(self, name, param.parse(getattr(self, name)))
        if (self.users is None) == (self.team is None):
            raise BadInput("give --users N (one workload) or --team NAME=USERS[:WORKLOAD] (repeated), not both"
                           if self.users is not None else "how many users? give --users N, or --team NAME=USERS per team",
                           field="users")

    def replace(self, **changes: Any) -> FleetQuery:
        unknown = sorted(set(changes) - set(FLEET_PARAMS))
        if unknown:
            raise BadInput(f"FleetQuery has no field {', '.join(unknown)}; fields: {', '.join(FLEET_PARAMS)}")
        return replace(self, **changes)

    def shared(self) -> dict[str, Any]:
        """The fields a Scenario takes as they are (engine flags, workload, knobs, Monte-Carlo)."""
        groups = (*FLEET_ENGINE, *_own_params(WorkloadFields), *_own_params(KnobFields), *_own_params(MonteCarloFields))
        return {name: getattr(self, name) for name in groups}

    def lists(self) -> dict[str, tuple[str, ...] | None]:
        """The comma lists, split: models, GPU types, precisions, KV dtypes, TP sizes."""
        return {"models": _comma_list(self.models), "gpus_from": _comma_list(self.gpus_from),
                "precision": _comma_list(self.precision), "kv_cache_dtype": _comma_list(self.kv_cache_dtype),
                "tensor_parallel_size": _comma_list(self.tensor_parallel_size)}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in FLEET_PARAMS:
            value = getattr(self, name)
            out[name] = value.to_dict() if hasattr(value, "to_dict") else list(value) if isinstance(value, tuple) else value
        return out


FLEET_PARAMS: dict[str, Param] = _declared(FleetQuery, ("fleet", "engine", "workload", "knobs", "monte_carlo"))
