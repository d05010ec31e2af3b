"""A number travels with its derivation.

Each step is written once, as an expression over named inputs; the value is computed by
evaluating that expression and the ``--explain`` text is rendered from the same expression
and the same inputs. There is no second, hand-written copy of any formula to drift.

    d = Derivation()
    kv = d.step("kv_bytes_per_token", "2 * kv_heads * head_dim * kv_bytes * layers",
                unit="B", kv_heads=8, head_dim=128, kv_bytes=2, layers=32)
    d.render()  ->  kv_bytes_per_token = 2 × kv_heads × head_dim × kv_bytes × layers
                                       = 2 × 8 × 128 × 2 × 32 = 131,072 B
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from servesize.frozen import frozen
from servesize.units import cdiv

_FUNCTIONS = {
    "min": min, "max": max, "cdiv": cdiv, "floor": math.floor, "ceil": math.ceil,
    "int": int, "float": float, "round": round, "sum": sum, "log2": math.log2, "abs": abs,
}


@lru_cache(maxsize=4096)
def _compile(expression: str):
    return compile(expression, "<derivation>", "eval")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "unbounded" if value > 0 else ("-unbounded" if value < 0 else "undefined")
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        if abs(value) >= 100:
            return f"{value:,.1f}"
        return f"{value:.6g}"
    return str(value)


def _pretty(expression: str) -> str:
    return expression.replace(" * ", " × ").replace(" // ", " ⌊/⌋ ")


@frozen
class Step:
    name: str
    expression: str
    inputs: tuple[tuple[str, Any], ...]
    value: Any
    unit: str = ""
    source: str = ""
    note: str = ""

    def substituted(self) -> str:
        text = self.expression
        # Replace longer names first so 'kv_heads_per_rank' is not clobbered by 'kv_heads'.
        for name, value in sorted(self.inputs, key=lambda kv: -len(kv[0])):
            text = _replace_name(text, name, _show(value))
        return _pretty(text)

    def formula(self) -> str:
        """``name = expression`` in the notation ``render`` prints, no figures."""
        return f"{self.name} = {_pretty(self.expression)}"

    def shown(self) -> str:
        """The value as ``render`` prints it, with its unit."""
        return _show(self.value) + (f" {self.unit}" if self.unit else "")

    def render(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        symbolic = _pretty(self.expression)
        line = f"{self.name} = {symbolic}"
        if self.inputs:
            line += f"\n    = {self.substituted()}"
        line += f" = {_show(self.value)}{unit}"
        if self.note:
            line += f"\n    ({self.note})"
        if self.source:
            line += f"\n    [source: {self.source}]"
        return line

    def to_dict(self) -> dict:
        return {
            "name": self.name, "expression": self.expression, "inputs": dict(self.inputs),
            "value": self.value, "unit": self.unit, "source": self.source, "note": self.note,
        }


def _replace_name(text: str, name: str, shown: str) -> str:
    out, i, n = [], 0, len(name)
    while i < len(text):
        if text.startswith(name, i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) and (
            i + n == len(text) or not (text[i + n].isalnum() or text[i + n] == "_")
        ):
            out.append(shown)
            i += n
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@dataclass
class Derivation:
    """An ordered list of steps; every quantity of a result object is one of them."""

    steps: list[Step] = field(default_factory=list)

    def step(self, name: str, expression: str, *, unit: str = "", source: str = "", note: str = "", **inputs):
        value = eval(_compile(expression), {"__builtins__": {}, **_FUNCTIONS}, inputs)  # noqa: S307 - our own formulas
        self.steps.append(Step(name, expression, tuple(inputs.items()), value, unit, source, note))
        return value

    def given(self, name: str, value, *, unit: str = "", source: str = "", note: str = ""):
        """A quantity taken as input (a flag, a catalogue value) rather than computed."""
        self.steps.append(Step(name, _show(value), (), value, unit, source, note))
        return value

    def extend(self, other: Derivation, prefix: str = "") -> None:
        for s in other.steps:
            self.steps.append(Step(prefix + s.name, s.expression, s.inputs, s.value, s.unit, s.source, s.note) if prefix else s)

    def value(self, name: str):
        for s in reversed(self.steps):
            if s.name == name:
                return s.value
        raise KeyError(name)

    def render(self) -> str:
        return "\n".join(s.render() for s in self.steps)

    def to_list(self) -> list[dict]:
        return [s.to_dict() for s in self.steps]
