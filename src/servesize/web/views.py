"""The JSON documents the explorer renders, each built from library calls only.

``plan_view`` answers ``POST /api/plan``: the verdict first, then the tiles, the memory bar, the
recipe, the bill, the length distribution, the predictions as falsifiable hypotheses, the
derivations behind every number, and ``plan``: exactly what ``servesize plan --json`` prints for the
same Scenario (its sensitivity panel aside, which ``POST /api/sensitivity`` computes). Every figure
shown is formatted here, with its unit, so the page never converts one: GiB = 2**30 B, tokens, users,
tok/s, seconds.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

import servesize.api as api
from servesize.api import Load
from servesize.derivation import Derivation
from servesize.errors import ServesizeError
from servesize.flags import flags_of
from servesize.jsonable import finite
from servesize.measure.record import parse_record
from servesize.measure.sessions import verdict as bracket_verdict
from servesize.model.catalogue import InlineConfig
from servesize.model.hardware import parse_gpus
from servesize.scenario import PARAMS, Scenario
from servesize.units import GB, GiB, fmt_bytes, fmt_tokens
from servesize.vllm_logs.calibration import LOG_HINTS, Calibration, calibrate_against
from servesize.web.form import DRAFT_FILLS, VIEW_PARAMS
from servesize.web.requests import PlanRequest, RequestError, scenario_of

if TYPE_CHECKING:
    from servesize.api import AtLoad, MemoryReport, Plan

# -- the plan, memoised ---------------------------------------------------------------------------

@lru_cache(maxsize=64)
def planned(scenario: Scenario) -> Plan:
    """``servesize.plan`` without the sensitivity panel, memoised on the (hashable, frozen) Scenario:
    a share link opened twice or a slider let go where it was costs nothing the second time."""
    return api.plan(scenario, sensitivity=False)


def drafted(scenario: Scenario, draft: bool) -> Scenario:
    return scenario.replace(fills=min(scenario.fills, DRAFT_FILLS)) if draft else scenario


# -- figures as text (one place, every unit said) ----------------------------------------------------

def users_text(x: float | None) -> str:
    return "unbounded" if x is None or not math.isfinite(x) else f"{x:,.0f}"


def seconds_text(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "unbounded (the queue grows)"
    return f"{x:.2f} s" if x < 10 else f"{x:,.1f} s"


def tok_s_text(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.0f} tok/s" if x >= 100 else f"{x:,.1f} tok/s"


def series_words(name: str, xs, ys, x_text=lambda x: f"{x:,.0f}", y_text=lambda y: f"{y:,.0f}", points: int = 3) -> str:
    """A chart's series in words for a screen reader: its values at the first, middle and last of its points
    (``points`` of them, in order), as the chart's axes write them; 'no points' when it has none."""
    pairs = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
    if not pairs:
        return f"{name}: no points"
    picks = sorted({round(i * (len(pairs) - 1) / max(points - 1, 1)) for i in range(points)})
    return f"{name}: " + ", ".join(f"{y_text(pairs[i][1])} at {x_text(pairs[i][0])}" for i in picks)


def steps_of(*derivations: Derivation | None) -> list[dict]:
    """Derivation steps as the page shows them: the engine's own rendering, with the value."""
    out = []
    for d in derivations:
        for s in (d.steps if d is not None else ()):
            out.append({"name": s.name, "text": s.render(), "value": finite(s.value), "unit": s.unit})
    return out


# -- the load the page prices ----------------------------------------------------------------------

def at_load(plan: Plan, load: Load) -> AtLoad:
    """The plan priced at the page's load (``api.at_load``: the library's, on the memoised plan)."""
    return api.at_load(plan, load)


# -- the verdict and the tiles ------------------------------------------------------------------------

def _why(plan: Plan) -> str:
    r = plan.result
    return api.load_model(plan).why(r, users_text(r.values[r.binding]), float(api.knob(plan, "ttft_limit_s")),
                                      plan.fixed.dp)


def verdict(plan: Plan, at: AtLoad) -> dict:
    r = plan.result
    model = api.load_model(plan)  # the load model that computed the ceilings says what each means
    order = sorted(api.ceiling_names(), key=lambda c: r.values[c])
    binding_users = r.values[r.binding]
    runner = order[1]
    head = r.headroom()
    out = {
        "binding": r.binding, "users": binding_users, "users_text": users_text(binding_users),
        "headline": f"{users_text(binding_users)} users: {r.binding} binds first",
        # the library's verdict line; the seed's answer (plan.vs_seed) comes with the sensitivity panel (charts.py)
        "sentence": plan.verdict(), "detail": plan.verdict_detail(),
        "why": _why(plan),
        "next": {"ceiling": runner, "users": r.values[runner], "headroom": head.get(runner),
                 "text": f"next: {runner} at {users_text(r.values[runner])} users"
                         + (f" (x{head[runner]:.2f})" if head.get(runner) else "")},
        "ceilings": [{"name": c, "users": r.values[c], "text": users_text(r.values[c]), "means": model.meaning(c),
                      "binding": c == r.binding, "headroom": head.get(c)} for c in api.ceiling_names()],
        "load": None,
        "offload": (plan.offload() or {}).get("text"),   # where the warm users' sessions live, and a restore's cost
        # each figure over its limit (tiles ttft_miss, burst; decode and aggregate: decode), and why it binds or not
        "limits": plan.limits_over(at),
    }
    if at.given:
        fits = at.users <= binding_users
        share = at.users / binding_users if binding_users > 0 else math.inf
        out["load"] = {"users": at.users, "fits": fits, "share_of_binding": finite(share),
                       "text": (f"your {users_text(at.users)} users fit: {share:.0%} of the binding ceiling" if fits else
                                f"your {users_text(at.users)} users are over the {r.binding} ceiling by "
                                f"{users_text(at.users - binding_users)}")}
    return out


def _tile(tid: str, label: str, value: Any, text: str, sub: str, *, status: str | None = None,
          explain: tuple[str, ...] = (), refuted_by: str = "", big: bool = False) -> dict:
    """``explain``: the sections of ``explain_view`` that derive this number (fetched when opened)."""
    return {"id": tid, "label": label, "value": finite(value), "text": text, "sub": sub, "status": status,
            "explain": list(explain), "refuted_by": refuted_by, "big": big}


def _warm_tile(plan: Plan) -> dict:
    w = plan.result.warm
    return _tile("warm", "Warm users (p5): the cache ceiling", w.users.p5, users_text(w.users.p5),
                 f"p50 {users_text(w.users.p50)} · p95 {users_text(w.users.p95)}; all warm sessions (with subagents) "
                 f"p5 {users_text(w.sessions.p5)} over {w.fills:,} fills",
                 explain=("warm",),
                 refuted_by="servesize measure sessions: the warm-hit rate falls under its --warm-target at a rung "
                            f"of {users_text(w.users.p5)} users or fewer")


def _pool_tile(plan: Plan) -> dict:
    f = plan.fixed
    bytes_per_replica = f.pool_tokens * f.kv_bytes_per_token_rank
    lines = "; ".join(f.memory.get("log_lines") or [])
    why = plan.memory.pool.log_line_note if plan.memory is not None else None   # why the log's count is not the pool
    return _tile("pool", "KV pool per replica", f.pool_tokens, f"{fmt_tokens(f.pool_tokens)} tokens",
                 f"{fmt_bytes(bytes_per_replica)} of KV per GPU at {f.kv_bytes_per_token_rank:,} B/token/GPU; "
                 f"vLLM logs: {lines}" + (f" ({why})" if why else "") if lines else f.pool_source,
                 explain=("memory", "pool"),
                 refuted_by=f"servesize measure pool: its [low, high) interval excludes {f.pool_tokens:,.0f} tokens; "
                            "or the 'GPU KV cache size' line of the server's start-up log (paste it below)")


def _decode_tiles(plan: Plan, at: AtLoad) -> list[dict]:
    r = plan.result
    floor = r.decode.floor_tok_s
    agg = at.decode["p50"] * at.decoders * plan.fixed.dp
    where = (f"at {at.decoders:,} concurrent decoders per replica: {at.decoders_rule}"
             + ("" if at.given else ", the binding ceiling's"))
    return [
        _tile("decode", "Per-user decode (p50)", at.decode["p50"], tok_s_text(at.decode["p50"]),
              f"{where}; p5 {tok_s_text(at.decode['p5'])}, p95 {tok_s_text(at.decode['p95'])}; floor {floor:g}, "
              f"comfortable {api.knob(plan, 'comfortable_floor'):g}", status=at.decode_status,
              explain=("decode",),
              refuted_by=f"servesize measure sessions: decode tok/s per user at the rung nearest "
                         f"{users_text(r.decode.n * plan.fixed.dp)} users is below {floor:g}"),
        _tile("aggregate", "Aggregate decode (p50)", agg, tok_s_text(agg),
              f"{at.decoders:,} x {tok_s_text(at.decode['p50'])} x {plan.fixed.dp} replica(s)", status=at.decode_status,
              refuted_by="servesize measure sessions: decode tok/s per user at the rung nearest that load, times its "
                         "users"),
    ]


def _latency_tiles(plan: Plan, at: AtLoad) -> list[dict]:
    lat, prefill, dp = at.latency, plan.result.prefill, plan.fixed.dp
    status = api.limit_status(at)
    where = f"at {users_text(at.users)} users" + ("" if at.given else " (the binding ceiling)")
    budget = f"{lat.ttft_limit_s:g} s"
    return [
        _tile("burst", "Cold-burst tolerance B*", lat.burst_tolerance, f"{lat.burst_tolerance:,.1f} misses",
              f"simultaneous misses a replica answers within the {budget} budget {where}; a burst of "
              f"{at.burst:,.0f} drains in {seconds_text(lat.burst_drain_s)}", status=status["burst"],
              explain=("latency",),
              refuted_by="send that many cold requests at once to the loaded server and time the last one's first "
                         "token (servesize measure does not send bursts yet)"),
        _tile("cold_rate", "Cold requests per second", prefill.max_cold_rate_per_s * dp,
              f"{prefill.max_cold_rate_per_s * dp:,.2f} /s",
              f"misses per second at which prefill alone saturates ({dp} replica(s) x 1 / {seconds_text(prefill.miss_s)})",
              explain=("prefill",),
              refuted_by="a prefill benchmark on the server: the TTFT of a lone cold request of the mean length"),
        _tile("ttft_miss", "TTFT of a miss", lat.miss_ttft_s, seconds_text(lat.miss_ttft_s),
              f"mean, {where}: the queue, then its own full prefill; budget {budget}",
              status=status["ttft_miss"], explain=("latency",),
              refuted_by="servesize measure sessions: ttft_miss at the rung nearest that load"),
        _tile("ttft_hit", "TTFT of a hit", lat.hit_ttft_s, seconds_text(lat.hit_ttft_s),
              f"mean, {where}: the queue, then the new turn ({plan.workload.warm_turn_tokens:,} tokens)",
              explain=("latency",),
              refuted_by="servesize measure sessions: ttft_hit at the rung nearest that load"),
    ]


def _offload_tiles(plan: Plan) -> list[dict]:
    """With CPU offload: the warm users whose session is in host RAM, and a turn's restore over the host link
    (plan.offload(): the library's figures and its line)."""
    o = plan.offload()
    if o is None:
        return []
    ram, gpu = o["users_in_host_ram"]["p5"], o["users_in_gpu_kv"]["p5"]
    users = ram + gpu   # the fill at the p5 of warm users: its two tiers add up to its users
    restore = o["restore_s_per_turn"]
    return [
        _tile("offload_split", "Warm users in host RAM (p5)", ram, f"{users_text(ram)} of {users_text(users)}",
              f"{users_text(gpu)} in GPU KV, {users_text(ram)} in host RAM only ({fmt_bytes(o['cpu_offload_bytes'])} "
              "per engine), in the fill at the p5 of warm users", explain=("warm",),
              refuted_by="vLLM's offloading connector metrics on the loaded server: the share of prefix hits served "
                         "from host RAM"),
        _tile("restore", "Restore from host RAM, per turn", restore, f"{restore:.3f} s",
              f"the median warm session back over {o['link']} ({o['restore_bytes_per_s'] / GB:,.1f} GB/s): "
              f"{o['restore_s_per_100k_tokens']:.3f} s per 100k tokens, uncontended"
              + ("; link assumed (not in the GPU catalogue)" if o["link_assumed"] else ""),
              explain=("warm",),
              refuted_by="time a returning session's first token on the server when its prefix was offloaded: "
                         "the restore adds at least this"),
    ]


def tiles(plan: Plan, at: AtLoad) -> list[dict]:
    return [_warm_tile(plan), *_offload_tiles(plan), _pool_tile(plan), *_decode_tiles(plan, at),
            *_latency_tiles(plan, at)]


# -- memory, recipe, bill ---------------------------------------------------------------------------

def memory_bar(report: MemoryReport, *, steps: bool = True) -> dict:
    """One GPU's memory, stacked: weights, the engine's reserve, the KV pool, and what vLLM leaves free."""
    b = report.budget
    parts = [("weights", "weights", b.weights_bytes), ("activation", "activation peak", b.activation_bytes),
             ("cuda_graphs", "CUDA graphs", b.cudagraph_bytes), ("non_torch", "non-torch", b.non_torch_bytes),
             ("kv_pool", "KV cache", b.available_bytes)]
    used = sum(x for _, _, x in parts)
    free = b.total_bytes - used
    segments = [{"id": k, "label": label, "bytes": x, "text": fmt_bytes(x), "share": x / b.total_bytes}
                for k, label, x in parts if x > 0]
    if free > 0:
        segments.append({"id": "free", "label": "not requested", "bytes": free, "text": fmt_bytes(free),
                         "share": free / b.total_bytes})
    util = report.deployment.gpu_memory_utilization
    return {"total_bytes": b.total_bytes, "total_text": fmt_bytes(b.total_bytes), "segments": segments,
            "overcommitted": free < 0, "budget": b.budget,
            "caption": f"one GPU of {report.gpus.count}x{report.gpus.gpu.key}: {fmt_bytes(b.total_bytes)} as nvidia-smi "
                       f"reports it ({report.gpus.gpu.memory_mib:,} MiB); vLLM requests {util} of it",
            "log_lines": list(report.pool.log_lines), "warnings": list(report.warnings),
            "steps": steps_of(report.derivation) if steps else []}


def bill(at: AtLoad) -> dict:
    power, note = at.power, at.power_note
    if power is None:
        return {"available": False, "note": note}
    per_user, cur = power.cost_per_user_month, power.currency
    return {"available": True, "note": note, "kw_at_meter": power.kw_at_meter, "kwh_per_month": power.kwh_per_month,
            "cost_per_month": power.cost_per_month, "cost_per_user_month": finite(per_user),
            "cost_per_million_output_tokens": finite(power.cost_per_million_output_tokens),
            "price_per_kwh": power.price_per_kwh, "pue": power.pue, "currency": cur,
            "text": {"kw": f"{power.kw_at_meter:,.2f} kW at the meter",
                     "month": f"{power.cost_per_month:,.0f} {cur} per month",
                     "user": f"{per_user:,.2f} {cur} per user per month" if math.isfinite(per_user) else "-",
                     "tokens": f"{power.cost_per_million_output_tokens:,.3f} {cur} per million output tokens"},
            "duty": {k: power.to_dict()[k] for k in ("prefill_duty", "decode_duty", "idle_fraction")}}


# -- the length distribution (chart A) ---------------------------------------------------------------

LENGTH_BINS = 60


def lengths(plan: Plan) -> dict:
    """Prompt-length density of each class (share-weighted, per unit of ln length) and the cap."""
    w = plan.workload
    cap = float(w.max_model_len)
    lo = max(1.0, min(c.median_tokens for c in w.classes()) / 50)
    hi = max(cap, max(c.median_tokens for c in w.classes()) * 20)
    edges = np.geomspace(lo, hi, LENGTH_BINS + 1)
    centres = np.sqrt(edges[:-1] * edges[1:])
    dln = np.diff(np.log(edges))
    p_sub = w.subagent_probability
    series = []
    for cls, share in ((w.user, 1.0 - p_sub), (w.subagent, p_sub)):
        if cls is None or share <= 0:
            continue
        mass = api.length_mass(cls, edges)
        above = float(api.length_mass(cls, np.array([cap, math.inf]))[0])
        series.append({"name": cls.name, "share": share, "y": (share * mass / dln).tolist(), "above_cap": above,
                       "median": float(cls.median_tokens), "prefix": int(cls.prefix_tokens),
                       "text": f"{cls.name}: median {fmt_tokens(cls.median_tokens)}, {above:.1%} above the cap "
                               f"(they are cut to {fmt_tokens(cap)})"})
    return {"x": centres.tolist(), "cap": cap, "cap_text": f"max_model_len {fmt_tokens(cap)}", "series": series,
            "y_label": "share of requests per unit of ln(length)",
            "description": "Prompt-length distribution: " + "; ".join(x["text"] for x in series) + "."}


# -- the split control ---------------------------------------------------------------------------------

def splits(scenario: Scenario, plan: Plan | None = None) -> list[dict]:
    """Every DP x TP split of the GPUs, and whether its weights fit (the engine's own refusal if not); the current
    one is the plan's (servesize chooses it when the scenario leaves TP and DP at 1)."""
    count = parse_gpus(scenario.gpus, memory=scenario.gpu_memory).count
    now = (plan.fixed.tp, plan.fixed.dp) if plan is not None else (scenario.tensor_parallel_size,
                                                                      scenario.data_parallel_size)
    out = []
    for tp in (t for t in range(1, count + 1) if count % t == 0):
        dp = count // tp
        try:
            api.memory(scenario.replace(tensor_parallel_size=tp, data_parallel_size=dp, calibration=None))
            fits, reason = True, None
        except ServesizeError as exc:
            fits, reason = False, str(exc)
        out.append({"dp": dp, "tp": tp, "label": f"{dp} x {tp}", "fits": fits, "reason": reason,
                    "current": (tp, dp) == now})
    return out


# -- what every control holds, resolved --------------------------------------------------------------

def effective(plan: Plan, at: AtLoad) -> dict:
    """The value each field took (a None resolved by the engine, the workload or the assumptions)."""
    out: dict[str, Any] = {}
    if plan.memory is not None:
        dep = plan.memory.deployment
        out.update({name: getattr(dep, name) for name in api.ENGINE_FIELDS})
    w, k = plan.workload, plan.knobs
    out.update({"median": w.user.median_tokens, "sigma": getattr(w.user, "sigma", None), "prefix": w.user.prefix_tokens,
                "invalidation": w.invalidation, "think_time": w.think_time_s, "output_tokens": w.output_tokens,
                "warm_turn_tokens": w.warm_turn_tokens, "subagents_share_prefix": w.subagents_share_prefix,
                "subagent_ratio": w.subagent_ratio if w.subagent is not None else 0.0})
    if w.subagent is not None:
        out.update({"subagent_median": w.subagent.median_tokens, "subagent_sigma": getattr(w.subagent, "sigma", None),
                    "subagent_prefix": w.subagent.prefix_tokens})
    for name in ("bandwidth_efficiency", "decode_floor", "comfortable_floor", "mfu"):
        out[name] = api.knob(plan, name)
    out["ttft_limit"] = api.knob(plan, "ttft_limit_s")
    out["mtp_speedup"] = plan.result.spec_speedup
    out["tp_efficiency"] = api.tp_efficiency(plan)
    out["cpu_offload_gib"] = k.cpu_offload_bytes / GiB
    out["load_users"], out["burst"] = at.users, at.burst
    if plan.power is not None:
        out["electricity_price"], out["pue"], out["currency"] = plan.power.price_per_kwh, plan.power.pue, plan.power.currency
    return finite(out)


def share(scenario: Scenario, load: Load) -> dict:
    """What a share link carries: the fields that differ from their declared defaults (an uploaded
    config, workload or calibration is content, not a link, and is left out with a note)."""
    fields: dict[str, Any] = {}
    left_out = []
    for name, value in scenario.explicit().items():
        if PARAMS[name].kind in ("model", "workload", "calibration") and not isinstance(value, str):
            left_out.append(name)
            continue
        fields[name] = value
    fields.update(load.given())
    return {"fields": finite(fields), "left_out": left_out}


# -- test these predictions ------------------------------------------------------------------------------

PREDICT_GROUPS = ("model", "engine", "knobs", "calibration", "monte_carlo")
WORKLOAD_FILE = "servesize-workload.json"
CONFIG_FILE = "config.json"
CALIBRATION_FILE = "servesize-calibration.json"


def _hypotheses(plan: Plan, at: AtLoad) -> list[dict]:
    r, f = plan.result, plan.fixed
    lat = at.latency
    return [
        {"id": "pool", "claim": f"the engine builds a KV pool of {f.pool_tokens:,.0f} tokens per replica",
         "predicted": f.pool_tokens, "unit": "tokens",
         "measured_by": "measure pool (the first half of measure server), and the start-up log's 'GPU KV cache size'",
         "refuted_if": f"the measured [low, high) interval excludes {f.pool_tokens:,.0f} tokens (measure pool prints "
                       "'inside' and the relative error)"},
        {"id": "warm", "claim": f"{users_text(r.warm.users.p5)} users stay warm (p5); {users_text(r.warm.users.p50)} at "
                                "the median", "predicted": r.warm.users.p50, "unit": "users",
         "measured_by": "measure sessions: the warm-hit rate on a ladder of user counts around the prediction",
         "refuted_if": "its 'warm users' verdict line is marked ✗ (the knee lies well outside the prediction)"},
        {"id": "decode", "claim": f"per-user decode stays >= {r.decode.floor_tok_s:g} tok/s (p50) up to "
                                  f"{users_text(r.decode.n * f.dp)} concurrent users", "predicted": r.decode.n * f.dp,
         "unit": "users", "measured_by": "measure sessions: decode tok/s per user at each rung",
         "refuted_if": f"at the rung nearest {users_text(r.decode.n * f.dp)} users the per-user decode p50 is below "
                       f"{r.decode.floor_tok_s:g} tok/s (its 'decode tok/s per user at the knee' verdict)"},
        {"id": "ttft", "claim": f"at {users_text(at.users)} users a miss's mean TTFT is {seconds_text(lat.miss_ttft_s)}, "
                                f"a hit's {seconds_text(lat.hit_ttft_s)}", "predicted": finite(lat.miss_ttft_s),
         "unit": "s", "measured_by": "measure sessions: ttft_miss and ttft_hit at the rung nearest that load",
         "refuted_if": f"the measured mean miss TTFT there exceeds the {lat.ttft_limit_s:g} s budget while the "
                       f"latency ceiling ({users_text(r.values['latency'])} users) is above that load"},
        {"id": "binding", "claim": f"{r.binding} binds first, at {users_text(r.values[r.binding])} users",
         "predicted": r.values[r.binding], "unit": "users",
         "measured_by": "measure server: the pool, then the ladder, each beside this prediction",
         "refuted_if": "another limit is reached first on the ladder (cold misses before the decode floor, or "
                       "the reverse)"},
    ]


def test_plan(scenario: Scenario, plan: Plan, at: AtLoad) -> dict:
    """The measurement that checks these predictions: the command, the files it reads, the hypotheses."""
    words = flags_of(scenario, PREDICT_GROUPS)
    files = {WORKLOAD_FILE: plan.workload.to_dict()}
    if isinstance(scenario.model, InlineConfig):
        words.insert(0, CONFIG_FILE)
        files[CONFIG_FILE] = scenario.model.config()
    if isinstance(scenario.calibration, Calibration):  # a pasted log's calibration: the file calibrate --out writes
        words += ["--calibration", CALIBRATION_FILE]
        files[CALIBRATION_FILE] = scenario.calibration.to_dict()
    predict = shlex.join(words)
    command = (f"servesize measure server --url http://localhost:8000 --predict {shlex.quote(predict)} "
               f"--workload {WORKLOAD_FILE} --record-dir servesize-test")
    hypotheses = _hypotheses(plan, at)
    document = {"servesize_test": 1, "command": command, "scenario": share(scenario, Load())["fields"],
                "hypotheses": hypotheses, "files": sorted(files)}
    return {"command": command, "hypotheses": hypotheses, "files": {**files, "servesize-test.json": document}}


# -- the whole plan view ------------------------------------------------------------------------------

def kv_text(plan: Plan) -> str:
    """The model hint's KV figure as this plan stores it (the catalogue's is at the checkpoint's own dtype)."""
    dtype = plan.memory.deployment.kv_cache_dtype if plan.memory is not None else "auto"
    stored = "the model's dtype" if dtype == "auto" else dtype
    return f"as planned ({stored}): {plan.fixed.kv_bytes_per_token_rank:,} B/token/GPU"


def plan_view(req: PlanRequest) -> dict:
    scenario = drafted(req.scenario, req.draft)
    plan = planned(scenario)
    at = at_load(plan, req.load)
    document = plan.to_dict()
    document["sensitivity"] = {}
    return finite({
        "draft": req.draft,
        "verdict": verdict(plan, at),
        "tiles": tiles(plan, at),
        "memory": memory_bar(plan.memory, steps=False) if plan.memory is not None else None,
        "recipe": {"command": plan.recipe, "notes": list(plan.recipe_notes)},
        "bill": bill(at),
        "lengths": lengths(plan),
        "splits": splits(req.scenario, plan),
        "placement_text": plan.placement.text() if plan.placement is not None and (plan.placement.chosen or plan.placement.gpus_idle)
        else None,
        "effective": effective(plan, at),
        "share": share(req.scenario, req.load),
        "test": test_plan(req.scenario, plan, at),
        "assumptions": list(plan.assumptions),
        "workload_text": plan.workload.describe(),
        "kv_text": kv_text(plan),
        "title": f"{plan.fixed.name} on {plan.fixed.n_gpu}x{plan.fixed.gpu_key} (DP {plan.fixed.dp} x TP {plan.fixed.tp})",
        "plan": document,
    })


def engine_check_view(req: PlanRequest, progress: Callable[[str], None] | None = None) -> dict:
    """POST /api/engine-check: the engine simulator run on the page's settings (``servesize plan --engine-check``),
    its users at the comfort SLO beside the plan's, the line the CLI prints, and where they differ, why."""
    checked = api.check_plan(req.scenario, planned=planned(req.scenario), progress=progress)
    c = checked.engine_check or {}
    return finite({"engine_users": c.get("engine_users"), "plan_users": checked.result.values[checked.result.binding],
                   "plan_users_same_workload": c.get("plan_users_same_workload"), "agree": c.get("agree"),
                   "gap": c.get("gap"), "capped": c.get("capped"), "requests": c.get("requests"),
                   "text": checked.engine_check_text(), "disagreement": checked.disagreement,
                   "command": api.plan_command_of(req.scenario) + " --engine-check"})


def disaggregated_view(req: PlanRequest, progress: Callable[[str], None] | None = None) -> dict:
    """POST /api/disaggregated: prefill and decode apart on the page's GPUs (``servesize plan --prefill-instances X
    --decode-instances Y``): every xPyD split at the page's TP, the most users first, beside the aggregated plan,
    the one line that says which serves more, and the command that prints the best layout."""
    layouts = api.disaggregated_layouts(req.scenario, progress=progress)
    best, agg = layouts[0], layouts[0].aggregated
    users = agg.users
    rows = [{"layout": agg.name.replace("aggregated ", "aggregated, ", 1), "users": users,
             "users_text": f"{users:,.0f}", "binding": agg.binding, "pool": "each replica", "aggregated": True,
             "warm_pull_text": "-", "handover_text": "-"}]
    for p in layouts:
        warm = p.turns["warm"]
        rows.append({"layout": p.layout.name, "users": p.users, "users_text": f"{p.users:,.0f}", "binding": p.binding,
                     "pool": p.binding_pool, "aggregated": False,
                     "warm_pull_text": f"{warm.pull.bytes / GB:,.3f} GB in {warm.time.seconds * 1e3:,.1f} ms",
                     "handover_text": f"{warm.handover_s * 1e3:,.0f} ms"})
    command = api.plan_command_of(req.scenario.replace(prefill_instances=best.layout.prefill_instances,
                                                       decode_instances=best.layout.decode_instances))
    return finite({"rows": rows, "comparison": best.comparison(), "best": best.layout.name,
                   "link": best.layout.link["name"], "link_assumed": best.layout.link_assumed,
                   "more": "aggregated" if users >= best.users else best.layout.name, "command": command})


def explain_view(req: PlanRequest) -> dict:
    """POST /api/explain: every number's derivation, by section, as ``servesize plan --explain`` renders
    it, for the plan ``plan_view`` answered (fetched when a "why?" is first opened)."""
    plan = planned(drafted(req.scenario, req.draft))
    at = at_load(plan, req.load)
    power = at.power
    sections = {
        "memory": steps_of(plan.memory.derivation if plan.memory is not None else None),
        "pool": steps_of(plan.fixed.derivation), "warm": steps_of(plan.result.warm.derivation),
        "decode": steps_of(plan.result.decode.derivation), "prefill": steps_of(plan.result.prefill.derivation),
        "latency": steps_of(at.latency.derivation), "power": steps_of(power.derivation if power is not None else None),
        "all": steps_of(plan.derivation),
    }
    return finite({"sections": sections})


def refused_plan(body: Any, exc: ServesizeError, field: str | None) -> dict:
    """A plan request's 400 body: the message, its field, and (when the Scenario itself is valid)
    the splits, so the page can show which ones would fit."""
    out: dict[str, Any] = {"error": str(exc), "field": field}
    try:
        scenario, _ = scenario_of(body, extra=(*VIEW_PARAMS, "draft"))
        out["splits"] = splits(scenario)
    except ServesizeError:
        pass
    return out


# -- view 1 ---------------------------------------------------------------------------------------------

# the fit table's columns, in order: (the row field it sorts on, its heading). Per-GPU and whole-model
# figures say which they are: a TP 4 row's weights per GPU are a quarter of the model's.
FIT_COLUMNS = (  # the answer first (a phone shows the model and its sequences without scrolling); {context}: the fit's
    ("model", "model"), ("concurrent_per_replica", "sequences of {context} tokens, per replica"),
    ("concurrent_total", "sequences, all replicas"), ("precision", "weight precision"), ("tp", "placement"),
    ("weights_bytes", "weights, whole model"), ("weights_bytes_per_gpu", "weights per GPU"),
    ("kv_bytes_per_sequence", "KV per sequence, per GPU"),
)


def _fit_cells(p: dict) -> dict:
    """One fit row's cells as the table prints them, keyed by FIT_COLUMNS."""
    return {"model": f"{p['display']} ({p['model']})", "precision": p["precision"],
            "tp": f"TP {p['tp']} x {p['replicas']} replica(s)",
            "weights_bytes": fmt_bytes(p["weights_bytes"]), "weights_bytes_per_gpu": fmt_bytes(p["weights_bytes_per_gpu"]),
            "concurrent_per_replica": f"{p['concurrent_per_replica']:,}", "concurrent_total": f"{p['concurrent_total']:,}",
            "kv_bytes_per_sequence": fmt_bytes(p["kv_bytes_per_sequence"])}


def fit_view(query) -> dict:
    result = api.fit(query)
    doc = result.to_dict()
    rows = []
    for p in doc["placements"]:
        # the fit labels a checkpoint served as it is 'native (fp8)': the Scenario's quantization for it is native
        quantization = "native" if str(p["precision"]).startswith("native") else p["precision"]
        rows.append({**p, "quantization": quantization, "cells": _fit_cells(p), "text": {
            "weights_per_gpu": fmt_bytes(p["weights_bytes_per_gpu"]), "kv_per_sequence": fmt_bytes(p["kv_bytes_per_sequence"]),
            "reserve": fmt_bytes(p["reserve_bytes_per_gpu"]), "params": f"{p['params'] / 1e9:,.1f}B"
            + (f" / {p['active_params'] / 1e9:,.1f}B active" if p["active_params"] != p["params"] else ""),
            "placement": f"TP {p['tp']} x {p['replicas']} replica(s)"}})
    return finite({"fit": doc, "rows": rows, "effective": fit_effective(query, doc), "assumes": fit_assumes(query, doc),
                   "columns": [{"key": k, "label": label.format(context=f"{doc['context']:,}")} for k, label in FIT_COLUMNS],
                   "caption": f"{doc['gpus']['count']}x{doc['gpus']['gpu']} ({doc['gpus']['memory_mib']:,} MiB each), "
                              f"concurrency at {doc['context']:,} tokens per sequence, vLLM {doc['vllm_version']}, "
                              f"{doc['budget']} budget"})


CALCULATOR = {"precision": "bf16", "budget": "simple"}   # the calculator page's (the seed's) reading of every model


def fit_assumes(query, doc: dict) -> dict:
    """What the fit's figures assume that the calculator page (the seed) assumes differently, in words, and whether
    the query is already the calculator's reading (the page offers a one-click switch to it, and back)."""
    precision = ("each model at its checkpoint's own precision" if not query.precision else
                 f"weights at {query.precision.replace(',', ', ')}")
    budget = (f"vLLM {doc['vllm_version']}'s engine budget (the utilisation less weights, activations and CUDA graphs)"
              if doc["budget"] == "engine" else "the calculator page's simple budget (0.90 of memory less the weights)")
    calculator = query.precision == CALCULATOR["precision"] and doc["budget"] == CALCULATOR["budget"]
    text = f"These figures take {precision}, under {budget}."
    if not calculator:
        text += (" The calculator page reads every model at bf16 under its simple budget, so its figures differ where "
                 "a checkpoint is not bf16 (gpt-oss: MXFP4) or where the engine's reserve matters.")
    return {"text": text, "calculator": calculator, "switch": CALCULATOR}


def fit_effective(query, doc: dict) -> dict:
    """The value each fit field took; the utilisation is the one the figures use (the engine's default for the vLLM
    version, or the simple budget's 0.90)."""
    util = api.engine_utilization(query.vllm_version, query.gpu_memory_utilization, query.gpus, query.budget)
    return {"max_model_len": doc["context"], "budget": doc["budget"], "vllm_version": doc["vllm_version"],
            "gpu_memory_utilization": util, "kv_cache_dtype": query.kv_cache_dtype,
            "min_concurrency": query.min_concurrency, "all_placements": query.all_placements}


def cell_derivation(query, row: dict) -> dict:
    """The derivation behind one fit row: the memory report of that placement at the fit's context."""
    if not isinstance(row, dict) or not isinstance(row.get("model"), str):
        raise RequestError("row: give the placement to explain (model, precision, tp, replicas)", "row")
    try:
        tp, replicas = int(row.get("tp", 1)), int(row.get("replicas", 1))
    except (TypeError, ValueError):
        raise RequestError("row: tp and replicas must be whole numbers", "row") from None
    scenario = Scenario(model=row["model"], gpus=query.gpus, tensor_parallel_size=tp, data_parallel_size=replicas,
                        quantization=str(row.get("quantization", "native")), kv_cache_dtype=query.kv_cache_dtype,
                        gpu_memory_utilization=query.gpu_memory_utilization, max_model_len=query.max_model_len,
                        vllm_version=query.vllm_version, budget=query.budget)
    report = api.memory(scenario)
    return finite({"title": f"{row['model']} {row.get('precision')} on TP {tp} x {replicas}",
                   "concurrency": int(report.pool.max_concurrency), "memory": memory_bar(report),
                   "steps": steps_of(report.derivation),
                   "note": "the calculator seed's simple budget (utilisation minus weights) is used for the concurrency "
                           "when budget is 'simple'" if query.budget == "simple" else ""})


def models_view() -> dict:
    """The catalogue's KV cost per token (``servesize models``), as the reference table."""
    result = api.models()
    rows = []
    for r in result.rows:
        a = r.arch
        mla = a.kv_lora_rank is not None
        rows.append({
            "key": r.key, "display": r.display, "hf_id": r.hf_id, "source": r.source,
            "params": r.ledger.total, "active_params": r.ledger.active, "layers": r.layers_text,
            "heads": a.num_attention_heads, "kv_heads": "MLA" if mla else a.num_kv_heads,
            "kv_bytes_per_token": r.kv_bytes_per_token, "windowed_bytes_per_token": r.windowed_bytes_per_token,
            "window_tokens": r.window_tokens, "state_bytes_per_sequence": r.state_bytes_per_sequence,
            "weights": r.quantisation_text, "context": a.max_position_embeddings,
            "text": {"params": f"{r.ledger.total / 1e9:,.2f}B" + (f" / {r.ledger.active / 1e9:,.2f}B active"
                                                                   if r.ledger.active != r.ledger.total else ""),
                     "kv_per_token": fmt_bytes(r.kv_bytes_per_token, "KiB")
                     + (f" + {fmt_bytes(r.windowed_bytes_per_token, 'KiB')} up to {r.window_tokens:,} tokens"
                        if r.windowed_bytes_per_token else ""),
                     "kv_per_1ki": fmt_bytes(r.kv_bytes_per_token * 1024, "MiB"),
                     "state": fmt_bytes(r.state_bytes_per_sequence, "MiB") if r.state_bytes_per_sequence else "-"},
        })
    return finite({"units": result.to_dict()["units"], "rows": rows,
                   "note": "KV per token: whole model, 16-bit cache, TP 1, the layers that grow with context; "
                           "sliding/chunked layers stop growing at their window; state: GDN/Mamba, constant per "
                           "sequence. KiB = 2**10 B, MiB = 2**20 B."})


# -- the way back: a start-up log, a run record ------------------------------------------------------------

def _scenario_hints(scenario: Scenario, report: MemoryReport) -> dict[str, int | str]:
    """What a hybrid log does not print, as the page's flags make it (the prediction's own pool: its block size and
    KV-cache groups, the Mamba cache mode and draft tokens of its deployment)."""
    pool, dep = report.pool, report.deployment
    return {"block_size": pool.block_size, "kv_cache_groups": len(pool.groups),
            "mamba_cache_mode": dep.mamba_cache_mode or "none", "num_speculative_tokens": dep.spec_tokens}


def _check_text(value: Any, unit: str) -> str:
    """A compared figure in the units people read: bytes as GiB, an interval as its two ends."""
    if isinstance(value, (list, tuple)):
        return " – ".join(_check_text(v, unit) for v in value)
    if unit == "B":
        return fmt_bytes(value)
    if unit == "x":
        return f"{value:,.2f}x"
    return f"{value:,.0f} {unit}"


def _error_text(check: Any) -> str:
    if check.error_pct is not None:
        return f"{check.error_pct:+.2f}%"
    return _check_text(check.error, check.unit)


def _as_controls(text: str) -> str:
    """A library note that names calibrate's flags, as the page's controls say it."""
    for hint in LOG_HINTS:
        text = text.replace(hint.flag, f"'{hint.label}' (below)")
    for name in sorted(PARAMS, key=len, reverse=True):   # a Scenario flag: the page's field of that name
        text = re.sub(rf"--{name.replace('_', '-')}(?![\w-])", f"the {name} field", text)
    return text


def _calibrated(scenario: Scenario, log_text: str, given: dict[str, Any]) -> tuple[Calibration, dict, bool, str]:
    """The log's calibration with what the visitor gave; where that fixes no pool, again with what the page's flags
    say for the rest (the rule a user of calibrate follows by hand: servesize memory prints the block size and the
    groups). Returns the calibration, the hints used with where each came from, whether it applies, and why."""
    # a log that names no model is the page's model's (pasted beside its figures): the calibration says so, and a
    # later change of model refuses it, as plan --calibration refuses another model's
    named = api.model_name(scenario) if scenario.model is not None else None
    calibration = api.calibrate(log_text, source="pasted log", **given, model=named)
    used = {k: {"value": v, "from": "given"} for k, v in given.items()}
    usable, why = api.calibration_applies(scenario, calibration)
    if usable:
        return calibration, used, usable, why
    derived: dict[str, Any] = {k: v for k, v in _scenario_hints(scenario, api.memory(scenario)).items() if k not in given}
    if derived:
        retry = api.calibrate(log_text, source="pasted log", **given, **derived, model=named)
        ok, reason = api.calibration_applies(scenario, retry)
        if ok:
            used.update({k: {"value": v, "from": "the page's flags"} for k, v in derived.items()})
            return retry, used, ok, reason
    return calibration, used, usable, why


def calibrate_view(scenario: Scenario, log_text: str, given: dict | None = None) -> dict:
    """A vLLM start-up log -> its Calibration, and the prediction for the same flags beside what it logged. A hybrid
    model's log (several KV-cache groups, before vLLM 0.20.1) needs what it does not print: the visitor's
    controls (``given``), else the page's own flags."""
    uncalibrated = scenario.replace(calibration=None, pool_tokens=None)
    calibration, used, usable, why = _calibrated(uncalibrated, log_text, dict(given or {}))
    check = calibrate_against(calibration, api.memory(uncalibrated))
    rows = [{"name": c.name, "predicted": finite(c.predicted), "logged": finite(c.logged), "error": finite(c.error),
             "error_pct": finite(c.error_pct), "unit": c.unit,
             "text": {"predicted": _check_text(c.predicted, c.unit), "logged": _check_text(c.logged, c.unit),
                      "error": _error_text(c)}} for c in check.checks]
    page = _scenario_hints(uncalibrated, api.memory(uncalibrated))
    controls = [{"name": h.name, "label": h.label, "help": h.help, "choices": list(h.choices), "low": h.low,
                 "high": h.high, "value": used.get(h.name, {}).get("value"), "from": used.get(h.name, {}).get("from"),
                 "page": page.get(h.name)} for h in LOG_HINTS]
    derived = ", ".join(f"{h.label} {used[h.name]['value']}" for h in LOG_HINTS
                        if used.get(h.name, {}).get("from") == "the page's flags")
    applied = (f"applied: {fmt_tokens(calibration.pool_tokens)} tokens of KV pool from the log"
               if usable and calibration.pool_tokens else ("applied" if usable else "not applied: " + _as_controls(why)))
    if usable and derived:
        applied += f" (what it does not print, from the page's flags: {derived})"
    return finite({"calibration": calibration.to_dict() if usable else None, "usable": usable, "applies": why,
                   "applied_text": applied, "checks": rows, "controls": controls,
                   "notes": [_as_controls(n) for n in (*check.notes, *calibration.notes)]})


def record_view(scenario: Scenario, record_text: str) -> dict:
    """A ``servesize measure`` run record -> what it measured, beside the page's prediction."""
    contents = parse_record(record_text, "uploaded record")
    kind = contents.header.get("kind")
    end = next((e for e in reversed(contents.events) if e.get("type") == "end"), None)
    if end is None or not isinstance(end.get("result"), dict):
        raise RequestError(f"the record of this 'measure {kind}' run has no end line (it was interrupted): "
                           "continue it with --resume, then upload it again", "record")
    result = end["result"]
    plan = planned(scenario)
    if kind == "pool":
        pool = result.get("pool_tokens") or {}
        low, high, measured = pool.get("low"), pool.get("high"), pool.get("measured")
        check = bracket_verdict("KV pool tokens", plan.fixed.pool_tokens, low, high)
        return finite({"kind": kind, "measured_pool_tokens": measured, "low": low, "high": high,
                       "predicted_pool_tokens": plan.fixed.pool_tokens, "verdict": check,
                       "apply": {"pool_tokens": int(measured)} if measured else None})
    if kind == "sessions":
        knee = result.get("knee") or {}
        check = bracket_verdict("warm users", plan.warm_users.p50, knee.get("warm_users"), knee.get("cold_users"))
        rungs = [{k: g.get(k) for k in ("users", "warm_hit_rate", "decode_tok_per_s_p50", "ttft_hit", "ttft_miss",
                                        "errors")} for g in result.get("rungs", []) if isinstance(g, dict)]
        return finite({"kind": kind, "knee": knee, "predicted_warm_users_p50": plan.warm_users.p50, "verdict": check,
                       "rungs": rungs, "recorded_verdicts": result.get("verdicts", []), "apply": None})
    raise RequestError(f"a 'measure {kind}' record is not one the explorer reads (pool or sessions)", "record")
