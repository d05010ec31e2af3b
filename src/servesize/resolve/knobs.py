"""The modelled knobs and speculative decoding.

- ``knobs_of``            the modelled assumptions the planner takes (a preset without speculative
                          decoding switches MTP off unless a flag asks);
- ``check_speculation``   speculative decoding is modelled only through a model's own MTP head;
- ``speculation_note``    the one line a reader needs when the preset's MTP and the model disagree;
- ``planned_deployment``  the deployment the plan sizes: the workload's cap is the engine's
                          --max-model-len, and the MTP head the recipe serves with is in the memory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from servesize.engine.deployment import Deployment
from servesize.engine.speculative import mtp_draft, no_mtp_draft_why
from servesize.engine.versions import parse_version
from servesize.errors import BadInput
from servesize.model.catalogue import ResolvedModel
from servesize.planning.inputs import Knobs, spec_tokens_of
from servesize.resolve.measured import step_calibration_of
from servesize.resolve.workload import preset_of, workload_file_data
from servesize.scenario import PARAMS, Scenario, params_in
from servesize.units import GiB
from servesize.workload.model import Workload
from servesize.workload.presets import WorkloadOrigin

# Scenario knob field -> Knobs field, from the declaration (cpu_offload_gib is converted to bytes in knobs_of)
KNOB_FIELDS = {p.name: p.target for p in params_in("knobs")}


def knobs_of(scenario: Scenario) -> Knobs:
    """The modelled knobs; a preset without speculative decoding (batch) switches MTP off unless a flag
    asks for it."""
    values: dict[str, Any] = {knob: getattr(scenario, name) for name, knob in KNOB_FIELDS.items()}
    spec_asked = any(getattr(scenario, n) is not None for n in ("mtp_speedup", "spec_acceptance",
                                                                 "num_speculative_tokens"))
    if not spec_asked and speculative_of(scenario) == "none":
        values["mtp_speedup"] = 1.0
    values["cpu_offload_bytes"] = float(scenario.cpu_offload_gib or 0.0) * GiB
    stepped = step_calibration_of(scenario)
    calibrated = []
    if stepped is not None:  # a benchmark's efficiencies, where no flag sets them (calibrate --vllm-bench)
        for name in ("bandwidth_efficiency", "mfu"):
            if values.get(name) is None and getattr(stepped[0], name) is not None:
                values[name] = getattr(stepped[0], name)
                calibrated.append((name, stepped[1]))
    return Knobs(fills=scenario.fills, draws=scenario.draws, seed=scenario.seed,
                 spec_tokens=scenario.num_speculative_tokens, calibrated=tuple(calibrated), **values)


def speculative_of(scenario: Scenario) -> str:
    """The preset's speculative decoding ('mtp' or 'none'); a workload file does not change it."""
    data = workload_file_data(scenario.workload)
    return preset_of(scenario, data).speculative


def check_speculation(scenario: Scenario, model: ResolvedModel, knobs: Knobs) -> None:
    """servesize models speculative decoding only through a model's own MTP module, and no more
    speed-up than the drafts can give."""
    if scenario.speculative_config is not None:
        return  # the draft is named; its speed-up is the decode knobs' (mtp_speedup / spec_acceptance)
    asked = [name for name in ("mtp_speedup", "spec_acceptance", "num_speculative_tokens")
             if getattr(scenario, name) is not None
             and not (name == "mtp_speedup" and scenario.mtp_speedup == 1.0)
             and not (name == "num_speculative_tokens" and scenario.num_speculative_tokens == 0)]
    version = parse_version(scenario.vllm_version)
    if asked and mtp_draft(model.architecture, version) is None:
        raise BadInput(f"{no_mtp_draft_why(model.architecture, version)}, and servesize models speculative decoding "
                       f"only through a model's own MTP module that vLLM serves: drop {PARAMS[asked[0]].flag}",
                       field=asked[0])
    if scenario.mtp_speedup is not None:
        drafts = spec_tokens_of(knobs) or spec_tokens_of(Knobs())
        if scenario.mtp_speedup > drafts + 1:
            raise BadInput(f"--mtp-speedup {scenario.mtp_speedup:g} is more than {drafts} drafts can give "
                           f"(at most {drafts + 1}x, every draft accepted)", field="mtp_speedup")


def planned_deployment(deployment: Deployment, model: ResolvedModel, workload: Workload, knobs: Knobs,
                       scenario: Scenario) -> Deployment:
    """The deployment the plan sizes and its recipe serves.

    The workload's cap is the engine's --max-model-len. A model with an MTP head is served with it
    (unless the speed-up is switched off): size the memory as vLLM will, with the MTP weights, its
    attention layer in the KV group and the draft slots in the recurrent state. The seed's model
    ignores this, so ``assumptions='seed'`` leaves it out."""
    deployment = replace(deployment, max_model_len=workload.max_model_len)
    serves_mtp = (mtp_draft(model.architecture, deployment.version) is not None
                  and scenario.num_speculative_tokens is None
                  and scenario.speculative_config is None
                  and scenario.assumptions != "seed" and knobs.mtp_speedup != 1.0)
    if serves_mtp:
        deployment = replace(deployment, num_speculative_tokens=spec_tokens_of(knobs))
    return deployment


def speculation_note(scenario: Scenario, model: ResolvedModel, origin: WorkloadOrigin, knobs: Knobs) -> str | None:
    """The one line a reader needs when the preset's speculative decoding and the model disagree."""
    version = parse_version(scenario.vllm_version)
    servable = mtp_draft(model.architecture, version) is not None
    if origin.preset.speculative == "mtp" and not servable:
        return (f"preset {origin.preset.name} serves with MTP where vLLM serves the model's head; "
                f"{no_mtp_draft_why(model.architecture, version)}: decoding without speculation")
    if origin.preset.speculative == "none" and servable and knobs.mtp_speedup == 1.0 \
            and scenario.mtp_speedup is None:
        return (f"preset {origin.preset.name} serves without speculative decoding (saturated batches are not "
                "memory-bound); --mtp-speedup or --num-speculative-tokens turns the model's MTP head on")
    return None

