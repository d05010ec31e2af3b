"""The load model: how many of N users decode at once, and what share of turns miss the TTFT budget.

A user cycles think -> request (a warm tail prefill, or a cold re-prefill, plus ``r`` subagent requests)
-> decode of the output. Per cycle (the renewal-reward theorem: only means enter):

    D     = output_tokens / v(k)                 one request's decode at the per-user speed v at k decoders
    C     = think + E[S] + D                     the cycle: think, prefill service, the main request's decode
    a     = D / C                                the share of a cycle one request stream spends decoding
    K     ~ Binomial(ceil(N x (1 + r)), a)       simultaneous decoders on a replica of N users (each user's
                                                 main stream and its subagent streams, independent users)
    E[K]  = N (1 + r) D / C                      Little's law: arrival rate N (1 + r) / C x time in decode D

The decode ceiling is the largest N whose ``load.percentile`` quantile of K, k_q(N), still meets the floor:
v(k_q) >= floor, i.e. k_q <= k*, the largest batch that meets it (planning.decode.decode_ceiling). v depends
on k_q and a on v, so k_q is the least fixed point of k -> quantile(N, a(v(k))), found by iterating from one
decoder (the map is increasing in k, so the iteration climbs to it, at most k* + 1 steps); admissibility is
monotone in N, so N is found by bisection, bounded by k* / a at the fastest speed.

Interference (planning.interference): a decode that shares its steps with prefill chunks waits for them, so
N is admissible only while, besides k_q meeting the floor, the share of requests the chunks slow below it
(at the request rate N (1 + r) / C and the batch E[K] rounded up, both with each decode lengthened by the
chunks' mean stall) is at most what one
user alone already has plus ``interference.BASELINE_SLACK``, or 1 - percentile, whichever is more. That share
rises with N too, so the same bisection finds the largest N meeting both.

The TTFT of a turn is its queue wait W (M/G/1, Pollaczek-Khinchine mean E[W]) plus its own prefill S
(a miss with probability f, the workload's invalidation). W is taken as an atom at 0 of mass 1 - rho and an
exponential tail, P(W > t) = rho exp(-rho t / E[W]) (exact for M/M/1), so the share of turns that miss the
budget b is

    miss(rate) = f E[P(W > b - S_miss)] + (1 - f) E[P(W > b - S_hit)]       (P(W > t) = 1 for t < 0)

over the workload's context draws. At zero load it is the share whose own prefill exceeds b (a cold
re-prefill of a long context); load adds the rest. The latency ceiling is the largest N at which the share
stays within 1 - percentile, or within that zero-load share plus ``interference.BASELINE_SLACK`` where that is
more (``allowed_slow_share``: the decode's rule and the engine simulator's): a budget one cold prefill exceeds is
a share of turns that miss, never zero users.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING

import numpy as np

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.percentile import percentiles
from servesize.planning.interference import StallLoad, allowed_slow_share, stall_mean_s
from servesize.planning.latency import ServiceMoments

if TYPE_CHECKING:
    from servesize.workload.model import Workload


def think_time_of(workload: Workload) -> float:
    """The mean think time (s) between a user's turns: the one place the planner reads it.

    Little's law and the renewal-reward theorem need the mean gap whatever the distribution's shape: a workload's
    ``think_time_s`` is that mean (a fitted distribution's median, ``think_time_median_s``, is for reporting)."""
    return float(workload.think_time_s)


def binomial_cdf_upto(n: int, p: float, k_max: int) -> np.ndarray:
    """P(K <= k) for k = 0..k_max, K ~ Binomial(n, p), exactly (log-space recursion, no scipy)."""
    if n < 0 or not 0.0 <= p <= 1.0:
        raise BadInput(f"a binomial needs n >= 0 and p in [0, 1], got {n!r}, {p!r}")
    k_max = int(min(max(k_max, 0), n))
    if p == 0.0:
        return np.ones(k_max + 1)
    if p == 1.0:
        out = np.zeros(k_max + 1)
        if k_max == n:
            out[-1] = 1.0
        return out
    if n <= _LOG_TABLE_MAX:  # log(n - k) for k = 0..k_max-1 and log(k + 1): slices of one table of log(1..n)
        logs = _log_integers(n)
        steps = logs[n - k_max:n][::-1] - logs[:k_max] + math.log(p) - math.log1p(-p)
    else:
        k = np.arange(k_max, dtype=float)
        steps = np.log(n - k) - np.log(k + 1.0) + math.log(p) - math.log1p(-p)
    logpmf = n * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
    cdf: np.ndarray = np.minimum(np.cumsum(np.exp(logpmf)), 1.0)
    return cdf


_LOGS: dict[str, np.ndarray | None] = {"table": None}  # log(1), log(2), ...: grown to the largest n asked for, kept for the process
_LOG_TABLE_MAX = 1 << 17  # past this many streams the logs are computed per call (the table stays within 2 MiB)


def _log_integers(n: int) -> np.ndarray:
    """log(i + 1) at index i, for i < n at least: the same doubles np.log gives each whole number alone (the
    binomial's recursion asks for the same logs ~2,000 times a plan; the tests compare the two bit for bit)."""
    table = _LOGS["table"]
    if table is None or table.size < n:
        table = np.log(np.arange(1, min(max(n, 1024) * 2, _LOG_TABLE_MAX) + 1, dtype=float))
        _LOGS["table"] = table
    return table


def binomial_quantile(n: int, p: float, q: float, k_max: int | None = None) -> int:
    """The smallest k with P(K <= k) >= q; k_max + 1 when it lies beyond k_max (the caller's 'too many')."""
    if not 0.0 < q < 1.0:
        raise BadInput(f"a quantile must be in (0, 1), got {q!r}")
    limit = n if k_max is None else min(n, int(k_max))
    cdf = binomial_cdf_upto(n, p, limit)
    hit = np.nonzero(cdf >= q - 1e-12)[0]
    if hit.size:
        return int(hit[0])
    return limit + 1


@frozen
class DecodeLoad(Record):
    """The decode ceiling under the load model, per replica group."""

    users: int = field(metadata=json_as("users_per_replica"))  # the ceiling: most users per replica whose k_q meets the floor
    decoders_at_percentile: int  # k_q at that many users
    mean_decoders: float        # E[K]
    duty: float                 # a: share of a cycle one request stream decodes
    decode_s: float             # D
    cycle_s: float              # C
    speed_tok_s: float = field(metadata=json_as("per_user_tok_s_at_percentile"))  # v(k_q)
    every_user_decoders: int    # k*: the batch that meets the floor (the seed's every-user-decodes ceiling)
    percentile: float
    lower_bound: bool           # k* was the search limit: decode never binds
    derivation: Derivation = field(metadata=json_as(None))
    stall_share: float | None = None    # requests the prefill chunks slow below the floor, at the ceiling
    # the share allowed (one user alone + slack, or 1 - percentile)
    stall_allowed: float | None = field(default=None, metadata=json_as("stall_allowed_share"))
    stall_binds: bool = False           # one user more meets the floor on its batch but not beside the chunks
    evicted_share: float | None = None  # returning turns the pool evicts at the ceiling, re-prefilled (planning.lru)


# an evicted share under this is not priced: the decode ceiling compares slow shares within 1e-12 (``admissible``),
# and a mixture weight this small moves no slow share by as much (below 30 users on the seed's deployment the
# pool's evictions are 1e-20 and less: a third of the shares a plan asks for)
EVICTED_SHARE_MIN = 1e-12


@frozen
class StallCheck:
    """What the decode ceiling needs to price interference: the stall model and the per-fill speeds it reads."""

    load: StallLoad
    speeds_at: Callable[[int], np.ndarray]   # per-user tok/s at k decoders, one per fill of the context bank

    def load_at(self, users: float) -> StallLoad:
        """The stall model at ``users`` per replica: with the returning turns the pool evicts at that load
        re-prefilling (``StallLoad.evictions``; as it is where the churn is not priced)."""
        ev = self.load.evictions
        if ev is None:
            return self.load
        share = ev.share(users)
        return self.load.with_evicted(share if share >= EVICTED_SHARE_MIN else 0.0)


class _Cycle:
    """One replica's users: the fixed point k -> quantile(N (1 + r) streams, a(v(k)))."""

    def __init__(self, speed_at: Callable[[int], float], k_star: int, output_tokens: float, think_s: float,
                 request_s: float, sub_ratio: float, q: float, stall: StallCheck | None = None):
        self.speed_at, self.k_star, self.out, self.think = speed_at, k_star, float(output_tokens), float(think_s)
        self.request_s, self.r, self.q = float(request_s), float(sub_ratio), q
        self.stall = stall
        self._speeds: dict[int, float] = {}
        self._points: dict[int, int] = {}  # users -> k_q found (the bisection asks for some twice)
        self._stalls: dict[int, float] = {}  # users -> the share the chunks slow
        self._allowed: float | None = None

    def stall_share(self, users: int) -> float:
        """The share of requests the prefill chunks slow below the floor at ``users`` (0 without the stall model)."""
        if self.stall is None:
            return 0.0
        if users not in self._stalls:
            k = min(self.fixed_point(users), self.k_star)
            _, d, c = self.duty(self.speed(k))
            streams = self.streams(users)
            load = self.stall.load_at(users)
            # the chunks lengthen every decode by their mean stall, so more decode at once and the cycle is longer
            d += stall_mean_s(load, streams / c)
            c = self.think + self.request_s + d
            batch = max(1, int(math.ceil(streams * d / c - 1e-9)))  # E[K], rounded up
            self._stalls[users] = load.slow_share(streams / c, 1.0 / self.stall.speeds_at(batch))
        return self._stalls[users]

    def stall_allowed(self) -> float:
        if self._allowed is None:
            self._allowed = allowed_slow_share(self.q * 100.0, self.stall_share(1))
        return self._allowed

    def admissible(self, users: int) -> bool:
        """k_q meets the floor, and the chunks slow no more requests than allowed."""
        if self.fixed_point(users) > self.k_star:
            return False
        return self.stall is None or self.stall_share(users) <= self.stall_allowed() + 1e-12

    def speed(self, k: int) -> float:
        k = max(1, int(k))
        if k not in self._speeds:
            self._speeds[k] = float(self.speed_at(k))
        return self._speeds[k]

    def duty(self, v: float) -> tuple[float, float, float]:
        d = self.out / v
        c = self.think + self.request_s + d
        return d / c, d, c

    def streams(self, users: int) -> int:
        return int(math.ceil(users * (1.0 + self.r) - 1e-9))

    def fixed_point(self, users: int) -> int:
        """k_q at ``users`` (k* + 1 when it exceeds k*: the floor is missed).

        The iteration climbs from the k_q of the most users already solved below ``users`` (one decoder when
        none is): the map is increasing in k and in the users, so that k_q is a point at or under the least
        fixed point at ``users``, and climbing from it reaches the same least fixed point as climbing from 1."""
        if users in self._points:
            return self._points[users]
        below = [u for u, k in self._points.items() if u < users and k <= self.k_star]
        k = self._points[max(below)] if below else 1
        for _ in range(self.k_star + 2):
            a, _, _ = self.duty(self.speed(k))
            nxt = max(1, binomial_quantile(self.streams(users), a, self.q, self.k_star))
            if nxt > self.k_star:
                k = self.k_star + 1
                break
            if nxt <= k:
                break
            k = nxt
        self._points[users] = k
        return k

    def upper_users(self) -> int:
        """No more users than k* / a at the fastest speed can keep k_q within k* (a fixed bound for the search)."""
        a, _, _ = self.duty(self.speed(1))
        return int(math.ceil((self.k_star + 1) / (a * (1.0 + self.r)))) + 1


def decoders_at(speed_at: Callable[[int], float], users: int, output_tokens: float, think_s: float,
                request_s: float = 0.0, sub_ratio: float = 0.0, percentile: float = 95.0) -> int:
    """The ``percentile`` of simultaneous decoders among ``users`` per replica: the same fixed point the decode
    ceiling reads at its own users (k -> quantile(Binomial(ceil(users x (1 + r)), a(v(k))))), at any load."""
    if users < 1:
        return 1
    streams = int(math.ceil(users * (1.0 + sub_ratio) - 1e-9))
    cyc = _Cycle(speed_at, streams, output_tokens, think_s, request_s, sub_ratio, float(percentile) / 100.0)
    return min(cyc.fixed_point(users), streams)


def decode_load_ceiling(speed_at: Callable[[int], float], k_star: int, output_tokens: float, think_s: float,
                        request_s: float = 0.0, sub_ratio: float = 0.0, percentile: float = 95.0,
                        lower_bound: bool = False, stall: StallCheck | None = None) -> DecodeLoad:
    """The most users per replica whose ``percentile`` of simultaneous decoders still meets the floor.

    ``speed_at(k)``: per-user p50 tok/s at k decoders (decreasing in k); ``k_star``: the largest k whose speed
    meets the floor; ``request_s``: mean prefill service of a turn (E[S], no queue)."""
    return DecodeLoadSearch(speed_at, k_star, output_tokens, think_s, request_s, sub_ratio, percentile,
                            lower_bound).result()


class DecodeLoadSearch:
    """``decode_load_ceiling``'s bisection over users, held open: ``users_at_least(n)`` decides whether the
    ceiling exceeds n with one evaluation, narrowing the bracket;
    ``result()`` finishes the same bisection (the same DecodeLoad as ``decode_load_ceiling``)."""

    def __init__(self, speed_at: Callable[[int], float], k_star: int, output_tokens: float, think_s: float,
                 request_s: float = 0.0, sub_ratio: float = 0.0, percentile: float = 95.0, lower_bound: bool = False,
                 stall: StallCheck | None = None):
        if k_star < 1:
            raise BadInput("the load model needs a batch that meets the floor (k* >= 1)")
        if think_s <= 0 or output_tokens <= 0:
            raise BadInput("think time and output length must be > 0")
        self.args = (k_star, output_tokens, think_s, request_s, sub_ratio, percentile, lower_bound)
        self.cyc = _Cycle(speed_at, int(k_star), output_tokens, think_s, request_s, sub_ratio, float(percentile) / 100.0,
                          stall)
        self.lo, self.hi = 1, max(2, self.cyc.upper_users())
        if not self.cyc.admissible(1):  # cannot happen when v(1) >= v(k*) >= floor; kept as a guard
            self.lo = 0
        self._result: DecodeLoad | None = None

    def users_at_least(self, users: float) -> bool:
        """Whether the ceiling exceeds ``users``: one evaluation, at the least whole count above ``users`` (the
        predicate is monotone in N, so the ceiling exceeds ``users`` exactly when that count is admissible); the
        bracket keeps what it learnt, so a later ``result()`` bisects the narrower interval."""
        if not math.isfinite(users):
            self._bisect()
            return False
        probe = math.floor(users) + 1
        if self.lo < probe < self.hi:  # admissible(lo), not admissible(hi)
            if self.cyc.admissible(probe):
                self.lo = probe
            else:
                self.hi = probe
        return self.lo > users

    def _bisect(self) -> None:
        while self.hi - self.lo > 1:
            mid = (self.lo + self.hi) // 2
            if self.cyc.admissible(mid):
                self.lo = mid
            else:
                self.hi = mid

    def result(self) -> DecodeLoad:
        if self._result is None:
            self._bisect()
            self._result = _decode_load(self.cyc, self.lo, self.hi, *self.args)
        return self._result


def _decode_load(cyc: _Cycle, lo: int, hi: int, k_star: int, output_tokens: float, think_s: float, request_s: float,
                 sub_ratio: float, percentile: float, lower_bound: bool) -> DecodeLoad:
    """The DecodeLoad at the bisection's answer ``lo``, with its derivation."""
    k = cyc.fixed_point(lo) if lo else 0
    v = cyc.speed(max(k, 1))
    a, d_s, c_s = cyc.duty(v)
    mean_k = lo * (1.0 + sub_ratio) * a
    d = Derivation()
    d.given("think_time_s", think_s, unit="s", note="the mean gap between a user's turns (load.think_time_of)")
    d.given("output_tokens", output_tokens, unit="tokens/request")
    d.given("request_s", request_s, unit="s", note="E[S]: a turn's prefill service, warm or cold, no queue")
    d.given("per_user_tok_s_at_k", v, unit="tok/s", note=f"p50 at k = {k} decoders (the fixed point)")
    d_step = d.step("decode_s", "output_tokens / per_user_tok_s_at_k", unit="s", output_tokens=output_tokens,
                    per_user_tok_s_at_k=v)
    c_step = d.step("cycle_s", "think_time_s + request_s + decode_s", unit="s", think_time_s=think_s,
                    request_s=request_s, decode_s=d_step)
    duty = d.step("duty", "decode_s / cycle_s", note="share of a cycle a request stream decodes", decode_s=d_step,
                  cycle_s=c_step)
    d.step("mean_decoders", "users * (1 + r) * duty", unit="decoders", source="Little's law", users=lo, r=sub_ratio,
           duty=duty)
    d.given("decoders_at_percentile", k, unit="decoders",
            note=f"p{percentile:g} of Binomial(ceil(users x (1 + r)), duty): at most k* = {k_star} meet the floor")
    d.given("decode_ceiling_users", lo, unit="users per replica",
            note=f"most users whose p{percentile:g} of simultaneous decoders meets the floor (bisection over users)"
            + ("; a lower bound: the floor is met at the search limit" if lower_bound else ""))
    stall_share = stall_allowed = evicted = None
    stall_binds = False
    if cyc.stall is not None:
        stall_share, stall_allowed = cyc.stall_share(max(lo, 1)), cyc.stall_allowed()
        if cyc.stall.load.evictions is not None:
            evicted = cyc.stall.load_at(max(lo, 1)).evicted_share
            d.given("evicted_share", evicted, unit="share of returning turns",
                    note=cyc.stall.load.evictions.basis() + ": each re-prefills its context, beside the decodes")
        stall_binds = hi == lo + 1 and cyc.fixed_point(hi) <= k_star  # the batch allowed one more; the chunks did not
        window = cyc.stall.load
        d.given("stall_share", stall_share, unit="share of requests",
                note=f"decode below {window.floor_tok_s:g} tok/s because prefill chunks share its steps "
                     f"(planning.interference; allowed {stall_allowed:.1%}: one user alone + slack, or "
                     f"1 - p{percentile:g})" + ("; this is what stops one user more" if stall_binds else ""))
    return DecodeLoad(lo, k, float(mean_k), float(a), float(d_s), float(c_s), float(v), int(k_star),
                      float(percentile), lower_bound, d, stall_share, stall_allowed, stall_binds, evicted)


# --------------------------------------------------------------------------------------
# TTFT: the share of turns that miss the budget
# --------------------------------------------------------------------------------------


class _Tail:
    """E[P(W > budget - S)] over one set of prefill draws S, for any queue (rho, E[W]).

    P(W > t) is 1 for t < 0 and rho exp(-rho t / E[W]) otherwise, so the mean is
    (#{t < 0} + rho sum_{t >= 0} exp(-rho t / E[W])) / n: the draws are split once, and each evaluation is
    one scaled exp over the t >= 0 into a buffer kept for the search (the bisection evaluates it ~60 times)."""

    def __init__(self, draws_s: np.ndarray, budget_s: float):
        t = budget_s - np.asarray(draws_s, dtype=float).ravel()
        self.n = int(t.size)
        self.late = int(np.count_nonzero(t < 0))  # own prefill alone exceeds the budget
        self.slack = np.ascontiguousarray(t[t >= 0])
        self._buf = np.empty_like(self.slack)

    def mean(self, rho: float, mean_wait: float) -> float:
        if not self.n:
            return 0.0
        if rho <= 0 or mean_wait <= 0 or not self.slack.size:
            return self.late / self.n
        np.multiply(self.slack, -rho / mean_wait, out=self._buf)
        np.exp(self._buf, out=self._buf)
        return (self.late + rho * float(self._buf.sum())) / self.n


def tails_of(miss_s: np.ndarray, hit_s: np.ndarray, budget_s: float) -> tuple[_Tail, _Tail]:
    """The miss and hit draws split at the budget, once (what every TTFT evaluation over them reads)."""
    return _Tail(miss_s, budget_s), _Tail(hit_s, budget_s)


def _share(rate_per_s: float, m: ServiceMoments, miss: _Tail, hit: _Tail) -> float:
    rho = rate_per_s * m.mean_s
    if rho >= 1:
        return 1.0
    wait = rate_per_s * m.second_moment_s2 / (2.0 * (1.0 - rho))
    f = m.miss_rate
    return f * miss.mean(rho, wait) + (1.0 - f) * hit.mean(rho, wait)


def miss_share(rate_per_s: float, m: ServiceMoments, miss_s: np.ndarray, hit_s: np.ndarray, budget_s: float) -> float:
    """The share of turns whose TTFT (wait + own prefill) exceeds ``budget_s`` at ``rate_per_s`` requests/s."""
    return _share(rate_per_s, m, _Tail(miss_s, budget_s), _Tail(hit_s, budget_s))


@frozen
class TtftLoad(Record):
    """The latency ceiling as a share of turns that miss the TTFT budget."""

    rate_at_ceiling_per_s: float = field(metadata=json_as(None))
    # share of turns that miss at zero load (their own prefill exceeds the budget)
    base_share: float = field(metadata=json_as("base_miss_share"))
    allowed_extra_share: float  # what load may add: allowed_slow_share(percentile, base) - base
    budget_s: float
    percentile: float
    longest_miss_s: float = field(metadata=json_as("cold_prefill_p999_s"))  # the slowest cold prefill drawn (p99.9)

    def share_at(self, rate_per_s: float, m: ServiceMoments, miss_s: np.ndarray, hit_s: np.ndarray) -> float:
        return miss_share(rate_per_s, m, miss_s, hit_s, self.budget_s)


RATE_REL_TOL = 1e-13  # the rate is found to 1e-13 of itself: where a 60-step bisection lands (tests/test_load_model.py)
_MAX_ROOT_STEPS = 200  # a cap: Illinois takes 17-40 steps on the plan's sensitivity panel; stopped early, lo still meets the target


class _RateSearch:
    """The largest rate in [0, saturation) whose ``excess`` (share over the target, increasing in the rate) is
    <= 0, given ``excess(0) = at_zero <= 0``: regula falsi with the Illinois rule, the bracket kept
    [lo: within, hi: over] so ``lo`` is always a rate that meets the target and the root lies in [lo, hi].

    Resumable: ``narrow(tol)`` runs the iteration until the bracket is within ``tol`` of ``hi``; a later
    ``narrow`` with a smaller ``tol`` continues the same iteration, so a search narrowed in steps evaluates the
    same rates, and ends on the same ``lo``, as one narrowed to the smaller ``tol`` at once."""

    def __init__(self, excess: Callable[[float], float], at_zero: float, saturation: float):
        self.excess, self.lo, self.g_lo, self.hi = excess, 0.0, at_zero, saturation
        self.g_hi = excess(saturation)
        self.side = self.steps = 0
        if self.g_hi <= 0:  # the share never exceeds the target below saturation
            self.lo = self.hi = math.nextafter(saturation, 0.0)
            self.steps = _MAX_ROOT_STEPS

    def narrow(self, rel_tol: float) -> _RateSearch:
        while self.steps < _MAX_ROOT_STEPS and self.hi - self.lo > rel_tol * self.hi:
            self.steps += 1
            lo, hi, g_lo, g_hi = self.lo, self.hi, self.g_lo, self.g_hi
            x = hi - g_hi * (hi - lo) / (g_hi - g_lo)
            if not lo < x < hi:
                x = 0.5 * (lo + hi)
            g = self.excess(x)
            if g <= 0:
                self.lo, self.g_lo = x, g
                if self.side < 0:
                    self.g_hi *= 0.5
                self.side = -1
            else:
                self.hi, self.g_hi = x, g
                if self.side > 0:
                    self.g_lo *= 0.5
                self.side = 1
        return self


def _largest_rate_within(excess: Callable[[float], float], at_zero: float, saturation: float) -> float:
    """The largest rate in [0, saturation) whose ``excess`` is <= 0, to RATE_REL_TOL (``_RateSearch``)."""
    return _RateSearch(excess, at_zero, saturation).narrow(RATE_REL_TOL).lo


def longest_miss(miss_s: np.ndarray) -> float:
    """The slowest cold prefill drawn: the p99.9 of the miss draws (0 without draws)."""
    return percentiles(miss_s, (99.9,))[0] if miss_s.size else 0.0


def ttft_ceiling_rate(m: ServiceMoments, miss_s: np.ndarray, hit_s: np.ndarray, budget_s: float,
                      percentile: float = 95.0, longest_miss_s: float | None = None) -> TtftLoad:
    """The largest request rate at which the share of turns that miss the budget stays within
    ``allowed_slow_share(percentile, share at zero load)``.

    ``longest_miss_s``: ``longest_miss(miss_s)`` when the caller holds it already (the same draws under
    every budget and moment a sweep tries)."""
    return TtftSearch(m, miss_s, hit_s, budget_s, percentile, longest_miss_s).result()


class TtftSearch:
    """``ttft_ceiling_rate``'s search, held open: ``rate_bounds(tol)`` brackets the ceiling's rate as far as a
    caller needs (which ceiling binds may be plain from a coarse bracket), ``result()`` finishes it to
    RATE_REL_TOL, continuing the same iteration (the same TtftLoad as ``ttft_ceiling_rate``)."""

    def __init__(self, m: ServiceMoments, miss_s: np.ndarray, hit_s: np.ndarray, budget_s: float,
                 percentile: float = 95.0, longest_miss_s: float | Callable[[], float] | None = None,
                 tails: tuple[_Tail, _Tail] | None = None):
        if budget_s <= 0:
            raise BadInput(f"TTFT limit must be > 0 s, got {budget_s!r}")
        # tails: tails_of(miss_s, hit_s, budget_s) when the caller holds them (the same draws and budget, other moments)
        miss, hit = tails or tails_of(miss_s, hit_s, budget_s)
        self.base = _share(0.0, m, miss, hit)
        # the share that may miss: 1 - percentile, or what no load already misses plus the slack (the decode's rule,
        # there over one user alone, and the engine simulator's: interference.allowed_slow_share)
        target = min(allowed_slow_share(float(percentile), self.base), 1.0)
        self.allowed = target - self.base  # what load may add
        self.search = _RateSearch(lambda rate: _share(rate, m, miss, hit) - target, self.base - target, 1.0 / m.mean_s)
        self.budget_s, self.percentile = float(budget_s), float(percentile)
        # the p99.9 is read when the search is finished (a search left open never needs it); a callable: the
        # caller's memo of longest_miss(miss_s)
        self._longest, self._miss_s = longest_miss_s, miss_s
        self._result: TtftLoad | None = None

    def rate_bounds(self, rel_tol: float) -> tuple[float, float]:
        """(lo, hi): the ceiling's rate lies in [lo, hi], hi - lo within ``rel_tol`` of hi (or the search's end)."""
        self.search.narrow(rel_tol)
        return self.search.lo, self.search.hi

    def result(self) -> TtftLoad:
        if self._result is None:
            lo = self.search.narrow(RATE_REL_TOL).lo
            given = self._longest
            longest = longest_miss(self._miss_s) if given is None else float(given() if callable(given) else given)
            self._result = TtftLoad(lo, float(self.base), self.allowed, self.budget_s, self.percentile, longest)
        return self._result
