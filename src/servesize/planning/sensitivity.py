"""Sensitivity: for each named assumption, the value at which the binding ceiling changes."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from servesize.errors import BadInput
from servesize.planning.ceilings import CeilingCache, binding_of
from servesize.planning.inputs import Fixed, Knobs, knob_value, spec_speedup_of
from servesize.workload.model import Workload

# name -> (kind, field, lo, hi, unit). kind: 'knob' edits Knobs; 'pacing' edits the Workload but not the
# sessions it samples (the warm fill and decode stay the plan's); 'workload' edits the sessions themselves;
# 'engine' edits the deployment's scheduler (--max-num-batched-tokens: the chunk a decode waits for), its pool held
# as planned (a larger chunk also reserves more activation memory: servesize memory says how much)
SENSITIVITY = {
    "bandwidth_efficiency": ("knob", "bandwidth_efficiency", 0.3, 1.0, "fraction"),
    "mfu": ("knob", "mfu", 0.15, 0.9, "fraction"),
    "spec_speedup": ("knob", "mtp_speedup", 1.0, 3.0, "x"),
    "user_median_tokens": ("workload", "median", 5_000.0, 250_000.0, "tokens"),
    "user_sigma": ("workload", "sigma", 0.2, 1.6, ""),
    "invalidation": ("workload", "invalidation", 0.0, 0.5, "fraction"),
    "think_time_s": ("pacing", "think_time_s", 3.0, 180.0, "s"),
    "ttft_limit_s": ("knob", "ttft_limit_s", 1.0, 60.0, "s"),
    "max_num_batched_tokens": ("engine", "chunk_tokens", 512.0, 32768.0, "tokens"),
}


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


def sensitivity(fixed: Fixed, workload: Workload, knobs: Knobs, base_binding: str, fills: int = 300,
                iterations: int = 10, names: Iterable[str] | None = None,
                cache: CeilingCache | None = None) -> dict[str, dict[str, Any]]:
    """For each named assumption: the value at which the binding ceiling changes, or no flip in [lo, hi].

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
    for name in (names or SENSITIVITY):
        kind, fld, lo, hi, unit = SENSITIVITY[name]
        current = _current(fixed, workload, knobs, name, fld)
        k_eval, c_eval = (k_small, small_cache) if kind == "workload" else (knobs, plan_cache)
        binding_at = partial(_binding_at, fixed, workload, k_eval, c_eval, fld)
        try:
            out[name] = _row(binding_at, name, current, lo, hi, unit, iterations)
        except BadInput as exc:
            out[name] = {"current": current, "range": [lo, hi], "unit": unit, "error": str(exc), "text": f"not evaluated: {exc}"}
    return out


GEOMETRIC = ("user_median_tokens", "think_time_s", "max_num_batched_tokens")  # searched on a log scale


def _binding_at(fixed: Fixed, workload: Workload, knobs: Knobs, cache: CeilingCache, fld: str, x: float) -> str:
    if fld == "chunk_tokens":
        return binding_of(replace(fixed, chunk_tokens=max(1, int(round(x)))), workload, knobs, cache)
    w, k = apply_param(workload, knobs, fld, x)
    return binding_of(fixed, w, k, cache)


def _row(binding_at: Callable[[float], str], name: str, current: float, lo: float, hi: float, unit: str,
         iterations: int) -> dict[str, Any]:
    """The nearest flip below or above ``current``: bisection on the binding between current and each end."""
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
            mid = _midpoint(name, x_in, x_out)
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


def _midpoint(name: str, a: float, b: float) -> float:
    if name in GEOMETRIC and a > 0 and b > 0:
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
