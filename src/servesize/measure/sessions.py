"""``measure sessions``: simulated agentic users on a ladder of user counts.

Each simulated user loops: request, wait for the whole stream, think (exponential, mean
``think_time_s``), request again. A request continues one of the user's sessions:

- a **session** starts at a context of L tokens, ln L ~ N(ln median, sigma), clipped to
  [prefix + id + one turn, max_model_len - output_tokens]; its prompt is the class's shared,
  byte-stable system prefix, then the session's unique id, then its history. Each later turn
  appends ``output_tokens`` (the reply, as filler: the server's own text is not fed back) and
  ``turn_tokens`` (the new tail), so the previous prompt is a prefix of the next one. A session
  ends after ``turns_per_session`` turns or when the next turn would pass max_model_len (5c: the old
  harness grew past the cap and produced errors); the user then starts a new one.
- with probability r / (1 + r) (r = ``subagent_ratio``, subagent requests per user request, as
  the model defines it) the request is a turn of the user's subagent session instead (its own
  class, prefix and length; ``subagent_turns`` turns, then a new one).
- with probability ``invalidation`` a turn is salted at the very front: it matches nothing (cold
  by design) and the session continues from the salted version.

A returning request (not a session's first turn, not salted) is a **warm hit** when the cache
served more than the shared prefix plus half of the session's own previous prompt
(``cached_tokens``); without ``cached_tokens`` a TTFT rule stands in (warm when TTFT < 0.4 x the
cold TTFT predicted for its length by a linear fit over first turns). Per rung: warm-hit rate,
TTFT p50/p95 of hits and misses, inter-token latency, decode tok/s per user, preemptions
(/metrics delta), errors. A rung lasts ``duration_s``, or ends sooner once every user has sent
``requests_per_user`` requests. Stop conditions end the ladder: a rung that **failed** (more than
``max_error_rate`` of its requests failed, or none completed: it is never warm, its warm-hit rate is not a
finding, the record does not hold it as complete and ``--resume`` measures it again; the run exits 2 and
says why), or hit TTFT p95 over ``max_ttft_p95_s``. The warm-hit rate counts every returning request
sent: one that failed is a miss, never left out. Every random draw is seeded (seed, rung, user).

The server's cached_tokens are checked before they judge a rung (as ``measure pool`` checks them): a count
above its prompt is impossible, and warm claims whose TTFT was no faster than the cold TTFT predicted for
their length (more than ``REFUTE_SHARE`` of them at ``REFUTE_TTFT_RATIO`` x or more) are contradicted. A
refuted counter is not trusted for the rest of the run (a ``distrust`` event, one line in the report): the
TTFT rule judges instead (or nothing does: the rung has no signal and the knee stops below it), and the
rungs it had judged are judged again (on --resume, measured again).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.limits import DEFAULT_SEED
from servesize.measure.client import RequestResult, StreamClient, _quantile, collect_between
from servesize.measure.metrics import GaugeSampler, MetricsDelta, MetricsScraper, delta
from servesize.measure.pool import CHECK_PROMPTS, REFUTE_SHARE, REFUTE_TTFT_RATIO, check_rounds, repeat_verdict, resolvable
from servesize.measure.prompts import PromptFactory, filler_words, id_words
from servesize.measure.record import RecordContents, RunRecord, typed
from servesize.scenario import MAX_TOKENS

# A rung's warm claims are refuted on TTFT grounds only when at least this many were slow: two slow warm turns of an
# honest server were seen on this 2-core machine with two engines, a CI run and busy loops sharing it (CI, stop 41:
# "called 2 returning request(s) warm, but 2 of them were no faster than cold"). A modelled floor, not fitted: a
# lying server's claims are many (every returning turn), and the lying-server tests catch them with it in place
REFUTE_MIN_SLOW = 3

LADDER_FACTORS = (0.5, 0.71, 1.0, 1.41, 2.0)
CHECK_SEQ = 1 << 20  # the TTFT checks' prompts take the factory's sequence numbers from here (id_words keeps 24 bits)


@frozen
class ClassParams:
    median_tokens: float
    sigma: float
    prefix_tokens: int = 0


@frozen
class SessionParams:
    """The simulated workload, over plain parameters (``from_workload`` adapts a servesize Workload)."""

    user: ClassParams
    subagent: ClassParams | None = None
    subagent_ratio: float = 0.0
    invalidation: float = 0.0
    max_model_len: int = 32768
    think_time_s: float = 5.0
    output_tokens: int = 64
    turn_tokens: int = 512
    turns_per_session: int = 8
    subagent_turns: int = 3
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        if not 1 <= self.max_model_len <= MAX_TOKENS:
            raise BadInput(f"--max-model-len {self.max_model_len:,} is out of range: [1, {MAX_TOKENS:,}]")
        for flag, c in (("--", self.user), ("--subagent-", self.subagent if self.subagent_ratio > 0 else None)):
            if c is not None and not (0 < c.median_tokens <= MAX_TOKENS and 0 <= c.sigma <= 5
                                      and 0 <= c.prefix_tokens <= self.max_model_len):
                raise BadInput(f"{flag}median must be in (0, {MAX_TOKENS:,}], {flag}sigma in [0, 5] and {flag}prefix in "
                               f"[0, --max-model-len {self.max_model_len:,}], not {c.median_tokens:g}, {c.sigma:g} and "
                               f"{c.prefix_tokens:,}")
        if not (1 <= self.turns_per_session <= 10_000 and 1 <= self.subagent_turns <= 10_000):
            raise BadInput("--turns-per-session must be in [1, 10,000]")
        if self.think_time_s > 1e6 or self.output_tokens > self.max_model_len:
            raise BadInput("--think-time must be at most 1e6 s and --output-tokens at most --max-model-len")
        if not 0 <= self.invalidation <= 1:
            raise BadInput("--invalidation must be in [0, 1]")
        if self.subagent_ratio < 0:
            raise BadInput("--subagent-ratio must be >= 0")
        if self.think_time_s < 0 or self.output_tokens < 1 or self.turn_tokens < 1:
            raise BadInput("--think-time must be >= 0, --output-tokens and --turn-tokens >= 1")
        need = self.user.prefix_tokens + 16 + self.turn_tokens + self.output_tokens
        if need > self.max_model_len:
            raise BadInput(f"--max-model-len {self.max_model_len:,} cannot hold the prefix, one turn and the output ({need:,} tokens)")

    @classmethod
    def from_workload(cls, workload: Any, **overrides) -> SessionParams:
        """Adapt a ``servesize.workload.model.Workload`` (duck-typed: log-normal classes only)."""
        def cls_of(c) -> ClassParams:
            if not hasattr(c, "sigma"):
                raise BadInput(f"measure sessions needs log-normal classes; {getattr(c, 'name', c)} is {getattr(c, 'kind', '?')}")
            return ClassParams(float(c.median_tokens), float(c.sigma), int(c.prefix_tokens))
        subagent = getattr(workload, "subagent", None)
        sub = cls_of(subagent) if subagent is not None else None
        if sub is not None and getattr(workload, "subagents_share_prefix", False):
            sub = ClassParams(sub.median_tokens, sub.sigma, workload.user.prefix_tokens)
        p: dict[str, Any] = dict(
            user=cls_of(workload.user), subagent=sub, subagent_ratio=float(getattr(workload, "subagent_ratio", 0.0)),
            invalidation=float(getattr(workload, "invalidation", 0.0)), max_model_len=int(workload.max_model_len),
            think_time_s=float(workload.think_time_s), output_tokens=int(workload.output_tokens),
            turn_tokens=int(getattr(workload, "warm_turn_tokens", 512)))
        p.update(overrides)
        return cls(**p)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> SessionParams:
        """From a run record's header, every field checked (BadInput, one line, for a damaged one)."""
        where = "the run record's workload parameters"
        d = typed(cls, d, where)
        d["user"] = ClassParams(**typed(ClassParams, d["user"], where + " (user)"))
        d["subagent"] = ClassParams(**typed(ClassParams, d["subagent"], where + " (subagent)")) if d.get("subagent") else None
        return cls(**d)

    def describe(self) -> str:
        u = self.user
        s = (f"users: log-normal median {u.median_tokens:,.0f} tokens, sigma {u.sigma:g}, prefix {u.prefix_tokens:,}; "
             f"turn +{self.turn_tokens:,} +{self.output_tokens:,} out, think {self.think_time_s:g} s, cap {self.max_model_len:,}")
        if self.subagent is not None and self.subagent_ratio > 0:
            a = self.subagent
            s += (f"; subagents r={self.subagent_ratio:g}: median {a.median_tokens:,.0f}, sigma {a.sigma:g}, "
                  f"prefix {a.prefix_tokens:,}")
        if self.invalidation:
            s += f"; invalidation {self.invalidation:g}"
        return s


def ladder(predicted_users: float, factors=LADDER_FACTORS) -> list[int]:
    """A geometric ladder around the prediction that always includes it (rounded, >= 1, unique)."""
    return sorted({max(1, round(predicted_users * f)) for f in factors})


# -- the session generator (pure, seeded) ----------------------------------------------------------

@dataclass
class Turn:
    kind: str  # 'user' | 'subagent'
    session: str
    turn: int  # 0 = the session's first request
    prefix_words: int
    words: list[str]  # the whole prompt, as words
    reusable_words: int  # words of the previous prompt of this session (0 on a first turn or salted turn)
    salted: bool

    @property
    def text(self) -> str:
        return " ".join(self.words)


class _Session:
    def __init__(self, kind: str, sid: str, prefix: list[str], uid: list[str], body_words: int, seed: int):
        self.kind, self.sid, self.prefix, self.uid = kind, sid, prefix, uid
        self.body_seed = seed
        self.body_len = body_words
        self.salt: list[str] = []
        self.turn = 0
        self.last_words = 0

    def words(self) -> list[str]:
        return self.salt + self.prefix + self.uid + filler_words(self.body_seed, self.body_len)


class SessionGenerator:
    """One simulated user's stream of requests, deterministic in (seed, rung, user)."""

    def __init__(self, params: SessionParams, *, rung: int, user: int, nonce: int, tokens_per_word: float = 1.0):
        self.p = params
        self.rng = random.Random(f"{params.seed}/{rung}/{user}")
        self.rung, self.user, self.nonce = rung, user, nonce
        self.tpw = tokens_per_word
        self.sessions_started = 0
        self.current: dict[str, _Session | None] = {"user": None, "subagent": None}
        self._prefix = {"user": filler_words(params.seed * 1000 + 1, self._words(params.user.prefix_tokens))}
        if params.subagent is not None:
            self._prefix["subagent"] = filler_words(params.seed * 1000 + 2, self._words(params.subagent.prefix_tokens))

    def _words(self, tokens: float) -> int:
        return max(0, round(tokens / self.tpw))

    def think_time(self) -> float:
        return self.rng.expovariate(1.0 / self.p.think_time_s) if self.p.think_time_s > 0 else 0.0

    def _new_session(self, kind: str) -> _Session:
        p = self.p
        cls = p.user if kind == "user" else p.subagent
        if cls is None:  # next() draws 'subagent' only when the params have a subagent class
            raise RuntimeError("SessionGenerator: a subagent session asked for, but the params have no subagent class")
        self.sessions_started += 1
        seq = (self.rung & 0xFF) << 16 | (self.user & 0xFF) << 8 | (self.sessions_started & 0xFF)
        uid = id_words(self.nonce, seq) + [f"u{self.user}s{self.sessions_started}"]
        prefix = self._prefix[kind]
        length = math.exp(math.log(cls.median_tokens) + cls.sigma * self.rng.gauss(0.0, 1.0))
        lo = cls.prefix_tokens + (len(uid) + p.turn_tokens) * self.tpw
        hi = p.max_model_len - p.output_tokens
        length = min(max(length, lo), hi)
        body = max(1, self._words(length) - len(prefix) - len(uid))
        return _Session(kind, f"r{self.rung}u{self.user}s{self.sessions_started}", prefix, uid, body,
                        seed=hash((self.p.seed, self.rung, self.user, self.sessions_started)) & 0xFFFFFFFF)

    def next(self) -> Turn:
        p = self.p
        kind = "user"
        if p.subagent is not None and p.subagent_ratio > 0 and self.rng.random() < p.subagent_ratio / (1 + p.subagent_ratio):
            kind = "subagent"
        s = self.current[kind]
        limit = p.turns_per_session if kind == "user" else p.subagent_turns
        grow = self._words(p.output_tokens + p.turn_tokens)
        if s is not None and (s.turn >= limit or (len(s.words()) + grow) * self.tpw + p.output_tokens > p.max_model_len):
            s = None
        if s is None:
            s = self.current[kind] = self._new_session(kind)
        elif s.turn > 0 or s.last_words:
            s.body_len += grow
        salted = False
        if s.turn > 0 and p.invalidation > 0 and self.rng.random() < p.invalidation:
            s.salt = [f"salt{self.rng.getrandbits(32):08x}"]
            salted = True
        words = s.words()
        reusable = 0 if (s.turn == 0 or salted) else s.last_words
        turn = Turn(kind=kind, session=s.sid, turn=s.turn, prefix_words=len(s.prefix), words=words,
                    reusable_words=reusable, salted=salted)
        s.turn += 1
        s.last_words = len(words)
        return turn


# -- classification and statistics (pure) --------------------------------------------------------

def is_warm_hit(r: RequestResult, server_reports_cached: bool = False) -> bool | None:
    """A returning request's hit covered the shared prefix and more than half its own history.
    Once the server has reported cached_tokens at all, a missing field reads as 0 (vLLM omits it at 0)."""
    t = r.tags
    if not t.get("returning") or not r.ok or not (r.cached_tokens_reported or server_reports_cached):
        return None
    prefix = t["prefix_tokens"]
    history = max(0, t["reusable_tokens"] - prefix)
    return r.cached_tokens_or_zero > prefix + 0.5 * history


def ttft_fit(results: list[RequestResult]) -> tuple[float, float] | None:
    """Least squares ttft = a + b x (prompt - prefix) over first turns (cold past the shared prefix)."""
    pts = [(r.prompt_tokens - r.tags["prefix_tokens"], r.ttft_s) for r in results
           if r.ok and r.tags.get("turn") == 0 and r.prompt_tokens and r.ttft_s is not None]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx <= 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx
    return my - b * mx, b


def _summary(values: list[float]) -> dict:
    v = sorted(values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "p50_s": _quantile(v, 0.5), "p95_s": _quantile(v, 0.95), "mean_s": sum(v) / len(v)}


@dataclass
class RungStats:
    """One rung's statistics. ``status``: 'measured', or 'failed' when more than the run's
    ``max_error_rate`` of its requests failed (or none completed): a failed rung is never warm,
    never counted as complete in the record, and ``--resume`` measures it again."""

    users: int
    duration_s: float
    requests: int
    errors: int
    error_types: dict
    returning: int  # returning requests sent, failed ones included
    warm_hits: int
    warm_hit_rate: float | None  # warm hits / returning requests sent: a failed returning request is a miss
    signal: str
    ttft_hit: dict
    ttft_miss: dict
    itl: dict
    decode_tok_per_s_p50: float | None
    preemptions: float | None
    metrics_hit_ratio: float | None
    stop: str | None = None
    status: str = "measured"  # 'measured' | 'failed'
    returning_errors: int = 0  # returning requests that failed (counted as misses in the warm-hit rate)
    refuted: str | None = None  # why this rung's cached_tokens could not be true (then another signal judged it)
    endpoints: list | None = None  # with several endpoints: each one's counts and /metrics (_per_endpoint)
    gauges: list | None = None  # per endpoint: its KV usage, running and waiting sampled during the rung (GaugeSampler)
    coalesced: int = 0  # completed streams read in bursts: their ITL and decode speed withheld (RequestResult.coalesced)
    hit_shown: bool = False  # a hit showed in the server's TTFT, in this rung or one before it (_hit_shows)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RungStats:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def state(self, target: float) -> str:
        """'warm' (warm-hit rate >= target), 'below', 'failed', or 'no signal' (warmth could not be judged)."""
        if self.failed:
            return "failed"
        if self.warm_hit_rate is None:
            return "no signal"
        return "warm" if self.warm_hit_rate >= target else "below"


def _warm_flags(ok: list[RequestResult], returning: list[RequestResult], ttft_ratio: float,
                distrust_cached: bool = False, hit_shown: bool = False) -> tuple[str, dict[str, bool], str | None, bool]:
    """Which signal judged warmth, warm or not per returning request (by id), why cached_tokens was
    refuted (None when it was not, or was not there), and whether a hit shows in this server's TTFT (``hit_shown``:
    it did in an earlier rung of the run; or one does in this rung)."""
    reports = any(r.cached_tokens_reported for r in ok)
    warm: dict[str, bool] = {}
    refuted = None
    if returning and reports and not distrust_cached:
        for r in returning:
            warm[r.id] = bool(is_warm_hit(r, server_reports_cached=True))
        cold = _cold_model(ok)
        hit_shown = hit_shown or _hit_shows(returning, warm, cold, ttft_ratio)
        refuted = _refuted_cached(ok, returning, warm, cold, hit_shown)
        if refuted is None:
            return "cached_tokens", warm, None, hit_shown
        warm = {}
    fit = ttft_fit(ok)
    if fit is None:
        return "none", warm, refuted, hit_shown
    a, b = fit
    for r in returning:
        cold = a + b * max(0, (r.prompt_tokens or 0) - r.tags["prefix_tokens"])
        warm[r.id] = r.ttft_s is not None and cold > 0 and r.ttft_s < ttft_ratio * cold
    return "ttft", warm, refuted, hit_shown


def _hit_shows(returning: list[RequestResult], warm: dict[str, bool], cold, ttft_ratio: float) -> bool:
    """Whether a hit shows in this server's TTFT: some returning request the server called warm was served in
    under ``ttft_ratio`` x the cold TTFT predicted for its length (what the TTFT rule calls warm), where that cold
    TTFT is long enough to see (``resolvable``). On a server whose TTFT is mostly fixed overhead (queueing,
    scheduling, a loaded client's event loop) no hit shows, and a warm claim no faster than cold refutes nothing:
    two honest vLLM CPU engines serving 600-token sessions were refuted under load before this check. ``cold``:
    ``_cold_model`` of the rung's requests."""
    if cold is None:
        return False
    for r in returning:
        predicted = cold(max(0, (r.prompt_tokens or 0) - r.tags["prefix_tokens"]))
        if warm.get(r.id) and r.ttft_s is not None and resolvable(predicted) and r.ttft_s < ttft_ratio * predicted:
            return True
    return False


def _refuted_cached(ok: list[RequestResult], returning: list[RequestResult], warm: dict[str, bool], cold,
                    hit_shown: bool) -> str | None:
    """Why the rung's cached_tokens cannot be trusted: a count above its prompt, or (on a server where a hit
    shows in the TTFT, ``hit_shown``) warm claims whose TTFT was no faster than the cold TTFT predicted for their
    length (the fit over first turns, else the first turns' median TTFT per uncached token)."""
    bad = next((r for r in ok if r.usage_impossible), None)
    if bad is not None:
        return f"reported {bad.usage_impossible}: impossible"
    if cold is None or not hit_shown:
        return None
    ratios = []
    for r in returning:
        predicted = cold(max(0, (r.prompt_tokens or 0) - r.tags["prefix_tokens"]))
        if warm.get(r.id) and r.ttft_s is not None and predicted > 0 and resolvable(predicted):
            ratios.append(r.ttft_s / predicted)
    slow = sum(1 for x in ratios if x >= REFUTE_TTFT_RATIO)
    if not ratios or slow <= REFUTE_SHARE * len(ratios) or slow < REFUTE_MIN_SLOW:
        return None
    ratios.sort()
    return (f"called {len(ratios)} returning request(s) warm, but {slow} of them were no faster than cold (TTFT >= "
            f"{REFUTE_TTFT_RATIO:.0%} of the cold TTFT for their length; median {_quantile(ratios, 0.5):.0%})")


def _cold_model(ok: list[RequestResult]):
    """The cold TTFT of a request with x tokens past the shared prefix: the linear fit over first turns, else
    (first turns of one length) their median TTFT per such token, times x; None without first turns."""
    fit = ttft_fit(ok)
    if fit is not None:
        a, b = fit
        return lambda x: a + b * x
    per_token = sorted(r.ttft_s / (r.prompt_tokens - r.tags["prefix_tokens"]) for r in ok
                       if r.tags.get("turn") == 0 and r.ttft_s is not None and r.prompt_tokens
                       and r.prompt_tokens > r.tags["prefix_tokens"])
    if not per_token:
        return None
    rate = _quantile(per_token, 0.5)
    return lambda x: rate * x


def rung_stats(users: int, duration_s: float, results: list[RequestResult], *, ttft_ratio: float = 0.4,
               preemptions: float | None = None, metrics_hit_ratio: float | None = None,
               distrust_cached: bool = False, endpoints: list[str] | None = None,
               endpoint_metrics: list[dict | None] | None = None, hit_shown: bool = False) -> RungStats:
    """A rung's statistics from its requests. The warm-hit rate counts every returning request sent:
    one that failed is a miss (it was not served warm), never left out. Without a single returning
    request that completed there is nothing to judge warmth by, and the rate is None. With ``endpoints``
    (several), the same counts per endpoint (by each request's ``endpoint`` tag), beside each endpoint's own
    /metrics increases (``endpoint_metrics``, in the same order). ``hit_shown``: a hit showed in the server's TTFT in
    an earlier rung of the run (``_hit_shows``), so slow warm claims can refute its cached_tokens."""
    ok = [r for r in results if r.ok]
    returning_all = [r for r in results if r.tags.get("returning")]
    returning = [r for r in returning_all if r.ok]
    signal, warm, refuted, shown = _warm_flags(ok, returning, ttft_ratio, distrust_cached, hit_shown)
    judged = bool(returning) and signal != "none"
    return RungStats(
        users=users, duration_s=duration_s, requests=len(results), errors=sum(1 for r in results if not r.ok),
        error_types=dict(Counter(r.error["type"] for r in results if r.error is not None)),  # the errors: not ok = error set
        returning=len(returning_all), warm_hits=sum(1 for r in ok if warm.get(r.id)),
        warm_hit_rate=sum(1 for r in returning if warm.get(r.id)) / len(returning_all) if judged else None,
        signal=signal, **_latencies(ok, warm),
        preemptions=preemptions, metrics_hit_ratio=metrics_hit_ratio, returning_errors=len(returning_all) - len(returning),
        refuted=refuted, hit_shown=shown,
        endpoints=_per_endpoint(results, warm, judged, endpoints, endpoint_metrics) if endpoints else None)


def _per_endpoint(results: list[RequestResult], warm: dict[str, bool], judged: bool, urls: list[str],
                  metrics: list[dict | None] | None) -> list[dict]:
    """Each endpoint's requests, errors, returning requests, warm hits and warm-hit rate (counted as the rung's
    are), its /metrics prefix-cache hit ratio over the rung, and the users that sent it requests."""
    out = []
    for e, url in enumerate(urls):
        mine = [r for r in results if r.tags.get("endpoint") == e]
        returning = [r for r in mine if r.tags.get("returning")]
        hits = sum(1 for r in returning if r.ok and warm.get(r.id))
        m = metrics[e] if metrics and e < len(metrics) else None
        ratio = m["hits"] / m["queries"] if m and m.get("queries") and m.get("hits") is not None else None
        out.append({"url": url, "requests": len(mine), "errors": sum(1 for r in mine if not r.ok), "returning": len(returning),
                    "warm_hits": hits, "warm_hit_rate": hits / len(returning) if judged and returning else None,
                    "metrics": m, "metrics_hit_ratio": ratio, "users": len({r.tags.get("user") for r in mine})})
    return out


def _latencies(ok: list[RequestResult], warm: dict) -> dict[str, Any]:
    """The completed requests' TTFT (warm hits and misses apart), inter-token latency and decode speed."""
    hits = [r for r in ok if warm.get(r.id)]
    misses = [r for r in ok if not warm.get(r.id)]
    itl_p50 = [r.itl["p50_s"] for r in ok if r.itl]
    itl_p95 = sorted(r.itl["p95_s"] for r in ok if r.itl)
    decode = sorted(r.decode_tok_per_s for r in ok if r.decode_tok_per_s)
    return {"ttft_hit": _summary([r.ttft_s for r in hits if r.ttft_s is not None]),
            "ttft_miss": _summary([r.ttft_s for r in misses if r.ttft_s is not None]),
            "itl": {"p50_s": _quantile(sorted(itl_p50), 0.5) if itl_p50 else None,
                    "p95_s": _quantile(itl_p95, 0.95) if itl_p95 else None},
            "decode_tok_per_s_p50": _quantile(decode, 0.5) if decode else None,
            "coalesced": sum(1 for r in ok if r.coalesced)}


def knee(rungs: list[RungStats], target: float) -> dict:
    """From the bottom rung up: the last rung that kept a warm-hit rate >= target, and the rung that ended
    the run of warm ones: ``cold_users`` when it was measured below the target, ``inconclusive_users`` when
    it failed or could not be judged (then the knee's upper edge is not measured)."""
    warm_users = cold_users = inconclusive_users = None
    for g in sorted(rungs, key=lambda g: g.users):
        state = g.state(target)
        if state == "warm":
            warm_users = g.users
            continue
        if state == "below":
            cold_users = g.users
        else:
            inconclusive_users = g.users
        break
    return {"warm_users": warm_users, "cold_users": cold_users, "inconclusive_users": inconclusive_users}


MARKS = {"✓": "agrees: within ±{band} of the measured range", "~": "near: beyond ±{band}, within ±{band2}",
         "✗": "disagrees: beyond ±{band2}", "?": "not decided"}


def _bracket(low: float | None, high: float | None) -> str:
    if high is None:
        return f">= {low:g} (a lower bound)"
    if low is None or low <= 0:
        return f"< {high:g}"
    return f"{low:g}" if high == low else f"[{low:g}, {high:g})"


def verdict(name: str, predicted: float, low: float | None, high: float | None, band: float = 0.25) -> dict:
    """5c's bracket verdicts on a prediction against what was measured: inside the measured range
    [low, high) or within ±band of it ✓, within ±2·band ~, beyond ✗, not decided ?. ``low == high``: a
    point. ``high`` None: only a lower bound was measured (the ladder ended on warm or inconclusive
    rungs): a prediction above it is not decided, one below it is at least that far off. ``low`` None
    (or 0): only an upper bound (even the first rung was below the target). The line says in words
    what the mark means."""
    out: dict[str, Any] = {"name": name, "predicted": predicted, "low": low, "high": high}
    if low is None and high is None:
        return {**out, "mark": "?", "relative_error": None, "line": f"? {name}: predicted {predicted:g}, not measured"}
    bracket = _bracket(low, high)
    head = f"{name}: predicted {predicted:g}, measured {bracket}"
    b1, b2 = f"{band:.0%}", f"{2 * band:.0%}"
    if high is None:  # a lower bound only
        assert low is not None
        err = (predicted - low) / low
        if err >= 0 or abs(err) <= band:
            return {**out, "mark": "?", "relative_error": None,
                    "line": f"? {head}: not decided (the ladder did not reach the knee's upper edge)"}
        mark = "✗" if abs(err) > 2 * band else "~"
        text = f"at least {abs(err):.0%} below it: " + MARKS[mark].format(band=b1, band2=b2)
        return {**out, "mark": mark, "relative_error": err, "line": f"{mark} {head}: {text}"}
    lo = low if low is not None else 0.0
    if lo <= predicted < high or (lo == high == predicted):
        return {**out, "mark": "✓", "relative_error": 0.0, "line": f"✓ {head}: inside the measured range"}
    err = (predicted - high) / high if predicted >= high and high != lo else (predicted - lo) / lo
    mark = "✓" if abs(err) <= band else ("~" if abs(err) <= 2 * band else "✗")
    text = f"{abs(err):.0%} {'above' if err > 0 else 'below'} it: " + MARKS[mark].format(band=b1, band2=b2)
    return {**out, "mark": mark, "relative_error": err, "line": f"{mark} {head}: {text}"}


# -- the run -------------------------------------------------------------------------------------

@dataclass
class SessionsConfig:
    url: str
    params: SessionParams
    users: list[int]
    model: str | None = None
    duration_s: float = 120.0
    warm_target: float = 0.9
    # A rung whose requests failed beyond this share (or that completed none) is failed: never warm, not
    # complete in the record (--resume measures it again), and it ends the ladder.
    max_error_rate: float = 0.05
    max_ttft_p95_s: float | None = None
    timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    ttft_ratio: float = 0.4
    predicted_users: float | None = None
    predicted_decode_tok_per_s: float | None = None
    # A rung also ends once every user has sent this many requests (None: the duration alone). A rung
    # bounded by count sends the same requests however fast the server, or the machine, runs.
    requests_per_user: int | None = None
    # after a failed request a user waits at least this long before the next (a dead server gets a few
    # requests a second per user, not a flood into the record)
    error_backoff_s: float = 1.0
    predicted_source: str | None = None  # where the predictions came from (for the report)
    # with several endpoints in url (a comma list): 'sticky' sends every request of user u to endpoint u mod E, as
    # a session-affine router does (the plan's DP recipe assumes it); 'per-request' sends request k of user u to
    # endpoint (u + k) mod E, as a router that spreads one user's turns over the replicas
    routing: str = "sticky"

    def __post_init__(self) -> None:
        if not (self.timeout_s > 0 and self.stall_timeout_s > 0 and self.duration_s > 0):
            raise BadInput("--timeout, --stall-timeout and --duration must be positive seconds")
        if self.requests_per_user is not None and self.requests_per_user < 1:
            raise BadInput("--requests-per-user must be at least 1")
        if not 0 <= self.max_error_rate <= 1 or not 0 < self.warm_target <= 1:
            raise BadInput("--max-error-rate must be in [0, 1] and --warm-target in (0, 1]")
        if not self.users or any(u < 1 or u > MAX_USERS for u in self.users) or len(set(self.users)) > MAX_RUNGS:
            raise BadInput(f"the ladder must have 1 to {MAX_RUNGS} rungs of 1 to {MAX_USERS:,} users, not {self.users}")
        if not 0 <= self.error_backoff_s <= 3600:
            raise BadInput("the error back-off must be in [0, 3600] seconds")
        if self.routing not in ROUTINGS:
            raise BadInput(f"--routing must be one of {', '.join(ROUTINGS)}, not {self.routing!r}")
        if not endpoints(self.url):
            raise BadInput("--url names no endpoint")

    def to_params(self) -> dict:
        d = asdict(self)
        d["params"] = self.params.to_dict()
        return d

    @classmethod
    def from_params(cls, d: dict) -> SessionsConfig:
        """From a run record's header, every field checked (BadInput, one line, for a damaged one)."""
        d = typed(cls, d, "the run record's header")
        d["params"] = SessionParams.from_dict(d["params"])
        return cls(**d)


ROUTINGS = ("sticky", "per-request")


def endpoints(url: str) -> list[str]:
    """The endpoints a --url names: one URL (a server, or a router in front of a fleet), or a comma list of replicas."""
    return [u.strip() for u in url.split(",") if u.strip()]


def endpoint_of(routing: str, user: int, sent: int, n: int) -> int:
    """Which of n endpoints request number ``sent`` (0-based) of ``user`` goes to."""
    return user % n if routing == "sticky" else (user + sent) % n


MAX_USERS = 100_000  # simulated users on one rung: each is a coroutine and a connection
MAX_RUNGS = 64


@dataclass
class SessionsResult:
    url: str
    model: str
    workload_line: str
    rungs: list[RungStats]
    signal: str
    warm_target: float
    knee: dict
    verdicts: list[dict]
    notes: list[str]
    record_path: str | None
    does_not_establish: str = ("that users beyond the ladder's top rung are served; behaviour over hours (one window per "
                               "rung); DP routing; the real distribution of your users' sessions (the simulated one is "
                               "log-normal and seeded); replies fed back as the model wrote them (filler is used).")
    exit_code: int = 0
    failure: str | None = None  # why the run did not measure what it set out to (exit 2); None when it did
    max_error_rate: float = 0.05
    predicted_source: str | None = None

    def to_dict(self) -> dict:
        return {"url": self.url, "model": self.model, "workload": self.workload_line, "signal": self.signal,
                "warm_target": self.warm_target, "max_error_rate": self.max_error_rate, "knee": self.knee,
                "rungs": [g.to_dict() for g in self.rungs],
                "verdicts": [{k: v for k, v in x.items()} for x in self.verdicts],
                "predicted_source": self.predicted_source, "notes": self.notes,
                "failure": self.failure, "record": self.record_path, "does_not_establish": self.does_not_establish}


# A request error that says the URL is not a server to measure: the rung ends at once (every other request
# would say the same) instead of sending requests for the rest of its duration.
FATAL_ERRORS = ("not_openai", "bad_url")


class SessionsRun:
    def __init__(self, config: SessionsConfig, *, record: RunRecord | None = None, resume: RecordContents | None = None,
                 progress: Callable[[str], None] | None = None, workers: Any = None):
        self.cfg = config
        # None: every user runs in this process; else a servesize.measure.distributed.RayWorkers the rungs are spread on
        self.workers = workers
        self.record = record or RunRecord(None)
        self.resume = resume
        self.progress = progress or (lambda msg: None)
        self.notes: list[str] = []
        self.attempts: Counter[int] = Counter()  # failed attempts of each rung (by users) in the record so far
        self.distrust: str | None = None  # why the server's cached_tokens was refuted in this run (or its record)
        self._results: dict[int, list[RequestResult]] = {}  # each measured rung's requests, to judge it again
        self._hit_shown = False  # a hit has shown in the server's TTFT in a rung of this run (_hit_shows)
        self._checks = 0  # TTFT checks run in this segment (each takes fresh prompts)

    async def run(self) -> SessionsResult:
        cfg = self.cfg
        done = self._completed_rungs()
        self._hit_shown = any(g.hit_shown for g in done.values())  # (a refutation on them is checked again: _rung)
        rungs: list[RungStats] = []
        async with contextlib.AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(StreamClient(u, cfg.model, timeout_s=cfg.timeout_s,
                                                                    stall_timeout_s=cfg.stall_timeout_s))
                       for u in endpoints(cfg.url)]
            model, scraper, prompts = await self._open(clients[0])
            scrapers = [scraper, *(MetricsScraper(c) for c in clients[1:])]
            if self.workers is not None:
                joined = await self.workers.start(cfg, model)
                self.record.append("workers_joined", workers=joined)
                self.notes.append(f"{self.workers.n} workers ({self.workers.describe()}): user u runs on worker u mod "
                                  f"{self.workers.n}; each worker's clock offset is in the record")
            for index, users in enumerate(sorted(set(cfg.users))):
                stats = done.get(users)
                if stats is None:
                    stats = await self._rung(clients, scrapers, prompts, index, users)
                    # only a measured rung is complete; a failed one is recorded as such and measured again on --resume
                    self.record.append("rung_failed" if stats.failed else "rung", users=users, attempt=self.attempts[users] + 1,
                                       stats=stats.to_dict())
                    collect_between()
                rungs.append(stats)
                self._hit_shown = self._hit_shown or stats.hit_shown
                if stats.refuted and self.distrust is None:
                    self._distrust(stats.refuted, stats.signal, rungs)
                if stats.stop:
                    self.notes.append(f"ladder stopped at {users} users: {stats.stop}")
                    break
            for note in (*(sc.note for sc in scrapers), *(sc.refused for sc in scrapers), prompts.note):
                if note and note not in self.notes:
                    self.notes.append(note)
        return self._result(model, rungs)

    async def _ttft_still_shows(self, client: StreamClient, prompts: PromptFactory, users: int) -> bool:
        """Before slow warm claims refute cached_tokens on a hit seen only in an earlier rung's TTFT: whether a
        certain hit still shows in it now (the pool's TTFT check: CHECK_PROMPTS fresh prompts of the median
        session's length, sent together twice, on the first endpoint). Load on the machine can slow a warm turn as much
        as a cold one, and then it is the TTFT that cannot judge, not the counter that lies. Each request is recorded
        as it completes ('ttft_check_request'), the verdict as a 'ttft_check' event; a check that cannot run (a
        request failed, or had no TTFT) leaves the refutation standing."""
        cfg = self.cfg
        tokens = max(1, int(min(cfg.params.user.median_tokens, cfg.params.max_model_len - cfg.params.output_tokens - 1)))
        # the factory's own sequence numbers, which the users' prompts (named by their rung's nonce) never take; a
        # resumed run's factory has a new nonce, so a check taken again is not served from an earlier one's cache
        made = [await prompts.make(CHECK_SEQ + CHECK_PROMPTS * self._checks + i, tokens) for i in range(CHECK_PROMPTS)]
        self._checks += 1
        rounds = await check_rounds(
            client, made, lambda msg: self.progress(f"{users} users: {msg}"),
            tags=lambda rnd, i: {"check": rnd, "index": i},
            on_result=lambda rnd, i, r: self.record.append("ttft_check_request", users=users, round=rnd, index=i,
                                                           result=r.to_dict()))
        failed = [r for rnd in rounds for r in rnd if not r.ok]
        verdict = ({"sees_hits": None, "why": f"{len(failed)} check request(s) failed, first: {failed[0].error_line()}"}
                   if failed else repeat_verdict(rounds[0], rounds[1], cfg.ttft_ratio))
        self.record.append("ttft_check", users=users, **verdict)
        if verdict["sees_hits"] is False:
            self.notes.append(f"at {users} users the warm claims were no faster than cold, but a hit no longer shows in "
                              f"this server's TTFT ({CHECK_PROMPTS} prompts of {tokens:,} tokens repeated at once took a "
                              f"median {verdict['repeat_over_cold']:.0%} of their cold TTFT): the TTFT does not refute "
                              f"the server's cached_tokens on hits seen in earlier rungs")
        return verdict["sees_hits"] is not False

    def _distrust(self, why: str, instead: str, rungs: list[RungStats]) -> None:
        """Latch the refutation of cached_tokens (one line, a 'distrust' event) and judge again, without it,
        every rung it had judged."""
        self.distrust = why
        judged = "warmth is judged by TTFT instead" if instead == "ttft" else \
            "and TTFT cannot stand in (no fit over first turns): warmth is not judged"
        self.notes.append(f"the server's cached_tokens is not trusted for this run: it {why}; {judged}")
        self.record.append("distrust", signal="cached_tokens", reason=why)
        self._rejudge(rungs)

    def _rejudge(self, rungs: list[RungStats]) -> None:
        """Each rung cached_tokens judged, judged again from its requests without it (its status and stop kept)."""
        for k, g in enumerate(rungs):
            results = self._results.get(g.users)
            if g.signal != "cached_tokens" or results is None:
                continue
            again = rung_stats(g.users, g.duration_s, results, ttft_ratio=self.cfg.ttft_ratio, preemptions=g.preemptions,
                               metrics_hit_ratio=g.metrics_hit_ratio, distrust_cached=True, hit_shown=g.hit_shown,
                               endpoints=[x["url"] for x in g.endpoints] if g.endpoints else None,
                               endpoint_metrics=[x["metrics"] for x in g.endpoints] if g.endpoints else None)
            again.status, again.stop, again.refuted = g.status, g.stop, g.refuted
            rungs[k] = again

    def _recorded_requests(self) -> dict[tuple[int, int], list[RequestResult]]:
        """The resumed record's requests by (users, attempt)."""
        out: dict[tuple[int, int], list[RequestResult]] = {}
        for e in self.resume.of_type("request") if self.resume is not None else []:
            attempt = e.get("attempt")
            if isinstance(attempt, int) and not isinstance(attempt, bool):
                r = RequestResult.from_dict(typed(RequestResult, e.get("result"), "a 'request' event of the run record"))
                out.setdefault((_users_of(e), attempt), []).append(r)
        return out

    def _completed_rungs(self) -> dict[int, RungStats]:
        """The rungs a resumed record holds as measured, by user count: they are not run again. A failed rung
        (a ``rung_failed`` event, or a ``rung`` of a record written before failed rungs had their own event
        whose error rate passed the limit) is measured again."""
        done: dict[int, RungStats] = {}
        if self.resume is None:
            return done
        for e in self.resume.of_type("rung_failed"):
            self.attempts[_users_of(e)] += 1
        for e in self.resume.of_type("rung"):
            stats = _stats_of(e)
            if stats.failed or (stats.stop or "").startswith("error rate"):
                self.attempts[stats.users] += 1
                continue
            done[stats.users] = stats
        if done:
            self.notes.append(f"resumed: {len(done)} completed rung(s) taken from the record")
        distrust = self.resume.of_type("distrust")
        if distrust:  # refuted in an earlier segment: the rungs it judged are judged again from their requests
            requests = self._recorded_requests()
            for e in self.resume.of_type("rung"):
                attempt = e.get("attempt")
                if _users_of(e) in done and isinstance(attempt, int):
                    self._results[_users_of(e)] = requests.get((_users_of(e), attempt), [])
            self.distrust = str(distrust[0].get("reason"))
            rungs = list(done.values())
            self._rejudge(rungs)
            done = {g.users: g for g in rungs}
            self.notes.append(f"the server's cached_tokens is not trusted for this run (refuted before): it {self.distrust}")
        for e in self.resume.of_type("request"):
            # a rung interrupted (Ctrl-C, SIGTERM, a crash) has requests but neither 'rung' nor 'rung_failed': its next
            # attempt takes a new number, so its requests are not mixed with the interrupted ones, nor its prompts
            # (the attempt seeds the rung's nonce) served warm from them
            attempt = e.get("attempt")
            if isinstance(attempt, int) and not isinstance(attempt, bool) and _users_of(e) not in done:
                self.attempts[_users_of(e)] = max(self.attempts[_users_of(e)], attempt)
        redo = sorted(set(self.attempts) - set(done))
        if redo:
            self.notes.append(f"resumed: the failed or interrupted rung(s) of {', '.join(map(str, redo))} users are measured again")
        return done

    async def _open(self, client: StreamClient) -> tuple[str, MetricsScraper, PromptFactory]:
        """The model, a first /metrics scrape, the prompt factory; the run's info line in the record."""
        model = await client.resolve_model()
        scraper = MetricsScraper(client)
        await scraper.scrape()
        if scraper.note:
            self.notes.append(scraper.note)
        prompts = PromptFactory(client, seed=self.cfg.params.seed)
        await prompts.start()
        if prompts.mode != "tokenize":
            self.notes.append(prompts.note or "token counts are estimates (no /tokenize)")
        self.record.append("info", model=model, tokens_per_word=prompts.tokens_per_word, nonce=prompts.nonce)
        return model, scraper, prompts

    def _result(self, model: str, rungs: list[RungStats]) -> SessionsResult:
        """The knee, the verdicts on the predictions, and the exit: 2, with the reason, when a rung failed
        (what was asked was not measured); the rungs below it are still reported."""
        cfg = self.cfg
        signals = sorted({g.signal for g in rungs if not g.failed}) or ["none"]
        k = knee(rungs, cfg.warm_target)
        verdicts = []
        if cfg.predicted_users is not None:
            # [warm, cold): measured both edges; >= warm: the ladder ended warm or on a rung that failed
            verdicts.append(verdict("warm users", cfg.predicted_users, k["warm_users"], k["cold_users"]))
        if cfg.predicted_decode_tok_per_s is not None:
            at = next((g for g in rungs if g.users == k["warm_users"]), None)
            measured = at.decode_tok_per_s_p50 if at else None
            verdicts.append(verdict("decode tok/s per user at the knee", cfg.predicted_decode_tok_per_s, measured, measured))
        if "ttft" in signals:
            self.notes.append("warm hits judged by TTFT (no cached_tokens): start vLLM with --enable-prompt-tokens-details")
        spread = _spread_note(cfg, self._results)
        if spread:
            self.notes.append(spread)
        coalesced = sum(g.coalesced for g in rungs)
        if coalesced:
            streams = sum(g.requests - g.errors for g in rungs)
            self.notes.append(f"{coalesced:,} of {streams:,} completed streams arrived in fewer reads than half their "
                              "token events (read late, in bursts: a busy client host): their inter-token time and "
                              "decode speed are withheld, not reported as ~0 ms and tens of thousands of tok/s")
        failed = next((g for g in rungs if g.failed), None)
        failure = None
        if failed is not None:
            where = f"; the record {self.record.path} keeps every request: measure it again with --resume {self.record.path}" \
                if self.record.path else ""
            failure = f"the {failed.users}-user rung failed ({failed.stop}): it is not a measurement{where}"
        return SessionsResult(url=cfg.url, model=model, workload_line=cfg.params.describe(), rungs=rungs,
                              exit_code=2 if failure else 0, signal="+".join(signals), warm_target=cfg.warm_target, knee=k,
                              verdicts=verdicts, notes=self.notes, failure=failure, max_error_rate=cfg.max_error_rate,
                              predicted_source=cfg.predicted_source,
                              record_path=str(self.record.path) if self.record.path else None)

    async def _rung(self, clients: list[StreamClient], scrapers: list[MetricsScraper], prompts: PromptFactory, index: int,
                    users: int) -> RungStats:
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        t_start = loop.time()
        before = [await sc.scrape() for sc in scrapers]
        samplers = [GaugeSampler(sc) for sc in scrapers]
        for sampler in samplers:
            sampler.start()
        try:
            results, lost = await self._rung_requests(clients, prompts, index, users)
        finally:
            gauges = [await sampler.stop() for sampler in samplers]
        deltas = [delta(b, await sc.scrape()) for b, sc in zip(before, scrapers)]
        d = _summed(deltas)
        self._results[users] = results
        urls = endpoints(cfg.url)
        duration_s = loop.time() - t_start

        def judged(hit_shown: bool) -> RungStats:
            return rung_stats(users, duration_s, results, ttft_ratio=cfg.ttft_ratio,
                              preemptions=d.preemptions if d else None, metrics_hit_ratio=d.hit_ratio if d else None,
                              distrust_cached=self.distrust is not None, hit_shown=hit_shown,
                              endpoints=urls if len(urls) > 1 else None,
                              endpoint_metrics=[x.to_dict() if x else None for x in deltas])

        stats = judged(self._hit_shown)
        if stats.refuted and self._hit_shown:  # refuted on hits seen only in an earlier rung: does one still show?
            alone = judged(False)
            if alone.refuted is None and not await self._ttft_still_shows(clients[0], prompts, users):
                self._hit_shown = False  # the earlier rungs' hits are no evidence now
                stats = alone
        stats.gauges = gauges if any(g is not None for g in gauges) else None
        failure = lost or self._failure(stats, results)
        if failure:
            stats.status, stats.stop = "failed", failure
        elif cfg.max_ttft_p95_s is not None and stats.ttft_hit.get("p95_s") is not None \
                and stats.ttft_hit["p95_s"] > cfg.max_ttft_p95_s:
            stats.stop = f"warm-hit TTFT p95 {stats.ttft_hit['p95_s']:.2f} s > {cfg.max_ttft_p95_s:g} s"
        return stats

    async def _rung_requests(self, clients: list[StreamClient], prompts: PromptFactory, index: int,
                             users: int) -> tuple[list[RequestResult], str | None]:
        """The rung's requests, in this process or on the workers, each recorded as it completes; and why the rung
        is not a measurement when a worker died."""
        cfg = self.cfg
        rung_nonce = random.Random(f"{prompts.nonce}/{index}/{self.attempts[users]}").getrandbits(32)
        attempt = self.attempts[users] + 1
        lost: str | None = None
        if self.workers is not None:
            results, lost = await self._rung_on_workers(index, users, attempt, rung_nonce, prompts.tokens_per_word)
        else:
            def on_result(r: RequestResult, results: list[RequestResult], left_s: float) -> None:
                self.record.append("request", rung=index, users=users, attempt=attempt, result=r.to_dict())
                errs = sum(1 for x in results if not x.ok)
                self.progress(f"{users} users: {len(results)} requests, {errs} errors, {max(0.0, left_s):.0f} s left")

            results = await run_users(clients, cfg, index=index, users=users, share=range(users), rung_nonce=rung_nonce,
                                      tokens_per_word=prompts.tokens_per_word, on_result=on_result)
        return results, lost

    async def _rung_on_workers(self, index: int, users: int, attempt: int, rung_nonce: int,
                               tokens_per_word: float) -> tuple[list[RequestResult], str | None]:
        """The rung's users spread over the workers (sticky: user u on worker u mod N); their requests merged into
        this record on the coordinator's clocks, each request naming its worker; and why the rung is not a
        measurement when a worker died (its share's requests died with it)."""
        assert self.workers is not None
        self.progress(f"{users} users on {self.workers.n} workers")
        try:
            outcome = await self.workers.run_rung(self.cfg, index=index, users=users, rung_nonce=rung_nonce,
                                                  tokens_per_word=tokens_per_word)
        except asyncio.CancelledError:  # interrupted: the requests the workers completed stay in the record
            for worker, r in self.workers.interrupted:
                self.record.append("request", rung=index, users=users, attempt=attempt, worker=worker, result=r.to_dict())
            raise
        for worker, r in outcome.results:
            self.record.append("request", rung=index, users=users, attempt=attempt, worker=worker, result=r.to_dict())
        self.record.append("workers", rung=index, users=users, attempt=attempt, workers=outcome.workers)
        return [r for _, r in outcome.results], outcome.lost

    def _failure(self, stats: RungStats, results: list[RequestResult]) -> str | None:
        """Why a rung is not a measurement: no request completed, or more of them failed than the run allows."""
        cfg = self.cfg
        if not stats.requests:
            return "no request completed within the rung"
        if stats.errors / stats.requests <= cfg.max_error_rate:
            return None
        top = ", ".join(f"{k} x{v}" for k, v in stats.error_types.items())
        first = next(r for r in results if not r.ok)
        return (f"error rate {stats.errors / stats.requests:.0%} > {cfg.max_error_rate:.0%}: {stats.errors} of "
                f"{stats.requests} requests failed ({top}; first: {first.error_line()})")


async def run_users(clients: list[StreamClient], cfg: SessionsConfig, *, index: int, users: int, share, rung_nonce: int,
                    tokens_per_word: float,
                    on_result: Callable[[RequestResult, list[RequestResult], float], None] | None = None) -> list[RequestResult]:
    """Run the simulated users ``share`` (user numbers of a rung of ``users``) for one rung on ``clients`` (one per
    endpoint, each request to the one ``cfg.routing`` picks, its index in the tags as ``endpoint``): each
    user's requests are drawn from its own seeded generator (seed, rung, user), so which process runs a user does
    not change what it sends. ``on_result(result, results so far, seconds left)`` is called as each completes.
    The one loop every rung runs, in this process or in a worker (servesize.measure.distributed)."""
    p = cfg.params
    loop = asyncio.get_running_loop()
    t_end = loop.time() + cfg.duration_s
    results: list[RequestResult] = []
    fatal: list[RequestResult] = []
    tpw = tokens_per_word

    async def user_loop(u: int) -> None:
        gen = SessionGenerator(p, rung=index, user=u, nonce=rung_nonce, tokens_per_word=tpw)
        stagger = gen.rng.uniform(0, min(p.think_time_s, cfg.duration_s / 4)) if p.think_time_s else 0.0
        await asyncio.sleep(stagger)
        last_tokens: dict[str, int] = {}
        sent = 0
        while loop.time() < t_end and sent != cfg.requests_per_user and not fatal:
            turn = gen.next()
            prefix_tokens = round(turn.prefix_words * tpw)
            reusable = last_tokens.get(turn.session, round(turn.reusable_words * tpw)) if turn.reusable_words else 0
            tags = {"rung": index, "users": users, "user": u, "session": turn.session, "turn": turn.turn,
                    "kind": turn.kind, "salted": turn.salted, "returning": bool(turn.reusable_words),
                    "prefix_tokens": prefix_tokens, "reusable_tokens": reusable}
            tags["endpoint"] = e = endpoint_of(cfg.routing, u, sent, len(clients))
            r = await clients[e].complete(turn.text, max_tokens=p.output_tokens,
                                          request_id=f"{turn.session}-t{turn.turn}-{rung_nonce:08x}", tags=tags)
            if r.ok and r.prompt_tokens:
                last_tokens[turn.session] = r.prompt_tokens
            sent += 1
            results.append(r)
            if r.error is not None and r.error["type"] in FATAL_ERRORS:
                fatal.append(r)
            if on_result is not None:
                on_result(r, results, t_end - loop.time())
            remaining = t_end - loop.time()
            if remaining <= 0 or sent == cfg.requests_per_user or fatal:
                break
            pause = gen.think_time()
            if not r.ok:
                pause = max(pause, cfg.error_backoff_s)  # an error is no reason to come straight back
            await asyncio.sleep(min(pause, remaining))

    await asyncio.gather(*(user_loop(u) for u in share))
    return results


def _spread_note(cfg: SessionsConfig, results: dict[int, list[RequestResult]]) -> str | None:
    """With several endpoints: how many users sent requests to more than one of them, and what that costs."""
    if len(endpoints(cfg.url)) < 2:
        return None
    seen: dict[tuple[int, Any], set] = {}
    for users, rs in results.items():
        for r in rs:
            seen.setdefault((users, r.tags.get("user")), set()).add(r.tags.get("endpoint"))
    spread = sum(1 for e in seen.values() if len(e) > 1)
    if not spread:
        return (f"routing {cfg.routing}: every user's requests went to one endpoint, as a session-affine router sends them; "
                f"each endpoint's warm-hit rate is in the rung's endpoint lines")
    return (f"routing {cfg.routing}: {spread} of {len(seen)} users sent requests to more than one endpoint, so a turn often "
            f"finds its previous prompt cached on another replica: the warm-hit rate is lower than a sticky router's, the "
            f"failure the warm-capacity seed warns about for DP")


def _summed(deltas: list) -> MetricsDelta | None:
    """The endpoints' /metrics increases added up (a series missing on any endpoint is missing from the sum)."""
    if not deltas or any(x is None for x in deltas):
        return None

    def total(name: str) -> float | None:
        values = [getattr(x, name) for x in deltas]
        return None if any(v is None for v in values) else sum(values)
    return MetricsDelta(total("queries"), total("hits"), total("preemptions"))


def _users_of(event: dict) -> int:
    users = event.get("users")
    if isinstance(users, bool) or not isinstance(users, int):
        raise BadInput(f"a {event.get('type')!r} event of the run record has no user count: the record is damaged")
    return users


def _stats_of(event: dict) -> RungStats:
    """A recorded rung's statistics, checked: BadInput (one line) when the event is damaged."""
    stats = event.get("stats")
    if not isinstance(stats, dict):
        raise BadInput("a 'rung' event of the run record has no statistics: the record is damaged")
    g = RungStats.from_dict(typed(RungStats, stats, "a 'rung' event of the run record"))
    if g.users != _users_of(event):
        raise BadInput("a 'rung' event of the run record names two user counts: the record is damaged")
    return g


async def measure_sessions(config: SessionsConfig, *, record: RunRecord | None = None, resume: RecordContents | None = None,
                           progress: Callable[[str], None] | None = None, workers: Any = None) -> SessionsResult:
    """The ladder; ``workers`` (a servesize.measure.distributed.RayWorkers) spreads each rung's users over
    worker processes, and is closed when the ladder ends, however it ends."""
    try:
        return await SessionsRun(config, record=record, resume=resume, progress=progress, workers=workers).run()
    finally:
        if workers is not None:
            await workers.close()
