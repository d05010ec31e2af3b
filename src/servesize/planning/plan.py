"""The planner: warm users, decode, latency and saturation as four ceilings in users (working-set-model.md 2.9).

Wires the pieces together for one deployment:

- memory (engine budget) -> one replica's KV pool in tokens (or a measured pool: --pool-tokens,
  a calibration file), b = KV bytes per token per rank, and the recurrent-state charge per warm
  session = sum over the GDN/Mamba groups of page_bytes x group_size (one cached state block per
  group: every layer of a group holds one page for the session);
- cache ceiling   = warm *user* sessions p5 (warm_capacity; x replicas under sticky routing);
- decode ceiling  = the largest n whose per-user p50 meets the floor (per replica group, x dp);
- latency ceiling = users at which a miss's mean TTFT reaches the limit (M/G/1, per group, x dp);
- saturation      = users at which prefill duty reaches 100% (per group, x dp);
- binding         = the smallest; headroom = each ceiling / the binding one.

Per replica group, everything TP-wide is the group's: b x tp and state x tp bytes, tp x bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any


from servesize.model.architecture import CHUNKED, FULL, GDN, MAMBA, MLA, SLIDING
from servesize.assumptions import assumption, modelled_assumptions
from servesize.planning.decode import (DecodeSetup, ExpertRouting, contexts_from, decode_ceiling, dense_weights_read_per_step, mtp_speedup)
from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.planning.latency import latency_ceiling_users, latency_report, moments_from, saturation_ceiling_users
from servesize.planning.prefill import PrefillSetup, prefill_costs
from servesize.units import GiB
from servesize.planning.warm_capacity import DEFAULT_PCIE_BYTES_PER_S, warm_capacity
from servesize.workload.model import Workload

CEILINGS = ("cache", "decode", "latency", "saturation")
STATE_KINDS = (GDN, MAMBA)
NOT_READ_IN_DECODE = ("vision", "mtp")  # text decode never streams the vision tower; the MTP head is the draft


@dataclass(frozen=True)
class Knobs:
    """Every modelled choice the planner takes; None = the assumption's value for ``assumptions``."""

    assumptions: str = "default"           # 'default' | 'seed'
    bandwidth_efficiency: float | None = None
    tp_efficiency: float | None = None
    mtp_speedup: float | None = None
    spec_acceptance: float | None = None
    spec_tokens: int | None = None
    decode_floor: float | None = None
    comfortable_floor: float | None = None
    mfu: float | None = None
    ttft_limit_s: float | None = None
    cpu_offload_bytes: float = 0.0
    sticky_routing: bool = True
    fills: int = 1500
    draws: int = 2000
    seed: int = 0
    decode_fills: int | None = None
    prefill_samples: int | None = None

    def a(self, name: str):
        return assumption(name, "seed" if self.assumptions == "seed" else "default")


# the flag each knob comes from, for the assumption table
_KNOB_SOURCE = {
    "bandwidth_efficiency": ("decode.bandwidth_efficiency", "--bandwidth-efficiency"),
    "decode_floor": ("decode.floor_hard_tok_s", "--decode-floor"),
    "comfortable_floor": ("decode.floor_comfortable_tok_s", "--comfortable-floor"),
    "mfu": ("prefill.mfu", "--mfu"),
    "ttft_limit_s": ("latency.ttft_limit_s", "--ttft-limit"),
}


@dataclass(frozen=True)
class Fixed:
    """What the memory report fixes for the plan: bytes, pool, topology, hardware."""

    name: str
    hf_id: str
    tp: int
    dp: int
    n_gpu: int
    gpu_key: str
    bandwidth_bytes_per_s: float
    peak_flops_per_gpu: float
    peak_dtype: str
    tdp_w: float | None
    pool_tokens: float
    pool_source: str
    kv_bytes_per_token_rank: int
    state_bytes_rank: int
    weight_bytes_read: float           # dense, or the MoE shared part
    expert_bytes: float                # 0 for dense
    num_experts: int
    experts_per_token: int
    gemm_params: float
    attention_width: int
    full_attention_layers: int
    has_mtp: bool
    kv_cache_dtype: str
    max_model_len: int
    memory: dict
    derivation: Derivation = field(compare=False, repr=False)
    window_tokens: int = 0             # sliding / chunked layers: what each decode step reads at most
    window_bytes_per_token_rank: int = 0
    window_bytes_per_session_rank: int = 0  # the window's blocks a warm session keeps resident


def fixed_from_memory(report, arch, pool_tokens: float | None = None, pool_source: str | None = None,
                      seed_convention: bool = False, hf_id: str | None = None) -> Fixed:
    """Everything the plan needs from a memory report (engine budget)."""
    pool, w, dep, gpu = report.pool, report.weights, report.deployment, report.gpus.gpu
    d = Derivation()
    tp, dp = dep.tensor_parallel_size, dep.data_parallel_size
    if pool_tokens is None:
        src = pool_source or "modelled: engine budget (servesize memory)"
        pool_t = d.given("pool_tokens", int(pool.usable_kv_tokens), unit="tokens",
                         source=f"memory report ({src}): usable KV tokens of one replica")
    else:
        pool_t = d.given("pool_tokens", float(pool_tokens), unit="tokens", source=pool_source or "--pool-tokens",
                         note="a measured pool replaces the modelled one")
        src = pool_source or "--pool-tokens"
    b = d.given("kv_bytes_per_token_rank", int(pool.kv_bytes_per_token), unit="B",
                source="KV pool: every layer that grows with context, one rank")
    state_groups = [g for g in pool.groups if g.kind in STATE_KINDS]
    state = 0
    if state_groups:
        pages = [g.page_bytes for g in state_groups]
        state = d.step("state_bytes_per_session_rank", "state_groups * page_bytes * group_size", unit="B",
                       note="one cached state block per GDN/Mamba group: a page in each of the group's layers",
                       state_groups=len(state_groups), page_bytes=pages[0], group_size=pool.group_size) \
            if len(set(pages)) == 1 else d.given("state_bytes_per_session_rank", sum(p * pool.group_size for p in pages), unit="B")
    # Sliding-window / chunked-local groups: a warm session keeps about one window of blocks in
    # each (vLLM frees what falls out of the window), and every decode step reads up to a window.
    window_groups = [g for g in pool.groups if g.kind in (SLIDING, CHUNKED)]
    window = next((l.window for l in arch.layers if l.kind in (SLIDING, CHUNKED)), 0) or 0
    window_bpt = window_charge = 0
    if window_groups and window:
        per_group = [(-(-window // g.block_size) + 1) * g.page_bytes * pool.group_size for g in window_groups]
        window_charge = d.step("window_bytes_per_session_rank", "sum(per_group)", unit="B", per_group=per_group,
                               note=f"(cdiv({window}, block) + 1) blocks in each of {len(window_groups)} sliding/chunked group(s)")
        window_bpt = d.step("window_bytes_per_token_rank", "page_bytes // block_size * layers", unit="B",
                            page_bytes=window_groups[0].page_bytes, block_size=window_groups[0].block_size,
                            layers=sum(g.layers for g in window_groups))
    # weights read per decode step, whole group
    groups = {g.group: g.bytes for g in w.groups}
    skip = ("mtp",) if seed_convention else NOT_READ_IN_DECODE  # the seed streams the whole checkpoint
    text_total = sum(v for k, v in groups.items() if k not in skip)
    experts = groups.get("experts", 0)
    ledger = w.ledger
    if experts:
        shared = text_total - experts
        if not (ledger.groups.get("embedding") and bool(arch.tie_word_embeddings)) and not seed_convention:
            shared -= groups.get("embedding", 0)
        wread = d.given("weight_bytes_read_shared", float(shared), unit="B",
                        note="MoE: everything but the routed experts (and the embedding gather), read every step")
    else:
        wread = d.given("weight_bytes_read", dense_weights_read_per_step(
            text_total, groups.get("embedding", 0), bool(arch.tie_word_embeddings), seed_convention=seed_convention), unit="B",
            note=("seed convention: the whole checkpoint (text) is read each step" if seed_convention else
                  "every text weight once per step, the input embedding only gathered"))
    gemm = ledger.active - sum(ledger.groups.get(k, 0) for k in ("embedding", "lm_head", "vision"))
    d.given("gemm_params", gemm, note="active parameters minus embedding, lm_head (and vision)")
    # architecture: attention width, full-attention layers
    width = arch.num_attention_heads * arch.head_dim
    full_layers = sum(1 for l in arch.layers if l.kind in (FULL, MLA))
    prec = str(w.precision).lower()
    dtype = "fp8" if ("fp8" in prec and getattr(gpu, "fp8", False)) else "bf16"
    peak = gpu.dense_flops_per_s(dtype)
    d.given("peak_flops_per_gpu", peak, unit="FLOP/s", source=f"GPU catalogue: {gpu.key} dense {dtype}")
    return Fixed(
        name=report.model, hf_id=hf_id or report.model, tp=tp, dp=dp, n_gpu=tp * dp, gpu_key=gpu.key,
        bandwidth_bytes_per_s=float(gpu.bandwidth_bytes_per_s), peak_flops_per_gpu=float(peak), peak_dtype=dtype,
        tdp_w=getattr(gpu, "tdp_w", None), pool_tokens=float(pool_t), pool_source=src,
        kv_bytes_per_token_rank=int(b), state_bytes_rank=int(state), weight_bytes_read=float(wread),
        expert_bytes=float(experts), num_experts=int(ledger.num_experts), experts_per_token=int(ledger.experts_per_token),
        gemm_params=float(gemm), attention_width=int(width), full_attention_layers=int(full_layers),
        has_mtp=bool(arch.mtp_layers), kv_cache_dtype=dep.kv_cache_dtype, max_model_len=int(dep.max_model_len),
        memory={
            "weights_bytes_per_gpu": w.per_gpu_bytes, "weights_bytes_total": w.total_bytes,
            "weights_precision": w.precision,
            "available_kv_bytes_per_gpu": report.budget.available_bytes,
            "modelled_pool_tokens": pool.usable_kv_tokens, "kv_cache_tokens_logged": pool.kv_cache_tokens,
            "kv_bytes_per_token_per_rank": pool.kv_bytes_per_token, "block_size": pool.block_size,
            "num_blocks": pool.num_blocks, "group_size": pool.group_size,
            "state_bytes_per_sequence_per_rank": pool.state_bytes_per_sequence,
            "log_lines": list(pool.log_lines),
            "gpu_memory_utilization": dep.gpu_memory_utilization,
        },
        derivation=d, window_tokens=int(window if window_groups else 0), window_bytes_per_token_rank=int(window_bpt),
        window_bytes_per_session_rank=int(window_charge),
    )


# ------------------------------------------------------------------------------------------
# the four ceilings
# ------------------------------------------------------------------------------------------


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


def spec_speedup_of(fixed: Fixed, knobs: Knobs) -> float:
    if knobs.mtp_speedup is not None:
        return float(knobs.mtp_speedup)
    if knobs.spec_acceptance is not None:
        return mtp_speedup(knobs.spec_acceptance, spec_tokens_of(knobs))
    if not fixed.has_mtp and knobs.spec_tokens is None:
        return 1.0
    if knobs.spec_tokens is not None and knobs.spec_tokens != knobs.a("decode.mtp_drafts"):
        return mtp_speedup(knobs.a("decode.mtp_acceptance"), knobs.spec_tokens)
    return float(knobs.a("decode.mtp_speedup"))


def spec_tokens_of(knobs: Knobs) -> int:
    return int(knobs.spec_tokens if knobs.spec_tokens is not None else knobs.a("decode.mtp_drafts"))


def _val(knobs: Knobs, name: str):
    v = getattr(knobs, name)
    return v if v is not None else knobs.a(_KNOB_SOURCE[name][0])


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
        spec_speedup=spec_speedup_of(fixed, knobs), bandwidth_efficiency=float(_val(knobs, "bandwidth_efficiency")),
        tp_efficiency=tp_eff,
        # sliding/chunked layers read min(L, window) tokens per step (the same form as sparse top-k reads)
        topk_tokens=fixed.window_tokens, topk_bytes_per_token=fixed.window_bytes_per_token_rank * fixed.tp,
    )


def prefill_setup(fixed: Fixed, knobs: Knobs) -> PrefillSetup:
    return PrefillSetup(gemm_params=fixed.gemm_params, attention_width=fixed.attention_width,
                        full_attention_layers=fixed.full_attention_layers, peak_flops_per_gpu=fixed.peak_flops_per_gpu,
                        tp=fixed.tp, tp_efficiency=knobs.tp_efficiency, mfu=float(_val(knobs, "mfu")))


def sub_ratio_of(workload: Workload) -> float:
    return float(workload.subagent_ratio) if workload.subagent is not None else 0.0


class _Cache:
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


def ceilings(fixed: Fixed, workload: Workload, knobs: Knobs, cache: _Cache | None = None, comfortable: bool = True) -> Ceilings:
    cache = cache or _Cache()
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
    floor = float(_val(knobs, "decode_floor"))
    dec = _decode_ceiling(setup, sampler, floor, dfills, knobs.seed)
    dec_c = _decode_ceiling(setup, sampler, float(_val(knobs, "comfortable_floor")), dfills, knobs.seed) if comfortable else None
    pset = prefill_setup(fixed, knobs)
    pkey = (workload, pset, knobs.prefill_samples, knobs.seed)
    if pkey not in cache.prefill:
        cache.prefill[pkey] = prefill_costs(pset, sample_contexts=sampler, warm_turn_tokens=workload.warm_turn_tokens,
                                            samples=knobs.prefill_samples, seed=knobs.seed)
    costs = cache.prefill[pkey]
    m = moments_from(costs, workload.invalidation)
    r = sub_ratio_of(workload)
    ttft = float(_val(knobs, "ttft_limit_s"))
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


# ------------------------------------------------------------------------------------------
# sensitivity
# ------------------------------------------------------------------------------------------

# name -> (kind, field, lo, hi, unit). kind: 'knob' edits Knobs, 'workload' edits the Workload
SENSITIVITY = {
    "bandwidth_efficiency": ("knob", "bandwidth_efficiency", 0.3, 1.0, "fraction"),
    "mfu": ("knob", "mfu", 0.15, 0.9, "fraction"),
    "spec_speedup": ("knob", "mtp_speedup", 1.0, 3.0, "x"),
    "user_median_tokens": ("workload", "median", 5_000.0, 250_000.0, "tokens"),
    "user_sigma": ("workload", "sigma", 0.2, 1.6, ""),
    "invalidation": ("workload", "invalidation", 0.0, 0.5, "fraction"),
    "think_time_s": ("workload", "think_time_s", 3.0, 180.0, "s"),
    "ttft_limit_s": ("knob", "ttft_limit_s", 1.0, 60.0, "s"),
}


def apply_param(workload: Workload, knobs: Knobs, name: str, value: float) -> tuple[Workload, Knobs]:
    """Set one sweepable parameter (workload field or modelled knob) to ``value``."""
    from servesize.workload.model import SessionClass
    class_field = {"median": "median_tokens", "sigma": "sigma", "prefix": "prefix_tokens"}
    cls_name, _, field_name = name.rpartition("_") if name.startswith("subagent_") else ("user", "", name)
    if field_name in class_field and cls_name in ("user", "subagent"):
        cls = getattr(workload, cls_name)
        if not isinstance(cls, SessionClass):
            raise BadInput(f"--{name.replace('_', '-')} needs a log-normal {cls_name} class"
                           + ("; this workload's user class is empirical" if cls_name == "user" else ""))
        key = class_field[field_name]
        val = int(value) if key == "prefix_tokens" else float(value)
        return workload.replace(**{cls_name: replace(cls, **{key: val})}), knobs
    if name in ("subagent_ratio", "invalidation", "think_time_s", "output_tokens", "warm_turn_tokens", "max_model_len"):
        return workload.replace(**{name: value}), knobs
    if name in ("bandwidth_efficiency", "tp_efficiency", "mtp_speedup", "spec_acceptance", "decode_floor",
                "comfortable_floor", "mfu", "ttft_limit_s"):
        return workload, replace(knobs, **{name: float(value)})
    if name == "spec_tokens":
        return workload, replace(knobs, spec_tokens=int(value))
    if name == "cpu_offload_bytes":
        return workload, replace(knobs, cpu_offload_bytes=float(value))
    raise BadInput(f"cannot vary {name!r}")


def sensitivity(fixed: Fixed, workload: Workload, knobs: Knobs, base_binding: str, fills: int = 300,
                iterations: int = 10, names=None, cache: "_Cache | None" = None) -> dict:
    """For each named assumption: the value at which the binding ceiling changes, or no flip in [lo, hi].

    Rows that move only a modelled knob run at the plan's own resolution and reuse its warm fill
    (``cache``), so a near-tie is judged as the plan judged it; rows that change the workload need a
    new Monte-Carlo fill per point and run with ``fills``."""
    k_small = replace(knobs, fills=min(fills, knobs.fills), decode_fills=min(knobs.decode_fills or 400, 150),
                      prefill_samples=min(knobs.prefill_samples or 200_000, 50_000))
    plan_cache, small_cache = cache or _Cache(), _Cache()
    out = {}
    for name in (names or SENSITIVITY):
        kind, fld, lo, hi, unit = SENSITIVITY[name]
        current = _current(fixed, workload, knobs, name, fld)
        k_eval, c_eval = (knobs, plan_cache) if kind == "knob" else (k_small, small_cache)
        try:
            def binding_at(x):
                w, k = apply_param(workload, k_eval, fld, x)
                return ceilings(fixed, w, k, c_eval, comfortable=False).binding
            base = binding_at(current)
            res = {"current": current, "range": [lo, hi], "unit": unit, "binding_at_current": base, "flip_at": None,
                   "binds_after": None}
            # nearest flip: search below then above
            found = None
            for a_, b_ in ((current, lo), (current, hi)):
                if a_ == b_:
                    continue
                other = binding_at(b_)
                if other == base:
                    continue
                x_in, x_out = a_, b_
                for _ in range(iterations):
                    mid = 0.5 * (x_in + x_out) if name not in ("user_median_tokens", "think_time_s") else math.sqrt(x_in * x_out) if x_in > 0 and x_out > 0 else 0.5 * (x_in + x_out)
                    at_mid = binding_at(mid)
                    if at_mid == base:
                        x_in = mid
                    else:
                        x_out, other = mid, at_mid
                cand = 0.5 * (x_in + x_out)
                if found is None or abs(cand - current) < abs(found[0] - current):
                    found = (cand, other)
            if found:
                res["flip_at"], res["binds_after"] = float(found[0]), found[1]
                res["text"] = (f"{base} -> {found[1]} at {_fmt(found[0], unit)} (now {_fmt(current, unit)}, "
                               f"searched {_fmt(lo, unit)}..{_fmt(hi, unit)})")
            else:
                res["text"] = f"no flip in [{_fmt(lo, unit)}, {_fmt(hi, unit)}]: {base} binds throughout"
        except BadInput as exc:
            res = {"current": current, "range": [lo, hi], "unit": unit, "error": str(exc), "text": f"not evaluated: {exc}"}
        out[name] = res
    return out


def _current(fixed, workload, knobs, name, fld):
    if name == "spec_speedup":
        return spec_speedup_of(fixed, knobs)
    if fld == "median":
        return float(workload.user.median_tokens)
    if fld == "sigma":
        return float(getattr(workload.user, "sigma", 0.81))
    if hasattr(workload, fld):
        return float(getattr(workload, fld))
    return float(_val(knobs, fld))


def _fmt(x: float, unit: str) -> str:
    if unit == "tokens":
        return f"{x / 1000:,.1f}k tokens"
    if unit == "s":
        return f"{x:,.1f} s"
    if unit == "x":
        return f"{x:.2f}x"
    return f"{x:.3g}"


# ------------------------------------------------------------------------------------------
# the plan
# ------------------------------------------------------------------------------------------


@dataclass
class Plan:
    fixed: Fixed
    workload: Workload
    knobs: Knobs
    result: Ceilings
    recipe: str
    recipe_notes: list
    power: Any
    power_note: str
    sensitivity: dict
    assumptions: list
    sweep: dict | None = None
    plot: str | None = None
    latency: Any = None
    derivation: Derivation = field(default_factory=Derivation, repr=False)
    exit_code: int = 0

    def to_dict(self) -> dict:
        r = self.result
        w = r.warm
        out = {
            "model": self.fixed.name,
            "gpus": f"{self.fixed.n_gpu}x{self.fixed.gpu_key}",
            "tensor_parallel_size": self.fixed.tp, "data_parallel_size": self.fixed.dp,
            "warm_users": w.users.to_dict(), "warm_sessions": w.sessions.to_dict(),
            "gpu_resident_sessions": w.gpu_resident.to_dict(), "cpu_offloaded_sessions": w.cpu_offloaded.to_dict(),
            "pool_tokens": self.fixed.pool_tokens, "pool_source": self.fixed.pool_source,
            "kv_bytes_per_token_per_rank": self.fixed.kv_bytes_per_token_rank,
            "state_bytes_per_session_per_rank": self.fixed.state_bytes_rank,
            "ceilings": dict(r.values), "binding": r.binding, "headroom": r.headroom(),
            "decode": {
                "floor_tok_s": r.decode.floor_tok_s, "ceiling_per_replica": r.decode.n,
                "comfortable_floor_tok_s": None if r.decode_comfortable is None else r.decode_comfortable.floor_tok_s,
                "comfortable_ceiling_per_replica": None if r.decode_comfortable is None else r.decode_comfortable.n,
                "spec_speedup": r.spec_speedup,
                "p50_at_ceiling_tok_s": None if r.decode.at_ceiling is None else r.decode.at_ceiling.p50_tok_s,
            },
            "prefill": {"miss_ttft_s": r.prefill.miss_s, "hit_ttft_s": r.prefill.hit_s,
                        "thrash_ratio": r.prefill.thrash_ratio, "mean_service_s": r.moments.mean_s},
            "latency": None if self.latency is None else {k: v for k, v in self.latency.to_dict().items() if k != "derivation"},
            "offload_restore": w.restore,
            "recipe": self.recipe, "recipe_notes": list(self.recipe_notes),
            "power": None if self.power is None else _power_dict(self.power),
            "power_note": self.power_note,
            "sensitivity": self.sensitivity,
            "assumptions": self.assumptions,
            "workload": self.workload.to_dict(),
            "memory": self.fixed.memory,
        }
        if self.sweep is not None:
            out["sweep"] = self.sweep
        if self.plot:
            out["plot"] = self.plot
        return out



def _power_dict(p):
    d = p.to_dict()
    d.pop("derivation", None)
    return d


def recipe_for(fixed: Fixed, dep, knobs: Knobs, result: Ceilings) -> tuple[str, list]:
    w = result.warm
    per_replica_gpu_p5 = w.per_replica["gpu_resident"].p5 if isinstance(w.per_replica, dict) and "gpu_resident" in w.per_replica \
        else w.gpu_resident.p5 / max(1, fixed.dp)
    mns = max(1, int(min(result.decode.n, math.floor(per_replica_gpu_p5))))
    parts = ["vllm serve", fixed.hf_id, f"--tensor-parallel-size {fixed.tp}", f"--kv-cache-dtype {fixed.kv_cache_dtype}",
             f"--max-model-len {fixed.max_model_len}", f"--max-num-seqs {mns}", "--enable-prefix-caching"]
    if dep.quantization not in ("native", None):
        parts.append(f"--quantization {dep.quantization}")
    if dep.mamba_ssm_cache_dtype not in (None, "auto"):
        parts.append(f"--mamba-ssm-cache-dtype {dep.mamba_ssm_cache_dtype}")
    util = dep.gpu_memory_utilization or fixed.memory.get("gpu_memory_utilization")
    if util:
        parts.append(f"--gpu-memory-utilization {util}")  # the pool was sized at this; defaults moved between releases
    if result.spec_speedup > 1:
        parts.append(f"--speculative-config '{{\"method\":\"mtp\",\"num_speculative_tokens\":{spec_tokens_of(knobs)}}}'")
    if knobs.cpu_offload_bytes:
        parts.append(f"--kv-offloading-size {knobs.cpu_offload_bytes / GiB:g}")
    notes = [f"--max-num-seqs {mns} = min(decode ceiling {result.decode.n}, GPU-resident warm sessions p5 "
             f"{per_replica_gpu_p5:,.0f}) per replica"]
    if knobs.cpu_offload_bytes:
        notes.append("--kv-offloading-size is in GiB of host RAM per engine")
    if fixed.dp > 1 and knobs.sticky_routing:
        notes.append(f"run {fixed.dp} of these behind a session-sticky router (each on its own {fixed.tp} GPU(s)); "
                     "without sticky routing every replica ends up holding the same recent sessions, so the "
                     f"system keeps about one replica's worth warm, not {fixed.dp}x")
    elif fixed.dp > 1:
        notes.append(f"run {fixed.dp} of these behind a load balancer (each on its own {fixed.tp} GPU(s)): the figures "
                     "assume routing that ignores where a session's cache is, so about one replica's worth stays warm; "
                     f"a session-sticky router would keep {fixed.dp}x")
    return " ".join(parts), notes


def assumption_table(fixed: Fixed, workload: Workload, knobs: Knobs, result: Ceilings) -> list:
    which = knobs.assumptions
    rows = []

    def add(name, value, unit, source):
        rows.append({"name": name, "value": value, "unit": unit, "source": source})

    table = modelled_assumptions()
    for field_, (key, flag) in _KNOB_SOURCE.items():
        v = getattr(knobs, field_)
        add(key, _val(knobs, field_), table[key].get("unit", ""),
            f"flag {flag}" if v is not None else f"{which}: data/assumptions.toml ({table[key].get('source', '')[:60].strip()})")
    add("decode.spec_speedup", result.spec_speedup, "x tokens/step",
        "flag --mtp-speedup" if knobs.mtp_speedup is not None else "flag --spec-acceptance" if knobs.spec_acceptance is not None
        else ("none: the model has no MTP head" if not fixed.has_mtp else f"{which}: decode.mtp_speedup"))
    add("decode.tp_efficiency", decode_setup(fixed, knobs).tp_eff, "fraction",
        "flag --tp-efficiency" if knobs.tp_efficiency is not None else f"{which}: 0.90 per TP doubling")
    add("latency.discipline", knobs.a("latency.discipline"), "", f"{which}: data/assumptions.toml")
    for key in ("power.idle_fraction_of_tdp", "power.decode_fraction_of_tdp", "power.prefill_fraction_of_tdp",
                "power.host_w_per_gpu", "power.pue", "power.price_per_kwh", "power.hours_per_month"):
        add(key, knobs.a(key), table[key].get("unit", ""), f"{which}: data/assumptions.toml")
    u = workload.user
    add("workload.user_median_tokens", float(u.median_tokens), "tokens", getattr(u, "source", "") or "workload")
    add("workload.user_sigma", float(getattr(u, "sigma", float("nan"))), "", getattr(u, "source", "") or "workload")
    add("workload.user_prefix_tokens", int(u.prefix_tokens), "tokens", "workload")
    if workload.subagent is not None:
        s = workload.subagent
        add("workload.subagent_median_tokens", float(s.median_tokens), "tokens", getattr(s, "source", "") or "workload")
        add("workload.subagent_sigma", float(getattr(s, "sigma", float("nan"))), "", "workload")
        add("workload.subagent_prefix_tokens", int(s.prefix_tokens), "tokens", "workload")
        add("workload.subagent_ratio", workload.subagent_ratio, "per user request", "workload")
        add("workload.subagents_share_prefix", workload.subagents_share_prefix, "", "workload")
    add("workload.invalidation", workload.invalidation, "fraction", "workload (also the cache-miss rate of the prefill queue)")
    add("workload.max_model_len", workload.max_model_len, "tokens", "--max-model-len (the workload cap)")
    add("workload.think_time_s", workload.think_time_s, "s", "workload")
    add("workload.output_tokens", workload.output_tokens, "tokens/request", "workload")
    add("workload.warm_turn_tokens", workload.warm_turn_tokens, "tokens", "workload")
    add("pool_tokens", fixed.pool_tokens, "tokens per replica", fixed.pool_source)
    add("routing", "sticky" if knobs.sticky_routing else "random", "", "--no-sticky-routing" if not knobs.sticky_routing else "default")
    add("monte_carlo", f"fills {knobs.fills}, draws {knobs.draws}, seed {knobs.seed}", "", "--fills/--draws/--seed")
    return rows


def power_of(fixed: Fixed, workload: Workload, knobs: Knobs, result: Ceilings):
    from servesize.planning.power import PowerStates, power_bill, seed_decode_capacity
    if not fixed.tdp_w:
        return None, f"{fixed.gpu_key} has no TDP in the GPU catalogue; power and the bill are skipped"
    states = PowerStates.from_tdp(fixed.tdp_w, knobs.a("power.idle_fraction_of_tdp"), knobs.a("power.decode_fraction_of_tdp"),
                                  knobs.a("power.prefill_fraction_of_tdp"), knobs.a("power.host_w_per_gpu"))
    users = result.values[result.binding]
    r = sub_ratio_of(workload)
    rate_group = users / fixed.dp * (1 + r) / workload.think_time_s
    bill = power_bill(states, fixed.n_gpu, fixed.dp, rate_group, result.moments.mean_s,
                      seed_decode_capacity(result.decode.n, result.decode.floor_tok_s), users,
                      pue=knobs.a("power.pue"), price_per_kwh=knobs.a("power.price_per_kwh"),
                      output_tokens_per_request=workload.output_tokens, hours_per_month=knobs.a("power.hours_per_month"))
    return bill, f"at the binding ceiling ({users:,.0f} users), {fixed.n_gpu} GPU(s)"


def make_plan(fixed: Fixed, dep, workload: Workload, knobs: Knobs, *, with_sensitivity: bool = True,
              sensitivity_fills: int = 300) -> Plan:
    cache = _Cache()
    res = ceilings(fixed, workload, knobs, cache)
    d = Derivation()
    d.extend(fixed.derivation)
    d.extend(res.warm.derivation)
    d.extend(res.decode.derivation)
    d.extend(res.prefill.derivation)
    rep = latency_report(res.moments, res.values[res.binding] / fixed.dp, sub_ratio_of(workload), workload.think_time_s,
                         float(_val(knobs, "ttft_limit_s")), knobs.a("latency.discipline"))
    d.extend(rep.derivation)
    for k in CEILINGS:
        d.given(f"ceiling_{k}_users", res.values[k], unit="users",
                note={"cache": "warm user sessions p5 (system)", "decode": f"decode ceiling per replica x {fixed.dp}",
                      "latency": f"per replica group x {fixed.dp}", "saturation": f"per replica group x {fixed.dp}"}[k])
    d.given("binding", res.binding, note="the smallest of the four ceilings")
    recipe, notes = recipe_for(fixed, dep, knobs, res)
    bill, pnote = power_of(fixed, workload, knobs, res)
    if bill is not None:
        d.extend(bill.derivation)
    sens = sensitivity(fixed, workload, knobs, res.binding, fills=sensitivity_fills, cache=cache) if with_sensitivity else {}
    return Plan(fixed, workload, knobs, res, recipe, notes, bill, pnote, sens,
                assumption_table(fixed, workload, knobs, res), derivation=d, latency=rep)


def sweep(fixed: Fixed, workload: Workload, knobs: Knobs, param: str, values: list, labels: list | None = None) -> dict:
    """Warm users p5/p50 and the four ceilings for each value of one parameter."""
    cache = _Cache()
    rows = []
    for i, v in enumerate(values):
        w, k = apply_param(workload, knobs, param, v)
        c = ceilings(fixed, w, k, cache, comfortable=False)
        rows.append({"value": v, "label": (labels[i] if labels else f"{v:g}"), "warm_users": c.warm.users.to_dict(),
                     "warm_sessions": c.warm.sessions.to_dict(), "ceilings": c.values, "binding": c.binding})
    return {"param": param, "rows": rows}
