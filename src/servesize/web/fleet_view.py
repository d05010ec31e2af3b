"""The explorer's fleet view (POST /api/fleet): ``servesize.fleet(query)`` as the page draws it; and the plan
view's teams panel (POST /api/teams): ``servesize.teams(scenario, team, priority)`` for its deployment.

The answer is the library's own document (``FleetResult.to_dict()``, what ``servesize fleet --json``
prints) under ``"fleet"``; beside it only words and the shape the page needs: the headline, the
frontier as a chart's series, the skipped-shape summary, and the winner's confirming Scenario as the
plan view's fields (its "open in plan" button). No figure here is computed outside the library.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import servesize.api as api
from servesize.fleet_query import FleetQuery
from servesize.scenario import Scenario
from servesize.web.requests import Load
from servesize.web.views import finite, series_words, share

if TYPE_CHECKING:
    from servesize.api import FleetOption, FleetResult


_SEARCHED: OrderedDict[FleetQuery, FleetResult] = OrderedDict()   # the last 16 searches (one worker writes it)
_MEMO = 16


def searched(query: FleetQuery, progress: Callable[[str], None] | None = None) -> FleetResult:
    """``servesize.fleet`` memoised on the (frozen) query: a share link opened twice searches once. ``progress``
    hears the search's stages (the page's status line)."""
    try:
        hit = _SEARCHED.get(query)
    except TypeError:  # an uploaded workload that does not hash: search it every time
        return api.fleet(query, progress=progress)
    if hit is None:
        hit = _SEARCHED[query] = api.fleet(query, progress=progress)
        while len(_SEARCHED) > _MEMO:
            _SEARCHED.popitem(last=False)
    else:
        _SEARCHED.move_to_end(query)
        if progress is not None:
            progress("fleet: searched before, the same answer")
    return hit


def money(value: float | None, currency: str) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.0f} {currency}" if value >= 100 else f"{value:,.2f} {currency}"


def _weights(o: FleetOption) -> str:
    return o.weights_precision.replace("native (", "").rstrip(")")


def shape_text(o: FleetOption) -> str:
    return f"{o.gpus}, TP {o.tp} x DP {o.dp}, {o.model} {_weights(o)}, KV {o.kv_cache_dtype}"


def _who(result: FleetResult) -> str:
    teams = result.teams
    if len(teams) == 1:
        return f"{result.users:,} users ({teams[0].source or 'the workload'})"
    return f"{len(teams)} teams, {result.users:,} users (" + ", ".join(f"{t.name} {t.users:,}" for t in teams) + ")"


def headline(result: FleetResult) -> dict:
    """The verdict first: the cheapest fleet that serves everyone, or why none in the search space does."""
    w = result.winner
    if w is None and result.serves and result.partition is not None and result.verdict is not None:
        own = [(t.team, t.option) for t in result.partition.cheapest if t.option is not None]
        cost = float(result.verdict["partitioned_cost_per_month"] or 0.0)
        cur = result.verdict["currency"] or result.currency
        return {"found": True, "title": f"No shared pool serves {_who(result)}; a fleet per team does",
                "shape": "; ".join(f"{team} {shape_text(option)}" for team, option in own),
                "cost": f"{money(cost, cur)}/month",
                "per_user": f"{money(cost / max(result.users, 1), cur)} per user-month",
                "text": result.verdict["text"], "next": ""}
    if w is None:
        summary = ", ".join(f"{n} {kind}" for kind, n in result.skipped_summary().items()) or "no shape was searched"
        return {"found": False, "title": f"No fleet of at most {result.max_gpus} GPUs serves {_who(result)}",
                "text": f"skipped: {summary}",
                "next": "try more GPU types, a larger max GPUs, fp8 weights or KV, or your own prices"}
    power = "" if w.power_per_month is None else \
        f" (GPUs {money(w.rent_per_month, w.currency)} + power {money(w.power_per_month, w.currency)})"
    binds = w.binding if len(w.teams) == 1 else f"{w.binding} ({w.binding_team})"
    return {"found": True, "title": f"The cheapest fleet that serves {_who(result)}",
            "shape": shape_text(w),
            "cost": f"{money(w.cost_per_month, w.currency)}/month{power}",
            "per_user": f"{money(w.cost_per_user_month, w.currency)} per user-month",
            "text": f"at {w.price_per_gpu_hour:g} {w.currency}/GPU-hour; it serves {w.users_served:,.0f} users, "
                    f"{binds} binds first",
            "next": result.recipe_notes[-1] if result.recipe_notes else ""}


def frontier_chart(result: FleetResult) -> dict:
    """Cost against users served, each frontier fleet a point (the library's frontier, in order)."""
    points = list(result.frontier)
    return {"x": [o.users_served for o in points], "y": [o.cost_per_month for o in points],
            "labels": [f"{o.gpus} (TP {o.tp} x DP {o.dp}) {_weights(o)}" for o in points],
            "users": result.users, "currency": result.currency,
            "caption": "each point: a fleet that serves more users than every cheaper one, up to the first that "
                       f"serves all {result.users:,}; the line marks the users asked for",
            "description": series_words("Cost per month against users served, the cheapest fleets",
                                        [o.users_served for o in points], [o.cost_per_month for o in points],
                                        lambda x: f"{x:,.0f} users", lambda y: f"{result.currency} {y:,.0f}")
                           + f"; {result.users:,} users asked for."}


def _plan_fields(confirm: dict | None) -> dict | None:
    """The winner's confirming Scenario as the plan view's fields (only what differs from the defaults)."""
    if confirm is None:
        return None
    workload = confirm.get("workload")
    if isinstance(workload, dict):  # an uploaded workload: the plan view sends its content, as its upload does
        fields = share(Scenario(**{**confirm, "workload": api.workload_of_data(workload)}), Load())["fields"]
        return {**fields, "workload": workload}
    return share(Scenario(**confirm), Load())["fields"]


def _teams_text(result: FleetResult) -> str | None:
    pool = result.shared_pool
    if pool is None:
        return None
    return (f"the teams on the shared winner ({pool.tp * pool.dp}x{pool.gpu}, {pool.dp} replica(s), routing "
            f"{pool.routing}): warm users p5 shared (alone on the same pool), ceilings in each team's users")


def fleet_view(query: FleetQuery, progress: Callable[[str], None] | None = None) -> dict:
    result = searched(query, progress)
    doc = result.to_dict()
    return finite({
        "fleet": doc,
        "headline": headline(result),
        "frontier_chart": frontier_chart(result),
        "skipped_text": ", ".join(f"{n} {kind}" for kind, n in result.skipped_summary().items()),
        "open_plan": _plan_fields(result.confirm),
        "teams_caption": _teams_text(result),
        "ceilings": list(api.ceiling_names()),
        "query": _query_text(query),
    })


def _query_text(query: FleetQuery) -> dict[str, Any]:
    """The value each list field took (the page shows defaults it was not given)."""
    return {"precision": query.precision, "kv_cache_dtype": query.kv_cache_dtype,
            "tensor_parallel_size": query.tensor_parallel_size, "max_gpus": query.max_gpus}


# -- the plan view's teams panel ----------------------------------------------------------------------

def teams_view(scenario: Scenario, team: tuple[str, ...], priority: tuple[str, ...]) -> dict:
    panel = api.teams(scenario, list(team), list(priority) or None)
    doc = panel.to_dict()
    shared = doc["shared"]
    short = [t["name"] for t in shared["teams"] if not t["meets_target"]]
    meets = (f"this deployment ({shared['gpus']}, {shared['data_parallel_size']} replica(s)) serves every team"
             if not short else f"this deployment ({shared['gpus']}) falls short for {', '.join(short)}")
    return finite({"teams": doc, "ceilings": list(api.ceiling_names()), "meets": meets,
                   "verdict": doc["verdict"],
                   "caption": f"every team on {shared['gpus']} (routing {shared['routing']}): warm users p5 sharing the "
                              "pool (alone on it), each ceiling in the team's own users at the teams' mix"})
