"""One workload, one pool: ``workload fit`` + ``plan --workload`` and ``simulate`` read a trace through the same
fitter (workload/fit.py) and plan on the same pool (the preset's speculative decoding included in both)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_traces import claude_session, req, write_jsonl

from servesize.api import fit_workload, plan, simulate, simulation_workload
from servesize.scenario import Scenario
from servesize.simulate.replay import ReplayOptions
from servesize.simulate.traces import read_trace
from servesize.workload.files import write_workload

# the deployment: Qwen 3.6 27B has an MTP head, which the coding-agent preset turns on
QWEN = dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8")


def _sessions_file(tmp_path, sessions=12, turns=8, seed=0):
    """Claude Code style sessions: a 1,024-token system + tools prefix, log-normal pauses, growing prompts."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(sessions):
        reqs, ids, t = [], list(range(16)), 0.0
        for _ in range(turns):
            ids = ids + [1000 * (s + 1) + len(ids) + j for j in range(int(rng.integers(20, 60)))]
            reqs.append(req(t, 64 * len(ids), list(ids), out=int(rng.integers(50, 400)), api_time=3.0))
            t += 3.0 + float(rng.lognormal(math.log(12.0), 1.0))
        rows.append(claude_session(f"trace_{s}", reqs, tool_tokens=1000, system_tokens=24))
    return write_jsonl(tmp_path / "cc.jsonl", rows)


def test_simulate_and_plan_workload_fit_the_same_workload_and_plan_on_the_same_pool(tmp_path):
    path = _sessions_file(tmp_path)
    fit = fit_workload(path)
    res = simulate(str(path), Scenario(**QWEN), bounds=False, users_search=False, exact=False)
    # every field the fitter fits, the same in both paths
    assert res.fitted.workload == fit.workload
    assert res.fitted.fields == {k: {"value": f.value, "fitted": f.fitted, "how": f.how} for k, f in fit.fields.items()}
    w = fit.workload
    assert w.user.prefix_tokens == 1024 and w.think_time_sigma is not None
    # think time: a distribution (log-normal over the pauses), its mean the planner's think_time_s
    assert w.think_time_s == pytest.approx(w.think_time_median_s * math.exp(w.think_time_sigma ** 2 / 2), rel=1e-3)
    # plan --workload on workload fit's file plans on the pool simulate replays (MTP head counted in both)
    out = tmp_path / "w.json"
    write_workload(fit, out)
    planned = plan(Scenario(**QWEN, workload=str(out)), sensitivity=False)
    assert planned.memory.pool.num_blocks == res.pool.num_blocks
    assert res.plan["pool_tokens"] == pytest.approx(float(planned.fixed.pool_tokens))
    assert res.plan["warm_users"] == planned.result.warm.per_replica.get("users", planned.result.warm.users).to_dict()


def test_a_trace_given_as_an_object_goes_through_the_same_fitter(tmp_path):
    path = _sessions_file(tmp_path, sessions=20)
    trace = read_trace(path)
    from_object = simulation_workload(trace, trace, ReplayOptions())
    fit = fit_workload(path)
    # the object path sees the replayed requests, not the file: the fields it can read agree with the file's
    assert from_object.workload.output_tokens == fit.workload.output_tokens
    assert from_object.workload.think_time_s == pytest.approx(fit.workload.think_time_s, rel=1e-6)
    assert from_object.workload.think_time_sigma == fit.workload.think_time_sigma
    assert from_object.workload.user.median_tokens == pytest.approx(fit.workload.user.median_tokens, rel=1e-3)
    # and both count each session's first request as its start (session_turns), not as an invalidated turn
    assert from_object.workload.session_turns == fit.workload.session_turns > 1


@pytest.mark.parametrize("name", ["claude-code-sessions.jsonl.gz", "mooncake-conversation.jsonl.gz",
                                  "mooncake-synthetic.jsonl.gz"])
def test_the_shipped_traces_give_one_workload_to_plan_and_simulate(traces_dir, name):
    path = traces_dir / name
    fit = fit_workload(path)
    trace = read_trace(path)
    found = simulation_workload(str(path), trace, ReplayOptions())
    assert found.workload == fit.workload
    fields = {k: v["value"] for k, v in found.fields.items()}
    assert fields == {k: f.value for k, f in fit.fields.items()}
    if name.startswith("claude"):  # the figures: prefix 14,948 in both; think time no longer the bare mean
        assert fields["user_prefix_tokens"] == 14_948
        assert fit.workload.think_time_s < 60 < 151.5


def test_think_time_is_one_distribution_read_through_its_accessors(tmp_path):
    import json

    from servesize.errors import BadInput
    from servesize.workload.files import load_workload

    path = tmp_path / "w.json"
    path.write_text(json.dumps({"servesize_workload": 1, "user": {"median_tokens": 5000, "sigma": 0.5},
                                "think_time_median_s": 10, "think_time_sigma": 1.0}))
    w = load_workload(str(path))
    assert w.think_time_s == pytest.approx(10 * math.exp(0.5))  # the mean, which the planner's rates read
    assert w.think_time_median_s == pytest.approx(10.0) and w.think_time_quantile_s(0.5) == pytest.approx(10.0)
    # a flag that sets the think time scales the distribution and keeps its shape
    faster = w.replace(think_time_s=2 * w.think_time_s)
    assert faster.think_time_sigma == 1.0 and faster.think_time_median_s == pytest.approx(20.0)
    # pauses drawn through the accessor have the fitted median; without a shape they are exponential
    draws = w.think_times(np.random.default_rng(0), 20_000)
    assert np.median(draws) == pytest.approx(10.0, rel=0.05)
    plain = w.replace(think_time_sigma=None)
    assert plain.think_time_median_s == pytest.approx(plain.think_time_s * math.log(2))
    path.write_text(json.dumps({"servesize_workload": 1, "user": {"median_tokens": 5000, "sigma": 0.5},
                                "think_time_sigma": -1}))
    with pytest.raises(BadInput, match="think_time_sigma must be in"):
        load_workload(str(path))
