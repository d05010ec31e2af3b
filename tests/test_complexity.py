"""No function in src/servesize/ is over cyclomatic complexity 20, as radon counts it:
one per function, plus one per branch, loop, handler, comprehension clause and boolean operator
(``a and b or c`` adds two). ruff's limit (12, mccabe) does not count boolean operators; this one does."""

from __future__ import annotations

import pathlib

import pytest
from radon.complexity import cc_visit
from radon.visitors import Class, Function

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "servesize"
MAX_COMPLEXITY = 20


def functions(blocks) -> list[Function]:
    """Every function radon found, methods and closures included."""
    out: list[Function] = []
    for block in blocks:
        if isinstance(block, Class):
            out += functions(block.methods) + functions(block.inner_classes)
        elif isinstance(block, Function):
            out += [block, *functions(block.closures)]
    return out


def too_complex(source: str) -> list[str]:
    return [f"{f.fullname} ({f.complexity})" for f in functions(cc_visit(source)) if f.complexity > MAX_COMPLEXITY]


PATHS = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: str(p.relative_to(SRC)))
def test_no_function_is_over_the_complexity_limit(path):
    assert too_complex(path.read_text()) == []


def test_the_count_includes_boolean_operators_and_closures():
    condition = " and ".join(f"x{i}" for i in range(MAX_COMPLEXITY))  # 19 operators: 1 + 1 (if) + 19 = 21
    source = f"def outer():\n    def inner({', '.join(f'x{i}' for i in range(MAX_COMPLEXITY))}):\n" \
             f"        if {condition}:\n            return 1\n    return inner\n"
    assert too_complex(source) == ["inner (21)"]  # the closure, reported under its own name
    assert PATHS and all(p.suffix == ".py" for p in PATHS)
