"""What JSON can hold: the one place an unbounded or undefined figure becomes ``null``.

JSON has no Infinity or NaN (``json.dumps(..., allow_nan=False)`` refuses them), while the planner's
figures may be either (a ceiling that never binds is infinite). Every JSON document servesize writes
(the CLI's ``--json``, the explorer's API, a measurement's run record) passes through ``finite``.
"""

from __future__ import annotations

import math
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None, at any depth; dict keys as strings, tuples as
    lists, results by their ``to_dict()``, numpy arrays and scalars by their ``tolist()`` (numpy is not
    imported here)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, bytes, int)):
        return obj
    if isinstance(obj, dict):
        return {k if isinstance(k, str) else str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if hasattr(obj, "to_dict"):
        return finite(obj.to_dict())
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return finite(obj.tolist())
    return obj
