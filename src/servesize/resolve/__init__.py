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

``servesize.api`` calls these; no command holds a rule of its own. The names in ``_HOMES`` are the package's
public ones, so ``from servesize.resolve import plan_inputs`` reads as it did when this was one module; each submodule
is imported with the first of its names asked for (``servesize memory`` starts without the planner's and the fleet's
rules). The library's own modules import from the submodule, whose types mypy sees.
"""

from __future__ import annotations

from typing import Any

from servesize.lazy import load

# eager, for its name: importing the submodule ``served`` binds the package's ``served`` to the module, which a lazy
# import of the function of the same name would never replace
from servesize.resolve.served import ServeLine as ServeLine
from servesize.resolve.served import served as served
from servesize.resolve.served import with_serve_line as with_serve_line

_HOMES = {  # submodule -> the public names it holds; each is imported with the first name asked of it
    "fleet": (
        "confirm_scenario", "fleet_currency", "fleet_space", "plan_command", "sized_scenario", "teams_from",
        "teams_of", "users_sizing",
    ),
    "knobs": ("KNOB_FIELDS", "check_speculation", "knobs_of", "planned_deployment", "speculation_note"),
    "measured": (
        "Calibrated", "calibrated", "calibration_of", "check_calibration_matches", "split_of", "step_calibration_of",
    ),
    "model": (
        "ENGINE_FIELDS", "auto_fitted_length", "deployment_of", "display_name", "gpus_of", "hf_id_of", "model_of",
    ),
    "plan": ("PlanInputs", "plan_inputs"),
    "workload": (
        "WORKLOAD_FIELDS", "base_workload", "check_prefixes", "overridden_workload", "preset_of",
        "resolved_workload", "workload_of",
    ),
}
_HOME_OF = {name: f"servesize.resolve.{module}" for module, names in _HOMES.items() for name in names}

__all__ = sorted([*_HOME_OF, "ServeLine", "served", "with_serve_line"])


def __getattr__(name: str) -> Any:
    return load(globals(), _HOME_OF, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
