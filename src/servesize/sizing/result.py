"""What a fleet search answers, as JSON-ready results (``to_dict``): the CLI's table and the explorer's panels.

- ``FleetOption``: one fleet (a replica shape with DP replicas), priced, with each team's ceilings;
- ``FleetResult``: the cheapest few, the cost-users frontier, the winner (its plan or teams panel, its
  ``vllm serve`` line and routing), what was skipped and why, and with several teams the partitioned
  split and the verdict between sharing one pool and giving each team its own replicas.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import field
from typing import TYPE_CHECKING, Any

from servesize.frozen import frozen
from servesize.jsonable import Record

if TYPE_CHECKING:
    from servesize.sizing.prices import GpuPrice
    from servesize.workload.teams import Team


@frozen
class FleetOption:
    """One fleet: ``tp x dp`` GPUs of one type serving one model at one precision and KV dtype."""

    model: str
    precision: str               # as given to vLLM's --quantization (native: the checkpoint's own)
    weights_precision: str
    kv_cache_dtype: str
    gpu: str
    tp: int
    dp: int
    price_per_gpu_hour: float
    currency: str
    rent_per_month: float
    power_per_month: float | None  # None: the GPU-hour price includes the power
    cost_per_month: float
    cost_per_user_month: float     # per user served, at most the users asked for
    users_served: float            # at the teams' mix: the users every ceiling holds, all teams together
    users_served_is_lower_bound: bool
    binding: str                   # the ceiling that binds first ...
    binding_team: str              # ... for this team
    teams: dict[str, dict[str, Any]]  # name -> {users, ceilings, binding, lower_bounds}
    pool_tokens_per_replica: float
    decoders_per_replica: int

    @property
    def n_gpu(self) -> int:
        return self.tp * self.dp

    @property
    def gpus(self) -> str:
        return f"{self.n_gpu}x{self.gpu}"

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["gpus"] = self.gpus
        out["n_gpu"] = self.n_gpu
        return out


@frozen
class TeamSplit(Record):
    """One team on replicas of its own: its fleet, or why none serves it."""

    team: str
    users: int
    option: FleetOption | None
    reason: str | None = None


@frozen
class Partition(Record):
    """Each team on its own replicas: its cheapest fleet alone, and the split of the shared winner's shape."""

    cheapest: tuple[TeamSplit, ...]
    same_shape: tuple[TeamSplit, ...] | None

    @property
    def cost_per_month(self) -> float | None:
        if any(s.option is None for s in self.cheapest):
            return None
        return sum(s.option.cost_per_month for s in self.cheapest if s.option is not None)

    @property
    def gpus(self) -> int | None:
        if any(s.option is None for s in self.cheapest):
            return None
        return sum(s.option.n_gpu for s in self.cheapest if s.option is not None)

    @property
    def same_shape_replicas(self) -> int | None:
        if self.same_shape is None or any(s.option is None for s in self.same_shape):
            return None
        return sum(s.option.dp for s in self.same_shape if s.option is not None)

    JSON_EXTRA = ("cost_per_month", "gpus", "same_shape_replicas")


def verdict(winner: FleetOption | None, partition: Partition | None, pool: Any = None,
            max_gpus: int | None = None) -> dict[str, Any]:
    """Share one pool or give each team its own replicas: the cheaper, and what the other would cost. ``max_gpus``
    (--max-gpus) bounds the whole answer: a fleet per team whose GPUs add up to more is not one of them."""
    shared = None if winner is None else winner.cost_per_month
    split_gpus = None if partition is None else partition.gpus
    out: dict[str, Any] = {"shared_cost_per_month": shared,
                           "partitioned_cost_per_month": None if partition is None else partition.cost_per_month,
                           "shared_gpus": None if winner is None else winner.n_gpu, "partitioned_gpus": split_gpus}
    split, why = _within(partition, max_gpus)
    cur = f" {winner.currency}" if winner is not None else _currency(partition)
    out["currency"] = cur.strip()
    if winner is None or shared is None:
        return _no_shared_pool(out, split, split_gpus, cur, why)
    if split is None or shared < split - 1e-9:
        out.update(choice="share", saving_per_month=None if split is None else split - shared)
        evicted = _evicted(pool)
        out["text"] = (f"share: one pool of {winner.gpus} serves every team for {shared:,.0f}{cur}/month"
                       + ("" if split is None else f", {split - shared:,.0f}{cur} less than a fleet per team "
                                                   f"({split:,.0f}{cur})")
                       + (f"; under LRU {evicted}" if evicted else ""))
        return out
    if split < shared - 1e-9:
        out.update(choice="partition", saving_per_month=shared - split,
                   text=f"partition: a fleet per team costs {split:,.0f}{cur}/month, {shared - split:,.0f}{cur} less "
                        f"than one shared pool ({shared:,.0f}{cur}); each team's replicas keep its own sessions warm "
                        "(no team evicts another's)")
        return out
    out.update(choice="either", saving_per_month=0.0,
               text=f"either: both cost {shared:,.0f}{cur}/month; partitioning isolates the teams "
                    "(no team evicts another's sessions), sharing is one fleet to run")
    return out


def _within(partition: Partition | None, max_gpus: int | None) -> tuple[float | None, str]:
    """A fleet per team's cost a month, or None (none serves every team, or its GPUs are past --max-gpus: why)."""
    gpus = None if partition is None else partition.gpus
    if partition is None or gpus is None or max_gpus is None or gpus <= max_gpus:
        return (None if partition is None else partition.cost_per_month), ""
    return None, f": a fleet per team needs {gpus:,} GPUs, more than --max-gpus {max_gpus:,}"


def _currency(partition: Partition | None) -> str:
    chosen = [] if partition is None else [t.option for t in partition.cheapest if t.option is not None]
    return f" {chosen[0].currency}" if chosen else ""


def _no_shared_pool(out: dict[str, Any], split: float | None, gpus: int | None, cur: str, why: str) -> dict[str, Any]:
    """The verdict when no shared pool serves: a fleet per team (``split`` a month on ``gpus``), or none (``why``)."""
    if split is None:
        out.update(choice="none", text=f"neither a shared pool nor a fleet per team in the search space serves every "
                                       f"team{why}")
    else:
        out.update(choice="partition", saving_per_month=None,
                   text=f"partition: no shared pool serves every team; a fleet per team ({gpus:,} GPUs) costs "
                        f"{split:,.0f}{cur}/month")
    return out


def _evicted(pool: Any) -> str:
    """The team that goes cold first as every team grows (the smallest cache ceiling for its users), in words."""
    if pool is None or len(pool.teams) < 2:
        return ""
    headroom = {t.name: t.ceilings["cache"] / t.users for t in pool.teams}
    first = min(headroom, key=headroom.__getitem__)
    last = max(headroom, key=headroom.__getitem__)
    if headroom[first] >= headroom[last] * 0.999:
        return ""
    return (f"{first} goes cold first as every team grows (its cache holds {headroom[first]:.2f}x its users, "
            f"{last}'s {headroom[last]:.2f}x): its users return least often, so every other team's sessions "
            "touched meanwhile count against it")


@frozen
class FleetResult:
    """The answer of a fleet search."""

    teams: tuple[Team, ...]             # workload.teams.Team (one team for --users N)
    currency: str
    price_includes_power: bool
    hours_per_month: float
    options: tuple[FleetOption, ...]    # the cheapest few that serve every team
    frontier: tuple[FleetOption, ...]   # cost against users served: no cheaper fleet serves as many
    skipped: tuple[tuple[str, str], ...]
    shapes_searched: int
    prices: tuple[GpuPrice, ...]        # sizing.prices.GpuPrice of the GPUs searched
    routing: bool                       # sticky
    max_gpus: int
    winner: FleetOption | None = None
    plan: Any = None                    # the winner's Plan (one workload)
    shared_pool: Any = None             # the winner's teams panel (several teams): sizing.teams.SharedPool
    recipe: str | None = None
    recipe_notes: tuple[str, ...] = ()
    partition: Partition | None = None
    verdict: dict[str, Any] | None = None
    plan_command: str | None = None     # the `servesize plan` line that confirms the winner (set by the api layer)
    confirm: dict[str, Any] | None = field(default=None, compare=False)  # the Scenario of that line, as JSON (api layer)
    # prefill and decode apart on the winner's shape (api layer, one workload): the layout the users need, its GPUs
    # and cost beside the winner's, and the one line that says which the search picked and why
    disaggregated: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def users(self) -> int:
        return sum(t.users for t in self.teams)

    @property
    def exit_code(self) -> int:
        """2 (refused) when nothing in the search space serves every team: no shared fleet, and (several teams) no
        fleet per team within --max-gpus either."""
        return 0 if self.serves else 2

    @property
    def serves(self) -> bool:
        """A shared fleet was found, or (several teams) the verdict gives each team a fleet of its own."""
        return self.winner is not None or (self.verdict is not None and self.verdict.get("choice") == "partition")

    @property
    def failure(self) -> str | None:
        """Why nothing was chosen, as the one line the CLI prints with exit 2 (None when a fleet was)."""
        if self.serves:
            return None
        best = max(self.frontier, key=lambda o: o.users_served, default=None)
        reached = f"; the most any searched fleet serves is {best.users_served:,.0f} users, on {best.gpus}" \
            if best is not None and best.users_served >= 0.5 else ""
        return (f"no fleet of at most {self.max_gpus} GPUs in the search space serves all {self.users:,} users"
                f"{reached}; try more GPU types (--gpus-from), a larger --max-gpus, fp8 weights or KV, or your own "
                "prices")

    def skipped_summary(self) -> dict[str, int]:
        """How many shapes each kind of reason removed."""
        return dict(Counter(_kind(why) for _, why in self.skipped).most_common())

    def to_dict(self) -> dict[str, Any]:
        return {
            "users": self.users,
            "teams": [{"name": t.name, "users": t.users, "priority": t.priority, "source": t.source,
                       "workload": t.workload.to_dict()} for t in self.teams],
            "currency": self.currency,
            "price_basis": "GPU-hour rental, power included" if self.price_includes_power
            else "GPU-hour price plus the power bill",
            "hours_per_month": self.hours_per_month,
            "routing": "sticky" if self.routing else "random",
            "max_gpus": self.max_gpus,
            "winner": None if self.winner is None else self.winner.to_dict(),
            "recipe": self.recipe, "recipe_notes": list(self.recipe_notes),
            "plan_command": self.plan_command, "confirm_scenario": self.confirm,
            "disaggregated": self.disaggregated,
            "plan": None if self.plan is None else self.plan.to_dict(),
            "shared_pool": None if self.shared_pool is None else self.shared_pool.to_dict(),
            "options": [o.to_dict() for o in self.options],
            "frontier": [o.to_dict() for o in self.frontier],
            "partition": None if self.partition is None else self.partition.to_dict(),
            "verdict": self.verdict,
            "searched": {"shapes": self.shapes_searched, "skipped": self.skipped_summary()},
            "skipped": [{"what": what, "why": why} for what, why in self.skipped],
            "prices": [p.to_dict() for p in self.prices],
        }


_KINDS = (("no dense FLOP/s", "no FLOP/s to price the prefill"),
          ("no price", "no price"), ("does not divide", "TP does not divide the heads"),
          ("do not divide", "TP does not divide the heads"), ("does not fit", "weights do not fit"),
          ("--max-gpus", "needs more than --max-gpus"), ("tok/s floor", "one user misses the decode floor"),
          ("shared prefixes", "pool under the shared prefixes"), ("sticky", "no replicas keep them warm (random routing)"),
          ("TTFT", "a lone miss exceeds the TTFT limit"), ("cache ceiling 0", "the pool keeps no user warm"),
          ("no TDP", "no TDP to price the power bill"), ("would refuse to start", "vLLM would not start"),
          ("would not start", "vLLM would not start"))


def _kind(reason: str) -> str:
    return next((kind for needle, kind in _KINDS if needle in reason), "other")
