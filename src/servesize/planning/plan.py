"""The plan: warm users, the four ceilings and which binds (planning.ceilings), the vLLM recipe
(planning.recipe), the power bill, the assumption table and the sensitivity (planning.sensitivity).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any

from servesize.assumptions import modelled_assumptions
from servesize.derivation import Derivation
from servesize.frozen import frozen
from servesize.planning.ceilings import (
    CEILINGS,
    CeilingCache,
    Ceilings,
    ceilings,
    decode_points,
    decode_setup,
    kernel_efficiency,
)
from servesize.planning.inputs import KNOB_SOURCE, Fixed, Knobs, knob_value, sub_ratio_of, ttft_queue_budget_s
from servesize.planning.inputs import PLANNING_PERCENTILE as PLANNING_PERCENTILE
from servesize.planning.latency import latency_report, request_rate
from servesize.planning.load import think_time_of
from servesize.planning.recipe import max_num_seqs, recipe_for
from servesize.planning.sensitivity import SensitivityRow, apply_param, sensitivity
from servesize.planning.step_model import expert_kernel_taken
from servesize.units import GB, fmt_tokens
from servesize.workload.model import Workload, length_mass

if TYPE_CHECKING:
    from servesize.engine.deployment import Deployment
    from servesize.engine.memory import MemoryReport
    from servesize.planning.ceilings import DecodePoint
    from servesize.planning.power import PowerBill
    from servesize.planning.warm_capacity import Percentiles
    from servesize.workload.presets import WorkloadOrigin

# which percentile each ceiling plans at (planning.ceilings): the verdict names it so the headline reads alone


@frozen
class Plan:
    """One deployment's plan: warm users, the four ceilings and which binds, the recipe, the bill,
    the assumption table and (unless skipped) the sensitivity panel."""

    fixed: Fixed
    workload: Workload
    knobs: Knobs
    result: Ceilings
    recipe: str
    recipe_notes: tuple[str, ...]
    power: Any
    power_note: str
    sensitivity: dict[str, Any]
    assumptions: tuple[dict[str, Any], ...]
    latency: Any = None
    decode_points: tuple[DecodePoint, ...] = ()  # per-user decode at 1 decoder and at the recipe's --max-num-seqs
    origin: Any = None                 # workload.presets.WorkloadOrigin: where each workload field came from
    sizing: dict[str, Any] | None = None  # plan --users N: the replicas N users need (sizing.search.replicas_for_plan)
    placement: Any = None              # engine.placement.Split: how --gpus is split into replicas (api.plan)
    memory: Any = field(default=None, compare=False, repr=False)  # the MemoryReport it was sized from
    vs_seed: dict[str, Any] | None = None  # plan.seed_difference: the one seed assumption that moves the answer
    derivation: Derivation = field(default_factory=Derivation, compare=False, repr=False)
    # where the engine simulator's users-at-SLO differ from the plan's by more than the tolerance: one line, why
    # (set by servesize.api.check_plan / simulate --engine; None: not checked, or they agree)
    disagreement: str | None = None
    # the engine simulator's check where it was run (api.check_plan): its users at the comfort SLO beside the plan's
    engine_check: dict[str, Any] | None = None
    at_load: Any = field(default=None, compare=False, repr=False)  # planning.at_load.AtLoad: api.plan(load=...)

    @property
    def ceilings(self) -> dict[str, float]:
        """The four ceilings in users: cache, decode, latency, saturation."""
        return dict(self.result.values)

    @property
    def binding(self) -> str:
        """The ceiling that binds first (the smallest)."""
        return self.result.binding

    def verdict(self) -> str:
        """One line: the users, the ceiling that binds, the workload, and (when one moves it) the seed's assumption."""
        return self.verdict_headline() + self.verdict_detail()

    def engine_check_text(self) -> str | None:
        """The engine check in one line, as the CLI and the page print it: the engine simulator's users at the
        comfort SLO beside the plan's, and what breaks one user more (None: not checked)."""
        c = self.engine_check
        if not c:
            return None
        above = "at least " if c["capped"] else ""
        broke = f"; one user more breaks on {c['reason']}" if c.get("reason") else ""
        verdict = f"within {c['tolerance']:.0%} of the plan" if c["agree"] else f"the plan is {c['gap']:+.0%} from it"
        return (f"engine check: the engine simulator serves {above}{c['engine_users']:,} users comfortably on "
                f"{format(c['requests'], ',') if c['requests'] else 'the'} generated requests ({verdict}{broke})")

    def verdict_headline(self) -> str:
        """The verdict's first words, the headline every face shows: "70 users: cache binds first"."""
        r = self.result
        return f"{r.values[r.binding]:,.0f} users: {r.binding} binds first"

    def verdict_detail(self) -> str:
        """The rest of the verdict line: the workload in words, the planning percentile, the seed's answer."""
        detail = f" ({self.workload_name()}: {self.workload_words()}); {PLANNING_PERCENTILE}"
        seed = self.seed_sentence()
        return detail + f"; {seed}" if seed else detail

    def seed_sentence(self) -> str | None:
        """The warm-capacity study's answer where one of its assumptions moves this one, in a visitor's words."""
        s = self.vs_seed
        if not s:
            return None
        return (f"if {seed_words(s['assumption'], s['seed_value'], s['default'], s.get('prefill_factor', 1.0))}, as "
                f"the warm-capacity study assumes: "
                f"{s['users']:,.0f} users ({s['binding']} binds)")

    def workload_name(self) -> str:
        """The workload in a few words: the preset and what replaced its fields, or the file's name."""
        o = self.origin
        if o is None:
            return "workload: " + self.workload.describe().split("\n")[0]
        changed = [o.sources[f].removeprefix("flag ") for f in o.overridden() if o.layer(f) == "flag"]
        name = f"workload {o.preset.name}" + (f" from {o.file}" if getattr(o, "file", None) else "")
        return name + (f" with {', '.join(changed)}" if changed else "")

    def workload_words(self) -> str:
        """The workload's shape in words: the user median context and the shared prefix (and the subagents)."""
        w = self.workload
        words = [f"{fmt_tokens(w.user.median_tokens)} median context", f"{fmt_tokens(w.user.prefix_tokens)} shared prefix"]
        if w.subagent is not None and w.subagent_ratio > 0:
            words.append(f"{w.subagent_ratio:g} subagent requests per user request")
        return ", ".join(words)

    def offload(self) -> dict[str, Any] | None:
        """With CPU offload: where the warm users' sessions live (GPU KV, or host RAM only: p5 each, as the
        cache ceiling plans) and what a turn of one in host RAM waits to bring its KV back over the host link
        (the median warm session, uncontended), with one line that says both. None without offload."""
        w = self.result.warm
        if not self.knobs.cpu_offload_bytes or w.restore is None:
            return None
        r = w.restore
        link = f"{r['links']} x {r['link']}" if r["links"] > 1 else r["link"]
        rate = (f"{r['link_efficiency']:g} of its {r['pcie_bytes_per_s'] / r['link_efficiency'] / r['links'] / GB:g} GB/s "
                "one way" if r["link_efficiency"] else f"{r['pcie_bytes_per_s'] / GB:g} GB/s")
        gpu, ram = w.users_gpu_resident.p5, w.users_cpu_offloaded.p5
        text = (f"of {gpu + ram:,.0f} warm users (p5), {gpu:,.0f} have their session in GPU KV and {ram:,.0f} in host "
                f"RAM only (the fill at the p5 of {w.fills:,}); "
                f"a turn whose session is in host RAM first restores it over {link} at {rate}: "
                f"{r['median_session_seconds']:.3f} s for the median session "
                f"({fmt_tokens(r['median_session_unique_tokens'])} tokens), {r['seconds_per_100k_tokens']:.3f} s "
                "per 100k tokens (uncontended)")
        return {"cpu_offload_bytes": self.knobs.cpu_offload_bytes,
                "warm_users": w.users.to_dict(), "users_in_gpu_kv": w.users_gpu_resident.to_dict(),
                "users_in_host_ram": w.users_cpu_offloaded.to_dict(),
                "sessions_in_gpu_kv": w.gpu_resident.to_dict(), "sessions_in_host_ram": w.cpu_offloaded.to_dict(),
                "restore_s_per_turn": r["median_session_seconds"], "restore_s_per_100k_tokens": r["seconds_per_100k_tokens"],
                "restore_bytes_per_s": r["pcie_bytes_per_s"], "link": link, "link_assumed": r["pcie_assumed"],
                "link_source": r["link_source"], "text": text}

    def context_shortfall(self) -> dict[str, Any] | None:
        """When the served context (the model's window, or --max-model-len) is shorter than the workload's
        median user session: the cap, the median and the share of sessions longer than the cap (cut short or
        refused by vLLM), with one line saying so. None when the median session fits."""
        w = self.workload
        cap, median = int(w.max_model_len), float(w.user.median_tokens)
        if median <= cap:
            return None
        over = float(1.0 - length_mass(w.user, [0.0, float(cap)])[0])
        return {"max_model_len": cap, "median_tokens": median, "share_over": over,
                "text": f"context {fmt_tokens(cap)} < the workload's {fmt_tokens(median)} median: {over:.0%} of "
                        "sessions do not fit (cannot hold this workload)"}

    @property
    def miss_share(self) -> float | None:
        """The share of turns whose TTFT exceeds the budget at the binding load (None under the seed's rule)."""
        r = self.result
        return r.miss_share_at(r.values[r.binding], self.fixed.dp, sub_ratio_of(self.workload),
                               think_time_of(self.workload))

    @property
    def warm_users(self) -> Percentiles:
        """Warm user sessions p5 / p50 / p95 (the p5 is the cache ceiling)."""
        return self.result.warm.users

    def limits_over(self, at: Any = None) -> list[dict[str, str]]:
        """Each figure over its limit at the load (``at``: a planning.at_load.AtLoad; None: the binding load), and
        why it binds or not (planning.limits.limits_over): what the verdict, the CLI and --json say."""
        from servesize.planning.limits import limits_over

        return [{"limit": name, "text": text} for name, text in limits_over(self, at)]

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        w = r.warm
        out = {
            "disagreement": self.disagreement,
            "engine_check": self.engine_check,
            "limits_over": self.limits_over(),
            "model": self.fixed.name,
            "gpus": f"{self.fixed.n_gpu}x{self.fixed.gpu_key}",
            "tensor_parallel_size": self.fixed.tp, "data_parallel_size": self.fixed.dp,
            "warm_users": w.users.to_dict(), "warm_sessions": w.sessions.to_dict(),
            "gpu_resident_sessions": w.gpu_resident.to_dict(), "cpu_offloaded_sessions": w.cpu_offloaded.to_dict(),
            "gpu_resident_users": w.users_gpu_resident.to_dict(), "cpu_offloaded_users": w.users_cpu_offloaded.to_dict(),
            "pool_tokens": self.fixed.pool_tokens, "pool_source": self.fixed.pool_source,
            "kv_bytes_per_token_per_rank": self.fixed.kv_bytes_per_token_rank,
            "state_bytes_per_session_per_rank": self.fixed.state_bytes_rank,
            "verdict": self.verdict(),
            "vs_seed": self.vs_seed,
            "context_shortfall": self.context_shortfall(),
            "ceilings": dict(r.values), "binding": r.binding, "headroom": r.headroom(),
            "decode": {
                "floor_tok_s": r.decode.floor_tok_s, "ceiling_per_replica": r.decode.n,
                "comfortable_floor_tok_s": None if r.decode_comfortable is None else r.decode_comfortable.floor_tok_s,
                "comfortable_ceiling_per_replica": None if r.decode_comfortable is None else r.decode_comfortable.n,
                "spec_speedup": r.spec_speedup,
                "p50_at_ceiling_tok_s": None if r.decode.at_ceiling is None else r.decode.at_ceiling.p50_tok_s,
                "floor_reached": r.floor_out_of_reach is None,
                "floor_out_of_reach": None if r.floor_out_of_reach is None else r.floor_out_of_reach.to_dict(),
                "points": [p.to_dict() for p in self.decode_points],
                "roofline": self.knobs.a("decode.roofline"),
                "load_model": self.knobs.a("load.model"),
                "load": None if r.decode_load is None else r.decode_load.to_dict(),
                "every_user_bound_users": r.every_user_decode,
                "step_overhead_s": self.knobs.a("decode.step_overhead_s"),
            },
            "ttft": None if r.ttft is None else {**r.ttft.to_dict(), "miss_share_at_binding": self.miss_share},
            "prefill": None if r.prefill is None else {
                "miss_ttft_s": r.prefill.miss_s, "hit_ttft_s": r.prefill.hit_s,
                "thrash_ratio": r.prefill.thrash_ratio, "mean_service_s": r.moments.mean_s},
            "ceilings_need": dict(r.missing),
            "latency": None if self.latency is None else {k: v for k, v in self.latency.to_dict().items() if k != "derivation"},
            "offload_restore": w.restore,
            "offload": self.offload(),
            "recipe": self.recipe, "recipe_notes": list(self.recipe_notes),
            "power": None if self.power is None else _power_dict(self.power),
            "power_note": self.power_note,
            "sensitivity": self.sensitivity,
            "assumptions": list(self.assumptions),
            "workload": self.workload.to_dict(),
            "workload_origin": None if self.origin is None else self.origin.to_dict(),
            "memory": self.fixed.memory,
            "flags_not_affecting": list(getattr(self.memory, "flags_not_affecting", ())),
            "flags_estimated": list(getattr(self.memory, "flags_estimated", ())),
            "flags_not_modelled": list(getattr(self.memory, "flags_not_modelled", ())),
            "sizing": self.sizing,
            "placement": None if self.placement is None else self.placement.to_dict(),
        }
        return out



def _power_dict(p: PowerBill) -> dict[str, Any]:
    d = p.to_dict()
    d.pop("derivation", None)
    return d


def step_term_names(fixed: Fixed, knobs: Knobs) -> list[str]:
    """The step model's terms that price this deployment: the overheads, the mixed step, and the kernel factors of
    its weight format, vendor and experts (the measured kernel rate's rule where the deployment has one, and the
    fitted MoE efficiency where that rule does not take it: step_model.expert_kernel_taken, as the decode setup
    asks)."""
    names = ["decode.step_overhead_s", "step.overhead_per_layer_s", "step.overhead_per_tp_doubling_s",
             "step.overhead_per_layer_tp_doubling_s", "step.request_fixed_s", "step.mixed", "prefill.weight_floor",
             "prefill.tp_efficiency_per_doubling"]
    if fixed.weight_format != "bf16":
        names.append(f"step.kernel_efficiency_{fixed.weight_format}")
    if fixed.peak_dtype == "fp8":  # the GPU's measured FP8 share, or the fitted factor where it has none
        names += ["step.gpu_fp8_prefill_kernels", "step.prefill_efficiency_fp8"]
    if fixed.vendor.upper() == "AMD":
        names.append("step.vendor_efficiency_amd")
    if fixed.memory_kernel_factor != 1.0:
        names.append("step.gpu_memory_kernels")
    if fixed.expert_bytes:
        names += ["decode.expert_union", "step.moe_prefill_efficiency", "step.moe_prefill_scope", "step.moe_layer_fixed_s"]
        rule = fixed.expert_kernel_rule
        names += [rule] if rule else []
        if not expert_kernel_taken(rule, knobs.a(rule) if rule else None, fixed.expert_kernel_bytes_per_s):
            names.append("step.moe_expert_efficiency")
    return names


def assumption_table(fixed: Fixed, workload: Workload, knobs: Knobs, result: Ceilings,
                     origin: WorkloadOrigin | None = None) -> list[dict[str, Any]]:
    which = knobs.assumptions
    rows: list[dict[str, Any]] = []

    def add(name: str, value: Any, unit: str, source: str) -> None:
        rows.append({"name": name, "value": value, "unit": unit, "source": source})

    table = modelled_assumptions()
    calibrated = dict(knobs.calibrated)
    for field_, (key, flag) in KNOB_SOURCE.items():
        v = getattr(knobs, field_)
        source = (f"{calibrated[field_]} (calibrate --vllm-bench)" if field_ in calibrated else f"flag {flag}"
                  if v is not None else f"{which}: data/assumptions.toml ({table[key].get('source', '')[:60].strip()})")
        add(key, knob_value(knobs, field_), table[key].get("unit", ""), source)
    for key in step_term_names(fixed, knobs):  # the step model's other terms (planning/step_model.py), this deployment's
        how = table[key]["basis"]  # fitted on the measured runs, or measured kernel data (data/assumptions.toml)
        add(key, knobs.a(key), table[key].get("unit", ""), f"{which}: data/assumptions.toml ({how}: docs/accuracy.md)")
    add("decode.spec_speedup", result.spec_speedup, "x tokens/step",
        "flag --mtp-speedup" if knobs.mtp_speedup is not None else "flag --spec-acceptance" if knobs.spec_acceptance is not None
        else ("none: the model has no MTP head" if not fixed.has_mtp else f"{which}: decode.mtp_speedup"))
    add("decode.tp_efficiency", decode_setup(fixed, knobs).tp_eff, "fraction",
        "flag --tp-efficiency" if knobs.tp_efficiency is not None else f"{which}: 0.90 per TP doubling")
    for key in ("decode.roofline", "decode.mtp_verified_tokens_per_draft", "decode.attention_flops_per_context_token",
                "decode.unreachable_floor_fraction", "latency.discipline"):
        add(key, knobs.a(key), table[key].get("unit", ""), f"{which}: data/assumptions.toml")
    for key in ("power.idle_fraction_of_tdp", "power.decode_fraction_of_tdp", "power.prefill_fraction_of_tdp",
                "power.host_w_per_gpu", "power.hours_per_month"):
        add(key, knobs.a(key), table[key].get("unit", ""), f"{which}: data/assumptions.toml")
    if knobs.cpu_offload_bytes:
        key = "offload.host_link_efficiency"
        add(key, knobs.a(key), table[key].get("unit", ""), f"{which}: data/assumptions.toml")
        add("offload.host_link", fixed.host_link or "PCIe Gen5 x16 (assumed)", "per GPU",
            fixed.host_link_source or f"assumed: gpus.toml has no host link for {fixed.gpu_key}")
    rows += workload_rows(workload, origin)
    add("pool_tokens", fixed.pool_tokens, "tokens per replica", fixed.pool_source)
    add("routing", "sticky" if knobs.sticky_routing else "random", "", "--no-sticky-routing" if not knobs.sticky_routing else "default")
    add("monte_carlo", f"fills {knobs.fills}, draws {knobs.draws}, seed {knobs.seed}", "", "--fills/--draws/--seed")
    return rows


def workload_rows(workload: Workload, origin: WorkloadOrigin | None = None) -> list[dict[str, Any]]:
    """One row per workload field, with where its value came from (preset, file or flag)."""
    sources = dict(origin.sources) if origin is not None else {}

    def src(name: str, fallback: str = "workload") -> str:
        return sources.get(name, fallback)

    u = workload.user
    rows = [("workload.user_median_tokens", float(u.median_tokens), "tokens", src("user_median_tokens")),
            ("workload.user_sigma", float(getattr(u, "sigma", float("nan"))), "", src("user_sigma")),
            ("workload.user_prefix_tokens", int(u.prefix_tokens), "tokens", src("user_prefix_tokens"))]
    if workload.subagent is not None:
        s = workload.subagent
        rows += [("workload.subagent_median_tokens", float(s.median_tokens), "tokens", src("subagent")),
                 ("workload.subagent_sigma", float(getattr(s, "sigma", float("nan"))), "", src("subagent")),
                 ("workload.subagent_prefix_tokens", int(s.prefix_tokens), "tokens", src("subagent")),
                 ("workload.subagent_ratio", workload.subagent_ratio, "per user request", src("subagent_ratio")),
                 ("workload.subagents_share_prefix", workload.subagents_share_prefix, "", src("subagents_share_prefix"))]
    rows += [("workload.invalidation", workload.invalidation, "fraction",
              src("invalidation") + " (also the cache-miss rate of the prefill queue)"),
             ("workload.max_model_len", workload.max_model_len, "tokens", src("max_model_len", "--max-model-len")),
             ("workload.think_time_s", think_time_of(workload), "s", src("think_time_s")),
             ("workload.output_tokens", workload.output_tokens, "tokens/request", src("output_tokens")),
             ("workload.warm_turn_tokens", workload.warm_turn_tokens, "tokens", src("warm_turn_tokens"))]
    return [{"name": n, "value": v, "unit": unit, "source": source} for n, v, unit, source in rows]


def power_of(fixed: Fixed, workload: Workload, knobs: Knobs, result: Ceilings, *,
             users: float | None = None) -> tuple[PowerBill | None, str]:
    """The power bill at ``users`` (default: the binding ceiling), at the knobs' price and PUE."""
    if not fixed.tdp_w:
        return None, f"{fixed.gpu_key} has no TDP in the GPU catalogue; power and the bill are skipped (give --gpu-tdp W)"
    if result.moments is None:
        return None, "the prefill duty needs the GPU's dense FLOP/s (--gpu-flops); power and the bill are skipped"
    at_binding = users is None
    users = result.values[result.binding] if users is None else float(users)
    r = sub_ratio_of(workload)
    rate_group = request_rate(users / fixed.dp, think_time_of(workload), r)
    bill = bill_at(fixed, knobs, rate_group, result.moments.mean_s, result.decode.n, result.decode.floor_tok_s, users,
                   workload.output_tokens)
    where = "at the binding ceiling" if at_binding else "at a load of"
    return bill, f"{where} ({users:,.0f} users), {fixed.n_gpu} GPU(s)"


def bill_at(fixed: Fixed, knobs: Knobs, rate_group_per_s: float, mean_service_s: float, decoders: int,
            floor_tok_s: float, users: float, output_tokens: float) -> PowerBill:
    """The power bill of ``fixed``'s GPUs (tp x dp) with ``rate_group_per_s`` requests per second on each replica
    group (planning.power; the power states are fractions of the catalogue's TDP, which ``fixed`` must have)."""
    from servesize.planning.power import PowerStates, power_bill, seed_decode_capacity

    states = PowerStates.from_tdp(float(fixed.tdp_w or 0), knobs.a("power.idle_fraction_of_tdp"),
                                  knobs.a("power.decode_fraction_of_tdp"), knobs.a("power.prefill_fraction_of_tdp"),
                                  knobs.a("power.host_w_per_gpu"))
    return power_bill(states, fixed.n_gpu, fixed.dp, rate_group_per_s, mean_service_s,
                      seed_decode_capacity(decoders, floor_tok_s), users,
                      pue=float(knob_value(knobs, "pue")), price_per_kwh=float(knob_value(knobs, "price_per_kwh")),
                      currency=str(knob_value(knobs, "currency")), output_tokens_per_request=output_tokens,
                      hours_per_month=knobs.a("power.hours_per_month"))


# the modelled assumptions whose default departs from the seed's and that move the ceilings (knob field or None)
SEED_SWITCHES = (("decode.bandwidth_efficiency", "bandwidth_efficiency"), ("prefill.mfu", "mfu"), ("load.model", None),
                 ("decode.step_overhead_s", None), ("decode.roofline", None),
                 ("decode.mtp_verified_tokens_per_draft", None))

# each switch in a visitor's words: what the warm-capacity study assumed, and what servesize assumes instead
SEED_WORDS: dict[str, Callable[[Any, Any], str]] = {
    "decode.bandwidth_efficiency": lambda seed, now: f"decode reads HBM at {seed:.0%} of its bandwidth (servesize: {now:.0%})",
    "prefill.mfu": lambda seed, now: f"prefill runs at {seed:.0%} of peak FLOP/s (servesize: {now:.0%})",
    # ... where the deployment's kernels scale the MFU (an FP8 GPU's measured share, AMD, MoE): both sides are scaled
    "prefill.mfu x": lambda seed, now: (f"prefill's MFU is {seed[0]:.0%} (servesize: {now[0]:.0%}; both x {now[1]:.3g} "
                                        f"for these kernels on this GPU: {seed[0] * now[1]:.0%} and {now[0] * now[1]:.0%} "
                                        "of peak FLOP/s)"),
    "load.model": lambda seed, now: "every user decodes at once (servesize: they take turns)",
    "decode.step_overhead_s": lambda seed, now: f"a decode step costs only its reads (servesize: {now * 1e3:g} ms more)",
    "decode.roofline": lambda seed, now: "a decode step costs only its reads (servesize: its GEMMs cost their compute "
                                         "where it is slower than their weights' read)",
    "decode.mtp_verified_tokens_per_draft": lambda seed, now: "verifying MTP drafts is free (servesize: one token each)",
}


def seed_words(assumption: str, seed_value: Any, default: Any, prefill_factor: float = 1.0) -> str:
    """What the warm-capacity study assumed where servesize differs, in a visitor's words; ``prefill_factor``: what
    the deployment's kernels multiply prefill's MFU by (step_model.KernelEfficiency.prefill), said where it is not 1."""
    if assumption == "prefill.mfu" and abs(prefill_factor - 1.0) > 1e-9:
        return SEED_WORDS["prefill.mfu x"]((seed_value,), (default, prefill_factor))
    return SEED_WORDS[assumption](seed_value, default)


def _answer(c: Ceilings) -> tuple[float, str]:
    return c.values[c.binding], c.binding


def seed_difference(fixed: Fixed, workload: Workload, knobs: Knobs, res: Ceilings, cache: CeilingCache) -> dict[str, Any] | None:
    """Which one assumption, set to the seed's value, moves the answer most, and the answer it gives then.

    None under the seed's assumptions, or when no single switch changes the users or the binding ceiling."""
    if knobs.assumptions != "default":
        return None
    table = modelled_assumptions()
    users, binding = _answer(res)
    best = None
    for name, knob in SEED_SWITCHES:
        seed_value, default = table[name]["seed"], table[name]["default"]
        if seed_value == default or (knob is not None and getattr(knobs, knob) is not None):
            continue
        switched = replace(knobs, **{knob: seed_value}) if knob else replace(knobs, overrides=((name, seed_value),))
        other = ceilings(fixed, workload, switched, cache, comfortable=False)
        o_users, o_binding = _answer(other)
        moved = abs(math.log(max(o_users, 1.0) / max(users, 1.0))) + (1.0 if o_binding != binding else 0.0)
        if round(o_users) != round(users) or o_binding != binding:
            if best is None or moved > best["moved"]:
                best = {"assumption": name, "seed_value": seed_value, "default": default, "users": o_users,
                        "binding": o_binding, "moved": moved}
    if best is None:
        return None
    best.pop("moved")
    if best["assumption"] == "prefill.mfu":  # both MFUs run scaled by the deployment's prefill kernels
        best["prefill_factor"] = kernel_efficiency(fixed, knobs).prefill
    return best


def make_plan(fixed: Fixed, dep: Deployment, workload: Workload, knobs: Knobs, *,
              sensitivity_rows: Mapping[str, SensitivityRow] | None = None,
              sensitivity_fills: int = 300, memory: MemoryReport | None = None,
              origin: WorkloadOrigin | None = None) -> Plan:
    cache = CeilingCache()
    res = ceilings(fixed, workload, knobs, cache)
    points = decode_points(fixed, workload, knobs, (1, max_num_seqs(fixed, res)), cache)
    d = Derivation()
    d.extend(fixed.derivation)
    d.extend(res.warm.derivation)
    d.extend(res.decode.derivation)
    rep = None
    if res.prefill is not None:
        d.extend(res.prefill.derivation)
        rep = latency_report(res.moments, res.values[res.binding] / fixed.dp, sub_ratio_of(workload), think_time_of(workload),
                             ttft_queue_budget_s(knobs), knobs.a("latency.discipline"),
                             request_fixed_s=float(knobs.a("step.request_fixed_s")))
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
    sens, vs_seed = {}, None  # no rows (None): no sensitivity panel, nor the seed's comparison beside it
    if sensitivity_rows is not None:  # the rows the fields' declarations give (api)
        sens = sensitivity(fixed, workload, knobs, res.binding, sensitivity_rows, fills=sensitivity_fills, cache=cache)
        vs_seed = seed_difference(fixed, workload, knobs, res, cache)
    return Plan(fixed, workload, knobs, res, recipe, tuple(notes), bill, pnote, sens,
                tuple(assumption_table(fixed, workload, knobs, res, origin)), latency=rep, decode_points=points,
                origin=origin, memory=memory, derivation=d, vs_seed=vs_seed)


@frozen
class SweepCase:
    """One row of a sweep: the parameter's value, how it reads, and the inputs it gives."""

    label: str
    value: float
    workload: Workload
    knobs: Knobs


def sweep_cases(fixed: Fixed, param: str, cases: list[SweepCase]) -> dict[str, Any]:
    """Warm users p5/p50 and the four ceilings for each case (fills and decode banks shared)."""
    cache = CeilingCache()
    rows = []
    for case in cases:
        c = ceilings(fixed, case.workload, case.knobs, cache, comfortable=False)
        rows.append({"value": case.value, "label": case.label, "warm_users": c.warm.users.to_dict(),
                     "warm_sessions": c.warm.sessions.to_dict(), "ceilings": c.values, "binding": c.binding})
    return {"param": param, "rows": rows}


def sweep(fixed: Fixed, workload: Workload, knobs: Knobs, param: str, values: Sequence[float],
          labels: Sequence[str] | None = None) -> dict[str, Any]:
    """``sweep_cases`` over one planner parameter (``planning.sensitivity.apply_param`` names)."""
    cases = []
    for i, v in enumerate(values):
        w, k = apply_param(workload, knobs, param, v)
        cases.append(SweepCase(labels[i] if labels else f"{v:g}", v, w, k))
    return sweep_cases(fixed, param, cases)
