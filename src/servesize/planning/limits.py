"""Each figure over its limit at a load, in one sentence, and why that limit binds or does not: what a verdict
says beside a figure over its limit (the page's tiles, plan's text and --json ``limits_over``).

Apart from planning.at_load (which prices a plan at a load) so that Plan can read it without a cycle."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servesize.planning.latency import LatencyReport

# a Plan (planning.plan, which reads this module) and an AtLoad (planning.at_load, which imports Plan): named here
# by what they are, not imported (an import would close a cycle: tests/test_layering.py)
Plan = Any
AtLoad = Any


def limits_over(plan: Plan, at: AtLoad | None = None) -> list[tuple[str, str]]:
    """Each figure over its limit at the load (``at``; None: the plan's binding load, one miss at a time), as
    (the limit: ttft_miss, burst or decode; one sentence: what is over, and why it binds or does not). A verdict
    that names one ceiling never stands beside a figure over its limit without a word (the page's tiles and the
    command line read these)."""
    from servesize.planning.load_models import load_model

    r = plan.result
    lat = at.latency if at is not None else plan.latency
    burst = at.burst if at is not None else 1.0
    users = at.users if at is not None else float(r.values[r.binding])
    out: list[tuple[str, str]] = []
    budget = f"the {lat.ttft_limit_s:g} s budget" if lat is not None else ""
    if lat is not None and miss_over(lat):
        ceiling, latency_users = f"the latency ceiling ({load_model(plan.knobs).meaning('latency')})", r.values["latency"]
        if users > latency_users:
            why = f"the load is past the latency ceiling ({latency_users:,.0f} users)"
        elif r.binding == "latency":
            why = f"{ceiling} is the one that binds"
        else:
            why = (f"misses are {lat.moments.miss_rate:.1%} of turns, and {ceiling} allows {latency_users:,.0f}, so "
                   "it does not bind")
        waits = (f"a cold miss waits {lat.miss_ttft_s:.1f} s on average for its first token at {users:,.0f} users, "
                 f"over {budget}" if math.isfinite(lat.miss_ttft_s) else
                 f"at {users:,.0f} users the prefill queue grows without bound (prefill is asked for more than all of "
                 f"its time), so cold misses wait past {budget}")
        out.append(("ttft_miss", f"{waits}; {why}."))
    if lat is not None and burst_over(lat):
        asked = f"a burst of {burst:,.0f} cold requests" if burst > 1 else "a lone cold request"
        answered = ("the queue never drains" if lat.rho >= 1 else
                    f"the cold-burst tolerance is {lat.burst_tolerance:.2f} (the backlog at this load, then each one's "
                    "prefill)")
        out.append(("burst", f"{asked} arriving at once is not answered within {budget}: {answered}. No ceiling "
                    "counts bursts (they price turns arriving one at a time); a burst this size needs headroom or "
                    "another replica."))
    if at is not None and at.decode_status == "over":
        floor, decode_users = r.decode.floor_tok_s, r.values["decode"]
        why = (f"the load is past the decode ceiling ({decode_users:,.0f} users)" if users > decode_users else
               "the decode ceiling binds" if r.binding == "decode" else f"the decode ceiling is {decode_users:,.0f} users")
        out.append(("decode", f"at {users:,.0f} users the per-user decode p50 ({at.decode['p50']:.0f} tok/s) is under the "
                    f"{floor:g} tok/s floor: {why}."))
    return out


def miss_over(lat: LatencyReport) -> bool:
    """A cold miss's mean TTFT is over the budget."""
    return lat.miss_ttft_s > lat.ttft_limit_s


def burst_over(lat: LatencyReport) -> bool:
    """The burst asked of a replica is more than it answers within the budget."""
    return lat.burst_tolerance < lat.burst

