"""Decodes that share their steps with prefill chunks wait for them: the share of requests that decode below
the floor because of it (DESIGN.md, "fast enough" with interference priced).

vLLM's scheduler puts every running decode in each step and fills what is left of the step's token budget
(``--max-num-batched-tokens``) with prefill chunks; a step that carries a chunk lasts longer than a decode-only
step by the chunk's stall (planning.step_model ``StepModel.stall_s``), and every decoder in it still gains only
one step's tokens. A request that decodes R tokens, taking R d seconds in decode-only steps, meets the floor f
only if it is done within T = R / f. It is done when its own work and the stalls that join it run out:

    work(t) = R d + B0 + A(t) - t        B0: the stall work queued when its decode starts (the prefills that
                                         arrived during its own wait and prefill), taken as load.py takes the
                                         TTFT wait: an atom 1 - rho at 0 and an exponential tail of mean
                                         E[W] / rho (M/G/1, Pollaczek-Khinchine), in stall seconds (x E[J] / E[S]);
                                         A(t): the stall of the prefills that arrive by t, compound Poisson at the
                                         load model's request rate with jumps J (each request's stall: a cold
                                         prefill at the workload's cold share, else a warm tail)
    slow  <=>  work(t) > 0 for every t <= T     (the busy period started by R d + B0 outlives T)

It cannot be slow when each of its R / t steps (t tokens a step: MTP) waiting for one full chunk
(J_chunk) adds no more than T - R d: chunks that short never break the floor (``--max-num-batched-tokens``).

The busy period is computed exactly on a lattice of ``GRID`` steps across T: per step the work falls by one and
gains the stalls arrived, a random walk that can only step down by one, so the hitting-time theorem gives the
chance it first empties at step n from u as (u / n) P(A(n) = n - u), with A(n)'s distribution from the fast
Fourier transform of its generating function (exponentially tilted, so that sums past the lattice do not wrap
onto it). The share of requests that are slow is the mean over the decode's per-token times d at the batch the
load model expects (one per fill of the context bank: a long context decodes slower alone), so at one user it
is the share that misses the floor with no neighbour at all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import field
from functools import cached_property
from typing import Any

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.planning.lru import Evictions

GRID = 64           # lattice steps across the window T = R / f (the stall's resolution: T / 64)
_FFT = 4 * GRID     # the transform's length: sums up to 4x the window stay apart before the tilt's decay
_TILT = 30.0 / _FFT  # e^(-30) of a sum's mass past the transform folds back onto the grid
_UNTILT = np.exp(_TILT * np.arange(GRID + 1))
# the hitting-time theorem's terms, (u, n) for u, n = 1..GRID: P(A(n) = n - u) at [n - 1, n - u], weight u / n (n >= u)
_U, _N = np.meshgrid(np.arange(1, GRID + 1), np.arange(1, GRID + 1), indexing="ij")
_HIT_ROWS, _HIT_COLS = _N - 1, np.clip(_N - _U, 0, GRID)
_HIT_WEIGHT = np.where(_N >= _U, _U / _N, 0.0)
_TILTS = np.exp(-_TILT * np.arange(_FFT))
_OWN = ("mean_stall_s", "_lattices")  # what a StallLoad caches for its own legs' weights (never copied)
_NONE = np.zeros(0)


@frozen
class StallLoad:
    """Decode stalls behind prefill chunks, per replica: what the decode ceiling reads beside the batch."""

    output_tokens: float           # R
    floor_tok_s: float             # f
    tokens_per_step: float         # t: 1, or MTP's tokens a step
    chunk_stall_s: float           # J_chunk: a full chunk's stall (the most one step waits)
    miss_rate: float               # the share of prefills that re-prefill the whole context
    miss_stall_s: np.ndarray = field(repr=False)   # J of a cold re-prefill, per context draw
    hit_stall_s: np.ndarray = field(repr=False)    # J of a warm tail, per context draw
    mean_service_s: float = 0.0    # E[S]: a prefill's service (the queue's load, rho = rate x E[S])
    second_moment_s2: float = 0.0  # E[S^2]
    # the decodes of equally likely replies (timed_decode_tokens): the slowed share is their mean; (): all are R
    decode_spread: tuple[float, ...] = ()
    # returning turns the LRU pool evicted in their pause re-prefill their whole context (planning.lru Evictions):
    # the model of their share at a load; the prompt each draw's evicted turn prefills from scratch and what
    # prefilling prompts costs, (stall, service) each, priced once when a load first has evicted turns; the warm
    # tail's service it replaces (E[S], E[S^2]); ``evicted_share``: the share at the load this one prices
    evictions: Evictions | None = field(default=None, repr=False)
    evicted_prompts: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    evicted_pricing: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = field(
        default=None, repr=False, compare=False)
    hit_service_s: tuple[float, float] = (0.0, 0.0)
    evicted_share: float = 0.0
    # what the loads made of this one share (``_kept``; replace and ``with_evicted`` keep it): each leg's mean and
    # tilted transform on a lattice, and the evicted turns' priced stalls and service moments
    _shared: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (self.output_tokens > 0 and self.floor_tok_s > 0 and self.tokens_per_step >= 1):
            raise BadInput("the stall model needs output tokens > 0, a floor > 0 and >= 1 token a step")
        if not 0.0 <= self.miss_rate <= 1.0:
            raise BadInput(f"a miss rate must be in [0, 1], got {self.miss_rate!r}")

    @property
    def window_s(self) -> float:
        """T = R / f: the longest the decode may take and still meet the floor."""
        return self.output_tokens / self.floor_tok_s

    @property
    def _evicted(self) -> tuple[np.ndarray, float, float]:
        """An evicted turn's stall per draw and its service's E[S], E[S^2] (priced once for every load made of this
        one)."""
        def price() -> tuple[np.ndarray, float, float]:
            assert self.evicted_pricing is not None
            stall, served = self.evicted_pricing(self.evicted_prompts)
            served = np.asarray(served, dtype=float)
            return np.asarray(stall, dtype=float), float(served.mean()), float((served ** 2).mean())

        out: tuple[np.ndarray, float, float] = self._kept("evicted", price)
        return out

    def _kept(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()``, once for this load and every load made of it (``_shared``)."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]

    @property
    def _legs(self) -> tuple[tuple[np.ndarray, float], ...]:
        """(stall draws, weight) of a cold re-prefill (the workload's cold share), an evicted turn's and a warm tail."""
        m, x = self.miss_rate, self.evicted_share
        evicted = self._evicted[0] if x > 0 else _NONE
        return ((self.miss_stall_s, m), (evicted, (1.0 - m) * x), (self.hit_stall_s, (1.0 - m) * (1.0 - x)))

    @cached_property
    def mean_stall_s(self) -> float:
        return float(sum(w * self._leg_mean(i) for i, (_draws, w) in enumerate(self._legs) if w > 0))

    def _leg_mean(self, leg: int) -> float:
        out: float = self._kept(("mean", leg), lambda: _mean(self._legs[leg][0]))
        return out

    def with_evicted(self, share: float) -> StallLoad:
        """This load with ``share`` of its warm turns evicted: each re-prefills its whole context, in the stalls
        and in the prefill queue's moments (what the warm tail it replaces took out, the re-prefill put in)."""
        share = min(max(share, 0.0), 1.0)
        if share == self.evicted_share or self.evicted_pricing is None or not self.evicted_prompts.size:
            return self
        _, served_s, served_s2 = self._evicted
        x = (1.0 - self.miss_rate) * (share - self.evicted_share)  # from this load's own share
        # a copy of this (checked) load with three fields changed, less what it computed for its own weights: the
        # decode ceiling asks for one at every load it tries, and dataclasses.replace's re-check took a tenth of it
        out: StallLoad = object.__new__(StallLoad)
        out.__dict__.update({k: v for k, v in self.__dict__.items() if k not in _OWN},
                            evicted_share=share, mean_service_s=self.mean_service_s + x * (served_s - self.hit_service_s[0]),
                            second_moment_s2=self.second_moment_s2 + x * (served_s2 - self.hit_service_s[1]))
        return out

    def slow_share(self, rate_per_s: float, token_s: np.ndarray) -> float:
        """The share of requests whose decode falls below the floor at ``rate_per_s`` prefills a second, over the
        per-token decode times ``token_s`` (one per fill); with ``decode_spread``, the mean over its replies (a short
        reply has little slack for a chunk beside it, a long one much), each over its own window."""
        token_s = np.asarray(token_s, dtype=float).ravel()
        if not token_s.size:
            raise BadInput("the stall model needs at least one decode time")
        rho = rate_per_s * self.mean_service_s
        if rho >= 1.0:
            return 1.0  # the prefill queue grows without bound: every decode waits for it
        replies = self.decode_spread or (self.output_tokens,)
        return float(np.mean([self._slow_share_of(r, rate_per_s, rho, token_s) for r in replies]))

    def _slow_share_of(self, reply: float, rate_per_s: float, rho: float, token_s: np.ndarray) -> float:
        """``slow_share`` for a reply of ``reply`` tokens, judged over its own window reply / f."""
        own = reply * token_s  # its decode with no chunk beside it
        slack = reply / self.floor_tok_s - own
        cap = reply / self.tokens_per_step * self.chunk_stall_s
        late = slack < 0  # slower than the floor with no neighbour at all
        at_risk = ~late & (cap > slack)  # the chunks can add more than the slack
        share = np.zeros(token_s.size)
        share[late] = 1.0
        if at_risk.any() and rate_per_s > 0:
            share[at_risk] = self._not_done(reply / self.floor_tok_s, rate_per_s, rho, own[at_risk])
        return float(share.mean())

    def _not_done(self, window_s: float, rate: float, rho: float, own_s: np.ndarray) -> np.ndarray:
        """P(the decode is not done by T = ``window_s`` = R / f) for each own decode time: the busy period of its own
        work plus the stall queued at its start, fed by the stalls that arrive while it lasts, outlives T.

        On a lattice of h = T / GRID: per step the work falls by one and gains the stalls arrived (compound
        Poisson, its pmf by FFT, tilted), and the hitting-time theorem for such a skip-free walk gives the
        chance it first empties at step n from u: (u / n) P(A(n) = n - u)."""
        n_steps = GRID
        h = window_s / GRID
        phi = self._lattice(h)
        # P(A(n) = k), n = 1..GRID steps: the n-th power of one step's transform, untilted
        one_step = np.exp(rate * h * (phi - 1.0))
        powers = np.cumprod(np.broadcast_to(one_step, (n_steps, one_step.size)), axis=0)
        arrived = np.clip(np.fft.irfft(powers, n=_FFT, axis=1)[:, :n_steps + 1] * _UNTILT, 0.0, None)
        # done[u]: P(the work u empties within the window) = sum_{n=u}^{GRID} (u / n) P(A(n) = n - u)
        done = np.concatenate([[1.0], (arrived[_HIT_ROWS, _HIT_COLS] * _HIT_WEIGHT).sum(axis=1), [0.0]])
        # the stall queued at its start, in steps: an atom 1 - rho at 0 and an exponential tail (M/G/1 in stall work)
        queued = np.zeros(n_steps + 2)
        mean_s = self.mean_service_s
        scale = self.mean_stall_s / mean_s if mean_s > 0 else 0.0
        wait = rate * self.second_moment_s2 / (2.0 * (1.0 - rho)) * scale
        if rho > 0 and wait > 0:
            edges = np.exp(-(np.arange(n_steps + 1) + 0.5) * h * rho / wait)
            queued[0] = 1.0 - rho * edges[0]
            queued[1:n_steps + 1] = rho * (edges[:-1] - edges[1:])
            queued[n_steps + 1] = rho * edges[-1]
        else:
            queued[0] = 1.0
        # P(done | own work s steps) = sum_b P(queued = b) done[s + b], for every s at once (done is 0 past the window)
        within = np.correlate(np.concatenate([done, np.zeros(n_steps + 2)]), queued, mode="valid")[:n_steps + 2]
        x = np.minimum(own_s / h, n_steps + 1.0)  # between two lattice steps: linear between their answers
        lo = np.floor(x).astype(np.int64)
        hi = np.minimum(lo + 1, n_steps + 1)
        frac = x - lo
        not_done: np.ndarray = np.clip(1.0 - ((1.0 - frac) * within[lo] + frac * within[hi]), 0.0, 1.0)
        return not_done

    def _lattice(self, h: float) -> np.ndarray:
        """The tilted transform of one request's stall on a lattice of step h (a reply's window / GRID: every rate
        and decode time this model is asked about for that reply reads the same). The stall is a mixture of its
        legs, and the transform is linear: each leg's is taken once (in ``_shared``, kept by the loads
        ``with_evicted`` makes of this one) and weighed."""
        if h in self._lattices:
            return self._lattices[h]
        m, x = self.miss_rate, self.evicted_share
        if x > 0 and self.miss_stall_s.size and self.hit_stall_s.size:
            # every leg present, weights m, (1 - m) x, (1 - m)(1 - x): the load without evictions, and what an
            # evicted turn's stall adds over the warm one it replaces (both kept for the loads made of this one)
            base: np.ndarray = self._kept(("base", h), lambda: self._mixed(h, ((0, m), (2, 1.0 - m))))
            over: np.ndarray = self._kept(("evicted over warm", h),
                                          lambda: self._leg_transform(1, h) - self._leg_transform(2, h))
            phi = base + (1.0 - m) * x * over
        else:
            phi = self._mixed(h, tuple((i, w) for i, (draws, w) in enumerate(self._legs) if draws.size and w > 0))
        self._lattices[h] = phi
        return phi

    def _mixed(self, h: float, legs: tuple[tuple[int, float], ...]) -> np.ndarray:
        """The legs' transforms weighed (by their weights over their sum); a unit mass at 0 where none weighs."""
        total = sum(w for _, w in legs)
        if total <= 0:
            return np.ones(_FFT // 2 + 1, dtype=complex)  # no stall at all
        phi = np.zeros(_FFT // 2 + 1, dtype=complex)
        for i, w in legs:
            phi += (w / total) * self._leg_transform(i, h)
        return phi

    @cached_property
    def _lattices(self) -> dict[float, np.ndarray]:
        """This load's stall transforms by lattice step (its own: its legs' weights are its own)."""
        return {}

    def _leg_transform(self, leg: int, h: float) -> np.ndarray:
        def make() -> np.ndarray:
            mass = _on_grid(self._legs[leg][0], h, GRID)  # one request's stall in steps; the last bin: past T
            return np.fft.rfft(np.concatenate([mass, np.zeros(_FFT - mass.size)]) * _TILTS)

        out: np.ndarray = self._kept(("leg", leg, h), make)
        return out


def _on_grid(draws: np.ndarray, h: float, bins: int) -> np.ndarray:
    """Stall draws (equally likely) on a lattice of h, unit mass, each split between its two neighbouring steps so
    that the lattice keeps its mean (a stall shorter than a step still counts); past ``bins``: bin ``bins`` + 1."""
    x = np.minimum(draws / h, bins + 1.0)
    lo = np.floor(x).astype(np.int64)
    frac = x - lo
    hi = np.minimum(lo + 1, bins + 1)
    w = 1.0 / draws.size
    mass = np.bincount(lo, weights=(1.0 - frac) * w, minlength=bins + 2)[:bins + 2]
    mass += np.bincount(hi, weights=frac * w, minlength=bins + 2)[:bins + 2]
    return mass


def timed_decode_tokens(output_tokens: float, spread: tuple[float, ...] | None) -> tuple[float, ...]:
    """The decodes the floor is judged on, one per equally likely reply: a reply of L tokens is timed over its
    L - 1 tokens after the first (vllm bench serve's TPOT; the engine simulator's decode speed), at least one;
    () without a spread (every reply ``output_tokens`` long, priced whole: the rule before the spread)."""
    if not spread:
        return ()
    return tuple(max(1.0, x * float(output_tokens) - 1.0) for x in spread)


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else 0.0


BASELINE_SLACK = 0.02  # load may add this share of misses to what one user alone already has (sampling noise)


def allowed_slow_share(percentile: float, one_user_share: float, slack: float = BASELINE_SLACK) -> float:
    """The share of slow requests load may bring: 1 - percentile, or what one user alone already has plus
    ``slack`` (a floor that one user alone misses is a share of requests, never zero users)."""
    if not 0 < percentile < 100:
        raise BadInput(f"a percentile must be in (0, 100), got {percentile!r}")
    return max(1.0 - percentile / 100.0, one_user_share + slack)


def stall_mean_s(load: StallLoad, rate_per_s: float) -> float:
    """E[X]: the mean stall over a decode window at ``rate_per_s`` (for the explanation)."""
    return rate_per_s * load.window_s * load.mean_stall_s if math.isfinite(rate_per_s) else math.inf
