"""The library every face calls: the CLI, the explorer, the measurement harness and the tests.

    import servesize as s
    sc = s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")
    s.memory(sc)      # MemoryReport: budget, pool, the lines vLLM logs
    s.plan(sc)        # Plan: warm users, ceilings, binding, recipe, bill, sensitivity
    s.fit("4xH100", max_model_len=8192)    # what fits: one row per model (all_placements=True: every one)

Each function is resolve (``servesize.resolve``: every rule, named) -> engine / planner -> result.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from servesize.engine.memory import MemoryReport, memory_report
from servesize.engine.models_table import ModelRow, ModelsResult, model_row
from servesize.engine.placement import FitResult
from servesize.engine.placement import fit as fit_placements
from servesize.errors import BadInput
from servesize.model.catalogue import InlineConfig, ResolvedModel, load_catalogue
from servesize.model.hardware import parse_gpus
from servesize.planning.inputs import Fixed, fixed_from_memory
from servesize.planning.plan import Plan, SweepCase, make_plan, sweep_cases
from servesize.resolve import (
    PlanInputs,
    calibrated,
    deployment_of,
    display_name,
    gpus_of,
    model_of,
    plan_inputs,
    with_serve_line,
)
from servesize.scenario import PARAMS, SWEEPABLE, FitQuery, Scenario
from servesize.vllm_logs.calibration import Calibration
from servesize.vllm_logs.calibration import calibrate as calibrate_facts
from servesize.vllm_logs.parse import LogFacts, parse_vllm_log
from servesize.workload.fit import DEFAULT_MIN_TOKENS, WorkloadFit, fit_observations
from servesize.workload.readers import read_token_counts

MAX_SWEEP_VALUES = 64  # a sweep is a table to read; past this, run plan in a loop


def resolve_model(spec: str | InlineConfig) -> ResolvedModel:
    """MODEL as the CLI takes it (a catalogue name, a config.json or folder, a Hugging Face id)."""
    return model_of(spec)


def models(names: list[str] | None = None, *, explain: bool = False) -> ModelsResult:
    """The catalogue (or the models named): parameters, layers by kind, KV bytes per token at 16 bits."""
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
    return memory_report(model.architecture, gpus_of(scenario), measured.deployment, budget=scenario.budget,
                         name=display_name(model), flags_not_affecting=line.not_affecting if line else (),
                         flags_estimated=line.estimated if line else ())


def _fixed(inputs: PlanInputs) -> tuple[MemoryReport, Fixed]:
    report = memory_report(inputs.model.architecture, inputs.gpus, inputs.deployment, budget=inputs.scenario.budget,
                           name=inputs.name, flags_not_affecting=inputs.flags_not_affecting,
                           flags_estimated=inputs.flags_estimated)
    fixed = fixed_from_memory(report, inputs.model.architecture, inputs.pool_tokens, inputs.pool_source,
                              seed_convention=inputs.scenario.assumptions == "seed", hf_id=inputs.hf_id)
    reserved = inputs.workload.reserved_prefix_tokens()
    if fixed.pool_tokens <= reserved:
        raise BadInput(f"the KV pool ({fixed.pool_tokens:,.0f} tokens per replica) does not even hold the shared "
                       f"prefixes ({reserved:,} tokens): nothing stays warm")
    return report, fixed


def plan(scenario: Scenario, *, sensitivity: bool = True, progress: Callable[[str], None] | None = None) -> Plan:
    """Warm users, the four ceilings and which binds, the vLLM recipe, the bill and (unless
    ``sensitivity=False``) where each named assumption would flip the verdict.

    ``progress`` hears one line when the inputs are resolved and the Monte-Carlo starts."""
    inputs = plan_inputs(scenario)
    report, fixed = _fixed(inputs)
    if progress is not None:
        progress("planning (Monte-Carlo fills)...")
    return make_plan(fixed, inputs.deployment, inputs.workload, inputs.knobs, with_sensitivity=sensitivity,
                     memory=report, origin=inputs.origin)


def sweep(scenario: Scenario, param: str, values: list[Any]) -> dict:
    """Warm users and the four ceilings for each value of one workload field or knob.

    ``values`` are typed values or their text ('31k'); the memory is the scenario's own throughout
    (a parameter that changes the memory, such as the draft count, is planned once per value)."""
    name, typed_values = sweep_values(param, values)
    inputs = plan_inputs(scenario)
    _, fixed = _fixed(inputs)
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
                       "run plan once per --num-speculative-tokens value")
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
    return parse_vllm_log(text, source=source)


def calibrate(log: str | LogFacts, *, source: str = "<log>", block_size: int | None = None,
              kv_cache_groups: int | None = None, mamba_cache_mode: str | None = None) -> Calibration:
    """A start-up log (its text, or what ``read_vllm_log`` found in it) -> a Calibration that
    ``Scenario(calibration=...)`` takes."""
    facts = log if isinstance(log, LogFacts) else parse_vllm_log(log, source=source)
    return calibrate_facts(facts, block_size=block_size, kv_cache_groups=kv_cache_groups,
                           mamba_cache_mode=mamba_cache_mode)


def fit_workload(path: str | os.PathLike, *, column: str | None = None, min_tokens: int = DEFAULT_MIN_TOKENS,
                 prefix_tokens: int | None = None, preset: str | None = None, distribution: str = "auto") -> WorkloadFit:
    """A workload fitted from a request log (CSV, JSONL or JSON; gzip allowed): every field fitted from the
    file or left to ``preset`` (default coding-agent), nothing dropped unless ``min_tokens`` asks."""
    return fit_observations(read_token_counts(path, column), min_tokens=min_tokens, prefix_tokens=prefix_tokens,
                            preset_name=preset, distribution=distribution)
