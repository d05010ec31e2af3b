"""A Scenario resolved for the planner: ``plan_inputs`` applies every rule of the package in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from servesize.engine.deployment import AUTO_MAX_MODEL_LEN, Deployment, derived_max_model_len
from servesize.model.catalogue import ResolvedModel
from servesize.model.hardware import GpuGroup
from servesize.planning.inputs import Knobs
from servesize.resolve.knobs import check_speculation, knobs_of, planned_deployment, speculation_note
from servesize.resolve.measured import calibrated, split_of
from servesize.resolve.model import auto_fitted_length, deployment_of, display_name, gpus_of, hf_id_of, model_of
from servesize.resolve.served import with_serve_line
from servesize.resolve.workload import resolved_workload
from servesize.scenario import Scenario
from servesize.workload.model import Workload
from servesize.workload.presets import WorkloadOrigin

if TYPE_CHECKING:  # the placement module loads with the first split: memory and fit start without it
    from servesize.engine.placement import Split


@dataclass(frozen=True)
class PlanInputs:
    """A Scenario resolved for the planner."""

    scenario: Scenario
    model: ResolvedModel
    name: str
    hf_id: str
    gpus: GpuGroup
    deployment: Deployment
    workload: Workload
    knobs: Knobs
    pool_tokens: float | None
    pool_source: str | None
    origin: WorkloadOrigin | None = None
    flags_not_affecting: tuple[str, ...] = ()
    flags_estimated: tuple[str, ...] = ()
    split: Split | None = None  # how --gpus is split into replicas (engine.placement.choose_split)
    flags_not_modelled: tuple[str, ...] = ()  # KV connectors servesize does not model (resolve.served)


def plan_inputs(scenario: Scenario) -> PlanInputs:
    scenario, line = with_serve_line(scenario)
    if scenario.max_model_len == AUTO_MAX_MODEL_LEN:
        scenario = scenario.replace(max_model_len=auto_fitted_length(scenario))
    model = model_of(scenario.model)
    knobs = knobs_of(scenario)
    check_speculation(scenario, model, knobs)
    workload, origin = resolved_workload(scenario, derived_max_model_len(model.architecture))
    note = speculation_note(scenario, model, origin, knobs)
    if note:
        origin = origin.noting(note)
    measured = calibrated(scenario, deployment_of(scenario, model))
    deployment, split = split_of(scenario, model, measured,
                                 planned_deployment(measured.deployment, model, workload, knobs, scenario))
    return PlanInputs(scenario, model, display_name(model), hf_id_of(model, scenario.model), gpus_of(scenario),
                      deployment, workload, knobs, measured.pool_tokens, measured.pool_source, origin,
                      line.not_affecting if line else (), line.estimated if line else (), split,
                      line.not_modelled if line else ())

