"""One implementation of each rule the review found written twice (#30): a scan of src/servesize fails when a second
one appears, and each scan is shown to catch a planted copy (a scan that finds nothing proves nothing).

- the percentile rule (numpy's linear virtual index, (n - 1) q): percentile.py (``_position``), and
  no numpy percentile, quantile or median called anywhere but there
- the binding rule (the lowest ceiling, ties in the ceilings' order): planning/ceilings.py (``lowest_ceiling``)
- the decode ceiling's search (the largest n whose p50 speed meets a floor): planning/decode.py (``largest_meeting``)
- the warm fill (sessions' running cost against a pool's budget): planning/warm_capacity.py (``FillPass.add``; the
  plan's one pool and the fleet's hundreds, sizing/fill_pass.py, both count with it)
"""

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "servesize"


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _functions(tree):
    """(name, node) of every function, a method's included, each with the nodes of its own body."""
    return [(n.name, n) for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _is_minus_one(node) -> bool:
    return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.right, ast.Constant)
            and node.right.value == 1)


def _is_quantile(node) -> bool:
    """A percentile or quantile: a name q / p / fraction, a value / 100, or an entry of PERCENTILES."""
    if isinstance(node, ast.Name):
        return node.id in ("q", "p", "fraction")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return (isinstance(node.right, ast.Constant) and node.right.value in (100, 100.0)) or _is_quantile(node.left)
    if isinstance(node, ast.Subscript):
        return isinstance(node.value, ast.Name) and node.value.id == "PERCENTILES"
    return False


def percentile_positions(tree) -> list[str]:
    """Every (n - 1) x q written out: where a percentile's rank is computed."""
    found = []
    for name, fn in _functions(tree):
        for node in ast.walk(fn):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                for a, b in ((node.left, node.right), (node.right, node.left)):
                    if _is_minus_one(a) and _is_quantile(b):
                        found.append(f"{name}:{node.lineno}")
    return found


NUMPY_RANKS = {"np.percentile", "np.quantile", "np.median", "np.nanpercentile", "np.nanquantile", "np.nanmedian",
               "numpy.percentile", "numpy.quantile", "numpy.median", "statistics.median", "statistics.quantiles"}


def percentile_calls(tree) -> list[str]:
    """Every call of a library's percentile, quantile or median: a second implementation of the rule beside ours."""
    return [f"{name}:{node.lineno}" for name, fn in _functions(tree) for node in ast.walk(fn)
            if isinstance(node, ast.Call) and ast.unparse(node.func) in NUMPY_RANKS]


def binding_rules(tree) -> list[str]:
    """Every min(..., key=...) in a function that names CEILINGS: where a binding ceiling is chosen."""
    return [f"{name}:{node.lineno}" for name, fn in _functions(tree)
            if any(isinstance(x, ast.Name) and x.id == "CEILINGS" for x in ast.walk(fn))
            for node in ast.walk(fn)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "min"
            and any(k.arg == "key" for k in node.keywords)]


def speed_bisections(tree) -> list[str]:
    """Every bisection (a ``while hi - lo > 1`` loop) that reads a decode speed: a decode ceiling searched."""
    found = []
    for name, fn in _functions(tree):
        for loop in (n for n in ast.walk(fn) if isinstance(n, ast.While)):
            test = ast.unparse(loop.test).replace(" ", "")
            calls = {ast.unparse(c.func) for c in ast.walk(loop) if isinstance(c, ast.Call)}
            if test == "hi-lo>1" and any("speed" in c or "p50" in c for c in calls):
                found.append(f"{name}:{loop.lineno}")
    return found


def running_costs(tree) -> list[str]:
    """Every running sum of sessions' costs (np.cumsum of a cost): where a fill decides what a pool holds."""
    return [f"{name}:{node.lineno}" for name, fn in _functions(tree) for node in ast.walk(fn)
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("np.cumsum", "numpy.cumsum") and node.args
            and "cost" in ast.unparse(node.args[0])]


HOMES = {  # scan -> the one module and function allowed to hold the rule
    percentile_positions: ("percentile.py", "_position"),
    binding_rules: ("planning/ceilings.py", "lowest_ceiling"),
    speed_bisections: ("planning/decode.py", "largest_meeting"),
    running_costs: ("planning/warm_capacity.py", "add"),
}


def test_only_the_percentile_module_calls_a_librarys_percentile():
    """servesize.percentile falls back on numpy's own for what it does not take (no values, or not numbers)."""
    found = [f"{module}:{hit}" for module, tree in _modules() for hit in percentile_calls(tree)]
    assert {hit.split(":")[0] for hit in found} == {"percentile.py"}, found


def test_each_rule_is_written_once_in_its_home():
    for scan, (home, function) in HOMES.items():
        found = [f"{module}:{hit}" for module, tree in _modules() for hit in scan(tree)]
        assert [hit.rsplit(":", 1)[0] for hit in found] == [f"{home}:{function}"], (scan.__name__, found)


PLANTED = '''
def p95(values, q=95):
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    return v[int(pos)]

def binding(values):
    return min(CEILINGS, key=values.__getitem__)

def middle(values):
    return np.median(values)

def fits(cost, budget):
    return (np.cumsum(cost, axis=1) <= budget).sum(axis=1)

def decoders(setup, bank, floor):
    lo, hi = 1, 64
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if median_speed(setup, bank, mid) >= floor:
            lo = mid
        else:
            hi = mid
    return lo
'''


def test_each_scan_catches_a_copy_written_elsewhere():
    tree = ast.parse(PLANTED)
    assert percentile_positions(tree) == ["p95:4"]
    assert binding_rules(tree) == ["binding:8"]
    assert speed_bisections(tree) == ["decoders:18"]
    assert running_costs(tree) == ["fits:14"]
    assert percentile_calls(tree) == ["middle:11"]
