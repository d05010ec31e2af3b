"""One serialisation path (#30): a result's document is its fields under one naming policy (servesize.jsonable.Record),
and a hand-written ``to_dict`` that only restates its fields fails here."""

from __future__ import annotations

import ast
import math
import pathlib
from dataclasses import dataclass, field

from servesize.jsonable import Record, finite, json_as

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "servesize"


@dataclass(frozen=True)
class _Inner(Record):
    a: float


@dataclass(frozen=True)
class _Outer(Record):
    users: int = field(metadata=json_as("users_per_replica"))
    hidden: str = field(metadata=json_as(None))
    inner: _Inner | None = None
    many: tuple[_Inner, ...] = ()
    by_name: dict[str, _Inner] = field(default_factory=dict)

    JSON_EXTRA = ("doubled",)

    @property
    def doubled(self) -> int:
        return 2 * self.users


def test_a_record_is_its_fields_under_their_declared_names_then_its_extra_properties():
    doc = _Outer(3, "x", _Inner(math.inf), (_Inner(1.0),), {"k": _Inner(2.0)}).to_dict()
    assert doc == {"users_per_replica": 3, "inner": {"a": math.inf}, "many": [{"a": 1.0}],
                   "by_name": {"k": {"a": 2.0}}, "doubled": 6}
    assert list(doc) == ["users_per_replica", "inner", "many", "by_name", "doubled"]
    assert finite(_Outer(1, "y", _Inner(math.nan)))["inner"] == {"a": None}


def _of_self(node: ast.expr) -> str | None:
    """The attribute of ``self`` that an expression only restates (as Record.to_dict would write it), else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    if isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute):
        if node.func.attr in ("to_dict", "to_list"):
            return _of_self(node.func.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "list" and len(node.args) == 1:
        return _of_self(node.args[0])
    if isinstance(node, ast.ListComp) and len(node.generators) == 1:
        elt, gen = node.elt, node.generators[0]
        if (isinstance(elt, ast.Call) and isinstance(elt.func, ast.Attribute) and elt.func.attr == "to_dict"
                and isinstance(elt.func.value, ast.Name) and isinstance(gen.target, ast.Name)
                and elt.func.value.id == gen.target.id):
            return _of_self(gen.iter)
    if (isinstance(node, ast.IfExp) and isinstance(node.body, ast.Constant) and node.body.value is None
            and isinstance(node.test, ast.Compare) and isinstance(node.test.ops[0], ast.Is)):  # None if self.x is None
        attr = _of_self(node.test.left)
        return attr if attr is not None and attr == _of_self(node.orelse) else None
    return None


def test_no_hand_written_to_dict_only_restates_its_fields():
    """A ``to_dict`` whose every key is a field or property of self, written as it is, is Record's job."""
    restating = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if not (isinstance(fn, ast.FunctionDef) and fn.name == "to_dict"):
                    continue
                body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Dict):
                    values = body[0].value.values
                    if values and all(_of_self(v) is not None for v in values):
                        restating.append(f"{path.relative_to(SRC)}:{cls.name}")
    assert not restating, f"make these Records (servesize.jsonable): {restating}"


def _records() -> list[type]:
    """Every Record in the library (each module imported, then the subclasses walked)."""
    import importlib
    import pkgutil

    import servesize

    for info in pkgutil.walk_packages(servesize.__path__, "servesize."):
        if not info.name.endswith("__main__") and not info.name.startswith("servesize.web.static"):
            importlib.import_module(info.name)
    out, stack = [], list(Record.__subclasses__())
    while stack:
        cls = stack.pop()
        out.append(cls)
        stack.extend(cls.__subclasses__())
    return [c for c in out if c.__module__.startswith("servesize.")]


def test_every_records_document_names_are_declared_once_and_its_extras_exist():
    """A typo in JSON_EXTRA, or two fields written under one name, would show only when that result is written."""
    import dataclasses

    from servesize.jsonable import JSON_KEY

    records = _records()
    assert len(records) >= 35
    for cls in records:
        assert dataclasses.is_dataclass(cls), cls
        names = [f.metadata.get(JSON_KEY, f.name) for f in dataclasses.fields(cls)]
        names = [n for n in names if n is not None] + list(cls.JSON_EXTRA)
        assert len(names) == len(set(names)), f"{cls.__name__}: a document name twice: {names}"
        for extra in cls.JSON_EXTRA:
            assert isinstance(getattr(cls, extra, None), property), f"{cls.__name__}.{extra} is not a property"
