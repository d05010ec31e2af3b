"""Prefill and decode apart, step by step (issue 32): x prefill and y decode instances of the engine simulator
(simulate/engine.py), each its own scheduler and prefix cache, joined by the KV pull.

- A user's request goes to its prefill instance (users are sticky: the k-th user to the k mod x-th instance, and to
  the k mod y-th decode instance). The prefill instance runs it with one output token (the proxy sends it there with
  ``max_tokens`` 1), in chunks beside its other prompts, its own prefix cache serving what it still holds.
- When the prefill's last chunk is done, the request is handed to its decode instance: it arrives there after the
  API server's cost, the pull of the blocks that decode instance lacks (``pull_s(prompt, hit)``, its own prefix
  cache looked up at the hand-over, engine/kv_transfer.py's rule and time) and the part of the handover the
  simulator does not step through itself (``extra_s``: the pull's dispatch with a step and its completion noticed
  at a step's end; the simulator itself waits for the next step and runs the recompute).
- The decode instance admits it with the whole prompt's blocks (its own hit, the rest pulled and cached as full
  blocks), recomputes the last ``recompute`` prompt tokens in one chunk (vLLM recomputes at least the last token
  for its logits, and a state model's backoff), and decodes it; its first token is the client's, and when it ends
  the user's next request follows its pause, to the prefill instance again.

The engines advance together: the one whose next event is earliest steps next, and a decode instance's jump of
decode steps stops before the earliest moment a prefill instance could hand it a request. A hand-over can reach a
decode instance whose clock has passed it by at most one step (it is taken at the next step): the engines are
coupled at step granularity.

Measured per request: the client's TTFT (from the send to the decode instance's first token), the decode speed on
the decode instance, and a turn is warm when its prefill instance's hit is (replay.warm_turns). Warm means the
prefix is not computed again, and only the prefill instance computes it: what the decode instance's own cache
lacks it pulls, whose time the TTFT already holds. (Until 2026-12-06 the smaller of the two hits counted; a decode
instance of a hybrid model with MTP drafts keeps almost no state it can resume from, so one user alone had most
turns cold there and the rule measured noise: chat broke at 7 users on every layout.)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np

from servesize.errors import BadInput
from servesize.limits import MAX_ENGINE_REQUESTS, MAX_ENGINE_STEPS
from servesize.simulate.engine import (
    DEFAULT_WARMUP,
    EngineConfig,
    EngineRun,
    RunTooLarge,
    _Engine,
    closed_loop,
    returning_turns,
)
from servesize.simulate.replay import Replay


class _Prefill(_Engine):
    """A prefill instance: every request's output is its first token; when its prefill is done the request is
    handed on (``hand``), not back to its user."""

    def __init__(self, replay: Replay, cfg: EngineConfig, times, pauses, starts, order, warmup: float,
                 hand: Callable[[int, float], None]):
        super().__init__(replay, cfg, times, pauses, starts, order, warmup)
        self.out = np.ones_like(self.out)  # max_tokens 1: the prefill samples the first token and stops
        self.run.output_tokens = self.out
        self.hand = hand

    def _answered(self, i: int, t: float) -> None:
        self.hand(i, t)


class _Decode(_Engine):
    """A decode instance: requests arrive from prefill instances with their prompt's KV pulled; the last
    ``recompute`` prompt tokens are computed here, then the output decoded; the user's next request goes back."""

    pulled_state = True

    def __init__(self, replay: Replay, cfg: EngineConfig, times, pauses, warmup: float, recompute: int,
                 back: Callable[[int, float], None]):
        super().__init__(replay, cfg, times, pauses, {}, {}, warmup)
        self.recompute = recompute
        self.back = back

    def deliver(self, i: int, t: float) -> None:
        heapq.heappush(self.arrivals, (t, i))

    def hit_tokens(self, i: int) -> int:
        """The prefix this instance's cache holds for request i now (what its pull need not carry)."""
        return int(self.pool.lookup(self._nodes(i)[: int(self.cap[i])]).size) * self.cfg.block_size

    def _at_admission(self, i: int, hit_tokens: int, budget: int) -> tuple[int, int]:
        """First admitted, the whole prompt is held (its own hit, the rest pulled) and all but the last
        ``recompute`` tokens computed; a preempted request is recomputed here, as vLLM does: no second pull."""
        if self.admitted_once[i]:
            return super()._at_admission(i, hit_tokens, budget)
        prompt = int(self.target[i])
        return max(prompt - self.recompute, hit_tokens), prompt

    def _next(self, user: int, t: float) -> None:
        """The user's next request (after this one's answer, or after one too large for this pool): to its
        prefill instance."""
        self.back(user, t)


def _next_time(e: _Engine) -> float:
    """When engine ``e`` next does something: now while it has work, else when its next request reaches it."""
    if e.running or e.waiting:
        return e.now
    reach = e._next_reach()
    return max(e.now, reach) if math.isfinite(reach) else math.inf


def _check(replay: Replay, x: int, y: int, extra_s: float, recompute: int, warmup: float) -> None:
    if x < 1 or y < 1:
        raise BadInput(f"a disaggregated run needs a prefill and a decode instance at least, got {x}P{y}D")
    if not 0 <= warmup < 1:
        raise BadInput(f"the warm-up must be in [0, 1), got {warmup!r}")
    if replay.requests > MAX_ENGINE_REQUESTS:
        raise RunTooLarge(f"{replay.requests:,} requests in one engine run, past the simulator's "
                          f"{MAX_ENGINE_REQUESTS:,}: replay fewer sessions")
    if recompute < 1 or not extra_s >= 0:
        raise BadInput("the decode instance recomputes at least one token, and the hand-over's time is >= 0")


def simulate_disaggregated(replay: Replay, prefill: tuple[EngineConfig, object, int],
                           decode: tuple[EngineConfig, object, int], pull_s: Callable[[int, int], float],
                           extra_s: float, recompute: int, *, warmup: float = DEFAULT_WARMUP,
                           max_steps: int = MAX_ENGINE_STEPS) -> EngineRun:
    """``replay``'s users through x prefill and y decode instances (``prefill`` and ``decode``: each instance's
    config, its step times, and how many), closed-loop; the run as the client sees it (one EngineRun: send to the
    decode instance's first token, its decode, the smaller of the two instances' hits)."""
    (p_cfg, p_times, x), (d_cfg, d_times, y) = prefill, decode
    _check(replay, x, y, extra_s, recompute, warmup)
    pauses, starts, order = closed_loop(replay)
    rank = {u: k for k, u in enumerate(sorted(order))}
    prefills: list[_Prefill] = []
    decodes: list[_Decode] = []

    def hand(i: int, t: float) -> None:  # a prefill is done: to the user's decode instance, after the pull
        user = int(prefills[0].user_of[i])
        d = decodes[rank[user] % y]
        d.deliver(i, t + pull_s(int(d.target[i]), d.hit_tokens(i)) + extra_s)

    def back(user: int, t: float) -> None:  # the answer ended: the user's next request, to its prefill instance
        prefills[rank[user] % x]._next(user, t)

    for k in range(x):
        mine = {u: reqs for u, reqs in order.items() if rank[u] % x == k}
        prefills.append(_Prefill(replay, p_cfg, p_times, pauses, {u: starts[u] for u in mine}, mine, warmup, hand))
    for _k in range(y):
        decodes.append(_Decode(replay, d_cfg, d_times, pauses, warmup, recompute, back))
    engines: list[_Engine] = [*prefills, *decodes]
    stopped = False
    while not stopped:
        handoff_floor = min(_next_time(p) for p in prefills) + extra_s
        for d in decodes:
            d.horizon = handoff_floor
        e = min(engines, key=_next_time)
        if not math.isfinite(_next_time(e)):
            break
        e.step()
        stopped = sum(engine.run.steps for engine in engines) >= max_steps
    return _merged(prefills, decodes, replay, len(order), warmup, stopped=stopped)


def _merged(prefills: list[_Prefill], decodes: list[_Decode], replay: Replay, users: int, warmup: float,
            stopped: bool) -> EngineRun:
    """The client's view of one disaggregated run: sent to the prefill instance, answered by the decode instance."""

    def take(runs: list[EngineRun], name: str) -> np.ndarray:
        out = np.full(replay.requests, np.nan)
        for r in runs:
            got = getattr(r, name)
            mask = np.isfinite(got)
            out[mask] = got[mask]
        return out

    p_runs, d_runs = [p.run for p in prefills], [d.run for d in decodes]
    arrival = take(p_runs, "arrival_s")
    first = take(d_runs, "first_token_s")
    finish = take(d_runs, "finish_s")
    p_hit = np.sum([r.hit_tokens for r in p_runs], axis=0)  # each request is one instance's: the others hold 0
    ideal = np.sum([r.ideal_tokens for r in p_runs], axis=0)
    run = EngineRun(users=users, arrival_s=arrival, first_token_s=first,
                    finish_s=finish, hit_tokens=p_hit.astype(np.int64),
                    ideal_tokens=ideal.astype(np.int64), input_tokens=prefills[0].prompt,
                    output_tokens=decodes[0].out, preemptions=np.sum([r.preemptions for r in p_runs + d_runs], axis=0),
                    warmup=warmup, window_end_s=min(p.first_out for p in prefills),  # users run out at their prefill
                    returning=returning_turns(replay))
    for r in p_runs + d_runs:
        run.steps += r.steps
        run.events += r.events
        run.jumps += r.jumps
        run.busy_s += r.busy_s
        run.too_large += r.too_large
    for r in p_runs + d_runs:
        run.prefill_chunks += r.prefill_chunks
    for r in d_runs:  # the steps decodes share: the decode instances' (a prefill instance decodes nothing)
        run.prefill_steps += r.prefill_steps
        run.mixed_steps += r.mixed_steps
        run.decode_only_steps += r.decode_only_steps
        run.decoders_per_step += r.decoders_per_step
        run.step_seconds += r.step_seconds
    run.clock_s = max(e.now for e in [*prefills, *decodes])
    run.stopped = stopped
    return run
