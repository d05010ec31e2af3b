"""Time to first token under load: the prefill server as an M/G/1 queue (working-set-model.md 2.8-2.9).

A replica group's prefill is one server. Requests arrive at rate lambda (Poisson, an
assumption); a fraction f miss the cache and re-prefill their whole context, the rest are
warm hits that prefill only the new turn. With S the service time:

    E[S]   = f x E[S|miss]   + (1 - f) x E[S|hit]
    E[S^2] = f x E[S^2|miss] + (1 - f) x E[S^2|hit]
    rho    = lambda x E[S]
    W      = lambda x E[S^2] / (2 (1 - rho))            Pollaczek-Khinchine mean wait (FCFS)
    TTFT   = W + own service (FCFS)    or    own / (1 - rho) (processor sharing)

Converting rates to users: a user issues one main-agent request per ``think_time`` and
each tows ``sub_ratio`` subagent requests, so lambda = users x (1 + r) / think.

Ceilings, in users:
    latency     lambda at which a miss's mean TTFT reaches the limit:
                FCFS lambda = k / (a + k b), k = 2 (SLA - c); PS lambda = (1 - c/SLA) / b
                with a = E[S^2], b = E[S], c = E[S|miss]
    saturation  rho = 1: users = think / ((1 + r) E[S])
Bursts:
    drain       B simultaneous misses clear in B x E[S|miss] / (1 - rho)
    B*          the largest burst whose last request still meets the limit:
                SLA x (1 - rho) / E[S|miss]
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import TYPE_CHECKING

from servesize.assumptions import assumption
from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as

if TYPE_CHECKING:
    from servesize.planning.prefill import PrefillCosts

_DISCIPLINES = ("fcfs", "ps")


@frozen
class ServiceMoments(Record):
    """Service-time moments of the prefill server for a miss rate f."""

    miss_rate: float
    mean_s: float          # E[S]
    second_moment_s2: float  # E[S^2]
    miss_s: float          # E[S | miss]
    hit_s: float           # E[S | hit]

    @property
    def scv(self) -> float:
        """Squared coefficient of variation E[S^2]/E[S]^2 - 1 (1 for exponential service)."""
        return self.second_moment_s2 / self.mean_s**2 - 1.0

    JSON_EXTRA = ("scv",)


def service_moments(miss_rate: float, miss_s: float, miss_s2: float, hit_s: float, hit_s2: float) -> ServiceMoments:
    """Mix the miss and hit legs at miss rate f (the cold flag is independent of the length)."""
    if not 0.0 <= miss_rate <= 1.0:
        raise BadInput(f"cache-miss rate must be in [0, 1], got {miss_rate!r}")
    if min(miss_s, miss_s2, hit_s, hit_s2) < 0:
        raise BadInput("service times must be >= 0")
    f = miss_rate
    mean = f * miss_s + (1 - f) * hit_s
    second = f * miss_s2 + (1 - f) * hit_s2
    if mean <= 0:
        raise BadInput("the prefill server needs a positive mean service time")
    return ServiceMoments(f, mean, second, miss_s, hit_s)


def moments_from(costs: PrefillCosts, miss_rate: float, start_rate: float = 0.0, start_s: float = 0.0,
                 start_s2: float = 0.0) -> ServiceMoments:
    """ServiceMoments from a prefill.PrefillCosts at miss rate f; ``start_rate`` more requests start a session
    (cold beyond the shared prefix: E[S] ``start_s``, E[S^2] ``start_s2``), folded into the cold leg."""
    if start_rate <= 0:
        return service_moments(miss_rate, costs.miss_s, costs.miss_s2, costs.hit_s, costs.hit_s2)
    cold = min(1.0, miss_rate + start_rate)
    w = start_rate / (miss_rate + start_rate)
    return service_moments(cold, (1 - w) * costs.miss_s + w * start_s, (1 - w) * costs.miss_s2 + w * start_s2,
                           costs.hit_s, costs.hit_s2)


def request_rate(users: float, think_time_s: float, sub_ratio: float = 0.0, response_s: float = 0.0) -> float:
    """Total requests/s at the prefill server: users x (1 + r) / (think + response).

    ``think_time_s`` is the workload's (load.think_time_of), the pause after a reply. A user waits for its reply
    before it thinks, so its turns come one cycle apart, think + the mean response (queue, prefill, decode: the
    load model's C); ``response_s`` = 0 leaves the response out, the most the users can send (the latency
    ceiling's bound)."""
    think = think_time_s
    _check_users(users, think, sub_ratio)
    if not response_s >= 0 or not math.isfinite(response_s):
        raise BadInput(f"a response time must be finite and >= 0 s, got {response_s!r}")
    return users * (1.0 + sub_ratio) / (think + response_s)


def users_for_rate(rate_per_s: float, think_time_s: float, sub_ratio: float = 0.0) -> float:
    """Users that generate a total rate: lambda x think / (1 + r) (the workload's, load.think_time_of)."""
    think = think_time_s
    _check_users(rate_per_s, think, sub_ratio)
    return rate_per_s * think / (1.0 + sub_ratio)


def _check_users(x: float, think: float, sub_ratio: float) -> None:
    if x < 0:
        raise BadInput(f"users and rates must be >= 0, got {x!r}")
    if think <= 0:
        raise BadInput(f"think time must be > 0 s, got {think!r}")
    if sub_ratio < 0:
        raise BadInput(f"subagent ratio must be >= 0, got {sub_ratio!r}")


def utilisation(rate_per_s: float, m: ServiceMoments) -> float:
    """rho = lambda x E[S] (the prefill duty; >= 1 means no steady state)."""
    if rate_per_s < 0:
        raise BadInput(f"request rate must be >= 0, got {rate_per_s!r}")
    return rate_per_s * m.mean_s


def queue_wait_s(rate_per_s: float, m: ServiceMoments) -> float:
    """Pollaczek-Khinchine mean wait before service starts (FCFS); inf at rho >= 1."""
    rho = utilisation(rate_per_s, m)
    if rho >= 1:
        return float("inf")
    return rate_per_s * m.second_moment_s2 / (2.0 * (1.0 - rho))


def ttft_s(rate_per_s: float, m: ServiceMoments, request: str = "miss", discipline: str | None = None) -> float:
    """Mean time to first token of a miss or a hit: FCFS W + own, or PS own / (1 - rho)."""
    discipline = assumption("latency.discipline") if discipline is None else discipline
    if discipline not in _DISCIPLINES:
        raise BadInput(f"queue discipline must be 'fcfs' or 'ps', got {discipline!r}")
    if request not in ("miss", "hit"):
        raise BadInput(f"request must be 'miss' or 'hit', got {request!r}")
    own = m.miss_s if request == "miss" else m.hit_s
    rho = utilisation(rate_per_s, m)
    if rho >= 1:
        return float("inf")
    if discipline == "ps":
        return own / (1.0 - rho)
    return queue_wait_s(rate_per_s, m) + own


def latency_ceiling_rate(m: ServiceMoments, ttft_limit_s: float | None = None, discipline: str | None = None) -> float:
    """The total rate at which a miss's mean TTFT equals the limit (0 if a lone miss already exceeds it)."""
    sla = assumption("latency.ttft_limit_s") if ttft_limit_s is None else ttft_limit_s
    discipline = assumption("latency.discipline") if discipline is None else discipline
    if sla <= 0:
        raise BadInput(f"TTFT limit must be > 0 s, got {sla!r}")
    if discipline not in _DISCIPLINES:
        raise BadInput(f"queue discipline must be 'fcfs' or 'ps', got {discipline!r}")
    a, b, c = m.second_moment_s2, m.mean_s, m.miss_s
    if c >= sla:
        return 0.0
    if discipline == "ps":
        return (1.0 - c / sla) / b
    k = 2.0 * (sla - c)
    return k / (a + k * b)


def burst_drain_s(burst: float, m: ServiceMoments, rho: float) -> float:
    """Time to clear ``burst`` simultaneous misses on top of the standing load: B E[S|miss] / (1 - rho)."""
    if burst < 0:
        raise BadInput(f"burst must be >= 0, got {burst!r}")
    if rho >= 1:
        return float("inf")
    return burst * m.miss_s / (1.0 - rho)


def burst_tolerance(m: ServiceMoments, rho: float, ttft_limit_s: float | None = None) -> float:
    """B* = SLA (1 - rho) / E[S|miss]: the largest burst of misses whose last one meets the limit."""
    sla = assumption("latency.ttft_limit_s") if ttft_limit_s is None else ttft_limit_s
    if sla <= 0:
        raise BadInput(f"TTFT limit must be > 0 s, got {sla!r}")
    if rho >= 1:
        return 0.0
    return max(0.0, sla * (1.0 - rho) / m.miss_s)


@frozen
class LatencyReport(Record):
    """TTFT, the latency and saturation ceilings in users, and burst tolerance for one group."""

    moments: ServiceMoments
    users: float
    rate_per_s: float = field(metadata=json_as("request_rate_per_s"))
    rho: float = field(metadata=json_as("utilisation"))
    wait_s: float = field(metadata=json_as("queue_wait_s"))
    miss_ttft_s: float
    hit_ttft_s: float
    latency_ceiling_users: float
    saturation_ceiling_users: float
    burst_tolerance: float
    burst: float
    burst_drain_s: float
    ttft_limit_s: float
    think_time_s: float
    sub_ratio: float
    discipline: str
    derivation: Derivation


def latency_report(
    m: ServiceMoments,
    users: float,
    sub_ratio: float,
    think_time_s: float,
    ttft_limit_s: float | None = None,
    discipline: str | None = None,
    burst: float = 1.0,
    request_fixed_s: float = 0.0,
) -> LatencyReport:
    """Everything latency says about ``users`` on one replica group, with its derivation.

    ``ttft_limit_s`` is what the queue and the prefill may take (planning.inputs.ttft_queue_budget_s: the TTFT
    budget less the request's fixed cost); the report gives the TTFTs and the budget as the client sees them, the
    request's fixed cost ``request_fixed_s`` added back (as the engine simulator adds it to every first token)."""
    think = float(think_time_s)
    sla = assumption("latency.ttft_limit_s") if ttft_limit_s is None else float(ttft_limit_s)
    disc = assumption("latency.discipline") if discipline is None else discipline
    d = Derivation()
    d.given("f", m.miss_rate, note="cache-miss rate")
    d.given("miss_s", m.miss_s, unit="s", note="E[S | miss] (prefill)")
    d.given("hit_s", m.hit_s, unit="s", note="E[S | hit] (prefill)")
    es = d.step("E_S", "f * miss_s + (1 - f) * hit_s", unit="s", f=m.miss_rate, miss_s=m.miss_s, hit_s=m.hit_s)
    d.given("E_S2", m.second_moment_s2, unit="s^2", note="f E[S^2|miss] + (1 - f) E[S^2|hit]")
    lam = d.step("rate", "users * (1 + r) / think_time_s", unit="req/s", source="working-set-model.md 2.9",
                 users=users, r=sub_ratio, think_time_s=think)
    rho = d.step("rho", "rate * E_S", rate=lam, E_S=es)
    if rho < 1:
        wait = d.step("wait_s", "rate * E_S2 / (2 * (1 - rho))", unit="s", source="Pollaczek-Khinchine (M/G/1, FCFS)",
                      rate=lam, E_S2=m.second_moment_s2, rho=rho)
    else:
        wait = float("inf")
        d.given("wait_s", "unbounded", unit="s", note="rho >= 1: the queue has no steady state")
    miss_ttft = ttft_s(lam, m, "miss", disc)
    hit_ttft = ttft_s(lam, m, "hit", disc)
    d.given("miss_ttft_s", _finite(miss_ttft), unit="s", note=f"{disc}: " + ("wait + own" if disc == "fcfs" else "own / (1 - rho)"))
    d.given("hit_ttft_s", _finite(hit_ttft), unit="s")
    if disc == "fcfs":
        if m.miss_s < sla:
            k = d.step("k", "2 * (sla - miss_s)", unit="s", sla=sla, miss_s=m.miss_s)
            lam_sla = d.step("rate_at_limit", "k / (E_S2 + k * E_S)", unit="req/s", k=k, E_S2=m.second_moment_s2, E_S=es)
        else:
            lam_sla = d.given("rate_at_limit", 0.0, unit="req/s", note="a lone miss already exceeds the TTFT limit")
    else:
        lam_sla = d.given("rate_at_limit", latency_ceiling_rate(m, sla, "ps"), unit="req/s", note="PS: (1 - miss_s/sla) / E_S")
    lat_users = d.step("latency_ceiling_users", "rate_at_limit * think_time_s / (1 + r)", unit="users",
                       rate_at_limit=lam_sla, think_time_s=think, r=sub_ratio)
    sat_users = d.step("saturation_ceiling_users", "think_time_s / ((1 + r) * E_S)", unit="users",
                       think_time_s=think, r=sub_ratio, E_S=es)
    if rho < 1:
        bstar = d.step("burst_tolerance", "sla * (1 - rho) / miss_s", unit="misses", sla=sla, rho=rho, miss_s=m.miss_s)
        drain = d.step("burst_drain_s", "burst * miss_s / (1 - rho)", unit="s", burst=burst, miss_s=m.miss_s, rho=rho)
    else:
        bstar = d.given("burst_tolerance", 0.0, unit="misses")
        drain = float("inf")
        d.given("burst_drain_s", "unbounded", unit="s", note="rho >= 1: the backlog never drains")
    fixed = float(request_fixed_s)
    if fixed and math.isfinite(miss_ttft) and math.isfinite(hit_ttft):
        d.given("request_fixed_s", fixed, unit="s", note="the request's fixed cost (step.request_fixed_s), on every "
                "first token the client sees; the queue and prefill get the budget less it")
        miss_ttft = d.step("client_miss_ttft_s", "miss_ttft_s + request_fixed_s", unit="s",
                           miss_ttft_s=miss_ttft, request_fixed_s=fixed)
        hit_ttft = d.step("client_hit_ttft_s", "hit_ttft_s + request_fixed_s", unit="s",
                          hit_ttft_s=hit_ttft, request_fixed_s=fixed)
    elif fixed:
        miss_ttft, hit_ttft = miss_ttft + fixed, hit_ttft + fixed   # an unbounded queue stays unbounded
    return LatencyReport(
        moments=m, users=float(users), rate_per_s=float(lam), rho=float(rho), wait_s=float(wait),
        miss_ttft_s=float(miss_ttft), hit_ttft_s=float(hit_ttft),
        latency_ceiling_users=float(max(0.0, lat_users)), saturation_ceiling_users=float(sat_users),
        burst_tolerance=float(bstar), burst=float(burst), burst_drain_s=float(drain),
        ttft_limit_s=sla + fixed, think_time_s=think, sub_ratio=float(sub_ratio), discipline=disc, derivation=d,
    )


def breakeven_miss_rate(rate_per_s: float, miss_s: float, hit_s: float) -> float:
    """f* at which prefill duty reaches 1: (1/lambda - E[S|hit]) / (E[S|miss] - E[S|hit]).

    Above 1 means even an all-miss stream fits; <= 0 means the warm turns alone saturate.
    """
    if rate_per_s <= 0:
        raise BadInput(f"request rate must be > 0, got {rate_per_s!r}")
    if miss_s == hit_s:
        return float("inf")
    return (1.0 / rate_per_s - hit_s) / (miss_s - hit_s)


def sla_miss_rate(costs: PrefillCosts, rate_per_s: float, ttft_limit_s: float | None = None, discipline: str | None = None) -> float:
    """The largest miss rate f whose mean miss TTFT still meets the limit at this rate (bisection).

    ``costs`` carries miss_s, miss_s2, hit_s, hit_s2 (a prefill.PrefillCosts). Returns 0 when
    even an all-warm stream breaches the limit and 1 when an all-miss stream meets it.
    """
    sla = assumption("latency.ttft_limit_s") if ttft_limit_s is None else ttft_limit_s
    if sla <= 0:
        raise BadInput(f"TTFT limit must be > 0 s, got {sla!r}")

    def miss_ttft(f: float) -> float:
        return ttft_s(rate_per_s, moments_from(costs, f), "miss", discipline)

    if miss_ttft(0.0) > sla:
        return 0.0
    if miss_ttft(1.0) <= sla:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # TTFT rises monotonically in f
        mid = 0.5 * (lo + hi)
        if miss_ttft(mid) <= sla:
            lo = mid
        else:
            hi = mid
    return lo


def _finite(x: float) -> float | str:
    """Derivations print numbers; an infinite one is shown as a word."""
    return x if x != float("inf") else "unbounded"


def latency_ceiling_users(
    m: ServiceMoments, sub_ratio: float, think_time_s: float,
    ttft_limit_s: float | None = None, discipline: str | None = None,
) -> float:
    """Users at which a miss's mean TTFT reaches the limit: lambda_sla x think / (1 + r)."""
    return users_for_rate(latency_ceiling_rate(m, ttft_limit_s, discipline), think_time_s, sub_ratio)


def saturation_ceiling_users(m: ServiceMoments, sub_ratio: float, think_time_s: float) -> float:
    """Users at which prefill duty reaches 100%: think / ((1 + r) E[S])."""
    return users_for_rate(1.0 / m.mean_s, think_time_s, sub_ratio)
