"""How a fleet search reads in a terminal (``servesize fleet``): registered with ``render.text.render_text``."""

from __future__ import annotations

import math

from servesize.planning.ceilings import CEILINGS
from servesize.sizing.result import FleetOption, FleetResult
from servesize.sizing.teams import SharedPool, TeamsPanel


def _money(value: float | None, currency: str) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:,.0f} {currency}" if value >= 100 else f"{value:,.2f} {currency}"


def _users(option: FleetOption) -> str:
    return ("≥" if option.users_served_is_lower_bound else "") + f"{option.users_served:,.0f}"


def _weights(option: FleetOption) -> str:
    return option.weights_precision.replace("native (", "").rstrip(")")


def _head(result: FleetResult) -> list[str]:
    teams = result.teams
    models = sorted({o.model for o in result.options} | {o.model for o in result.frontier})
    basis = ("GPU-hour rentals, power included" if result.price_includes_power
             else "GPU-hour prices plus the power bill")
    who = (f"{result.users:,} users ({teams[0].source or 'the workload'})" if len(teams) == 1 else
           f"{len(teams)} teams, {result.users:,} users: "
           + ", ".join(f"{t.name} {t.users:,} ({t.source})" for t in teams))
    return [f"fleet for {who}",
            f"  {result.shapes_searched:,} replica shapes fit ({', '.join(models) or 'no model'}), at most "
            f"{result.max_gpus} GPUs; {basis}, {result.currency}, {result.hours_per_month:g} h/month; "
            f"routing {'sticky' if result.routing else 'random (a cache-blind balancer)'}"]


def _table(options: tuple[FleetOption, ...] | list[FleetOption], currency: str) -> list[str]:
    # each text column as wide as its longest entry (a precision can be vLLM's own name, e.g. fp8_per_tensor)
    def width(header: str, values: list[str], least: int) -> int:
        return max([least, len(header) + 2, *(len(v) + 2 for v in values)])

    wg = width("GPUs", [o.gpus for o in options], 14)
    wm = width("model", [o.model for o in options], 18)
    ww = width("weights", [_weights(o) for o in options], 10)
    wk = width("KV", [o.kv_cache_dtype for o in options], 6)
    lines = [f"  {'#':>2}  {'GPUs':<{wg}}{'TP x DP':<9}{'model':<{wm}}{'weights':<{ww}}{'KV':<{wk}}{'cost/month':>14}"
             f"{'per user-month':>16}{'users':>8}  binds"]
    for i, o in enumerate(options, 1):
        binds = o.binding if len(o.teams) == 1 else f"{o.binding} ({o.binding_team})"
        lines.append(f"  {i:>2}  {o.gpus:<{wg}}{f'{o.tp} x {o.dp}':<9}{o.model:<{wm}}{_weights(o):<{ww}}"
                     f"{o.kv_cache_dtype:<{wk}}{_money(o.cost_per_month, currency):>14}"
                     f"{_money(o.cost_per_user_month, currency):>16}{_users(o):>8}  {binds}")
    return lines


def _winner(result: FleetResult) -> list[str]:
    w = result.winner
    if w is None:
        summary = ", ".join(f"{n} {kind}" for kind, n in result.skipped_summary().items())
        shared = "shared fleet" if len(result.teams) > 1 else "fleet"
        lines = [f"no {shared} of at most {result.max_gpus} GPUs in the search space serves every user: {summary}"]
        if not result.serves:  # a fleet per team that serves is the answer: no advice for a failure
            lines.append("  try more GPU types (--gpus-from), a larger --max-gpus, fp8 weights or KV, or your own prices")
        return lines
    power = "" if w.power_per_month is None else f" (GPUs {_money(w.rent_per_month, w.currency)} + power " \
                                                 f"{_money(w.power_per_month, w.currency)})"
    lines = [f"cheapest: {w.gpus} (TP {w.tp} x DP {w.dp}), {w.model} {_weights(w)}, KV {w.kv_cache_dtype}: "
             f"{_money(w.cost_per_month, w.currency)}/month{power}, {_money(w.cost_per_user_month, w.currency)} per "
             f"user-month at {w.price_per_gpu_hour:g} {w.currency}/GPU-hour"]
    if result.plan is not None:
        c, b = result.plan.ceilings, result.plan.binding
        lines.append("  ceilings (users): " + ", ".join(f"{k} {c[k]:,.0f}" + (" <- binds" if k == b else "")
                                                        for k in CEILINGS))
    lines += ["  " + (result.recipe or "")] + [f"  {note}" for note in result.recipe_notes]
    if result.plan_command:
        lines.append(f"  confirm: {result.plan_command}")
    if result.disaggregated is not None:
        lines.append(f"  disaggregated: {result.disaggregated['why']}")
    return lines


def _frontier(result: FleetResult) -> list[str]:
    if not result.frontier:
        return []
    lines = ["frontier (cost against users served: no cheaper fleet serves as many):"]
    for o in result.frontier:
        lines.append(f"  {_users(o):>8} users  {_money(o.cost_per_month, o.currency):>14}/month  {o.gpus} "
                     f"(TP {o.tp} x DP {o.dp}) {o.model} {_weights(o)} KV {o.kv_cache_dtype}, {o.binding} binds")
    return lines


def _shared(result: FleetResult) -> list[str]:
    pool = result.shared_pool
    if pool is None:
        return []
    return _team_rows(pool, "the shared winner")


def _team_rows(pool: SharedPool, where: str) -> list[str]:
    lines = [f"the teams on {where} ({pool.tp * pool.dp}x{pool.gpu}, {pool.dp} replica(s), routing "
             f"{pool.routing}): warm users p5 shared (alone on the same pool), ceilings in each team's users",
             f"  {'team':<14}{'users':>7}{'warm p5':>9}{'(alone)':>9}" + "".join(f"{k:>11}" for k in CEILINGS)
             + f"{'miss TTFT':>11}  binds"]
    for t in pool.teams:
        lines.append(f"  {t.name:<14}{t.users:>7,}{t.warm.p5:>9,.0f}{f'({t.warm_alone.p5:,.0f})':>9}"
                     + "".join(f"{t.ceilings[k]:>11,.0f}" for k in CEILINGS)
                     + f"{t.miss_ttft_s:>10.2f}s  {t.binding}" + ("" if t.meets_target else "  (short)"))
    if pool.floor_note:
        lines.append(f"  {pool.floor_note}")
    return lines


def _partition(result: FleetResult) -> list[str]:
    part = result.partition
    if part is None:
        return []
    lines = ["each team on replicas of its own (its cheapest fleet alone):"]
    for s in part.cheapest:
        if s.option is None:
            lines.append(f"  {s.team:<14}{s.users:>7,}  none: {s.reason}")
            continue
        o = s.option
        lines.append(f"  {s.team:<14}{s.users:>7,}  {o.gpus:<14}(TP {o.tp} x DP {o.dp}) {o.model} {_weights(o)} "
                     f"KV {o.kv_cache_dtype}  {_money(o.cost_per_month, o.currency)}/month, {o.binding} binds")
    if part.cost_per_month is not None:
        lines.append(f"  {'total':<21}  {part.gpus} GPUs, {_money(part.cost_per_month, result.currency)}/month")
    if part.same_shape is not None and result.winner is not None:
        split = ", ".join(f"{s.team} {s.option.dp if s.option else '-'}" for s in part.same_shape)
        total = part.same_shape_replicas
        lines.append(f"  on the shared winner's replica shape: {split} replicas"
                     + (f" = {total} (shared: {result.winner.dp})" if total is not None else ""))
    return lines


def _skipped(result: FleetResult, explain: bool) -> list[str]:
    if not result.skipped:
        return []
    lines = ["skipped: " + ", ".join(f"{n} {kind}" for kind, n in result.skipped_summary().items())]
    if explain:
        lines += [f"  {what}: {why}" for what, why in result.skipped]
    return lines


def _prices(result: FleetResult, explain: bool) -> list[str]:
    if explain:
        return ["prices:"] + [f"  {p.gpu:<14}{p.per_hour:>7.2f} {p.currency}/GPU-hour  {p.provider}, {p.offer}"
                              + (f", {p.date}" if p.date else "") + f"  [{p.source}]" for p in result.prices]
    used = ", ".join(f"{p.gpu} {p.per_hour:g}" + (f" ({p.provider} {p.date})" if p.date else " (given)")
                     for p in result.prices)
    return [f"prices per GPU-hour ({result.currency}): {used}; --explain gives each source"]


def render_fleet(result: FleetResult, explain: bool = False) -> str:
    lines = _head(result)
    if result.options:
        lines.append("cheapest fleets that serve every user (warm p5 and every ceiling at its users):")
        lines += _table(result.options, result.currency)
    lines += _winner(result) + _shared(result) + _partition(result)
    if result.verdict is not None:
        lines.append(f"verdict: {result.verdict['text']}")
    lines += _frontier(result) + _skipped(result, explain) + _prices(result, explain)
    return "\n".join(lines)


def render_teams(panel: TeamsPanel, explain: bool = False) -> str:
    """``servesize plan ... --team``: every team on this deployment, and sharing its replicas against splitting them."""
    pool = panel.shared
    short = [t.name for t in pool.teams if not t.meets_target]
    head = (f"this deployment ({pool.tp * pool.dp}x{pool.gpu}, {pool.dp} replica(s)) serves every team" if not short
            else f"this deployment ({pool.tp * pool.dp}x{pool.gpu}) falls short for {', '.join(short)}")
    lines = [head, *_team_rows(pool, "this deployment")]
    _, verdict = panel.verdict()
    lines.append(f"sharing or splitting: {verdict}")
    return "\n".join(lines)
