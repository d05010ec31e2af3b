"""Teams on one pool: several workloads' sessions in one LRU, and in one decode batch.

A **team** is a named group of users with its own workload (session lengths, prefixes, churn, think
time, output) and a queue priority. On a shared pool the engine's LRU keeps the sessions touched most
recently. A user of team t returns every think_t seconds, so its session is still resident when it
returns exactly when everything touched in the last think_t seconds fits in the pool. In that window:

- team u's users: each touched once if think_u <= think_t, else a think_t / think_u share of them
  (users_u x min(1, think_t / think_u) sessions);
- team u's subagents: every subagent request starts a session of its own, r_u per user request, so
  users_u x r_u x think_t / think_u of them.

The warm fill of working-set-model.md 2.6 is a sequence of those sessions: ``window(t)`` is team t's
stream, each request team u's with probability proportional to its sessions in the window, and within
team u a subagent's with its subagents' share. The pool then keeps c_t of team t's users warm at this
mix (team t's cache ceiling, in its own users): a team that returns rarely looks back over a long
window, in which every other team's sessions count, and the long sessions evict the short ones. With
one think time for every team the window weights are the request rates (users x (1 + r) / think).

``decoders()`` is the batch under the seed's every-user rule (every user decoding at once): a team's share of
the decoders is its share of the users, its own subagent share within it. Under the load model each team's
decode ceiling is its own plan's, shared linearly (sizing/teams.py).

The class word of ``workload.draws`` decides team and class at once: [0, 2**32) is cut into one segment
per team, of width share_t x 2**32, and each segment's first part is its subagents'. Coldness (the cold
word below f_t x 2**32), the length (ln L = mu + sigma z of the request's own class, or a bootstrap pick)
and the prefix floor and cap follow the request's team, as ``Workload.realise`` does for one workload.
One team is exactly its workload: every view of a one-team mix hands every call to the Workload, so its
fills, decode contexts and figures are the plan's own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.workload.draws import RawDraw
from servesize.workload.model import RequestClass, SessionClass, Workload

if TYPE_CHECKING:  # numpy loads where a function needs it (the CLI starts without it)
    import numpy as np

MAX_TEAMS = 16          # a fleet's teams are a table to read; past this, plan them in groups
MAX_TEAM_USERS = 10_000_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_WORDS = 2**32


@frozen
class Team:
    """A named group of ``users`` with its own ``workload``; higher ``priority`` is served first in the
    prefill queue (0 for everyone = one FCFS queue)."""

    name: str
    users: int
    workload: Workload
    priority: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        import numpy as np
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise BadInput(f"team name {self.name!r} must be 1-40 letters, digits, '_', '.' or '-' "
                           "(starting with a letter or digit)")
        if isinstance(self.users, bool) or not isinstance(self.users, (int, np.integer)) \
                or not 1 <= self.users <= MAX_TEAM_USERS:
            raise BadInput(f"team {self.name}: users must be a whole number in [1, {MAX_TEAM_USERS:,}], "
                           f"got {self.users!r}")
        object.__setattr__(self, "users", int(self.users))
        if not isinstance(self.workload, Workload):
            raise BadInput(f"team {self.name}: workload must be a Workload, got {type(self.workload).__name__}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, (int, np.integer)) \
                or abs(self.priority) > 1000:
            raise BadInput(f"team {self.name}: priority must be a whole number in [-1000, 1000], got {self.priority!r}")
        object.__setattr__(self, "priority", int(self.priority))

    @property
    def sub_ratio(self) -> float:
        """r: subagent requests per user request (0 without a subagent class)."""
        return float(self.workload.subagent_ratio) if self.workload.subagent is not None else 0.0

    @property
    def request_rate_per_s(self) -> float:
        """lambda = users x (1 + r) / think: the team's requests per second at its full size."""
        return self.users * (1.0 + self.sub_ratio) / self.workload.think_time_s

    def replace(self, **changes: Any) -> Team:
        from dataclasses import replace

        return replace(self, **changes)

    def to_dict(self) -> dict:
        out = {"name": self.name, "users": self.users, "priority": self.priority,
               "workload": self.workload.to_dict()}
        if self.source:
            out["source"] = self.source
        return out


@frozen
class _Class:
    """One request class of one team, as the mixed stream realises it."""

    team: int
    is_sub: bool
    cls: RequestClass
    prefix: float
    cap: float
    cold_threshold: int   # cold when the cold word is below this (f x 2**32; 0 never, 2**32 always)


class TeamMix:
    """Several teams' sessions on one pool, in one of its views (``window(t)``: what team t's return looks back
    over; ``decoders()``: the batch). ``TeamMix(teams)`` is the decoders' view."""

    def __init__(self, teams: tuple[Team, ...] | list[Team], users_weight=None, subagent_weight=None,
                 view: str = "decoders"):
        import numpy as np
        teams = tuple(teams)
        if not teams:
            raise BadInput("a team mix needs at least one team")
        if len(teams) > MAX_TEAMS:
            raise BadInput(f"at most {MAX_TEAMS} teams share one pool, got {len(teams)}")
        names = [t.name for t in teams]
        if len(set(names)) != len(names):
            raise BadInput(f"team names must differ: {', '.join(names)}")
        self.teams = teams
        self.view = view
        r = np.array([t.sub_ratio for t in teams])
        n = np.array([float(t.users) for t in teams])
        self.users_weight = n / (1 + r) if users_weight is None else np.asarray(users_weight, dtype=float)
        self.subagent_weight = n * r / (1 + r) if subagent_weight is None else np.asarray(subagent_weight, dtype=float)
        weights = self.users_weight + self.subagent_weight
        self.shares = weights / weights.sum()
        self._bounds, self._classes = self._segments()

    # -- views ---------------------------------------------------------------------------------
    def window(self, t: int) -> TeamMix:
        """Team ``t``'s stream: the sessions touched in one of its think times (its return sees them all)."""
        import numpy as np
        think = np.array([x.workload.think_time_s for x in self.teams])
        users = np.array([float(x.users) for x in self.teams])
        r = np.array([x.sub_ratio for x in self.teams])
        ratio = think[t] / think
        return TeamMix(self.teams, users * np.minimum(1.0, ratio), users * r * ratio, view=f"window of {self.teams[t].name}")

    def decoders(self) -> TeamMix:
        """The batch: each team in proportion to its users (its own subagent share within it)."""
        return self if self.view == "decoders" else TeamMix(self.teams)

    # -- what a team mix is ------------------------------------------------------------------
    @property
    def single(self) -> Workload | None:
        """The one team's workload when there is one team (every call is then the Workload's own)."""
        return self.teams[0].workload if len(self.teams) == 1 else None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.teams)

    @property
    def targets(self) -> np.ndarray:
        """Each team's users."""
        import numpy as np
        return np.array([t.users for t in self.teams], dtype=float)

    @property
    def total_users(self) -> int:
        return sum(t.users for t in self.teams)

    @property
    def needs_uniforms(self) -> bool:
        return any(t.workload.needs_uniforms for t in self.teams)

    def reserved_prefix_tokens(self) -> int:
        """Every team's shared prefixes, once each: teams' system prompts are taken to be distinct."""
        return sum(t.workload.reserved_prefix_tokens() for t in self.teams)

    def _key(self, of) -> tuple:
        return (tuple(self.users_weight), tuple(self.subagent_weight), tuple(of(t.workload) for t in self.teams))

    def sampling_key(self) -> tuple:
        """Everything the fill's sessions depend on."""
        if self.single is not None:
            return ("workload", self.single.sampling_key())
        return ("teams",) + self._key(lambda w: w.sampling_key())

    def lengths_key(self) -> tuple:
        """Everything the sessions' full lengths depend on (the decode contexts)."""
        if self.single is not None:
            return self.single.lengths_key()
        return ("teams",) + self._key(lambda w: w.lengths_key())

    # -- the segments of the class word ------------------------------------------------------
    def _segments(self) -> tuple[np.ndarray, tuple[_Class, ...]]:
        """Bounds [S_0 = 0, sub_0, S_1, sub_1, ..., S_T = 2**32] of the class word and the class of each
        segment: even segments a team's subagents, odd ones its users."""
        import numpy as np
        starts = np.rint(np.concatenate([[0.0], np.cumsum(self.shares)]) * _WORDS).astype(np.int64)
        starts[-1] = _WORDS
        bounds, classes = [], []
        for t, team in enumerate(self.teams):
            w = team.workload
            width = int(starts[t + 1] - starts[t])
            whole = self.users_weight[t] + self.subagent_weight[t]
            p_sub = self.subagent_weight[t] / whole if whole > 0 else 0.0
            bounds += [int(starts[t]), int(starts[t]) + int(round(p_sub * width))]
            f = w.invalidation
            cold = 0 if f <= 0 else _WORDS if f >= 1 else int(round(f * _WORDS))
            sub = w.subagent if w.subagent is not None else w.user  # a zero-width segment when there are none
            cap = float(w.max_model_len)
            classes.append(_Class(t, True, sub, float(w.subagent_prefix_tokens), cap, cold))
            classes.append(_Class(t, False, w.user, float(w.user.prefix_tokens), cap, cold))
        bounds.append(_WORDS)
        return np.array(bounds, dtype=np.int64), tuple(classes)

    def _class_index(self, raw: RawDraw) -> np.ndarray:
        import numpy as np
        inner = self.__dict__.get("_inner_bounds")
        if inner is None:  # S_1 ... S_(T-1) and the subagent bounds: below 2**32, so uint32 like the words
            inner = self.__dict__["_inner_bounds"] = self._bounds[1:-1].astype(np.uint32)
        return np.searchsorted(inner, raw.class_word, side="right")

    def _realise(self, raw: RawDraw) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(full tokens, prefix, is_cold, class index) of every request of ``raw``: each request's class parameters
        gathered by its class index (log-normal classes in one exp, empirical ones by their own bootstrap)."""
        import numpy as np
        k = self._class_index(raw)
        p = self._params
        x = raw.z * p["sigma"][k]
        x += p["mu"][k]
        full = np.exp(x, out=x).astype(np.float64)  # ln L = mu + sigma z, in float32 as Workload does
        for i in p["empirical"]:
            mask = k == i
            if mask.any():
                full[mask] = Workload._lengths(self._classes[i].cls, raw[mask])
        prefix = p["prefix"][k]
        np.maximum(full, prefix, out=full)   # the prefix floor
        np.minimum(full, p["cap"][k], out=full)  # then the cap
        is_cold = raw.cold_word.astype(np.int64) < p["cold"][k]
        return full, prefix, is_cold, k

    @property
    def _params(self) -> dict:
        """Per class: mu and sigma (float32; 0 for an empirical class), prefix, cap, cold threshold."""
        import numpy as np
        cached = self.__dict__.get("_param_table")
        if cached is None:
            c = self._classes
            shapes = [(x.cls.mu, x.cls.sigma) if isinstance(x.cls, SessionClass) else None for x in c]
            cached = {"mu": np.array([m[0] if m else 0.0 for m in shapes], dtype=np.float32),
                      "sigma": np.array([m[1] if m else 0.0 for m in shapes], dtype=np.float32),
                      "prefix": np.array([x.prefix for x in c]), "cap": np.array([x.cap for x in c]),
                      "cold": np.array([x.cold_threshold for x in c], dtype=np.int64),
                      "empirical": [i for i, m in enumerate(shapes) if m is None]}
            self.__dict__["_param_table"] = cached
        return cached

    # -- what the fill and the decoders take -------------------------------------------------
    def fill_costs(self, raw: RawDraw, state_tokens: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(cost in token-equivalents, is_cold, team of each user-class request, -1 for a subagent's): a warm
        request costs full - prefix, a cold one its full length, each plus ``state_tokens``."""
        import numpy as np
        if self.single is not None:
            cost, is_cold, is_sub = self.single.realise_costs(raw, state_tokens)
            return cost, is_cold, np.where(is_sub, -1, 0)
        full, prefix, is_cold, k = self._realise(raw)
        cost = full - np.where(is_cold, 0.0, prefix)
        cost += state_tokens
        team = np.where(k % 2 == 1, k // 2, -1)
        return cost, is_cold, team

    def full_tokens(self, raw: RawDraw) -> np.ndarray:
        """Each request's prompt length (what a decoder reads)."""
        if self.single is not None:
            return self.single.full_tokens(raw)
        return self._realise(raw)[0]

    def team_of(self, raw: RawDraw) -> np.ndarray:
        """The team of each request (subagents included)."""
        return self._class_index(raw) // 2

    def describe(self) -> str:
        return "\n".join(f"{t.name}: {t.users:,} users, {share:.1%} of the {self.view}'s sessions; "
                         + t.workload.user.describe() for t, share in zip(self.teams, self.shares))

    def __repr__(self) -> str:
        return f"TeamMix({', '.join(f'{t.name}={t.users}' for t in self.teams)}, view={self.view!r})"


def single_team(workload: Workload, users: int, name: str = "users") -> TeamMix:
    """``users`` of one workload: the plan's own stream."""
    return TeamMix((Team(name, users, workload),))
