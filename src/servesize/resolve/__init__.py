"""The rules that turn a Scenario into what the engine and the planner take, one module per concern.

Each rule is one named function, with the reason it exists (see each module's docstring):

- ``served``     a pasted ``vllm serve`` line -> the Scenario fields it sets, and the flags that change no figure;
- ``model``      MODEL -> Architecture, --gpus with the figures the user supplies, vLLM's flags -> Deployment;
- ``measured``   a measured pool or a calibration file (the most direct measurement wins), and the split of --gpus;
- ``workload``   the preset, a workload file, single-field flags and the cap -> the Workload and where each
                 field came from (it takes the workload group, ``scenario.WorkloadFields``);
- ``knobs``      the modelled assumptions and speculative decoding;
- ``plan``       ``plan_inputs``: a Scenario resolved for the planner (every rule above, in order);
- ``fleet``      plan --users N, the teams of a fleet, its currency and search space, the Scenario that confirms it.

``servesize.api`` calls these; no command holds a rule of its own. The names below are the package's
public ones, so ``from servesize.resolve import plan_inputs`` reads as it did when this was one module.
"""

from servesize.resolve.fleet import (
    confirm_scenario,
    fleet_currency,
    fleet_space,
    plan_command,
    sized_scenario,
    teams_from,
    teams_of,
    users_sizing,
)
from servesize.resolve.knobs import KNOB_FIELDS, check_speculation, knobs_of, planned_deployment, speculation_note
from servesize.resolve.measured import (
    Calibrated,
    calibrated,
    calibration_of,
    check_calibration_matches,
    split_of,
    step_calibration_of,
)
from servesize.resolve.model import (
    ENGINE_FIELDS,
    auto_fitted_length,
    deployment_of,
    display_name,
    gpus_of,
    hf_id_of,
    model_of,
)
from servesize.resolve.plan import PlanInputs, plan_inputs
from servesize.resolve.served import ServeLine, served, with_serve_line
from servesize.resolve.workload import (
    WORKLOAD_FIELDS,
    base_workload,
    check_prefixes,
    overridden_workload,
    preset_of,
    resolved_workload,
    workload_of,
)

__all__ = [
    "ENGINE_FIELDS", "KNOB_FIELDS", "WORKLOAD_FIELDS", "Calibrated", "PlanInputs", "ServeLine", "auto_fitted_length",
    "base_workload", "calibrated", "calibration_of", "check_calibration_matches",
    "step_calibration_of", "check_prefixes", "check_speculation",
    "confirm_scenario", "deployment_of", "display_name", "fleet_currency", "fleet_space", "gpus_of", "hf_id_of",
    "knobs_of", "model_of", "overridden_workload", "plan_command", "plan_inputs", "planned_deployment", "preset_of",
    "resolved_workload", "served", "sized_scenario", "speculation_note", "split_of", "teams_from", "teams_of",
    "users_sizing", "with_serve_line", "workload_of",
]
