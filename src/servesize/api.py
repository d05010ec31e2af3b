"""The library every face calls: the CLI, the explorer, the measurement harness and the tests.

    import servesize as s
    sc = s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")
    s.memory(sc)      # MemoryReport: budget, pool, the lines vLLM logs
    s.plan(sc)        # Plan: warm users, ceilings, binding, recipe, bill, sensitivity
    s.fit("4xH100", max_model_len=8192)    # what fits: one row per model (all_placements=True: every one)
    s.fleet(users=400, models="qwen3.6-27b")  # the cheapest fleet for N users; teams with team=[...]

Each function is resolve (``servesize.resolve``: every rule, named) -> engine / planner -> result.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

# ``X as X``: re-exported for the explorer, which reads the library through this module only (tests/test_layering.py)
from servesize.engine.kv_cache import MODELLED_KV_CACHE_DTYPES as MODELLED_KV_CACHE_DTYPES
from servesize.engine.memory import MemoryReport as MemoryReport
from servesize.engine.memory import memory_report
from servesize.engine.placement import FitResult
from servesize.engine.placement import fit as fit_placements
from servesize.engine.weights import PRECISIONS as PRECISIONS
from servesize.errors import BadInput
from servesize.lazy import load
from servesize.limits import require_regular
from servesize.model.catalogue import InlineConfig, ResolvedModel, load_catalogue
from servesize.model.hardware import parse_gpus
from servesize.resolve.measured import calibrated, split_of
from servesize.resolve.model import ENGINE_FIELDS as ENGINE_FIELDS
from servesize.resolve.model import deployment_of, display_name, gpus_of, model_of
from servesize.resolve.served import with_serve_line
from servesize.scenario import PARAMS, SWEEPABLE, FitQuery, Scenario
from servesize.workload.catalogue import preset_names as preset_names

if TYPE_CHECKING:  # the planner's modules load with the first plan: memory, fit and models start without them
    from servesize.engine.models_table import ModelRow, ModelsResult
    from servesize.fleet_query import FleetQuery
    from servesize.planning.at_load import BURST_FLUSH as BURST_FLUSH
    from servesize.planning.at_load import MAX_DECODERS as MAX_DECODERS
    from servesize.planning.at_load import AtLoad as AtLoad
    from servesize.planning.at_load import Load as Load
    from servesize.planning.disaggregated import DisaggregatedPlan
    from servesize.planning.inputs import PLANNING_PERCENTILE as PLANNING_PERCENTILE
    from servesize.planning.latency import LatencyReport
    from servesize.planning.plan import Plan as Plan
    from servesize.resolve.plan import plan_inputs as plan_inputs
    from servesize.simulate.cache import ModelledService
    from servesize.simulate.replay import Replay
    from servesize.sizing.result import FleetOption as FleetOption
    from servesize.sizing.result import FleetResult as FleetResult
    from servesize.sizing.teams import TeamsPanel
    from servesize.vllm_logs.calibration import Calibration
    from servesize.vllm_logs.parse import LogFacts
    from servesize.workload.fit import WorkloadFit
    from servesize.workload.model import Workload as Workload
    from servesize.workload.model import length_mass as length_mass
    from servesize.workload.presets import Preset

# the planner's and the workload's names the explorer reads through this module, imported with the first one asked
# for (PEP 562): the engine's commands (memory, fit, models) never load them
_PLANNER_EXPORTS = {"BURST_FLUSH": "servesize.planning.at_load", "MAX_DECODERS": "servesize.planning.at_load",
                    "Load": "servesize.planning.at_load", "PLANNING_PERCENTILE": "servesize.planning.inputs",
                    "plan_inputs": "servesize.resolve.plan", "Workload": "servesize.workload.model",
                    "length_mass": "servesize.workload.model"}


def __getattr__(name: str) -> Any:
    return load(globals(), _PLANNER_EXPORTS, name)


MAX_SWEEP_VALUES = 64  # a sweep is a table to read; past this, run plan in a loop


def resolve_model(spec: str | InlineConfig) -> ResolvedModel:
    """MODEL as the CLI takes it (a catalogue name, a config.json or folder, a Hugging Face id)."""
    return model_of(spec)


def model_name(scenario: Scenario) -> str:
    """The name plan shows for the scenario's model (the catalogue key, else the config's architecture name)."""
    if scenario.model is None:
        raise BadInput("no model given", field="model")
    return display_name(model_of(scenario.model))


def models(names: list[str] | None = None, *, explain: bool = False) -> ModelsResult:
    """The catalogue (or the models named): parameters, layers by kind, KV bytes per token at 16 bits."""
    from servesize.engine.models_table import ModelsResult, model_row

    rows: list[ModelRow] = []
    for name in names or []:
        resolved = model_of(name)
        rows.append(model_row(resolved.architecture, resolved.entry,
                              resolved.entry.source if resolved.entry else resolved.origin))
    if not names:
        rows = [model_row(e.architecture(), e, e.source) for e in load_catalogue().values()]
    return ModelsResult(tuple(rows), explain=explain)


def memory(scenario: Scenario) -> MemoryReport:
    """vLLM's memory budget and KV pool for the scenario's flags, down to the lines it logs."""
    scenario, line = with_serve_line(scenario)
    model = model_of(scenario.model)
    measured = calibrated(scenario, deployment_of(scenario, model))
    deployment, split = split_of(scenario, model, measured)
    report = memory_report(model.architecture, gpus_of(scenario), deployment, budget=scenario.budget,
                           name=display_name(model), flags_not_affecting=line.not_affecting if line else (),
                           flags_estimated=line.estimated if line else (),
                           flags_not_modelled=line.not_modelled if line else ())
    return replace(report, placement=split)


def plan(scenario: Scenario, *, sensitivity: bool = True, progress: Callable[[str], None] | None = None,
         load: Load | None = None) -> Plan:
    """Warm users, the four ceilings and which binds, the vLLM recipe, the bill and (unless
    ``sensitivity=False``) where each named assumption would flip the verdict.

    ``progress`` hears one line when the inputs are resolved and the Monte-Carlo starts.

    ``load``: also price the plan at that load (``Plan.at_load``: latency, decode and the bill at
    ``load.load_users`` and a burst of ``load.burst`` misses; see ``at_load``).

    ``Scenario(users=N)``: how many GPUs of --gpus's type serve N users; the plan of that fleet, with the
    answer in ``plan.sizing``."""
    from servesize.resolve.plan import plan_inputs

    if scenario.disaggregated:
        raise BadInput("a disaggregated layout (--prefill-instances, --decode-instances) is planned by "
                       "plan_disaggregated (servesize plan prints it)", field="prefill_instances")
    from servesize.resolve.disaggregated import refuse_layout_fields_alone

    refuse_layout_fields_alone(scenario)
    if load is not None:
        planned = plan(scenario, sensitivity=sensitivity, progress=progress)
        return replace(planned, at_load=at_load(planned, load))
    if scenario.users is not None:
        return _sized_plan(scenario, sensitivity, progress)
    inputs = plan_inputs(scenario)
    report, fixed = inputs.memory_and_fixed()
    if progress is not None:
        progress("planning (Monte-Carlo fills)...")
    from servesize.planning.plan import make_plan
    from servesize.scenario import SENSITIVITY_ROWS

    result = make_plan(fixed, inputs.deployment, inputs.workload, inputs.knobs,
                       sensitivity_rows=SENSITIVITY_ROWS if sensitivity else None, memory=report, origin=inputs.origin)
    return replace(result, placement=inputs.split)


def plan_disaggregated(scenario: Scenario, *, progress: Callable[[str], None] | None = None) -> DisaggregatedPlan:
    """Prefill and decode in separate instances (``--prefill-instances X --decode-instances Y``): the layout's users
    and its six ceilings (planning.disaggregated), the pull per warm, cold and starting turn (engine.kv_transfer),
    and the aggregated plan on the same GPUs beside it."""
    from servesize.engine.kv_transfer import handover_seconds, nixl_pull
    from servesize.planning.ceilings import cold_shares, warm_prefill_tokens
    from servesize.planning.disaggregated import Aggregated, DisaggregatedPlan, TurnTransfer, link_load, pull_time
    from servesize.planning.inputs import knob_value
    from servesize.planning.plan import make_plan
    from servesize.resolve.disaggregated import disaggregated_layout
    from servesize.resolve.plan import plan_inputs

    layout, prefill_sc, decode_sc, aggregated_sc = disaggregated_layout(scenario)
    if progress is not None:
        progress(f"planning the decode pool ({layout.decode_instances} x TP {layout.decode_tp})...")
    d_in = plan_inputs(decode_sc)
    d_report, d_fixed = d_in.memory_and_fixed()
    d_knobs = replace(d_in.knobs, overrides=d_in.knobs.overrides + (("load.interference", False),))
    decode = make_plan(d_fixed, d_in.deployment, d_in.workload, d_knobs, memory=d_report, origin=d_in.origin)
    arch, dep, workload = d_in.model.architecture, d_report.deployment, d_in.workload
    if dep.max_model_len is None:
        raise BadInput("the decode pool's deployment has no --max-model-len")  # resolved deployments have one
    context = int(min(workload.user.median_tokens, float(dep.max_model_len)))
    warm = warm_prefill_tokens(d_fixed, workload, d_knobs)  # the turn and the blocks its hit does not cover
    hits = {"warm": max(0, context - int(math.ceil(warm))), "cold": 0,
            "start": min(int(workload.user.prefix_tokens), context)}
    step_s = float(decode.result.spec_speedup) / float(knob_value(d_knobs, "decode_floor"))
    turns = {}
    for turn, hit in hits.items():
        pull = nixl_pull(arch, dep, context, hit, d_in.gpus.gpu)
        took = pull_time(pull, layout, d_knobs)
        turns[turn] = TurnTransfer(turn, context, pull, took,
                                   handover_seconds(took, step_s, float(d_knobs.a("kv_transfer.handover_steps"))))
    limit = float(knob_value(d_knobs, "ttft_limit_s"))
    budget = limit - turns["cold"].handover_s
    if budget <= 0:
        raise BadInput(f"a cold turn's handover over {layout.link['name']} takes {turns['cold'].handover_s:.2f} s, the "
                       f"whole {limit:g} s TTFT limit: give a faster --kv-link or a longer --ttft-limit")
    if progress is not None:
        progress(f"planning the prefill pool ({layout.prefill_instances} x TP {layout.prefill_tp})...")
    p_in = plan_inputs(prefill_sc.replace(ttft_limit=budget))
    p_report, p_fixed = p_in.memory_and_fixed()
    prefill = make_plan(p_fixed, p_in.deployment, p_in.workload, p_in.knobs, memory=p_report, origin=p_in.origin)
    invalidated, started = cold_shares(workload, d_knobs)
    shares = {"warm": max(0.0, 1.0 - invalidated - started), "cold": invalidated, "start": started}
    link = link_load(layout, turns, shares, workload, float(d_knobs.a("kv_transfer.link_efficiency")))
    if progress is not None:
        progress("planning the aggregated layout on the same GPUs...")
    aggregated = Aggregated(tuple(plan(sc, sensitivity=False) for sc in aggregated_sc))
    return DisaggregatedPlan(layout, prefill, decode, turns, link, step_s, limit, budget, aggregated)


# of kv_transfer.handover_steps, the decode steps the disaggregated simulator steps through itself: on average half a
# step waiting for the next step to start, and the step that recomputes the last prompt token; the rest (the pull's
# dispatch with a step, its completion noticed at a step's end) is added to the hand-over as time
SIMULATED_HANDOVER_STEPS = 1.5


def check_disaggregated(scenario: Scenario, *, planned: DisaggregatedPlan | None = None, warmup: float = 0.5,
                        seed: int = 0, max_users: int | None = None,
                        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The engine simulator on a disaggregated layout (simulate/disaggregated.py: every prefill and decode instance
    an engine of its own, the pull between them priced as the plan prices it), on sessions generated from the
    workload: its users at the comfort SLO beside the plan's, whether they agree within 15%, and what one user more
    breaks on."""
    from dataclasses import replace as replaced
    from functools import lru_cache

    from servesize.engine.kv_transfer import nixl_pull, prefill_backoff
    from servesize.limits import MAX_ENGINE_USERS
    from servesize.planning.ceilings import step_model_of
    from servesize.planning.disaggregated import pull_time
    from servesize.planning.inputs import knob_value
    from servesize.resolve.disaggregated import disaggregated_layout
    from servesize.resolve.plan import plan_inputs
    from servesize.simulate import engine as eng
    from servesize.simulate.disaggregated import simulate_disaggregated
    from servesize.simulate.replay import ReplayOptions, build_replay

    planned = planned if planned is not None else plan_disaggregated(scenario, progress=progress)
    layout, prefill_sc, decode_sc, _ = disaggregated_layout(scenario)
    configs = []
    for pool_sc in (prefill_sc, decode_sc):
        inputs = plan_inputs(pool_sc)
        report, fixed = inputs.memory_and_fixed(check_prefixes=False)
        cfg = _engine_config(report)
        configs.append((inputs, report, cfg, step_model_of(fixed, inputs.knobs)))
    (_p_in, p_report, p_cfg, p_times), (d_in, d_report, d_cfg, d_times) = configs
    if p_cfg.block_size != d_cfg.block_size:
        raise BadInput(f"the prefill instance's blocks ({p_cfg.block_size} tokens) and the decode instance's "
                       f"({d_cfg.block_size}) differ: the simulator replays one block size")
    knobs, arch, dep, gpu = d_in.knobs, d_in.model.architecture, d_report.deployment, d_in.gpus.gpu

    @lru_cache(maxsize=65536)
    def pull_s(prompt: int, hit: int) -> float:
        pull = nixl_pull(arch, dep, min(prompt, int(dep.max_model_len or prompt)), min(hit, prompt), gpu)
        return pull_time(pull, layout, knobs).seconds

    extra_s = max(0.0, float(knobs.a("kv_transfer.handover_steps")) - SIMULATED_HANDOVER_STEPS) * planned.decode_step_s
    recompute = max(1, prefill_backoff(arch, dep))
    comfort = eng.Comfort(ttft_limit_s=float(knob_value(knobs, "ttft_limit_s")),
                          decode_floor_tok_s=float(knob_value(knobs, "decode_floor")))
    source = _simulation_trace(d_in.workload, None, None, None, seed)
    base = ReplayOptions(requests="all", warmup=0.0, seed=seed, block_size=d_cfg.block_size, align="stagger", cut=False,
                         max_model_len=min(p_report.pool.max_model_len, d_report.pool.max_model_len),
                         session_gap_s=float(d_in.workload.think_time_s))

    def run_at(n: int) -> Any:
        replay = build_replay(source, replaced(base, users=n))
        return simulate_disaggregated(replay, (p_cfg, p_times, layout.prefill_instances),
                                      (d_cfg, d_times, layout.decode_instances), pull_s, extra_s, recompute,
                                      warmup=warmup)

    found = eng.users_at_comfort(run_at, comfort, max_users=max_users or MAX_ENGINE_USERS, progress=progress)
    plan_users = planned.users
    gap = (plan_users - found.users) / found.users if found.users else None
    why = eng.disagreement(plan_users, planned.binding, found)
    return {"layout": layout.name, "engine_users": found.users, "plan_users": plan_users, "plan_binding": planned.binding,
            "gap": gap, "agree": why is None, "tolerance": eng.AGREEMENT, "capped": found.capped,
            "breaks_at": found.breaks_at, "reason": found.reason, "line": found.line(), "disagreement": why,
            "extra_handover_s": extra_s, "recompute_tokens": recompute}


def disaggregated_layouts(scenario: Scenario, *, progress: Callable[[str], None] | None = None
                          ) -> list[DisaggregatedPlan]:
    """Every xPyD layout of ``scenario``'s TP that fills --gpus (x + y instances, at least one of each), planned,
    the most users first: which split of these GPUs between prefill and decode serves the most."""
    from servesize.resolve.disaggregated import without_layout

    if scenario.prefill_gpu is not None:
        raise BadInput("--prefill-gpu: the search over every split of --gpus between prefill and decode runs on one GPU "
                       "type; plan a layout of two types with --prefill-instances X --decode-instances Y",
                       field="prefill_gpu")
    group = parse_gpus(scenario.gpus)
    tp = scenario.tensor_parallel_size
    instances = group.count // tp
    if instances < 2:
        raise BadInput(f"{group.count} GPU(s) at TP {tp} hold {instances} instance(s): a disaggregated layout needs "
                       "one prefill and one decode instance at least", field="gpus")
    base = without_layout(scenario)
    plans = [plan_disaggregated(base.replace(prefill_instances=x, decode_instances=instances - x), progress=progress)
             for x in range(1, instances)]
    return sorted(plans, key=lambda p: -p.users)


def at_load(plan: Plan, load: Load) -> AtLoad:
    """A plan priced at a load (``planning.at_load``): the latency, the per-user decode and the bill at
    ``load.load_users`` (None: the binding ceiling) and a burst of ``load.burst`` simultaneous misses."""
    from servesize.planning.at_load import at_load as priced

    return priced(plan, load)


def limit_status(at: AtLoad) -> dict[str, str]:
    """ok / over for the cold miss's TTFT and for the burst at the load (``planning.limits``)."""
    from servesize.planning.limits import burst_over, miss_over

    return {"ttft_miss": "over" if miss_over(at.latency) else "ok", "burst": "over" if burst_over(at.latency) else "ok"}


def latency_at(plan: Plan, users: float, *, burst: float = 1.0, miss_rate: float | None = None) -> LatencyReport:
    """The plan's latency report at ``users`` (and at ``miss_rate`` instead of the workload's own)."""
    from servesize.planning.at_load import latency_at as priced

    return priced(plan, users, burst=burst, miss_rate=miss_rate)


def decode_at(plan: Plan, decoders: Any) -> tuple[dict[str, Any], float]:
    """Per-user decode p5/p50/p95 (and the aggregate p50 per replica) at each count of concurrent decoders
    per replica, on the plan's own context bank; and the tokens per step speculative decoding gives."""
    from servesize.planning.at_load import decode_at as curve

    return curve(plan, decoders)


def decode_mfu_at(plan: Plan, decoders: Any) -> Any:
    """Decode's effective MFU (p50: FLOPs a step executes / its roofline time / TP x dense peak) at each count of
    concurrent decoders per replica; None where the GPU's FLOP/s are not priced."""
    from servesize.planning.at_load import mfu_at

    return mfu_at(plan, decoders)


def tp_efficiency(plan: Plan) -> float:
    """The decode's tensor-parallel efficiency for the plan's deployment (the knob, or its default for TP)."""
    from servesize.planning.at_load import tp_efficiency as eff

    return eff(plan)


def knob(plan: Plan, name: str) -> Any:
    """The value a modelled knob took in the plan (its flag's, else the assumptions')."""
    from servesize.planning.inputs import knob_value

    return knob_value(plan.knobs, name)


def load_model(plan: Plan | None = None) -> Any:
    """The load model that computed ``plan``'s ceilings (planning.load_models.LoadModel: its name, title, summary,
    what each ceiling means under it, the CLI's ceiling lines and the verdict's sentence); without a plan, every
    load model by name."""
    from servesize.planning.load_models import LOAD_MODELS
    from servesize.planning.load_models import load_model as of

    return dict(LOAD_MODELS) if plan is None else of(plan.knobs)


def ceiling_names() -> tuple[str, ...]:
    """The four ceilings, in the order every answer lists them."""
    from servesize.planning.ceilings import CEILINGS

    return tuple(CEILINGS)


def sensitivity_ranges() -> dict[str, Any]:
    """The sensitivity panel's table: each row's (kind, field, low, high, unit) as the panel varies it, read from the
    declarations of the fields it varies (``servesize.scenario.SENSITIVITY_ROWS``)."""
    from servesize.scenario import SENSITIVITY_ROWS

    return {name: row.as_tuple() for name, row in SENSITIVITY_ROWS.items()}


def calibration_applies(scenario: Scenario, calibration: Calibration) -> tuple[bool, str]:
    """Whether a calibration fixes this scenario's pool (``resolve.calibrated``, the rule plan and memory apply),
    and what it fixes it from, or why not."""
    from servesize.errors import ServesizeError

    try:
        found = calibrated(scenario.replace(calibration=calibration), deployment_of(scenario))
    except ServesizeError as exc:
        return False, str(exc)
    return True, found.pool_source or ""


def engine_utilization(vllm_version: str, gpu_memory_utilization: float | None, gpus: str,
                       budget: str = "engine") -> float | None:
    """The --gpu-memory-utilization the figures use for the release, GPUs and budget (the simple budget's 0.90
    where None is given, else the engine's default; it does not depend on the model, so any catalogue entry
    resolves it)."""
    from servesize.engine.budget import budget_utilization
    from servesize.engine.deployment import Deployment

    entry = next(iter(load_catalogue().values()))
    return Deployment(vllm_version=vllm_version, gpu_memory_utilization=budget_utilization(budget, gpu_memory_utilization)) \
        .resolved(entry.architecture(), parse_gpus(gpus)).gpu_memory_utilization


# fleet: plan --users N and servesize fleet --------------------------------------------------

def _sized_plan(scenario: Scenario, sensitivity: bool, progress: Callable[[str], None] | None) -> Plan:
    """plan --users N: one replica planned, the replicas N needs (sizing.search.replicas_for_plan), that fleet planned."""
    from dataclasses import replace

    from servesize.planning.ceilings import ceilings
    from servesize.resolve.fleet import sized_scenario, users_sizing
    from servesize.resolve.plan import plan_inputs
    from servesize.sizing.search import replicas_for_plan

    one = users_sizing(scenario)
    inputs = plan_inputs(one)
    _, fixed = inputs.memory_and_fixed()
    per_replica = ceilings(fixed, inputs.workload, inputs.knobs, comfortable=False)
    sizing = replicas_for_plan(per_replica.values, int(scenario.users or 0), inputs.knobs.sticky_routing)
    sized = sized_scenario(scenario, sizing["replicas"])
    result = plan(sized, sensitivity=sensitivity, progress=progress)
    given = gpus_of(scenario)
    sizing.update(gpus=f"{sized.gpus}", gpu=given.gpu.key, tensor_parallel_size=scenario.tensor_parallel_size,
                  gpus_given=scenario.gpus, plan_command=plan_command_of(sized))
    return replace(result, sizing=sizing)


def plan_command_of(scenario: Scenario) -> str:
    from servesize.resolve.fleet import plan_command

    return plan_command(scenario)


def fleet(query: FleetQuery | None = None, *, progress: Callable[[str], None] | None = None, **options: Any) -> FleetResult:
    """The cheapest fleets for N users (``users=``) or several teams (``team=["research=40:rag", ...]``) over GPU
    type x count x precision x KV dtype x TP/DP: the cheapest few, the cost-users frontier, the winner's recipe
    and routing, and with teams the partitioned split and the verdict. ``options`` are FleetQuery's fields.

    The winner of one workload comes with the ``servesize plan`` command (and Scenario) that confirms it."""
    from dataclasses import replace

    from servesize.fleet_query import FleetQuery
    from servesize.resolve.fleet import confirm_scenario, fleet_space, plan_command
    from servesize.sizing.search import fleet_search

    q = query if query is not None else FleetQuery(**options)
    if query is not None and options:
        q = query.replace(**options)
    space, specs = fleet_space(q)
    result = fleet_search(space, progress=progress)
    if result.winner is not None:
        confirm = confirm_scenario(q, specs[result.winner.model], result.winner)
        if confirm is not None:
            result = replace(result, plan_command=plan_command(confirm), confirm=confirm.to_dict(),
                             disaggregated=_disaggregated_beside(confirm, result.winner, q.users or 0, progress))
    return result


def _disaggregated_beside(confirm: Scenario, winner: FleetOption, users: int,
                          progress: Callable[[str], None] | None) -> dict[str, Any]:
    """Prefill and decode apart on the fleet winner's shape (its model, GPU, TP, precision and KV dtype): the xPyD
    layout ``users`` need (a 1P1D plan's ceilings per instance, each pool scaled by its instances), its GPUs and
    cost at the winner's cost per GPU, and the one line that says which of the two the fleet picks, and why."""
    from servesize.errors import ServesizeError
    from servesize.planning.disaggregated import sizing_for
    from servesize.resolve.fleet import plan_command

    if progress is not None:
        progress("fleet: prefill and decode apart on the winner's shape...")
    one_each = confirm.replace(gpus=f"{2 * winner.tp}x{winner.gpu}", data_parallel_size=1, prefill_instances=1,
                               decode_instances=1)
    try:
        sizing = sizing_for(plan_disaggregated(one_each), users)
    except ServesizeError as e:
        return {"considered": False, "why": f"not priced on the winner's shape: {e}"}
    per_gpu = winner.cost_per_month / winner.n_gpu
    cost = sizing.gpus * per_gpu
    layout = one_each.replace(gpus=f"{sizing.gpus}x{winner.gpu}", prefill_instances=sizing.prefill_instances,
                              decode_instances=sizing.decode_instances)
    if sizing.gpus < winner.n_gpu:
        why = (f"{sizing.words()} needs {winner.n_gpu - sizing.gpus} GPU(s) fewer than the aggregated winner's "
               f"{winner.n_gpu}: {cost:,.0f} {winner.currency}/month at its cost per GPU; confirm it with "
               f"{plan_command(layout)}")
    else:
        why = (f"the fleet picks the aggregated winner: prefill and decode apart on its shape need {sizing.gpus} GPUs "
               f"to its {winner.n_gpu}, {sizing.words()}")
    return {"considered": True, "sizing": sizing.to_dict(), "gpus": sizing.gpus, "cost_per_month": cost,
            "cheaper": sizing.gpus < winner.n_gpu, "plan_command": plan_command(layout), "why": why}


def teams(scenario: Scenario, team: list[str] | tuple[str, ...], priority: list[str] | tuple[str, ...] | None = None) -> TeamsPanel:
    """Several teams on the scenario's deployment (its GPUs, TP and DP): each team's warm users when they share
    the pool under LRU (and alone on it), each team's ceilings and miss TTFT, and the replicas of this shape
    the teams need sharing it or each on its own (``sizing.teams.TeamsPanel``; ``.to_dict()`` for a page).

    ``team``: NAME=USERS[:WORKLOAD] (a preset name or a workload file; default the scenario's workload);
    ``priority``: NAME=LEVEL (higher first in the prefill queue)."""
    from dataclasses import replace

    from servesize.resolve.fleet import teams_from
    from servesize.resolve.plan import plan_inputs
    from servesize.sizing.teams import teams_panel
    from servesize.workload.teams import TeamMix

    if scenario.users is not None:
        raise BadInput("teams take each team's users from its spec (NAME=USERS): drop users")
    inputs = plan_inputs(scenario)
    _, fixed = inputs.memory_and_fixed()
    found, _ = teams_from(scenario, tuple(team), priority, inputs.workload.max_model_len)
    capped = tuple(t.replace(workload=t.workload.replace(max_model_len=min(t.workload.max_model_len,
                                                                           fixed.max_model_len)))
                   for t in found)
    return teams_panel(replace(fixed), TeamMix(capped), inputs.knobs)


def sweep(scenario: Scenario, param: str, values: list[Any]) -> dict[str, Any]:
    """Warm users and the four ceilings for each value of one workload field or knob.

    ``values`` are typed values or their text ('31k'); the memory is the scenario's own throughout
    (a parameter that changes the memory, such as the draft count, is planned once per value)."""
    from servesize.planning.plan import SweepCase, sweep_cases
    from servesize.resolve.plan import plan_inputs

    name, typed_values = sweep_values(param, values)
    inputs = plan_inputs(scenario)
    _, fixed = inputs.memory_and_fixed()
    cases = []
    for value, typed in zip(values, typed_values):
        varied = plan_inputs(scenario.replace(**{name: typed}))  # every rule and refusal, as plan applies them
        label = value.strip() if isinstance(value, str) else f"{typed:g}"
        cases.append(SweepCase(label, float(typed), varied.workload, varied.knobs))
    return sweep_cases(fixed, name, cases)


def sweep_values(param: str, values: list[Any]) -> tuple[str, list[Any]]:
    """The field a sweep varies and its typed values, checked before any work is done."""
    name = param.strip().lstrip("-").replace("-", "_")
    if name in ("num_speculative_tokens", "spec_tokens"):
        raise BadInput("--sweep cannot vary the draft count: the memory itself depends on it; "
                       "run plan once per --num-speculative-tokens value", field="num_speculative_tokens")
    if name not in SWEEPABLE:
        raise BadInput(f"--sweep cannot vary {param!r}; choose one of: {', '.join(SWEEPABLE)}")
    if not values:
        raise BadInput("--sweep needs at least one value")
    if len(values) > MAX_SWEEP_VALUES:
        raise BadInput(f"--sweep takes at most {MAX_SWEEP_VALUES} values, got {len(values)}")
    return name, [PARAMS[name].parse(v) for v in values]


def fit(gpus: str | FitQuery, **options: Any) -> FitResult:
    """What these GPUs can serve, with the concurrency each placement allows: one row per model by default
    (the checkpoint's own precision, the smallest placement that serves), every precision and placement with
    ``all_placements=True``.

    ``fit("4xH100", max_model_len=32768, models="llama-3.1-8b,qwen3-8b")``; options are FitQuery's fields
    (``context=`` is accepted as the old name of ``max_model_len``)."""
    if "context" in options:  # the name fit took before vLLM's --max-model-len
        if "max_model_len" in options:
            raise BadInput("give the sequence length once: max_model_len (context is its old name)")
        options["max_model_len"] = options.pop("context")
    query = gpus if isinstance(gpus, FitQuery) else FitQuery(gpus=gpus, **options)
    names = query.model_names()
    if names:
        models = []
        for spec in names:
            m = model_of(spec)
            models.append((display_name(m), m.entry.display if m.entry else display_name(m), m.architecture))
    else:
        models = [(e.key, e.display, e.architecture()) for e in load_catalogue().values()]
    return fit_placements(models, parse_gpus(query.gpus), context=query.max_model_len, precisions=query.precisions(),
                          budget=query.budget, kv_cache_dtype=query.kv_cache_dtype,
                          gpu_memory_utilization=query.gpu_memory_utilization, vllm_version=query.vllm_version,
                          min_concurrency=query.min_concurrency, all_placements=query.all_placements)


def read_vllm_log(text: str, source: str = "<log>") -> LogFacts:
    """Every memory / KV-cache fact a vLLM start-up log states (the text, not a path)."""
    from servesize.vllm_logs.parse import parse_vllm_log

    return parse_vllm_log(text, source=source)


def calibrate(log: str | LogFacts, *, source: str = "<log>", block_size: int | None = None,
              kv_cache_groups: int | None = None, mamba_cache_mode: str | None = None,
              blocks_per_request: int | None = None, num_speculative_tokens: int = 0,
              model: str | None = None) -> Calibration:
    """A start-up log (its text, or what ``read_vllm_log`` found in it) -> a Calibration that
    ``Scenario(calibration=...)`` takes. What a hybrid model's log does not say (its block size, KV-cache
    groups, Mamba cache mode, draft tokens per step or per-request block sum) may be given, and so may the
    model, where the log does not name it."""
    from servesize.vllm_logs.calibration import calibrate as calibrate_facts
    from servesize.vllm_logs.parse import LogFacts, parse_vllm_log

    facts = log if isinstance(log, LogFacts) else parse_vllm_log(log, source=source)
    return calibrate_facts(facts, block_size=block_size, kv_cache_groups=kv_cache_groups,
                           mamba_cache_mode=mamba_cache_mode, blocks_per_request=blocks_per_request,
                           num_speculative_tokens=num_speculative_tokens, model=model)


def fit_workload(path: str | os.PathLike[str], *, column: str | None = None, min_tokens: int | None = None,
                 prefix_tokens: int | None = None, preset: str | None = None, distribution: str = "auto",
                 max_model_len: int | None = None) -> WorkloadFit:
    """A workload fitted from a request log (CSV, JSONL or JSON; gzip allowed): every field fitted from the
    file or left to ``preset`` (default coding-agent), nothing dropped unless ``min_tokens`` asks (None:
    workload.fit.DEFAULT_MIN_TOKENS). ``max_model_len``: a deployment's; longer prompts are left out, as vLLM
    refuses them, and the workload is the requests it accepts (what the engine simulator replays there)."""
    from servesize.workload.fit import DEFAULT_MIN_TOKENS, fit_observations
    from servesize.workload.readers import read_token_counts

    min_tokens = DEFAULT_MIN_TOKENS if min_tokens is None else min_tokens
    obs = read_token_counts(path, column, max_model_len)
    found = fit_observations(obs, min_tokens=min_tokens, prefix_tokens=prefix_tokens, preset_name=preset,
                             distribution=distribution)
    if obs.hash_prefix_tokens is None:
        return found
    return _with_prefix_reuse(found, path, max_model_len)


def _with_prefix_reuse(found: WorkloadFit, path: str | os.PathLike[str], max_model_len: int | None) -> WorkloadFit:
    """A trace whose hash ids are global (requests that share prefixes across users, Mooncake's): its warm requests'
    LRU reuse distances, from the cache replay's one pass over the requests the deployment accepts."""
    from servesize.simulate.replay import ReplayOptions
    from servesize.simulate.traces import read_trace
    from servesize.simulate.users import prefix_reuse
    from servesize.workload.fit import with_prefix_reuse

    reuse = prefix_reuse(read_trace(os.fspath(path)), ReplayOptions(max_model_len=max_model_len),
                         int(found.workload.user.prefix_tokens))
    if reuse is None:
        return found
    how = (f"{reuse.requests:,} requests in arrival order, each block used once a request"
           + (f", prompts past max_model_len {max_model_len:,} left out" if max_model_len else ""))
    return with_prefix_reuse(found, reuse.distances_tokens, reuse.new_tokens, how)


# -- simulate: replay a trace through a vLLM-faithful prefix cache (servesize.simulate) ----------------

def simulate(trace: Any, scenario: Scenario | None = None, *, pool_tokens: int | None = None,
             block_size: int | None = None, requests: str = "main", align: str | None = None, warmup: float = 0.5,
             users: int | None = None, sessions_per_user: int | None = None, target_hit_rate: float | None = None,
             service: str | None = None, output_blocks: bool = True, exact: bool = True, bounds: bool = True,
             users_search: bool = True, curves_for_users: tuple[int, ...] = (), max_model_len: int | None = None,
             seed: int = 0, trace_format: str | None = None, trace_block_size: int | None = None,
             synthetic_sessions: int | None = None, progress: Callable[[str], None] | None = None) -> Any:
    """Hit rate against pool size for a trace (a path, a ``Trace``, or a ``Workload`` to generate sessions
    from), the exact replay at the deployment's pool, and users at ``target_hit_rate``.

    The pool is the ``scenario``'s (``memory``: its blocks, block size and max_model_len) or ``pool_tokens``
    (the engine's KV cache size in tokens, in ``block_size``-token blocks); with neither, only the curve.
    A scenario also prices service times (``service='model'``) and plans the Workload fitted from the trace."""
    from dataclasses import replace

    from servesize.resolve.plan import plan_inputs
    from servesize.simulate import result as sim
    from servesize.simulate.replay import ReplayOptions

    source = _simulation_trace(trace, trace_format, trace_block_size, synthetic_sessions, seed)
    opts = sim.SimulateOptions(
        replay=ReplayOptions(requests=requests, align=align, users=users, sessions_per_user=sessions_per_user,
                             warmup=warmup, seed=seed, block_size=block_size, max_model_len=max_model_len),
        target=sim.DEFAULT_TARGET if target_hit_rate is None else target_hit_rate, service=service,
        output_blocks=output_blocks, exact=exact, bounds=bounds,
        users_search=users_search, curves_for_users=tuple(curves_for_users))
    if scenario is None:
        pool = None if pool_tokens is None else _pool_of_tokens(pool_tokens, block_size or source.block_size)
        return sim.run_simulation(source, pool, opts, progress=progress)
    fitted = simulation_workload(trace, source, opts.replay, getattr(scenario, "preset", None))
    pool_note = None
    try:  # the pool plan uses for this workload (its preset's speculative decoding included)
        inputs = plan_inputs(scenario.replace(workload=fitted.workload))
    except BadInput as exc:
        pool_note = f"plan cannot take the fitted workload ({exc}); the pool is the scenario's own"
        inputs = plan_inputs(scenario)
    report, fixed = inputs.memory_and_fixed(check_prefixes=False)
    pool = sim.PoolSpec(report.pool.num_blocks, report.pool.block_size, f"servesize plan's pool: {report.model} on "
                        f"{report.gpus.count}x{report.gpus.gpu.key}, the workload fitted from the trace",
                        report.pool.max_model_len, report.deployment.max_num_seqs)
    if pool_tokens is not None:
        pool = replace(_pool_of_tokens(pool_tokens, pool.block_size), max_model_len=pool.max_model_len,
                       max_num_seqs=pool.max_num_seqs)

    def model_service(replay: Replay) -> ModelledService:
        from servesize.planning.ceilings import decode_setup, prefill_setup
        from servesize.simulate.cache import ModelledService

        return ModelledService(prefill_setup(fixed, inputs.knobs), decode_setup(fixed, inputs.knobs),
                               replay.input_tokens, replay.output_tokens)

    def plan_fn(workload: Workload) -> dict[str, Any]:
        return sim.plan_summary(plan(scenario.replace(workload=workload), sensitivity=False))

    result = sim.run_simulation(source, pool, opts, model_service=model_service, plan_fn=plan_fn, progress=progress,
                                fitted=fitted)
    if pool_note:
        result.notes.append(pool_note)
    return result


def workload_of_data(data: Any, where: str = "(uploaded)") -> Workload:
    """A workload file's content (what ``servesize workload fit --out`` writes) as ``plan --workload`` reads the file:
    its fields over the preset it names, not over the seed's values (``Workload.from_dict``)."""
    from servesize.workload.files import workload_of_data as of_data

    return of_data(data, where)


def presets() -> list[Preset]:
    """The workload presets (data/workloads.toml), each with its fields' values and sources."""
    from servesize.workload.presets import presets as every_preset

    return every_preset()


def simulation_workload(trace: Any, source: Any, replay_opts: Any, preset_name: str | None = None) -> Any:
    """The one workload plan and simulate read from a trace: a file ``workload fit`` reads is fitted by it (the
    same function, so ``plan --workload`` on its output plans this workload); a workload file is itself; a Trace
    object goes through the same fitter (workload/fit.py) via what the trace says. Beside the engine simulator the
    options carry the deployment's max_model_len: the requests vLLM accepts, as the replay sends them."""
    from dataclasses import replace

    from servesize.workload.model import Workload

    opts = replace(replay_opts, users=None)
    if isinstance(trace, Workload):
        return _given_workload(trace, source, opts)
    return _fitted_trace_workload(trace, source, opts, preset_name)


def _fitted_trace_workload(trace: Any, source: Any, opts: Any, preset_name: str | None) -> Any:
    from servesize.simulate.users import fit_trace_workload

    if isinstance(trace, (str, os.PathLike)):
        path = os.fspath(trace)
        if path.lower().endswith(".toml") or _is_workload_file(path):
            from servesize.workload.files import load_workload

            return _given_workload(load_workload(path), source, opts)
        try:  # the requests the replay sends: those the deployment's max_model_len accepts
            found = fit_workload(path, preset=preset_name, max_model_len=opts.max_model_len)
        except BadInput:
            found = None  # a format only the simulator reads (a run record): fitted from the trace below
        return fit_trace_workload(source, opts, fitted=found, preset=preset_name)
    return fit_trace_workload(source, opts, preset=preset_name)


def _replayed_max_model_len(scenario: Scenario, trace: Any) -> int | None:
    """The deployment's max_model_len, for a trace's replay: vLLM refuses longer prompts, so the engine replays the
    rest, and plan beside it plans the workload of the same requests (None: sessions generated from a workload,
    whose contexts the plan caps as the generator does; or a scenario that cannot be resolved alone)."""
    from servesize.resolve.plan import plan_inputs

    if _generated(trace):
        return None
    try:
        report, _ = plan_inputs(scenario).memory_and_fixed(check_prefixes=False)
    except BadInput:
        return None
    return int(report.pool.max_model_len)


def _generated(trace: Any) -> bool:
    """Whether the engine's sessions are generated from a workload (a Workload, or a workload file)."""
    from servesize.workload.model import Workload

    if isinstance(trace, Workload):
        return True
    if isinstance(trace, (str, os.PathLike)):
        path = os.fspath(trace)
        return path.lower().endswith(".toml") or _is_workload_file(path)
    return False


def _given_workload(workload: Any, source: Any, opts: Any) -> Any:
    from servesize.simulate.users import fit_trace_workload

    return fit_trace_workload(source, opts, given=workload)


def _pool_of_tokens(pool_tokens: int, block_size: int) -> Any:
    from servesize.simulate.result import PoolSpec

    if pool_tokens < 2 * block_size:
        raise BadInput(f"--pool-tokens {pool_tokens:,} holds fewer than two {block_size}-token blocks", field="pool_tokens")
    return PoolSpec(pool_tokens // block_size, block_size, f"--pool-tokens {pool_tokens:,}, the engine's KV cache size")


def _simulation_trace(trace: Any, trace_format: str | None, trace_block_size: int | None, sessions: int | None,
                      seed: int) -> Any:
    """A Trace from a path (a trace file, or a workload file to generate sessions from), a Trace, or a Workload."""
    from servesize.simulate.synthetic import synthesize
    from servesize.simulate.traces import Trace, read_trace
    from servesize.workload.model import Workload

    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, Workload):
        return synthesize(trace, sessions=sessions or None, seed=seed)
    path = os.fspath(trace)
    if path.lower().endswith(".toml") or _is_workload_file(path):
        from servesize.workload.files import load_workload

        return synthesize(load_workload(path), sessions=sessions or None, seed=seed, name=os.path.basename(path))
    return read_trace(path, format=trace_format, block_size=trace_block_size)


def _is_workload_file(path: str) -> bool:
    """A workload file as ``servesize workload fit --out`` writes it (JSON with its format key), not a trace."""
    require_regular(path, "trace")
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"servesize_workload"' in head


# -- the engine simulator (servesize.simulate.engine): vLLM's scheduler at N users, beside the plan ----------

def _engine_config(report: MemoryReport) -> Any:
    """The engine simulator's replica for the deployment ``report`` sized (simulate/engine.py ``config_of``)."""
    from servesize.simulate.engine import config_of

    return config_of(report)


def simulate_engine(trace: Any, scenario: Scenario, *, users: int | None = None, search: bool = True,
                    requests: str = "all", align: str | None = None, sessions_per_user: int | None = None,
                    warmup: float = 0.5, max_users: int | None = None, seed: int = 0,
                    trace_format: str | None = None, trace_block_size: int | None = None,
                    synthetic_sessions: int | None = None, with_plan: bool = True,
                    progress: Callable[[str], None] | None = None) -> Any:
    """The deployment's engine (its pool, --max-num-seqs, --max-num-batched-tokens, the planner's step rooflines)
    replaying the trace's sessions (or sessions generated from a Workload) closed-loop: at ``users``, and (with
    ``search``) the users at which the comfort SLO breaks, beside plan's users for the same workload and pool
    (the workload ``simulate`` and ``plan --workload`` both read from the file). ``requests`` 'all' (the default)
    sends the subagents' requests too, as the plan counts them (N (1 + r) requests a cycle); 'main' leaves them
    out, as the cache replay's published curves do."""
    import time
    from dataclasses import replace

    from servesize.limits import MAX_ENGINE_USERS
    from servesize.planning.ceilings import step_model_of
    from servesize.planning.inputs import knob_value
    from servesize.resolve.plan import plan_inputs
    from servesize.simulate import engine as eng
    from servesize.simulate.replay import ReplayOptions

    started = time.perf_counter()
    source = _simulation_trace(trace, trace_format, trace_block_size, synthetic_sessions, seed)
    ropts = ReplayOptions(requests=requests, align=align, sessions_per_user=sessions_per_user, warmup=0.0, seed=seed,
                          max_model_len=_replayed_max_model_len(scenario, trace))
    fitted = simulation_workload(trace, source, ropts, getattr(scenario, "preset", None))
    if _generated(trace):  # a user's next session follows the last after a think time, as its turns do
        ropts = replace(ropts, session_gap_s=float(fitted.workload.think_time_s))
    else:  # where the replay puts a pause of its own (between sessions, for an away one): the plan's mean think
        ropts = replace(ropts, resume_s=float(fitted.workload.think_time_s))
    notes: list[str] = []
    try:  # plan's users for one replica: --users is the engine's load here, not a fleet to size
        planned = scenario.replace(workload=fitted.workload, users=None)
        inputs = plan_inputs(planned)
    except BadInput as exc:
        notes.append(f"plan cannot take the fitted workload ({exc}); the engine is the scenario's own")
        planned, inputs, with_plan = scenario, plan_inputs(scenario), False
    report, fixed = inputs.memory_and_fixed(check_prefixes=False)
    cfg = _engine_config(report)
    times = step_model_of(fixed, inputs.knobs)
    comfort = eng.Comfort(ttft_limit_s=float(knob_value(inputs.knobs, "ttft_limit_s")),
                          decode_floor_tok_s=float(knob_value(inputs.knobs, "decode_floor")))
    ropts = replace(ropts, block_size=cfg.block_size, max_model_len=report.pool.max_model_len)
    think = fitted.workload.think_time_s
    at, _ = eng.engine_users(source, ropts, cfg, times, comfort, users=users, warmup=warmup,
                             think_time_s=think) if users else (None, None)
    found = None
    if search:
        _, found = eng.engine_users(source, ropts, cfg, times, comfort, warmup=warmup, think_time_s=think,
                                    max_users=max_users or MAX_ENGINE_USERS, progress=progress)
    plan_doc, line, p = None, None, None
    if with_plan:
        try:
            p = plan(planned, sensitivity=False)
        except BadInput as exc:  # the engine's runs stand; say why plan has no number beside them
            notes.append(f"plan cannot plan the fitted workload ({exc}); the engine's figures stand alone")
            with_plan = False
    if with_plan and p is not None:
        plan_users = float(p.result.values[p.binding])
        plan_doc = {"users": plan_users, "binding": p.binding,
                    "ceilings": {k: float(v) for k, v in p.result.values.items()}, "dp": fixed.dp,
                    "pool_tokens": float(fixed.pool_tokens)}
        if found is not None:
            line = eng.disagreement(plan_users, p.binding, found, dp=fixed.dp)
    notes += eng.open_loop_note(found, at, think)  # a trace of lone requests: the rate its users sent
    step_model = (f"planning/step_model.py ({times.summary()}), {report.model} on {report.gpus.count}x"
                  f"{report.gpus.gpu.key} at TP {fixed.tp}")
    choices = {"requests": requests, "align": ropts.align or "stagger", "warmup": warmup, "seed": seed,
               "sessions_per_user": sessions_per_user, "block_size": cfg.block_size,
               "max_model_len": report.pool.max_model_len, "one_replica_of": fixed.dp}
    return eng.EngineReport(trace=source.to_dict(), config=cfg, step_model=step_model, comfort=comfort,
                            mixed_step=times.terms.mixed,
                            choices=choices, at=at, found=found, plan=plan_doc, disagreement=line,
                            workload=fitted.to_dict(), notes=notes + list(fitted.notes),
                            seconds=time.perf_counter() - started, plan_object=p)


def bench(scenario: Scenario, load: Any) -> Any:
    """What ``vllm bench serve --dataset-name random`` prints for this deployment and ``load``
    (simulate.bench.BenchLoad): the engine simulator over the benchmark's requests, priced by the step model."""
    from dataclasses import replace

    from servesize.planning.ceilings import step_model_of
    from servesize.resolve.plan import plan_inputs
    from servesize.simulate import engine as eng
    from servesize.simulate.bench import BenchResult, bench_metrics, bench_replay, ready_check_replay

    # the benchmark's requests stand in for the users' workload (which sizes nothing here). The server is the one its
    # flags start: without --speculative-config (or --num-speculative-tokens) vLLM drafts nothing, even for a
    # model with an MTP head, where plan's recipe would serve the head
    drafts = {} if scenario.speculative_config is not None or scenario.num_speculative_tokens is not None else \
        {"num_speculative_tokens": 0}
    inputs = plan_inputs(scenario.replace(preset="chat", median=load.random_input_len + load.random_prefix_len,
                                          prefix=load.random_prefix_len, subagent_ratio=0.0,
                                          output_tokens=load.random_output_len,
                                          warm_turn_tokens=min(load.random_input_len, 2000), **drafts))
    report, fixed = inputs.memory_and_fixed(check_prefixes=False)
    pool = report.pool
    if load.longest_request_tokens > pool.max_model_len:
        raise BadInput(f"a prompt and its output reach {load.longest_request_tokens:,} tokens, past --max-model-len "
                       f"{pool.max_model_len:,}: vLLM refuses such requests (shorten the load or raise --max-model-len)")
    cfg = _engine_config(report)
    times = step_model_of(fixed, inputs.knobs)
    one = load
    notes = []
    if fixed.dp > 1:  # the benchmark's requests spread evenly over the replicas: one replica, its share, times dp
        share = -(-load.num_prompts // fixed.dp)
        one = replace(load, num_prompts=share, request_rate=load.request_rate / fixed.dp,
                      max_concurrency=None if load.max_concurrency is None else -(-load.max_concurrency // fixed.dp))
        notes.append(f"one replica of {fixed.dp} simulated with its even share of the requests; throughputs x {fixed.dp}")
    if load.ready_check and fixed.dp == 1:  # the test request alone first (bench.py): the run starts when answered
        alone = eng.simulate_engine(ready_check_replay(one, cfg.block_size), cfg, times, warmup=0.0)
        if not math.isfinite(alone.finish_s[0]):
            raise BadInput("the ready check's test request (the first prompt) is never answered on this deployment "
                           "(it does not fit the pool): vllm bench serve stops there; shorten the load")
        start_s = float(alone.finish_s[0])
        run = eng.simulate_engine(bench_replay(one, cfg.block_size, start_s), cfg, times, warmup=0.0)
        skip, skip_steps = 1, alone.steps
        notes.append(f"the ready check's test request (the first prompt, sent alone) took {start_s:.2f} s before the "
                     "run" + (", and left its prompt in the prefix cache for the run's first request"
                              if cfg.prefix_caching else "; with prefix caching off it leaves nothing the run hits"))
    else:
        if load.ready_check:
            notes.append(f"the ready check's test request is not simulated with {fixed.dp} data-parallel replicas "
                         "(it reaches one of them; each is simulated with its even share of the run)")
        run = eng.simulate_engine(bench_replay(one, cfg.block_size), cfg, times, warmup=0.0)
        skip = skip_steps = 0
    for _, where in inputs.knobs.calibrated[:1]:  # plan_inputs checked it against this deployment
        notes.append(f"the step model's efficiencies are {where}'s (calibrate --vllm-bench)")
    if run.too_large:
        notes.append(f"{run.too_large} requests need more blocks than the pool has: vLLM never schedules them")
    if run.stopped:
        notes.append("the run stopped at the engine's step limit: the figures cover the requests answered by then")
    if not load.ignore_eos:
        notes.append(f"every request is simulated to generate its {load.random_output_len:,} output tokens, as "
                     "vllm bench serve --ignore-eos asks; without that flag a model may stop at EOS sooner, and a "
                     "run whose Total generated tokens is lower did less work than this one"
                     + ("; and with equal lengths these requests finish together and are replaced in waves, as the "
                        "real engine's are with --ignore-eos, where replies ending at EOS break the waves up: such a "
                        "run's TTFT can be far lower (docs/accuracy.md, 'Fixed-length sweeps')"
                        if load.random_range_ratio == 0 and load.max_concurrency is not None else ""))
    terms = times.terms
    step = {"summary": f"{times.summary()}, at TP {fixed.tp}",
            "overhead_s": times.overhead_s, "request_fixed_s": terms.request_fixed_s, "mixed_step": terms.mixed,
            "prefill_weight_floor": terms.prefill_weight_floor,
            "bandwidth_efficiency": times.decode.bandwidth_efficiency, "prefill_mfu": times.prefill.mfu,
            "tokens_per_decode_step": times.tokens_per_decode_step}
    deployment = {"model": report.model, "gpus": f"{report.gpus.count}x{report.gpus.gpu.key}",
                  "tensor_parallel_size": fixed.tp, "data_parallel_size": fixed.dp,
                  "max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens,
                  "num_gpu_blocks": cfg.num_blocks, "block_size": cfg.block_size}
    metrics = bench_metrics(run, replicas=fixed.dp, skip=skip, skip_steps=skip_steps)
    return BenchResult(load, {**metrics, "engine_steps": run.steps - skip_steps}, deployment, step, notes)


BENCH_CALIBRATION_STEPS = 12  # bisection steps per efficiency: (0, 1] to within 1/4,096 of the best
BENCH_CALIBRATION_ROUNDS = 2  # the two efficiencies solved in turn, twice


def calibrate_bench(scenario: Scenario, result: str, *, source: str = "<vllm bench result>") -> Calibration:
    """A `vllm bench serve` result (its text block or saved JSON) of ``scenario``'s deployment -> a Calibration of
    the step model: the bandwidth efficiency at which ``bench`` gives the measured mean TPOT, then the prefill MFU at
    which it gives the measured mean TTFT, each by bisection (each time falls as its efficiency rises), for the
    same load (the result's requests, mean lengths and concurrency cap or rate)."""
    from servesize.resolve.plan import plan_inputs
    from servesize.simulate.bench import BenchLoad
    from servesize.vllm_logs.bench_result import read_bench_result
    from servesize.vllm_logs.calibration import Calibration

    measured = read_bench_result(result, source)
    if scenario.calibration is not None:
        raise BadInput("calibrate --vllm-bench measures the step model afresh: drop --calibration")
    load = BenchLoad(random_input_len=measured.input_len, random_output_len=measured.output_len,
                     num_prompts=min(measured.completed, 1000), max_concurrency=measured.max_concurrency,
                     request_rate=measured.request_rate if measured.max_concurrency is None else math.inf,
                     ready_check=measured.ready_check)

    def solve(name: str, key: str, target: float, fixed: dict[str, float]) -> tuple[float, float]:
        lo, hi = 1.0 / 4096, 1.0
        for _ in range(BENCH_CALIBRATION_STEPS):
            mid = (lo * hi) ** 0.5
            got = bench(scenario.replace(**fixed, **{name: mid}), load).metrics[key]
            lo, hi = (lo, mid) if got < target else (mid, hi)  # too fast: the efficiency is lower
        best = (lo * hi) ** 0.5
        return best, bench(scenario.replace(**fixed, **{name: best}), load).metrics[key]

    held: dict[str, float] = {}
    for _ in range(BENCH_CALIBRATION_ROUNDS):  # each moves the other's time a little (a prefill stalls decodes)
        bw, tpot = solve("bandwidth_efficiency", "mean_tpot_ms", measured.mean_tpot_ms, held)
        mfu, ttft = solve("mfu", "mean_ttft_ms", measured.mean_ttft_ms, {"bandwidth_efficiency": bw})
        held = {"mfu": mfu}
    inputs = plan_inputs(scenario)
    fixed = inputs.memory_and_fixed(check_prefixes=False)[1]
    notes = [f"measured mean TPOT {measured.mean_tpot_ms:.2f} ms, servesize bench {tpot:.2f} ms at bandwidth "
             f"efficiency {bw:.3f}", f"measured mean TTFT {measured.mean_ttft_ms:.2f} ms, servesize bench {ttft:.2f} ms "
             f"at prefill MFU {mfu:.3f}",
             f"load: {load.num_prompts} requests of {load.random_input_len:,} -> {load.random_output_len:,} tokens, "
             + (f"--max-concurrency {load.max_concurrency}" if load.max_concurrency else
                f"--request-rate {load.request_rate:g}")
             + (", after the ready check's test request (the text shows it answered)" if load.ready_check else "")]
    for label, value in (("bandwidth efficiency", bw), ("prefill MFU", mfu)):
        if value > 0.999 or value < 2.0 / 4096:
            notes.append(f"the {label} sits at the end of its range: the step model cannot reproduce this result "
                         "with it alone (another term, or another deployment than the one given)")
    return Calibration(source=source, era="vllm bench serve", model=inputs.hf_id,
                       tensor_parallel_size=inputs.deployment.tensor_parallel_size, gpu=inputs.gpus.gpu.key,
                       bandwidth_efficiency=round(bw, 4), mfu=round(mfu, 4), notes=tuple(notes),
                       fp8_prefill_share=fixed.fp8_prefill_share,
                       expert_kernel_tbps=fixed.expert_kernel_bytes_per_s / 1e12,
                       # the fused-MoE kernel the efficiencies were fitted with: none to name for a dense model
                       moe_backend=inputs.deployment.moe_backend if inputs.model.architecture.moe is not None else None)


def check_plan(scenario: Scenario, trace: Any = None, *, planned: Plan | None = None, **engine_options: Any) -> Plan:
    """``plan`` (or ``planned``, the same scenario's plan already made), with the engine simulator's users at the
    comfort SLO beside it (``Plan.engine_check``) and ``Plan.disagreement`` set where they differ by more than
    15%: the sessions are the ``trace``'s, else generated from the scenario's workload."""
    from dataclasses import replace

    from servesize.resolve.plan import plan_inputs
    from servesize.simulate.engine import AGREEMENT

    source = trace if trace is not None else plan_inputs(scenario).workload
    report = simulate_engine(source, scenario, **engine_options)
    if report.plan_object is None or report.found is None:
        raise BadInput("the plan could not be checked: " + "; ".join(report.notes))
    found, dp = report.found, report.plan_object.fixed.dp
    engine_users = found.users * dp
    plan_users = float(report.plan_object.result.values[report.plan_object.binding])
    check = {"engine_users": engine_users, "plan_users_same_workload": plan_users,
             "gap": (plan_users - engine_users) / engine_users if engine_users else None,
             "agree": report.disagreement is None, "tolerance": AGREEMENT, "capped": found.capped,
             "breaks_at": None if found.breaks_at is None else found.breaks_at * dp, "reason": found.reason,
             "sessions": report.trace.get("name", ""), "requests": report.trace.get("requests"),
             "seconds": report.seconds, "command": "simulate --engine (the same workload and pool)"}
    # the engine's comparison plans one replica's ceilings (users=None); the plan returned is the scenario's own
    base = planned if planned is not None else plan(scenario)
    return replace(base, disagreement=report.disagreement, engine_check=check)
