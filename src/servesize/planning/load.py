"""How many users keep a replica's decoders under the floor: the duty-cycle load model (issue 17).

Each user cycles think -> first token -> decode of ``output_tokens`` at the per-user speed. Of one
cycle, the share spent decoding (the duty) is

    d = t_decode / (t_think + t_ttft + t_decode),    t_decode = output_tokens / speed(B)

so among N users (each turn towing r subagent requests: N (1 + r) streams) the number decoding at a
moment is ~ Binomial(N (1 + r), d). The decode ceiling is the largest N whose ``load_percentile``
(p95) of simultaneous decoders B still gets per-user speed >= the floor, i.e. B <= B_floor, the batch
the floor allows (planning.decode.decode_ceiling). The speed that sets t_decode is the speed at that
batch B: for each N the duty is iterated from the one-user speed up to its least fixed point (B only
grows, and stops at B_floor), and N is found by bisection (feasibility only falls as N grows),
capped at ``limits.MAX_LOAD_USERS``.

Little's law is the mean of this: N d = mean decoders, so N ~ B_floor / d when the p95 margin is
small. The seed's rule, every user decoding at once (N = B_floor), is the ``decode.load_model =
"all_at_once"`` reading, kept as the conservative bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.limits import MAX_LOAD_USERS


def binomial_quantile(trials: int, p: float, q: float, upto: int) -> int:
    """The smallest k with P(Binomial(trials, p) <= k) >= q, or ``upto + 1`` when it lies past ``upto``."""
    if trials < 0 or not 0.0 <= p <= 1.0 or not 0.0 < q < 1.0:
        raise BadInput(f"binomial quantile needs trials >= 0, p in [0, 1], q in (0, 1); got {trials}, {p}, {q}")
    if trials == 0 or p == 0.0:
        return 0
    if p == 1.0:
        return trials if trials <= upto else upto + 1
    top = min(trials, upto)
    k = np.arange(top + 1, dtype=float)
    # log pmf(k + 1) = log pmf(k) + log((trials - k) / (k + 1)) + log(p / (1 - p)), from log pmf(0) = trials log(1 - p)
    steps = np.log((trials - k[:-1]) / (k[:-1] + 1.0)) + math.log(p / (1.0 - p))
    log_pmf = trials * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
    cdf = np.cumsum(np.exp(log_pmf))
    hit = np.nonzero(cdf >= q)[0]
    return int(hit[0]) if hit.size else upto + 1


@dataclass(frozen=True)
class DecodeLoad:
    """The decode ceiling in users under the duty-cycle load model, per replica group."""

    users: int                   # N: the most users per replica whose p-th percentile of decoders meets the floor
    decoders_at_floor: int       # B_floor: the batch the floor allows (every user decoding at once: the seed's ceiling)
    decoders_at_percentile: int  # B at N users, at the percentile
    percentile: float
    duty: float                  # d at N users
    decode_s: float              # t_decode at that batch
    think_s: float
    ttft_s: float
    streams_per_user: float      # 1 + r
    capped: bool                 # the floor still holds at MAX_LOAD_USERS: a lower bound
    derivation: Derivation

    @property
    def littles_law_users(self) -> float:
        """Little's law without the percentile margin: B_floor / (d (1 + r))."""
        return self.decoders_at_floor / (self.duty * self.streams_per_user) if self.duty > 0 else math.inf

    def to_dict(self) -> dict:
        return {"users_per_replica": self.users, "decoders_at_floor": self.decoders_at_floor,
                "decoders_at_percentile": self.decoders_at_percentile, "load_percentile": self.percentile,
                "duty": self.duty, "decode_s": self.decode_s, "think_s": self.think_s, "ttft_s": self.ttft_s,
                "streams_per_user": self.streams_per_user, "littles_law_users": self.littles_law_users,
                "capped": self.capped}


@dataclass(frozen=True)
class _Point:
    decoders: int
    duty: float
    speed_tok_s: float


def _point(n: int, speed_at: Callable[[int], float], duty_of: Callable[[float], float], streams: float,
           percentile: float, b_floor: int) -> _Point | None:
    """The least fixed point of B -> percentile of Binomial(n (1 + r), d(speed(B))), or None past B_floor."""
    trials = max(n, int(round(n * streams)))  # r subagent streams per turn on average: N (1 + r), rounded, at least N
    b = 1
    for _ in range(b_floor + 1):  # B strictly grows each round and stops at B_floor: this many rounds suffice
        speed = speed_at(b)
        duty = duty_of(speed)
        bp = binomial_quantile(trials, duty, percentile, b_floor)
        if bp > b_floor:
            return None
        if bp <= b:
            return _Point(bp, duty, speed)
        b = bp
    return None


def _search(b_floor: int, speed_at: Callable[[int], float], duty_of: Callable[[float], float], streams: float,
            percentile: float, cap: int) -> tuple[int, _Point | None, bool]:
    """(N, the point at N, capped): the most users whose percentile of decoders stays within B_floor.

    Feasibility only falls as N grows (more trials, and a duty that only rises with B): bracket by
    doubling from B_floor, then bisect; the floor still met at ``cap`` returns N = cap, capped."""
    if not 0.0 < percentile < 1.0:
        raise BadInput(f"decode.load_percentile must be in (0, 1), got {percentile!r}")
    if b_floor <= 0:
        return 0, None, False
    memo: dict = {}

    def speed(b: int) -> float:
        if b not in memo:
            memo[b] = float(speed_at(b))
        return memo[b]

    def fits(n: int) -> _Point | None:
        return _point(n, speed, duty_of, streams, percentile, b_floor)

    lo, at, hi = 0, None, max(1, b_floor)
    while hi <= cap and (p := fits(hi)) is not None:
        lo, at, hi = hi, p, hi * 2
    if hi > cap:
        p = fits(cap)
        if p is not None:
            return cap, p, True
        hi = cap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = fits(mid)
        if p is not None:
            lo, at = mid, p
        else:
            hi = mid
    return lo, at, False


def decode_load(b_floor: int, speed_at: Callable[[int], float], output_tokens: int, think_s: float, ttft_s: float,
                streams_per_user: float, percentile: float, cap: int = MAX_LOAD_USERS) -> DecodeLoad:
    """The most users per replica whose ``percentile`` of simultaneous decoders stays within ``b_floor``.

    ``speed_at(B)``: per-user tok/s (p50) at B concurrent decoders, falling in B; ``speed_at(b_floor)``
    meets the floor. ``ttft_s``: the mean prefill service of a turn (queueing not counted)."""
    if think_s < 0 or ttft_s < 0 or output_tokens < 1 or streams_per_user < 1:
        raise BadInput("the load model needs think >= 0 s, TTFT >= 0 s, >= 1 output token and >= 1 stream per user")
    cycle = think_s + ttft_s

    def duty_of(speed: float) -> float:
        t_dec = output_tokens / speed
        return t_dec / (cycle + t_dec)

    n, at, capped = _search(b_floor, speed_at, duty_of, streams_per_user, percentile, cap)
    return _derive(n, b_floor, at, think_s, ttft_s, output_tokens, streams_per_user, percentile, capped)


def mix_decode_users(b_floor: int, speed_at: Callable[[int], float], classes: list[tuple[float, int, float]],
                     percentile: float, cap: int = MAX_LOAD_USERS) -> tuple[int, bool]:
    """(users, capped) of a mix of classes growing together: ``classes`` = (streams per user of the mix,
    output tokens, think + TTFT s) per class, streams weighted by the class's share of the users. The
    decoders are taken as one Binomial at the streams-weighted mean duty (a Poisson-binomial has no more
    spread than that: the conservative side). One class gives ``decode_load``'s users."""
    streams = sum(w for w, _, _ in classes)
    if streams <= 0:
        raise BadInput("a mix of teams needs users")

    def duty_of(speed: float) -> float:
        return sum(w * (out / speed) / (cycle + out / speed) for w, out, cycle in classes) / streams

    n, _, capped = _search(b_floor, speed_at, duty_of, streams, percentile, cap)
    return n, capped


def _derive(n: int, b_floor: int, at: _Point | None, think_s: float, ttft_s: float, output_tokens: int,
            streams: float, percentile: float, capped: bool) -> DecodeLoad:
    d = Derivation()
    d.given("B_floor", b_floor, unit="decoders", note="the batch whose per-user p50 still meets the floor")
    if at is None or n == 0:
        d.step("decode_users", "0", unit="users", note="no batch meets the floor")
        return DecodeLoad(0, b_floor, 0, percentile, 0.0, 0.0, think_s, ttft_s, streams, False, d)
    speed = d.given("speed_tok_s", at.speed_tok_s, unit="tok/s", note=f"per-user p50 at B = {at.decoders} decoders")
    t_dec = d.step("t_decode_s", "output_tokens / speed_tok_s", unit="s", output_tokens=output_tokens, speed_tok_s=speed)
    duty = d.step("duty", "t_decode_s / (t_think_s + t_ttft_s + t_decode_s)", t_decode_s=t_dec, t_think_s=think_s,
                  t_ttft_s=ttft_s, source="issue 17 load model: think -> TTFT -> decode")
    d.step("littles_law_users", "B_floor / (duty * streams)", unit="users", B_floor=b_floor, duty=duty, streams=streams,
           note="mean decoders = users x streams x duty (Little's law), no percentile margin")
    d.step("decode_users", "n", unit="users", n=n, note=(
        f"largest N with p{percentile * 100:g} of Binomial(N x {streams:g}, {duty:.4f}) = {at.decoders} <= {b_floor} "
        "decoders" + (" (at the search cap: a lower bound; decode does not bind)" if capped else "")))
    return DecodeLoad(n, b_floor, at.decoders, percentile, float(duty), float(t_dec), think_s, ttft_s, streams, capped, d)
