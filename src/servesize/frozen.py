"""``@frozen``: servesize's immutable records, a frozen dataclass whose ``__eq__`` and ``__hash__`` are compiled at
their first call rather than when the class is made, and whose ``__repr__`` is one function every record shares.

Why: on Python 3.11 ``@dataclass(frozen=True)`` writes six methods per class as source text and compiles each one
(``dataclasses._create_fn``), about 70 us apiece; the 68 records ``servesize memory`` imports spent 25 ms of its
CPU time there, the largest part of its start-up. Three of the six (``__init__`` and the frozen ``__setattr__`` /
``__delattr__``) are made with the class; ``__eq__`` and ``__hash__`` are the code dataclasses would write (its speed:
a record is hashed thousands of times a plan, as a cache key), compiled only for a class that is compared or hashed,
at the first call; ``__repr__`` only walks the fields, so one shared function does it. Measured in
docs/benchmarks.md (``benchmarks/bench_cli.py --kvfit``).

Behaves as ``@dataclass(frozen=True)``: equal when of the same class and equal in the fields that compare
(``field(compare=False)`` left out), hashed on the fields dataclasses hash, ``Name(field=value, ...)`` over the fields
with ``repr=True``; a class that writes its own ``__eq__``, ``__hash__`` or ``__repr__`` keeps it. ``dataclasses.fields``,
``replace`` and ``asdict`` work unchanged; type checkers see a frozen dataclass (``dataclass_transform``).
tests/test_frozen.py holds each of these against ``@dataclass(frozen=True)`` itself.
"""

from __future__ import annotations

import dataclasses
import reprlib
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


def _compiled(name: str, source: str) -> Any:
    """The function ``name`` defined by ``source`` (field names only: identifiers, never data)."""
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)  # noqa: S102  # the same code @dataclass generates, compiled once, at its first call
    return namespace[name]


def _eq_on_first_call(cls: Any, names: list[str]) -> Any:
    """A stub ``__eq__`` that, called once, compiles the record's own (the fields compared as one tuple each, as
    dataclasses write it), puts it on the class and answers with it: a record never compared costs no compile."""
    mine = "(" + "".join(f"self.{n}," for n in names) + ")"
    theirs = "(" + "".join(f"other.{n}," for n in names) + ")"
    source = (f"def __eq__(self, other):\n    if other.__class__ is self.__class__:\n"
              f"        return {mine} == {theirs}\n    return NotImplemented\n")

    def __eq__(self: Any, other: Any) -> Any:
        compiled = _compiled("__eq__", source)
        cls.__eq__ = compiled
        return compiled(self, other)

    return __eq__


def _hash_on_first_call(cls: Any, names: list[str]) -> Any:
    """A stub ``__hash__`` that compiles the record's own at its first call (``_eq_on_first_call``)."""
    source = "def __hash__(self):\n    return hash((" + "".join(f"self.{n}," for n in names) + "))\n"

    def __hash__(self: Any) -> int:
        compiled = _compiled("__hash__", source)
        cls.__hash__ = compiled
        return int(compiled(self))

    return __hash__


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
    return f"{self.__class__.__qualname__}({shown})"


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: type[T]) -> type[T]:
    """``cls`` as a frozen dataclass whose ``__eq__`` and ``__hash__`` compile at their first call and whose
    ``__repr__`` is the shared one (see the module)."""
    own = cls.__dict__
    writes_eq, writes_repr = "__eq__" in own, "__repr__" in own
    # Python sets __hash__ = None on a class that writes __eq__ alone; dataclasses count that as no hash of its own
    writes_hash = "__hash__" in own and not (own["__hash__"] is None and writes_eq)
    made: Any = dataclasses.dataclass(cls, frozen=True, eq=False, repr=False)
    fields = dataclasses.fields(made)
    if not writes_eq:
        made.__eq__ = _eq_on_first_call(made, [f.name for f in fields if f.compare])
    if not writes_hash:
        made.__hash__ = _hash_on_first_call(made, [f.name for f in fields if (f.compare if f.hash is None else f.hash)])
    if not writes_repr:
        made.__repr__ = _repr
    return made
