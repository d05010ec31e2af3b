"""Sensitivity: for each named assumption, the value at which the binding ceiling changes."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from servesize.errors import BadInput
from servesize.planning.ceilings import CeilingCache, binding_of
from servesize.planning.inputs import Fixed, Knobs, knob_value, spec_speedup_of
from servesize.workload.model import Workload

# Bisection steps per flip: the flip to within 1/128 of the searched range (of its logarithm for a geometric row).
# Finer is finer than the plan can tell: the flips themselves move 0.8-8.7% between Monte-Carlo seeds (the reference
# case's seven flips, seeds 0-3: docs/benchmarks.md), where 7 steps land within 1% of 10 steps' flip.
FLIP_BISECTIONS = 7


class SensitivityRow(Protocol):
    """One row of the sensitivity panel, declared on the Scenario field it varies (``servesize.scenario``
    SensitivityRow, where each attribute is explained) and handed to ``sensitivity`` by the api: the planner holds
    no table of its own."""

    @property
    def name(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def lo(self) -> float: ...
    @property
    def hi(self) -> float: ...
    @property
    def geometric(self) -> bool: ...

    def as_tuple(self) -> tuple[str, str, float, float, str]: ...


def apply_param(workload: Workload, knobs: Knobs, name: str, value: float) -> tuple[Workload, Knobs]:
    """Set one sweepable parameter (workload field or modelled knob) to ``value``."""
    from servesize.workload.model import SessionClass
    class_field = {"median": "median_tokens", "sigma": "sigma", "prefix": "prefix_tokens"}
    cls_name, _, field_name = name.rpartition("_") if name.startswith("subagent_") else ("user", "", name)
    if field_name in class_field and cls_name in ("user", "subagent"):
        cls = getattr(workload, cls_name)
        if not isinstance(cls, SessionClass):
            raise BadInput(f"--{name.replace('_', '-')} needs a log-normal {cls_name} class"
                           + ("; this workload's user class is empirical" if cls_name == "user" else ""))
        key = class_field[field_name]
        val: Any = int(value) if key == "prefix_tokens" else float(value)
        return workload.replace(**{cls_name: replace(cls, **{key: val})}), knobs
    if name in ("subagent_ratio", "invalidation", "think_time_s", "output_tokens", "warm_turn_tokens", "max_model_len"):
        return workload.replace(**{name: value}), knobs
    if name in ("bandwidth_efficiency", "tp_efficiency", "mtp_speedup", "spec_acceptance", "decode_floor",
                "comfortable_floor", "mfu", "ttft_limit_s"):
        changes: dict[str, Any] = {name: float(value)}
        return workload, replace(knobs, **changes)
    if name == "spec_tokens":
        return workload, replace(knobs, spec_tokens=int(value))
    if name == "cpu_offload_bytes":
        return workload, replace(knobs, cpu_offload_bytes=float(value))
    raise BadInput(f"cannot vary {name!r}")


def sensitivity(fixed: Fixed, workload: Workload, knobs: Knobs, base_binding: str,
                rows: Mapping[str, SensitivityRow], fills: int = 300, iterations: int = FLIP_BISECTIONS,
                names: Iterable[str] | None = None, cache: CeilingCache | None = None) -> dict[str, dict[str, Any]]:
    """For each row (``rows``, by name; ``names`` a subset): the value at which the binding ceiling changes, or no
    flip in [lo, hi].

    Rows that move only a modelled knob or the pacing (think time) run at the plan's own resolution
    and reuse its warm fill (``cache``), so a near-tie is judged as the plan judged it; rows that
    change the sessions need a new Monte-Carlo fill per point and run with ``fills`` (and 150 decode
    fills). Every evaluation
    goes through one CeilingCache per resolution: a ceiling the swept value cannot move (the warm
    fill under a think-time sweep, decode under an MFU sweep) is computed once, and the fills reuse
    one bank of random numbers (common random numbers along each search)."""
    k_small = replace(knobs, fills=min(fills, knobs.fills), decode_fills=min(knobs.decode_fills or 400, 150))
    plan_cache, small_cache = cache or CeilingCache(), CeilingCache()
    small_cache.banks = plan_cache.banks  # the same random numbers: the small fills are the plan's first fills
    out: dict[str, dict[str, Any]] = {}
    for name in (names or rows):
        row = rows[name]
        kind, fld, lo, hi, unit = row.as_tuple()
        current = _current(fixed, workload, knobs, name, fld)
        k_eval, c_eval = (k_small, small_cache) if kind == "workload" else (knobs, plan_cache)
        binding_at = partial(_binding_at, fixed, workload, k_eval, c_eval, fld)
        try:
            out[name] = _row(binding_at, row, current, iterations)
        except BadInput as exc:
            out[name] = {"current": current, "range": [lo, hi], "unit": unit, "error": str(exc), "text": f"not evaluated: {exc}"}
    return out


def _binding_at(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache, fld: str, x: float) -> str:
    if fld == "chunk_tokens":
        return binding_of(replace(fixed, chunk_tokens=max(1, int(round(x)))), workload, knobs, cache)
    w, k = apply_param(workload, knobs, fld, x)
    return binding_of(fixed, w, k, cache)


def _row(binding_at: Callable[[float], str], row: SensitivityRow, current: float, iterations: int) -> dict[str, Any]:
    """The nearest flip below or above ``current``: bisection on the binding between current and each end."""
    lo, hi, unit = row.lo, row.hi, row.unit
    base = binding_at(current)
    res = {"current": current, "range": [lo, hi], "unit": unit, "binding_at_current": base, "flip_at": None,
           "binds_after": None}
    found = None
    for end in (lo, hi):
        if end == current:
            continue
        other = binding_at(end)
        if other == base:
            continue
        x_in, x_out = current, end
        for _ in range(iterations):
            mid = _midpoint(row.geometric, x_in, x_out)
            at_mid = binding_at(mid)
            if at_mid == base:
                x_in = mid
            else:
                x_out, other = mid, at_mid
        cand = 0.5 * (x_in + x_out)
        if found is None or abs(cand - current) < abs(found[0] - current):
            found = (cand, other)
    if found:
        res["flip_at"], res["binds_after"] = float(found[0]), found[1]
        res["text"] = (f"{base} -> {found[1]} at {_fmt(found[0], unit)} (now {_fmt(current, unit)}, "
                       f"searched {_fmt(lo, unit)}..{_fmt(hi, unit)})")
    else:
        res["text"] = f"no flip in [{_fmt(lo, unit)}, {_fmt(hi, unit)}]: {base} binds throughout"
    return res


def _midpoint(geometric: bool, a: float, b: float) -> float:
    if geometric and a > 0 and b > 0:
        return math.sqrt(a * b)
    return 0.5 * (a + b)


def _current(fixed: Fixed, workload: Workload, knobs: Knobs, name: str, fld: str) -> float:
    if fld == "chunk_tokens":
        return float(fixed.chunk_tokens)
    if name == "spec_speedup":
        return spec_speedup_of(fixed, knobs)
    if fld == "median":
        return float(workload.user.median_tokens)
    if fld == "sigma":
        return float(getattr(workload.user, "sigma", 0.81))
    if hasattr(workload, fld):
        return float(getattr(workload, fld))
    return float(knob_value(knobs, fld))


def _fmt(x: float, unit: str) -> str:
    if unit == "tokens":
        return f"{x / 1000:,.1f}k tokens"
    if unit == "s":
        return f"{x:,.1f} s"
    if unit == "x":
        return f"{x:.2f}x"
    return f"{x:.3g}"
