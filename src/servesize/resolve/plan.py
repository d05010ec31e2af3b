"""A Scenario resolved for the planner: ``plan_inputs`` applies every rule of the package in order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesize.engine.deployment import AUTO_MAX_MODEL_LEN, Deployment, derived_max_model_len
from servesize.frozen import frozen
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
    from servesize.engine.memory import MemoryReport
    from servesize.engine.placement import Split
    from servesize.planning.inputs import Fixed


@frozen
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

    def memory_and_fixed(self, *, check_prefixes: bool = True) -> tuple[MemoryReport, Fixed]:
        """The deployment's memory report and what it fixes for the planner: the one place resolved inputs
        become the planner's (``check_prefixes``: refuse a pool that does not even hold the shared prefixes)."""
        from servesize.engine.memory import memory_report
        from servesize.errors import BadInput
        from servesize.planning.inputs import fixed_from_memory

        report = memory_report(self.model.architecture, self.gpus, self.deployment, budget=self.scenario.budget,
                               name=self.name, flags_not_affecting=self.flags_not_affecting,
                               flags_estimated=self.flags_estimated, flags_not_modelled=self.flags_not_modelled)
        fixed = fixed_from_memory(report, self.model.architecture, self.pool_tokens, self.pool_source,
                                  seed_convention=self.scenario.assumptions == "seed", hf_id=self.hf_id)
        fixed = self._calibrated_experts(self._calibrated_prefill(fixed))
        reserved = self.workload.reserved_prefix_tokens()
        if check_prefixes and fixed.pool_tokens <= reserved:
            raise BadInput(f"the KV pool ({fixed.pool_tokens:,.0f} tokens per replica) does not even hold the shared "
                           f"prefixes ({reserved:,} tokens): nothing stays warm")
        return report, fixed


    def _calibrated_prefill(self, fixed: Fixed) -> Fixed:
        """A calibration's MFU (calibrate --vllm-bench) was solved beside the FP8 prefill share of its day: keep that
        share with it, so that it prices the prefill it was solved to reproduce (one written before the GPU's
        measured shares, which records none, beside step.prefill_efficiency_fp8: the rule it was solved under)."""
        from dataclasses import replace

        from servesize.resolve.measured import step_calibration_of

        if not any(name == "mfu" for name, _ in self.knobs.calibrated):
            return fixed
        found = step_calibration_of(self.scenario)
        share = 0.0 if found is None or found[0].fp8_prefill_share is None else found[0].fp8_prefill_share
        if share == fixed.fp8_prefill_share:
            return fixed
        fixed.derivation.given("fp8_prefill_share", share, note=(
            f"the FP8 prefill share {found[1] if found else 'the calibration'}'s MFU was solved beside, not the "
            f"GPU's {fixed.fp8_prefill_share:g} (gpus.toml)" + ("; none recorded: a calibration written before the "
                                                                "GPUs' measured shares (step.prefill_efficiency_fp8)"
                                                                if not share else "")))
        return replace(fixed, fp8_prefill_share=share)

    def _calibrated_experts(self, fixed: Fixed) -> Fixed:
        """A calibration's bandwidth efficiency was solved beside the routed experts' measured kernel rate of its day
        (Fixed.expert_kernel_bytes_per_s): keep that rate with it, so that it prices the decode it was solved to
        reproduce (one written before bf16 experts had a measured rate, which records none: FP4 experts' rate as
        then, none for the others, whose read was step.moe_expert_efficiency's)."""
        import math
        from dataclasses import replace

        from servesize.resolve.measured import step_calibration_of

        if not fixed.expert_bytes or not any(name == "bandwidth_efficiency" for name, _ in self.knobs.calibrated):
            return fixed
        found = step_calibration_of(self.scenario)
        if found is None:
            return fixed
        recorded = found[0].expert_kernel_tbps
        fp4 = fixed.expert_kernel_rule == "step.fp4_moe_kernel_rate"
        rate = (fixed.expert_kernel_bytes_per_s if fp4 else 0.0) if recorded is None else recorded * 1e12
        if math.isclose(rate, fixed.expert_kernel_bytes_per_s, rel_tol=1e-9, abs_tol=1.0):
            return fixed
        fixed.derivation.given("expert_kernel_bytes_per_s", rate, unit="B/s", note=(
            f"the experts' kernel rate {found[1]}'s bandwidth efficiency was solved beside, not this GPU's "
            f"{fixed.expert_kernel_bytes_per_s / 1e12:g} TB/s (gpus.toml)" + (
                "; none recorded: a calibration written before bf16 experts had a measured rate "
                "(step.moe_expert_efficiency)" if recorded is None else "")))
        return replace(fixed, expert_kernel_bytes_per_s=rate, expert_kernel_rule=fixed.expert_kernel_rule if rate else "")


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

