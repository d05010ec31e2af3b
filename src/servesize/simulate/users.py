"""From a curve to the number a planner wants, and from a trace to the Workload ``plan`` takes.

**Users at a target hit rate**: N concurrent users (replay.py: each runs sessions drawn from the trace
back to back) are replayed for a ladder of N; each replay's one-pass LRU curve gives its token hit rate at
the pool; the answer is the largest N whose hit rate is at or above the target. N is found by doubling
until the target fails, then bisection; every N tried is reported, because the hit rate of a sample of
sessions is not strictly monotone in N (another N draws other sessions). 2N and 4N are replayed too, to
show how fast the hit rate falls past the answer.

**A Workload fitted from a trace** (for ``plan``'s Monte-Carlo, beside the replay): the user class is the
log-normal maximum-likelihood fit to the prompt lengths of the replayed main requests (a request's prompt
is its session's resident length at that moment, as ``servesize workload fit`` reads it); the shared prefix
is the run of leading blocks that at least half of the sessions' first requests have in common, as the
replay sees them (a trace whose ids are local to a session shares none); the think time is the median
pause between a request's end and its session's next request; the invalidation rate is the share of
requests after a session's first that an unbounded cache could serve less than half of. Subagents (with
``requests='all'``) are a class of their own. Session peak context and requests per session are reported
beside it: the Workload has no field for them.
"""

from __future__ import annotations

import math
from dataclasses import field, replace

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.percentile import median
from servesize.progress import Progress
from servesize.simulate.curve import lru_curve
from servesize.simulate.replay import Replay, ReplayOptions, build_replay, think_gaps_s
from servesize.simulate.traces import Trace
from servesize.workload.fit import WorkloadFit, fit_observations
from servesize.workload.model import Workload
from servesize.workload.readers import Observations, column

MAX_USERS_SEARCHED = 4096  # past this, a pool holds more users than any one replay here is sized for
BEYOND = (2, 4)            # after the search, N x these are replayed too: how fast the hit rate falls past the answer
PREFIX_SHARE = 0.5          # a leading block is "shared" when at least half of the sessions start with it
COLD_SHARE = 0.5            # a request an unbounded cache serves less than half of counts as invalidated



@frozen
class UsersPoint(Record):
    users: int
    hit_rate: float
    requests: int
    sessions: int


@frozen
class UsersAtTarget:
    """The largest N whose replay keeps the token hit rate at the pool >= target (0: not even one user)."""

    target: float
    num_blocks: int
    users: int
    points: tuple[UsersPoint, ...]
    capped: bool = False  # the search stopped at MAX_USERS_SEARCHED with the target still met

    def to_dict(self) -> dict:
        return {"target": self.target, "num_blocks": self.num_blocks, "users": self.users, "capped": self.capped,
                "points": [p.to_dict() for p in sorted(self.points, key=lambda p: p.users)]}

    def line(self) -> str:
        above = "at least " if self.capped else ""
        return f"{above}{self.users:,} users keep the token hit rate >= {self.target:.0%} in {self.num_blocks:,} blocks"


def users_at_target(trace: Trace, opts: ReplayOptions, num_blocks: int, target: float, *, output_blocks: bool = True,
                    max_users: int = MAX_USERS_SEARCHED, progress: Progress | None = None) -> UsersAtTarget:
    """Search N (doubling, then bisection) for the largest N meeting ``target`` at a pool of ``num_blocks``."""
    if not 0 < target <= 1:
        raise BadInput(f"the target hit rate must be in (0, 1], got {target!r}")
    points: dict[int, UsersPoint] = {}

    def rate(n: int) -> float:
        if n not in points:
            if progress is not None:
                progress(f"users at {target:.0%}: replaying {n:,} users")
            rp = build_replay(trace, replace(opts, users=n))
            hit = float(lru_curve(rp, output_blocks=output_blocks).at_pool(num_blocks))
            points[n] = UsersPoint(n, hit, rp.requests, rp.sessions)
        return points[n].hit_rate

    if rate(1) < target:
        return UsersAtTarget(target, num_blocks, 0, tuple(points.values()))
    good, bad = 1, None
    while bad is None:
        n = min(2 * good, max_users)
        if n == good:
            return UsersAtTarget(target, num_blocks, good, tuple(points.values()), capped=True)
        if rate(n) >= target:
            good = n
        else:
            bad = n
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if rate(mid) >= target else (good, mid)
    for k in BEYOND:  # the collapse past the answer, for the reader (it does not change the answer)
        if k * good <= max_users:
            rate(k * good)
    return UsersAtTarget(target, num_blocks, good, tuple(points.values()))


# ----------------------------------------------------------------------------------------------
# a Workload from a trace
# ----------------------------------------------------------------------------------------------

def unbounded_hit_blocks(replay: Replay) -> np.ndarray:
    """Per request, the blocks an unbounded cache serves (the longest prefix used before, within the cap)."""
    seen = np.zeros(max(replay.num_nodes, 1), dtype=bool)
    cap = replay.hittable_blocks()
    out = np.zeros(replay.requests, dtype=np.int64)
    for r in range(replay.requests):
        p = replay.nodes_of(r)
        probe = seen[p[: cap[r]]]
        miss = np.flatnonzero(~probe)
        out[r] = miss[0] if miss.size else probe.size
        seen[p] = True
    return out


def _first_requests(replay: Replay) -> np.ndarray:
    _, first = np.unique(replay.session, return_index=True)
    return first


def shared_prefix_blocks(replay: Replay) -> int:
    """Leading blocks that at least half of the sessions' first requests share (the most common run)."""
    firsts = [replay.nodes_of(int(i)) for i in _first_requests(replay)]
    group = [p for p in firsts if p.size]
    need = max(2, math.ceil(PREFIX_SHARE * len(firsts)))
    depth = 0
    while len(group) >= need:
        values, counts = np.unique(np.asarray([p[depth] for p in group]), return_counts=True)
        top = values[np.argmax(counts)]
        group = [p for p in group if p[depth] == top]
        if len(group) < need:
            break
        depth += 1
        group = [p for p in group if p.size > depth]
    return depth


@frozen
class TraceWorkload(Record):
    """A Workload fitted from a replay, with the figures the Workload has no field for."""

    workload: Workload
    user_fit: dict
    session_peak_tokens_p50: float | None
    requests_per_session_p50: float | None
    think_time_source: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    fields: dict = field(default_factory=dict)  # workload/fit.py's FieldFit per field: value, fitted, how
    preset: str = ""


def _per_session(replay: Replay, values: np.ndarray, how: str) -> np.ndarray:
    order = np.argsort(replay.session, kind="stable")
    bounds = np.flatnonzero(np.diff(replay.session[order])) + 1
    parts = np.split(values[order], bounds)
    return np.asarray([getattr(np, how)(p) if how != "size" else p.size for p in parts], dtype=np.float64)


def trace_observations(trace: Trace, replay: Replay) -> Observations:
    """What a Trace given as an object (no file ``workload fit`` can read) says, in the form workload/fit.py reads:
    the replayed requests' prompt lengths (main and subagent), outputs, the pauses within a session (from a
    request's end to the next) and, per user-class request, whether an unbounded cache would serve less than half
    of it (cold) and whether it is its session's first (its start: workload/fit.py counts the starts apart)."""
    obs = Observations(trace.name, f"trace ({trace.format})", "the replayed requests' prompt tokens",
                       output_field="the trace's output tokens")
    sub = trace.subagent[replay.source]
    tokens = replay.input_tokens.astype(np.float64)
    obs.user = column(tokens[~sub][tokens[~sub] > 0])
    obs.subagent = column(tokens[sub][tokens[sub] > 0])
    obs.labels_field = "the trace's subagent flag" if sub.any() else ""
    obs.output = column(replay.output_tokens[replay.output_tokens > 0])
    obs.records = trace.requests
    if replay.num_nodes:  # the ids say what the sessions share (0 blocks is a finding too)
        obs.hash_prefix_tokens = float(shared_prefix_blocks(replay) * replay.block_size)
    if trace.has_sessions:
        keep = np.zeros(trace.requests, dtype=bool)
        keep[replay.source[~sub]] = True
        obs.gaps_s = column(think_gaps_s(trace, keep))
        obs.think_field = "pauses from a request's end to its session's next request"
        ideal = unbounded_hit_blocks(replay) * replay.block_size
        user = ~sub
        first = np.zeros(user.size, dtype=bool)
        first[_first_requests(replay)] = True
        obs.cold = column(ideal[user] < COLD_SHARE * replay.input_tokens[user], flags=True)
        obs.opens = column(first[user], flags=True)  # a session's first: its start (session_turns), not invalidation
        obs.cold_basis = "the trace's block ids (an unbounded cache serves less than half of the request)"
    return obs


@frozen
class PrefixReuse:
    """A trace of lone requests sharing prefixes across users: per request an unbounded cache serves past the shared
    prefix (a warm one), the LRU capacity in KV tokens below which its first block past that prefix is evicted, and
    those requests' mean prompt tokens past the unbounded cache's hit (what a warm one prefills)."""

    distances_tokens: np.ndarray
    new_tokens: float
    requests: int


def prefix_reuse(trace: Trace, opts: ReplayOptions, prefix_tokens: int) -> PrefixReuse | None:
    """A trace without sessions, every request on its own, whose hash ids name prefixes across the whole trace
    (Mooncake's): its requests in arrival order through the one-pass LRU curve (simulate.curve, probed at the first
    block past the ``prefix_tokens`` every request shares), at the trace's own block size; the requests the replay
    sends (``opts.max_model_len``: vLLM refuses longer prompts). None for a trace with sessions (their returning
    turns are evicted by their pause: planning.lru) or without hash ids."""
    if trace.has_sessions:
        return None
    replay = build_replay(trace, replace(opts, users=None, warmup=0.0, block_size=None))
    if not replay.num_nodes:
        return None
    block = replay.block_size
    curve = lru_curve(replay, probe_depth=int(prefix_tokens) // block)
    if not curve.probe_requests.size:
        return None
    new = replay.input_tokens[curve.probe_requests] - curve.probe_seen * block
    return PrefixReuse(distances_tokens=(curve.probe_distances + 1).astype(np.float64) * block,
                       new_tokens=float(np.maximum(new, 0).mean()), requests=replay.requests)


def fit_trace_workload(trace: Trace, opts: ReplayOptions, *, fitted: WorkloadFit | None = None,
                       preset: str | None = None, given: Workload | None = None) -> TraceWorkload:
    """The Workload ``plan`` is given for this trace: ``given`` (the workload the trace's sessions were generated
    from: nothing is fitted, so a workload inside its bounds is never refused for what a refit of its own draws gives,
    e.g. a think time of 10^6 s drawn past the bound), else ``fitted`` (``servesize workload fit`` on the same file, so
    plan --workload and simulate read one workload), else workload/fit.py over ``trace_observations``."""
    replay = build_replay(trace, replace(opts, users=None, warmup=0.0))
    if given is not None:
        peaks, counts = _session_sizes(trace, replay)
        return TraceWorkload(workload=given, user_fit={}, session_peak_tokens_p50=_median(peaks),
                             requests_per_session_p50=_median(counts),
                             think_time_source="the workload the sessions were generated from", notes=(), fields={})
    if fitted is None:
        try:
            fitted = fit_observations(trace_observations(trace, replay), preset_name=preset)
        except BadInput as exc:
            raise BadInput(f"{trace.name}: {exc}") from None
    notes = list(fitted.notes)
    if not fitted.fields["think_time_s"].fitted:
        notes.append(f"think time: {fitted.fields['think_time_s'].how}; preset {fitted.preset_name}'s is kept")
    peaks, counts = _session_sizes(trace, replay)
    return TraceWorkload(workload=fitted.workload, user_fit=fitted.user_fit.to_dict(),
                         session_peak_tokens_p50=_median(peaks), requests_per_session_p50=_median(counts),
                         think_time_source=fitted.fields["think_time_s"].how, notes=tuple(notes),
                         fields={k: {"value": f.value, "fitted": f.fitted, "how": f.how}
                                 for k, f in fitted.fields.items()}, preset=fitted.preset_name)


def _session_sizes(trace: Trace, replay: Replay) -> tuple[np.ndarray, np.ndarray]:
    """Per session: its largest prompt and its request count (empty for a trace without sessions)."""
    if not trace.has_sessions:
        return np.zeros(0), np.zeros(0)
    return (_per_session(replay, replay.input_tokens.astype(np.float64), "max"),
            _per_session(replay, replay.input_tokens, "size"))


def _median(values: np.ndarray) -> float | None:
    return median(values) if values.size else None
