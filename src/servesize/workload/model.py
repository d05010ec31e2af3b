"""What the users do: a distribution of session lengths, shared prefixes, request classes.

A **session** is one conversation whose KV the engine keeps between turns; its length is the
prompt tokens of its latest request (history + tool results + the new tail), because that whole
prompt is what a prefix-cache hit on the next turn needs resident. A workload mixes two request
classes, users and (optionally) subagents, each with its own length distribution and its own
shared, byte-stable system prefix.

Sampling follows the warm-capacity seed (working-set-model.md 2.6, steps 1-4) exactly:

1. each request is a subagent with probability r / (1 + r) (r = subagent requests per user
   request), else a user request; its length L is drawn from its class
   (log-normal: ln L ~ N(ln median, sigma); empirical: bootstrap from observed lengths);
2. its prefix is its class's shared prefix (the user prefix when subagents share it), and
   full = clip(L, min(prefix, max_model_len), max_model_len): a prompt holds at least its
   prefix, and the tail piles up at the cap (5b.5: vLLM would reject those, an agent would
   compact; the pile-up is kept so the seed's figures reproduce, and it is listed as an assumption);
3. with probability f (invalidation) the request is cold: it cannot match any cached prefix,
   so its prefix is 0 and it occupies its full length;
4. (the caller) a warm session costs max(full - prefix, 0) unique tokens, a cold one its full length.

Every default below is the seed's reference workload (the coding-agent preset, data/workloads.toml).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from servesize.errors import BadInput, clip
from servesize.frozen import frozen
from servesize.percentile import median
from servesize.workload.catalogue import (  # the seed's reference workload (data/workloads.toml) and the think floor
    MIN_THINK_TIME_S,
    SEED_INVALIDATION,
    SEED_MAX_MODEL_LEN,
    SEED_OUTPUT_TOKENS,
    SEED_SUBAGENT_MEDIAN_TOKENS,
    SEED_SUBAGENT_PREFIX_TOKENS,
    SEED_SUBAGENT_RATIO,
    SEED_SUBAGENT_SIGMA,
    SEED_THINK_TIME_S,
    SEED_USER_MEDIAN_TOKENS,
    SEED_USER_PREFIX_TOKENS,
    SEED_USER_SIGMA,
    SEED_WARM_TURN_TOKENS,
)
from servesize.workload.draws import RawDraw, draw_numbers

if TYPE_CHECKING:  # numpy loads where a function needs it (the CLI starts without it)
    import numpy as np

FORMAT_VERSION = 1
FORMAT_KEY = "servesize_workload"
SCALAR_FIELDS = ("subagent_ratio", "subagents_share_prefix", "invalidation", "max_model_len", "think_time_s",
                 "output_tokens", "warm_turn_tokens", "think_time_sigma", "session_turns", "output_spread",
                 "reuse_tokens")
# beside the scalar fields; think_time_median_s is derived (written for the reader; read only without think_time_s)
FILE_KEYS = frozenset({"user", "subagent", FORMAT_KEY, "fit", "preset", "think_time_median_s"})

_MAX_SIGMA = 5.0
MAX_OUTPUT_SPREAD = 100  # reply-length points a workload may carry (a fit writes 10: the deciles' midpoints)
MAX_REUSE_POINTS = 1000  # reuse-distance points a workload may carry (a fit writes REUSE_POINTS)
REUSE_POINTS = 64        # a trace's reuse distances are written as this many equally likely points
_MAX_TOKENS = 100_000_000
MAX_SESSION_TURNS = 10_000  # requests per session: a bound on what a file or a flag may say (and on a generated session)


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy's numbers register as Real
        raise BadInput(f"{owner}.{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise BadInput(f"{owner}.{name} must be finite, got {value!r}")
    return value


def _check_range(owner: str, name: str, value: Any, lo: float, hi: float, *, lo_open=False, hi_open=False) -> float:
    v = _number(owner, name, value)
    bad_lo = v <= lo if lo_open else v < lo
    bad_hi = v >= hi if hi_open else v > hi
    if bad_lo or bad_hi:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise BadInput(f"{owner}.{name} must be in {left}{lo:g}, {hi:g}{right}, got {value!r}")
    return v


# --- clipped log-normal moments ----------------------------------------------------------------

def _phi(x: float) -> float:
    """Standard normal CDF (math.erf; no scipy)."""
    if x == math.inf:
        return 1.0
    if x == -math.inf:
        return 0.0
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def clipped_lognormal_moment(mu: float, sigma: float, lo: float, hi: float, k: int) -> float:
    """E[clip(L, lo, hi)^k] for ln L ~ N(mu, sigma), closed form.

    = lo^k P(L < lo) + E[L^k; lo <= L <= hi] + hi^k P(L > hi), with
    E[L^k; a <= L <= b] = exp(k mu + k^2 sigma^2 / 2) [Phi((ln b - mu - k sigma^2)/sigma)
                                                      - Phi((ln a - mu - k sigma^2)/sigma)].
    """
    ln_lo = math.log(lo) if lo > 0 else -math.inf
    ln_hi = math.log(hi)
    below = _phi((ln_lo - mu) / sigma)
    above = 1.0 - _phi((ln_hi - mu) / sigma)
    inside = math.exp(k * mu + 0.5 * k * k * sigma * sigma) * (
        _phi((ln_hi - mu - k * sigma * sigma) / sigma) - _phi((ln_lo - mu - k * sigma * sigma) / sigma)
    )
    return (lo ** k) * below + inside + (hi ** k) * above


# --- request classes ---------------------------------------------------------------------------

@frozen
class SessionClass:
    """A log-normal request class: ln L ~ N(ln median_tokens, sigma), sharing prefix_tokens.

    ``median_tokens`` is exp(mu); ``sigma`` the standard deviation of ln L (the shape);
    ``prefix_tokens`` the byte-stable system prefix every request of the class starts with,
    stored once in the cache for the whole class.
    """

    name: str
    median_tokens: float
    sigma: float
    prefix_tokens: int = 0
    source: str = ""

    kind = "lognormal"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise BadInput(f"session class name must be a non-empty string, got {self.name!r}")
        owner = self.name
        object.__setattr__(self, "median_tokens", _check_range(owner, "median_tokens", self.median_tokens, 0, _MAX_TOKENS, lo_open=True))
        object.__setattr__(self, "sigma", _check_range(owner, "sigma", self.sigma, 0, _MAX_SIGMA, lo_open=True))
        prefix = _check_range(owner, "prefix_tokens", self.prefix_tokens, 0, _MAX_TOKENS)
        object.__setattr__(self, "prefix_tokens", int(round(prefix)))

    @property
    def mu(self) -> float:
        return math.log(self.median_tokens)

    def moment(self, lo: float, hi: float, k: int) -> float:
        """E[clip(L, lo, hi)^k], closed form."""
        return clipped_lognormal_moment(self.mu, self.sigma, lo, hi, k)

    def to_dict(self) -> dict:
        out = {"name": self.name, "kind": self.kind, "median_tokens": self.median_tokens,
               "sigma": self.sigma, "prefix_tokens": self.prefix_tokens}
        if self.source:
            out["source"] = self.source
        return out

    def describe(self) -> str:
        return (f"{self.name}: log-normal, median {self.median_tokens:,.0f} tokens, sigma {self.sigma:g}, "
                f"prefix {self.prefix_tokens:,} tokens")


@dataclass(frozen=True, eq=False)
class EmpiricalClass:
    """A request class that bootstraps lengths from observed prompt token counts."""

    name: str
    lengths: np.ndarray = field(compare=False, repr=False)
    prefix_tokens: int = 0
    source: str = ""

    kind = "empirical"

    def __post_init__(self):
        import numpy as np
        if not isinstance(self.name, str) or not self.name.strip():
            raise BadInput(f"session class name must be a non-empty string, got {self.name!r}")
        try:
            arr = np.asarray(self.lengths, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            raise BadInput(f"{self.name}.lengths must be a list of token counts") from None
        if arr.size == 0:
            raise BadInput(f"{self.name}.lengths must hold at least one token count")
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr > _MAX_TOKENS):
            raise BadInput(f"{self.name}.lengths must be token counts in (0, {_MAX_TOKENS:g}]")
        arr = arr.copy()
        arr.setflags(write=False)
        object.__setattr__(self, "lengths", arr)
        prefix = _check_range(self.name, "prefix_tokens", self.prefix_tokens, 0, _MAX_TOKENS)
        object.__setattr__(self, "prefix_tokens", int(round(prefix)))

    def __eq__(self, other) -> bool:
        import numpy as np
        if not isinstance(other, EmpiricalClass):
            return NotImplemented
        return (self.name, self.prefix_tokens, self.source) == (other.name, other.prefix_tokens, other.source) and (
            np.array_equal(self.lengths, other.lengths))

    def __hash__(self) -> int:
        return hash((self.name, self.prefix_tokens, self.lengths.size, self.lengths.tobytes()))

    @property
    def median_tokens(self) -> float:
        return median(self.lengths)

    def moment(self, lo: float, hi: float, k: int) -> float:
        """Exact for the bootstrap: the mean of clip(lengths, lo, hi)^k."""
        import numpy as np
        return float(np.mean(np.clip(self.lengths, lo, hi) ** k))

    def to_dict(self) -> dict:
        out = {"name": self.name, "kind": self.kind, "lengths": [float(x) if x != int(x) else int(x) for x in self.lengths],
               "prefix_tokens": self.prefix_tokens}
        if self.source:
            out["source"] = self.source
        return out

    def describe(self) -> str:
        return (f"{self.name}: empirical ({self.lengths.size:,} observed lengths, median "
                f"{self.median_tokens:,.0f} tokens), prefix {self.prefix_tokens:,} tokens")


RequestClass = SessionClass | EmpiricalClass


def length_mass(cls: RequestClass, edges) -> np.ndarray:
    """The probability that one of the class's prompt lengths (before the prefix floor and the cap)
    falls in each bin [edges[i], edges[i + 1]); the last edge may be inf (everything above).

    Log-normal: Phi((ln b - mu) / sigma) - Phi((ln a - mu) / sigma), closed form; empirical: the
    share of the observed lengths in each bin. What a length-distribution plot draws."""
    import numpy as np
    edges = np.asarray(edges, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0) or edges[0] < 0:
        raise BadInput("length bins need at least two increasing edges >= 0")
    if isinstance(cls, SessionClass):
        with np.errstate(divide="ignore"):
            z = (np.log(edges) - cls.mu) / cls.sigma
        cdf = np.array([_phi(float(v)) for v in z])
        return np.diff(cdf)
    counts = np.histogram(cls.lengths, bins=edges)[0]
    return counts / cls.lengths.size


def class_from_dict(data: Any, where: str, prefix_tokens: int = 0) -> RequestClass:
    """A request class from its table in a workload file; ``prefix_tokens`` when the table gives none."""
    if not isinstance(data, dict):
        raise BadInput(f"workload file: {where} must be a table/object, got {type(data).__name__}")
    kind = data.get("kind", "lognormal")
    allowed = {"lognormal": {"name", "kind", "median_tokens", "sigma", "prefix_tokens", "source"},
               "empirical": {"name", "kind", "lengths", "prefix_tokens", "source"}}
    if not isinstance(kind, str) or kind not in allowed:
        raise BadInput(f"workload file: {where}.kind must be 'lognormal' or 'empirical', got {kind!r}")
    unknown = sorted(set(data) - allowed[kind])
    if unknown:
        raise BadInput(f"workload file: unknown field(s) in {where}: {', '.join(clip(u) for u in unknown)}")
    name = data.get("name", where)
    for key, text in (("name", name), ("source", data.get("source", ""))):
        if not isinstance(text, str):
            raise BadInput(f"workload file: {where}.{key} must be text, got {str(text)[:40]!r}")
    if kind == "lognormal":
        for key in ("median_tokens", "sigma"):
            if key not in data:
                raise BadInput(f"workload file: {where}.{key} is missing")
        return SessionClass(name, data["median_tokens"], data["sigma"], data.get("prefix_tokens", prefix_tokens),
                            data.get("source", ""))
    if "lengths" not in data:
        raise BadInput(f"workload file: {where}.lengths is missing")
    return EmpiricalClass(name, data["lengths"], data.get("prefix_tokens", prefix_tokens), data.get("source", ""))


# --- samples -----------------------------------------------------------------------------------

@frozen
class Sample:
    """One draw of requests (any shape): what the pool fill consumes."""

    full_tokens: np.ndarray     # prompt length after the prefix floor and the cap (tokens)
    prefix_tokens: np.ndarray   # shared prefix this request dedups against (0 when cold)
    is_cold: np.ndarray         # matches nothing: occupies its full length, never warm
    is_subagent: np.ndarray

    def unique_tokens(self) -> np.ndarray:
        """Step 4: tokens a resident session adds beyond the shared prefix (full when cold)."""
        import numpy as np
        return np.where(self.is_cold, self.full_tokens, np.maximum(self.full_tokens - self.prefix_tokens, 0.0))


# --- the workload ------------------------------------------------------------------------------

@frozen
class Workload:
    """Session lengths, shared prefixes, request classes, churn and pacing.

    user                    the user request class (required).
    subagent                an optional second class; ``None`` means every request is a user's
                            (``subagent_ratio`` is then inert).
    subagent_ratio          r, subagent requests per user request; share r/(1+r). Seed: 0.10.
    subagents_share_prefix  subagents start with the user prefix instead of their own. Seed: False.
    invalidation            f, fraction of requests that match no cached prefix (cold). Seed: 0.01.
    max_model_len           the engine's --max-model-len; longer prompts pile up at it. Seed: 180k.
    think_time_s            the MEAN pause between a user's requests (planner: rates, Little's law). Seed: 30 s.
    think_time_sigma        the log-normal shape of the pauses (fitted from a trace's gaps); None: the shape
                            is not known and pauses are drawn exponential with that mean. The median is
                            derived (``think_time_median_s``); read pauses through ``think_times``.
    output_tokens           output tokens per request (decode, power). Seed: 1,000.
    output_spread           the replies' lengths at equally likely points (a fit: the deciles' midpoints of the
                            replies of two tokens or more), as multiples of ``output_tokens``; None: every reply
                            is ``output_tokens`` long. The decode floor's slowed share is priced over them (a short
                            reply has little slack for a prefill chunk beside it).
    warm_turn_tokens        new tokens prefilled on a warm hit (prefill). Seed: 2,000.
    session_turns           requests per session (the conversation's, subagents' included): after that many the
                            user starts a new session, whose first request is cold beyond the shared prefix.
                            0: no turnover on top of ``invalidation``, which counts every cold request (the
                            seed's reading; a workload fitted from a trace, whose invalidation counts each
                            session's first request). Read the shares through ``cold_shares``.
    reuse_tokens            a trace of lone requests whose prefixes are shared across the whole trace (hash ids
                            global: Mooncake's): the LRU stack distance, in KV tokens, of a warm request's first
                            block past the shared prefix (the distinct tokens used since that block's last use), at
                            equally likely points. A pool holding fewer tokens has evicted it and the request
                            re-prefills its prompt (``reuse_evicted``; planning.lru Evictions). None: the returning
                            turns are a session's, evicted by their pause (Che's approximation, planning.lru).
    """

    user: RequestClass
    subagent: RequestClass | None = None
    subagent_ratio: float = SEED_SUBAGENT_RATIO
    subagents_share_prefix: bool = False
    invalidation: float = SEED_INVALIDATION
    max_model_len: int = SEED_MAX_MODEL_LEN
    think_time_s: float = SEED_THINK_TIME_S
    output_tokens: int = SEED_OUTPUT_TOKENS
    warm_turn_tokens: int = SEED_WARM_TURN_TOKENS
    think_time_sigma: float | None = None
    session_turns: int = 0
    output_spread: tuple[float, ...] | None = None
    reuse_tokens: tuple[float, ...] | None = None

    def __post_init__(self):
        import numpy as np
        if not isinstance(self.user, (SessionClass, EmpiricalClass)):
            raise BadInput(f"workload.user must be a SessionClass or EmpiricalClass, got {type(self.user).__name__}")
        if self.subagent is not None and not isinstance(self.subagent, (SessionClass, EmpiricalClass)):
            raise BadInput(f"workload.subagent must be a SessionClass, EmpiricalClass or None, got {type(self.subagent).__name__}")
        object.__setattr__(self, "subagent_ratio", _check_range("workload", "subagent_ratio", self.subagent_ratio, 0, 100))
        if not isinstance(self.subagents_share_prefix, (bool, np.bool_)):
            raise BadInput(f"workload.subagents_share_prefix must be true or false, got {self.subagents_share_prefix!r}")
        object.__setattr__(self, "subagents_share_prefix", bool(self.subagents_share_prefix))
        object.__setattr__(self, "invalidation", _check_range("workload", "invalidation", self.invalidation, 0, 1))
        cap = _check_range("workload", "max_model_len", self.max_model_len, 1, _MAX_TOKENS)
        if cap != int(cap):
            raise BadInput(f"workload.max_model_len must be a whole number of tokens, got {self.max_model_len!r}")
        object.__setattr__(self, "max_model_len", int(cap))
        object.__setattr__(self, "think_time_s", _check_range("workload", "think_time_s", self.think_time_s, MIN_THINK_TIME_S, 1e6))
        if self.think_time_sigma is not None:
            object.__setattr__(self, "think_time_sigma", _check_range("workload", "think_time_sigma",
                                                                      self.think_time_sigma, 0, _MAX_SIGMA))
        object.__setattr__(self, "output_tokens", int(round(_check_range("workload", "output_tokens", self.output_tokens, 1, 10_000_000))))
        object.__setattr__(self, "output_spread", _output_spread(self.output_spread))
        object.__setattr__(self, "reuse_tokens", _reuse_tokens(self.reuse_tokens))
        turns = _check_range("workload", "session_turns", 0 if self.session_turns is None else self.session_turns,
                             0, MAX_SESSION_TURNS)
        if turns != int(turns):
            raise BadInput(f"workload.session_turns must be a whole number of requests, got {self.session_turns!r}")
        object.__setattr__(self, "session_turns", int(turns))
        turn = _check_range("workload", "warm_turn_tokens", self.warm_turn_tokens, 1, _MAX_TOKENS)
        object.__setattr__(self, "warm_turn_tokens", int(round(turn)))
        for cls in self.classes():
            if cls.prefix_tokens > self.max_model_len:
                raise BadInput(
                    f"{cls.name}.prefix_tokens ({cls.prefix_tokens:,}) exceeds max_model_len "
                    f"({self.max_model_len:,}); a prefix must fit in one prompt"
                )

    # -- the seed's reference --------------------------------------------------------------
    @classmethod
    def seed_reference(cls) -> Workload:
        """The warm-capacity seed's reference workload (working-set-model.md 2.6)."""
        return cls(
            user=SessionClass("user", SEED_USER_MEDIAN_TOKENS, SEED_USER_SIGMA, SEED_USER_PREFIX_TOKENS,
                              source="seed 000: MLE log-normal fit on 1,850 real coding-agent prompts"),
            subagent=SessionClass("subagent", SEED_SUBAGENT_MEDIAN_TOKENS, SEED_SUBAGENT_SIGMA, SEED_SUBAGENT_PREFIX_TOKENS,
                                  source="seed 000: assumed, not measured"),
        )

    def replace(self, **changes) -> Workload:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    # -- think time: one distribution, read through these ----------------------------------
    @property
    def think_time_median_s(self) -> float:
        """The median pause: mean x exp(-sigma^2 / 2) for the fitted log-normal, mean x ln 2 for the exponential."""
        if self.think_time_sigma is None:
            return self.think_time_s * math.log(2.0)
        return self.think_time_s * math.exp(-0.5 * self.think_time_sigma ** 2)

    def think_time_quantile_s(self, q: float) -> float:
        """The q-quantile of the pause (log-normal when the shape is fitted, else exponential)."""
        if not 0 < q < 1:
            raise BadInput(f"a think-time quantile must be in (0, 1), got {q!r}")
        if self.think_time_sigma is None:
            return -self.think_time_s * math.log1p(-q)
        z = math.sqrt(2.0) * _erfinv(2.0 * q - 1.0)
        return self.think_time_median_s * math.exp(self.think_time_sigma * z)

    def think_time_exceeds(self, t_s: float) -> float:
        """P(pause > ``t_s``) (log-normal when the shape is fitted, else exponential): the share of returning turns
        whose pause outlasts a cache that holds a session ``t_s`` after its last access."""
        if t_s <= 0:
            return 1.0
        if self.think_time_sigma is None:
            return math.exp(-t_s / self.think_time_s)
        if self.think_time_sigma == 0:
            return 1.0 if t_s < self.think_time_s else 0.0
        return 0.5 * math.erfc(math.log(t_s / self.think_time_median_s) / (self.think_time_sigma * math.sqrt(2.0)))

    def think_time_below_s(self, limit_s: float) -> float:
        """E[min(pause, limit_s)]: the mean pause cut at ``limit_s`` (log-normal when the shape is fitted, else
        exponential); what a pause shorter than the cache's characteristic time holds a session's blocks for."""
        if limit_s <= 0:
            return 0.0
        if self.think_time_sigma is None:
            return self.think_time_s * -math.expm1(-limit_s / self.think_time_s)
        if self.think_time_sigma == 0:
            return min(self.think_time_s, limit_s)
        mu = math.log(self.think_time_median_s)
        return clipped_lognormal_moment(mu, self.think_time_sigma, 0.0, limit_s, 1)

    def think_times(self, rng: np.random.Generator, n: int | None = None):
        """Pauses drawn from the think-time distribution (its mean is ``think_time_s``)."""
        if self.think_time_sigma is None:
            return rng.exponential(self.think_time_s, n)
        return rng.lognormal(math.log(self.think_time_median_s), self.think_time_sigma, n)

    # -- derived -------------------------------------------------------------------------
    def classes(self) -> tuple[RequestClass, ...]:
        return (self.user,) if self.subagent is None else (self.user, self.subagent)

    @property
    def subagent_probability(self) -> float:
        """r / (1 + r): the chance a request is a subagent's (0 without a subagent class)."""
        if self.subagent is None:
            return 0.0
        return self.subagent_ratio / (1.0 + self.subagent_ratio)

    @property
    def subagent_prefix_tokens(self) -> int:
        if self.subagent is None:
            return 0
        return self.user.prefix_tokens if self.subagents_share_prefix else self.subagent.prefix_tokens

    def reserved_prefix_tokens(self) -> int:
        """Step 5: shared prefixes held once per class present (the subagent's only if separate and r > 0)."""
        reserved = self.user.prefix_tokens
        if self.subagent is not None and not self.subagents_share_prefix and self.subagent_ratio > 0:
            reserved += self.subagent.prefix_tokens
        return reserved

    # -- sampling (2.6 steps 1-3) ----------------------------------------------------------
    def sample(self, rng: np.random.Generator, size) -> Sample:
        """``size`` requests (an int or a shape, e.g. (fills, draws)), as 2.6 steps 1-3."""
        raw = self.draw_raw(rng, size)
        return self.realise(raw)

    def draw_raw(self, rng: np.random.Generator, size) -> RawDraw:
        """The random numbers behind ``size`` requests, before any arithmetic (workload.draws).

        The numbers do not depend on this workload's parameters, only on whether a class is
        empirical (then bootstrap uniforms are drawn too), so ``realise`` under a neighbouring
        workload gives common random numbers.
        """
        import numpy as np
        shape = (int(size),) if isinstance(size, (int, np.integer)) else tuple(int(s) for s in size)
        return draw_numbers(rng, shape, uniforms=self.needs_uniforms)

    @property
    def needs_uniforms(self) -> bool:
        """Whether a class bootstraps from observed lengths (its requests need a uniform each)."""
        return any(isinstance(c, EmpiricalClass) for c in self.classes())

    def sampling_key(self) -> tuple:
        """Everything the sampled requests depend on (not the pacing: think time, output, warm turn)."""
        return (self.user, self.subagent, self.subagent_ratio, self.subagents_share_prefix, self.invalidation,
                self.max_model_len)

    def reuse_evicted(self, pool_tokens: float) -> float:
        """Of a lone-request trace's warm requests (``reuse_tokens``), the share whose prefix a pool of
        ``pool_tokens`` under LRU has evicted: P(reuse distance >= pool), the points equally likely, each the
        midpoint of its share (linear between them, 0 at no distance, 1 past the largest). 0 without the points."""
        if self.reuse_tokens is None:
            return 0.0
        import numpy as np
        n = len(self.reuse_tokens)
        at = np.concatenate([[0.0], self.reuse_tokens])
        below = np.concatenate([[0.0], (np.arange(n) + 0.5) / n])
        return float(1.0 - np.interp(float(pool_tokens), at, below, right=1.0))

    def cold_shares(self) -> tuple[float, float]:
        """(invalidated, started): the shares of requests that re-prefill their whole context (a turn that matches
        nothing: ``invalidation``, never a session's first) and that start a session (cold beyond the shared
        prefix: one in ``session_turns``; 0 without turnover)."""
        if not self.session_turns:
            return self.invalidation, 0.0
        start = 1.0 / self.session_turns
        return self.invalidation * (1.0 - start), start

    def session_start_tokens(self, context, turn, prefix_tokens: int):
        """A session's first prompt (tokens) where ``context`` (its class's draw) is its prompt at its request
        number ``turn`` (0-based): ``turn`` replies and turns (``output_tokens + warm_turn_tokens`` each) earlier,
        at least the shared prefix and one turn. Drawing ``turn`` uniformly over a session's requests makes the
        class's distribution its requests' (their mean is its mean), as the plan reads it; a session started at
        its draw would sit half a session's growth above it (coding-agent's user class: 1.17-1.25x its mean,
        tests/simulate/test_users.py). The session generator (simulate/synthetic.py) and the plan's pricing of session
        starts (planning/ceilings.py) both call this. Numbers or arrays."""
        import numpy as np
        grow = self.output_tokens + self.warm_turn_tokens
        return np.maximum(np.asarray(context, dtype=float) - np.asarray(turn) * grow,
                          float(prefix_tokens + self.warm_turn_tokens))

    def lengths_key(self) -> tuple:
        """Everything the sampled full lengths depend on (not coldness, which does not change a length)."""
        return (self.user, self.subagent, self.subagent_ratio, self.subagents_share_prefix, self.max_model_len)

    def realise(self, raw: RawDraw, columns: slice = slice(None)) -> Sample:
        """Steps 1-3 on ``raw[..., columns]``: classes, lengths, prefix floor and cap, coldness."""
        import numpy as np
        if columns != slice(None):
            raw = raw[..., columns]
        is_sub, is_cold = self._flags(raw)
        full, prefix = self._full_tokens(raw, is_sub)
        prefix = np.where(is_cold, 0.0, prefix)  # step 3: cold requests match nothing
        return Sample(full, prefix, is_cold, is_sub)

    def full_tokens(self, raw: RawDraw) -> np.ndarray:
        """Steps 1-2 only: each request's prompt length (float64), what decode reads and prefill prices."""
        return self._full_tokens(raw, self._subagents(raw))[0]

    def realise_costs(self, raw: RawDraw, extra_tokens: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step 4 for a pool fill, without building a Sample: (unique tokens + ``extra_tokens``, is_cold,
        is_subagent). A warm request costs full - prefix (full >= prefix: the prefix floor, and a prefix
        never exceeds the cap), a cold one its full length."""
        is_sub, is_cold = self._flags(raw)
        cost, prefix = self._full_tokens(raw, is_sub)
        if self.invalidation > 0:
            prefix = prefix * ~is_cold  # cold: nothing to subtract
        cost -= prefix
        cost += extra_tokens
        return cost, is_cold, is_sub

    def _subagents(self, raw: RawDraw) -> np.ndarray:
        """Step 1: which requests are a subagent's (the class word below r/(1+r) x 2**32)."""
        import numpy as np
        p_sub = self.subagent_probability
        return raw.class_word < round(p_sub * 2**32) if p_sub > 0 else np.zeros(raw.shape, dtype=bool)

    def _flags(self, raw: RawDraw) -> tuple[np.ndarray, np.ndarray]:
        """Step 1 (class) and step 3 (cold: the cold word below f x 2**32) from the two words."""
        import numpy as np
        f = self.invalidation
        if f <= 0:
            is_cold = np.zeros(raw.shape, dtype=bool)
        elif f >= 1:
            is_cold = np.ones(raw.shape, dtype=bool)
        else:
            is_cold = raw.cold_word < round(f * 2**32)
        return self._subagents(raw), is_cold

    def _full_tokens(self, raw: RawDraw, is_sub: np.ndarray) -> tuple[np.ndarray, Any]:
        """Step 2: each request's class length, at least its prefix, at most the cap (float64, a new array),
        and its class prefix (an array, or a float when every request is a user's)."""
        import numpy as np
        cap = float(self.max_model_len)
        user_prefix = float(self.user.prefix_tokens)
        if self.subagent_probability <= 0:
            full = self._lengths(self.user, raw)
            return np.clip(full, min(user_prefix, cap), cap, out=full), user_prefix
        sub = is_sub.astype(np.float64)
        sub_prefix = float(self.subagent_prefix_tokens)
        if isinstance(self.user, SessionClass) and isinstance(self.subagent, SessionClass):
            # one exp for both classes: ln L = mu + sigma z with the request's own class (float32, 1e-6 relative)
            (mu_u, s_u), (mu_s, s_s) = ((np.float32(c.mu), np.float32(c.sigma)) for c in (self.user, self.subagent))
            pick = sub.astype(np.float32)
            x = pick * (s_s - s_u)
            x += s_u
            x *= raw.z
            pick *= mu_s - mu_u
            pick += mu_u
            x += pick
            full = np.exp(x, out=x).astype(np.float64)
        else:
            assert self.subagent is not None  # p_sub > 0 only with a subagent class
            full = np.where(is_sub, self._lengths(self.subagent, raw), self._lengths(self.user, raw))
        prefix = sub * (sub_prefix - user_prefix)
        prefix += user_prefix
        np.maximum(full, prefix, out=full)  # the prefix floor (a prefix never exceeds the cap)
        return np.minimum(full, cap, out=full), prefix

    @staticmethod
    def _lengths(cls: RequestClass, raw: RawDraw) -> np.ndarray:
        """The class's length for every request of ``raw`` (float64, a new array)."""
        import numpy as np
        if isinstance(cls, SessionClass):
            x = raw.z * np.float32(cls.sigma)
            x += np.float32(cls.mu)
            return np.exp(x, out=x).astype(np.float64)  # ln L = mu + sigma z, in float32: 1e-6 relative
        if raw.u is None:
            raise BadInput(f"{cls.name}: an empirical class needs random numbers drawn with bootstrap uniforms")
        pick = (raw.u * cls.lengths.size).astype(np.intp)
        return cls.lengths[np.minimum(pick, cls.lengths.size - 1)]

    # -- moments for the prefill model -----------------------------------------------------
    def length_moment(self, k: int) -> float:
        """E[full^k] over requests (tokens^k): closed form for log-normal classes, exact for empirical."""
        return self._class_moment(k)

    def _class_moment(self, k: int) -> float:
        cap = float(self.max_model_len)
        user = self.user.moment(min(self.user.prefix_tokens, cap), cap, k)
        p = self.subagent_probability
        if p == 0 or self.subagent is None:
            return user
        sub = self.subagent.moment(min(self.subagent_prefix_tokens, cap), cap, k)
        return (1.0 - p) * user + p * sub

    def mean_tokens(self) -> float:
        """E[full] over requests (tokens): closed form for log-normal classes, exact for empirical."""
        return self._class_moment(1)

    def share_at_least(self, tokens: float) -> float:
        """P(full >= tokens) over requests: the share of prompts at least that long (each class's length at least
        its prefix and at most the cap, as ``length_moment`` takes them; ``length_mass`` above them)."""
        cap = float(self.max_model_len)

        def share(cls: RequestClass, prefix: float) -> float:
            if tokens <= min(prefix, cap):
                return 1.0
            return 0.0 if tokens > cap else float(length_mass(cls, [tokens, math.inf])[0])

        user = share(self.user, self.user.prefix_tokens)
        p = self.subagent_probability
        if p == 0 or self.subagent is None:
            return user
        return (1.0 - p) * user + p * share(self.subagent, self.subagent_prefix_tokens)

    def second_moment_tokens(self) -> float:
        """E[full^2] over requests (tokens^2), same method as ``mean_tokens``."""
        return self._class_moment(2)

    # -- files -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            FORMAT_KEY: FORMAT_VERSION,
            "user": self.user.to_dict(),
            "subagent": None if self.subagent is None else self.subagent.to_dict(),
            "subagent_ratio": self.subagent_ratio,
            "subagents_share_prefix": self.subagents_share_prefix,
            "invalidation": self.invalidation,
            "max_model_len": self.max_model_len,
            "think_time_s": self.think_time_s,
            "output_tokens": self.output_tokens,
            "warm_turn_tokens": self.warm_turn_tokens,
            "think_time_sigma": self.think_time_sigma,
            "think_time_median_s": self.think_time_median_s,
            "session_turns": self.session_turns,
            "output_spread": None if self.output_spread is None else list(self.output_spread),
            "reuse_tokens": None if self.reuse_tokens is None else list(self.reuse_tokens),
        }

    @classmethod
    def from_dict(cls, data: Any) -> Workload:
        """Read ``to_dict()`` back, absent fields at the seed's values; an optional ``fit`` table (how it was
        fitted) and ``preset`` name are ignored here (``servesize.workload.presets.workload_from_data`` fills
        absent fields from the file's preset instead)."""
        if not isinstance(data, dict):
            raise BadInput("workload file must hold a table/object at the top level")
        version = data.get(FORMAT_KEY, FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise BadInput(f"workload file: {FORMAT_KEY} = {version!r} is not a version this servesize reads (1)")
        scalar = {f.name for f in fields(cls)} - {"user", "subagent"}
        allowed = scalar | FILE_KEYS
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise BadInput(f"workload file: unknown field(s): {', '.join(clip(u) for u in unknown)} "
                           f"(allowed: {', '.join(sorted(allowed))})")
        if "user" not in data:
            raise BadInput("workload file: the [user] class is missing")
        user = class_from_dict(data["user"], "user")
        sub_data = data.get("subagent")
        subagent = None if sub_data in (None, {}) else class_from_dict(sub_data, "subagent")
        kwargs = {k: data[k] for k in scalar if k in data}
        think = think_mean_from(data)
        if think is not None:
            kwargs["think_time_s"] = think
        return cls(user=user, subagent=subagent, **kwargs)

    def describe(self) -> str:
        lines = [self.user.describe()]
        if self.subagent is not None and self.subagent_ratio == 0:
            lines.append("no subagent requests (r = 0)")
        elif self.subagent is not None:
            lines.append(self.subagent.describe() + (" (shares the user prefix)" if self.subagents_share_prefix else ""))
            lines.append(f"subagent requests per user request r = {self.subagent_ratio:g} (share {self.subagent_probability:.3f})")
        lines.append(f"invalidation f = {self.invalidation:g}; max_model_len = {self.max_model_len:,} tokens")
        if self.session_turns:
            lines.append(f"sessions of {self.session_turns:,} requests: each one's first is cold beyond the shared prefix")
        if self.output_spread is not None:
            lengths = ", ".join(f"{x * self.output_tokens:,.0f}" for x in self.output_spread)
            lines.append(f"replies of {lengths} tokens, equally likely (mean {self.output_tokens:,})")
        if self.reuse_tokens is not None:
            mid = self.reuse_tokens[len(self.reuse_tokens) // 2]
            lines.append(f"lone requests sharing prefixes across users: a warm one's prefix was last used a median "
                         f"{mid:,.0f} KV tokens ago (a smaller pool has evicted it)")
        if self.think_time_sigma is not None:  # a fitted distribution: its median first, the mean the rates use
            lines.append(f"think time: median {self.think_time_median_s:.3g} s (log-normal sigma "
                         f"{self.think_time_sigma:.2f}), mean {self.think_time_s:.3g} s")
        return "\n".join(lines)


def _points(value: Any, name: str, what: str, most: int, lo: float, hi: float, lo_open: bool = False) -> tuple[float, ...]:
    """A list field of a workload: 1..``most`` numbers (``what``, for the message), each in its range."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__"):
        raise BadInput(f"workload.{name} must be a list of {what}, got {clip(repr(value))}")
    if not 1 <= len(value) <= most:
        raise BadInput(f"workload.{name} must hold 1 to {most} numbers, got {len(value)}")
    return tuple(float(_check_range("workload", name, x, lo, hi, lo_open=lo_open)) for x in value)


def _output_spread(value: Any) -> tuple[float, ...] | None:
    """A workload's reply lengths as multiples of its mean: None, or 1..MAX_OUTPUT_SPREAD numbers in (0, 10^4]."""
    if value is None:
        return None
    return _points(value, "output_spread", "numbers (multiples of output_tokens)", MAX_OUTPUT_SPREAD, 0, 1e4,
                   lo_open=True)


def _reuse_tokens(value: Any) -> tuple[float, ...] | None:
    """A trace's reuse distances: None, or 1..MAX_REUSE_POINTS token counts in [0, 10^12], ascending."""
    if value is None:
        return None
    points = _points(value, "reuse_tokens", "token counts", MAX_REUSE_POINTS, 0, 1e12)
    if any(b < a for a, b in zip(points, points[1:])):
        raise BadInput("workload.reuse_tokens must be in ascending order (equally likely points of a distribution)")
    return points


def _erfinv(y: float) -> float:
    """erf^-1 by Newton's method on math.erf (|y| < 1)."""
    x = 0.0
    for _ in range(60):
        step = (math.erf(x) - y) / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
        x -= step
        if abs(step) < 1e-13:
            break
    return x


def think_time_mean(median_s: float, sigma: float | None) -> float:
    """The mean pause of a distribution given by its median: log-normal (sigma) or exponential (None)."""
    return median_s * math.exp(0.5 * sigma ** 2) if sigma is not None else median_s / math.log(2.0)


def think_mean_from(data: dict) -> float | None:
    """A file that gives ``think_time_median_s`` and no ``think_time_s``: the mean it implies (else None)."""
    if "think_time_median_s" not in data or "think_time_s" in data:
        return None
    median = _check_range("workload", "think_time_median_s", data["think_time_median_s"], 0, 1e6, lo_open=True)
    sigma = data.get("think_time_sigma")
    return think_time_mean(median, None if sigma is None else _check_range("workload", "think_time_sigma", sigma, 0,
                                                                          _MAX_SIGMA))
