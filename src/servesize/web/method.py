"""The explorer's "method and formulas" section and its FAQ, generated from the plan the verdict came from.

Every formula is a step of the engine's own derivations (the ones ``servesize plan --explain`` prints: the memory
budget, the pool, the warm fills, decode, prefill, latency at the page's load), each with its symbols, then its
figures, then its value; a step is marked computed (a formula over earlier steps), given (a flag or a catalogue
value, with its source) or modelled (a named assumption from data/assumptions.toml). The FAQ's answers read
their figures from the same plan; none is typed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import servesize.api as api
from servesize.derivation import Derivation, Step
from servesize.units import fmt_bytes
from servesize.web.requests import PlanRequest
from servesize.web.views import at_load, drafted, finite, planned, seconds_text, tok_s_text, users_text

if TYPE_CHECKING:
    from servesize.api import AtLoad, Plan

# (id, title, what the section answers): the order a number flows in, memory first
SECTIONS = (
    ("memory", "Memory: what vLLM leaves for the KV cache", "one GPU's memory budget and the pool vLLM builds from it"),
    ("pool", "The pool the planner reads", "tokens of KV per replica, bytes per token and the weights a step reads"),
    ("warm", "Warm users: Monte-Carlo fills of the pool", "how many returning sessions the pool keeps (the cache ceiling)"),
    ("decode", "Decode: the roofline at the decode ceiling", "per-user tok/s from bytes and FLOPs per step"),
    ("prefill", "Prefill: what a miss and a hit cost", "FLOPs of a re-prefill and of a warm turn, and their moments"),
    ("latency", "Latency at the page's load", "the M/G/1 queue over prefill: TTFT of a miss and a hit, B*"),
)


def _kind(step: Step) -> str:
    if step.inputs:
        return "computed"
    return "modelled" if "modelled" in step.source or "assumptions.toml" in step.source else "given"


def step_rows(derivation: Derivation | None) -> list[dict]:
    """A derivation's steps: the formula in symbols, with the figures substituted, and the value."""
    rows = []
    for s in (derivation.steps if derivation is not None else ()):
        rows.append({"name": s.name, "kind": _kind(s), "formula": s.formula() if s.inputs else None,
                     "figures": s.substituted() if s.inputs else None, "value": finite(s.value), "text": s.shown(),
                     "source": s.source, "note": s.note})
    return rows


def _derivations(plan: Plan, at: AtLoad) -> dict[str, Derivation | None]:
    return {"memory": plan.memory.derivation if plan.memory is not None else None, "pool": plan.fixed.derivation,
            "warm": plan.result.warm.derivation, "decode": plan.result.decode.derivation,
            "prefill": plan.result.prefill.derivation, "latency": at.latency.derivation}


def _value_text(value: object) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def faq(plan: Plan, at: AtLoad) -> list[dict]:
    """A few questions a visitor asks first, answered with this plan's figures."""
    r, f, w = plan.result, plan.fixed, plan.result.warm
    user = plan.workload.user
    warm_p = w.users.p5
    out = []
    if plan.memory is not None:
        pool = plan.memory.pool
        out.append({"q": f"vLLM says {pool.max_concurrency:.2f}x concurrency; why is the answer {users_text(r.values[r.binding])} users?",
                    "a": f"vLLM's 'Maximum concurrency' counts requests of the full --max-model-len "
                         f"({pool.max_model_len:,} tokens) at once. Users hold sessions of the workload's length "
                         f"(median {user.median_tokens:,.0f} tokens, prefix {user.prefix_tokens:,} tokens), pause "
                         f"between requests and come back: the cache ceiling counts the sessions the "
                         f"{f.pool_tokens:,.0f}-token pool keeps warm ({users_text(warm_p)} users at p5 over {w.fills:,} "
                         f"fills), then the other ceilings cap it: {r.binding} binds at "
                         f"{users_text(r.values[r.binding])}."})
    per_session = user.median_tokens * f.kv_bytes_per_token_rank
    out.append({"q": "What does one user's context cost in KV?",
                "a": f"{f.kv_bytes_per_token_rank:,} B per token per GPU, so a median session of "
                     f"{user.median_tokens:,.0f} tokens holds {fmt_bytes(per_session)} on each GPU of a replica "
                     f"(the pool holds {fmt_bytes(f.pool_tokens * f.kv_bytes_per_token_rank)} per GPU)."})
    out.append({"q": "Why the p5 of warm users and not the median?",
                "a": f"Session lengths are drawn at random, so the pool holds a different number of users in each of "
                     f"the {w.fills:,} fills: p5 {users_text(warm_p)}, p50 {users_text(w.users.p50)}, p95 "
                     f"{users_text(w.users.p95)}. Every answer is {api.PLANNING_PERCENTILE}: a bad draw of long "
                     "sessions still fits."})
    out.append({"q": "How fast does each user decode at this load?",
                "a": f"{tok_s_text(at.decode['p50'])} per user (p50) with {at.decoders:,} concurrent decoders per "
                     f"replica; the {r.decode.floor_tok_s:g} tok/s floor holds up to {r.decode.n:,} decoders per replica. "
                     f"A miss waits {seconds_text(at.latency.miss_ttft_s)} for its first token on average, a hit "
                     f"{seconds_text(at.latency.hit_ttft_s)}."})
    return out


def method_view(req: PlanRequest) -> dict:
    """POST /api/method: the method section and the FAQ for the plan ``plan_view`` answered."""
    plan = planned(drafted(req.scenario, req.draft))
    at = at_load(plan, req.load)
    derivations = _derivations(plan, at)
    sections = [{"id": sid, "title": title, "answers": answers, "steps": step_rows(derivations[sid])}
                for sid, title, answers in SECTIONS if derivations[sid] is not None]
    modelled = [{"name": a["name"], "value": finite(a["value"]), "unit": a["unit"], "source": a["source"],
                 "text": f"{a['name']} = {_value_text(a['value'])} {a['unit']}: {a['source']}"} for a in plan.assumptions]
    return finite({"sections": sections, "assumptions": modelled, "faq": faq(plan, at),
                   "caption": f"{plan.fixed.name} on {plan.fixed.n_gpu}x{plan.fixed.gpu_key}: every step as the engine "
                              "computed it (servesize plan --explain prints the same); computed steps show their formula, "
                              "then the figures; given steps are flags and catalogue values; modelled steps are named "
                              "assumptions you can change"})
