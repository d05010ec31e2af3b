"""The four ceilings in users (working-set-model.md 2.9), for one deployment and workload:

- cache ceiling   = warm *user* sessions p5 (warm_capacity; x replicas under sticky routing);
- decode ceiling  = the largest n whose per-user p50 meets the floor (per replica group, x dp);
- latency ceiling = users at which a miss's mean TTFT reaches the limit (M/G/1, per group, x dp);
- saturation      = users at which prefill duty reaches 100% (per group, x dp);
- binding         = the smallest; headroom = each ceiling / the binding one.

Per replica group, everything TP-wide is the group's: b x tp and state x tp bytes, tp x bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servesize.derivation import Derivation
from servesize.planning.decode import DecodeSetup, ExpertRouting, contexts_from, decode_ceiling
from servesize.planning.inputs import Fixed, Knobs, knob_value, spec_speedup_of, sub_ratio_of
from servesize.planning.latency import latency_ceiling_users, moments_from, saturation_ceiling_users
from servesize.planning.prefill import PrefillSetup, prefill_costs
from servesize.planning.warm_capacity import DEFAULT_PCIE_BYTES_PER_S, warm_capacity
from servesize.workload.model import Workload

CEILINGS = ("cache", "decode", "latency", "saturation")


@dataclass(frozen=True)
class Ceilings:
    warm: Any
    decode: Any
    decode_comfortable: Any
    prefill: Any
    moments: Any
    latency_users: float
    saturation_users: float
    spec_speedup: float
    values: dict
    binding: str

    def headroom(self) -> dict:
        low = self.values[self.binding]
        return {k: (v / low if low > 0 else None) for k, v in self.values.items()}


def decode_setup(fixed: Fixed, knobs: Knobs) -> DecodeSetup:
    experts = None
    if fixed.expert_bytes:
        experts = ExpertRouting(fixed.expert_bytes, fixed.num_experts, fixed.experts_per_token)
    tp_eff = knobs.tp_efficiency
    if tp_eff is None and knobs.assumptions == "seed":
        from servesize.planning.decode import tp_efficiency
        tp_eff = tp_efficiency(fixed.tp, knobs.a("decode.tp_efficiency_per_doubling"))
    return DecodeSetup(
        bandwidth_bytes_per_s=fixed.bandwidth_bytes_per_s, weight_bytes_per_step=fixed.weight_bytes_read,
        kv_bytes_per_token_read=fixed.kv_bytes_per_token_rank * fixed.tp,
        state_bytes_per_sequence=fixed.state_bytes_rank * fixed.tp, tp=fixed.tp, experts=experts,
        spec_speedup=spec_speedup_of(fixed, knobs), bandwidth_efficiency=float(knob_value(knobs, "bandwidth_efficiency")),
        tp_efficiency=tp_eff,
        # sliding/chunked layers read min(L, window) tokens per step (the same form as sparse top-k reads)
        topk_tokens=fixed.window_tokens, topk_bytes_per_token=fixed.window_bytes_per_token_rank * fixed.tp,
    )


def prefill_setup(fixed: Fixed, knobs: Knobs) -> PrefillSetup:
    return PrefillSetup(gemm_params=fixed.gemm_params, attention_width=fixed.attention_width,
                        full_attention_layers=fixed.full_attention_layers, peak_flops_per_gpu=fixed.peak_flops_per_gpu,
                        tp=fixed.tp, tp_efficiency=knobs.tp_efficiency, mfu=float(knob_value(knobs, "mfu")))


class CeilingCache:
    """Memoised warm fills and prefill costs (the sensitivity scans re-use them)."""

    def __init__(self):
        self.warm: dict = {}
        self.prefill: dict = {}


DECODE_SEARCH_LIMIT = 65536  # decoders per replica; past it decode cannot be what binds


def _decode_ceiling(setup, sampler, floor: float, fills, seed):
    """The decode ceiling, or the search limit as a lower bound when the floor is never reached."""
    from servesize.planning.decode import DecodeCeiling, FloorNeverReached

    try:
        return decode_ceiling(setup, sampler, floor, fills=fills, seed=seed, max_n=DECODE_SEARCH_LIMIT)
    except FloorNeverReached:
        d = Derivation()
        d.given("decode_ceiling", DECODE_SEARCH_LIMIT, unit="decoders",
                note=f"per-user decode stays above {floor:g} tok/s at {DECODE_SEARCH_LIMIT:,} concurrent decoders: "
                     "a lower bound; decode does not bind")
        return DecodeCeiling(DECODE_SEARCH_LIMIT, floor, None, floor, 0, d)


def ceilings(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache | None = None, comfortable: bool = True) -> Ceilings:
    cache = cache or CeilingCache()
    dp = fixed.dp
    b_group = fixed.kv_bytes_per_token_rank * fixed.tp
    s_group = (fixed.state_bytes_rank + fixed.window_bytes_per_session_rank) * fixed.tp  # resident per warm session
    wkey = (workload, fixed.pool_tokens, knobs.cpu_offload_bytes, knobs.sticky_routing, knobs.fills, knobs.draws, knobs.seed)
    if wkey not in cache.warm:
        cache.warm[wkey] = warm_capacity(workload, fixed.pool_tokens, b_group, s_group,
                                         cpu_offload_bytes=knobs.cpu_offload_bytes, replicas=dp,
                                         sticky_routing=knobs.sticky_routing, fills=knobs.fills, draws=knobs.draws,
                                         seed=knobs.seed,
                                         # each TP rank restores its own share over its own PCIe link
                                         pcie_bytes_per_s=DEFAULT_PCIE_BYTES_PER_S * fixed.tp,
                                         offload_tier="additive" if knobs.assumptions == "seed" else "inclusive")
    warm = cache.warm[wkey]
    setup = decode_setup(fixed, knobs)
    sampler = contexts_from(workload)
    dfills = knobs.decode_fills or knobs.a("decode.fills")
    floor = float(knob_value(knobs, "decode_floor"))
    dec = _decode_ceiling(setup, sampler, floor, dfills, knobs.seed)
    dec_c = _decode_ceiling(setup, sampler, float(knob_value(knobs, "comfortable_floor")), dfills, knobs.seed) if comfortable else None
    pset = prefill_setup(fixed, knobs)
    pkey = (workload, pset, knobs.prefill_samples, knobs.seed)
    if pkey not in cache.prefill:
        cache.prefill[pkey] = prefill_costs(pset, sample_contexts=sampler, warm_turn_tokens=workload.warm_turn_tokens,
                                            samples=knobs.prefill_samples, seed=knobs.seed)
    costs = cache.prefill[pkey]
    m = moments_from(costs, workload.invalidation)
    r = sub_ratio_of(workload)
    ttft = float(knob_value(knobs, "ttft_limit_s"))
    lat = latency_ceiling_users(m, r, workload.think_time_s, ttft, knobs.a("latency.discipline"))
    sat = saturation_ceiling_users(m, r, workload.think_time_s)
    values = {
        "cache": float(warm.users.p5),
        "decode": float(dec.n * dp),
        "latency": float(max(0.0, lat) * dp),
        "saturation": float(sat * dp),
    }
    binding = min(CEILINGS, key=lambda k: values[k])
    return Ceilings(warm, dec, dec_c, costs, m, values["latency"], values["saturation"], setup.spec_speedup, values, binding)
