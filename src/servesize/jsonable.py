"""Results as JSON: one naming policy for every result's document, and the one place an unbounded or undefined
figure becomes ``null``.

A result is a dataclass; its document is its fields under their own names, in declaration order, then the
properties its class names in ``JSON_EXTRA`` (``Record.to_dict``). A field whose document name differs says so
where it is declared (``users: int = field(metadata=json_as("users_per_replica"))``; ``json_as(None)`` leaves it
out), so a field's name in the files and the API lives in one place. Nested results, lists and maps of them are
written as their own documents. A result whose document is not its fields (a verdict's wording, a table keyed by
data) keeps a ``to_dict`` of its own.

JSON has no Infinity or NaN (``json.dumps(..., allow_nan=False)`` refuses them), while the planner's
figures may be either (a ceiling that never binds is infinite). Every JSON document servesize writes
(the CLI's ``--json``, the explorer's API, a measurement's run record) passes through ``finite``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

JSON_KEY = "json"  # a dataclass field's metadata: the name its value takes in a document (None: not written)


def json_as(key: str | None) -> dict[str, str | None]:
    """A dataclass field's metadata naming it ``key`` in the result's document (None: not written):
    ``users: int = field(metadata=json_as("users_per_replica"))``."""
    return {JSON_KEY: key}


class Record:
    """A result whose document is its fields (under their ``json_as`` names) and then the properties in
    ``JSON_EXTRA``."""

    JSON_EXTRA: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]  # every Record is a dataclass
            key = f.metadata.get(JSON_KEY, f.name)
            if key is not None:
                out[key] = plain(getattr(self, f.name))
        for name in self.JSON_EXTRA:
            out[name] = plain(getattr(self, name))
        return out


def plain(value: Any) -> Any:
    """A value as a document holds it: results by their ``to_dict()`` (a derivation by its ``to_list()``), tuples
    as lists, at any depth of lists and maps; anything else as it is (``finite`` makes numbers JSON's)."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "to_list"):
        return value.to_list()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


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


def shape(doc: Any, data_keyed: tuple[str, ...] = ()) -> list[str]:
    """The shape of a JSON document: one ``path: types`` line per leaf, sorted (``.ceilings.cache: number|null``),
    list items merged into one ``[]``; a map whose path ends in one of ``data_keyed`` (keyed by data: a reason, a
    derivation's inputs) has its keys merged into one ``*``. An empty list or map counts only where nothing else
    fills that path. What a change to servesize's serialisation must leave as it is (tests/test_json_shapes.py),
    whatever the numbers are. Bounded by the document."""
    leaves: dict[str, set[str]] = {}
    _walk(doc, "", leaves, tuple(data_keyed))
    filled = {p for p, kinds in leaves.items() if kinds - {"[]", "{}"}}
    lines = []
    for path, kinds in leaves.items():
        real = kinds - {"[]", "{}"}
        if not real and any(f.startswith(path) for f in filled):
            continue  # an empty list or map where another document shows what it holds
        lines.append(f"{path or '.'}: {'|'.join(sorted(real or kinds))}")
    return sorted(lines)


def _walk(doc: Any, path: str, leaves: dict[str, set[str]], data_keyed: tuple[str, ...]) -> None:
    if isinstance(doc, dict):
        if not doc:
            leaves.setdefault(path, set()).add("{}")
        for k, v in doc.items():
            _walk(v, f"{path}.{'*' if data_keyed and path.endswith(data_keyed) else k}", leaves, data_keyed)
    elif isinstance(doc, list):
        if not doc:
            leaves.setdefault(path + "[]", set()).add("[]")
        for v in doc:
            _walk(v, path + "[]", leaves, data_keyed)
    else:
        kind = ("null" if doc is None else "bool" if isinstance(doc, bool) else "string" if isinstance(doc, str)
                else "number")
        leaves.setdefault(path, set()).add(kind)
