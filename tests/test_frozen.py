"""servesize.frozen.frozen behaves as @dataclass(frozen=True): each behaviour held against the stdlib's own class of
the same fields, and every record in the package made by it (the start-up it saves is in docs/benchmarks.md)."""

import ast
import dataclasses
import pathlib
import pickle
from dataclasses import dataclass, field

import pytest

from servesize.frozen import frozen

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "servesize"


def _pair(body):
    """The same class body made by @frozen and by @dataclass(frozen=True)."""
    return frozen(type("Rec", (), dict(body))), dataclass(frozen=True)(type("Rec", (), dict(body)))


BODY = {"__annotations__": {"a": "int", "b": "str", "c": "list", "d": "float"},
        "b": "x", "c": field(default=(), compare=False, repr=False), "d": field(default=1.0, hash=False)}


@pytest.mark.parametrize("values", [(1, "x", (), 1.0), (2, "y", (3,), 0.5), (0, "", ("z",), float("nan"))])
def test_a_record_compares_hashes_and_prints_as_a_frozen_dataclass_does(values):
    ours, theirs = _pair(BODY)
    a, b = ours(*values), theirs(*values)
    assert repr(a) == repr(b)
    assert hash(a) == hash(b)  # the same tuple hashed: a set of records iterates in the same order
    assert (a == ours(*values)) == (b == theirs(*values))  # a NaN field: unequal in both
    assert (a == ours(values[0] + 1, *values[1:])) is False
    assert (a == ours(values[0], values[1], ("other",), values[3])) == (b == theirs(values[0], values[1], ("other",), values[3]))
    assert a != b and (a == 1) is False  # another class, or no record, is never equal
    assert dataclasses.asdict(a) == dataclasses.asdict(b)
    assert dataclasses.replace(a, a=7).a == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.a = 3


def test_a_subclass_record_compares_its_own_fields_and_never_equals_its_base():
    base = frozen(type("Base", (), {"__annotations__": {"a": "int"}}))
    child = frozen(type("Child", (base,), {"__annotations__": {"b": "int"}, "b": 0}))
    assert child(1, 2) == child(1, 2) and child(1, 2) != child(1, 3)
    assert child(1, 0) != base(1)
    assert repr(child(1, 2)) == "Child(a=1, b=2)"


@frozen
class Point:
    x: int
    y: int = 0


def test_a_record_pickles_and_copies_to_an_equal_record():
    """Worker processes get records by pickle (simulate's seeds, the web's pool)."""
    p = Point(3, 4)
    assert pickle.loads(pickle.dumps(p)) == p and hash(pickle.loads(pickle.dumps(p))) == hash(p)


def test_a_record_that_writes_its_own_methods_keeps_them_as_dataclasses_do():
    def eq(self, other):
        return True

    ours, theirs = _pair({"__annotations__": {"a": "int"}, "__eq__": eq, "__repr__": lambda self: "mine"})
    assert ours(1) == ours(2) and theirs(1) == theirs(2)
    assert repr(ours(1)) == repr(theirs(1)) == "mine"
    assert hash(ours(1)) == hash(theirs(1))  # __eq__ alone written: the fields' hash, as dataclasses give it
    own_hash = frozen(type("H", (), {"__annotations__": {"a": "int"}, "__hash__": lambda self: 42}))
    assert hash(own_hash(1)) == 42


def test_a_record_without_fields_and_a_recursive_one():
    empty_ours, empty_theirs = _pair({})
    assert empty_ours() == empty_ours() and hash(empty_ours()) == hash(empty_theirs())
    assert repr(empty_ours()) == repr(empty_theirs())
    node = frozen(type("Node", (), {"__annotations__": {"items": "list"}}))
    loop = node([])
    loop.items.append(loop)
    assert repr(loop) == "Node(items=[...])"


def test_every_frozen_record_in_the_package_is_made_by_frozen():
    """A ``@dataclass(frozen=True)`` compiles three methods a record shares (servesize.frozen); one with ``eq=False``
    (identity equality, on purpose) is the exception."""
    slow = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for deco in node.decorator_list:
                    if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "dataclass":
                        kw = {k.arg: getattr(k.value, "value", None) for k in deco.keywords}
                        if kw.get("frozen") is True and kw.get("eq", True) is not False:
                            slow.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
    assert not slow, slow


def test_eq_and_hash_are_compiled_at_their_first_call_only():
    """A class made costs no compiled eq or hash; the first call puts dataclasses' own code on the class."""
    rec = frozen(type("Lazy", (), {"__annotations__": {"a": "int", "b": "str"}}))
    stub_eq, stub_hash = rec.__dict__["__eq__"], rec.__dict__["__hash__"]
    assert stub_eq.__code__.co_filename.endswith("frozen.py")  # the stub: nothing compiled yet
    x, y = rec(1, "x"), rec(1, "x")
    assert x == y and hash(x) == hash((1, "x"))
    assert rec.__dict__["__eq__"] is not stub_eq and rec.__dict__["__hash__"] is not stub_hash
    assert rec.__dict__["__eq__"].__code__.co_filename == "<string>"  # the compiled one now answers
    assert (x == rec(2, "x")) is False and hash(rec(2, "y")) == hash((2, "y"))
