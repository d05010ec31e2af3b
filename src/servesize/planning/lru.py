"""The cache ceiling under churn: a returning turn is warm only if its session's blocks outlive the pause.

vLLM's prefix cache evicts the least recently used free block (vllm/v1/core/block_pool.py, the free block queue),
so a session's blocks survive its user's think time only while the blocks written since then fit beside them.
At a steady write rate the pool holds everything written within its characteristic time (Che's approximation
for LRU caches: Che, Tung and Wang, IEEE JSAC 20(7), 2002)

    T_C(N) = pool tokens / write rate(N),    write rate(N) = N (1 + r) / C x E[new KV tokens per request]

(C the cycle of a user's requests; a request writes the full blocks of its prefilled tokens and its output), and a
returning turn is warm when its pause is shorter than T_C. The ceiling is the largest N at which the ``percentile``
quantile of the pause stays within T_C: at most 1 - percentile of returning turns find their session evicted.

In Che's approximation a block stays T_C after its *last* access, so a session's blocks that a returning turn hits
were held through the pause before it as well, and are held T_C again after it: per request the pool holds its
writes for T_C and the blocks it hits again for the pause it waited (``cache.churn_occupancy = last_access``;
``writes`` counts the writes alone, the rule before 2026-12-07), so at the bound

    pool = N (1 + r) / C x (new x pause_q + re-read x E[min(pause, pause_q)]).

The warm fill (planning.warm_capacity) counts sessions whose whole context fits at once, which holds when each
turn adds little to a long context (coding agents); where each turn writes about as much as the session holds
(short conversations of long turns, retrieval), the pool turns over within one pause and this binds first.
Sessions of one request (``session_turns = 1``) never return: no bound.

A trace of lone requests whose prefixes are shared across users (Mooncake's: ``Workload.reuse_tokens``) has no
pauses to read: its warm requests' LRU stack distances, measured over the trace, say which of them a pool evicts.

Below the bound the same approximation says how many returning turns are cold at N users (``Evictions``): the
characteristic time T_C(N) solves pool = N (1 + r) / C x (new x T + re-read x E[min(pause, T)]), and a turn whose
pause outlasts it finds its session evicted, P(pause > T_C(N)), and prefills its whole context again: prefill work
the decodes beside it wait for (planning.interference, the decode ceiling's stall).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as

if TYPE_CHECKING:
    from servesize.workload.model import Workload

CHURN_OCCUPANCY = ("last_access", "writes")  # cache.churn_occupancy: what the pool holds a request's blocks for


@frozen
class ChurnBound(Record):
    """The users per replica at which the pool's characteristic time falls to the pause's percentile."""

    users: float = field(metadata=json_as("users_per_replica"))  # per replica (math.inf: no returning turns)
    new_tokens_per_request: float
    requests_per_user_s: float    # (1 + r) / C
    pool_tokens: float
    pause_s: float = field(metadata=json_as("pause_s_at_percentile"))  # the pause's percentile
    percentile: float
    derivation: Derivation = field(metadata=json_as(None))
    reread_tokens_per_request: float = 0.0  # a returning turn's hits of its session's blocks (token-equivalents)
    held_pause_s: float = 0.0               # E[min(pause, pause_s)]: what the pool holds them for before the turn

    def binds(self, warm_users: float, replicas: int = 1) -> bool:
        """Whether the churn bound is below the warm fill's users (both across ``replicas``)."""
        return self.users * replicas < warm_users

    def capped(self, warm_users: float, replicas: int = 1) -> float:
        """The cache ceiling: the warm fill's users, or the churn bound's whole users where it binds first."""
        return float(math.floor(self.users) * replicas) if self.binds(warm_users, replicas) else float(warm_users)

    def text(self) -> str:
        held = (f" and holds the {self.reread_tokens_per_request:,.0f} it hits again through the pause before it"
                if self.reread_tokens_per_request > 0 and self.held_pause_s > 0 else "")
        return (f"the pool turns over within a p{self.percentile:g} pause ({self.pause_s:,.0f} s) past "
                f"{self.users:,.0f} users a replica: each request writes {self.new_tokens_per_request:,.0f} new tokens"
                + held)


def churn_bound(pool_tokens: float, new_tokens_per_request: float, requests_per_user_s: float, pause_s: float,
                percentile: float, returning: bool = True, reread_tokens_per_request: float = 0.0,
                held_pause_s: float = 0.0) -> ChurnBound:
    """The most users per replica whose p``percentile`` pause stays within the pool's characteristic time, the
    pool holding each request's writes for that time and the blocks it hits again for ``held_pause_s`` before."""
    if pool_tokens <= 0 or new_tokens_per_request <= 0 or requests_per_user_s <= 0 or pause_s < 0 or \
            reread_tokens_per_request < 0 or held_pause_s < 0:
        raise BadInput("the churn bound needs a pool, new tokens per request and a request rate > 0, a pause >= 0")
    d = Derivation()
    d.given("pool_tokens", pool_tokens, unit="tokens", note="one replica's KV pool (and its host-RAM tier)")
    d.given("new_tokens_per_request", new_tokens_per_request, unit="tokens",
            note="E[full blocks a request writes]: warm tails, cold re-prefills, session starts "
                 "(and a hybrid model's cached states, in token-equivalents)")
    d.given("requests_per_user_s", requests_per_user_s, unit="1/s", note="(1 + r) / cycle")
    d.given("pause_s", pause_s, unit="s", note=f"p{percentile:g} of the think time")
    d.given("reread_tokens_per_request", reread_tokens_per_request, unit="tokens",
            note="E[its session's cached blocks a returning turn hits], held through its pause (cache.churn_occupancy)")
    d.given("held_pause_s", held_pause_s, unit="s", note=f"E[min(pause, p{percentile:g})]")
    if not returning or pause_s == 0:
        d.given("churn_users", math.inf, note="no turn returns to its session: the churn does not bind")
        users = math.inf
    else:
        users = d.step("churn_users",
                       "pool_tokens / (requests_per_user_s * (new_tokens_per_request * pause_s"
                       " + reread_tokens_per_request * held_pause_s))",
                       unit="users per replica", source="Che's approximation of LRU (the pool's characteristic time)",
                       pool_tokens=pool_tokens, pause_s=pause_s, requests_per_user_s=requests_per_user_s,
                       new_tokens_per_request=new_tokens_per_request,
                       reread_tokens_per_request=reread_tokens_per_request, held_pause_s=held_pause_s)
    return ChurnBound(float(users), new_tokens_per_request, requests_per_user_s, pool_tokens, pause_s, percentile, d,
                      reread_tokens_per_request, held_pause_s)


CHARACTERISTIC_TIME_STEPS = 64  # Newton steps for T_C(N), at most (it converges in a handful)
CHARACTERISTIC_TIME_MAX_S = 1e7  # about 4 months: a pause longer than this is no session's


def characteristic_time_s(bound: ChurnBound, users: float, held_below: Callable[[float], float],
                          exceeds: Callable[[float], float]) -> float:
    """T_C at ``users`` per replica: the time the pool holds a block after its last access when each request writes
    ``bound.new_tokens_per_request`` for T_C and holds its re-read blocks for E[min(pause, T_C)] (``held_below``:
    that mean, whose slope is ``exceeds``, P(pause > T): Workload.think_time_below_s and think_time_exceeds);
    CHARACTERISTIC_TIME_MAX_S where the pool outlives that. What the pool holds grows with T and ever more slowly
    (E[min(pause, T)] is concave), so Newton's steps from T = 0 climb to it without overshooting."""
    if users <= 0:
        return CHARACTERISTIC_TIME_MAX_S
    rate = users * bound.requests_per_user_s
    new, reread = bound.new_tokens_per_request, bound.reread_tokens_per_request
    t = 0.0
    for _ in range(CHARACTERISTIC_TIME_STEPS):
        short = bound.pool_tokens - rate * (new * t + (reread * held_below(t) if reread > 0 else 0.0))
        step = short / (rate * (new + (reread * exceeds(t) if reread > 0 else 0.0)))
        t += step
        if t >= CHARACTERISTIC_TIME_MAX_S:
            return CHARACTERISTIC_TIME_MAX_S
        if step <= 1e-12 * t:
            break
    return t


@frozen
class Evictions:
    """The returning turns the LRU pool has evicted by the time they return, at a load (Che's approximation)."""

    bound: ChurnBound
    workload: Workload = field(metadata=json_as(None))

    def basis(self) -> str:
        """How ``share`` finds the evicted turns, in words."""
        if self.workload.reuse_tokens is not None:
            return ("their prefix evicted: its LRU reuse distance in the trace is past the pool (planning.lru "
                    "Evictions, Workload.reuse_tokens)")
        return ("their session evicted by LRU churn in their pause (planning.lru Evictions, Che's approximation at "
                "this load)")

    def share(self, users: float) -> float:
        """P(pause > T_C(users)): the share of returning turns that find their session evicted and re-prefill it.
        A trace of lone requests sharing prefixes across users (``Workload.reuse_tokens``) is the LRU stack itself:
        a warm request finds its prefix evicted where its reuse distance is past the pool, at any load (the distance
        counts the distinct tokens used since, whatever the rate; the pool is the whole one, as T_C's)."""
        w = self.workload
        if w.reuse_tokens is not None:
            return w.reuse_evicted(self.bound.pool_tokens)
        if not math.isfinite(self.bound.users):
            return 0.0  # no turn returns
        t = characteristic_time_s(self.bound, users, w.think_time_below_s, w.think_time_exceeds)
        return float(w.think_time_exceeds(t))
