"""plan --users N and servesize fleet.

- ``users_sizing``        plan --users N: the scenario planned with one replica of --tensor-parallel-size
                          GPUs of --gpus's type, then ``sized_scenario`` with the replicas N needs;
- ``teams_of``            fleet --users N is one team of the workload; --team NAME=USERS[:WORKLOAD] each its
                          own (a preset name or a workload file; without one, the fleet's workload);
- ``fleet_currency``      the fleet's prices and power bill in one currency, never converted;
- ``fleet_space``         a FleetQuery -> what sizing.search searches; ``confirm_scenario`` the Scenario
                          (and ``plan_command`` the command line) that confirms its answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesize.engine.deployment import Deployment, derived_max_model_len
from servesize.engine.versions import parse_version
from servesize.errors import BadInput
from servesize.fleet_query import FleetQuery
from servesize.model.catalogue import InlineConfig
from servesize.planning.inputs import Knobs
from servesize.resolve.knobs import check_speculation, knobs_of, planned_deployment
from servesize.resolve.model import check_moe_backend, display_name, gpus_of, hf_id_of, model_of
from servesize.resolve.workload import resolved_workload
from servesize.scenario import PARAMS, Scenario, WorkloadFields
from servesize.vllm_logs.calibration import Calibration
from servesize.workload.catalogue import preset_names
from servesize.workload.model import Workload
from servesize.workload.teams import Team

if TYPE_CHECKING:  # the fleet's modules load with the first fleet: memory, fit and plan start without them
    from servesize.sizing.result import FleetOption
    from servesize.sizing.search import FleetSpace, ModelChoice


def users_sizing(scenario: Scenario) -> Scenario:
    """plan --users N: the scenario with one replica of --tensor-parallel-size GPUs of --gpus's type (its count is
    what the sizing answers), planned first to learn what one replica holds."""
    if scenario.data_parallel_size != 1:
        raise BadInput("--users sizes the data-parallel replicas itself: drop --data-parallel-size", field="users")
    gpu = gpus_of(scenario).gpu.key
    return scenario.replace(users=None, gpus=f"{scenario.tensor_parallel_size}x{gpu}")


def sized_scenario(scenario: Scenario, replicas: int) -> Scenario:
    """The scenario with ``replicas`` replicas of --tensor-parallel-size GPUs (what plan --users answers)."""
    gpu = gpus_of(scenario).gpu.key
    return scenario.replace(users=None, data_parallel_size=replicas,
                            gpus=f"{scenario.tensor_parallel_size * replicas}x{gpu}")


def _team_spec(spec: str) -> tuple[str, int, str | None]:
    """'research=40:long.toml' -> ('research', 40, 'long.toml')."""
    name, sep, rest = spec.partition("=")
    users_text, _, workload = rest.partition(":")
    if not sep or not name.strip() or not users_text.strip():
        raise BadInput(f"--team {spec!r}: write NAME=USERS[:WORKLOAD], e.g. research=40:rag or support=200:my.toml", field="team")
    try:
        users = int(users_text.strip().replace(",", "").replace("_", ""))
    except ValueError:
        raise BadInput(f"--team {spec!r}: {users_text.strip()!r} is not a whole number of users", field="team") from None
    return name.strip(), users, workload.strip() or None


def _priorities(specs_given: tuple[str, ...] | None, names: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for spec in specs_given or ():
        name, sep, level = spec.partition("=")
        if not sep or name.strip() not in names:
            raise BadInput(f"--priority {spec!r}: write NAME=LEVEL for one of the teams ({', '.join(names)})", field="priority")
        try:
            out[name.strip()] = int(level)
        except ValueError:
            raise BadInput(f"--priority {spec!r}: {level.strip()!r} is not a whole number", field="priority") from None
    return out


def teams_from(source: Scenario | FleetQuery, specs_given: tuple[str, ...] | list[str],
               priorities: tuple[str, ...] | list[str] | None, model_limit: int | None = None
               ) -> tuple[tuple[Team, ...], Workload]:
    """Teams from NAME=USERS[:WORKLOAD] specs: each its own workload (a preset name or a workload file, capped as
    ``source`` caps, --max-model-len else the model's context), else ``source``'s (a FleetQuery or Scenario)."""
    base, _ = resolved_workload(source, model_limit)
    specs = [_team_spec(spec) for spec in specs_given]
    priority = _priorities(tuple(priorities or ()), [name for name, _, _ in specs])
    teams = []
    for name, users, workload in specs:
        own, where = base, "the fleet's workload"
        if workload is not None:
            named = workload in preset_names()
            given = WorkloadFields(preset=workload) if named else WorkloadFields(workload=workload)
            own = resolved_workload(given, model_limit, cap=source.max_model_len)[0]
            where = f"preset {workload}" if named else f"file {workload}"
        teams.append(Team(name, users, own, priority.get(name, 0), where))
    return tuple(teams), base


def teams_of(query: FleetQuery, model_limit: int | None = None) -> tuple[tuple[Team, ...], Workload]:
    """The teams (and the fleet's own workload): --users N is one team of the workload; each --team its own."""
    if query.users is not None:
        base, origin = resolved_workload(query, model_limit)
        return (Team("users", query.users, base, source=f"preset {origin.preset.name}"),), base
    return teams_from(query, query.team or (), query.priority, model_limit)


def fleet_currency(query: FleetQuery) -> str:
    """The fleet's currency: --currency, else the price list's. A power bill added to the prices must be in it:
    the default tariff is in EUR (power.currency), so another currency needs its own --electricity-price."""
    from servesize.sizing.prices import gpu_hour_prices

    listed = {p.currency for p in gpu_hour_prices().values()}
    currency = query.currency or (listed.pop() if len(listed) == 1 else "USD")
    if not query.price_includes_power:
        tariff_currency = query.currency or str(Knobs().a("power.currency"))
        if tariff_currency != currency or (query.electricity_price is None and currency != Knobs().a("power.currency")):
            raise BadInput(f"the power bill and the GPU prices must be in one currency: the prices are in {currency} "
                           f"and the default electricity price is in {Knobs().a('power.currency')}; give "
                           f"--electricity-price PRICE --currency {currency}", field="electricity_price")
    return currency


def _ints(items: tuple[str, ...] | None, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in items or ())
    except ValueError:
        raise BadInput(f"{flag} takes whole numbers, e.g. 1,2,4,8", field=flag.removeprefix("--").replace("-", "_")) from None
    if not values or min(values) < 1:
        raise BadInput(f"{flag} takes whole numbers >= 1, e.g. 1,2,4,8", field=flag.removeprefix("--").replace("-", "_"))
    return values


def fleet_space(query: FleetQuery) -> tuple[FleetSpace, dict[str, str | InlineConfig]]:
    """What sizing.search searches, and each model's display name -> the spec it was given as."""
    from servesize.engine.kv_cache import KV_CACHE_DTYPES
    from servesize.engine.weights import normalise_precision
    from servesize.model.hardware import find_gpu, load_gpus
    from servesize.sizing.prices import parse_price, with_overrides
    from servesize.sizing.search import FleetSpace

    lists = query.lists()
    for name, most in (("models", 8), ("gpus_from", 64), ("precision", 4), ("kv_cache_dtype", 4),
                       ("tensor_parallel_size", 8)):
        if len(lists[name] or ()) > most:
            raise BadInput(f"--{name.replace('_', '-')} takes at most {most} values (a search space to read, "
                           "not to enumerate); run the fleet once per group")
    gpus = tuple(dict.fromkeys(find_gpu(g) for g in lists["gpus_from"])) if lists["gpus_from"] \
        else tuple(load_gpus().values())
    models: list[ModelChoice] = []
    specs: dict[str, str | InlineConfig] = {}
    for spec in lists["models"] or ():
        models.append(_model_choice(query, spec, gpus[0].key))
        specs[models[-1].name] = spec
    if not models:
        raise BadInput("name the model(s) to serve: --models qwen3.6-27b (a comma list compares several)", field="models")
    for kv in lists["kv_cache_dtype"] or ():
        if kv not in KV_CACHE_DTYPES:
            raise BadInput(f"--kv-cache-dtype {kv!r} is not one of {', '.join(KV_CACHE_DTYPES)}", field="kv_cache_dtype")
    precisions = lists["precision"] or ("native",)
    for precision in precisions:
        normalise_precision(precision)  # an unknown precision is refused before the search
    overrides = dict(parse_price(text) for text in query.gpu_hour_price or ())
    currency = fleet_currency(query)
    prices = with_overrides(overrides, currency, query.price_includes_power)
    if not any(g.key in prices for g in gpus):
        raise BadInput(f"no GPU searched has a price in {currency}: give --gpu-hour-price GPU=PRICE "
                       "(data/prices.toml lists USD prices)", field="gpu_hour_price")
    space = FleetSpace(tuple(models), gpus, prices, precisions, lists["kv_cache_dtype"] or ("auto",),
                       _ints(lists["tensor_parallel_size"], "--tensor-parallel-size"), query.max_gpus, query.budget,
                       query.top, currency, query.price_includes_power)
    return space, specs


def _model_choice(query: FleetQuery, spec: str | InlineConfig, gpu_key: str) -> ModelChoice:
    """One model of the search: its knobs, teams and planned deployment (what every fleet of it shares)."""
    from servesize.sizing.search import ModelChoice
    from servesize.workload.teams import TeamMix

    model = model_of(spec)
    # what every fleet of this model shares, as a Scenario (its GPUs, one of the search's, are not read here)
    shared = Scenario(model=spec, gpus=f"1x{gpu_key}", **query.shared())
    knobs = knobs_of(shared)
    check_speculation(shared, model, knobs)
    check_moe_backend(query.moe_backend, parse_version(query.vllm_version))
    teams, base = teams_of(query, derived_max_model_len(model.architecture))
    cap = max(t.workload.max_model_len for t in teams)
    template = Deployment(gpu_memory_utilization=query.gpu_memory_utilization,
                          max_num_batched_tokens=query.max_num_batched_tokens, block_size=query.block_size,
                          enforce_eager=query.enforce_eager, moe_backend=query.moe_backend,
                          mamba_ssm_cache_dtype=query.mamba_ssm_cache_dtype,
                          mamba_cache_mode=query.mamba_cache_mode,
                          num_speculative_tokens=query.num_speculative_tokens or 0, vllm_version=query.vllm_version)
    deployment = planned_deployment(template, model, base.replace(max_model_len=cap), knobs, shared)
    return ModelChoice(display_name(model), hf_id_of(model, spec), model.architecture, deployment, TeamMix(teams), knobs)


def confirm_scenario(query: FleetQuery, spec: str | InlineConfig, option: FleetOption) -> Scenario | None:
    """The Scenario ``servesize plan`` confirms a one-workload fleet answer with (None for several teams)."""
    if query.users is None:
        return None
    return Scenario(model=spec, gpus=option.gpus, tensor_parallel_size=option.tp, data_parallel_size=option.dp,
                    quantization=option.precision, kv_cache_dtype=option.kv_cache_dtype, **query.shared())


def plan_command(scenario: Scenario) -> str:
    """``servesize plan ...``: the command line of ``scenario`` (its fields that differ from their defaults)."""
    import shlex

    parts = ["servesize", "plan"]
    model = scenario.model
    parts.append(model if isinstance(model, str) else "<inline config>")
    for name, value in scenario.explicit().items():
        if name == "model":
            continue
        p = PARAMS[name]
        if isinstance(value, bool):
            parts.append(p.flag if value else f"--no-{p.flag[2:]}")
        elif isinstance(value, (Workload, Calibration)):
            parts.append(f"{p.flag} <{type(value).__name__} object>")
        else:
            parts += [p.flag, shlex.quote(f"{value:g}" if isinstance(value, float) else str(value))]
    return " ".join(parts)


