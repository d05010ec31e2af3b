"""Text reports: how each result reads in a terminal (``servesize CMD`` without ``--json``).

``render_text(result, explain)`` dispatches on the result's type. The library's results (Plan,
MemoryReport, FitResult, WarmCapacity, CalibrationCheck, WorkloadFit) are registered here; a layer
above (measure) registers its own; anything else renders itself with ``result.render(explain)``.
"""

from __future__ import annotations

import math

from servesize.planning.ceilings import CEILINGS
from servesize.planning.disaggregated import CEILINGS as DISAGG_CEILINGS
from servesize.planning.disaggregated import CONNECTOR_GPU_SOURCE, DisaggregatedPlan
from servesize.planning.inputs import knob_value
from servesize.planning.load_models import load_model
from servesize.planning.plan import Plan
from servesize.planning.warm_capacity import WarmCapacity
from servesize.render.engine_text import flag_lines, placement_lines, render_text
from servesize.sizing.result import FleetResult
from servesize.sizing.teams import TeamsPanel
from servesize.units import GB
from servesize.vllm_logs.calibration import CalibrationCheck
from servesize.workload.fit import MIN_SUBAGENT_SAMPLES, NEVER_IN_A_LOG, WorkloadFit, fit_meaning


@render_text.register
def _fleet(result: FleetResult, explain: bool = False) -> str:
    from servesize.render.fleet_text import render_fleet  # fleet: servesize fleet's report

    text = render_fleet(result, explain)
    if explain and result.plan is not None:  # the winner's plan, every number derived
        text += "\n\nthe cheapest fleet's plan:\n" + _plan(result.plan, explain=True)
    return text


@render_text.register
def _teams(result: TeamsPanel, explain: bool = False) -> str:
    from servesize.render.fleet_text import render_teams  # plan --team: several teams on one deployment

    return render_teams(result, explain)


def _plan_sizing(plan: Plan) -> list[str]:
    """plan --users N: the direct answer first."""
    s = plan.sizing
    if not s:
        return []
    per = s["per_replica"]
    return [f"for {s['users']:,} users: {s['gpus']} ({s['replicas']} replica(s) of {s['tensor_parallel_size']} "
            f"GPU(s)); one replica holds " + ", ".join(f"{k} {per[k]:,.0f}" for k in CEILINGS)
            + f": {s['sets_replicas']} sets the count"]


def _engine_check(plan: Plan) -> list[str]:
    """The engine simulator's users beside the plan's, where it was run (plan --engine-check)."""
    text = plan.engine_check_text()
    return [text] if text else []


@render_text.register
def _plan(plan: Plan, explain: bool = False) -> str:
    lines = ([f"differs from the engine simulator: {plan.disagreement}"] if plan.disagreement else [])
    lines += (_plan_sizing(plan) + _plan_workload(plan) + ["verdict: " + plan.verdict()] + _engine_check(plan)
              + _plan_head(plan)
              + _plan_ceilings(plan) + _plan_decode(plan) + _plan_serving(plan) + _plan_bill(plan))
    lines = placement_lines(plan.placement) + lines
    if plan.sensitivity:
        lines.append("sensitivity (where the binding ceiling changes):")
        lines += [f"  {name:<24}{s['text']}" for name, s in plan.sensitivity.items()]
    if explain:
        lines.append("\nassumptions:")
        lines += [f"  {a['name']:<34}{_show(a['value']):>14} {a.get('unit', '')}  [{a['source']}]" for a in plan.assumptions]
        lines += ["\nderivation:", plan.derivation.render()]
    return "\n".join(lines)


_FIELD_WORDS = {"user_median_tokens": "median", "user_sigma": "sigma", "user_prefix_tokens": "prefix",
                "subagent": "subagent class", "subagent_ratio": "subagent ratio",
                "subagents_share_prefix": "shared subagent prefix", "invalidation": "invalidation",
                "max_model_len": "cap", "think_time_s": "think time", "output_tokens": "output tokens",
                "warm_turn_tokens": "warm turn", "think_time_sigma": "think-time spread", "output_spread": "reply spread",
                "session_turns": "session length", "reuse_tokens": "prefix reuse distances"}


def _plan_workload(plan: Plan) -> list[str]:
    """The first thing a plan says: which preset, what it assumes, and what replaced it."""
    origin = plan.origin
    if origin is None:
        return ["workload: " + plan.workload.describe().replace("\n", "\n          ")]
    p = origin.preset
    lines = [f"workload: preset {p.name}, {p.description}: {p.summary()}"]
    by_flag = [origin.sources[f].removeprefix("flag ") for f in origin.overridden() if origin.layer(f) == "flag"]
    by_file = [_FIELD_WORDS.get(f, f) for f in origin.overridden() if origin.layer(f) == "file"]
    if by_file:
        lines.append(f"  from {origin.file}: {', '.join(by_file)}")
    if by_flag:
        lines.append(f"  from flags: {', '.join(by_flag)}")
    lines += [f"  note: {n}" for n in origin.notes]
    return lines


def _plan_head(plan: Plan) -> list[str]:
    f, w = plan.fixed, plan.result.warm
    lines = [f"{f.name} on {f.n_gpu}x{f.gpu_key} (TP {f.tp}, DP {f.dp}), KV {f.kv_cache_dtype}, "
             f"pool {f.pool_tokens:,.0f} tokens per replica ({f.pool_source})",
             "  sessions: " + plan.workload.describe().replace("\n", "\n            "),
             f"warm users      p5 {w.users.p5:,.0f} / p50 {w.users.p50:,.0f} / p95 {w.users.p95:,.0f}"
             f"   (all warm sessions {w.sessions.p5:,.0f} / {w.sessions.p50:,.0f} / {w.sessions.p95:,.0f})"]
    offload = plan.offload()
    if offload is not None:
        lines.append("  CPU offload: " + offload["text"])
    return lines + flag_lines(plan.memory)


def _plan_ceilings(plan: Plan) -> list[str]:
    r = plan.result
    head = r.headroom()
    mtp = f" (MTP {r.spec_speedup:.2f}x)" if r.spec_speedup > 1 else ""
    floor = (f"p50 >= {r.decode.floor_tok_s:g} tok/s per user{mtp}" if r.floor_out_of_reach is None else
             f"p50 >= {r.decode.floor_tok_s:.1f} tok/s per user{mtp}: the {r.floor_out_of_reach.floor_tok_s:g} "
             "tok/s floor is out of reach")
    budget = knob_value(plan.knobs, 'ttft_limit_s')
    desc = load_model(plan.knobs).describe(r, floor, budget, plan.fixed.dp)  # the words of the rule that computed it
    lines = ["ceilings (users):"]
    for k in CEILINGS:
        if k in r.missing:
            lines.append(f"  {k:<11}{'-':>10}   {desc[k]}: needs {r.missing[k]}")
            continue
        mark = "  <- binding" if k == r.binding else (f"  x{head[k]:.2f}" if head[k] is not None else "")
        lines.append(f"  {k:<11}{r.values[k]:>10,.0f}   {desc[k]}{mark}")
    lines += _miss_share_line(plan)
    c = r.decode_comfortable
    if c is not None and c.n > 0:
        lines.append(f"  (decode at the comfortable {c.floor_tok_s:g} tok/s: {c.n * plan.fixed.dp:,} users)")
    elif c is not None:
        lines.append(f"  (the comfortable {c.floor_tok_s:g} tok/s is out of reach: one user alone gets "
                     f"{c.p50_one_more_tok_s:.1f} tok/s)")
    return lines


def _miss_share_line(plan: Plan) -> list[str]:
    """The share of turns that miss the TTFT budget at the binding load (the load model)."""
    share = plan.miss_share
    if share is None:
        return []
    r = plan.result
    budget = knob_value(plan.knobs, 'ttft_limit_s')
    line = (f"  TTFT: {share:.1%} of turns miss the {budget:g} s budget at {r.values[r.binding]:,.0f} users"
            + (f"; {r.ttft.base_share:.1%} miss at any load (cold prefill p99.9 {r.ttft.longest_miss_s:.1f} s)"
               if r.ttft is not None and r.ttft.base_share >= 0.0005 else ""))
    return [line]


def _plan_decode(plan: Plan) -> list[str]:
    if not plan.decode_points:
        return []
    k = plan.knobs
    lines = [f"decode per user, p50 (bounds: bandwidth efficiency {_bracket(plan, 'bandwidth_efficiency')}, "
             f"compute {_bracket(plan, 'compute_efficiency')}; roofline {k.a('decode.roofline')}):"]
    mns = max(p.n for p in plan.decode_points)
    for point in plan.decode_points:
        label = "1 user" if point.n == 1 else f"{point.n} users"
        if point.n == mns:
            label += " (--max-num-seqs)"
        legs = point.speed.bound + (f"-bound, compute/memory {point.speed.compute_share:.2f}"
                                    if point.speed.compute_s_p50 else "-bound")
        lines.append(f"  {label:<26}{point.speed.p50_tok_s:>8.1f} tok/s  ({point.low_tok_s:.1f} - "
                     f"{point.high_tok_s:.1f}), {legs}; aggregate {point.speed.aggregate_p50_tok_s:,.0f} tok/s")
    return lines


def _bracket(plan: Plan, knob: str) -> str:
    from servesize.planning.ceilings import efficiency_bracket

    name = {"bandwidth_efficiency": "decode.bandwidth_efficiency", "compute_efficiency": "decode.compute_efficiency"}[knob]
    lo, hi = efficiency_bracket(plan.knobs, knob, name)
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def _warm_tokens(plan: Plan) -> str:
    """What a warm hit prefills beyond its turn (planning.ceilings.warm_prefill_tokens), where that is a block or more:
    only where the hit's last block is dropped (the rest of the last block is under one block)."""
    priced, turn = plan.result.prefill.warm_turn_tokens, plan.workload.warm_turn_tokens
    if priced - turn < plan.fixed.block_size:
        return ""
    return (f"; a warm hit prefills {priced:,.0f} tokens: its turn's {turn:,} and {priced - turn:,.0f} of the "
            f"{plan.fixed.block_size:,}-token blocks its hit does not cover (its last one, and the one MTP drafts make "
            f"vLLM drop)")


def _plan_serving(plan: Plan) -> list[str]:
    r, w = plan.result, plan.result.warm
    lines = [f"prefill: cold miss {r.prefill.miss_s:.2f} s, warm hit {r.prefill.hit_s:.3f} s "
             f"(one miss costs {r.prefill.thrash_ratio:.0f} hits){_warm_tokens(plan)}" if r.prefill is not None
             else "prefill: not timed (no dense FLOP/s figure for this GPU: give --gpu-flops)"]
    if plan.latency is not None and math.isfinite(plan.latency.burst_tolerance):
        lines.append(f"burst: at the binding load a replica absorbs {plan.latency.burst_tolerance:.1f} simultaneous "
                     f"cold misses within the {knob_value(plan.knobs, 'ttft_limit_s'):g} s TTFT limit")
    lines += [f"over its limit: {x['text']}" for x in plan.limits_over()]
    if w.restore:
        over = f"{w.restore['links']} x {w.restore['link']}" if w.restore["links"] > 1 else w.restore["link"]
        lines.append(f"offload restore over {over} ({w.restore['pcie_bytes_per_s'] / GB:g} GB/s): "
                     f"{w.restore['seconds_per_100k_tokens']:.3f} s per 100k "
                     f"tokens, {w.restore['median_session_seconds']:.3f} s for the median session (contention not priced; "
                     f"link: {w.restore['link_source'] or 'given'})")
    return lines + ["recipe:", "  " + plan.recipe] + ["  " + note for note in plan.recipe_notes]


def _plan_bill(plan: Plan) -> list[str]:
    p, r = plan.power, plan.result
    if p is None:
        return [f"power: {plan.power_note}"]
    cur = p.currency
    per_user = f"{cur} {p.cost_per_user_month:.2f} per user per month, " if math.isfinite(p.cost_per_user_month) else ""
    per_mtok = (f"{cur} {p.cost_per_million_output_tokens:.3f} per 1M output tokens "
                if math.isfinite(p.cost_per_million_output_tokens) else "")
    return [f"power at {r.values[r.binding]:,.0f} users: {p.kw_at_meter:.2f} kW at the meter, "
            f"{cur} {p.cost_per_month:,.0f} per month, {per_user}{per_mtok}"
            f"(electricity {cur} {p.price_per_kwh:g}/kWh, PUE {p.pue:g})"]


@render_text.register
def _warm_capacity(wc: WarmCapacity, explain: bool = False) -> str:
    scope = {"single": "one pool", "sticky": f"{wc.replicas} replicas, sticky routing",
             "random": f"{wc.replicas} replicas, random routing"}[wc.routing]
    lines = [
        f"warm capacity ({scope}; p5 / p50 / p95 over {wc.fills:,} fills)",
        f"  warm users          {wc.users}",
        f"  warm sessions       {wc.sessions}",
        f"  GPU-resident        {wc.gpu_resident}",
    ]
    if wc.cpu_offload_bytes > 0:
        lines.append(f"  CPU-offloaded       {wc.cpu_offloaded}")
    if wc.restore:
        lines.append(
            f"  restore over PCIe   {wc.restore['seconds_per_100k_tokens']:.3f} s per 100k tokens, "
            f"{wc.restore['median_session_seconds']:.3f} s for the median session "
            f"(at {wc.restore['pcie_bytes_per_s'] / GB:g} GB/s; storage view: offloaded sessions are less warm)"
        )
    if wc.routing == "random":
        lines.append(
            f"  random routing keeps one replica's worth warm; a population of {wc.replicas} x that "
            f"would hit at most {wc.sticky_population_hit_rate_bound:.0%} of the time (LRU does worse)"
        )
    if explain:
        lines += ["", wc.explain()]
    return "\n".join(lines)


@render_text.register
def _calibration_check(check: CalibrationCheck, explain: bool = False) -> str:
    rows = [f"servesize prediction vs {check.source}"]
    for c in check.checks:
        logged = f"[{c.logged[0]:,.0f}, {c.logged[1]:,.0f})" if isinstance(c.logged, tuple) else f"{c.logged:,}"
        pct = f" ({c.error_pct:+.2f}%)" if c.error_pct is not None else ""
        rows.append(f"  {c.name:<28} predicted {c.predicted:,}  logged {logged}  error {c.error:+,}{pct} {c.unit}")
    rows += [f"  note: {n}" for n in check.notes]
    return "\n".join(rows)


@render_text.register
def _workload_fit(fit: WorkloadFit, explain: bool = False) -> str:
    o, f = fit.observations, fit.user_fit
    lines = [
        f"{o.path}: {o.format}, {o.field}; {o.records:,} records, {len(o.user):,} prompt lengths; "
        f"{o.skipped:,} unreadable row(s) skipped; {fit.dropped:,} dropped under --min-tokens {fit.min_tokens:,}",
        f"user class: log-normal median {f.median:,.0f} tokens, sigma {f.sigma:.3f} (n = {f.n:,})",
        f"  goodness of fit: {fit_meaning(f.ks_d, f.n, f.ks_p)}",
        f"  written as: {'the log-normal' if fit.distribution == 'lognormal' else 'the observed distribution itself (empirical)'}",
    ]
    if fit.subagent_fit is not None:
        s = fit.subagent_fit
        lines.append(f"subagent class: log-normal median {s.median:,.0f} tokens, sigma {s.sigma:.3f} (n = {s.n:,}); "
                     f"r = {fit.workload.subagent_ratio:.3f} subagent requests per user request; KS D = {s.ks_d:.3f}")
    elif o.subagent:
        lines.append(f"subagent requests: {len(o.subagent):,}, too few to fit (< {MIN_SUBAGENT_SAMPLES}); not written")
    hit = fit.cache_hit_rate()
    if hit is not None:
        lines.append(f"observed prefix-cache hit rate (cached / prompt tokens): {hit:.1%}")
    lines.append(f"fields (fitted from the file, or preset {fit.preset_name}'s):")
    for name, field_fit in fit.fields.items():
        if field_fit.fitted:
            shown = f"{field_fit.value:,}" if isinstance(field_fit.value, (int, float)) else str(field_fit.value)
            if name == "reuse_tokens":  # 64 points: their median here, every one in --json and the file
                shown = f"median {field_fit.value[len(field_fit.value) // 2]:,.0f}"
            lines.append(f"  {name:<20} {shown:>14}  fitted: {field_fit.how}")
        else:
            lines.append(f"  {name:<20} {'preset':>14}  {field_fit.how}")
    lines += [f"  {name:<20} {'preset':>14}  {why}" for name, why in NEVER_IN_A_LOG.items()]
    lines += [f"note: {n}" for n in fit.notes]
    if fit.out:
        lines.append(f"wrote {fit.out} (use it with: servesize plan MODEL --gpus ... --workload {fit.out})")
    if fit.plot:
        lines.append(f"wrote {fit.plot}")
    if explain:
        lines += ["", fit.derivation.render(), "", "workload (fitted fields over the preset):", fit.workload.describe()]
    return "\n".join(lines)


@render_text.register
def _disaggregated(plan: DisaggregatedPlan, explain: bool = False) -> str:
    layout, values, link = plan.layout, plan.values, plan.link
    why = {
        "cache": "decode pool: warm user sessions p5 its prefix caches keep (a warm turn pulls only its new tokens)",
        "decode": "decode pool: per-user decode at the floor (p50), no prefill chunk in its steps",
        "latency": f"prefill pool: the TTFT limit {plan.ttft_budget_s:g} s less a cold turn's handover "
                   f"{plan.turns['cold'].handover_s:.2f} s",
        "saturation": "prefill pool: prefill duty 100%",
        "prefill cache": "prefill pool: warm user sessions p5 its prefix caches keep (a session-sticky router)",
        "link": f"{layout.link['name']} busy all the time (decode ranks at {link.decode_users:,.0f}, "
                f"prefill GPUs' sends at {link.prefill_users:,.0f})",
    }
    lines = [f"verdict: {plan.verdict()}", f"layout: {layout.words()}"]
    if layout.link_assumed:
        lines.append(f"  link {layout.link_key}: {layout.link_assumed}")
    memory = plan.memory()
    for role in ("prefill", "decode"):
        m = memory[role]
        if m is not None:
            lines.append(f"{role} instance: pool {m['kv_cache_tokens']:,} tokens ({m['num_blocks']:,} blocks of "
                         f"{m['block_size']}); it logs: " + "; ".join(m["log_lines"]))
    lines.append(f"  {layout.connector} reserves no GPU memory beside the pool ({CONNECTOR_GPU_SOURCE})")
    lines.append("ceilings (users):")
    for k in DISAGG_CEILINGS:
        mark = "  <- binding" if k == plan.binding else ""
        lines.append(f"  {k:<14} {values[k]:>8,.0f}   {why[k]}{mark}")
    ctx = plan.turns["cold"].context_tokens
    lines.append(f"transfer per turn (a session of {ctx:,} tokens, the median; {layout.connector}, per decode rank):")
    for turn, tt in plan.turns.items():
        lines.append(f"  {turn:<6} {tt.pull.remote_tokens:>8,} tokens pulled, {tt.pull.bytes / GB:,.3f} GB over the link "
                     f"({tt.time.descriptors:,} descriptors per rank): {tt.time.seconds * 1e3:,.1f} ms; handover "
                     f"{tt.handover_s * 1e3:,.0f} ms with the decode instance's steps ({plan.decode_step_s * 1e3:.1f} ms "
                     "each at the floor)")
    lines.append(f"  link at {plan.users:,.0f} users: {link.utilisation_at(plan.users):.1%} busy "
                 f"(shares of requests: warm {link.shares['warm']:.1%}, cold {link.shares['cold']:.1%}, session start "
                 f"{link.shares['start']:.1%})")
    lines.append(f"aggregated on the same GPUs: {plan.aggregated.words()}")
    lines.append(f"comparison: {plan.comparison()}")
    checked = plan.engine_check_text()
    if checked:
        lines.append(checked)
    lines.append("recipes:")
    for role, line in plan.recipes().items():
        lines.append(f"  {role}: {line}")
    return "\n".join(lines)


def _show(v):
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.4g}"
    return str(v)


def render_sweep(sweep: dict) -> str:
    lines = [f"sweep over {sweep['param']}:",
             f"  {'value':>10} {'warm p5':>8} {'warm p50':>9} {'cache':>7} {'decode':>7} {'latency':>8} {'saturation':>10}  binding"]
    for row in sweep["rows"]:
        c = row["ceilings"]
        lines.append(f"  {row['label']:>10} {row['warm_users']['p5']:>8,.0f} {row['warm_users']['p50']:>9,.0f} "
                     f"{c['cache']:>7,.0f} {c['decode']:>7,.0f} {c['latency']:>8,.0f} {c['saturation']:>10,.0f}  {row['binding']}")
    return "\n".join(lines)
