"""Several teams on one deployment: who stays warm, each team's ceilings and the TTFT of its misses.

The teams' requests share one pool, one decode batch and one prefill queue (workload.teams):

- cache: team t's users stay warm when everything touched in one of its think times fits; its fill
  (workload.teams, window(t); sizing.fill_pass) gives how many of them the pool keeps at this mix
  (p5 over fills, x replicas under sticky routing), so the long sessions of teams that return often
  evict the short ones of a team that returns rarely;
- decode: one batch. Under the load model (the default) each team's own decode ceiling C_t is the plan's for
  that team alone on the replica (its duty cycle, its contexts, the prefill chunks its decodes wait for), and
  the teams share the batch linearly: the mix fits while sum_t users_t / C_t <= 1, so team t's ceiling at the
  mix is users_t / sum_s (users_s / C_s). One team is exactly its plan, and a team never needs fewer replicas
  beside others than alone. Linear sharing is the first-order model of one batch: each user holds its duty's
  share of the decoders and adds its requests' chunks to the stalls, as it would alone; what it leaves out is
  the cross term (a team's long contexts slowing another's short ones), which the every-user rule below prices
  and the load model alone does not. Under the seed's every-user rule the ceiling n counts every user decoding
  at once (the plan's count), the contexts drawn with each team in proportion to its users, and team t's
  share of n is users_t / sum users;
- latency: one M/G/1 prefill server fed by every team (planning.latency): rates add, and the service
  moments are the rate-weighted mixture of the teams' own (each its lengths, miss rate, warm turn).
  A miss of team t waits the common queue and is served in its own E[S | miss]_t:
      FCFS            TTFT_t = lambda E[S^2] / (2 (1 - rho)) + E[S | miss]_t
      PS              TTFT_t = E[S | miss]_t / (1 - rho)
      priorities      the non-preemptive priority queue (Cobham 1954; Kleinrock, Queueing Systems
                      vol. 2, 3.6): W_t = W0 / ((1 - sigma_above) (1 - sigma_with)), W0 = sum lambda_i
                      E[S_i^2] / 2, sigma_above the load of the teams served before t, sigma_with
                      that plus t's own level;
  team t's latency ceiling is the scale of the whole mix at which its miss TTFT reaches the limit,
  in its own users; saturation (rho = 1) is the same scale for every team.

A ceiling "at the mix" is in the team's own users: scaling every team together keeps the mix, so
team t's ceiling c_t means the deployment holds c_t of its users while the others grow in proportion.
One team is exactly the plan (planning.ceilings): the same fill, decode bisection and closed forms.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any

import numpy as np

from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.planning.ceilings import (
    CEILINGS,
    DECODE_SEARCH_LIMIT,
    CeilingCache,
    churn_of,
    cold_moments,
    contexts_of,
    decode_at_floor,
    decode_setup,
    load_ceilings_per_replica,
    lowest_ceiling,
    prefill_of,
)
from servesize.planning.decode import ContextBank, DecodeSetup, largest_meeting, median_speed
from servesize.planning.inputs import Fixed, Knobs, knob_value, ttft_queue_budget_s
from servesize.planning.latency import (
    ServiceMoments,
    latency_ceiling_rate,
    latency_ceiling_users,
    saturation_ceiling_users,
    ttft_s,
)
from servesize.planning.load import think_time_of
from servesize.planning.lru import ChurnBound
from servesize.planning.warm_capacity import Percentiles
from servesize.sizing.fill_pass import warm_of_teams
from servesize.workload.teams import TeamMix

_BISECTION_STEPS = 60


# -- decode --------------------------------------------------------------------------------

def decoders_meeting(setup: DecodeSetup, bank: ContextBank, floor: float, cap: int) -> tuple[int, bool]:
    """(n, at_least) of ``planning.decode.largest_meeting`` over this setup's p50 per-user speeds: the decode ceiling
    without its derivation, capped, as a search over many deployments and team mixes asks it."""
    return largest_meeting(lambda n: median_speed(setup, bank, n), floor, cap)


# -- latency --------------------------------------------------------------------------------

@frozen
class MixedQueue:
    """The prefill server of one replica group fed by every team at its full size (scale 1)."""

    rates_per_s: np.ndarray      # (T,) lambda_t at scale 1
    moments: tuple[ServiceMoments, ...]
    priorities: np.ndarray       # (T,)
    discipline: str

    @property
    def rate_per_s(self) -> float:
        return float(self.rates_per_s.sum())

    @property
    def rho(self) -> float:
        """Prefill duty at scale 1."""
        return float(sum(r * m.mean_s for r, m in zip(self.rates_per_s, self.moments)))

    def mixture(self, team: int) -> ServiceMoments:
        """The common queue's moments, with team ``team``'s own miss as the request whose TTFT is asked."""
        w = self.rates_per_s / self.rates_per_s.sum()
        mean = float(sum(wi * m.mean_s for wi, m in zip(w, self.moments)))
        second = float(sum(wi * m.second_moment_s2 for wi, m in zip(w, self.moments)))
        own = self.moments[team]
        return ServiceMoments(own.miss_rate, mean, second, own.miss_s, own.hit_s)

    @property
    def prioritised(self) -> bool:
        return len(set(self.priorities.tolist())) > 1

    def miss_ttft_s(self, team: int, scale: float, request: str = "miss") -> float:
        """Mean TTFT of team ``team``'s misses (or hits) with every team at ``scale`` x its size (inf past saturation)."""
        if not self.prioritised:
            return ttft_s(scale * self.rate_per_s, self.mixture(team), request, self.discipline)
        rho = scale * self.rates_per_s * np.array([m.mean_s for m in self.moments])
        p = self.priorities[team]
        above, within = float(rho[self.priorities > p].sum()), float(rho[self.priorities >= p].sum())
        if within >= 1:
            return float("inf")
        w0 = scale * float(sum(r * m.second_moment_s2 for r, m in zip(self.rates_per_s, self.moments))) / 2
        own = self.moments[team].miss_s if request == "miss" else self.moments[team].hit_s
        return w0 / ((1 - above) * (1 - within)) + own

    def latency_scale(self, team: int, ttft_limit_s: float) -> float:
        """The scale of the whole mix at which team ``team``'s miss TTFT reaches the limit (0: a lone miss is over it)."""
        if self.moments[team].miss_s >= ttft_limit_s:
            return 0.0
        if not self.prioritised:
            return latency_ceiling_rate(self.mixture(team), ttft_limit_s, self.discipline) / self.rate_per_s
        # TTFT rises with the scale, without bound as the load of the levels at or above the team's nears 1
        rho = self.rates_per_s * np.array([m.mean_s for m in self.moments])
        lo, hi = 0.0, 1.0 / float(rho[self.priorities >= self.priorities[team]].sum())
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (lo + hi)
            if self.miss_ttft_s(team, mid) <= ttft_limit_s:
                lo = mid
            else:
                hi = mid
        return lo


def mixed_queue(fixed: Fixed, mix: TeamMix, knobs: Knobs, cache: CeilingCache) -> MixedQueue:
    """Every team's prefill on one replica group of ``fixed``."""
    discipline = str(knobs.a("latency.discipline"))
    priorities = np.array([t.priority for t in mix.teams])
    if len(set(priorities.tolist())) > 1 and discipline != "fcfs":
        raise BadInput("team priorities are modelled for a first-come-first-served prefill queue "
                       f"(latency.discipline fcfs); the assumptions say {discipline}")
    topk = decode_setup(fixed, knobs).topk_tokens
    moments = tuple(cold_moments(fixed, t.workload, knobs, cache, contexts_of(t.workload, knobs, topk, cache),
                                 prefill_of(fixed, t.workload, knobs, cache)) for t in mix.teams)
    rates = np.array([t.request_rate_per_s for t in mix.teams])
    return MixedQueue(rates, moments, priorities, discipline)


# -- the ceilings of one replica group ------------------------------------------------------

@frozen
class ReplicaCeilings:
    """Per team, the users one replica group keeps by each ceiling at the teams' mix (the plan's ceilings of
    one replica), and whether a figure is only a lower bound (a search stops counting past what it needs)."""

    names: tuple[str, ...]
    targets: np.ndarray                 # (T,) each team's users
    values: dict[str, np.ndarray]       # ceiling -> (T,) users of each team per replica group
    at_least: dict[str, np.ndarray]     # ceiling -> (T,) True where the figure is a lower bound
    sticky: bool                        # replicas add warm users (sticky routing) or not (random)
    decoders: int                       # concurrent decoders per replica at the floor
    queue: MixedQueue | None = field(default=None, compare=False, repr=False)

    def scaled(self, replicas: int) -> dict[str, np.ndarray]:
        """Each ceiling with ``replicas`` groups: x replicas, the cache only under sticky routing."""
        return {k: v * (replicas if (k != "cache" or self.sticky) else 1) for k, v in self.values.items()}

    def replicas_needed(self) -> int | None:
        """The fewest replica groups whose every ceiling reaches every team's users (None: no number does)."""
        need = 1
        for key, per_team in self.values.items():
            for value, target in zip(per_team, self.targets):
                if value <= 0 or (key == "cache" and not self.sticky and value < target):
                    return None
                if key != "cache" or self.sticky:
                    need = max(need, replicas_for(float(value), float(target)))
        return need

    def served_scale(self, replicas: int) -> float:
        """The largest scale of the whole mix every ceiling holds with ``replicas`` groups (1 = every team's users)."""
        scaled = self.scaled(replicas)
        return float(min(np.min(v / self.targets) for v in scaled.values()))

    def binding(self, replicas: int) -> list[str]:
        """Per team, the ceiling that binds first with ``replicas`` groups."""
        scaled = self.scaled(replicas)
        out = []
        for t in range(len(self.names)):
            values = {k: float(scaled[k][t]) for k in CEILINGS}
            out.append(lowest_ceiling(values))
        return out


# A replica count past any fleet (sizing.search.MAX_GPUS is 4,096): what replicas_for answers when a ceiling so
# small that users / ceiling is past exact float integers (or infinite) would need more, instead of counting to it.
REPLICAS_PAST_COUNTING = 2**53


def replicas_for(per_replica: float, users: float) -> int:
    """The smallest whole d >= 1 with d x per_replica >= users (as the plan scales a ceiling by its replicas)."""
    if per_replica <= 0:
        raise BadInput("a ceiling of 0 users per replica is met by no number of replicas")
    ratio = users / per_replica
    if not ratio < REPLICAS_PAST_COUNTING:  # a ceiling of 1e-300 users: inf, or a count no loop below should walk
        return REPLICAS_PAST_COUNTING
    d = max(1, math.ceil(ratio))
    while d > 1 and (d - 1) * per_replica >= users:
        d -= 1
    while d * per_replica < users:
        d += 1
    return d


def replica_ceilings(fixed: Fixed, mix: TeamMix, knobs: Knobs, cache: CeilingCache, warm_p5: np.ndarray,
                     warm_at_least: np.ndarray, decoder_cap: int | None = None) -> ReplicaCeilings | str:
    """One replica group's ceilings for ``mix`` (``fixed`` with DP 1), the warm p5 per team given (a fill pass).

    ``decoder_cap``: stop the decode bisection there (a search needs no more). Returns the reason instead
    when one user alone decodes under the floor (no batch serves anyone at it), or when the GPU has no dense
    FLOP/s to price the prefill queue by."""
    if fixed.peak_flops_per_gpu <= 0:
        return no_flops(fixed)
    setup = decode_setup(fixed, knobs)
    floor = float(knob_value(knobs, "decode_floor"))
    bank = contexts_of(mix.decoders(), knobs, setup.topk_tokens, cache)
    n, n_at_least = decoders_meeting(setup, bank, floor, min(decoder_cap or mix.total_users, DECODE_SEARCH_LIMIT))
    if n == 0:
        return (f"one user alone decodes at {median_speed(setup, bank, 1):.1f} tok/s (p50), under the "
                f"{floor:g} tok/s floor")
    queue = mixed_queue(fixed, mix, knobs, cache)
    load = None if mix.single is None else load_ceilings_per_replica(fixed, mix.single, knobs, cache, setup, n,
                                                                     lower_bound=n_at_least)
    teams = team_decode_ceilings(fixed, mix, knobs, cache, setup, decoder_cap or DECODE_SEARCH_LIMIT)
    if teams is not None:
        n_at_least = teams[1]
    at_least = {"cache": np.asarray(warm_at_least, dtype=bool), "decode": np.full(len(mix.teams), n_at_least)}
    churn = None if mix.single is None else churn_of(fixed, mix.single, knobs, floor, queue.moments[0], cache)
    return replica_ceilings_from(mix, knobs, queue, np.asarray(warm_p5, dtype=float), n, at_least, load, churn,
                                 None if teams is None else teams[0])


def team_decode_ceilings(fixed: Fixed, mix: TeamMix, knobs: Knobs, cache: CeilingCache, setup: DecodeSetup,
                         cap: int) -> tuple[np.ndarray, bool] | None:
    """Each of several teams' decode ceiling alone on one replica under the load model, in its users
    (planning.ceilings.load_ceilings_per_replica on its own contexts, prefill and stalls), and whether any is
    only a lower bound (its every-user batch reached ``cap``); None for one team or under the seed's every-user
    rule."""
    if mix.single is not None:
        return None
    floor = float(knob_value(knobs, "decode_floor"))
    ceilings, at_least = [], False
    for team in mix.teams:
        bank = contexts_of(team.workload, knobs, setup.topk_tokens, cache)
        n, n_at_least = decoders_meeting(setup, bank, floor, min(cap, DECODE_SEARCH_LIMIT))
        if n == 0:
            ceilings.append(0.0)
            continue
        load = load_ceilings_per_replica(fixed, team.workload, knobs, cache, setup, n, lower_bound=n_at_least,
                                         latency=False)
        if load is None:
            return None
        ceilings.append(load[0])
        at_least = at_least or n_at_least
    return np.asarray(ceilings, dtype=float), at_least


def shared_decode(targets: np.ndarray, alone: np.ndarray) -> np.ndarray:
    """Each team's decode ceiling at the mix from each one's alone (``team_decode_ceilings``), the batch shared
    linearly: the mix scaled by s fits while s sum_t targets_t / alone_t <= 1 (0 for all when a team has none)."""
    if np.any(alone <= 0):
        return np.zeros_like(targets, dtype=float)
    return targets / float(np.sum(targets / alone))


def replica_ceilings_from(mix: TeamMix, knobs: Knobs, queue: MixedQueue, warm_p5: np.ndarray, decoders: int,
                          at_least: dict[str, np.ndarray] | None = None,
                          load: tuple[float, float | None] | None = None,
                          churn: ChurnBound | None = None, team_decode: np.ndarray | None = None) -> ReplicaCeilings:
    """The per-replica ceilings from the warm p5, the decoders and the prefill queue.

    ``load``: one team's (decode, latency) users under the load model (planning.ceilings.load_ceilings_per_replica);
    ``team_decode``: several teams' decode ceilings alone under it (``team_decode_ceilings``), shared linearly;
    without either (the seed's rule) every user decodes at once; with several teams a miss's mean TTFT binds.
    ``churn``: one team's cache bound under LRU churn (planning.ceilings.churn_of), as the plan bounds its cache."""
    targets = mix.targets
    queue_budget = ttft_queue_budget_s(knobs)  # the TTFT budget less the request's fixed cost
    decode = decoders * targets / targets.sum() if team_decode is None else shared_decode(targets, team_decode)
    if mix.single is not None:  # the plan's own closed forms (planning.ceilings)
        w, r = mix.single, mix.teams[0].sub_ratio
        lat = np.array([max(0.0, latency_ceiling_users(queue.moments[0], r, think_time_of(w), queue_budget,
                                                       queue.discipline))])
        sat = np.array([saturation_ceiling_users(queue.moments[0], r, think_time_of(w))])
        if churn is not None:  # the pool may turn over within a pause first (as the plan's cache ceiling)
            warm_p5 = np.array([churn.capped(float(warm_p5[0]))])
        if load is not None:
            decode = np.array([load[0]])
            lat = lat if load[1] is None else np.array([load[1]])
    else:
        lat = np.array([queue.latency_scale(t, queue_budget) for t in range(len(targets))]) * targets
        sat = targets / queue.rho
    values = {"cache": warm_p5.astype(float), "decode": decode, "latency": lat, "saturation": sat}
    bounds = {k: np.zeros(len(targets), bool) for k in values} | (at_least or {})
    return ReplicaCeilings(mix.names, targets, values, bounds, knobs.sticky_routing, decoders, queue)


# -- a deployment's teams panel -------------------------------------------------------------

@frozen
class TeamOnPool(Record):
    """One team on a shared deployment."""

    name: str
    users: int
    priority: int
    warm: Percentiles = field(metadata=json_as("warm_users"))  # warm users of this team, system (x replicas, sticky)
    warm_alone: Percentiles = field(metadata=json_as("warm_users_alone"))  # the team alone on the same pool
    ceilings: dict[str, float]   # in this team's users, at the mix
    binding: str
    miss_ttft_s: float           # mean TTFT of this team's misses at every team's full size
    hit_ttft_s: float

    JSON_EXTRA = ("meets_target",)

    @property
    def meets_target(self) -> bool:
        return all(v >= self.users for v in self.ceilings.values())


@frozen
class SharedPool(Record):
    """Every team on one deployment (tp x dp GPUs): who stays warm, each team's ceilings and TTFT."""

    gpu: str = field(metadata=json_as(None))  # written in "gpus"
    tp: int = field(metadata=json_as("tensor_parallel_size"))
    dp: int = field(metadata=json_as("data_parallel_size"))
    pool_tokens: float = field(metadata=json_as("pool_tokens_per_replica"))
    teams: tuple[TeamOnPool, ...]
    decoders_per_replica: int
    prefill_duty: float
    routing: str
    floor_note: str | None = None

    JSON_EXTRA = ("gpus", "meets_every_target")

    @property
    def gpus(self) -> str:
        return f"{self.tp * self.dp}x{self.gpu}"

    @property
    def meets_every_target(self) -> bool:
        return all(t.meets_target for t in self.teams)


def _warm_percentiles(mix: TeamMix, fixed: Fixed, knobs: Knobs, cache: CeilingCache) -> list[Percentiles]:
    """Each team's warm users on one replica's pool, exactly (no cap): its users in its own window's fill."""
    b, s = _charges(fixed)
    budget = fixed.pool_tokens - mix.reserved_prefix_tokens()
    if knobs.cpu_offload_bytes:
        if knobs.assumptions == "seed":
            raise BadInput("teams model CPU offload as vLLM's inclusive tier; --assumptions seed with "
                           "--cpu-offload-gib (the additive tier) is planned by `servesize plan` for one workload", field="assumptions")
        budget = max(budget, (knobs.cpu_offload_bytes - mix.reserved_prefix_tokens() * b) / b)
    if budget <= 0:
        raise BadInput(f"the pool ({fixed.pool_tokens:,.0f} tokens per replica) does not hold the teams' shared "
                       f"prefixes ({mix.reserved_prefix_tokens():,} tokens)")
    ((pct, _),) = warm_of_teams(mix, cache.bank(knobs.seed, mix.needs_uniforms), knobs.fills, [([budget], s / b)],
                                max_draws=max(knobs.draws, 1 << 20))
    return [Percentiles(*(float(x) for x in pct[:, 0, t])) for t in range(len(mix.teams))]


def _charges(fixed: Fixed) -> tuple[int, int]:
    """(KV bytes per token, bytes resident per warm session) of one replica group: the plan's warm charges."""
    return (fixed.kv_bytes_per_token_rank * fixed.tp,
            (fixed.state_bytes_rank + fixed.window_bytes_per_session_rank) * fixed.tp)


def no_flops(fixed: Fixed) -> str:
    """Why a GPU without a dense FLOP/s figure cannot hold teams: their prefill queue is priced by it."""
    return f"{fixed.gpu_key} has no dense FLOP/s in the GPU catalogue: its prefill queue cannot be priced"


def shared_pool(fixed: Fixed, mix: TeamMix, knobs: Knobs, replicas: int | None = None,
                cache: CeilingCache | None = None) -> SharedPool:
    """Every team of ``mix`` on ``fixed``'s replica shape with ``replicas`` groups (default ``fixed.dp``)."""
    if fixed.peak_flops_per_gpu <= 0:
        raise BadInput(no_flops(fixed) + " (give --gpu-flops TFLOPS)", field="gpu_flops")
    cache = cache or CeilingCache()
    dp = int(replicas or fixed.dp)
    one = _one_replica(fixed)
    warm = _warm_percentiles(mix, one, knobs, cache)
    alone = [w if len(mix.teams) == 1 else _warm_percentiles(TeamMix((t,)), one, knobs, cache)[0]
             for t, w in zip(mix.teams, warm)]
    setup = decode_setup(one, knobs)
    dec, out_of_reach = decode_at_floor(setup, mix.decoders(), knobs, cache)
    queue = mixed_queue(one, mix, knobs, cache)
    load = None if mix.single is None else load_ceilings_per_replica(one, mix.single, knobs, cache, setup, dec.n)
    churn = None if mix.single is None else churn_of(one, mix.single, knobs, float(knob_value(knobs, "decode_floor")),
                                                     queue.moments[0], cache)
    teams_alone = team_decode_ceilings(one, mix, knobs, cache, setup, DECODE_SEARCH_LIMIT)
    per = replica_ceilings_from(mix, knobs, queue, np.array([w.p5 for w in warm]), dec.n, load=load, churn=churn,
                                team_decode=None if teams_alone is None else teams_alone[0])
    scaled = per.scaled(dp)
    scale_w = dp if knobs.sticky_routing else 1
    teams = []
    for t, team in enumerate(mix.teams):
        ceilings = {k: float(scaled[k][t]) for k in CEILINGS}
        teams.append(TeamOnPool(team.name, team.users, team.priority, warm[t].scaled(scale_w),
                                alone[t].scaled(scale_w), ceilings, lowest_ceiling(ceilings),
                                queue.miss_ttft_s(t, 1.0 / dp), queue.miss_ttft_s(t, 1.0 / dp, "hit")))
    routing = "single" if dp == 1 else ("sticky" if knobs.sticky_routing else "random")
    return SharedPool(one.gpu_key, one.tp, dp, one.pool_tokens, tuple(teams), dec.n, queue.rho / dp, routing,
                      None if out_of_reach is None else out_of_reach.text())


def _one_replica(fixed: Fixed) -> Fixed:
    from dataclasses import replace

    return fixed if fixed.dp == 1 else replace(fixed, dp=1, n_gpu=fixed.tp)


# -- sharing one replica shape or splitting it ------------------------------------------------

@frozen
class ShapeSplit(Record):
    """On one replica shape: the replicas the teams need sharing them, and each team's on replicas of its own."""

    shared_replicas: int | None
    team_replicas: dict[str, int | None]

    @property
    def partitioned_replicas(self) -> int | None:
        if any(v is None for v in self.team_replicas.values()):
            return None
        return sum(v for v in self.team_replicas.values() if v is not None)

    def verdict(self, tp: int) -> tuple[str, str]:
        """Sharing this replica shape or giving each team replicas of its own: ('share' | 'partition' | 'either' |
        'none', the fewer replicas in words)."""
        shared, parted = self.shared_replicas, self.partitioned_replicas
        per_team = ", ".join(f"{name} {'-' if n is None else n}" for name, n in self.team_replicas.items())
        shape = f"replicas of this shape ({tp} GPU(s) each)"
        if shared is None and parted is None:
            return "none", f"no number of {shape} serves every team, shared or each on its own"
        if shared is None:
            return "partition", (f"partition: no number of shared {shape} serves every team; each team on its own "
                                 f"needs {parted} ({per_team})")
        if parted is None:
            return "share", (f"share: {shared} shared {shape} serve every team; a team on its own is served by none "
                             f"({per_team})")
        if shared < parted:
            choice, lead = "share", f"share: {shared} shared {shape} serve every team, {parted - shared} fewer than"
        elif parted < shared:
            choice, lead = "partition", (f"partition: {parted} {shape}, each team on its own ({per_team}), "
                                         f"{shared - parted} fewer than")
        else:
            choice, lead = "either", f"either: {shared} {shape} shared or split ({per_team}), as many as"
        other = f"each team on its own ({parted}: {per_team})" if choice == "share" else f"one shared pool ({shared})"
        return choice, f"{lead} {other}"

    JSON_EXTRA = ("partitioned_replicas",)


def _replicas_on(fixed: Fixed, mix: TeamMix, knobs: Knobs, cache: CeilingCache) -> int | None:
    warm = np.array([w.p5 for w in _warm_percentiles(mix, fixed, knobs, cache)])
    found = replica_ceilings(fixed, mix, knobs, cache, warm, np.zeros(len(mix.teams), bool), decoder_cap=mix.total_users)
    return None if isinstance(found, str) else found.replicas_needed()


def split_on_shape(fixed: Fixed, mix: TeamMix, knobs: Knobs, cache: CeilingCache | None = None) -> ShapeSplit:
    """The fewest replicas of ``fixed``'s shape (its DP ignored) that serve every team of ``mix`` sharing them,
    and that serve each team on replicas of its own (None: no number does)."""
    cache = cache or CeilingCache()
    one = _one_replica(fixed)
    alone = {t.name: _replicas_on(one, TeamMix((t,)), knobs, cache) for t in mix.teams}
    return ShapeSplit(_replicas_on(one, mix, knobs, cache), alone)


@frozen
class TeamsPanel:
    """The explorer's teams panel for one deployment: every team on its replicas, and sharing against splitting."""

    shared: SharedPool
    split: ShapeSplit

    def verdict(self) -> tuple[str, str]:
        return self.split.verdict(self.shared.tp)

    def to_dict(self) -> dict[str, Any]:
        choice, text = self.verdict()
        return {"shared": self.shared.to_dict(), "split": self.split.to_dict(),
                "verdict": {"choice": choice, "text": text}}


def teams_panel(fixed: Fixed, mix: TeamMix, knobs: Knobs, cache: CeilingCache | None = None) -> TeamsPanel:
    """Every team of ``mix`` on ``fixed`` (its DP replicas), and the replicas of its shape sharing or split needs."""
    cache = cache or CeilingCache()
    return TeamsPanel(shared_pool(fixed, mix, knobs, cache=cache), split_on_shape(fixed, mix, knobs, cache))
