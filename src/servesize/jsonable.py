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


def shape(doc: Any, path: str = "") -> list[str]:
    """The shape of a JSON document: one ``path: types`` line per leaf, sorted (``plan.ceilings[].users: number|null``),
    list items merged into one ``[]`` and a map's keys kept. What a change to servesize's serialisation must leave as it
    is (tests/test_json_shapes.py), whatever the numbers are. Bounded by the document."""
    leaves: dict[str, set[str]] = {}
    _walk(doc, path, leaves)
    return sorted(f"{p or '.'}: {'|'.join(sorted(t))}" for p, t in leaves.items())


def _walk(doc: Any, path: str, leaves: dict[str, set[str]]) -> None:
    if isinstance(doc, dict):
        if not doc:
            leaves.setdefault(path, set()).add("{}")
        for k, v in doc.items():
            _walk(v, f"{path}.{k}", leaves)
    elif isinstance(doc, list):
        if not doc:
            leaves.setdefault(path + "[]", set()).add("[]")
        for v in doc:
            _walk(v, path + "[]", leaves)
    else:
        kind = ("null" if doc is None else "bool" if isinstance(doc, bool) else "string" if isinstance(doc, str)
                else "number")
        leaves.setdefault(path, set()).add(kind)
