"""Percentiles, quantiles and medians: numpy's rules, the one home servesize computes them in.

numpy's 'linear' method: the q-quantile of n values lies at the virtual index (n - 1) q of their sorted order,
interpolated between its two neighbours (``_lerp``: numpy's two-sided form, exact at both ends); a NaN anywhere
gives NaN. ``percentiles`` and ``quantiles`` give ``np.percentile`` / ``np.quantile`` bit for bit by one partition
(without numpy's general machinery: a fraction of its cost on a few thousand values, and the planner asks
thousands of times a plan); ``median`` gives ``np.median`` (the middle value, or the mean of the two);
``weighted_percentile`` the percentile of values each repeated by a weight, without repeating them (vLLM's ITL
percentiles in ``servesize bench``); ``percentile_position`` is the rank a fill's percentile reads
(sizing/fill_pass.py, warm_capacity's split). tests/test_percentile.py holds each against numpy's own on random
arrays; tests/test_one_home.py fails on a percentile computed anywhere else. numpy loads where a function needs it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def percentile_position(n: int, q: float) -> float:
    """Where the q-th percentile (0-100) of n sorted values lies: numpy's virtual index (n - 1) q / 100."""
    return _position(n, q / 100)


def _position(n: int, fraction: float) -> float:
    """Where the quantile ``fraction`` (0-1) of n sorted values lies: (n - 1) x fraction (numpy's 'linear')."""
    return (n - 1) * fraction


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's two-sided interpolation between neighbours a <= b at fraction t (exact at both ends)."""
    diff = b - a
    return float(b - diff * (1 - t)) if t >= 0.5 else float(a + diff * t)


def _flat(x: Any) -> np.ndarray:
    import numpy as np
    flat: np.ndarray = np.asarray(x).ravel()
    return flat


def _picks(n: int, virtuals: Sequence[float]) -> list[tuple[float, int, int, int]]:
    """numpy's neighbours of each virtual index among n sorted values: (virtual, where its gamma counts from,
    the lower, the upper)."""
    picks = []
    for virtual in virtuals:
        if virtual >= n - 1:
            picks.append((virtual, -1, n - 1, n - 1))  # numpy takes the last value; its gamma counts from -1
        elif virtual < 0:
            picks.append((virtual, 0, 0, 0))
        else:
            lo = math.floor(virtual)
            picks.append((virtual, lo, lo, lo + 1))
    return picks


def _at(arr: np.ndarray, virtuals: Sequence[float]) -> tuple[float, ...]:
    """The values at these virtual indexes of ``arr``'s sorted order (numpy's picks and lerp), by one partition."""
    import numpy as np
    n = arr.size
    picks = _picks(n, virtuals)
    kth = sorted({0, n - 1, *(p[2] for p in picks), *(p[3] for p in picks)})
    part = np.partition(arr, kth)
    if arr.dtype.kind == "f" and math.isnan(part[-1]):
        return tuple(math.nan for _ in virtuals)
    return tuple([_lerp(part[i].item(), part[j].item(), virtual - gamma_from) for virtual, gamma_from, i, j in picks])


def _at_sorted(values: list[float], virtuals: Sequence[float]) -> tuple[float, ...]:
    """``_at`` for a list of numbers, without numpy (a measurement's workers summarise their requests with it)."""
    if any(v != v for v in values):
        return tuple(math.nan for _ in virtuals)
    ordered = sorted(values)
    return tuple(_lerp(float(ordered[i]), float(ordered[j]), virtual - gamma_from)
                 for virtual, gamma_from, i, j in _picks(len(ordered), virtuals))


def _numbers(x: list[Any] | tuple[Any, ...]) -> bool:
    """A non-empty list or tuple of plain numbers: read without numpy."""
    return bool(x) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x)


def percentiles(x: Any, qs: Sequence[float]) -> tuple[float, ...]:
    """``np.percentile(x, qs)`` (0-100, linear interpolation) bit for bit, as floats (a list of numbers read
    without numpy)."""
    if isinstance(x, (list, tuple)) and _numbers(x):
        return _at_sorted(list(x), [percentile_position(len(x), q) for q in qs])
    import numpy as np
    arr = np.asarray(x).ravel()
    n = arr.size
    if n == 0 or arr.dtype.kind not in "iuf":
        return tuple(float(v) for v in np.percentile(arr, list(qs)))  # numpy's own answer (or refusal)
    return _at(arr, [percentile_position(n, q) for q in qs])


def quantiles(x: Any, fractions: Sequence[float]) -> tuple[float, ...]:
    """``np.quantile(x, fractions)`` (0-1, linear interpolation) bit for bit, as floats."""
    arr = _flat(x)
    if arr.size == 0 or arr.dtype.kind not in "iuf":
        import numpy as np
        return tuple(float(v) for v in np.quantile(arr, list(fractions)))
    return _at(arr, [_position(arr.size, f) for f in fractions])


def percentile50(x: Any) -> float:
    """The median as ``np.percentile(x, 50)`` gives it."""
    return percentiles(x, (50.0,))[0]


def median(x: Any) -> float:
    """``np.median(x)``: the middle value, or the mean of the two middle ones (NaN with a NaN anywhere)."""
    import numpy as np
    arr = _flat(x)
    n = arr.size
    if n == 0 or arr.dtype.kind not in "iuf":
        return float(np.median(arr))  # numpy's own answer (or refusal)
    mid = n // 2
    part = np.partition(arr, sorted({0 if n % 2 else mid - 1, mid, n - 1}))
    if arr.dtype.kind == "f" and math.isnan(part[-1]):
        return math.nan
    if n % 2:
        return float(part[mid])
    return float(np.mean(part[mid - 1:mid + 1]))


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """``percentiles(np.repeat(values, weights), (q,))`` without repeating: the q-th percentile of ``values``, each
    counted ``weights`` times (non-negative integers), by the same rule. 0.0 when the weights sum to 0."""
    import numpy as np
    order = np.argsort(values, kind="stable")
    v, w = np.asarray(values)[order], np.asarray(weights)[order]
    total = int(w.sum())
    if total == 0:
        return 0.0
    position = percentile_position(total, q)
    lo, hi = math.floor(position), math.ceil(position)
    ends = np.cumsum(w)
    a = float(v[np.searchsorted(ends, lo, side="right")])
    b = float(v[np.searchsorted(ends, hi, side="right")])
    return _lerp(a, b, position - lo)
