"""Each input is declared once (issue 18): its kind, bounds, help and default are written in one place,
and every other occurrence of the name is a reference to that declaration or a slot the engine fills.

What counts, for a dataclass field in src/servesize (read from the source with ast):

- a declaration: the field makes its own Param (``_p(...)``: kind, bounds, help, default), or writes a
  default value as a literal (``fills: int = 1500``);
- a reference: the field reuses a declaration (``_shared("name")``: the same Param and the same default),
  takes a named constant as its default (``fills: int = DEFAULT_FILLS``), or is not written in the class at
  all because the class takes the group that declares it (``FleetQuery(WorkloadFields, ...)``);
- a slot: a field with no default or ``None`` (``Deployment.gpu_memory_utilization``: the engine's input,
  filled from the Scenario's value; ``Calibration.gpu_memory_utilization``: the figure a log states). A slot
  states nothing about the input (no bound, no help, no default), so it cannot disagree with it.

The test then checks, from the classes themselves, that every query holding one of these fields holds the
very Param object of its one declaration.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import pytest

from servesize import fleet_query as fq
from servesize import scenario as sc

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "servesize"

# the inputs the issue names: the utilisation, the median-like workload fields, and the Monte-Carlo's
NAMES = ("gpu_memory_utilization", "median", "subagent_median", "fills", "draws", "seed")
QUERIES = (sc.Scenario, sc.FitQuery, fq.FleetQuery, sc.WorkloadFields, sc.KnobFields, sc.MonteCarloFields)


def _is_dataclass(node: ast.ClassDef) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if (isinstance(target, ast.Name) and target.id in ("dataclass", "frozen")) or (
                isinstance(target, ast.Attribute) and target.attr == "dataclass"):
            return True
    return False


def kind_of(value: ast.expr | None) -> str:
    """'declaration', 'reference' or 'slot' for a field's right-hand side."""
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return "slot"
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        if value.func.id == "_p":
            return "declaration"
        if value.func.id == "_shared":
            return "reference"
    if isinstance(value, (ast.Name, ast.Attribute)):
        return "reference"
    if isinstance(value, (ast.Constant, ast.UnaryOp)):
        return "declaration"
    raise AssertionError(f"a field written as {ast.dump(value)[:80]}: classify it in this test")


def occurrences() -> dict[str, list[tuple[str, str]]]:
    """name -> [(where, kind)] for every dataclass field so named in src/servesize."""
    found: dict[str, list[tuple[str, str]]] = {name: [] for name in NAMES}
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ClassDef) and _is_dataclass(node)):
                continue
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id in found:
                    where = f"{path.relative_to(SRC)}:{stmt.lineno} {node.name}"
                    found[stmt.target.id].append((where, kind_of(stmt.value)))
    return found


@pytest.mark.parametrize("name", NAMES)
def test_each_input_is_declared_once_in_src(name):
    found = occurrences()[name]
    declarations = [where for where, kind in found if kind == "declaration"]
    assert len(declarations) == 1, f"{name} declared {len(declarations)} times: {declarations}"
    assert declarations[0].startswith("scenario.py:"), declarations  # the Scenario's groups declare the inputs


def test_the_walk_sees_the_references_and_slots_it_classifies():
    """The walk is not vacuous: it finds the engine's slot and the fit query's reference for the utilisation."""
    found = dict(occurrences()["gpu_memory_utilization"])
    kinds = sorted(found.values())
    assert "reference" in kinds and "slot" in kinds
    assert any(w.startswith("engine/deployment.py") and k == "slot" for w, k in found.items())


def test_a_literal_default_is_a_declaration_and_a_named_one_a_reference():
    tree = ast.parse("@dataclass\nclass K:\n    fills: int = 1500\n    draws: int = DEFAULT_DRAWS\n    seed: int = -1\n")
    cls = tree.body[0]
    assert isinstance(cls, ast.ClassDef)
    assert [kind_of(s.value) for s in cls.body if isinstance(s, ast.AnnAssign)] == \
        ["declaration", "reference", "declaration"]


@pytest.mark.parametrize("name", NAMES)
def test_every_query_holding_the_field_holds_its_one_param(name):
    params = {id(f.metadata["param"]) for cls in QUERIES for f in dataclasses.fields(cls)
              if f.name == name and "param" in f.metadata}
    assert len(params) == 1
    named = [table[name] for table in (sc.PARAMS, sc.FIT_PARAMS, fq.FLEET_PARAMS) if name in table]
    assert all(p is named[0] for p in named)


def test_the_fleet_query_takes_the_groups_whole_not_field_by_field():
    own = fq.FleetQuery.__dict__["__annotations__"]
    for group in (sc.WorkloadFields, sc.KnobFields, sc.MonteCarloFields):
        assert issubclass(fq.FleetQuery, group) and issubclass(sc.Scenario, group)
        assert not set(own) & set(group.__dict__["__annotations__"])


def test_the_monte_carlo_defaults_agree_from_flag_to_planner():
    from servesize.limits import DEFAULT_DRAWS, DEFAULT_FILLS, DEFAULT_SEED
    from servesize.planning.inputs import Knobs

    knobs, scenario, query = Knobs(), sc.Scenario(model="qwen3.6-27b", gpus="1xH200"), fq.FleetQuery(
        models="qwen3.6-27b", users=10)
    for obj in (knobs, scenario, query):
        assert (obj.fills, obj.draws, obj.seed) == (DEFAULT_FILLS, DEFAULT_DRAWS, DEFAULT_SEED)


def test_the_name_tables_are_the_declarations():
    from servesize.planning.inputs import Knobs
    from servesize.resolve.knobs import KNOB_FIELDS
    from servesize.resolve.workload import ORIGIN_OF, WORKLOAD_FIELDS

    knob_fields = {f.name for f in dataclasses.fields(Knobs)}
    assert set(KNOB_FIELDS) == {p.name for p in sc.params_in("knobs")}
    assert set(KNOB_FIELDS.values()) <= knob_fields  # every knob lands on a field the planner has
    assert WORKLOAD_FIELDS["think_time"] == "think_time_s" == sc.PARAMS["think_time"].to
    assert ORIGIN_OF["median"] == "user_median_tokens" == sc.PARAMS["median"].origin


def test_the_planners_knob_sources_name_the_declared_flag_and_assumption():
    """planning.inputs.KNOB_SOURCE sits below the Scenario (the planner cannot import it): what it says of each
    knob, its flag and the assumption a None takes, must be what the one declaration says."""
    from servesize.planning.inputs import KNOB_SOURCE

    by_target = {p.target: p for p in sc.params_in("knobs")}
    for knob, (key, flag) in KNOB_SOURCE.items():
        p = by_target[knob]
        assert flag in (p.flag, *p.flags), (knob, flag)
        assert p.assumption in (None, key), (knob, key, p.assumption)


def test_every_generated_workload_target_is_a_name_the_planner_applies():
    """WORKLOAD_FIELDS is generated from Param.to: each target must be one planning.sensitivity.apply_param sets
    (a drifted ``to`` would be refused there as 'cannot vary')."""
    from servesize.planning.inputs import Knobs
    from servesize.planning.sensitivity import apply_param
    from servesize.resolve.workload import WORKLOAD_FIELDS
    from servesize.workload.presets import preset

    workload = preset("coding-agent").workload()
    for name, target in WORKLOAD_FIELDS.items():
        value = (sc.PARAMS[name].lo or 0) + 1  # inside every declared range, and none of the preset's values
        changed, _ = apply_param(workload, Knobs(), target, value)
        assert changed != workload, name


def test_the_planner_reads_think_time_in_one_place_and_it_has_one_default():
    # the mean think time: planning.load.think_time_of is the planner's one reader (Little's law needs the mean);
    # its default is the workload's (each preset's, data/workloads.toml), never a second one in the assumptions
    from servesize.assumptions import modelled_assumptions

    readers = []
    for path in sorted([*(SRC / "planning").rglob("*.py"), *(SRC / "sizing").rglob("*.py")]):
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and node.attr == "think_time_s" and isinstance(node.ctx, ast.Load) \
                        and not (isinstance(node.value, ast.Name) and node.value.id == "self"):  # a report's own field
                    readers.append(f"{path.name}:{fn.name}")
    assert sorted(set(readers)) == ["load.py:think_time_of"], readers
    assert not [k for k in modelled_assumptions() if "think_time" in k]


# The sensitivity panel's rows and the explorer's sliders are declared on the fields they vary (Param.sensitivity,
# Param.slider): no table elsewhere may key ranges, steps or scales by those fields' or rows' names.
def _declared_names() -> set[str]:
    from servesize.web.form import VIEW_PARAMS

    params = [*sc.PARAMS.values(), *VIEW_PARAMS.values()]
    return ({p.name for p in params if p.slider is not None or p.sensitivity is not None}
            | {p.sensitivity.name for p in params if p.sensitivity is not None})


def _a_range_or_step(value: ast.expr) -> bool:
    """A number (a step), or a tuple or list holding two numbers or more (a range): what such a table maps to."""
    def number(x: ast.expr) -> bool:
        return isinstance(x, ast.Constant) and isinstance(x.value, (int, float)) and not isinstance(x.value, bool) or (
            isinstance(x, ast.BinOp))
    if number(value):
        return True
    return isinstance(value, (ast.Tuple, ast.List)) and sum(number(x) for x in value.elts) >= 2


def test_no_module_keeps_a_table_of_sensitivity_rows_or_slider_ranges_beside_the_declarations():
    names = _declared_names()
    tables = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Dict):
                keys = {k.value for k, v in zip(node.keys, node.values)
                        if isinstance(k, ast.Constant) and isinstance(k.value, str) and _a_range_or_step(v)}
                if len(keys & names) >= 3:
                    tables.append(f"{path.relative_to(SRC)}:{node.lineno} {sorted(keys & names)[:4]}")
    assert tables == []


def test_the_panel_and_the_sliders_read_the_declarations():
    from servesize.api import sensitivity_ranges
    from servesize.web.form import slider_range

    rows = sensitivity_ranges()
    for p in sc.PARAMS.values():
        if p.sensitivity is not None:
            kind, field, lo, hi, unit = rows[p.sensitivity.name]
            assert (lo, hi, unit) == (p.sensitivity.lo, p.sensitivity.hi, p.sensitivity.unit)
            assert field == (p.sensitivity.field or p.target)
        if p.slider is not None:
            assert slider_range(p.name)["step"] == p.slider.step
        else:
            assert slider_range(p.name) is None, p.name
    # the rows users see, by name, with the ranges they were searched over before the declarations held them
    assert {k: v[2:] for k, v in rows.items()} == {
        "bandwidth_efficiency": (0.3, 1.0, "fraction"), "mfu": (0.15, 0.9, "fraction"), "spec_speedup": (1.0, 3.0, "x"),
        "user_median_tokens": (5_000.0, 250_000.0, "tokens"), "user_sigma": (0.2, 1.6, ""),
        "invalidation": (0.0, 0.5, "fraction"), "think_time_s": (3.0, 180.0, "s"), "ttft_limit_s": (1.0, 60.0, "s"),
        "max_num_batched_tokens": (512.0, 32768.0, "tokens")}
