"""The layout is the architecture: each layer imports only from itself and the layers below it,
and no module imports itself back through a chain (docs/ENGINEERING.md, "Layout").

Every import counts, a lazy one inside a function included: a lazy import is still a dependency."""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "servesize"

# lowest first; a module may import from its own layer and any layer listed before it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", ("servesize.units", "servesize.errors", "servesize.datafiles", "servesize.limits",
                     "servesize.derivation", "servesize.assumptions", "servesize.jsonable", "servesize.progress",
                     "servesize.lazy", "servesize.frozen", "servesize.percentile")),
    ("model", ("servesize.model",)),
    ("engine", ("servesize.engine",)),
    ("workload", ("servesize.workload",)),
    ("planning", ("servesize.planning",)),
    ("sizing", ("servesize.sizing",)),
    ("vllm_logs", ("servesize.vllm_logs",)),
    ("simulate", ("servesize.simulate",)),
    ("api", ("servesize.scenario", "servesize.fleet_query", "servesize.resolve", "servesize.api", "servesize.flags")),
    ("render", ("servesize.render",)),
    ("measure", ("servesize.measure",)),
    ("web", ("servesize.web",)),
    ("commands", ("servesize.commands",)),
    ("cli", ("servesize.cli", "servesize.__main__")),
]
# The package root is the public facade (it re-exports the api layer lazily); only the version
# may be taken from it by the modules inside the package.
ROOT = "servesize"


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def imports_of(path: pathlib.Path, package: str) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import statement in the file; ``package``
    is the package the file is in (for relative imports)."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.append((base, [a.name for a in node.names]))
    return out


MODULES = sorted(p for p in SRC.rglob("*.py"))


def internal_edges() -> dict[str, set[str]]:
    names = {module_name(p) for p in MODULES}
    edges: dict[str, set[str]] = {}
    for path in MODULES:
        here = module_name(path)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        for target, taken in imports_of(path, package):
            if not target.startswith(ROOT):
                continue
            # "from servesize.model import hardware" imports the submodule
            candidates = [f"{target}.{n}" for n in taken if f"{target}.{n}" in names] or [target]
            edges.setdefault(here, set()).update(c for c in candidates if c != here)
    return edges


def test_every_module_belongs_to_a_layer():
    orphans = [module_name(p) for p in MODULES if module_name(p) != ROOT and layer_of(module_name(p)) is None]
    assert orphans == []


def upward_imports(path: pathlib.Path, here: str) -> list[str]:
    """The imports in ``path`` (module ``here``) that reach a layer above its own."""
    rank = layer_of(here)
    assert rank is not None, here
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    wrong = []
    for target, taken in imports_of(path, package):
        if target == ROOT:
            if set(taken) - {"__version__"}:
                wrong.append(f"{target} ({', '.join(taken)}): the facade re-exports the api; import the module itself")
            continue
        if not target.startswith(ROOT + "."):
            continue
        their = layer_of(target)
        if their is not None and their > rank:
            wrong.append(f"{target} ({LAYERS[their][0]} is above {LAYERS[rank][0]})")
    return wrong


@pytest.mark.parametrize("path", [p for p in MODULES if module_name(p) != ROOT], ids=module_name)
def test_imports_go_only_to_the_same_layer_or_below(path):
    assert upward_imports(path, module_name(path)) == []


def test_there_is_no_import_cycle():
    edges = internal_edges()
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif state.get(nxt) is None:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(edges):
        if state.get(node) is None:
            visit(node, [node])
    assert cycles == []


def test_the_checker_catches_a_lazy_upward_import_and_a_relative_one(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from servesize.cli import main\n    from ..render import text\n    return main, text\n")
    found = upward_imports(bad, "servesize.planning.bad")
    assert len(found) == 2 and "servesize.cli" in found[0] and "servesize.render" in found[1]


# The explorer reads the library through its public API only (docs/ENGINEERING.md, "Layout": the page computes
# no figure, and neither does web/): servesize.api, servesize.scenario and the result types api re-exports.
WEB = "servesize.web"
WEB_FORBIDDEN = ("servesize.planning", "servesize.engine", "servesize.workload", "servesize.resolve")


def web_internal_imports(path: pathlib.Path, here: str) -> list[str]:
    """The imports in a web/ module that reach past the public API into the planner, the engine or the workload."""
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    wrong = []
    for target, taken in imports_of(path, package):
        for prefix in WEB_FORBIDDEN:
            if target == prefix or target.startswith(prefix + "."):
                wrong.append(f"{target} ({', '.join(taken)})" if taken else target)
    return wrong


WEB_MODULES = [p for p in MODULES if module_name(p) == WEB or module_name(p).startswith(WEB + ".")]


@pytest.mark.parametrize("path", WEB_MODULES, ids=module_name)
def test_the_explorer_imports_only_the_public_api(path):
    assert web_internal_imports(path, module_name(path)) == []


def test_the_web_check_catches_a_lazy_import_of_the_planner_and_a_relative_one(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from servesize.planning.decode import decode_curve\n"
                   "    from ...engine import memory\n    return decode_curve, memory\n")
    found = web_internal_imports(bad, "servesize.web.sub.bad")
    assert len(found) == 2 and found[0].startswith("servesize.planning.decode") and found[1].startswith("servesize.engine")
    assert WEB_MODULES and all(module_name(p).startswith(WEB) for p in WEB_MODULES)
