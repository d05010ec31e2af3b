"""The four ceilings in users (working-set-model.md 2.9), for one deployment and workload:

- cache ceiling   = warm *user* sessions p5 (warm_capacity; x replicas under sticky routing);
- decode ceiling  = the largest n whose per-user p50 meets the floor (per replica group, x dp);
- latency ceiling = users at which a miss's mean TTFT reaches the limit (M/G/1, per group, x dp);
- saturation      = users at which prefill duty reaches 100% (per group, x dp);
- binding         = the smallest; headroom = each ceiling / the binding one.

Per replica group, everything TP-wide is the group's: b x tp and state x tp bytes, tp x bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from servesize.derivation import Derivation
from servesize.planning.decode import (
    ContextBank,
    DecodeCeiling,
    DecodeSetup,
    ExpertRouting,
    FloorNeverReached,
    contexts_from,
    decode_ceiling,
    tp_efficiency,
)
from servesize.planning.inputs import Fixed, Knobs, knob_value, spec_speedup_of, sub_ratio_of
from servesize.planning.latency import latency_ceiling_users, moments_from, saturation_ceiling_users
from servesize.planning.prefill import PrefillSetup, prefill_costs
from servesize.planning.warm_capacity import DEFAULT_PCIE_BYTES_PER_S, warm_capacity
from servesize.workload.draws import RandomBank
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
    missing: dict = field(default_factory=dict)  # ceiling -> the figure it needs that the inputs lack

    def headroom(self) -> dict:
        low = self.values[self.binding]
        return {k: (v / low if low > 0 and k not in self.missing else None) for k, v in self.values.items()}


def decode_setup(fixed: Fixed, knobs: Knobs) -> DecodeSetup:
    experts = None
    if fixed.expert_bytes:
        experts = ExpertRouting(fixed.expert_bytes, fixed.num_experts, fixed.experts_per_token)
    tp_eff = knobs.tp_efficiency
    if tp_eff is None and knobs.assumptions == "seed":
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
    """What the sensitivity scans and sweeps re-use between evaluations of the same deployment.

    - ``banks``: the random numbers of the warm fills, by seed (workload.draws.RandomBank): every
      evaluation realises the same numbers, so a swept workload parameter moves every session
      smoothly (common random numbers) and nothing is drawn twice;
    - ``warm``: warm fills, by what the fill depends on (the sampled workload, not its pacing);
    - ``contexts``: decode context banks, by what the lengths depend on (not coldness);
    - ``decode``: decode ceilings, by setup, floor and bank;
    - ``prefill``: prefill costs, by setup and length distribution.
    """

    def __init__(self):
        self.banks: dict = {}
        self.warm: dict = {}
        self.contexts: dict = {}
        self.decode: dict = {}
        self.prefill: dict = {}

    def bank(self, seed: int, uniforms: bool) -> RandomBank:
        key = (int(seed), bool(uniforms))
        if key not in self.banks:
            self.banks[key] = RandomBank(seed, uniforms=uniforms)
        return self.banks[key]


DECODE_SEARCH_LIMIT = 65536  # decoders per replica; past it decode cannot be what binds


def _decode_ceiling(setup, bank: ContextBank, floor: float):
    """The decode ceiling, or the search limit as a lower bound when the floor is never reached."""
    try:
        return decode_ceiling(setup, None, floor, max_n=DECODE_SEARCH_LIMIT, bank=bank)
    except FloorNeverReached:
        d = Derivation()
        d.given("decode_ceiling", DECODE_SEARCH_LIMIT, unit="decoders",
                note=f"per-user decode stays above {floor:g} tok/s at {DECODE_SEARCH_LIMIT:,} concurrent decoders: "
                     "a lower bound; decode does not bind")
        return DecodeCeiling(DECODE_SEARCH_LIMIT, floor, None, floor, 0, d)


def warm_of(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache):
    """The warm fill (memoised on what it depends on)."""
    key = (workload.sampling_key(), fixed.pool_tokens, knobs.cpu_offload_bytes, knobs.sticky_routing, knobs.fills,
           knobs.draws, knobs.seed)
    if key not in cache.warm:
        b_group = fixed.kv_bytes_per_token_rank * fixed.tp
        s_group = (fixed.state_bytes_rank + fixed.window_bytes_per_session_rank) * fixed.tp  # resident per warm session
        cache.warm[key] = warm_capacity(workload, fixed.pool_tokens, b_group, s_group,
                                        cpu_offload_bytes=knobs.cpu_offload_bytes, replicas=fixed.dp,
                                        sticky_routing=knobs.sticky_routing, fills=knobs.fills, draws=knobs.draws,
                                        seed=knobs.seed,
                                        # each TP rank restores its own share over its own PCIe link
                                        pcie_bytes_per_s=DEFAULT_PCIE_BYTES_PER_S * fixed.tp,
                                        offload_tier="additive" if knobs.assumptions == "seed" else "inclusive",
                                        bank=cache.bank(knobs.seed, workload.needs_uniforms))
    return cache.warm[key]


def contexts_of(workload: Workload, knobs: Knobs, topk_tokens: int, cache: CeilingCache) -> ContextBank:
    """Decode contexts: fill i's decoders are the first sessions of warm fill i (the same random numbers)."""
    fills = int(knobs.decode_fills or knobs.a("decode.fills"))
    key = (workload.lengths_key(), fills, knobs.seed, topk_tokens)
    if key not in cache.contexts:
        numbers = cache.bank(knobs.seed, workload.needs_uniforms)
        cache.contexts[key] = ContextBank.from_columns(
            lambda c0, c1: workload.full_tokens(numbers.take(0, fills, c0, c1)), fills, topk_tokens)
    return cache.contexts[key]


def decode_of(setup: DecodeSetup, workload: Workload, knobs: Knobs, floor: float, cache: CeilingCache):
    """The decode ceiling at ``floor`` (memoised on the setup, the floor and the context bank)."""
    bank = contexts_of(workload, knobs, setup.topk_tokens, cache)
    key = (setup, floor, id(bank))
    if key not in cache.decode:
        cache.decode[key] = _decode_ceiling(setup, bank, floor)
    return cache.decode[key]


def prefill_of(pset: PrefillSetup, workload: Workload, knobs: Knobs, cache: CeilingCache):
    """Prefill costs: exact from the workload's length moments, or sampled when ``knobs.prefill_samples`` is set."""
    key = (pset, workload.lengths_key(), workload.warm_turn_tokens, knobs.prefill_samples, knobs.seed)
    if key not in cache.prefill:
        if knobs.prefill_samples:
            cache.prefill[key] = prefill_costs(pset, sample_contexts=contexts_from(workload),
                                               warm_turn_tokens=workload.warm_turn_tokens,
                                               samples=knobs.prefill_samples, seed=knobs.seed)
        else:
            cache.prefill[key] = prefill_costs(pset, warm_turn_tokens=workload.warm_turn_tokens,
                                               length_moments=tuple(workload.length_moment(k) for k in (1, 2, 3, 4)))
    return cache.prefill[key]


def ceilings(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache | None = None, comfortable: bool = True) -> Ceilings:
    cache = cache or CeilingCache()
    dp = fixed.dp
    warm = warm_of(fixed, workload, knobs, cache)
    setup = decode_setup(fixed, knobs)
    dec = decode_of(setup, workload, knobs, float(knob_value(knobs, "decode_floor")), cache)
    dec_c = decode_of(setup, workload, knobs, float(knob_value(knobs, "comfortable_floor")), cache) if comfortable else None
    missing: dict = {}
    costs = m = None
    lat = sat = math.inf
    if fixed.peak_flops_per_gpu > 0:
        costs = prefill_of(prefill_setup(fixed, knobs), workload, knobs, cache)
        m = moments_from(costs, workload.invalidation)
        r = sub_ratio_of(workload)
        ttft = float(knob_value(knobs, "ttft_limit_s"))
        lat = latency_ceiling_users(m, r, workload.think_time_s, ttft, knobs.a("latency.discipline"))
        sat = saturation_ceiling_users(m, r, workload.think_time_s)
    else:
        need = f"the GPU's dense FLOP/s ({fixed.gpu_key} has none in the catalogue: give --gpu-flops TFLOPS)"
        missing = {"latency": need, "saturation": need}
    values = {
        "cache": float(warm.users.p5),
        "decode": float(dec.n * dp),
        "latency": float(max(0.0, lat) * dp),
        "saturation": float(sat * dp),
    }
    binding = min((k for k in CEILINGS if k not in missing), key=lambda k: values[k])
    return Ceilings(warm, dec, dec_c, costs, m, values["latency"], values["saturation"], setup.spec_speedup, values, binding,
                    missing)
