"""The cheapest fleet for N users, or for several teams: GPU type x count x precision x KV dtype x TP/DP.

A *replica shape* is one model at one precision and KV dtype on ``tp`` GPUs of one type (tensor
parallel: one engine, one pool); a *fleet* is a shape with ``dp`` replicas (data parallel), tp x dp
GPUs. The search covers every model given, each precision and KV dtype asked, every GPU type with a
price (sizing.prices), every tensor-parallel size the model's heads allow up to --max-gpus.

Computed once and shared, never a whole plan per candidate:

- per shape, the memory report and the planner's Fixed, at DP 1 (a replica's pool does not depend on
  how many replicas there are);
- per (stream, state charge), one pass over the random bank fills every shape's pool at once
  (sizing.fill_pass): the plan's own numbers and counts;
- per stream, one bank of decode contexts; per shape, the decode bisection, stopped at the users asked
  for; per (prefill setup, workload), the prefill moments; latency and saturation in closed form;
- per shape, the ceilings of one replica group (sizing.teams). Replicas scale them: decode, latency
  and saturation always, the cache only under sticky routing. The fewest replicas a shape needs is then
  arithmetic, and every DP up to it is a point of the cost-users frontier at no further cost.

Pruned with cheap bounds before any Monte-Carlo: GPUs without a price, TP sizes the heads refuse, shapes
whose weights do not fit; after the shape's ceilings: shapes whose one user decodes under the floor, whose
best case needs more than --max-gpus, and (random routing) whose one replica cannot keep the users warm
(replicas add no warm users then).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from servesize.engine.deployment import Deployment, check_parallelism
from servesize.engine.memory import memory_report
from servesize.errors import BadInput, ServesizeError
from servesize.frozen import frozen
from servesize.model.architecture import Architecture
from servesize.model.hardware import Gpu, GpuGroup
from servesize.planning.ceilings import CeilingCache
from servesize.planning.inputs import Fixed, Knobs, fixed_from_memory, knob_value, spec_speedup_of
from servesize.planning.plan import bill_at, make_plan
from servesize.planning.recipe import checkpoint_note, routing_note, serve_command
from servesize.planning.warm_capacity import _MAX_DRAWS
from servesize.progress import Progress as Say
from servesize.sizing.fill_pass import warm_of_teams
from servesize.sizing.prices import GpuPrice
from servesize.sizing.result import FleetOption, FleetResult, Partition, TeamSplit, verdict
from servesize.sizing.teams import ReplicaCeilings, replica_ceilings, replicas_for, shared_pool
from servesize.workload.teams import TeamMix

MAX_GPUS = 4096


@frozen
class ModelChoice:
    """One model the fleet may serve, resolved: the deployment its plans size and the teams' stream on it."""

    name: str
    hf_id: str
    architecture: Architecture
    deployment: Deployment   # engine flags; max_model_len is the teams' cap, the MTP drafts as the plan serves them
    mix: TeamMix             # the teams, each workload capped for this model
    knobs: Knobs


@frozen
class FleetSpace:
    """What the search ranges over and how a fleet is priced."""

    models: tuple[ModelChoice, ...]
    gpus: tuple[Gpu, ...]
    prices: Mapping[str, GpuPrice]
    precisions: tuple[str, ...] = ("native", "fp8")
    kv_cache_dtypes: tuple[str, ...] = ("auto", "fp8")
    tensor_parallel_sizes: tuple[int, ...] = (1, 2, 4, 8)
    max_gpus: int = 64
    budget: str = "engine"
    top: int = 5
    currency: str = "USD"
    price_includes_power: bool = True

    def __post_init__(self) -> None:
        if not self.models:
            raise BadInput("the fleet needs at least one model (--models)", field="models")
        if not 1 <= self.max_gpus <= MAX_GPUS:
            raise BadInput(f"--max-gpus must be in [1, {MAX_GPUS}], got {self.max_gpus}", field="max_gpus")
        if not self.precisions or not self.kv_cache_dtypes or not self.tensor_parallel_sizes:
            raise BadInput("the fleet needs at least one precision, KV dtype and tensor-parallel size")
        if len({(m.mix.names, tuple(m.mix.targets)) for m in self.models}) != 1:
            raise BadInput("every model of one search serves the same teams")


@frozen
class Shape:
    """One replica shape that fits, with what its memory report fixes (at DP 1)."""

    model: ModelChoice
    precision: str           # as asked (native = the checkpoint's own)
    weights_precision: str   # what the weights are
    kv_cache_dtype: str
    gpu: Gpu
    tp: int
    fixed: Fixed
    deployment: Deployment
    price: GpuPrice

    @property
    def replica_price_per_hour(self) -> float:
        return self.tp * self.price.per_hour

    def with_replicas(self, dp: int) -> tuple[Fixed, Deployment]:
        return (replace(self.fixed, dp=dp, n_gpu=self.tp * dp),
                replace(self.deployment, data_parallel_size=dp))


@frozen
class Sized:
    """A shape's replica-group ceilings for one stream, and the fewest replicas that serve every team."""

    shape: Shape
    ceilings: ReplicaCeilings | None
    replicas: int | None
    reason: str | None = None


Progress = Say | None


# -- shapes ---------------------------------------------------------------------------------

def _shapes(space: FleetSpace, skipped: list[tuple[str, str]]) -> list[Shape]:
    """Every priced shape whose weights fit, with its memory report's Fixed; the rest into ``skipped``."""
    out: list[Shape] = []
    seen: set[tuple[str, str, int, str, str]] = set()
    for model in space.models:
        arch = model.architecture
        for gpu in space.gpus:
            price = space.prices.get(gpu.key)
            if price is None:
                skipped.append((f"{model.name} on {gpu.key}", f"no price for {gpu.key} (give --gpu-hour-price "
                                f"{gpu.key}=PRICE)"))
                continue
            for tp in space.tensor_parallel_sizes:
                if tp > space.max_gpus:
                    continue
                try:
                    check_parallelism(arch, tp)
                except ServesizeError as exc:
                    skipped.append((f"{model.name} TP{tp}", str(exc).split(";")[0]))
                    continue
                for precision in space.precisions:
                    for kv in space.kv_cache_dtypes:
                        shape = _shape(model, gpu, tp, precision, kv, price, space, skipped)
                        if shape is None:
                            continue
                        key = (model.name, gpu.key, tp, kv, shape.weights_precision)
                        if key not in seen:  # 'native' and its own precision named again: one shape
                            seen.add(key)
                            out.append(shape)
    return out


def _shape(model: ModelChoice, gpu: Gpu, tp: int, precision: str, kv: str, price: GpuPrice, space: FleetSpace,
           skipped: list[tuple[str, str]]) -> Shape | None:
    label = f"{model.name} {precision} KV {kv} on {tp}x{gpu.key}"
    dep = replace(model.deployment, tensor_parallel_size=tp, data_parallel_size=1, quantization=precision,
                  kv_cache_dtype=kv)
    try:
        report = memory_report(model.architecture, GpuGroup(tp, gpu), dep, budget=space.budget, name=model.name)
        fixed = fixed_from_memory(report, model.architecture, seed_convention=model.knobs.assumptions == "seed",
                                  hf_id=model.hf_id)
    except ServesizeError as exc:
        skipped.append((label, str(exc).split(";")[0]))
        return None
    reserved = model.mix.reserved_prefix_tokens()
    if fixed.pool_tokens <= reserved:
        skipped.append((label, f"the pool ({fixed.pool_tokens:,.0f} tokens) does not hold the shared prefixes "
                               f"({reserved:,} tokens)"))
        return None
    return Shape(model, precision, str(report.weights.precision), kv, gpu, tp, fixed, dep, price)


# -- one stream over every shape --------------------------------------------------------------

def _charges(fixed: Fixed) -> tuple[int, int]:
    """(KV bytes per token, bytes resident per warm session) of one replica group, as the plan charges them."""
    return (fixed.kv_bytes_per_token_rank * fixed.tp,
            (fixed.state_bytes_rank + fixed.window_bytes_per_session_rank) * fixed.tp)


def _budget(fixed: Fixed, mix: TeamMix, knobs: Knobs) -> float:
    """The tokens one replica's sessions may take: the pool minus the shared prefixes (or, with CPU offload, the
    larger of that and the host RAM's tokens: vLLM's offload tier keeps a copy of every block)."""
    b, _ = _charges(fixed)
    budget = fixed.pool_tokens - mix.reserved_prefix_tokens()
    if knobs.cpu_offload_bytes:
        budget = max(budget, (knobs.cpu_offload_bytes - mix.reserved_prefix_tokens() * b) / b)
    return float(budget)


def _warm(shapes: list[Shape], mixes: list[TeamMix], cache: CeilingCache) -> list[tuple[np.ndarray, np.ndarray]]:
    """(p5 per team, lower-bound flags) of one replica for every shape: one pass over the bank per stream (and
    window), every state charge in it, every shape's pool a budget of its charge."""
    streams: dict[int, dict[float, list[int]]] = {}
    for i, (shape, mix) in enumerate(zip(shapes, mixes)):
        b, s = _charges(shape.fixed)
        streams.setdefault(id(mix), {}).setdefault(s / b, []).append(i)
    out: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0), np.zeros(0, bool))] * len(shapes)
    for groups in streams.values():
        first = next(iter(groups.values()))[0]
        mix, knobs = mixes[first], shapes[first].model.knobs
        if knobs.cpu_offload_bytes and knobs.assumptions == "seed":
            raise BadInput("the fleet models CPU offload as vLLM's inclusive tier; --assumptions seed with "
                           "--cpu-offload-gib (the seed's additive tier) is planned by `servesize plan` only", field="assumptions")
        charges = [([_budget(shapes[i].fixed, mix, knobs) for i in members], state) for state, members in groups.items()]
        found = warm_of_teams(mix, cache.bank(knobs.seed, mix.needs_uniforms), knobs.fills, charges, mix.targets,
                              max_draws=max(knobs.draws, _MAX_DRAWS))
        for members, (pct, exact) in zip(groups.values(), found):
            for q, i in enumerate(members):
                out[i] = (pct[0, q], ~exact[0, q])
    return out


def size_shapes(shapes: list[Shape], mix_of: Callable[[ModelChoice], TeamMix], space: FleetSpace,
                cache: CeilingCache) -> list[Sized]:
    """Every shape's replica-group ceilings for the stream ``mix_of(model)`` and the replicas it needs."""
    mixes = [mix_of(s.model) for s in shapes]
    warm = _warm(shapes, mixes, cache)
    out = []
    for shape, mix, (p5, lower) in zip(shapes, mixes, warm):
        found = replica_ceilings(shape.fixed, mix, shape.model.knobs, cache, p5, lower,
                                 decoder_cap=mix.total_users)
        if isinstance(found, str):
            out.append(Sized(shape, None, None, found))
            continue
        dp = found.replicas_needed()
        reason = None
        if not space.price_includes_power and not shape.fixed.tdp_w:
            reason = (f"{shape.gpu.key} has no TDP in the GPU catalogue: its power bill cannot be priced "
                      "(--price-includes-power prices it by the GPU-hour alone)")
        elif dp is None:
            reason = _never(found)
        elif dp * shape.tp > space.max_gpus:
            reason = f"needs {dp} replicas = {dp * shape.tp} GPUs, more than --max-gpus {space.max_gpus}"
        out.append(Sized(shape, found, dp, reason))
    return out


def _never(c: ReplicaCeilings) -> str:
    """Why no number of replicas serves every team."""
    for key, per_team in c.values.items():
        for name, value, target in zip(c.names, per_team, c.targets):
            if value <= 0:
                return f"{key} ceiling 0 for {name}" + (": a lone cache miss already exceeds the TTFT limit"
                                                         if key == "latency" else "")
            if key == "cache" and not c.sticky and value < target:
                return (f"one replica keeps {value:,.0f} of {name}'s {target:,.0f} users warm, and without sticky "
                        "routing more replicas keep no more")
    return "no number of replicas serves every team"


# -- pricing a fleet ------------------------------------------------------------------------

def option_of(sized: Sized, dp: int, space: FleetSpace) -> FleetOption | None:
    """``sized``'s shape with ``dp`` replicas, priced (None: power must be billed and the GPU has no TDP)."""
    shape, c = sized.shape, sized.ceilings
    assert c is not None
    mix, knobs = shape.model.mix, shape.model.knobs
    scale = c.served_scale(dp)
    served = scale * mix.total_users
    load = min(served, float(mix.total_users))
    hours = float(knobs.a("power.hours_per_month"))
    rent = dp * shape.replica_price_per_hour * hours
    power = None
    if not space.price_includes_power:
        if not shape.fixed.tdp_w:
            return None
        fixed, _ = shape.with_replicas(dp)
        queue = c.queue
        assert queue is not None
        rates = queue.rates_per_s * (load / mix.total_users)
        outputs = np.array([t.workload.output_tokens for t in mix.teams])
        bill = bill_at(fixed, knobs, float(rates.sum()) / dp, queue.rho / queue.rate_per_s, c.decoders,
                       float(knob_value(knobs, "decode_floor")), load, float((outputs * rates).sum() / rates.sum()))
        power = bill.cost_per_month
    scaled = c.scaled(dp)
    bindings = c.binding(dp)
    teams = {name: {"users": int(t), "ceilings": {k: float(scaled[k][i]) for k in scaled},
                    "binding": bindings[i], "lower_bounds": [k for k in scaled if c.at_least[k][i]]}
             for i, (name, t) in enumerate(zip(c.names, c.targets))}
    worst = int(np.argmin([scaled[bindings[i]][i] / c.targets[i] for i in range(len(c.names))]))
    total = rent + (power or 0.0)
    return FleetOption(
        model=shape.model.name, precision=shape.precision, weights_precision=shape.weights_precision,
        kv_cache_dtype=shape.kv_cache_dtype, gpu=shape.gpu.key, tp=shape.tp, dp=dp,
        price_per_gpu_hour=shape.price.per_hour, currency=space.currency, rent_per_month=rent,
        power_per_month=power, cost_per_month=total, cost_per_user_month=total / load if load > 0 else float("inf"),
        users_served=served, users_served_is_lower_bound=bool(c.at_least[bindings[worst]][worst]),
        binding=bindings[worst], binding_team=c.names[worst], teams=teams,
        pool_tokens_per_replica=shape.fixed.pool_tokens, decoders_per_replica=c.decoders)


def _ranked(sized: list[Sized], space: FleetSpace) -> list[FleetOption]:
    """Each feasible shape at the fewest replicas that serve every team, cheapest first."""
    options = []
    for s in sized:
        if s.reason is None and s.replicas is not None:
            option = option_of(s, s.replicas, space)
            if option is not None:
                options.append(option)
    return sorted(options, key=lambda o: (o.cost_per_month, o.tp * o.dp, -o.users_served))


def frontier(sized: list[Sized], space: FleetSpace) -> list[FleetOption]:
    """The Pareto frontier of cost against users served: every fleet no cheaper one serves as many users as.

    Each shape contributes DP 1, 2, ... up to the replicas it needs (or --max-gpus): past that a fleet only
    costs more than one that already serves everyone. The frontier ends at the first fleet that serves every
    user (the cheapest one)."""
    total = float(space.models[0].mix.total_users)
    points = []
    for s in sized:
        if s.ceilings is None:
            continue
        top = min(s.replicas or space.max_gpus // s.shape.tp, space.max_gpus // s.shape.tp)
        for dp in range(1, top + 1):
            option = option_of(s, dp, space)
            if option is not None and option.users_served > 0:
                points.append(option)
    points.sort(key=lambda o: (o.cost_per_month, -o.users_served))
    out: list[FleetOption] = []
    for p in points:
        if not out or p.users_served > out[-1].users_served:
            out.append(p)
        if p.users_served >= total:  # the first fleet that serves everyone: past it, more users than asked for
            break
    return out


# -- the search -----------------------------------------------------------------------------

def fleet_search(space: FleetSpace, progress: Progress = None) -> FleetResult:
    """The cheapest fleets for the teams of ``space`` (one team for --users N), the cost-users frontier, the
    winner's recipe and, with several teams, the partitioned split and the verdict between the two."""
    say = progress or (lambda line: None)
    skipped: list[tuple[str, str]] = []
    asked = (len(space.models) * len(space.gpus) * len(space.tensor_parallel_sizes) * len(space.precisions)
             * len(space.kv_cache_dtypes))
    say(f"fleet: up to {asked:,} replica shapes ({len(space.models)} model(s) x {len(space.gpus)} GPU type(s) x "
        f"{len(space.tensor_parallel_sizes)} TP x {len(space.precisions)} precision(s) x "
        f"{len(space.kv_cache_dtypes)} KV dtype(s)); memory reports...")
    shapes = _shapes(space, skipped)
    say(f"fleet: {len(shapes):,} shapes fit; warm fills, decode and latency per shape...")
    cache = CeilingCache()
    sized = size_shapes(shapes, lambda m: m.mix, space, cache)
    skipped += [(_label(s.shape), s.reason) for s in sized if s.reason]
    options = _ranked(sized, space)
    mix = space.models[0].mix
    winner = options[0] if options else None
    result = FleetResult(
        teams=mix.teams, currency=space.currency, price_includes_power=space.price_includes_power,
        hours_per_month=float(space.models[0].knobs.a("power.hours_per_month")), options=tuple(options[:space.top]),
        frontier=tuple(frontier(sized, space)), skipped=tuple(skipped), shapes_searched=len(shapes),
        prices=tuple(space.prices[g.key] for g in space.gpus if g.key in space.prices),
        routing=space.models[0].knobs.sticky_routing, max_gpus=space.max_gpus)
    if winner is not None:
        result = _with_winner(result, winner, sized, space, cache)
    if len(mix.teams) > 1:
        say("fleet: each team on its own replicas...")
        result = replace(result, partition=_partition(shapes, sized, winner, space, cache))
        result = replace(result, verdict=verdict(result.winner, result.partition, result.shared_pool,
                                                      space.max_gpus))
    return result


def _label(shape: Shape) -> str:
    weights = shape.weights_precision.removeprefix("native (").removesuffix(")")
    return f"{shape.model.name} {weights} KV {shape.kv_cache_dtype} on {shape.tp}x{shape.gpu.key}"


def _find(sized: list[Sized], option: FleetOption) -> Sized:
    return next(s for s in sized if (s.shape.model.name, s.shape.gpu.key, s.shape.tp, s.shape.precision,
                                     s.shape.kv_cache_dtype) == (option.model, option.gpu, option.tp, option.precision,
                                                                 option.kv_cache_dtype))


def _with_winner(result: FleetResult, winner: FleetOption, sized: list[Sized], space: FleetSpace,
                 cache: CeilingCache) -> FleetResult:
    """The winner planned as ``servesize plan`` plans it (one workload), or its teams panel (several), and its
    ``vllm serve`` line and routing."""
    shape = _find(sized, winner).shape
    fixed, dep = shape.with_replicas(winner.dp)
    mix, knobs = shape.model.mix, shape.model.knobs
    if mix.single is not None:
        plan = make_plan(fixed, dep, mix.single, knobs)
        return replace(result, winner=winner, plan=plan, recipe=plan.recipe, recipe_notes=plan.recipe_notes)
    pool = shared_pool(fixed, mix, knobs, cache=cache)
    checkpoint = checkpoint_note(fixed)
    notes = [checkpoint] if checkpoint else []
    notes += [f"--max-num-seqs {pool.decoders_per_replica}: the decoders per replica that keep "
             f"{float(knob_value(knobs, 'decode_floor')):g} tok/s, every team's users counted"]
    routing = routing_note(fixed, knobs)
    if routing:
        notes.append(routing)
    notes.append("the teams share every replica: route each session to its home replica whatever its team")
    command = serve_command(fixed, dep, knobs, pool.decoders_per_replica, spec_speedup_of(fixed, knobs))
    return replace(result, winner=winner, shared_pool=pool, recipe=command, recipe_notes=tuple(notes))


def _partition(shapes: list[Shape], shared: list[Sized], winner: FleetOption | None, space: FleetSpace,
               cache: CeilingCache) -> Partition:
    """Each team on replicas of its own: its cheapest fleet alone, and the split of the shared winner's shape."""
    teams = space.models[0].mix.teams
    cheapest: list[TeamSplit] = []
    same_shape: list[TeamSplit] = []
    for i, team in enumerate(teams):
        alone = {m.name: TeamMix((m.mix.teams[i],)) for m in space.models}
        sized = size_shapes(shapes, _lookup(alone), space, cache)
        ranked = _ranked(sized, space)
        cheapest.append(TeamSplit(team.name, team.users, ranked[0] if ranked else None,
                                  None if ranked else _why_none(sized)))
        if winner is not None:
            s = _find(sized, winner)
            option = option_of(s, s.replicas, space) if s.replicas is not None and s.reason is None else None
            same_shape.append(TeamSplit(team.name, team.users, option, s.reason))
    return Partition(tuple(cheapest), tuple(same_shape) if winner is not None else None)


def _lookup(mixes: dict[str, TeamMix]) -> Callable[[ModelChoice], TeamMix]:
    def mix_of(model: ModelChoice) -> TeamMix:
        return mixes[model.name]

    return mix_of


def replicas_for_plan(per_replica: Mapping[str, float], users: int, sticky: bool) -> dict[str, Any]:
    """plan --users N: the fewest replicas whose four ceilings (one replica's, scaled as the plan scales them:
    the cache only under sticky routing) all reach N, and the ceiling that sets that number."""
    need = {}
    for key, value in per_replica.items():
        if value <= 0:
            raise BadInput(f"one replica's {key} ceiling is 0 users: no number of replicas serves {users:,}")
        if key == "cache" and not sticky:
            if value < users:
                raise BadInput(f"one replica keeps {value:,.0f} users warm and, without sticky routing, more "
                               f"replicas keep no more: no number of them keeps {users:,} warm (--sticky-routing)", field="sticky_routing")
            need[key] = 1
        else:
            need[key] = replicas_for(float(value), float(users))
    sets = max(need, key=lambda k: (need[k], -per_replica[k]))
    if need[sets] > MAX_GPUS:
        raise BadInput(f"{users:,} users need more than {MAX_GPUS:,} replicas by the {sets} ceiling (one replica holds "
                       f"{per_replica[sets]:.3g} users): check the workload and the knobs, or ask for fewer users")
    return {"users": users, "replicas": need[sets], "sets_replicas": sets, "replicas_by_ceiling": need,
            "per_replica": dict(per_replica)}


def _why_none(sized: list[Sized]) -> str:
    reasons = [s.reason for s in sized if s.reason]
    if not reasons:
        return "no shape fits"
    common = max(set(reasons), key=reasons.count)
    return f"no shape serves it; the most common reason: {common}"
