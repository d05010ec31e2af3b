"""The command line loads only what a command needs: numpy, matplotlib, aiohttp and the planner are heavy
(benchmarks/bench_cli.py times them; this test only lists the modules a fresh interpreter ended up with)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
HEAVY = ("numpy", "matplotlib", "aiohttp", "servesize.planning", "servesize.web", "servesize.measure",
         "servesize.simulate", "servesize.render.plots")

_PROBE = """
import contextlib, io, json, sys
argv = json.loads(sys.argv[1])
if argv is None:
    import servesize.cli
else:
    from servesize.cli import main
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    assert code == 0, code
print(json.dumps(sorted(sys.modules)))
"""


def loaded_by(argv: list[str] | None) -> list[str]:
    """The modules a fresh interpreter holds after ``import servesize.cli`` (None) or after running ``argv``."""
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout)


def heavy_in(modules: list[str], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted({h for h in HEAVY if h not in allowed for m in modules if m == h or m.startswith(h + ".")})


def test_importing_the_cli_loads_no_heavy_module():
    modules = loaded_by(None)
    assert "servesize.cli" in modules  # the probe did import it
    assert heavy_in(modules) == []


@pytest.mark.parametrize("argv", [["--help"], ["fit", "--help"], ["plan", "--help"], ["memory", "--help"],
                                  ["measure", "pool", "--help"], ["simulate", "--help"], ["serve", "--help"]])
def test_a_commands_help_loads_no_heavy_module(argv):
    assert heavy_in(loaded_by(argv)) == []


@pytest.mark.parametrize(("argv", "worker"), [
    (["fit", "--gpus", "8xH100", "--json"], "servesize.engine.placement"),
    (["memory", "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "8192", "--json"], "servesize.engine.memory"),
    (["gpus", "--json"], "servesize.model.hardware"),
    (["models", "--json"], "servesize.model.catalogue"),
    # the text reports too: render/engine_text.py holds the engine's, so printing one loads no planner report
    (["fit", "--gpus", "8xH100"], "servesize.render.engine_text"),
    (["memory", "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "8192"], "servesize.render.engine_text"),
    (["models"], "servesize.render.engine_text"),
])
def test_what_fits_and_the_memory_budget_load_no_planner(argv, worker):
    """The engine's commands load none of the planner (the api and servesize.resolve import it, the fleet's rules
    and a calibration's log parser with the first name asked of them), so they start in what the engine costs."""
    modules = loaded_by(argv)
    assert worker in modules  # the command did its work in this interpreter
    assert heavy_in(modules) == []
    assert [m for m in modules if m in LOADED_ON_DEMAND] == []


LOADED_ON_DEMAND = ("servesize.render.text", "servesize.resolve.fleet", "servesize.resolve.plan",
                    "servesize.resolve.knobs", "servesize.workload.teams", "servesize.vllm_logs.calibration",
                    "servesize.vllm_logs.parse", "servesize.fleet_query", "servesize.workload.model",
                    "servesize.workload.presets")


def test_a_plan_loads_the_planner_and_numpy_but_not_the_web_stack_or_plotting():
    modules = loaded_by(["plan", "llama-3.1-8b", "--gpus", "1xH100", "--json"])
    assert "servesize.planning.plan" in modules and "numpy" in modules  # the probe would see a lazy import miss
    assert heavy_in(modules, allowed=("numpy", "servesize.planning")) == []


def test_every_name_the_lazy_packages_export_resolves():
    """servesize.resolve and servesize.api import some names on first use: each named one is where it says."""
    import servesize.api as api
    import servesize.resolve as resolve

    assert resolve.served is sys.modules["servesize.resolve.served"].served  # the function; a submodule shares its name
    for name, home in resolve._HOME_OF.items():
        assert getattr(resolve, name) is getattr(__import__(home, fromlist=[name]), name)
    for name in api._PLANNER_EXPORTS:
        assert getattr(api, name) is not None
    with pytest.raises(AttributeError):
        resolve.no_such_rule  # noqa: B018
