"""The four ceilings in users (working-set-model.md 2.9), for one deployment and workload:

- cache ceiling   = warm *user* sessions p5 (warm_capacity; x replicas under sticky routing);
- decode ceiling  = the most users whose p95 of simultaneous decoders still meets the floor (planning.load;
                    per replica group, x dp); the seed's rule (every user decoding: the largest n whose
                    per-user p50 meets the floor) is kept beside as the conservative bound;
- latency ceiling = users at which 5% of turns miss the TTFT budget, or 2% more than miss at no load where that
                    is more (planning.load, interference.allowed_slow_share; the seed's:
                    a miss's mean TTFT reaches the limit, M/G/1; per group, x dp);
- saturation      = users at which prefill duty reaches 100% (per group, x dp);
- binding         = the smallest; headroom = each ceiling / the binding one.

Per replica group, everything TP-wide is the group's: b x tp and state x tp bytes, tp x bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from servesize.assumptions import modelled_assumptions
from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.model.hardware import load_host_links
from servesize.planning.decode import (
    ContextBank,
    DecodeCeiling,
    DecodeSetup,
    DecodeSpeed,
    ExpertRouting,
    FloorNeverReached,
    contexts_from,
    decode_ceiling,
    decode_speed_in,
    fill_speeds,
    median_speed,
    tp_efficiency,
)
from servesize.planning.inputs import (
    Fixed,
    Knobs,
    knob_value,
    spec_speedup_of,
    spec_tokens_of,
    sub_ratio_of,
    ttft_queue_budget_s,
)
from servesize.planning.interference import StallLoad, timed_decode_tokens
from servesize.planning.latency import (
    ServiceMoments,
    latency_ceiling_users,
    moments_from,
    request_rate,
    saturation_ceiling_users,
    users_for_rate,
)
from servesize.planning.load import (
    DecodeLoad,
    DecodeLoadSearch,
    StallCheck,
    TtftLoad,
    TtftSearch,
    longest_miss,
    tails_of,
    think_time_of,
)
from servesize.planning.load_models import load_model
from servesize.planning.lru import CHURN_OCCUPANCY, ChurnBound, Evictions, churn_bound
from servesize.planning.prefill import PrefillCosts, PrefillSetup, prefill_costs
from servesize.planning.step_model import (
    DECODE_ROOFLINES,
    EXPERT_KERNEL_RULES,
    KernelEfficiency,
    StepModel,
    StepTerms,
    dequant_share,
    expert_kernel_taken,
    fitted_bandwidth_share,
)
from servesize.planning.warm_capacity import HostLink, WarmCapacity, warm_capacity
from servesize.units import GB
from servesize.workload.draws import RandomBank
from servesize.workload.model import Workload
from servesize.workload.teams import TeamMix  # decode contexts of several teams' users (sizing.teams)

if TYPE_CHECKING:
    from servesize.planning.load import _Tail

CEILINGS = ("cache", "decode", "latency", "saturation")


@frozen
class FloorOutOfReach(Record):
    """The hard floor no batch meets: one user alone decodes slower. The plan then sizes the batch at
    ``fraction`` x the best speed (decode.unreachable_floor_fraction) and says so."""

    floor_tok_s: float
    best_tok_s: float = field(metadata=json_as("one_user_tok_s"))
    fraction: float

    @property
    def sized_at_tok_s(self) -> float:
        return self.best_tok_s * self.fraction

    JSON_EXTRA = ("sized_at_tok_s",)

    def text(self) -> str:
        return (f"the {self.floor_tok_s:g} tok/s floor is out of reach: one user alone decodes at "
                f"{self.best_tok_s:.1f} tok/s (p50), so the batch is sized at {self.sized_at_tok_s:.1f} tok/s, "
                f"{self.fraction:.0%} of that (decode.unreachable_floor_fraction)")


@frozen
class Ceilings:
    warm: WarmCapacity
    decode: DecodeCeiling
    decode_comfortable: DecodeCeiling | None
    prefill: Any     # PrefillCosts, None without the GPU's FLOP/s (then moments is None too)
    moments: Any     # ServiceMoments, or None
    latency_users: float
    saturation_users: float
    spec_speedup: float
    values: dict[str, Any]      # ceiling -> users (floats; Any: web/charts.py builds its rows from them untyped)
    binding: str
    floor_out_of_reach: FloorOutOfReach | None = None
    missing: dict[str, str] = field(default_factory=dict)  # ceiling -> the figure it needs that the inputs lack
    decode_load: DecodeLoad | None = None   # the load model's decode ceiling (None under the seed's rule)
    ttft: TtftLoad | None = None            # the load model's latency ceiling (None under the seed's rule)
    every_user_decode: float = 0.0          # the seed's every-user-decodes ceiling, x dp: the conservative bound
    ttft_samples: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)  # (miss_s, hit_s) prefill draws
    stall: StallLoad | None = field(default=None, compare=False, repr=False)  # interference priced (or None)
    churn: ChurnBound | None = None         # the cache ceiling's LRU bound (None: not priced)

    def headroom(self) -> dict[str, float | None]:
        low = self.values[self.binding]
        return {k: (v / low if low > 0 and k not in self.missing else None) for k, v in self.values.items()}

    def miss_share_at(self, users: float, dp: int, sub_ratio: float, think_s: float) -> float | None:
        """The share of turns whose TTFT exceeds the budget at ``users`` in all (None without the load model)."""
        if self.ttft is None or self.moments is None:
            return None
        rate = request_rate(users / dp, think_s, sub_ratio)
        return self.ttft.share_at(rate, self.moments, *self.ttft_samples)


def decode_setup(fixed: Fixed, knobs: Knobs, bandwidth_efficiency: float | None = None,
                 compute_efficiency: float | None = None) -> DecodeSetup:
    """What one replica group reads and computes per decode step (planning.decode).

    Under ``decode.roofline = memory`` (the seed's) the compute leg and the MTP drafts' own cost are left
    out. ``bandwidth_efficiency`` / ``compute_efficiency`` override the knobs (the plan's bounds)."""
    kernels = kernel_efficiency(fixed, knobs)
    given = bandwidth_efficiency if bandwidth_efficiency is not None else knobs.bandwidth_efficiency
    # the fitted default is the fit's GPUs': on another GPU, at its memory kernels' measured rate (step_model
    # fitted_bandwidth_share); an efficiency given for this deployment is its own
    fitted_share = float(knobs.a("decode.bandwidth_efficiency")) * fitted_bandwidth_share(
        str(knobs.a("step.gpu_memory_kernels")), fixed.memory_kernel_factor)
    bw_eff = min(1.0, kernels.bandwidth * (float(given) if given is not None else fitted_share))
    experts = None
    if fixed.expert_bytes:  # routed experts read at their kernels' own share of the stream's rate
        rule = fixed.expert_kernel_rule
        read_share = kernels.experts  # the fitted MoE efficiency, where no measured kernel rate is taken
        if expert_kernel_taken(rule, knobs.a(rule) if rule else None, fixed.expert_kernel_bytes_per_s):
            # a memory-bound kernel's measured rate is that of the fitted stream: an efficiency given for this
            # deployment moves it as it moves the stream; an SM-bound one (FP4 dequantised) reads at its own rate
            stream = min(1.0, kernels.bandwidth * fitted_share) if EXPERT_KERNEL_RULES[rule][1] else bw_eff
            read_share = dequant_share(fixed.bandwidth_bytes_per_s * stream, fixed.expert_kernel_bytes_per_s)
        experts = ExpertRouting(fixed.expert_bytes, fixed.num_experts, fixed.experts_per_token,
                                union=str(knobs.a("decode.expert_union")), read_share=read_share)
    tp_eff = knobs.tp_efficiency
    if tp_eff is None and knobs.assumptions == "seed":
        tp_eff = tp_efficiency(fixed.tp, knobs.a("decode.tp_efficiency_per_doubling"))
    speedup = spec_speedup_of(fixed, knobs)
    drafts = spec_tokens_of(knobs) if speedup > 1 else 0
    compute: dict[str, float] = {}
    roofline = knobs.a("decode.roofline")
    if roofline not in DECODE_ROOFLINES:
        raise BadInput(f"decode.roofline is one of {', '.join(DECODE_ROOFLINES)}, got {roofline!r}")
    if roofline != "memory":
        # F: every matmul weight once per token, the lm_head included (the embedding is a gather)
        per_draft_params = fixed.mtp_matmul_params + fixed.lm_head_params
        compute = dict(
            peak_flops_per_s=fixed.peak_flops_per_gpu,
            compute_efficiency=float(compute_efficiency if compute_efficiency is not None
                                     else knob_value(knobs, "compute_efficiency")),
            flops_per_token=2.0 * (fixed.gemm_params + fixed.lm_head_params),
            query_tokens_per_step=1.0 + drafts * float(knobs.a("decode.mtp_verified_tokens_per_draft")),
            draft_flops_per_sequence=drafts * 2.0 * per_draft_params,
            draft_bytes_per_step=drafts * (fixed.mtp_bytes + fixed.lm_head_bytes),
            attention_flops_per_context_token=(knobs.a("decode.attention_flops_per_context_token")
                                               * fixed.attention_width * fixed.full_attention_layers),
            window_attention_flops_per_token=(knobs.a("decode.attention_flops_per_context_token")
                                              * fixed.attention_width * fixed.window_attention_layers),
        )
    return DecodeSetup(
        bandwidth_bytes_per_s=fixed.bandwidth_bytes_per_s, weight_bytes_per_step=fixed.weight_bytes_read,
        kv_bytes_per_token_read=fixed.kv_bytes_per_token_rank * fixed.tp,
        state_bytes_per_sequence=fixed.state_bytes_rank * fixed.tp, tp=fixed.tp, experts=experts,
        spec_speedup=speedup,
        bandwidth_efficiency=bw_eff,
        tp_efficiency=tp_eff,
        # sliding/chunked layers read min(L, window) tokens per step (the same form as sparse top-k reads)
        topk_tokens=fixed.window_tokens, topk_bytes_per_token=fixed.window_bytes_per_token_rank * fixed.tp,
        step_overhead_s=step_terms(knobs).overhead(fixed.tp, fixed.layers, fixed.moe_layers),
        sequential=roofline == "sequential",
        **compute,
    )


def step_terms(knobs: Knobs) -> StepTerms:
    """The step model's fixed costs and mixed-step rule (planning.step_model), from the assumptions."""
    return StepTerms(overhead_s=float(knobs.a("decode.step_overhead_s")),
                     overhead_per_layer_s=float(knobs.a("step.overhead_per_layer_s")),
                     overhead_per_tp_doubling_s=float(knobs.a("step.overhead_per_tp_doubling_s")),
                     request_fixed_s=float(knobs.a("step.request_fixed_s")),
                     moe_layer_fixed_s=float(knobs.a("step.moe_layer_fixed_s")),
                     overhead_per_layer_tp_doubling_s=float(knobs.a("step.overhead_per_layer_tp_doubling_s")),
                     mixed=str(knobs.a("step.mixed")),
                     prefill_weight_floor=bool(knobs.a("prefill.weight_floor")))


def step_model_of(fixed: Fixed, knobs: Knobs) -> StepModel:
    """The engine simulator's step times for this deployment: the plan's own setups and step terms."""
    return StepModel(prefill_setup(fixed, knobs), decode_setup(fixed, knobs), step_terms(knobs))


def kernel_efficiency(fixed: Fixed, knobs: Knobs) -> KernelEfficiency:
    """The deployment's kernel factors (weight format, vendor, MoE) on the base efficiencies (planning.step_model)."""
    return KernelEfficiency.of(fixed.weight_format, fixed.vendor, bool(fixed.expert_bytes), knobs.a,
                               peak_dtype=fixed.peak_dtype, fp8_prefill_share=fixed.fp8_prefill_share)


def prefill_setup(fixed: Fixed, knobs: Knobs) -> PrefillSetup:
    kernels = kernel_efficiency(fixed, knobs)
    mfu = min(1.0, kernels.prefill * float(knob_value(knobs, "mfu")))
    tp_eff = knobs.tp_efficiency  # --tp-efficiency, one figure for decode and prefill alike
    if tp_eff is None:
        tp_eff = tp_efficiency(fixed.tp, knobs.a("prefill.tp_efficiency_per_doubling"))
    return PrefillSetup(gemm_params=fixed.gemm_params, attention_width=fixed.attention_width,
                        full_attention_layers=fixed.full_attention_layers, peak_flops_per_gpu=fixed.peak_flops_per_gpu,
                        tp=fixed.tp, tp_efficiency=tp_eff, mfu=mfu, expert_params=fixed.expert_gemm_params,
                        expert_efficiency=kernels.expert_prefill)


class CeilingCache:
    """What the sensitivity scans and sweeps re-use between evaluations of the same deployment.

    - ``banks``: the random numbers of the warm fills, by seed (workload.draws.RandomBank): every
      evaluation realises the same numbers, so a swept workload parameter moves every session
      smoothly (common random numbers) and nothing is drawn twice;
    - ``warm``: warm fills, by what the fill depends on (the sampled workload, not its pacing);
    - ``contexts``: decode context banks, by what the lengths depend on (not coldness);
    - ``decode``: decode ceilings, by setup, floor and bank;
    - ``prefill``: prefill costs, by setup and length distribution;
    - ``ttft_samples`` / ``ttft``: the load model's prefill draws (and their p99.9, ``ttft_longest``; split at a
      budget, ``ttft_tails``), by setup and bank, and its TTFT ceiling, by
      those draws, the moments, the budget and the percentile (a sweep of the decode side leaves them unmoved);
    - ``decode_load``: the load model's decode ceiling (its bisection, kept open: DecodeLoadSearch), by setup,
      bank and the pacing it reads;
    - ``speeds``: the p50 per-user speed at k decoders, by setup and bank (a think-time or TTFT sweep moves
      the load model's fixed points, not the speed curve they read); ``fill_speeds``: every fill's, the same way;
    - ``stalls``: the interference model's stall draws (planning.interference.StallLoad), by the prefill
      setup, the bank, the chunk, the floor and the moments;
    - ``writes``: what a request leaves cached and hits again (``cache_writes``), by the bank, the block, the
      dropped block and the session's shape.
    """

    def __init__(self) -> None:
        # keyed by (everything the value depends on, ...): tuples of mixed fields; a bank is in a key as itself (its
        # identity: the key holds it alive, so a freed bank's id can never name another's values)
        self.banks: dict[tuple[int, bool], RandomBank] = {}
        self.warm: dict[tuple[Any, ...], WarmCapacity] = {}
        self.contexts: dict[tuple[Any, ...], ContextBank] = {}
        self.decode: dict[tuple[Any, ...], DecodeCeiling] = {}
        self.prefill: dict[tuple[Any, ...], PrefillCosts] = {}
        self.ttft_samples: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}  # (miss_s, hit_s) draws
        self.ttft_longest: dict[tuple[Any, ...], float] = {}
        self.ttft_tails: dict[tuple[Any, ...], tuple[_Tail, _Tail]] = {}
        self.ttft: dict[tuple[Any, ...], TtftSearch] = {}
        self.decode_load: dict[tuple[Any, ...], DecodeLoadSearch] = {}
        self.speeds: dict[tuple[DecodeSetup, ContextBank], dict[int, float]] = {}  # (setup, bank) -> k -> p50
        self.fill_speeds: dict[tuple[DecodeSetup, ContextBank], dict[int, np.ndarray]] = {}
        self.stalls: dict[tuple[Any, ...], StallLoad] = {}
        self.writes: dict[tuple[Any, ...], CacheWrites] = {}
        self.cold: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, int]] = {}  # (lengths, cold_s, starts)

    def bank(self, seed: int, uniforms: bool) -> RandomBank:
        key = (int(seed), bool(uniforms))
        if key not in self.banks:
            self.banks[key] = RandomBank(seed, uniforms=uniforms)
        return self.banks[key]


DECODE_SEARCH_LIMIT = 65536  # decoders per replica; past it decode cannot be what binds


def _decode_ceiling(setup: DecodeSetup, bank: ContextBank, floor: float) -> DecodeCeiling:
    """The decode ceiling, or the search limit as a lower bound when the floor is never reached."""
    try:
        return decode_ceiling(setup, None, floor, max_n=DECODE_SEARCH_LIMIT, bank=bank)
    except FloorNeverReached:
        d = Derivation()
        d.given("decode_ceiling", DECODE_SEARCH_LIMIT, unit="decoders",
                note=f"per-user decode stays above {floor:g} tok/s at {DECODE_SEARCH_LIMIT:,} concurrent decoders: "
                     "a lower bound; decode does not bind")
        return DecodeCeiling(DECODE_SEARCH_LIMIT, floor, None, floor, 0, d)


# the host link assumed for a GPU the catalogue gives none (a modelled assumption: the common link of
# current data-centre GPUs; the restore says "(assumed)" beside it)
ASSUMED_HOST_LINK = "pcie5-x16"


def restore_link(fixed: Fixed, knobs: Knobs) -> HostLink:
    """The host link an offloaded session comes back over: the GPU's catalogued link (else PCIe Gen5 x16,
    assumed and said so) at offload.host_link_efficiency of its one-way rate, once per TP rank (each rank
    restores its own share of the KV over its own link)."""
    efficiency = float(knobs.a("offload.host_link_efficiency"))
    if fixed.host_link_bytes_per_s > 0:
        return HostLink(fixed.host_link, fixed.host_link_bytes_per_s, efficiency, fixed.tp, fixed.host_link_source)
    gen5 = load_host_links()[ASSUMED_HOST_LINK]
    return HostLink(f"{gen5['name']} (assumed)", gen5["gbps_per_direction"] * GB, efficiency, fixed.tp,
                    f"assumed: gpus.toml has no host link for {fixed.gpu_key}; {gen5['name']}: {gen5['source']}")


def warm_of(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache) -> WarmCapacity:
    """The warm fill (memoised on what it depends on)."""
    b_group = fixed.kv_bytes_per_token_rank * fixed.tp
    s_group = (fixed.state_bytes_rank + fixed.window_bytes_per_session_rank) * fixed.tp  # resident per warm session
    # everything the fill depends on, the charges and replicas too: one cache may serve several deployments
    link = restore_link(fixed, knobs)
    key = (workload.sampling_key(), fixed.pool_tokens, b_group, s_group, fixed.tp, fixed.dp, knobs.cpu_offload_bytes,
           knobs.sticky_routing, knobs.fills, knobs.draws, knobs.seed, knobs.assumptions, link)
    if key not in cache.warm:
        cache.warm[key] = warm_capacity(workload, fixed.pool_tokens, b_group, s_group,
                                        cpu_offload_bytes=knobs.cpu_offload_bytes, replicas=fixed.dp,
                                        sticky_routing=knobs.sticky_routing, fills=knobs.fills, draws=knobs.draws,
                                        seed=knobs.seed,
                                        pcie_bytes_per_s=link.bytes_per_s, host_link=link,
                                        offload_tier="additive" if knobs.assumptions == "seed" else "inclusive",
                                        bank=cache.bank(knobs.seed, workload.needs_uniforms))
    return cache.warm[key]


def contexts_of(workload: Workload | TeamMix, knobs: Knobs, topk_tokens: int, cache: CeilingCache) -> ContextBank:
    """Decode contexts: fill i's decoders are the first sessions of warm fill i (the same random numbers)."""
    fills = int(knobs.decode_fills or knobs.a("decode.fills"))
    key = (workload.lengths_key(), fills, knobs.seed, topk_tokens)
    if key not in cache.contexts:
        numbers = cache.bank(knobs.seed, workload.needs_uniforms)
        cache.contexts[key] = ContextBank.from_columns(
            lambda c0, c1: workload.full_tokens(numbers.take(0, fills, c0, c1)), fills, topk_tokens)
    return cache.contexts[key]


def decode_of(setup: DecodeSetup, workload: Workload | TeamMix, knobs: Knobs, floor: float,
              cache: CeilingCache) -> DecodeCeiling:
    """The decode ceiling at ``floor`` (memoised on the setup, the floor and the context bank)."""
    bank = contexts_of(workload, knobs, setup.topk_tokens, cache)
    key = (setup, floor, bank)
    if key not in cache.decode:
        cache.decode[key] = _decode_ceiling(setup, bank, floor)
    return cache.decode[key]


def warm_prefill_tokens(fixed: Fixed, workload: Workload, knobs: Knobs) -> float:
    """The tokens a warm turn prefills: its new turn, the part of the block before it that the cache never held (a
    prefix is hit in whole blocks: (block - 1) / 2 tokens on average, the context's end falling anywhere in its last
    block), and the hit's last block where MTP / EAGLE drafts make vLLM compute it again (Fixed.drops_hit_block,
    when the plan prices drafts). The engine simulator does each of these block by block."""
    block = max(int(fixed.block_size), 1)
    dropped = block if fixed.drops_hit_block and spec_speedup_of(fixed, knobs) > 1 else 0
    return float(workload.warm_turn_tokens) + (block - 1) / 2.0 + dropped


def prefill_of(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache) -> PrefillCosts:
    """Prefill costs (a warm turn prefilling ``warm_prefill_tokens``): exact from the workload's length moments, or
    sampled when ``knobs.prefill_samples`` is set."""
    pset, warm = prefill_setup(fixed, knobs), warm_prefill_tokens(fixed, workload, knobs)
    key = (pset, workload.lengths_key(), warm, knobs.prefill_samples, knobs.seed)
    if key not in cache.prefill:
        if knobs.prefill_samples:
            cache.prefill[key] = prefill_costs(pset, sample_contexts=contexts_from(workload), warm_turn_tokens=warm,
                                               samples=knobs.prefill_samples, seed=knobs.seed)
        else:
            cache.prefill[key] = prefill_costs(pset, warm_turn_tokens=warm,
                                               length_moments=tuple(workload.length_moment(k) for k in (1, 2, 3, 4)))
    return cache.prefill[key]


def _prefill_side(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache, bank: ContextBank,
                  exact: bool = True
                  ) -> tuple[PrefillCosts, ServiceMoments, Any, float, Any, tuple[np.ndarray, ...]]:
    """Prefill costs, their moments, the latency and saturation ceilings per group, and the load model's TTFT.

    ``exact=False`` (the load model only): the TTFT search is handed back open (a TtftSearch) and the latency
    ceiling as None, for a caller that narrows it only as far as it needs (``binding_of``)."""
    costs = prefill_of(fixed, workload, knobs, cache)
    m = cold_moments(fixed, workload, knobs, cache, bank, costs)
    r = sub_ratio_of(workload)
    think = think_time_of(workload)
    budget = ttft_queue_budget_s(knobs)
    sat = saturation_ceiling_users(m, r, think)
    if not load_model(knobs).cycles:
        return costs, m, latency_ceiling_users(m, r, think, budget, knobs.a("latency.discipline")), sat, None, ()
    search, samples = _ttft_search(fixed, workload, knobs, cache, bank, m, budget)
    if not exact:
        return costs, m, None, sat, search, samples
    ttft = search.result()
    return costs, m, users_for_rate(ttft.rate_at_ceiling_per_s, think, r), sat, ttft, samples


def cold_shares(workload: Workload, knobs: Knobs) -> tuple[float, float]:
    """(invalidated, started): the shares of requests the plan prices as cold re-prefills and as session starts
    (Workload.cold_shares); under the seed's reading (``workload.session_turnover`` false) no session starts."""
    invalidated, started = workload.cold_shares()
    if not knobs.a("workload.session_turnover"):
        return workload.invalidation, 0.0
    return invalidated, started


def draw_turns(workload: Workload, n: int) -> np.ndarray:
    """Which request of its session each of ``n`` context draws is: the k-th draw request k mod ``session_turns``
    (uniform over a session's requests, as the session generator draws it, simulate/synthetic.py)."""
    return np.arange(n) % max(1, workload.session_turns)


def start_tokens(workload: Workload, lengths: np.ndarray) -> tuple[np.ndarray, float]:
    """(new tokens, cached prior) of the session starts drawn at these context lengths: each draw is its
    session's context at one of its ``session_turns`` requests (``draw_turns``), so the start is that many
    turns' growth earlier (Workload.session_start_tokens); it prefills its context beyond the shared prefix."""
    prefix = workload.user.prefix_tokens
    turns = draw_turns(workload, lengths.size)
    return np.asarray(workload.session_start_tokens(lengths, turns, prefix), dtype=float) - prefix, float(prefix)


def cold_draws(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache, bank: ContextBank
               ) -> tuple[np.ndarray, np.ndarray, int]:
    """The decode's own context draws (fills x 128), each one's cold prefill, and how many of them (the first)
    are session starts: a start prefills its first prompt beyond the shared prefix (``start_tokens``: that many
    turns before its drawn context, as the session generator draws it); the rest re-prefill the whole context. The starts'
    count is their share of the cold requests (Workload.cold_shares)."""
    pset = prefill_setup(fixed, knobs)
    invalidated, started = cold_shares(workload, knobs)
    key = (pset, bank, workload.warm_turn_tokens, workload.output_tokens, workload.user.prefix_tokens,
           invalidated, started)
    if key not in cache.cold:
        lengths = bank.matrix(128).ravel()
        cold = np.asarray(pset.miss_seconds(lengths), dtype=float)
        starts = int(round(lengths.size * started / (invalidated + started))) if started > 0 else 0
        if starts:
            cold[:starts] = pset.seconds(*start_tokens(workload, lengths[:starts]))
        cache.cold[key] = (lengths, cold, starts)
    return cache.cold[key]


def cold_moments(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache, bank: ContextBank,
                 costs: PrefillCosts) -> ServiceMoments:
    """The prefill queue's service moments: warm hits and cold prefills at the workload's shares, session
    starts (``cold_draws``) folded into the cold leg."""
    invalidated, started = cold_shares(workload, knobs)
    if started <= 0:
        return moments_from(costs, invalidated)
    _lengths, cold, starts = cold_draws(fixed, workload, knobs, cache, bank)
    first = cold[:starts]
    return moments_from(costs, invalidated, started, float(first.mean()), float((first ** 2).mean()))


def _ttft_search(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache, bank: ContextBank,
                 m: ServiceMoments, budget: float) -> tuple[TtftSearch, tuple[np.ndarray, np.ndarray]]:
    """The load model's TTFT search over the decode's own context draws, one per draws, moments, budget and
    percentile (kept open in ``cache.ttft``: a later caller resumes it), and those draws."""
    pset = prefill_setup(fixed, knobs)
    warm = warm_prefill_tokens(fixed, workload, knobs)
    key = (pset, bank, warm, workload.output_tokens, cold_shares(workload, knobs), workload.user.prefix_tokens)
    if key not in cache.ttft_samples:
        lengths, cold, _starts = cold_draws(fixed, workload, knobs, cache, bank)
        cache.ttft_samples[key] = (cold, np.asarray(pset.hit_seconds(lengths, warm), dtype=float))
    miss_draws, hit_draws = samples = cache.ttft_samples[key]

    def longest() -> float:  # the draws' p99.9, once, when a search over them is finished
        if key not in cache.ttft_longest:
            cache.ttft_longest[key] = longest_miss(miss_draws)
        return cache.ttft_longest[key]

    percentile = float(knobs.a("load.percentile"))
    if (key, m, budget, percentile) not in cache.ttft:
        if (key, budget) not in cache.ttft_tails:  # an invalidation step moves the moments, not the draws
            cache.ttft_tails[(key, budget)] = tails_of(miss_draws, hit_draws, budget)
        cache.ttft[(key, m, budget, percentile)] = TtftSearch(m, miss_draws, hit_draws, budget, percentile,
                                                              longest_miss_s=longest,
                                                              tails=cache.ttft_tails[(key, budget)])
    return cache.ttft[(key, m, budget, percentile)], samples


def decode_load_of(setup: DecodeSetup, k_star: int, workload: Workload, knobs: Knobs, bank: ContextBank,
                   request_s: float, lower_bound: bool | None = None, cache: CeilingCache | None = None,
                   stall: StallLoad | None = None) -> DecodeLoad:
    """The load model's decode ceiling per replica over the plan's own context bank (k*: the decoders that
    meet the floor; ``stall``: interference priced, planning.interference); memoised in ``cache`` on everything
    it reads (a sweep of the prefill side leaves it)."""
    return decode_load_search_of(setup, k_star, workload, knobs, bank, request_s, lower_bound, cache, stall).result()


def decode_load_search_of(setup: DecodeSetup, k_star: int, workload: Workload, knobs: Knobs, bank: ContextBank,
                          request_s: float, lower_bound: bool | None = None,
                          cache: CeilingCache | None = None, stall: StallLoad | None = None) -> DecodeLoadSearch:
    """``decode_load_of``'s bisection, held open in ``cache`` (a later caller resumes it)."""
    bound = k_star >= DECODE_SEARCH_LIMIT if lower_bound is None else lower_bound
    args = (k_star, workload.output_tokens, think_time_of(workload), request_s, sub_ratio_of(workload),
            float(knobs.a("load.percentile")))
    key = (setup, bank, *args, bound, id(stall))
    if cache is not None and key in cache.decode_load:
        return cache.decode_load[key]
    speeds = cache.speeds.setdefault((setup, bank), {}) if cache is not None else {}
    per_fill = cache.fill_speeds.setdefault((setup, bank), {}) if cache is not None else {}

    def speed_at(k: int) -> float:  # the p50 at k decoders: one setup and bank give one curve, whatever the pacing
        if k not in speeds:
            speeds[k] = median_speed(setup, bank, k)
        return speeds[k]

    def speeds_of(k: int) -> np.ndarray:  # every fill's speed at k decoders (the stall model's decode times)
        if k not in per_fill:
            per_fill[k] = fill_speeds(setup, bank, k)
        return per_fill[k]

    check = None if stall is None else StallCheck(stall, speeds_of)
    search = DecodeLoadSearch(speed_at, *args, lower_bound=bound, stall=check)
    if cache is not None:
        cache.decode_load[key] = search
    return search


STALL_DRAWS = 4096  # context draws the stall distribution is taken over (of the TTFT's fills x 128)
# ... and of them, those an evicted turn's re-prefill is priced over (every fourth): the leg weighs a few percent of the
# prefills where it decides a ceiling; the 21 validation rows' users came out the same as with all 4,096, two decode
# ceilings that do not bind within 1% (the MoE's chat 383 -> 380, TP 4's 922 -> 924; 2026-12-07)
EVICTED_DRAWS = 1024


def stall_of(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache, bank: ContextBank,
             m: ServiceMoments | None, floor: float, costs: PrefillCosts | None = None,
             churn: ChurnBound | None = None) -> StallLoad | None:
    """The interference model's inputs (planning.interference), or None where it is not priced: the seed's
    reading (``load.interference`` false), or no prefill side (no FLOP/s). Each request's stall is priced by the
    step model over the decode's own context draws (the TTFT's draws): a cold re-prefill of the whole context,
    or the warm tail on top of it; with ``churn`` and ``costs`` (``load.evicted_prefill``), the returning turns
    the pool evicts at a load re-prefill their whole context too (planning.lru Evictions)."""
    if m is None or not knobs.a("load.interference") or fixed.peak_flops_per_gpu <= 0:
        return None
    steps = step_model_of(fixed, knobs)
    chunk = int(fixed.chunk_tokens)
    warm = warm_prefill_tokens(fixed, workload, knobs)
    spread = timed_decode_tokens(workload.output_tokens, workload.output_spread)
    key = (prefill_setup(fixed, knobs), steps.decode, steps.terms, bank, warm, chunk,
           float(floor), workload.output_tokens, spread, m, cold_shares(workload, knobs), workload.user.prefix_tokens)
    if key not in cache.stalls:
        lengths, starts = _stall_draws(fixed, workload, knobs, cache, bank)
        cold = np.asarray(steps.stall_s(lengths, 0.0, chunk), dtype=float)
        if starts:
            new, prior = start_tokens(workload, lengths[:starts])
            cold[:starts] = steps.stall_s(new, prior, chunk)
        cache.stalls[key] = StallLoad(
            output_tokens=float(workload.output_tokens), floor_tok_s=float(floor),
            tokens_per_step=float(steps.tokens_per_decode_step),
            chunk_stall_s=float(steps.stall_s(chunk, 0.0, chunk)), miss_rate=float(m.miss_rate),
            miss_stall_s=cold,
            hit_stall_s=np.asarray(steps.stall_s(np.full(lengths.shape, warm), lengths, chunk), dtype=float),
            mean_service_s=float(m.mean_s), second_moment_s2=float(m.second_moment_s2), decode_spread=spread)
    base = cache.stalls[key]
    if churn is None or costs is None or not math.isfinite(churn.users) or not knobs.a("load.evicted_prefill"):
        return base
    # the same stalls with the returning turns the pool evicts at a load (the base's lattices and the evicted
    # turns' pricing are shared: replace keeps ``_shared``)
    evicts = (key, churn.pool_tokens, churn.new_tokens_per_request, churn.requests_per_user_s,
              churn.reread_tokens_per_request, think_time_of(workload), workload.think_time_sigma, costs.hit_s, costs.hit_s2,
              workload.reuse_tokens)
    if evicts not in cache.stalls:
        # an evicted returning turn prefills from scratch what a warm one found cached and its new part on top: the
        # context and the warm turn (its service the cold leg's at L plus the warm leg's: exactly additive)
        setup = prefill_setup(fixed, knobs)

        def pricing(prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return steps.stall_s(prompts, 0.0, chunk), setup.miss_seconds(prompts)

        lengths, _ = _stall_draws(fixed, workload, knobs, cache, bank)
        # a lone request's draw is its whole prompt (a trace's prompt lengths): evicted, it prefills that again
        again = 0.0 if workload.reuse_tokens is not None else warm
        cache.stalls[evicts] = replace(base, evictions=Evictions(churn, workload),
                                       evicted_prompts=lengths[::max(1, lengths.size // EVICTED_DRAWS)] + again,
                                       evicted_pricing=pricing, hit_service_s=(costs.hit_s, costs.hit_s2))
    return cache.stalls[evicts]


def _stall_draws(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache,
                 bank: ContextBank) -> tuple[np.ndarray, int]:
    """The stall model's context draws (every stride-th of the TTFT's own, ``STALL_DRAWS`` of them) and how many of
    them start a session (the first: they keep their share)."""
    lengths, _cold, starts = cold_draws(fixed, workload, knobs, cache, bank)
    stride = max(1, lengths.size // STALL_DRAWS)
    return lengths[::stride], -(-starts // stride)


# the context draws ``cache_writes`` averages over: the first 16 of each fill's (6,400 at 400 fills); its four means
# came within 2% of 128 columns' on the presets for Qwen 3.6 27B and Qwen3-30B-A3B on an H200 (2026-12-07, the
# 27B's chat re-read aside: 6%, a tenth of its writes), at an eighth of the time (3.1 ms a plan at 128 columns)
WRITES_COLUMNS = 16


class CacheWrites(NamedTuple):
    """What one request leaves in the prefix cache, on average (``cache_writes``): KV tokens and recurrent-state sets
    newly cached, and those of its session's own that it hits and holds again (a returning turn's)."""

    tokens: float
    states: float
    reread_tokens: float
    reread_states: float


def cache_writes(fixed: Fixed, workload: Workload, knobs: Knobs, bank: ContextBank) -> CacheWrites:
    """What one request leaves newly cached, and what of its session's it hits again, over the plan's context draws.

    vLLM hashes a block into the prefix cache only once it is full, the prompt's as the prefill fills them and the
    reply's as the decode does, so a request writes the full blocks between what its session had cached (its
    previous prompt and reply: the drawn prompt less the new turn) and its prompt with its reply; a chat turn that
    ends inside the block it started in writes nothing. A cold re-prefill writes its whole context's blocks, a
    session's start those beyond the shared prefix (``start_tokens``). On a hybrid model ('align' mode) a state is
    kept where the prefill's chunk ends on a block boundary, its prompt's last full block (the one before it where
    drafts drop a hit's last block: Fixed.drops_hit_block), when that boundary is new, and at each boundary its reply
    crosses: the engine simulator's ``_cache_state``. With a block of one token this is the tokens themselves.
    A warm turn hits its session's cached blocks beyond the shared prefix (less the dropped one) and the state at
    the hit's end. Where sessions turn over, a returning turn is priced at its session's prompt as the session
    generator makes it (Workload.session_start_tokens, grown by a turn and a reply a request): a drawn context too
    short for the turns before it is its session's longer prompt there."""
    block = max(int(fixed.block_size), 1)
    drop = 1 if fixed.drops_hit_block and spec_speedup_of(fixed, knobs) > 1 else 0
    invalidated, started = cold_shares(workload, knobs)
    lengths = bank.matrix(WRITES_COLUMNS).ravel()
    out = float(workload.output_tokens)

    def blocks_of(prompt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The full blocks of these prompts, and of each with its reply."""
        return np.floor(prompt / block), np.floor((prompt + out) / block)

    def writes(blocks: np.ndarray, ends: np.ndarray, had: np.ndarray | float) -> tuple[float, float]:
        """(KV tokens, states) written by requests of these prompts (``blocks_of``) whose session had ``had`` full
        blocks cached."""
        kept = blocks - drop
        new_state = (kept >= 1) & (kept > had)
        return float(block * np.maximum(ends - had, 0.0).mean()), float(new_state.mean() + (ends - blocks).mean())

    new, prefix = start_tokens(workload, lengths)
    first = new + prefix  # each draw's session's first prompt
    if started > 0 and workload.session_turns > 1:
        # a returning turn's prompt is its session's (the session generator's): its first grown k turns and replies,
        # so at least the prefix and k + 1 turns
        grow = float(workload.output_tokens + workload.warm_turn_tokens)
        k = draw_turns(workload, lengths.size)
        returning = k > 0
        prompts = np.minimum(first[returning] + k[returning] * grow, float(workload.max_model_len))
    else:
        prompts = lengths
    had = np.floor(np.maximum(prompts - float(workload.warm_turn_tokens), 0.0) / block)
    shares = (1.0 - invalidated - started, invalidated, started)
    none = (0.0, 0.0)
    mine = blocks_of(prompts)
    warm = writes(*mine, had) if shares[0] > 0 else none
    cold = writes(*mine, 0.0) if shares[1] > 0 else none
    start = writes(*blocks_of(first), math.floor(prefix / block)) if shares[2] > 0 else none
    hit = np.maximum(had - (drop + math.floor(prefix / block)), 0.0)  # its own, beyond the prefix
    return CacheWrites(sum(w * s[0] for w, s in zip(shares, (warm, cold, start))),
                       sum(w * s[1] for w, s in zip(shares, (warm, cold, start))),
                       shares[0] * block * float(hit.mean()), shares[0] * float((hit > 0).mean()))


def churn_of(fixed: Fixed, workload: Workload, knobs: Knobs, floor: float, m: ServiceMoments | None,
             cache: CeilingCache) -> ChurnBound | None:
    """The cache ceiling's bound under LRU churn (planning.lru), per replica; None under the seed's reading.

    A request writes the full blocks of its prefilled tokens and its output (``cache_writes``: a warm tail, a cold
    re-prefill of the whole context, or a session's start beyond the shared prefix, at Workload.cold_shares), and
    on a hybrid model the recurrent states it keeps, each a block in every state group; a returning turn holds its
    session's blocks through its pause before it (``cache.churn_occupancy``). The cycle is the mean think time, the
    prefill's mean service and a decode at the floor (the slowest comfortable one)."""
    if not knobs.a("cache.churn"):
        return None
    out, shares = float(workload.output_tokens), cold_shares(workload, knobs)
    bank = contexts_of(workload, knobs, 0, cache)
    key = (bank, fixed.block_size, fixed.drops_hit_block, spec_speedup_of(fixed, knobs) > 1, shares,
           workload.warm_turn_tokens, workload.output_tokens, workload.user.prefix_tokens, workload.session_turns,
           workload.max_model_len)
    if key not in cache.writes:
        cache.writes[key] = cache_writes(fixed, workload, knobs, bank)
    w = cache.writes[key]
    state = 0.0
    if fixed.state_bytes_rank and fixed.kv_bytes_per_token_rank:  # a state set in token-equivalents
        state = fixed.state_bytes_rank / fixed.kv_bytes_per_token_rank
    rule = str(knobs.a("cache.churn_occupancy"))
    if rule not in CHURN_OCCUPANCY:
        raise BadInput(f"cache.churn_occupancy is one of {', '.join(CHURN_OCCUPANCY)}, got {rule!r}")
    reread = w.reread_tokens + w.reread_states * state if rule == "last_access" else 0.0
    cycle = think_time_of(workload) + (m.mean_s if m is not None else 0.0) + out / floor
    offload = knobs.cpu_offload_bytes / (fixed.kv_bytes_per_token_rank * fixed.tp) if knobs.cpu_offload_bytes else 0.0
    q = float(knobs.a("load.percentile"))
    pause = workload.think_time_quantile_s(q / 100.0)
    return churn_bound(float(fixed.pool_tokens) + offload, w.tokens + w.states * state, (1.0 + sub_ratio_of(workload)) / cycle,
                       pause, q, returning=workload.session_turns != 1 or not shares[1],
                       reread_tokens_per_request=reread, held_pause_s=workload.think_time_below_s(pause))


def load_ceilings_per_replica(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache,
                              setup: DecodeSetup, k_star: int, lower_bound: bool = False, latency: bool = True
                              ) -> tuple[float, float | None] | None:
    """One replica's decode and latency ceilings in users under the load model, as ``ceilings`` finds them
    (for the teams and fleet paths); None under the seed's every-user rule; latency None without FLOP/s or
    when not asked for (``latency=False``: the TTFT search is not run, the prefill moments alone are)."""
    if not load_model(knobs).cycles or not 1 <= k_star < DECODE_SEARCH_LIMIT:
        return None
    bank = contexts_of(workload, knobs, setup.topk_tokens, cache)
    lat = m = costs = None
    request_s = 0.0
    if fixed.peak_flops_per_gpu > 0:
        if latency:
            costs, m, lat, _sat, _ttft, _samples = _prefill_side(fixed, workload, knobs, cache, bank)
        else:
            costs = prefill_of(fixed, workload, knobs, cache)
            m = cold_moments(fixed, workload, knobs, cache, bank, costs)
        request_s = m.mean_s
    floor = float(knob_value(knobs, "decode_floor"))
    churn = churn_of(fixed, workload, knobs, floor, m, cache)
    stall = stall_of(fixed, workload, knobs, cache, bank, m, floor, costs, churn)
    load = decode_load_of(setup, k_star, workload, knobs, bank, request_s, lower_bound, cache, stall)
    return float(load.users), None if lat is None else float(max(0.0, lat))


class _Parts(NamedTuple):
    """What every ceiling is computed from, the searches still open: ``ceilings`` finishes them, ``binding_of``
    narrows them only as far as deciding the binding needs. The one place the plan's ceilings are put together
    (a NamedTuple: made a few hundred times a plan, never kept)."""

    warm: WarmCapacity
    setup: DecodeSetup
    dec: DecodeCeiling
    out_of_reach: FloorOutOfReach | None
    bank: ContextBank
    costs: PrefillCosts | None
    m: ServiceMoments | None
    lat: float              # the latency ceiling per group, where no search is left open (the seed's rule), else inf
    sat: float
    search: TtftSearch | None  # the load model's TTFT search, open (None under the seed's rule or without FLOP/s)
    samples: tuple[np.ndarray, ...]
    stall: StallLoad | None
    churn: ChurnBound | None
    missing: dict[str, str]

    def values(self, decode_users: float, latency_users: float, dp: int) -> dict[str, float]:
        """Each ceiling in users, decode and latency per replica as given (``_values``)."""
        return _values(self.warm, decode_users, latency_users, self.sat, dp, self.churn)


def _parts(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache) -> _Parts:
    warm = warm_of(fixed, workload, knobs, cache)
    setup = decode_setup(fixed, knobs)
    dec, out_of_reach = decode_at_floor(setup, workload, knobs, cache)
    bank = contexts_of(workload, knobs, setup.topk_tokens, cache)
    missing: dict[str, str] = {}
    costs = m = search = None
    samples: tuple[np.ndarray, ...] = ()
    lat = sat = math.inf
    if fixed.peak_flops_per_gpu > 0:
        costs, m, lat_or_none, sat, search, samples = _prefill_side(fixed, workload, knobs, cache, bank, exact=False)
        lat = math.inf if lat_or_none is None else lat_or_none
    else:
        need = f"the GPU's dense FLOP/s ({fixed.gpu_key} has none in the catalogue: give --gpu-flops TFLOPS)"
        missing = {"latency": need, "saturation": need}
    churn = churn_of(fixed, workload, knobs, float(knob_value(knobs, "decode_floor")), m, cache)
    stall = stall_of(fixed, workload, knobs, cache, bank, m, dec.floor_tok_s, costs, churn)
    return _Parts(warm, setup, dec, out_of_reach, bank, costs, m, lat, sat, search, samples, stall, churn, missing)


def lowest_ceiling(values: Mapping[str, float], among: Iterable[str] = CEILINGS) -> str:
    """The binding ceiling: the lowest of ``among`` (ceiling names; default all four), in CEILINGS' order on a
    tie the first in ``among``'s order. The one binding rule: the plan's, ``binding_of``'s narrowing, the teams' and
    the disaggregated layout's (its six ceilings) read it."""
    return min(among, key=lambda k: values[k])


def ceilings(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache | None = None, comfortable: bool = True) -> Ceilings:
    cache = cache or CeilingCache()
    p = _parts(fixed, workload, knobs, cache)
    dec_c = decode_of(p.setup, workload, knobs, float(knob_value(knobs, "comfortable_floor")), cache) if comfortable else None
    ttft, lat = None, p.lat
    if p.search is not None:  # the load model's TTFT ceiling, its search finished
        ttft = p.search.result()
        lat = users_for_rate(ttft.rate_at_ceiling_per_s, think_time_of(workload), sub_ratio_of(workload))
    load, decode_users = _decode_users(p.setup, p.dec, workload, knobs, p.bank, p.m, cache, p.stall)
    values = p.values(decode_users, lat, fixed.dp)
    binding = lowest_ceiling(values, [k for k in CEILINGS if k not in p.missing])
    return Ceilings(p.warm, p.dec, dec_c, p.costs, p.m, values["latency"], values["saturation"], p.setup.spec_speedup,
                    values, binding, p.out_of_reach, p.missing, decode_load=load, ttft=ttft,
                    every_user_decode=float(p.dec.n * fixed.dp), ttft_samples=p.samples, stall=p.stall, churn=p.churn)


# binding_of narrows the TTFT search in these steps, asking at each whether latency may still bind (each step
# resumes the one before, so a step costs only the evaluations it adds: a finer ladder stops sooner, never later)
BINDING_RATE_TOLS = (0.9, 0.6, 0.4, 0.25, 0.15, 0.08, 0.04, 0.02, 0.01, 3e-3, 1e-3, 1e-4, 1e-6)
# ... and from this step on, while latency may still bind, the decode bisection is probed at the latency's low end
# (a wider bracket's low end lies far under the decode ceiling, and a probe there only spends an evaluation)
DECODE_PROBE_TOL = 0.15


def binding_of(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache) -> str:
    """``ceilings(..., comfortable=False).binding``, with the load model's two searches taken only as far as
    deciding the binding needs. The decode bisection runs until its admissible end (a user count the ceiling
    is at least) passes the cache or saturation ceiling, when decode cannot bind; the TTFT search is narrowed
    in the steps of BINDING_RATE_TOLS, and at each, when the latency ceiling at the bracket's low end (a rate
    the search has shown to meet the target, so no more than the ceiling's) already exceeds another ceiling,
    latency cannot bind; once the bracket is within DECODE_PROBE_TOL, the decode bisection is probed at its ends
    (decode strictly under the low end: latency does not bind; above the high end: decode does not), and when the
    latency ceiling at the bracket's high end lies under every other, latency binds. Otherwise each is finished
    as ``ceilings`` finishes it (the same iteration resumed): the same answer as ``ceilings``, with fewer
    evaluations on a sensitivity scan."""
    if fixed.peak_flops_per_gpu <= 0 or not load_model(knobs).cycles:
        return ceilings(fixed, workload, knobs, cache, comfortable=False).binding
    dp = fixed.dp
    p = _parts(fixed, workload, knobs, cache)
    assert p.search is not None and p.m is not None  # the load model with FLOP/s leaves its TTFT search open
    search, m = p.search, p.m
    think, r = think_time_of(workload), sub_ratio_of(workload)
    others = p.values(float(p.dec.n), 0.0, dp)  # decode as the every-user figure, until the load model's
    del others["latency"]

    def latency_at(rate: float) -> float:
        return p.values(0.0, users_for_rate(rate, think, r), dp)["latency"]

    def decode_at(users: float) -> float:
        return p.values(users, 0.0, dp)["decode"]

    bisection = None
    if 1 <= p.dec.n < DECODE_SEARCH_LIMIT:  # the load model prices decode (as _decode_users decides)
        bisection = decode_load_search_of(p.setup, p.dec.n, workload, knobs, p.bank, m.mean_s, cache=cache, stall=p.stall)
        users = _decode_against(bisection, min(others["cache"], others["saturation"]) / dp)
        if users is None:
            del others["decode"]  # the ceiling exceeds the cache or saturation one: decode does not bind
        else:
            others["decode"] = decode_at(users)
    decided = _latency_bracketed(search, bisection, others, latency_at, decode_at, dp)
    if decided is not None:
        return decided
    others["latency"] = latency_at(search.result().rate_at_ceiling_per_s)
    if "decode" in others and bisection is not None:
        users = _decode_against(bisection, others["latency"] / dp)
        if users is None:
            del others["decode"]  # above the latency ceiling: decode does not bind
        else:
            others["decode"] = decode_at(users)
    return lowest_ceiling(others, [k for k in CEILINGS if k in others])


def _latency_bracketed(search: TtftSearch, bisection: DecodeLoadSearch | None, others: dict[str, float],
                       latency_at: Callable[[float], float], decode_at: Callable[[float], float], dp: int) -> str | None:
    """The binding ceiling, decided from the TTFT search's bracket in the steps of BINDING_RATE_TOLS (None when
    the ladder ends undecided). ``others``: the other ceilings (decode as an upper bound while its bisection is
    open), updated in place as the decode probes learn; ``latency_at(rate)``, ``decode_at(users per replica)``:
    the ceilings' values."""

    def lowest_other() -> str:
        return lowest_ceiling(others, [k for k in CEILINGS if k in others])

    for tol in BINDING_RATE_TOLS:
        lo_rate, hi_rate = search.rate_bounds(tol)
        lat_lo = latency_at(lo_rate)
        if lat_lo > min(others.values()):
            return lowest_other()  # latency does not bind
        if bisection is not None and "decode" in others and tol <= DECODE_PROBE_TOL:
            # decode is the one ceiling still open beside latency: probe it at the latency's low end (at most two
            # probes of its bisection); strictly below, latency does not bind, and latency need not be finished
            users = _decode_against(bisection, lat_lo / dp)
            if users is not None:
                others["decode"] = decode_at(users)
                if lat_lo > others["decode"]:
                    return lowest_other()
            elif bisection.users_at_least(latency_at(hi_rate) / dp):
                del others["decode"]  # above latency's high end too (one probe): decode does not bind
        if ("decode" not in others or bisection is None) and latency_at(hi_rate) < min(others.values()):
            return "latency"  # the exact latency ceiling lies at or under its high end: below every other
    return None


def _decode_against(bisection: DecodeLoadSearch, users: float) -> float | None:
    """Where the decode ceiling (per replica) lies against another ceiling's ``users``, in at most two probes of
    its bisection: None when above it; otherwise a figure that orders the two as the exact ceiling would (an upper
    bound strictly below ``users``, or the exact ceiling when it equals ``users``: a tie)."""
    if bisection.users_at_least(users):
        return None
    # at most users: is it at most ceil(users) - 1 (strictly below), or equal to it (then lo = hi - 1, exact)?
    bisection.users_at_least(math.ceil(users) - 1)
    return float(bisection.hi - 1)


def _decode_users(setup: DecodeSetup, dec: DecodeCeiling, workload: Workload, knobs: Knobs, bank: ContextBank,
                  m: ServiceMoments | None, cache: CeilingCache,
                  stall: StallLoad | None = None) -> tuple[DecodeLoad | None, float]:
    """The load model's decode ceiling (None under the seed's rule) and the decode ceiling's users per replica."""
    # a decode that never binds (k* at the search limit) or serves no one stays as the every-user figure says
    if load_model(knobs).cycles and 1 <= dec.n < DECODE_SEARCH_LIMIT:
        load = decode_load_of(setup, dec.n, workload, knobs, bank, 0.0 if m is None else m.mean_s, cache=cache,
                              stall=stall)
        return load, float(load.users)
    return None, float(dec.n)


def _values(warm: WarmCapacity, decode_users: float, lat: float, sat: float, dp: int,
            churn: ChurnBound | None = None) -> dict[str, float]:
    cache = float(warm.users.p5) if churn is None else churn.capped(float(warm.users.p5), dp)
    return {
        "cache": cache,
        "decode": decode_users * dp,
        "latency": float(max(0.0, lat) * dp),
        "saturation": float(sat * dp),
    }


def decode_at_floor(setup: DecodeSetup, workload: Workload | TeamMix, knobs: Knobs,
                    cache: CeilingCache) -> tuple[DecodeCeiling, FloorOutOfReach | None]:
    """The decode ceiling at the hard floor, or, when one user alone misses it, at the comfortable speed
    the hardware can give (a fraction of its best), never a silent ceiling of 0."""
    floor = float(knob_value(knobs, "decode_floor"))
    dec = decode_of(setup, workload, knobs, floor, cache)
    if dec.n > 0:
        return dec, None
    out = FloorOutOfReach(floor, float(dec.p50_one_more_tok_s), float(knobs.a("decode.unreachable_floor_fraction")))
    return decode_of(setup, workload, knobs, out.sized_at_tok_s, cache), out


@frozen
class DecodePoint:
    """Per-user decode at n decoders per replica: the p50, and its bounds over the assumption brackets."""

    n: int
    speed: DecodeSpeed
    low_tok_s: float
    high_tok_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"concurrent_decoders": self.n, "per_user_tok_s_p50": self.speed.p50_tok_s,
                "bounds_tok_s": [self.low_tok_s, self.high_tok_s], "bound": self.speed.bound,
                "compute_over_memory": self.speed.compute_share}


def efficiency_bracket(knobs: Knobs, knob: str, assumption_name: str) -> tuple[float, float]:
    """(low, high) of a modelled efficiency: the assumption's bracket, or the value given (or the seed's) both ends."""
    given = getattr(knobs, knob)
    if given is not None or knobs.assumptions == "seed":
        value = float(knob_value(knobs, knob))
        return value, value
    entry = modelled_assumptions()[assumption_name]
    return float(entry.get("low", entry["default"])), float(entry.get("high", entry["default"]))


def decode_points(fixed: Fixed, workload: Workload, knobs: Knobs, ns: Iterable[int], cache: CeilingCache) -> tuple[DecodePoint, ...]:
    """Per-user speed at each n (per replica), with bounds: the low and high ends of the bandwidth and compute
    efficiency brackets (data/assumptions.toml), the rest of the plan as it is."""
    setup = decode_setup(fixed, knobs)
    bank = contexts_of(workload, knobs, setup.topk_tokens, cache)
    bw_lo, bw_hi = efficiency_bracket(knobs, "bandwidth_efficiency", "decode.bandwidth_efficiency")
    c_lo, c_hi = efficiency_bracket(knobs, "compute_efficiency", "decode.compute_efficiency")
    low = decode_setup(fixed, knobs, bandwidth_efficiency=bw_lo, compute_efficiency=c_lo)
    high = decode_setup(fixed, knobs, bandwidth_efficiency=bw_hi, compute_efficiency=c_hi)
    points = []
    for n in sorted({int(max(1, n)) for n in ns}):
        speed = decode_speed_in(setup, bank, n)
        points.append(DecodePoint(n, speed, median_speed(low, bank, n), median_speed(high, bank, n)))
    return tuple(points)
