"""``measure pool``: how many tokens of prefix cache a live server really keeps warm.

The method (after the working-set seed, improved):

1. A probe sends n prompts of S tokens in parallel, for R rounds. Every prompt starts with a fresh
   unique id, so round 1 is all cold and only fills the cache; rounds 2..R test warmth.
2. The cache is LRU. Cycling n prompts in order through it is LRU's worst case: while n x S fits,
   every later round is warm; one prompt more and each prompt is evicted just before its turn comes
   back, so warmth collapses. The boundary is a cliff, which is what makes bisection sound.
3. So n is searched, not swept: galloping from the predicted capacity (``--predicted-tokens`` or a
   prediction object), then bisecting between the largest warm n and the smallest cold n.
4. When the block size is known (vLLM's ``cache_config_info``, or ``--block-size``) a fine stage
   adds one more prompt of j blocks to the n_warm prompts and bisects j: the pool is then known to
   the block. Prompts are S = m x block + 1 tokens: m full blocks are cached, the last token is always
   recomputed (vLLM never serves a request's last prompt token from cache).
5. Between probes nothing is flushed: each probe's prompts have fresh ids and the previous probe's
   blocks are older than anything of the new probe's round 1, so LRU evicts them first.

Warm or cold, per request, from the most trusted signal available (it is named in the result):

- ``cached_tokens``: ``usage.prompt_tokens_details.cached_tokens`` (vLLM: ``--enable-prompt-tokens-details``);
  warm = every cacheable token of the prompt was served from cache.
- ``metrics``: the increase of ``vllm:prefix_cache_hits_total`` over a round, against the round's
  cacheable tokens (a round count; requests are ranked by TTFT to say which).
- ``ttft``: the seed's rule, warm = TTFT < 0.4 x the same prompt's cold (round 1) TTFT. It cannot
  see a partial eviction (vLLM frees a request's tail blocks first), so it decides the coarse stage
  only.

The server's counts are checked against the prompt and against the harness's own clock before they
decide anything (a lying or broken server must not report a pool it does not have). A count is
**refuted** when it is impossible (more tokens cached than the prompt has; more prefix-cache hits than
queries in a round) or when the requests it calls warm were no faster than cold: more than
``REFUTE_SHARE`` of them had a TTFT of at least ``REFUTE_TTFT_RATIO`` x their own prompt's cold TTFT, and no
later round gave them all their first tokens in less than ``REFUTE_TTFT_RATIO`` of the time the cold round took
(a parallel round's cold TTFTs are spread by the order of the prefill chunks, a warm round's requests are served
together), where a real hit skips the prefill of the whole cached prefix (a claim is checked only where that prefill is
visible: a cold TTFT of ``REFUTE_RESOLVABLE_S`` or more, on a server whose TTFT shows a hit at all: the
check before the search, ``CHECK_PROMPTS``, run again before the TTFTs refute a counter: load that arrives
later slows warm requests as much as cold ones). A refuted signal is not trusted for the
rest of the run (a ``distrust`` event in the record, one line in the report); the next signal decides,
and the probes it had decided are decided again (the search restarts from them, sending nothing again).
The check sees a cold request claimed warm; it cannot see a count that lies by a few blocks (a partial
hit is faster than cold too), which is why the block-level stage needs a signal that passed it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from servesize.errors import BadInput, ServesizeError
from servesize.limits import DEFAULT_SEED
from servesize.measure.client import RequestResult, StreamClient, collect_between
from servesize.measure.metrics import MetricsDelta, MetricsScraper, MetricsSnapshot, delta
from servesize.measure.prompts import PromptFactory
from servesize.measure.record import RecordContents, RunRecord, typed
from servesize.scenario import MAX_TOKENS

SIGNALS = ("cached_tokens", "metrics", "ttft")
COUNTERS = ("cached_tokens", "metrics")  # the server's own counts, checked against the client's TTFTs
# A request a counter calls warm, whose TTFT is at least this share of its own prompt's cold TTFT, showed
# no speed-up: a real hit skips the prefill of every cached token (the default 4,097-token prompt's
# prefill is most of its cold TTFT); and a counter whose warm claims in a probe are contradicted more often
# than REFUTE_SHARE is refuted (a few slow warm requests are scheduling noise, not a lie).
REFUTE_TTFT_RATIO = 0.8
REFUTE_SHARE = 0.5
# A warm claim is checked only where the client's clock can see a prefill: its cold TTFT at least this long.
# Below it a loaded client's own scheduling (every stream is read on one event loop) hides a hit: the honest
# counters of the test server, whose 513-token cold prefill takes 28 ms, were refuted on this 2-core machine at
# load 5. The price: a server whose probe prompt prefills in under 100 ms has its counts checked only for the
# impossible (more cached than the prompt, more hits than queries); a longer --prompt-tokens makes them checkable.
REFUTE_RESOLVABLE_S = 0.1
# Whether a hit shows in this server's TTFT at all, measured before the search: CHECK_PROMPTS fresh prompts of
# the probe's size sent together, then again at once (surely cached: they are the only prompts in flight). When
# the repeats' median TTFT is not below ttft_ratio x their cold TTFT, the TTFT rule would call a certain hit
# cold, so on this server, under this load, TTFT neither decides a probe nor refutes a counter (only the
# impossible is checked). Found on the real CPU vLLM with both cores busy: a tiny model's 993-token prefill was a
# small share of its TTFT, the honest cached_tokens was refuted (warm median 97% of cold) and TTFT then
# reported [0, 992) for a 32,768-token pool.
CHECK_PROMPTS = 3


def resolvable(cold_s: float) -> bool:
    """Whether a cold TTFT is long enough that a hit would show in the TTFT whatever the client's load."""
    return cold_s >= REFUTE_RESOLVABLE_S


@dataclass
class PoolConfig:
    url: str
    model: str | None = None
    prompt_tokens: int = 4097
    rounds: int = 3
    predicted_tokens: int | None = None
    max_parallel: int = 256
    timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    block_size: int | None = None
    warm_share: float = 1.0  # a probe is warm when this share of later-round requests is warm
    ttft_ratio: float = 0.4  # the seed's rule: warm when TTFT < ratio x cold TTFT
    signals: tuple[str, ...] = SIGNALS
    fine: bool = True
    # The block-level stage sends each round's requests one after another, in the same order every
    # round: LRU's cyclic worst case with exactly one request in flight, so the resident figure plus
    # that request's partial block plus the engine's null block is the engine's whole pool.
    fine_order: str = "sequential"
    seed: int = DEFAULT_SEED
    use_tokenize: bool = True
    predicted_source: str | None = None  # what the prediction is, in words (e.g. the --predict arguments)

    def __post_init__(self) -> None:
        if not 2 <= self.rounds <= MAX_ROUNDS:
            raise BadInput(f"--rounds must be in [2, {MAX_ROUNDS}] (round 1 fills the cache, later rounds test warmth)")
        if not 2 <= self.prompt_tokens <= MAX_TOKENS:
            raise BadInput(f"--prompt-tokens must be in [2, {MAX_TOKENS:,}]")
        if not 1 <= self.max_parallel <= MAX_PARALLEL:
            raise BadInput(f"--max-parallel must be in [1, {MAX_PARALLEL:,}]")
        if self.block_size is not None and not 1 <= self.block_size <= MAX_BLOCK_SIZE:
            raise BadInput(f"--block-size must be in [1, {MAX_BLOCK_SIZE:,}] tokens")
        if self.predicted_tokens is not None and not 0 <= self.predicted_tokens <= MAX_POOL_TOKENS:
            raise BadInput(f"the predicted pool must be in [0, {MAX_POOL_TOKENS:,}] tokens, not {self.predicted_tokens:,}")
        unknown = [s for s in self.signals if s not in SIGNALS]
        if unknown or not self.signals:
            raise BadInput(f"signals must be drawn from {', '.join(SIGNALS)}, not {', '.join(unknown) or 'none'}")
        if not 0 < self.warm_share <= 1:
            raise BadInput("--warm-share must be in (0, 1]")
        if not (self.timeout_s > 0 and self.stall_timeout_s > 0):
            raise BadInput("--timeout and --stall-timeout must be positive seconds")
        if self.fine_order not in ("sequential", "parallel"):
            raise BadInput("--fine-order must be sequential or parallel")

    def to_params(self) -> dict:
        d = asdict(self)
        d["signals"] = list(self.signals)
        return d

    @classmethod
    def from_params(cls, params: dict) -> PoolConfig:
        """From a run record's header, every field checked (BadInput, one line, for a damaged one)."""
        p = typed(cls, params, "the run record's header")
        p["signals"] = tuple(p.get("signals", SIGNALS))
        return cls(**p)


MAX_ROUNDS = 100
MAX_PARALLEL = 100_000  # prompts in one probe: each is a connection and a prompt held in memory
MAX_BLOCK_SIZE = 1 << 16
MAX_POOL_TOKENS = 10**13  # as servesize plan --pool-tokens


# -- pure pieces ------------------------------------------------------------------------------

def cacheable_tokens(prompt_tokens: int, block_size: int | None) -> int:
    """Tokens of a prompt the engine can serve from cache: whole blocks, never the last token."""
    if block_size is None:
        return prompt_tokens - 1
    return (prompt_tokens - 1) // block_size * block_size


def aligned_prompt_tokens(requested: int, block_size: int) -> int:
    """m x block + 1, m = (requested - 1) // block (at least 1): every cached block is a full block."""
    return max(1, (requested - 1) // block_size) * block_size + 1


def predicted_tokens_of(predicted: Any) -> int | None:
    """A number, an object with ``usable_kv_tokens`` / ``kv_cache_tokens``, or a callable giving either."""
    if predicted is None:
        return None
    if callable(predicted) and not isinstance(predicted, (int, float)):
        predicted = predicted()
    if isinstance(predicted, (int, float)) and not isinstance(predicted, bool):
        return int(predicted)
    for name in ("usable_kv_tokens", "kv_cache_tokens", "usable_tokens", "tokens"):
        value = getattr(predicted, name, None)
        if value is not None:
            return int(value)
    raise BadInput(f"cannot read a token count from the prediction {type(predicted).__name__}")


class Bisection:
    """The largest n for which a monotone predicate holds: ``lo`` known warm, ``hi`` known cold.

    It gallops from ``start`` (a prediction): up by 1, 2, 4, ... while warm, down by 1, 2, 4, ...
    while cold, then bisects. ``limit`` caps n (the largest probe allowed).
    """

    def __init__(self, lo: int = 0, hi: int | None = None, start: int | None = None, limit: int | None = None):
        self.lo, self.hi, self.limit = lo, hi, limit
        self.start = start
        self.history: list[tuple[int, bool]] = []
        self._up = 1
        self._down = 1
        self._direction: str | None = None  # 'up' | 'down' | 'bisect'

    @property
    def capped(self) -> bool:
        """The search stopped at ``limit`` with every probe warm: the answer is a lower bound."""
        return self.hi is None and self.limit is not None and self.lo >= self.limit

    def next(self) -> int | None:
        lo, hi = self.lo, self.hi
        if hi is not None and hi - lo <= 1:
            return None
        if not self.history:
            n = self.start if self.start is not None else (lo + 1 if hi is None else (lo + hi) // 2)
            n = max(lo + 1, n)
            if hi is not None:
                n = min(hi - 1, n)
            return min(n, self.limit) if self.limit is not None else n
        if hi is None:
            if self.limit is not None and lo >= self.limit:
                return None
            n = lo + self._up
            return min(n, self.limit) if self.limit is not None else n
        if self._direction == "down":
            n = hi - self._down
            if n > lo:
                return n
        return (lo + hi) // 2

    def observe(self, n: int, warm: bool) -> None:
        first = not self.history
        self.history.append((n, warm))
        if warm:
            if n > self.lo:
                self.lo = n
            if self._direction == "up":
                self._up *= 2
            elif first:
                self._direction = "up"
            else:
                self._direction = "bisect"
        else:
            if self.hi is None or n < self.hi:
                self.hi = n
            if self._direction == "down":
                self._down *= 2
            elif first and n > self.lo + 1:
                self._direction = "down"
            else:
                self._direction = "bisect"


@dataclass
class Verdict:
    """Warm or cold for one probe, and which signal said so."""

    signal: str
    warm: bool
    warm_fraction: float  # share of later-round requests (or tokens, for metrics) found warm
    by_signal: dict[str, float] = field(default_factory=dict)  # every available signal's warm fraction
    flags: list[list[bool]] = field(default_factory=list)  # rounds 2..R, per request
    notes: list[str] = field(default_factory=list)
    refuted: dict[str, str] = field(default_factory=dict)  # a server count this probe caught out, and why

    def to_dict(self) -> dict:
        return asdict(self)


def classify(sizes: list[int], rounds: list[list[RequestResult]], deltas: list[MetricsDelta | None], *,
             block_size: int | None, signals: tuple[str, ...] = SIGNALS, ttft_ratio: float = 0.4,
             warm_share: float = 1.0, server_reports_cached: bool = False,
             distrusted: tuple[str, ...] | frozenset[str] = (), ttft_sees_hits: bool = True) -> Verdict:
    """Decide one probe from its rounds (round 1 is the cold fill). Pure: no I/O.

    ``server_reports_cached``: this server has reported cached_tokens at least once in the run. vLLM
    omits prompt_tokens_details when nothing was cached (in some releases), so from then on a missing
    field reads as 0 instead of disqualifying the strongest signal exactly when it says 'cold'.
    ``distrusted``: signals refuted earlier in the run, never used again; a counter this probe refutes
    (impossible, or contradicted by the TTFTs: the module docstring) is named in ``refuted`` and skipped.
    ``ttft_sees_hits``: False when the run's TTFT check found that a certain hit does not show in this server's
    TTFT (CHECK_PROMPTS): TTFT then neither decides nor refutes."""
    later = rounds[1:]
    per, fraction, impossible, cold = _signal_flags(sizes, rounds, deltas, block_size, ttft_ratio, server_reports_cached)
    if not ttft_sees_hits:
        per.pop("ttft", None)
        fraction.pop("ttft", None)
        cold = None
    refuted: dict[str, str] = {}
    for s in COUNTERS:
        if s in per and (why := impossible.get(s) or _contradicted(per[s], later, cold)):
            refuted[s] = why
    notes = []
    first_hits = [r.cached_tokens for r in rounds[0] if r.cached_tokens]
    if first_hits and "cached_tokens" not in refuted and "cached_tokens" not in distrusted:
        notes.append(f"{len(first_hits)} round-1 request(s) were served partly from cache (ids not unique, or a shared prefix)")
    for s in signals:
        if s in per and s not in distrusted and s not in refuted:
            # metrics decide by the requests they make warm (the ones the TTFT check saw), not by a share of tokens:
            # a round's hits that make no request warm are no warm request (found by the lying-server fuzz)
            share = _mean([f for rnd in per[s] for f in rnd]) if s == "metrics" else fraction[s]
            return Verdict(signal=s, warm=share >= warm_share - 1e-9, warm_fraction=share, by_signal=fraction,
                           flags=per[s], notes=notes, refuted=refuted)
    raise _no_signal({**{s: "refuted earlier in the run" for s in distrusted}, **refuted}, ttft_sees_hits)


def _signal_flags(sizes: list[int], rounds: list[list[RequestResult]], deltas: list[MetricsDelta | None],
                  block_size: int | None, ttft_ratio: float, server_reports_cached: bool
                  ) -> tuple[dict[str, list[list[bool]]], dict[str, float], dict[str, str], list[float] | None]:
    """Every available signal's warm flags (rounds 2..R) and warm fraction, why a counter is impossible, and the
    cold TTFTs: cached_tokens when the server reports them, metrics when every later round has a delta, TTFT when
    every request has one."""
    later = rounds[1:]
    per: dict[str, list[list[bool]]] = {}
    fraction: dict[str, float] = {}
    impossible: dict[str, str] = {}
    if later and (server_reports_cached or all(r.cached_tokens_reported for rnd in later for r in rnd)):
        per["cached_tokens"], fraction["cached_tokens"] = _cached_flags(sizes, later, block_size)
        if reason := _impossible_cached(sizes, rounds):
            impossible["cached_tokens"] = reason
    if (metrics := _metrics_flags(sizes, later, deltas[1:], block_size)) is not None:
        per["metrics"], fraction["metrics"] = metrics
        if reason := _impossible_hits(deltas):
            impossible["metrics"] = reason
    cold = _cold_ttfts(rounds)
    if cold is not None:
        per["ttft"] = [[(r.ttft_s or 0.0) < ttft_ratio * cold[i] for i, r in enumerate(rnd)] for rnd in later]
        fraction["ttft"] = _mean([f for rnd in per["ttft"] for f in rnd])
    return per, fraction, impossible, cold


def _no_signal(caught: dict[str, str], ttft_sees_hits: bool = True) -> ServesizeError:
    """Why a probe cannot be decided: every signal it had was caught out (named), or it had none."""
    ttft = ("TTFT cannot tell a hit on this server under this load (a prompt repeated at once was not faster than "
            "the TTFT rule's share of its cold TTFT; a longer --prompt-tokens makes the prefill visible)"
            if not ttft_sees_hits else "TTFT needs every request's first token")
    if caught:
        return ServesizeError("no trustworthy warmth signal: the server's " + "; ".join(f"{s} {why}" for s, why in caught.items())
                              + f"; and no other signal is available ({ttft}): nothing is "
                                "reported rather than a pool the server's counts alone claim")
    if not ttft_sees_hits:
        return ServesizeError(f"no warmth signal available: the server reports no cached_tokens, has no usable /metrics "
                              f"and {ttft}; nothing can be measured")
    return ServesizeError("no warmth signal available: the server reports no cached_tokens, has no usable /metrics "
                          "and TTFT could not be read; nothing can be measured")


def _cached_flags(sizes: list[int], later: list[list[RequestResult]], block_size: int | None) -> tuple[list[list[bool]], float]:
    """Warm per request from cached_tokens: every cacheable token (>= 90% without a block size) served from cache."""
    need = [cacheable_tokens(s, block_size) if block_size else math.ceil(0.9 * (s - 1)) for s in sizes]
    flags = [[r.cached_tokens_or_zero >= need[i] for i, r in enumerate(rnd)] for rnd in later]
    return flags, _mean([f for rnd in flags for f in rnd])


def _metrics_flags(sizes: list[int], later: list[list[RequestResult]], later_deltas: list[MetricsDelta | None],
                   block_size: int | None) -> tuple[list[list[bool]], float] | None:
    """Warm per request from each round's prefix-cache hits (the fastest k requests of a round with k x S hit
    tokens); None unless every later round has a usable delta."""
    hits = [d.hits for d in later_deltas if d is not None and d.hits is not None and d.queries]
    if not later_deltas or len(hits) != len(later_deltas):
        return None
    cacheable = sum(cacheable_tokens(s, block_size) for s in sizes)
    ratios = [min(1.0, h / cacheable) if cacheable else 1.0 for h in hits]
    flags = []
    for rnd, ratio in zip(later, ratios):
        k = len(rnd) if ratio >= 1.0 else math.floor(ratio * len(rnd))
        ttft = [math.inf if r.ttft_s is None else r.ttft_s for r in rnd]
        order = sorted(range(len(rnd)), key=ttft.__getitem__)
        warm_set = set(order[:k])
        flags.append([i in warm_set for i in range(len(rnd))])
    return flags, _mean(ratios)


def _cold_ttfts(rounds: list[list[RequestResult]]) -> list[float] | None:
    """Each prompt's cold (round 1) TTFT, when every request of every round has a TTFT (and the cold ones are
    positive); else None: the TTFT rule and the cross-check need all of them."""
    cold = [r.ttft_s for r in rounds[0] if r.ttft_s is not None and r.ttft_s > 0]
    if len(cold) != len(rounds[0]) or any(r.ttft_s is None for rnd in rounds[1:] for r in rnd):
        return None
    return cold


def _impossible_cached(sizes: list[int], rounds: list[list[RequestResult]]) -> str | None:
    """Why a cached_tokens count of this probe cannot be true: more than its prompt (as the server counted it,
    or, not counted, as the harness built it)."""
    for rnd in rounds:
        for i, r in enumerate(rnd):
            if r.usage_impossible:
                return f"reported {r.usage_impossible}: impossible"
            if r.prompt_tokens is None and r.cached_tokens is not None and r.cached_tokens > sizes[i]:
                return f"reported {r.cached_tokens:,} cached tokens for a prompt of {sizes[i]:,}: impossible"
    return None


def _impossible_hits(deltas: list[MetricsDelta | None]) -> str | None:
    for d in deltas:
        if d is not None and d.hits is not None and d.queries is not None and d.hits > d.queries:
            return f"prefix-cache hits rose by {d.hits:,.0f} in a round whose queries rose by {d.queries:,.0f}: impossible"
    return None


def _contradicted(flags: list[list[bool]], later: list[list[RequestResult]], cold: list[float] | None) -> str | None:
    """Why the TTFTs refute a counter's warm claims: most of the requests it called warm were no faster than cold."""
    if cold is None:
        return None
    ratios = [r.ttft_s / cold[i] for fl, rnd in zip(flags, later) for i, (f, r) in enumerate(zip(fl, rnd))
              if f and r.ttft_s is not None and resolvable(cold[i])]
    slow = sum(1 for x in ratios if x >= REFUTE_TTFT_RATIO)
    if not ratios or slow <= REFUTE_SHARE * len(ratios):
        return None
    spans = [x for fl, rnd in zip(flags, later) if (x := _span_ratio(fl, rnd, cold)) is not None]
    if spans and min(spans) < REFUTE_TTFT_RATIO:
        return None
    return (f"called {len(ratios)} later-round request(s) warm, but {slow} of them were no faster than cold (TTFT >= "
            f"{REFUTE_TTFT_RATIO:.0%} of the same prompt's cold TTFT; median {_median(ratios):.0%}), and no round gave "
            f"them their first tokens sooner than the cold round did (the quickest took {min(spans or [1.0]):.0%} of its time)")


def _span_ratio(flags: list[bool], rnd: list[RequestResult], cold: list[float]) -> float | None:
    """How long one later round took to give the requests a counter called warm their first tokens (the last one's
    TTFT: a round's requests are sent at once), over how long the cold round took for the same prompts; None
    without a claim the client's clock can check (``resolvable``). A parallel round's cold TTFTs are spread by where
    each prompt's prefill fell among the chunks, a warm round's are not: its requests are served in one step, which
    on a slow server ends after the first cold chunks did, so a request paired with its own cold TTFT looks no faster
    when the round as a whole was (vLLM 0.32's CPU build with both cores busy, 32 honest hits: 0.29-0.31 s each,
    cold 0.13-0.55 s)."""
    claimed = [i for i, (f, r) in enumerate(zip(flags, rnd)) if f and r.ttft_s is not None and resolvable(cold[i])]
    if not claimed:
        return None
    return max(rnd[i].ttft_s or 0.0 for i in claimed) / max(cold[i] for i in claimed)


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


# -- the probe and the run ------------------------------------------------------------------------

@dataclass
class Probe:
    seq: int
    stage: str  # 'coarse' | 'fine'
    n: int  # prompts of S tokens
    extra_blocks: int  # fine stage: one more prompt of extra_blocks x block + 1 tokens (0: none)
    sizes: list[int]
    rounds: list[list[RequestResult]] = field(default_factory=list)
    deltas: list[MetricsDelta | None] = field(default_factory=list)
    verdict: Verdict | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        """What the probe measured: a resumed or restarted search takes a completed probe of the same key."""
        return self.stage, self.n, self.extra_blocks

    @property
    def decided(self) -> Verdict:
        """The verdict of a probe that ran all its rounds, as every probe in a run's (and a result's) list did."""
        if self.verdict is None:
            raise RuntimeError(f"probe {self.seq} ({self.stage}, n={self.n}) has no verdict: its rounds did not all run")
        return self.verdict

    def summary(self) -> dict:
        v = self.verdict
        return {"seq": self.seq, "stage": self.stage, "n": self.n, "extra_blocks": self.extra_blocks,
                "prompts": len(self.sizes), "tokens": sum(self.sizes), "warm": v.warm if v else None,
                "warm_fraction": v.warm_fraction if v else None, "signal": v.signal if v else None,
                "by_signal": v.by_signal if v else {},
                "ttft_cold_p50_s": _median([r.ttft_s for r in self.rounds[0]]) if self.rounds else None,
                "ttft_later_p50_s": _median([r.ttft_s for rnd in self.rounds[1:] for r in rnd]) if len(self.rounds) > 1 else None}


def _median(values) -> float | None:
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


class ProbeFailed(ServesizeError):
    pass


class _Restart(Exception):
    """A signal was refuted and an earlier probe it had decided now reads otherwise: search again from the
    completed probes (they are taken, not sent again)."""


@dataclass
class _Live:
    """What a run holds while its client is open: made by ``_setup``, passed to every probe."""

    client: StreamClient
    scraper: MetricsScraper
    prompts: PromptFactory
    model: str  # the model the server serves, as resolved


async def check_rounds(client: Any, prompts: list, progress: Callable[[str], None], *,
                       tags: Callable[[int, int], dict], on_result: Callable[[int, int, RequestResult], None]
                       ) -> list[list[RequestResult]]:
    """The TTFT check's requests (pool and sessions alike): ``prompts`` sent together, then together again (surely
    cached by then), one output token each; every result handed to ``on_result(round, index, result)`` as it
    completes, for the caller's record. It stops after a round in which a request failed."""
    rounds: list[list[RequestResult]] = []
    for rnd in (1, 2):
        progress(f"checking that a cached prompt is faster than cold: round {rnd}/2")

        async def one(i: int, prompt: Any, rnd: int = rnd) -> RequestResult:
            r = await client.complete(prompt.text, max_tokens=1, request_id=f"{prompt.id}-check{rnd}", tags=tags(rnd, i))
            on_result(rnd, i, r)
            return r

        rounds.append(list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))))
        if any(not r.ok for r in rounds[-1]):
            break
    return rounds


def repeat_verdict(cold: list[RequestResult], repeat: list[RequestResult], ttft_ratio: float) -> dict[str, Any]:
    """The TTFT check's verdict (pool and sessions alike): prompts sent cold, then sent again at once (surely
    cached). A hit shows in this server's TTFT now when the repeats' median TTFT over their own cold TTFT is under
    the TTFT rule's ratio; ``sees_hits`` None (with ``why``) when a request had no TTFT."""
    untimed = [r for r in (*cold, *repeat) if r.ttft_s is None or r.ttft_s <= 0]
    if untimed:
        return {"sees_hits": None, "why": f"{len(untimed)} of {len(cold) + len(repeat)} check request(s) had no TTFT"}
    ratio = _median(w.ttft_s / c.ttft_s for c, w in zip(cold, repeat))  # type: ignore[operator]
    assert ratio is not None  # every check request has a TTFT here
    return {"sees_hits": ratio < ttft_ratio, "repeat_over_cold": ratio,
            "cold_s": [r.ttft_s for r in cold], "repeat_s": [r.ttft_s for r in repeat]}


class PoolRun:
    """One ``measure pool`` run: set-up, coarse bisection, fine bisection, result."""

    def __init__(self, config: PoolConfig, *, record: RunRecord | None = None, resume: RecordContents | None = None,
                 predicted: Any = None, progress: Callable[[str], None] | None = None):
        self.cfg = config
        self.record = record or RunRecord(None)
        self.resume = resume
        self.predicted = predicted
        self.progress = progress or (lambda msg: None)
        self.notes: list[str] = []
        self.probes: list[Probe] = []
        self.seq = 0
        self.prompt_counter = 0
        self.server_reports_cached = False  # latched once any response carries cached_tokens
        self.block_size: int | None = None
        self.block_size_source: str | None = None
        self.prompt_tokens = config.prompt_tokens
        self.engine: MetricsSnapshot | None = None
        self._replay: dict[tuple[str, int, int], Probe] = {}
        self.distrusted: dict[str, str] = {}  # signals refuted in this run (and its record), and why
        self.ttft_check: dict | None = None  # whether a certain hit shows in this server's TTFT (CHECK_PROMPTS)

    # -- set-up --
    async def _setup(self, client: StreamClient) -> _Live:
        cfg = self.cfg
        model = await client.resolve_model()
        scraper = MetricsScraper(client, enabled=True)
        self.engine = await scraper.scrape()
        for note in (scraper.note, scraper.refused):
            if note:
                self.notes.append(note)
        if cfg.block_size:
            self.block_size, self.block_size_source = cfg.block_size, "--block-size"
        elif self.engine is not None and self.engine.block_size:
            self.block_size, self.block_size_source = self.engine.block_size, "vllm:cache_config_info"
        else:
            self.notes.append("block size unknown (no cache_config_info in /metrics): each prompt counts as S - 1 resident "
                              "tokens (exact when S - 1 is whole blocks, as the default 4097 is for any power-of-two block "
                              "up to 4096), a request counts as warm at >= 90% of them cached, and the pool is known to the "
                              "prompt, not the block; pass --block-size for more")
        if self.block_size:
            aligned = aligned_prompt_tokens(cfg.prompt_tokens, self.block_size)
            if aligned != cfg.prompt_tokens:
                self.notes.append(f"prompt length {cfg.prompt_tokens} -> {aligned} tokens (= {(aligned - 1) // self.block_size} "
                                  f"blocks of {self.block_size} + 1), so every cached block is a full block")
            self.prompt_tokens = aligned
        prompts = PromptFactory(client, seed=cfg.seed, use_tokenize=cfg.use_tokenize)
        await prompts.start()
        if prompts.note:
            self.notes.append(prompts.note)
        self.record.append("info", model=model, block_size=self.block_size, block_size_source=self.block_size_source,
                           prompt_tokens=self.prompt_tokens, nonce=prompts.nonce, prompt_mode=prompts.mode,
                           engine=self.engine.to_dict() if self.engine else None, notes=list(self.notes))
        live = _Live(client=client, scraper=scraper, prompts=prompts, model=model)
        await self._check_ttft(live)  # every signal (PoolConfig.signals is a non-empty subset) is ttft or a counter
        return live

    async def _check_ttft(self, live: _Live) -> None:
        """Whether a certain hit shows in this server's TTFT (CHECK_PROMPTS): CHECK_PROMPTS fresh prompts of the
        probe's size, sent together twice; every request recorded (probe 0); a 'ttft_check' event with the figures."""
        prompts = []
        for _ in range(CHECK_PROMPTS):
            self.prompt_counter += 1
            prompts.append(await live.prompts.make(self.prompt_counter, self.prompt_tokens))
        rounds = await check_rounds(
            live.client, prompts, self.progress, tags=lambda rnd, i: {"probe": 0, "round": rnd, "index": i},
            on_result=lambda rnd, i, r: self.record.append("request", probe=0, round=rnd, index=i, result=r.to_dict()))
        for rnd, results in enumerate(rounds, 1):
            failed = [r for r in results if not r.ok]
            if failed:
                raise ProbeFailed(f"the TTFT check, round {rnd}: {len(failed)} of {CHECK_PROMPTS} requests "
                                  f"failed, first: {failed[0].error_line()}{self._resume_hint()}")
        self.ttft_check = repeat_verdict(rounds[0], rounds[1], self.cfg.ttft_ratio)
        if self.ttft_check["sees_hits"] is None:
            self._note("the TTFT check could not run (" + self.ttft_check["why"] + "): TTFT is used as before")
        else:
            ratio = self.ttft_check["repeat_over_cold"]
            if not self.ttft_check["sees_hits"]:
                self._note(f"a hit does not show in this server's TTFT now: {CHECK_PROMPTS} prompts of {self.prompt_tokens:,} "
                           f"tokens repeated at once (surely cached) took a median {ratio:.0%} of their cold TTFT, not "
                           f"under the TTFT rule's {self.cfg.ttft_ratio:.0%}; TTFT neither decides a probe nor refutes "
                           f"the server's counts in this run (only the impossible is checked); a longer --prompt-tokens "
                           f"makes the prefill visible")
        self.record.append("ttft_check", **self.ttft_check)

    def _load_replay(self) -> None:
        """Completed probes of a resumed record, by (stage, key); incomplete probes are run again. Every
        recorded field is checked as it is read: a damaged record is BadInput (one line), never a crash."""
        if self.resume is None:
            return
        requests: dict[int, dict[int, dict[int, RequestResult]]] = {}
        deltas: dict[int, dict[int, MetricsDelta | None]] = {}
        for e in self.resume.events:
            t = e.get("type")
            if t == "request":
                probe, rnd, index = (_count_field(e, k) for k in ("probe", "round", "index"))
                result = RequestResult.from_dict(typed(RequestResult, e.get("result"), "a 'request' event of the run record"))
                requests.setdefault(probe, {}).setdefault(rnd, {})[index] = result
            elif t == "round":
                d = e.get("delta")
                deltas.setdefault(_count_field(e, "probe"), {})[_count_field(e, "round")] = \
                    MetricsDelta(**typed(MetricsDelta, d, "a 'round' event of the run record")) if d is not None else None
            elif t == "probe":
                p = _replayed_probe(e, requests, deltas)
                self._replay[p.key] = p
            elif t == "distrust" and e.get("signal") in COUNTERS:
                self.distrusted[e["signal"]] = str(e.get("reason"))
            if t in ("request", "round", "probe"):
                self.seq = max(self.seq, _count_field(e, "probe" if t != "probe" else "seq"))
        if self._replay:
            self.notes.append(f"resumed: {len(self._replay)} completed probe(s) taken from the record")

    # -- one probe --
    def _sizes(self, n: int, extra_blocks: int) -> list[int]:
        """n prompts of S tokens and, in the fine stage, one more of extra_blocks whole blocks + 1."""
        sizes = [self.prompt_tokens] * n
        if extra_blocks:
            if self.block_size is None:  # the fine stage runs only once the block size is known
                raise RuntimeError(f"a probe of {extra_blocks} extra block(s) with the block size unknown")
            sizes.append(extra_blocks * self.block_size + 1)
        return sizes

    def _classify(self, probe: Probe) -> Verdict:
        return classify(probe.sizes, probe.rounds, probe.deltas, block_size=self.block_size, signals=self.cfg.signals,
                        server_reports_cached=self.server_reports_cached, ttft_ratio=self.cfg.ttft_ratio,
                        warm_share=self.cfg.warm_share, distrusted=frozenset(self.distrusted),
                        ttft_sees_hits=self.ttft_check is None or self.ttft_check.get("sees_hits") is not False)

    def _distrust(self, verdict: Verdict) -> None:
        """Latch the signals ``verdict`` refuted (one line each, a 'distrust' event); when that changes the
        verdict of a probe taken before, restart the search from the completed probes (_Restart)."""
        new = {s: why for s, why in verdict.refuted.items() if s not in self.distrusted}
        if not new:
            return
        for s, why in new.items():
            self.distrusted[s] = why
            self.notes.append(f"the server's {s} is not trusted for this run: it {why}; warmth is judged by "
                              f"{verdict.signal} instead")
            self.record.append("distrust", signal=s, reason=why)
        changed = False
        for p in self.probes:
            was = p.decided.warm
            p.verdict = self._classify(p)
            changed = changed or p.verdict.warm != was
        if changed:
            raise _Restart()

    async def _probe(self, live: _Live, stage: str, n: int, extra_blocks: int) -> Probe:
        replayed = self._replay.get((stage, n, extra_blocks))
        if replayed is not None:
            if replayed.decided.signal in self.distrusted:
                replayed.verdict = self._classify(replayed)
            self.probes.append(replayed)
            return replayed
        cfg = self.cfg
        self.seq += 1
        sizes = self._sizes(n, extra_blocks)
        probe = Probe(seq=self.seq, stage=stage, n=n, extra_blocks=extra_blocks, sizes=sizes)
        prompts = []
        for size in sizes:
            self.prompt_counter += 1
            prompts.append(await live.prompts.make(self.prompt_counter, size))
        for rnd in range(1, cfg.rounds + 1):
            await self._round(live, probe, rnd, prompts)
        if live.scraper.note and live.scraper.note not in self.notes:
            self.notes.append(live.scraper.note)
        self.server_reports_cached = self.server_reports_cached or any(
            r.cached_tokens_reported for rnd in probe.rounds for r in rnd)
        probe.verdict = self._classify(probe)
        self.record.append("probe", seq=probe.seq, stage=stage, n=n, extra_blocks=extra_blocks, sizes=sizes,
                           verdict=probe.verdict.to_dict())
        self.probes.append(probe)  # before _distrust: a restart takes it with the others
        await self._recheck_ttft(live, probe)
        self._distrust(probe.verdict)
        return probe

    async def _recheck_ttft(self, live: _Live, probe: Probe) -> None:
        """Before a counter is refuted by the TTFTs, whether a certain hit still shows in them now (the TTFT check,
        run again): load on the machine can slow a warm request as much as a cold one, and then it is the TTFT
        that cannot judge, not the counter that lies. When the check fails, TTFT neither decides nor refutes for the
        rest of the run, and the probe is decided again (only an impossible count is refuted then)."""
        new = [s for s in probe.decided.refuted if s not in self.distrusted]
        if not new or self.ttft_check is None or self.ttft_check.get("sees_hits") is not True:
            return
        impossible = _signal_flags(probe.sizes, probe.rounds, probe.deltas, self.block_size, self.cfg.ttft_ratio,
                                   self.server_reports_cached)[2]  # the counts refuted with no TTFT's say
        if all(s in impossible for s in new):
            return
        await self._check_ttft(live)
        if self.ttft_check.get("sees_hits") is False:
            probe.verdict = self._classify(probe)

    async def _round(self, live: _Live, probe: Probe, rnd: int, prompts: list) -> None:
        """One round of a probe: every prompt once (in parallel; in order for the sequential fine stage),
        each result recorded as it completes, then the round's /metrics delta. ProbeFailed when any failed."""
        cfg = self.cfg
        label = f"n={probe.n}" + (f" + {probe.extra_blocks} block(s)" if probe.extra_blocks else "")
        self.progress(f"probe {probe.seq} ({probe.stage}, {label}, {sum(probe.sizes):,} tokens): round {rnd}/{cfg.rounds}")
        before = await live.scraper.scrape()
        done = 0

        async def one(i: int, text: str, pid: str) -> RequestResult:
            nonlocal done
            r = await live.client.complete(text, max_tokens=1, request_id=f"{pid}-r{rnd}",
                                           tags={"probe": probe.seq, "round": rnd, "index": i})
            self.record.append("request", probe=probe.seq, round=rnd, index=i, result=r.to_dict())
            done += 1
            self.progress(f"probe {probe.seq} ({probe.stage}, {label}): round {rnd}/{cfg.rounds}, {done}/{len(prompts)} done")
            return r

        if probe.stage == "fine" and cfg.fine_order == "sequential":
            results = [await one(i, p.text, p.id) for i, p in enumerate(prompts)]
        else:
            results = await asyncio.gather(*(one(i, p.text, p.id) for i, p in enumerate(prompts)))
        after = await live.scraper.scrape()
        collect_between()
        d = delta(before, after)
        probe.rounds.append(list(results))
        probe.deltas.append(d)
        self.record.append("round", probe=probe.seq, round=rnd, delta=d.to_dict() if d else None)
        failed = [r for r in results if not r.ok]
        if failed:
            where = self._resume_hint()
            raise ProbeFailed(f"probe {label}, round {rnd}: {len(failed)} of {len(results)} requests failed, "
                              f"first: {failed[0].error_line()}{where}")

    # -- the run --
    async def run(self) -> PoolResult:
        cfg = self.cfg
        self._load_replay()
        async with StreamClient(cfg.url, cfg.model, timeout_s=cfg.timeout_s, stall_timeout_s=cfg.stall_timeout_s) as client:
            live = await self._setup(client)
            predicted_tokens = predicted_tokens_of(self.predicted) if self.predicted is not None else cfg.predicted_tokens
            coarse, fine = await self._search(live, predicted_tokens)
        if live.prompts.note and live.prompts.note not in self.notes:  # e.g. /tokenize went away mid-run
            self.notes.append(live.prompts.note)
        return PoolResult.build(self, live.model, coarse, fine, predicted_tokens)

    async def _search(self, live: _Live, predicted_tokens: int | None) -> tuple[Bisection, Bisection | None]:
        """Both stages; searched again from the completed probes whenever a refuted signal changes one of them
        (at most once per counter: a signal refuted stays refuted)."""
        for _ in COUNTERS:
            try:
                coarse = await self._coarse_stage(live, predicted_tokens)
                return coarse, await self._fine_stage(live, coarse, predicted_tokens)
            except _Restart:
                self._replay.update({p.key: p for p in self.probes})
                self.probes = []
        coarse = await self._coarse_stage(live, predicted_tokens)
        return coarse, await self._fine_stage(live, coarse, predicted_tokens)

    def _resume_hint(self) -> str:
        """How a failed run continues, for its one-line error (nothing without a record)."""
        if not self.record.path:
            return ""
        return f" (the record {self.record.path} keeps every result so far; continue with --resume {self.record.path})"

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    async def _coarse_stage(self, live: _Live, predicted_tokens: int | None) -> Bisection:
        """n prompts of S tokens, n galloping from the predicted capacity (else the engine's figure), then bisected."""
        cfg = self.cfg
        per_prompt = self.prompt_tokens - 1
        start = max(1, predicted_tokens // per_prompt) if predicted_tokens else None
        if start is None and self.engine is not None and self.engine.engine_pool_tokens:
            start = max(1, self.engine.engine_pool_tokens // per_prompt)
            self._note("search started from the engine's own figure (no prediction given)")
        if start is not None and start > cfg.max_parallel:
            self._note(f"the predicted capacity ({start} prompts) is above --max-parallel {cfg.max_parallel}")
        coarse = Bisection(lo=0, start=start, limit=cfg.max_parallel)
        while (n := coarse.next()) is not None:
            probe = await self._probe(live, "coarse", n, 0)
            coarse.observe(n, probe.decided.warm)
        return coarse

    async def _fine_stage(self, live: _Live, coarse: Bisection, predicted_tokens: int | None) -> Bisection | None:
        """One more prompt of j blocks beside the n_warm prompts, j bisected: the pool to the block. It needs a
        cold edge, a known block size and a signal that sees a partial eviction (None, with a note, without)."""
        cfg, block = self.cfg, self.block_size
        if not cfg.fine or coarse.hi is None:
            return None
        signal = self.probes[-1].decided.signal if self.probes else None
        if not block:
            self._note("no fine stage: the block size is unknown")
            return None
        trusted_counts = signal in COUNTERS or (self.server_reports_cached and "cached_tokens" not in self.distrusted)
        if not trusted_counts:
            self._note(f"no fine stage: the {signal} signal cannot see a partial eviction; the pool is known to the prompt")
            return None
        m = (self.prompt_tokens - 1) // block
        if m <= 1:
            return None
        fine_start = None
        if predicted_tokens:
            guess = predicted_tokens // block - coarse.lo * m
            fine_start = guess if 0 < guess < m else None
        fine = Bisection(lo=0, hi=m, start=fine_start)
        while (j := fine.next()) is not None:
            probe = await self._probe(live, "fine", coarse.lo, j)
            fine.observe(j, probe.decided.warm)
        return fine


def _count_field(event: dict, name: str) -> int:
    value = event.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise BadInput(f"a {event.get('type')!r} event of the run record has no {name!r} count: the record is damaged")
    return value


def _replayed_probe(e: dict, requests: dict, deltas: dict) -> Probe:
    """A completed probe from its 'probe' event and the requests and rounds recorded before it."""
    where = "a 'probe' event of the run record"
    seq, n, extra = _count_field(e, "seq"), _count_field(e, "n"), _count_field(e, "extra_blocks")
    stage, sizes = e.get("stage"), e.get("sizes")
    if stage not in ("coarse", "fine") or not isinstance(sizes, list) or \
            not all(isinstance(x, int) and not isinstance(x, bool) for x in sizes):
        raise BadInput(f"{where} has no stage or prompt sizes: the record is damaged")
    rounds_of = requests.get(seq, {})
    rounds = [[rounds_of[r][i] for i in sorted(rounds_of[r])] for r in sorted(rounds_of)]
    if any(len(rnd) != len(sizes) for rnd in rounds):
        raise BadInput(f"{where} (probe {seq}) has rounds without every request: the record is damaged")
    verdict = Verdict(**typed(Verdict, e.get("verdict"), where + " verdict"))
    return Probe(seq=seq, stage=stage, n=n, extra_blocks=extra, sizes=sizes, rounds=rounds,
                 deltas=[deltas.get(seq, {}).get(r) for r in sorted(rounds_of)], verdict=verdict)


def _pool_interval(coarse: Bisection, fine: Bisection | None, block_size: int | None,
                  per_prompt: int) -> tuple[int, int | None, str]:
    """The pool in tokens, [low, high) (high None: a lower bound only), and how well it is known."""
    if fine is not None:
        if block_size is None:  # the fine stage runs only once the block size is known
            raise RuntimeError("a block-level (fine) bisection with the block size unknown")
        low = coarse.lo * per_prompt + fine.lo * block_size
        return low, low + block_size, "block"
    if coarse.hi is not None:
        return coarse.lo * per_prompt, coarse.hi * per_prompt, "prompt"
    return coarse.lo * per_prompt, None, "lower bound"


@dataclass
class PoolResult:
    url: str
    model: str
    prompt_tokens: int
    rounds: int
    block_size: int | None
    block_size_source: str | None
    n_warm: int
    n_cold: int | None
    extra_blocks_warm: int
    extra_blocks_cold: int | None
    pool_low_tokens: int  # the pool holds at least this many tokens warm...
    pool_high_tokens: int | None  # ... and fewer than this (None: only a lower bound)
    resolution: str  # 'block' | 'prompt' | 'lower bound'
    signal: str | None
    engine_tokens: int | None
    engine_labels: dict | None
    predicted_tokens: int | None
    predicted_source: str | None
    probes: list[Probe]
    notes: list[str]
    record_path: str | None
    signal_notes: list[str] = field(default_factory=list)
    engine_pool_tokens_implied: int | None = None  # the engine's whole pool the measurement implies
    exit_code: int = 0

    @property
    def measured_tokens(self) -> float:
        """The single figure compared with predictions: the lower bound when known to the block, else the midpoint."""
        if self.pool_high_tokens is None or self.resolution == "block":
            return float(self.pool_low_tokens)
        return (self.pool_low_tokens + self.pool_high_tokens) / 2

    def relative_error(self, value: int | None) -> float | None:
        if value is None or self.measured_tokens <= 0:
            return None
        return (value - self.measured_tokens) / self.measured_tokens

    def inside(self, value: int | None) -> bool | None:
        if value is None:
            return None
        return self.pool_low_tokens <= value and (self.pool_high_tokens is None or value < self.pool_high_tokens)

    @classmethod
    def build(cls, run: PoolRun, model: str, coarse: Bisection, fine: Bisection | None,
              predicted_tokens: int | None) -> PoolResult:
        B = run.block_size
        per_prompt = run.prompt_tokens - 1  # resident per prompt: never its last token; exact when S - 1 is whole blocks
        low, high, resolution = _pool_interval(coarse, fine, B, per_prompt)
        notes, implied = _pool_notes(run, coarse, fine, low, resolution)
        signal_notes = _signal_notes(run)
        signals_used = {p.verdict.signal for p in run.probes if p.verdict}
        engine_tokens = run.engine.engine_pool_tokens if run.engine else None
        src = None
        if predicted_tokens is not None:
            src = run.cfg.predicted_source or (f"from the {type(run.predicted).__name__} given" if run.predicted is not None
                                               else "given as --predicted-tokens")
        return cls(url=run.cfg.url, model=model, prompt_tokens=run.prompt_tokens, rounds=run.cfg.rounds, block_size=B,
                   block_size_source=run.block_size_source, n_warm=coarse.lo, n_cold=coarse.hi,
                   extra_blocks_warm=fine.lo if fine else 0, extra_blocks_cold=fine.hi if fine else None,
                   pool_low_tokens=low, pool_high_tokens=high, resolution=resolution,
                   signal="+".join(sorted(signals_used)) if signals_used else None,
                   engine_tokens=engine_tokens, engine_labels=run.engine.cache_config if run.engine else None,
                   predicted_tokens=predicted_tokens, predicted_source=src, probes=run.probes, notes=notes,
                   record_path=str(run.record.path) if run.record.path else None, signal_notes=signal_notes,
                   engine_pool_tokens_implied=implied)

    def to_dict(self) -> dict:
        return {
            "url": self.url, "model": self.model, "prompt_tokens": self.prompt_tokens, "rounds": self.rounds,
            "block_size": self.block_size, "block_size_source": self.block_size_source,
            "pool_tokens": {"low": self.pool_low_tokens, "high": self.pool_high_tokens, "resolution": self.resolution,
                            "measured": self.measured_tokens, "engine_pool_implied": self.engine_pool_tokens_implied,
                            "meaning": "the pool holds >= low tokens warm and < high (interval [low, high))"},
            "n_warm": self.n_warm, "n_cold": self.n_cold,
            "extra_blocks_warm": self.extra_blocks_warm, "extra_blocks_cold": self.extra_blocks_cold,
            "signal": self.signal,
            "engine": {"tokens": self.engine_tokens, "cache_config_info": self.engine_labels,
                       "relative_error": self.relative_error(self.engine_tokens), "inside": self.inside(self.engine_tokens)},
            "prediction": {"tokens": self.predicted_tokens, "source": self.predicted_source,
                           "relative_error": self.relative_error(self.predicted_tokens),
                           "inside": self.inside(self.predicted_tokens)},
            "probes": [p.summary() for p in self.probes],
            "notes": self.notes, "signal_notes": self.signal_notes, "record": self.record_path,
        }


def _pool_notes(run: PoolRun, coarse: Bisection, fine: Bisection | None, low: int, resolution: str
                ) -> tuple[list[str], int | None]:
    """The run's notes on what the interval means, and the engine's whole pool the block-level stage implies
    (when it ran one request at a time)."""
    B = run.block_size
    notes = list(run.notes)
    if resolution == "lower bound":
        notes.append(f"every probe up to --max-parallel {run.cfg.max_parallel} stayed warm: the pool is at least "
                     f"{low:,} tokens; raise --max-parallel or --prompt-tokens to find its edge")
    if coarse.hi == 1:
        notes.append(f"a single prompt of {run.prompt_tokens:,} tokens did not stay warm: the pool holds less than that, "
                     "or prefix caching is off (vLLM: --enable-prefix-caching)")
    if B and resolution != "lower bound":
        notes.append(f"while n requests run at once each holds one more, partial block for its last token: "
                     f"near the edge the engine may need up to n x {B} tokens more than the resident figure")
    implied = None
    if fine is not None and B and run.cfg.fine_order == "sequential":
        implied = low + 2 * B
        notes.append(f"the engine's whole pool implied: {implied:,} tokens = the {low:,} kept warm + the one partial "
                     f"block of the request in flight (the block-level stage runs one request at a time) + the "
                     f"engine's null block (block 0)")
    return notes, implied


def _signal_notes(run: PoolRun) -> list[str]:
    """The probes' notes on their warmth signals, each once, and a hint when cached_tokens was wanted but missing."""
    signal_notes: list[str] = []
    for p in run.probes:
        for note in p.verdict.notes if p.verdict else []:
            if note not in signal_notes:
                signal_notes.append(note)
    if run.probes and "cached_tokens" not in run.probes[-1].decided.by_signal and "cached_tokens" in run.cfg.signals:
        signal_notes.append("the server reports no usage.prompt_tokens_details.cached_tokens "
                            "(vLLM: start it with --enable-prompt-tokens-details for the strongest signal)")
    return signal_notes


async def measure_pool(config: PoolConfig, *, record: RunRecord | None = None, resume: RecordContents | None = None,
                       predicted: Any = None, progress: Callable[[str], None] | None = None) -> PoolResult:
    return await PoolRun(config, record=record, resume=resume, predicted=predicted, progress=progress).run()

