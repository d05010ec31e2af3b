"""Warm fills of many pools in one pass over the random numbers.

``warm_capacity`` fills one pool. A fleet search asks the same question of hundreds of pools that
differ only in size: for one request stream and one per-session state charge, fill k's sessions and
their running cost are the same whatever the pool (common random numbers, ``workload.draws``), and a
pool whose budget is B keeps the sessions whose running cost is at most B. So one pass over the bank's
column blocks answers every budget at once: each (fill, budget) pair is resolved in the block where
the fill's running cost first passes the budget. The counting is ``warm_capacity``'s own
(``planning.warm_capacity.FillPass``, one pool being one budget there), so its counts are exactly
``warm_capacity``'s; this module adds the teams, the caps and the percentiles.

A fill drops out once its running cost passes the largest budget, or once every team it counts has
``caps`` warm users: past a cap the count is only known to be at least the cap. Percentiles are then
taken of min(count, cap), which is exact below the cap, and a decision "p5 >= V" is exact for every
V <= cap x t, t the interpolation weight of numpy's p5 (``cap_for``): a cap of V / t never misjudges V.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.percentile import percentile_position, percentiles
from servesize.planning.load import think_time_of
from servesize.planning.warm_capacity import _MAX_DRAWS, PERCENTILES, FillPass, Percentiles
from servesize.workload.draws import RandomBank
from servesize.workload.teams import TeamMix

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_MAX_CELLS = 24_000_000  # fills x budgets x teams of one run's counts (int32): about 100 MB


def cap_for(target: float, fills: int) -> float:
    """The cap under which "p5 >= V" is decided exactly for every V <= ``target``.

    numpy's linear p5 of F values is x_i + t (x_{i+1} - x_i), i = floor(0.05 (F - 1)), t its fraction.
    Capping at c changes it only when x_{i+1} > c, and then it is at least t x c: so c = target / t
    (t > 0), or the target itself when t = 0 (the p5 is then one order statistic)."""
    position = percentile_position(fills, PERCENTILES[0])
    t = position - math.floor(position)
    if t <= 1e-12:
        return float(math.ceil(target))
    return float(math.ceil(target / t))


@frozen
class WarmAtBudgets:
    """Warm users of each team, p5 / p50 / p95 over fills, in each of ``budgets`` (one engine's pool each)."""

    budgets: np.ndarray        # (Q,) token budgets (pool minus the reserved prefixes), as asked
    percentiles: np.ndarray    # (3, Q, T): p5, p50, p95 of min(count, cap)
    caps: np.ndarray           # (T,) the cap per team (inf: none)
    exact: np.ndarray          # (3, Q, T): False where the figure is only a lower bound (a cap was reached)
    sessions_drawn: int        # columns of the bank the pass reached

    def p5(self, q: int, team: int = 0) -> float:
        return float(self.percentiles[0, q, team])

    def users(self, q: int, team: int = 0) -> Percentiles:
        a, b, c = self.percentiles[:, q, team]
        return Percentiles(float(a), float(b), float(c))


def warm_at_budgets(mix: TeamMix, bank: RandomBank, fills: int, budgets: ArrayLike, state_tokens: float = 0.0,
                    caps: ArrayLike | None = None, max_draws: int = _MAX_DRAWS) -> WarmAtBudgets:
    """Warm users of each team of ``mix`` in pools of each of ``budgets`` tokens (one engine each: the pool
    minus the reserved prefixes), every session charged ``state_tokens`` on top of its unique tokens.

    ``caps`` (one per team, default none): a fill stops once every team has that many warm users; figures
    past a cap are lower bounds (``exact``); a cap of 0 leaves a team uncounted. ``max_draws`` bounds the
    sessions of one fill, as in ``warm_capacity``."""
    return warm_at_charges(mix, bank, fills, [(budgets, state_tokens)], caps, max_draws)[0]


def warm_at_charges(mix: TeamMix, bank: RandomBank, fills: int, charges: Sequence[tuple[ArrayLike, float]],
                    caps: ArrayLike | None = None, max_draws: int = _MAX_DRAWS) -> list[WarmAtBudgets]:
    """``warm_at_budgets`` for several state charges at once: ``charges`` is [(budgets, state_tokens), ...].

    The sessions are realised once per column block and each charge adds its own state tokens to the same
    unique-token costs (the sum ``realise_costs`` makes), so every charge gets its own pass's exact counts."""
    if isinstance(fills, bool) or not isinstance(fills, (int, np.integer)) or fills < 1:
        raise BadInput(f"warm fills must be an integer >= 1, got {fills!r}")
    if mix.needs_uniforms and not bank.uniforms:
        raise BadInput("warm fills: the random bank was drawn without the bootstrap uniforms an empirical class needs")
    teams = len(mix.teams)
    cap = np.full(teams, np.inf) if caps is None else np.asarray(caps, dtype=float).ravel()
    if cap.size != teams or np.any(cap < 0):
        raise BadInput(f"warm fills: one cap >= 0 per team ({teams}) (0: that team is not counted), got {caps!r}")
    counted = max(1, int(np.count_nonzero(cap > 0)))
    runs: list[_Run] = []
    spans: list[range] = []
    for budgets, state in charges:
        asked = np.asarray(budgets, dtype=float).ravel()
        step = max(1, _MAX_CELLS // (int(fills) * teams * counted))  # a run's counts stay under _MAX_CELLS cells
        spans.append(range(len(runs), len(runs) + max(1, -(-asked.size // step))))
        runs += [_Run(asked[i:i + step], float(state), int(fills), teams, cap) for i in range(0, max(asked.size, 1), step)]
    c0 = 0
    while any(run.active.size for run in runs):
        if c0 >= max_draws:
            raise BadInput(f"warm capacity: a fill holds more than {max_draws:,} sessions; "
                           "the pool is too large for this workload's session sizes to simulate")
        rows = np.unique(np.concatenate([run.active for run in runs]))
        raw = bank.take(0, int(fills), c0, c0 + bank.COLS)
        if rows.size < fills:
            raw = raw[rows]
        unique, is_cold, team = mix.fill_costs(raw, 0.0)
        where = np.full(int(fills), -1)
        where[rows] = np.arange(rows.size)
        for run in runs:
            if run.active.size:
                at = where[run.active]
                run.step(unique[at] + run.state_tokens, is_cold[at], team[at])
        c0 += bank.COLS
    return [_joined([runs[i].result(c0) for i in span]) for span in spans]


def _joined(parts: list[WarmAtBudgets]) -> WarmAtBudgets:
    """One charge's budgets, counted in several runs, as one result."""
    if len(parts) == 1:
        return parts[0]
    return WarmAtBudgets(np.concatenate([p.budgets for p in parts]), np.concatenate([p.percentiles for p in parts], axis=1),
                         parts[0].caps, np.concatenate([p.exact for p in parts], axis=1),
                         max(p.sessions_drawn for p in parts))


class _Run:
    """One state charge's pass: its sorted budgets, its running state and the fills still filling."""

    def __init__(self, asked: np.ndarray, state_tokens: float, fills: int, teams: int, cap: np.ndarray):
        if asked.size == 0 or not np.all(np.isfinite(asked)):
            raise BadInput("warm fills need at least one finite budget")
        self.asked, self.state_tokens, self.cap = asked, state_tokens, cap
        self.order = np.argsort(asked, kind="stable")
        self.state = FillPass(fills, asked[self.order], teams)
        self.active = np.arange(fills)

    def step(self, cost: np.ndarray, is_cold: np.ndarray, team: np.ndarray) -> None:
        state, active = self.state, self.active
        warm = ~is_cold  # a cold session is held, never a warm user
        state.add(active, cost, [warm & (team == t) for t in range(self.cap.size)])
        capped = np.all(state.running[active] >= self.cap, axis=1)
        state.close(active[capped])
        self.active = active[state.open(active) & ~capped]

    def result(self, drawn: int) -> WarmAtBudgets:
        counted = np.minimum(self.state.counts, self.cap)  # past a cap only a lower bound is known: min(count, cap)
        columns = counted.reshape(counted.shape[0], -1)  # (fills, Q x T): each pool and team's counts over fills
        pct = np.array([percentiles(columns[:, j], PERCENTILES) for j in range(columns.shape[1])]).T.reshape(
            (len(PERCENTILES), *counted.shape[1:]))
        exact = _exactness(counted, self.cap, pct)
        unsort = np.empty_like(self.order)
        unsort[self.order] = np.arange(self.order.size)
        return WarmAtBudgets(self.asked, pct[:, unsort], self.cap, exact[:, unsort], drawn)


def _exactness(counted: np.ndarray, cap: np.ndarray, pct: np.ndarray) -> np.ndarray:
    """Where each percentile is the uncapped one: both order statistics it interpolates lie below the cap."""
    fills = counted.shape[0]
    below = np.count_nonzero(counted < cap, axis=0)  # (Q, T)
    out = np.empty(pct.shape, dtype=bool)
    for i, p in enumerate(PERCENTILES):
        upper = math.ceil(percentile_position(fills, p))  # the upper order statistic (0-based)
        out[i] = below > upper
    return out


def warm_of_teams(mix: TeamMix, bank: RandomBank, fills: int, charges: Sequence[tuple[ArrayLike, float]],
                  targets: ArrayLike | None = None, max_draws: int = _MAX_DRAWS) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each team's cache ceiling in each budget of each state charge (``charges``: [(budgets, state_tokens)]):
    per charge, (percentiles (3, Q, T), exact (3, Q, T)).

    Team t's figure is its users among the sessions of its own window (``mix.window(t)``: what is touched
    in one of its think times); teams with one think time share a window, so one pass counts them all. One
    team is one pass of its workload. ``targets`` (users per team): count only as far as deciding
    "p5 >= target" needs (``cap_for``)."""
    teams = len(mix.teams)
    out = [(np.zeros((len(PERCENTILES), np.size(b), teams)), np.ones((len(PERCENTILES), np.size(b), teams), bool))
           for b, _ in charges]
    windows: dict[float, list[int]] = {}
    for t, team in enumerate(mix.teams):
        windows.setdefault(think_time_of(team.workload), []).append(t)
    for members in windows.values():
        caps = np.zeros(teams)
        for t in members:
            caps[t] = np.inf if targets is None else cap_for(float(np.asarray(targets)[t]), fills)
        stream = mix.window(members[0]) if teams > 1 else mix
        for (pct, exact), got in zip(out, warm_at_charges(stream, bank, fills, charges, caps, max_draws)):
            pct[:, :, members] = got.percentiles[:, :, members]
            exact[:, :, members] = got.exact[:, :, members]
    return out
