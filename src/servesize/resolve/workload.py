"""The workload a query asks for.

- ``preset_of``           --preset, else the preset a workload file names, else coding-agent (the seed's);
- ``resolved_workload``   the preset, then a workload file's fields, then single-field flags, then the
                          cap: --max-model-len, else the workload's, at most the model's own context
                          (it also says where each field came from);
- ``check_prefixes``      a shared prefix at or above its class's median session is refused.
"""

from __future__ import annotations

from typing import Any

from servesize.errors import BadInput
from servesize.fleet_query import FleetQuery
from servesize.planning.inputs import Knobs
from servesize.scenario import PARAMS, Scenario, WorkloadFields, params_in
from servesize.workload.catalogue import preset_names
from servesize.workload.files import read_workload_data
from servesize.workload.model import SessionClass, Workload
from servesize.workload.presets import (
    ORIGIN_FIELDS,
    Preset,
    WorkloadOrigin,
    file_preset,
    preset,
    workload_from_data,
)

# Scenario workload field -> the planner's parameter name (planning.sensitivity.apply_param), from the declaration
WORKLOAD_FIELDS = {p.name: p.target for p in params_in("workload") if p.kind in ("tokens", "float")}


# Scenario workload field -> the field name a WorkloadOrigin records it under, from the declaration
ORIGIN_OF = {p.name: p.origin_key for p in params_in("workload") if p.kind not in ("choice", "workload")}


def workload_file_data(scenario_workload: Workload | str | None) -> dict | None:
    return read_workload_data(scenario_workload) if isinstance(scenario_workload, str) else None


def preset_of(ask: WorkloadFields, data: dict | None = None) -> Preset:
    """--preset, else the preset a workload file names, else the default (coding-agent, the seed's)."""
    return preset(ask.preset if ask.preset is not None else file_preset(data))


def base_workload(ask: WorkloadFields) -> tuple[Workload, WorkloadOrigin]:
    """The preset, then a workload file's fields over it (a Workload object given whole replaces both)."""
    given_workload = ask.workload
    data = workload_file_data(given_workload)
    chosen = preset_of(ask, data)
    origin = WorkloadOrigin.of_preset(chosen)
    if isinstance(given_workload, Workload):
        return given_workload, origin.with_file("(a Workload object)", {f: "file (a Workload object)"
                                                                       for f in ORIGIN_FIELDS if f != "speculative"})
    workload = chosen.workload()
    if data is not None:
        assert isinstance(given_workload, str)
        workload, origin = workload_from_data(data, workload, origin, given_workload)
    return workload, origin


def workload_of(scenario: Scenario, model_limit: int | None = None) -> Workload:
    return resolved_workload(scenario, model_limit)[0]


def cap_of(ask: WorkloadFields) -> int | None:
    """The --max-model-len a query gives the workload (a Scenario's or a FleetQuery's; a group alone has none)."""
    return ask.max_model_len if isinstance(ask, (Scenario, FleetQuery)) else None


def resolved_workload(ask: WorkloadFields, model_limit: int | None = None, cap: int | None = None
                      ) -> tuple[Workload, WorkloadOrigin]:
    """The base workload, its single-field overrides, the checks a workload must pass, then the cap.

    Prefixes and lengths go first, so a smaller cap below can check that they fit. The cap is
    --max-model-len when given; otherwise the workload's own, at most the model's context (a preset
    without a cap takes the model's). ``cap``: the --max-model-len to apply, else the query's own."""
    workload, origin = overridden(ask)
    check_prefixes(workload, origin)
    cap = cap if cap is not None else cap_of(ask)
    if cap is not None:
        return workload.replace(max_model_len=cap), origin.given({"max_model_len": f"flag --max-model-len {cap:,}"})
    if model_limit and workload.max_model_len > model_limit:
        return workload.replace(max_model_len=model_limit), origin
    return workload, origin


def overridden_workload(ask: WorkloadFields) -> Workload:
    """The base workload with the workload group's single fields applied (a Scenario, a FleetQuery, or a
    command's workload flags as ``WorkloadFields``)."""
    return overridden(ask)[0]


def overridden(ask: WorkloadFields) -> tuple[Workload, WorkloadOrigin]:
    workload, origin = base_workload(ask)
    flags: dict[str, str] = {}
    share = ask.subagents_share_prefix
    if share is not None:
        workload = workload.replace(subagents_share_prefix=share)
        flags["subagents_share_prefix"] = f"flag {PARAMS['subagents_share_prefix'].flag}"
    workload = _subagent_from_flags(ask, workload, origin)
    knobs = Knobs()
    for name, planner_name in WORKLOAD_FIELDS.items():
        value = getattr(ask, name)
        if value is not None:
            workload, knobs = _apply(workload, knobs, name, planner_name, value)
            flags[ORIGIN_OF[name]] = f"flag {PARAMS[name].flag} {value:,}" if isinstance(value, int) \
                else f"flag {PARAMS[name].flag} {value:g}"
    origin = origin.given(flags)
    if workload.subagent is not None and workload.subagent_ratio > 0 and not origin.preset.has_subagents:
        origin = origin.noting(f"preset {origin.preset.name} ({origin.preset.description}) has no subagents; "
                               f"planning with the subagent class the flags give (r = {workload.subagent_ratio:g})")
    return workload, origin


def _subagent_from_flags(ask: WorkloadFields, workload: Workload, origin: WorkloadOrigin) -> Workload:
    """A workload without a subagent class (chat, rag, batch) gets one only from --subagent-median and
    --subagent-sigma together; a ratio alone has nothing to apply to."""
    if workload.subagent is not None:
        return workload
    median, sigma, ratio = ask.subagent_median, ask.subagent_sigma, ask.subagent_ratio
    if median is None and sigma is None:
        if ratio:
            raise BadInput(f"--subagent-ratio {ratio:g}: the workload (preset {origin.preset.name}) has no subagent "
                           "class; give --subagent-median and --subagent-sigma too, or --preset coding-agent", field="subagent_ratio")
        return workload
    if median is None or sigma is None:
        raise BadInput(f"the workload (preset {origin.preset.name}) has no subagent class: a new one needs both "
                       "--subagent-median and --subagent-sigma", field="subagent_median")
    prefix = ask.subagent_prefix or 0
    return workload.replace(subagent=SessionClass("subagent", median, sigma, prefix, source="flags"))


def check_prefixes(workload: Workload, origin: WorkloadOrigin) -> None:
    """A class's shared prefix below its median session: a prefix at or above it means most sessions would
    be nothing but the prefix (usually a preset's prefix left under a shorter workload's median)."""
    classes = [("user", workload.user, "user_prefix_tokens", "user_median_tokens", "--prefix")]
    if workload.subagent is not None and workload.subagent_ratio > 0:
        classes.append(("subagent", workload.subagent, "subagent", "subagent", "--subagent-prefix"))
    for name, cls, prefix_field, median_field, prefix_flag in classes:
        prefix = workload.user.prefix_tokens if name == "subagent" and workload.subagents_share_prefix \
            else cls.prefix_tokens
        if prefix >= cls.median_tokens:
            raise BadInput(
                f"the {name} prefix ({prefix:,} tokens, {_short(origin.sources.get(prefix_field, ''))}) is at or "
                f"above the median {name} session ({cls.median_tokens:,.0f} tokens, "
                f"{_short(origin.sources.get(median_field, ''))}): a session holds its prefix, so most would be "
                f"nothing else; pass {prefix_flag} below {cls.median_tokens:,.0f} (your system prompt + tools), "
                f"or a preset that fits (--preset {', '.join(n for n in preset_names() if n != origin.preset.name)})",
                field=prefix_flag.removeprefix("--").replace("-", "_"))


def _short(source: str) -> str:
    """'preset chat' / 'flag --median 2,000' / 'file w.json' from a full source line."""
    head = source.split(":", 1)[0]
    return head or "default"


def _apply(workload: Workload, knobs: Knobs, name: str, planner_name: str, value: Any) -> tuple[Workload, Knobs]:
    from servesize.planning.sensitivity import apply_param

    try:
        return apply_param(workload, knobs, planner_name, value)
    except BadInput as exc:
        raise BadInput(str(exc).replace(f"--{planner_name.replace('_', '-')}", PARAMS[name].flag), field=name) from None

