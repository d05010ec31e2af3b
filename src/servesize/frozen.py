"""``@frozen``: servesize's immutable records, a frozen dataclass whose ``__eq__``, ``__hash__`` and ``__repr__`` are
the three functions below, shared by every record, instead of three generated for each class.

Why: on Python 3.11 ``@dataclass(frozen=True)`` writes six methods per class as source text and compiles each one
(``dataclasses._create_fn``), about 70 us apiece; the 68 records ``servesize memory`` imports spent 25 ms of its
CPU time there, the largest part of its start-up. Three of the six (``__init__`` and the frozen ``__setattr__`` /
``__delattr__``) depend on the fields in a way only generated code does; the other three only walk the fields, so
one function each does it for every class. Measured in docs/benchmarks.md (``benchmarks/bench_cli.py --kvfit``).

Behaves as ``@dataclass(frozen=True)``: equal when of the same class and equal in the fields that compare
(``field(compare=False)`` left out), hashed on the fields dataclasses hash, ``Name(field=value, ...)`` over the fields
with ``repr=True``; a class that writes its own ``__eq__``, ``__hash__`` or ``__repr__`` keeps it. ``dataclasses.fields``,
``replace`` and ``asdict`` work unchanged; type checkers see a frozen dataclass (``dataclass_transform``).
tests/test_frozen.py holds each of these against ``@dataclass(frozen=True)`` itself.
"""

from __future__ import annotations

import dataclasses
import reprlib
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")


def _no_fields(_: object) -> tuple[()]:
    return ()


def _getter(names: list[str]) -> Any:
    """The values of ``names`` as one tuple: the tuple the generated methods compare and hash, so a record hashes
    to the value ``@dataclass(frozen=True)`` gives it (and a set of records iterates in the same order)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        one = attrgetter(names[0])
        return lambda record: (one(record),)
    return _no_fields


def _eq(self: Any, other: Any) -> bool:
    if other.__class__ is self.__class__:
        key = self.__class__.__frozen_eq__
        return bool(key(self) == key(other))
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__class__.__frozen_hash__(self))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
    return f"{self.__class__.__qualname__}({shown})"


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: type[T]) -> type[T]:
    """``cls`` as a frozen dataclass with the shared ``__eq__``, ``__hash__`` and ``__repr__`` (see the module)."""
    own = cls.__dict__
    writes_eq, writes_repr = "__eq__" in own, "__repr__" in own
    # Python sets __hash__ = None on a class that writes __eq__ alone; dataclasses count that as no hash of its own
    writes_hash = "__hash__" in own and not (own["__hash__"] is None and writes_eq)
    made: Any = dataclasses.dataclass(cls, frozen=True, eq=False, repr=False)
    fields = dataclasses.fields(made)
    if not writes_eq:
        made.__frozen_eq__ = _getter([f.name for f in fields if f.compare])
        made.__eq__ = _eq
    if not writes_hash:
        made.__frozen_hash__ = _getter([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
        made.__hash__ = _hash
    if not writes_repr:
        made.__repr__ = _repr
    return made
