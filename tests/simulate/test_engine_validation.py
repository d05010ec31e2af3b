"""Plan and the engine simulator on every preset: within 15%, or the plan's first line says why (issue 17).

About 20 s of simulation for the four presets, so they run in the suite (only trace tests may skip);
``-m validation`` selects them alone. scripts/engine_validation.py writes the same rows, the traces' too, as
docs/accuracy.md's table."""

from __future__ import annotations

from dataclasses import replace

import pytest

from servesize.api import simulate_engine
from servesize.render.text import render_text
from servesize.scenario import Scenario
from servesize.simulate.engine import AGREEMENT
from servesize.workload.presets import preset

DEPLOYMENT = dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")


@pytest.mark.validation
@pytest.mark.parametrize("name", ["coding-agent", "chat", "rag", "batch"])
def test_plan_agrees_with_the_engine_simulator_or_its_first_line_says_why(name):
    r = simulate_engine(preset(name).workload(), Scenario(**DEPLOYMENT, preset=name))
    plan = replace(r.plan_object, disagreement=r.disagreement)  # what api.check_plan returns
    users, sim = plan.result.values[plan.binding], r.found.users * plan.fixed.dp
    first = render_text(plan).splitlines()[0]
    if abs(users - sim) <= AGREEMENT * sim:
        assert plan.disagreement is None and not first.startswith("differs")
    else:
        assert first.startswith(f"differs from the engine simulator: plan {users:,.0f} users ({plan.binding} binds)")
        assert f"engine simulator's {sim:,}" in first and r.found.reason in first


def test_plan_engine_check_runs_the_simulator_and_says_whether_they_agree(capsys):
    import json

    from servesize.cli import main

    argv = ["plan", "qwen3-30b-a3b", "--gpus", "1xH200", "--preset", "batch", "--no-sensitivity", "--engine-check"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    check = out["engine_check"]
    plan_users = out["ceilings"][out["binding"]]
    assert check["plan_users_same_workload"] == pytest.approx(plan_users)
    assert check["engine_users"] >= 1 and check["requests"] >= 800
    assert check["gap"] == pytest.approx((plan_users - check["engine_users"]) / check["engine_users"])
    assert check["agree"] == (abs(check["gap"]) <= AGREEMENT) == (out["disagreement"] is None)
    # the text the same command prints without --json: its renderer on a plan carrying this check (one engine run,
    # not two: the check is the same function's either way)
    from dataclasses import replace

    from servesize.api import plan
    from servesize.render.text import render_text
    from servesize.scenario import Scenario

    planned = plan(Scenario(model="qwen3-30b-a3b", gpus="1xH200", preset="batch"), sensitivity=False)
    text = render_text(replace(planned, engine_check=check, disagreement=out["disagreement"]))
    line = next(x for x in text.splitlines() if x.startswith("engine check: "))
    assert f"serves {check['engine_users']:,} users comfortably" in line
    assert ("within 15% of the plan" in line) == check["agree"]


def test_a_workload_file_inside_its_bounds_is_simulated_as_given_never_refitted_and_refused(tmp_path):
    """Issue 31: a workload file with a think time of 10^6 s (its bound) was refused ('the fitted workload is not
    usable: think_time_s ... got 1407759.2') because the engine refitted the sessions it had generated from it; the
    workload the sessions come from is now the one plan is given, as it is."""
    from servesize.workload.files import save_workload

    workload = replace(preset("coding-agent").workload(), think_time_s=1e6)
    path = save_workload(workload, tmp_path / "slow-thinkers.toml")
    result = simulate_engine(path, Scenario(model="llama-3.1-8b", gpus="1xH100"), users=2, search=False,
                             synthetic_sessions=8)
    doc = result.to_dict()
    assert doc["fitted_workload"]["workload"]["think_time_s"] == 1e6
    assert doc["fitted_workload"]["think_time_source"] == "the workload the sessions were generated from"
