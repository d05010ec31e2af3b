"""A servesize Workload -> sessions of requests, in the same Trace every reader makes.

Each request appends the previous reply (``output_tokens``) and a new turn (``warm_turn_tokens``) to
the one before, so every prompt extends the previous one. A session's context of L tokens drawn from its
class (log-normal: ln L ~ N(ln median, sigma); empirical: bootstrapped) is its prompt at one of its
requests drawn uniformly, so it starts that many turns' growth earlier (Workload.session_start_tokens,
which the plan prices session starts by), at least its class's shared prefix plus one turn and at most
max_model_len less the output. A subagent's session has as many requests as its parent's share of them
(turns x r / (1 + r), at least one). A session ends after ``turns_per_session`` requests or when the
next would pass max_model_len. A user's turns follow one another after a think time (the workload's
distribution, mean ``think_time_s``). A turn is sent with r subagent requests on average (r =
``subagent_ratio``: floor(r), and one more with probability r - floor(r)), at the same moment and with no think
time of their own (DESIGN.md: "send a turn (the new tail, plus any subagent requests)"; the plan counts N (1 + r)
requests a cycle), each a turn of the session's subagent: a session of its own with its class's prefix, started on
its parent's clock (the engine simulator sends them with the turn, not after its answer). With
probability ``invalidation`` a turn matches nothing (a new chain from its first block). Every user-class
session shares the user prefix's blocks, every subagent the subagent prefix's (the user prefix when
``subagents_share_prefix``).

The trace has one session per conversation and no service times: ``simulate``'s users (replay.py) decide
how many run at once and when each starts, as they do for a real trace.
"""

from __future__ import annotations

import math

import numpy as np

from servesize.errors import BadInput
from servesize.limits import MAX_SYNTHETIC_SESSIONS
from servesize.simulate.traces import MADE_BLOCK_SIZE, PrefixChains, ReadReport, SessionInfo, Trace, TraceBuilder
from servesize.workload.model import MAX_SESSION_TURNS, EmpiricalClass, Workload

DEFAULT_TURNS = 8        # requests per session where the workload gives none (Workload.session_turns): a modelled choice
DEFAULT_REQUESTS = 1_600  # requests generated when not told (200 sessions of DEFAULT_TURNS): enough for the
                          # closed loop to forget its synchronised start at the users searched
MAX_SESSIONS = MAX_SYNTHETIC_SESSIONS


def default_sessions(workload: Workload) -> int:
    """Sessions to generate when not told: DEFAULT_REQUESTS requests' worth at the workload's session length."""
    return max(1, min(MAX_SESSIONS, -(-DEFAULT_REQUESTS // (workload.session_turns or DEFAULT_TURNS))))


def _length(cls, rng: np.random.Generator) -> float:
    if isinstance(cls, EmpiricalClass):
        return float(cls.lengths[rng.integers(cls.lengths.size)])
    return math.exp(math.log(cls.median_tokens) + cls.sigma * rng.standard_normal())


class _Session:
    def __init__(self, index: int, kind: str, tokens: int, prefix: int, shared: str):
        self.index, self.kind, self.tokens, self.prefix, self.shared = index, kind, tokens, prefix, shared
        self.turns = 0
        self.t = 0.0


def _new(b: TraceBuilder, workload: Workload, kind: str, rng: np.random.Generator, turns: int, parent: int = -1,
         start: float = 0.0) -> _Session:
    cls = workload.user if kind == "user" else workload.subagent
    assert cls is not None
    prefix = workload.user.prefix_tokens if kind == "subagent" and workload.subagents_share_prefix else cls.prefix_tokens
    lo = prefix + workload.warm_turn_tokens
    hi = workload.max_model_len - workload.output_tokens
    if lo > hi:
        raise BadInput(f"max_model_len ({workload.max_model_len:,}) cannot hold the {kind} prefix, one turn and the output")
    tokens = int(min(workload.session_start_tokens(_length(cls, rng), rng.integers(turns), prefix), hi))
    shared = "user" if kind == "user" or workload.subagents_share_prefix else "subagent"
    index = b.add_session(SessionInfo(key=f"{kind}-{len(b.sessions)}", parent=parent, start_s=start, prefix_tokens=prefix))
    return _Session(index, kind, tokens, prefix, shared)


def synthesize(workload: Workload, *, sessions: int | None = None, turns_per_session: int | None = None,
               seed: int = 0, block_size: int = MADE_BLOCK_SIZE, name: str = "synthetic") -> Trace:
    """``sessions`` user sessions (``default_sessions``) of ``turns_per_session`` requests each (the workload's ``session_turns``, else
    DEFAULT_TURNS), their subagents' turns among them."""
    if turns_per_session is None:
        turns_per_session = workload.session_turns or DEFAULT_TURNS
    if sessions is None:
        sessions = default_sessions(workload)
    if not 1 <= sessions <= MAX_SESSIONS:
        raise BadInput(f"sessions must be in [1, {MAX_SESSIONS:,}], got {sessions!r}")
    if not 1 <= turns_per_session <= MAX_SESSION_TURNS:
        raise BadInput(f"turns per session must be in [1, {MAX_SESSION_TURNS}], got {turns_per_session!r}")
    rng = np.random.default_rng(seed)
    report = ReadReport(name, format="synthetic")
    report.notes.append(f"generated from the workload: {sessions:,} sessions of {turns_per_session} turns, seed {seed}")
    b = TraceBuilder("synthetic", block_size, "session", report)
    chains = PrefixChains(block_size)
    ratio = float(workload.subagent_ratio) if workload.subagent is not None else 0.0
    whole, part = math.floor(ratio), ratio - math.floor(ratio)
    grow = workload.output_tokens + workload.warm_turn_tokens
    # a subagent session's requests, of its parent's (the conversation's share r / (1 + r) of them)
    sub_turns = max(1, math.ceil(turns_per_session * workload.subagent_probability))
    for _ in range(sessions):
        user = _new(b, workload, "user", rng, turns_per_session)
        sub: _Session | None = None
        now = 0.0  # on the user session's clock
        while user.turns < turns_per_session and user.tokens + workload.output_tokens <= workload.max_model_len:
            _send(b, chains, workload, user, now, grow, rng)
            for _ in range(whole + int(part > 0 and rng.random() < part)):  # the subagent requests sent with it
                if sub is None or sub.tokens + grow + workload.output_tokens > workload.max_model_len:
                    sub = _new(b, workload, "subagent", rng, sub_turns, parent=user.index, start=now)
                    sub.t = now  # its start on the parent's clock; its requests count from there
                _send(b, chains, workload, sub, now - sub.t, grow, rng)
                user.turns += 1  # a subagent turn is one of the conversation's requests
            now += float(workload.think_times(rng))  # the workload's think-time distribution (log-normal when fitted)
    return b.build(name)


def _send(b: TraceBuilder, chains: PrefixChains, workload: Workload, s: _Session, t: float, grow: int,
          rng: np.random.Generator) -> None:
    """Session ``s``'s next request at ``t`` on its own clock; its prompt then grows by ``grow`` (a reply and a
    turn)."""
    salted = s.turns > 0 and rng.random() < workload.invalidation
    ids = chains.ids(s.index, s.tokens, shared=s.shared, shared_tokens=s.prefix, restart=salted)
    b.add_request(s.index, t, s.tokens, workload.output_tokens, ids, subagent=s.kind == "subagent")
    s.turns += 1
    s.tokens += grow
