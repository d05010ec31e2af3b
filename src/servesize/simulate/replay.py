"""A Trace -> the requests one replay sends, in arrival order, in the engine's blocks.

The choices that change a hit rate, each named and stated in every output:

- **requests**: ``main`` (a session's own requests; subagents left out: the selection the published
  reference curves use) or ``all`` (subagents as sessions of their own, started on their parent's clock);
- **align**: when each session starts. ``t0``: every session at time 0 (the published curves);
  ``stagger``: session k of S at k/S of the median session duration (arrivals spread over one session's
  length); ``trace``: the trace's own clock (traces with one, such as Mooncake's);
- **users**: None replays the trace's sessions as they are; N makes N concurrent users, each working
  through ``sessions_per_user`` sessions (default max(4, ceil(100 / N)): at least four each and a hundred in
  all) drawn (seeded) from the trace back to back, pausing the trace's
  median think time between two (and where a session's own pause is longer than ``AWAY_AFTER_S``, the user is
  away: it resumes after that median instead, ``away_shift``); the replay stops when the first user runs out of sessions, so N users
  are active throughout (on the trace's clock; a closed-loop engine replay keeps every drawn session,
  ``cut=False``, and finds where the first user runs out on its own clock: simulate/engine.py). A session
  drawn twice is a second user's copy: its blocks are its own;
- **block size**: the engine's. Trace ids are chained (one names a block and all before it), so an engine
  block is named by the trace block that holds its last token and that token's place in it: an engine
  block smaller than the trace's takes the trace block's identity and its own position in it, a larger one
  the last trace block it covers. An engine block past what the trace's ids cover (the unhashed tail of a
  prompt) matches nothing. Prompts that differ inside a trace block are not told apart below that size;
- **warm-up**: the first ``warmup`` fraction of requests (by arrival) fill the cache and are not counted.

Only full engine blocks are kept: vLLM caches nothing else (its block hashes cover full blocks only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.limits import DEFAULT_SEED, MAX_REPLAY_BLOCKS, MAX_REPLAY_SESSIONS, MAX_REPLAY_USERS, shown_number
from servesize.percentile import median
from servesize.simulate.traces import MAX_TOTAL_BLOCKS, Trace
from servesize.workload.catalogue import AWAY_AFTER_S

ALIGNS = ("t0", "stagger", "trace")
REQUEST_SELECTIONS = ("main", "all")
DEFAULT_WARMUP = 0.5           # kvcache-simulator and the kvcache.ai curves measure the second half of the requests
MIN_SESSIONS_PER_USER = 4      # each user reaches steady state after the warm-up (a modelled choice)
MIN_SESSIONS_DRAWN = 100       # a replay of few users still samples the trace's spread of sessions (a modelled choice)
MIN_REQUESTS_DRAWN = 800       # ... and enough requests that a closed loop of short sessions forgets its start (100
                               # sessions of 8 turns: what the longest-running replays drew before)
MIN_REQUESTS_PER_USER = 16     # ... and each user cycles enough times that half the run (the warm-up) is behind it
                               # and the first user to run out (the cut) is not far from the rest
MAX_USERS = MAX_REPLAY_USERS
_CHUNK = 4096                  # requests re-chunked at a time (bounds the temporary arrays)
# A turn is warm when the cache serves at least this share of what an unbounded cache would (its prefix under the
# same block rules): a modelled threshold. An LRU pool evicts a finished request's tail blocks first, so a session
# under pressure keeps its head; at a half the turn re-prefills no more than it found. On the engine validation rows
# of Qwen 3.6 27B (1,600-token blocks) a threshold of 1 (the whole prefix) gave the same users on every row
# (2026-12-06, docs/accuracy.md): a hit there is nearly all or nothing.
WARM_HIT_SHARE = 0.5


def warm_turns(hit_tokens: np.ndarray, ideal_tokens: np.ndarray) -> np.ndarray:
    """Which turns are warm (WARM_HIT_SHARE): the replay's, the engine's and the disaggregated engine's one rule."""
    return np.asarray(hit_tokens) >= WARM_HIT_SHARE * np.asarray(ideal_tokens)


def warm_depth(ideal_blocks: int) -> int:
    """The block (0-based) a turn's hit must reach to be warm, of ``ideal_blocks`` an unbounded cache would serve
    (the same rule as ``warm_turns``, for the LRU curve's reuse distances)."""
    return math.ceil(WARM_HIT_SHARE * ideal_blocks) - 1


@frozen
class ReplayOptions:
    requests: str = "main"
    align: str | None = None            # None: 'trace' for a trace with one clock and no sessions, else 't0'
    users: int | None = None
    sessions_per_user: int | None = None  # None: max(4, ceil(100 / users))
    warmup: float = DEFAULT_WARMUP
    seed: int = DEFAULT_SEED
    block_size: int | None = None       # the engine's; None: the trace's own
    max_model_len: int | None = None    # prompts longer are refused by vLLM: left out and counted
    # N users: cut where the first user runs out on the trace's clock (an open-loop replay, whose arrivals are those
    # times); False keeps every drawn session, for a closed-loop engine that finds where the first user runs out on
    # its own clock (simulate/engine.py: a request's service there is the engine's, not the trace's)
    cut: bool = True
    session_gap_s: float | None = None  # the mean pause between a user's sessions, each drawn exponential (seeded);
                                        # None: the trace's median pause between turns, every time (sessions
                                        # generated from a workload: its mean think time, drawn as its turns' are)
    resume_s: float | None = None       # the pause a user takes where the trace's own is not kept (between its
                                        # sessions when session_gap_s is None, and in place of an away pause);
                                        # None: the trace's median pause. The engine simulator beside a plan
                                        # gives the workload's mean think time, the pause the plan cycles on

    def __post_init__(self):
        if self.requests not in REQUEST_SELECTIONS:
            raise BadInput(f"--requests must be one of {', '.join(REQUEST_SELECTIONS)}, got {self.requests!r}")
        if self.align is not None and self.align not in ALIGNS:
            raise BadInput(f"--align must be one of {', '.join(ALIGNS)}, got {self.align!r}")
        if not 0 <= self.warmup < 1:
            raise BadInput(f"--warmup must be in [0, 1), got {self.warmup!r}")
        if self.users is not None and not 1 <= self.users <= MAX_USERS:
            raise BadInput(f"--users must be in [1, {MAX_USERS:,}], got {self.users!r}")
        if self.resume_s is not None and not (math.isfinite(self.resume_s) and self.resume_s >= 0):
            raise BadInput(f"the resume pause must be a finite number of seconds >= 0, got {self.resume_s!r}")
        if self.sessions_per_user is not None and not 1 <= self.sessions_per_user <= 10_000:
            raise BadInput(f"--sessions-per-user must be in [1, 10000], got {self.sessions_per_user!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 1 << 63:
            raise BadInput(f"--seed must be a whole number in [0, 2**63), got {shown_number(self.seed)}")
        if self.block_size is not None and not 1 <= self.block_size <= 1 << 16:
            raise BadInput(f"the block size must be in [1, 65536] tokens, got {self.block_size!r}")
        if self.session_gap_s is not None and not 0 <= self.session_gap_s <= 1e6:
            raise BadInput(f"the pause between sessions must be in [0, 1e6] s, got {self.session_gap_s!r}")


@dataclass(frozen=True, eq=False)
class Replay:
    """Requests in arrival order: ``nodes[offsets[i]:offsets[i + 1]]`` are request i's full engine blocks
    (chained ids, ``num_nodes`` of them in all); requests from ``measured_from`` on are counted."""

    block_size: int
    arrival_s: np.ndarray
    service_s: np.ndarray       # NaN where the trace does not say
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    session: np.ndarray         # replay session index
    user: np.ndarray            # -1 unless users were made
    source: np.ndarray          # the trace request each one replays
    subagent: np.ndarray        # whether it is a subagent's request (the trace's flag)
    nodes: np.ndarray
    offsets: np.ndarray
    num_nodes: int
    measured_from: int
    sessions: int
    choices: dict = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return int(self.arrival_s.size)

    def nodes_of(self, i: int) -> np.ndarray:
        return self.nodes[self.offsets[i]:self.offsets[i + 1]]

    def hittable_blocks(self) -> np.ndarray:
        """Per request, the full blocks a hit may cover: vLLM recomputes the last prompt token, so at most
        (input - 1) // block_size (kv_cache_manager.get_computed_blocks: max_cache_hit_length = num_tokens - 1)."""
        return np.minimum(np.diff(self.offsets), np.maximum(self.input_tokens - 1, 0) // self.block_size)

    def measured_tokens(self) -> int:
        return int(self.input_tokens[self.measured_from:].sum())


# ----------------------------------------------------------------------------------------------
# which requests, and when each session starts
# ----------------------------------------------------------------------------------------------

def _default_align(trace: Trace) -> str:
    return "t0" if trace.has_sessions else "trace"


def _check_align(trace: Trace, align: str, users: int | None) -> None:
    if align == "trace" and trace.clock != "trace":
        raise BadInput(f"{trace.name}: its sessions have no common clock (times count from each session's start); "
                       "use --align t0 or --align stagger")
    if align != "trace" and not trace.has_sessions:
        raise BadInput(f"{trace.name}: its requests belong to no sessions, so sessions cannot be aligned; use --align trace")
    if users is not None and not trace.has_sessions:
        raise BadInput(f"{trace.name}: its requests belong to no sessions, so users cannot be made from it; "
                       "replay it on its own clock (without --users)")
    if users is not None and align == "trace":
        raise BadInput("--users makes its own clock: use --align t0 or --align stagger with it")


def _session_parts(trace: Trace, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every session: its main session (itself, or a subagent's parent) and its start on that one's clock."""
    n = len(trace.sessions)
    root = np.arange(n, dtype=np.int64)
    start = np.zeros(n, dtype=np.float64)
    for k, info in enumerate(trace.sessions):
        if info.parent >= 0:
            root[k], start[k] = root[info.parent], start[info.parent] + info.start_s
    if trace.clock == "trace":  # one clock: a session starts at its first request
        first = np.full(n, np.inf)
        np.minimum.at(first, trace.session[keep], trace.t_s[keep])
        start = start - np.where(np.isfinite(first), first, 0.0)
    return root, start


def _durations(trace: Trace, keep: np.ndarray, root: np.ndarray, start: np.ndarray,
               shift: np.ndarray | None = None) -> np.ndarray:
    """Seconds from a main session's start to its last request's end (service included where known), less the
    ``shift`` of its requests' times where given (``away_shift``)."""
    idx = np.flatnonzero(keep)
    ends = start[trace.session[idx]] + trace.t_s[idx] + np.nan_to_num(trace.service_s[idx])
    if shift is not None:
        ends = ends - shift[idx]
    out = np.zeros(len(trace.sessions))
    np.maximum.at(out, root[trace.session[idx]], ends)
    return out


def think_gaps_s(trace: Trace, keep: np.ndarray) -> np.ndarray:
    """Every pause between one request's end and the next request of its session (>= 0)."""
    idx = np.flatnonzero(keep)
    if idx.size < 2:
        return np.zeros(0)
    order = idx[np.lexsort((trace.t_s[idx], trace.session[idx]))]
    same = trace.session[order][1:] == trace.session[order][:-1]
    gaps = trace.t_s[order][1:] - trace.t_s[order][:-1] - np.nan_to_num(trace.service_s[order][:-1])
    return np.maximum(gaps[same], 0.0)


def away_shift(trace: Trace, keep: np.ndarray, root: np.ndarray, start: np.ndarray, resume_s: float) -> np.ndarray:
    """Per trace request (0 where not kept), how much earlier a replay's user sends it: every idle stretch of its main
    session (from the end of all its work so far to its next request) longer than ``AWAY_AFTER_S`` is the user away
    (workload.catalogue), and the user resumes after ``resume_s`` instead, as it starts its next session. The fit
    reads the same pauses as away (workload.fit), so a user is, on both sides, someone at work."""
    out = np.zeros(trace.requests, dtype=np.float64)
    idx = np.flatnonzero(keep)
    if idx.size < 2:
        return out
    group = root[trace.session[idx]]
    at = start[trace.session[idx]] + trace.t_s[idx]
    order = np.lexsort((at, group))
    g, a = group[order], at[order]
    end = a + np.nan_to_num(trace.service_s[idx][order])
    first = np.ones(g.size, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    # the end of all work so far, within each main session: a running maximum restarted at each group's first
    span = float(end.max() - a.min()) + 1.0
    rank = np.cumsum(first) - 1
    done = np.maximum.accumulate(end - a.min() + rank * span) - rank * span + a.min()
    idle = np.zeros(g.size)
    idle[1:] = a[1:] - done[:-1]
    idle[first] = 0.0
    excess = np.where(idle > AWAY_AFTER_S, idle - resume_s, 0.0)
    total = np.cumsum(excess)
    base = np.repeat(total[first] - excess[first], np.diff(np.append(np.flatnonzero(first), g.size)))
    out[idx[order]] = total - base
    return out


def think_gap_s(trace: Trace, keep: np.ndarray) -> float:
    """The median pause between one request's end and the next request of its session (0 if none)."""
    gaps = think_gaps_s(trace, keep)
    return median(gaps) if gaps.size else 0.0


@dataclass
class _Plan:
    """Which trace requests are sent, when, as whose, in which copy of the id space."""

    source: np.ndarray
    arrival: np.ndarray
    session: np.ndarray
    user: np.ndarray
    copy: np.ndarray
    sessions: int
    choices: dict


def _as_is(trace: Trace, keep: np.ndarray, align: str, root: np.ndarray, start: np.ndarray) -> _Plan:
    idx = np.flatnonzero(keep)
    mains = np.unique(root[trace.session[idx]])
    offset = np.zeros(len(trace.sessions))
    choices: dict = {}
    if align == "stagger":
        duration = median(_durations(trace, keep, root, start)[mains])
        offset[mains] = np.arange(mains.size) * (duration / max(mains.size, 1))
        choices["stagger_s"] = duration / max(mains.size, 1)
        choices["median_session_s"] = duration
    s = trace.session[idx]
    arrival = trace.t_s[idx] if align == "trace" else offset[root[s]] + start[s] + trace.t_s[idx]
    zeros = np.zeros(idx.size, dtype=np.int64)
    return _Plan(idx, arrival, s.astype(np.int64), zeros - 1, zeros, int(np.unique(s).size), choices)


def _users(trace: Trace, keep: np.ndarray, opts: ReplayOptions, root: np.ndarray, start: np.ndarray) -> _Plan:
    """N users, each running ``sessions_per_user`` drawn sessions back to back, cut where the first user runs out.

    Sessions are drawn without replacement in rounds of a seeded permutation; round c's draw of a session is
    copy c (its blocks are its own: two users never share a conversation)."""
    assert opts.users is not None
    idx = np.flatnonzero(keep)
    sess_root = root[trace.session[idx]]
    order = np.argsort(sess_root, kind="stable")
    grouped, keys = idx[order], sess_root[order]
    mains = np.unique(keys)
    lo, hi = np.searchsorted(keys, mains, "left"), np.searchsorted(keys, mains, "right")
    n_users = opts.users
    per_session = float(np.mean(hi - lo)) if mains.size else 1.0  # requests a drawn session brings, on average
    per_user = opts.sessions_per_user or max(MIN_SESSIONS_PER_USER, -(-MIN_SESSIONS_DRAWN // n_users),
                                             math.ceil(MIN_REQUESTS_DRAWN / (n_users * max(per_session, 1.0))),
                                             math.ceil(MIN_REQUESTS_PER_USER / max(per_session, 1.0)))
    need = n_users * per_user
    if need > MAX_REPLAY_SESSIONS:
        raise BadInput(f"--users {n_users:,} x {per_user:,} sessions each draws {need:,} sessions, past the {MAX_REPLAY_SESSIONS:,} "
                       "of one replay (MAX_REPLAY_SESSIONS); use fewer users or --sessions-per-user")
    rng = np.random.default_rng(opts.seed)
    picks = np.concatenate([rng.permutation(mains.size) for _ in range(-(-need // mains.size))])[:need]
    copy_of_draw = np.arange(need, dtype=np.int64) // mains.size
    resume = think_gap_s(trace, keep) if opts.resume_s is None else float(opts.resume_s)
    shift = away_shift(trace, keep, root, start, resume)
    durations = _durations(trace, keep, root, start, shift)[mains[picks]]
    if opts.session_gap_s is None:
        gap: float | np.ndarray = resume
    else:  # drawn, so that users of identical short sessions do not run in lock-step
        gap = rng.exponential(float(opts.session_gap_s), need) if opts.session_gap_s > 0 else np.zeros(need)
    median_s = median(_durations(trace, keep, root, start, shift)[mains])
    first = np.arange(n_users) * (median_s / n_users) if opts.align == "stagger" else np.zeros(n_users)
    lengths = (durations + gap).reshape(n_users, per_user)
    starts = first[:, None] + np.cumsum(lengths, axis=1) - lengths
    stop = float(np.min(starts[:, -1] + durations.reshape(n_users, per_user)[:, -1])) if opts.cut else math.inf
    counts = hi[picks] - lo[picks]
    _refuse_blocks(int(np.add.reduceat(trace.input_tokens[grouped] // (opts.block_size or trace.block_size), lo)[picks].sum()),
                   opts.block_size or trace.block_size, f"--users {n_users:,}")
    draw = np.repeat(np.arange(need, dtype=np.int64), counts)
    within = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    source = grouped[np.repeat(lo[picks], counts) + within]
    s_local = trace.session[source]
    arrival = starts.ravel()[draw] + start[s_local] + trace.t_s[source] - shift[source]
    inside = arrival <= stop
    # a draw's subagents are sessions of their own, apart from the draw's main session
    _, session = np.unique((draw * len(trace.sessions) + s_local)[inside], return_inverse=True)
    session = session.astype(np.int64).ravel()
    choices = {"users": n_users, "sessions_per_user": per_user, "session_gap_s": float(np.mean(gap)), "stop_s": stop if opts.cut else None,
               "until_first_out": not opts.cut,  # how a closed-loop engine measures it (simulate/engine.py)
               "sessions_drawn": need, "distinct_sessions_drawn": int(min(need, mains.size))}
    return _Plan(source[inside], arrival[inside], session, (draw // per_user)[inside], copy_of_draw[draw][inside],
                 int(session.max()) + 1 if session.size else 0, choices)


# ----------------------------------------------------------------------------------------------
# engine blocks
# ----------------------------------------------------------------------------------------------

def _mode(trace_block: int, engine_block: int) -> tuple[str, int]:
    if engine_block % trace_block == 0:
        return "coarse", engine_block // trace_block
    if trace_block % engine_block == 0:
        return "fine", trace_block // engine_block
    return "general", 0


def _chunk_nodes(trace: Trace, req: np.ndarray, counts: np.ndarray, block: int, mode: str, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw engine ids of the full blocks of ``req`` (``counts`` each) and which of them the trace's ids cover."""
    total = int(counts.sum())
    j = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    start = np.repeat(trace.offsets[req], counts)
    length = np.repeat(trace.offsets[req + 1] - trace.offsets[req], counts)
    if mode == "fine":
        src, sub = j // r, j % r
    elif mode == "coarse":
        src, sub = (j + 1) * r - 1, np.zeros_like(j)
    else:  # named by the trace block holding the engine block's last token, and where in it that token is
        last = (j + 1) * block - 1
        src, sub = last // trace.block_size, last % trace.block_size
    valid = src < length
    native = trace.blocks[start + np.minimum(src, np.maximum(length - 1, 0))].astype(np.int64)
    scale = r if mode == "fine" else (trace.block_size if mode == "general" else 1)
    return native * scale + sub, valid


def _refuse_blocks(total: int, block: int, what: str) -> None:
    """Refuse before allocating a replay of more than ``MAX_REPLAY_BLOCKS`` engine blocks (its memory)."""
    if total > MAX_REPLAY_BLOCKS:
        raise BadInput(f"{what} sends {total:,} blocks of {block} tokens, past the {MAX_REPLAY_BLOCKS:,} one replay holds "
                       "in memory (MAX_REPLAY_BLOCKS); use fewer users, a larger --block-size or a part of the trace")


def _engine_nodes(trace: Trace, source: np.ndarray, copy: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Full engine blocks of each sent request -> chained ids (int32), their offsets and how many ids exist.

    Blocks the trace's ids do not cover get ids of their own (they match nothing)."""
    mode, r = _mode(trace.block_size, block)
    per_copy = trace.num_ids * (r if mode == "fine" else trace.block_size if mode == "general" else 1)
    full = trace.input_tokens[source] // block
    offsets = np.zeros(source.size + 1, dtype=np.int64)
    np.cumsum(full, out=offsets[1:])
    fresh = per_copy * (int(copy.max()) + 1 if copy.size else 1)
    _refuse_blocks(int(offsets[-1]), block, "this replay")
    raw = np.empty(int(offsets[-1]), dtype=np.int64)
    for lo in range(0, source.size, _CHUNK):
        hi = min(lo + _CHUNK, source.size)
        counts = full[lo:hi]
        if not counts.sum():
            continue
        node, valid = _chunk_nodes(trace, source[lo:hi], counts, block, mode, r)
        node += np.repeat(copy[lo:hi], counts) * per_copy
        missing = np.flatnonzero(~valid)
        node[missing] = fresh + np.arange(missing.size)
        fresh += missing.size
        raw[offsets[lo]:offsets[hi]] = node
    if mode == "general" or fresh > MAX_TOTAL_BLOCKS:  # sparse ids: number them densely
        uniq, inverse = np.unique(raw, return_inverse=True)
        raw, fresh = inverse.ravel(), int(uniq.size)
    if fresh > MAX_TOTAL_BLOCKS:
        raise BadInput(f"this replay has more than {MAX_TOTAL_BLOCKS:,} distinct blocks; use fewer users or a larger block size")
    return raw.astype(np.int32), offsets, fresh


# ----------------------------------------------------------------------------------------------
# the entry point
# ----------------------------------------------------------------------------------------------

def build_replay(trace: Trace, opts: ReplayOptions = ReplayOptions()) -> Replay:
    """The requests a replay sends, in arrival order, with the choices that made them (``Replay.choices``)."""
    align = opts.align or _default_align(trace)
    _check_align(trace, align, opts.users)
    keep = ~trace.subagent if opts.requests == "main" else np.ones(trace.requests, dtype=bool)
    skipped: dict = {}
    if opts.max_model_len is not None:
        longer = keep & (trace.input_tokens > opts.max_model_len)
        if longer.any():
            skipped["prompts longer than max_model_len (vLLM refuses them)"] = int(longer.sum())
        keep &= ~longer
    if not keep.any():
        raise BadInput(f"{trace.name}: no requests left to replay (--requests {opts.requests}"
                       + (f", --max-model-len {opts.max_model_len:,}" if opts.max_model_len else "") + ")")
    root, start = _session_parts(trace, keep)
    plan = _users(trace, keep, opts, root, start) if opts.users is not None else _as_is(trace, keep, align, root, start)
    order = np.lexsort((plan.source, plan.session, plan.arrival))
    block = opts.block_size or trace.block_size
    source, copy = plan.source[order], plan.copy[order]
    nodes, offsets, num_nodes = _engine_nodes(trace, source, copy, block)
    arrival = plan.arrival[order]
    arrival = arrival - (arrival.min() if arrival.size else 0.0)
    measured_from = int(math.floor(source.size * opts.warmup))
    choices = {"trace": trace.name, "format": trace.format, "requests": opts.requests, "align": align,
               "warmup": opts.warmup, "block_size": block, "trace_block_size": trace.block_size,
               "replayed_requests": int(source.size), "measured_requests": int(source.size - measured_from),
               "sessions": plan.sessions, "seed": opts.seed, **plan.choices}
    if skipped:
        choices["skipped"] = skipped
    return Replay(block_size=block, arrival_s=arrival, service_s=trace.service_s[source], input_tokens=trace.input_tokens[source],
                  output_tokens=trace.output_tokens[source], session=plan.session[order].astype(np.int32),
                  user=plan.user[order].astype(np.int32), source=source, subagent=trace.subagent[source], nodes=nodes, offsets=offsets,
                  num_nodes=num_nodes, measured_from=measured_from, sessions=plan.sessions, choices=choices)


def describe_choices(choices: dict) -> str:
    """One line: the choices a hit rate depends on."""
    parts = [f"requests {choices['requests']}", f"align {choices['align']}",
             f"warm-up {choices['warmup']:.0%} of {choices['replayed_requests']:,} requests",
             f"{choices['block_size']}-token blocks"]
    if "users" in choices:
        cut = (f"cut at {choices['stop_s']:,.0f} s" if choices["stop_s"] is not None else
               "measured until the first user runs out")
        parts.insert(0, f"{choices['users']:,} users x {choices['sessions_per_user']} sessions "
                        f"(gap {choices['session_gap_s']:.0f} s, {cut})")
    if "stagger_s" in choices:
        parts.append(f"stagger {choices['stagger_s']:.2f} s")
    return ", ".join(parts)
