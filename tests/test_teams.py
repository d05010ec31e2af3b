"""Several teams on one pool, as worked examples: fixed-length sessions whose fills are arithmetic, a queue whose
waits are Pollaczek-Khinchine and Cobham by hand, and one team that is exactly the plan."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

import servesize as s
from servesize.errors import BadInput
from servesize.planning.ceilings import CeilingCache, ceilings, contexts_of, decode_setup
from servesize.planning.decode import decode_ceiling
from servesize.planning.inputs import knob_value
from servesize.planning.latency import ServiceMoments
from servesize.resolve import plan_inputs
from servesize.sizing.fill_pass import warm_at_budgets, warm_of_teams
from servesize.sizing.teams import (
    MixedQueue,
    ShapeSplit,
    decoders_meeting,
    replica_ceilings,
    shared_pool,
    split_on_shape,
)
from servesize.workload.draws import RandomBank
from servesize.workload.model import EmpiricalClass, Workload
from servesize.workload.presets import preset
from servesize.workload.teams import Team, TeamMix


def fixed_length(tokens: int, think_s: float, **extra) -> Workload:
    """Every session exactly ``tokens`` long, no prefix, nothing cold: a fill is plain arithmetic."""
    return Workload(user=EmpiricalClass("user", [tokens]), invalidation=0.0, think_time_s=think_s,
                    max_model_len=100_000, **extra)


def binomial_quantile(n: int, p: float, q: float) -> int:
    """The smallest k with P(Binomial(n, p) <= k) >= q."""
    total = 0.0
    for k in range(n + 1):
        total += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if total >= q:
            return k
    return n


# -- the stream -----------------------------------------------------------------------------

def test_one_team_is_exactly_its_workload():
    w = Workload.seed_reference()
    mix = TeamMix((Team("only", 80, w),))
    raw = RandomBank(3).take(0, 300, 0, 64)
    cost, cold, team = mix.window(0).fill_costs(raw, 12.5)
    expected_cost, expected_cold, is_sub = w.realise_costs(raw, 12.5)
    assert np.array_equal(cost, expected_cost) and np.array_equal(cold, expected_cold)
    assert np.array_equal(team, np.where(is_sub, -1, 0))
    assert np.array_equal(mix.decoders().full_tokens(raw), w.full_tokens(raw))
    assert mix.lengths_key() == w.lengths_key()  # the same decode contexts as the plan's, from one cache


def test_with_one_think_time_a_window_weighs_teams_by_their_request_rates():
    """think_t / think_u = 1: team u counts its users once and r_u subagent sessions per user."""
    coding, chat = Workload.seed_reference(), preset("chat").workload().replace(think_time_s=30.0)
    mix = TeamMix((Team("agents", 100, coding), Team("support", 300, chat)))
    window = mix.window(1)
    rates = np.array([100 * (1 + 0.1) / 30, 300 * (1 + 0) / 30])
    assert window.shares == pytest.approx(rates / rates.sum())
    bounds = window._bounds
    assert bounds[1] - bounds[0] == pytest.approx((bounds[2] - bounds[0]) * 0.1 / 1.1, abs=1)  # agents' subagents


def test_a_team_that_returns_rarely_looks_back_over_everyone_elses_sessions():
    """Team b's think time is 6x team a's: in b's window every a user counts, and a's window holds a sixth of b."""
    a, b = Team("a", 100, fixed_length(8_000, 10)), Team("b", 400, fixed_length(1_000, 60))
    mix = TeamMix((a, b))
    assert mix.window(1).users_weight == pytest.approx([100, 400])
    assert mix.window(0).users_weight == pytest.approx([100, 400 * 10 / 60])


def test_the_shared_pool_monte_carlo_reproduces_the_hand_calculation_of_a_mixed_case():
    """A pool of P = 600,000 tokens; team a: 100 users of 8,000-token sessions back every 10 s; team b: 400 users
    of 1,000-token sessions back every 60 s.

    b's users stay warm when everything touched in 60 s fits: all of a (100 x 8,000) and all of b (400 x 1,000),
    1.2M tokens at full size, so the pool holds half of that mix: 400 x 600,000 / 1,200,000 = 200 of b's users.
    a's window is 10 s: all of a and 10/60 of b, so a keeps 100 x 600,000 / (800,000 + 66,667) = 69.2.
    Alone on the same pool a would keep 600,000 / 8,000 = 75 and b 600,000 / 1,000 = 600: a's long sessions,
    touched six times as often, take the pool from b."""
    a, b = Team("a", 100, fixed_length(8_000, 10)), Team("b", 400, fixed_length(1_000, 60))
    pool = 600_000.0
    bank = RandomBank(0, uniforms=True)
    ((pct, _),) = warm_of_teams(TeamMix((a, b)), bank, 1500, [([pool], 0.0)])
    hand_a = 100 * pool / (100 * 8_000 + 400 * 10 / 60 * 1_000)
    hand_b = 400 * pool / (100 * 8_000 + 400 * 1_000)
    assert pct[1, 0, 0] == pytest.approx(hand_a, rel=0.015)  # p50 over fills
    assert pct[1, 0, 1] == pytest.approx(hand_b, rel=0.015)
    assert pct[0, 0, 1] < hand_b < pct[2, 0, 1]  # p5 < hand < p95: the fill spreads around it
    alone = [warm_at_budgets(TeamMix((t,)), bank, 1500, [pool]).users(0) for t in (a, b)]
    assert (alone[0].p5, alone[0].p95, alone[1].p5, alone[1].p95) == (75, 75, 600, 600)


def test_equal_sessions_in_a_pool_of_exactly_k_split_the_k_binomially():
    """Every fill holds exactly k = 50 sessions; each is team a's with probability 120 / 190 (one think time, no
    subagents), so a's warm users are Binomial(50, 120/190) and their p5 its 5% quantile."""
    w = fixed_length(1_000, 600)
    mix = TeamMix((Team("a", 120, w), Team("b", 70, w)))
    ((pct, _),) = warm_of_teams(mix, RandomBank(0, uniforms=True), 1500, [([50 * 1_000.0], 0.0)])
    for t, users in enumerate((120, 70)):
        assert abs(pct[0, 0, t] - binomial_quantile(50, users / 190, 0.05)) <= 1
        assert abs(pct[1, 0, t] - 50 * users / 190) <= 1


# -- one replica shape: the split -------------------------------------------------------------

@pytest.fixture(scope="module")
def exact_pool():
    """llama-3.1-8b on one H100 (no recurrent state, no window) with a measured pool of exactly 50 x 1,000 tokens."""
    inputs = plan_inputs(s.Scenario(model="llama-3.1-8b", gpus="1xH100", pool_tokens=50 * 1_000))
    _, fixed = inputs.memory_and_fixed()
    assert fixed.state_bytes_rank == 0 and fixed.window_bytes_per_session_rank == 0
    # the split of the warm fill alone: these 1,000-token sessions write 3,000 tokens a turn, so LRU churn
    # (planning.lru) would bind first in so small a pool
    from dataclasses import replace
    return fixed, replace(inputs.knobs, overrides=(*inputs.knobs.overrides, ("cache.churn", False)))


def test_identical_sessions_in_a_pool_that_holds_exactly_k_give_the_exact_split(exact_pool):
    """Alone, a replica keeps exactly k = 50 users warm in every fill: team a (120 users) needs ceil(120/50) = 3
    replicas, team b (70) ceil(70/50) = 2: 5 partitioned. Shared, each replica's 50 sessions are split
    Binomial(50, share): a needs ceil(120 / q5(a)) and b ceil(70 / q5(b)) replicas, q5 the 5% quantiles."""
    fixed, knobs = exact_pool
    w = fixed_length(1_000, 600)  # 600 s of think time: latency and decode do not bind
    mix = TeamMix((Team("a", 120, w), Team("b", 70, w)))
    split = split_on_shape(fixed, mix, knobs)
    assert split.team_replicas == {"a": 3, "b": 2} and split.partitioned_replicas == 5
    q5 = [binomial_quantile(50, 120 / 190, 0.05), binomial_quantile(50, 70 / 190, 0.05)]
    assert split.shared_replicas == max(math.ceil(120 / q5[0]), math.ceil(70 / q5[1]))


def test_one_team_on_a_replica_has_exactly_the_plans_ceilings():
    for scenario in (s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"),
                     s.Scenario(model="llama-3.1-8b", gpus="1xH100", preset="chat")):
        inputs = plan_inputs(scenario)
        _, fixed = inputs.memory_and_fixed()
        plan = ceilings(fixed, inputs.workload, inputs.knobs, comfortable=False)
        mix = TeamMix((Team("users", 100, inputs.workload),))
        pool = shared_pool(fixed, mix, inputs.knobs)
        assert pool.teams[0].ceilings == plan.values
        assert pool.teams[0].warm == plan.warm.users


def test_the_decode_search_stops_at_the_cap_with_the_bisections_answer_below_it():
    inputs = plan_inputs(s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"))
    _, fixed = inputs.memory_and_fixed()
    cache = CeilingCache()
    setup = decode_setup(fixed, inputs.knobs)
    bank = contexts_of(inputs.workload, inputs.knobs, setup.topk_tokens, cache)
    floor = float(knob_value(inputs.knobs, "decode_floor"))
    full = decode_ceiling(setup, None, floor, bank=bank).n
    assert decoders_meeting(setup, bank, floor, 10_000) == (full, False)
    assert decoders_meeting(setup, bank, floor, full) == (full, True)
    assert decoders_meeting(setup, bank, floor, full - 7) == (full - 7, True)
    assert decoders_meeting(setup, bank, 10 * floor, 10_000)[0] == decode_ceiling(setup, None, 10 * floor, bank=bank).n


# -- one prefill queue for every team ----------------------------------------------------------

def _queue(priorities=(0, 0)) -> MixedQueue:
    """Team 0: 2 req/s, E[S] 0.10 s, E[S^2] 0.02 s^2, a miss 1.0 s; team 1: 1 req/s, 0.20 s, 0.08 s^2, a miss 2.0 s."""
    moments = (ServiceMoments(0.05, 0.10, 0.02, 1.0, 0.05), ServiceMoments(0.05, 0.20, 0.08, 2.0, 0.1))
    return MixedQueue(np.array([2.0, 1.0]), moments, np.array(priorities), "fcfs")


def test_one_fcfs_queue_gives_every_team_the_same_wait_and_its_own_miss():
    """rho = 2 x 0.1 + 1 x 0.2 = 0.4; W = (2 x 0.02 + 1 x 0.08) / (2 x (1 - 0.4)) = 0.1 s (Pollaczek-Khinchine)."""
    q = _queue()
    assert q.rho == pytest.approx(0.4)
    wait = (2 * 0.02 + 1 * 0.08) / (2 * (1 - 0.4))
    assert q.miss_ttft_s(0, 1.0) == pytest.approx(wait + 1.0)
    assert q.miss_ttft_s(1, 1.0) == pytest.approx(wait + 2.0)
    # the scale at which team 1's miss reaches 3 s: alpha x 0.12 / (2 (1 - 0.4 alpha)) = 1  ->  alpha = 2 / 0.92
    assert q.latency_scale(1, 3.0) == pytest.approx(2 / (0.12 + 2 * 0.4))
    assert q.miss_ttft_s(1, q.latency_scale(1, 3.0)) == pytest.approx(3.0)


def test_a_team_served_first_waits_the_cobham_wait():
    """Team 0 first: W0 = (2 x 0.02 + 1 x 0.08) / 2 = 0.06; W_0 = W0 / (1 - 0.2) = 0.075, W_1 = W0 / ((1 - 0.2) x
    (1 - 0.4)) = 0.125 (non-preemptive priority M/G/1)."""
    q = _queue(priorities=(1, 0))
    assert q.miss_ttft_s(0, 1.0) == pytest.approx(0.06 / 0.8 + 1.0)
    assert q.miss_ttft_s(1, 1.0) == pytest.approx(0.06 / (0.8 * 0.6) + 2.0)
    limit = 1.5
    alpha = q.latency_scale(0, limit)
    assert q.miss_ttft_s(0, alpha) == pytest.approx(limit, rel=1e-9)
    assert alpha > _queue().latency_scale(0, limit)  # served first: it holds more load at the same limit


def test_under_processor_sharing_a_miss_is_stretched_by_the_common_load():
    q = MixedQueue(_queue().rates_per_s, _queue().moments, np.array([0, 0]), "ps")
    assert q.miss_ttft_s(1, 1.0) == pytest.approx(2.0 / (1 - 0.4))
    assert q.latency_scale(1, 4.0) == pytest.approx((1 - 2.0 / 4.0) / 0.4)  # 2 / (1 - 0.4 alpha) = 4


# -- the fleet with teams ----------------------------------------------------------------------

TEAMS = ["agents=60:coding-agent", "support=200:chat", "research=30:rag"]


@pytest.fixture(scope="module")
def three_teams():
    return s.fleet(team=TEAMS, models="qwen3.6-27b", gpus_from="H200,L40S", precision="fp8", kv_cache_dtype="fp8",
                   fills=400)


def test_each_team_alone_gets_the_fleet_a_search_for_it_alone_finds(three_teams):
    for split, spec in zip(three_teams.partition.cheapest, TEAMS):
        name, rest = spec.split("=")
        users, workload = rest.split(":")
        alone = s.fleet(users=int(users), preset=workload, models="qwen3.6-27b", gpus_from="H200,L40S",
                        precision="fp8", kv_cache_dtype="fp8", fills=400)
        assert split.team == name and split.option.cost_per_month == alone.winner.cost_per_month
        assert split.option.gpus == alone.winner.gpus


def test_the_shared_winner_serves_every_team_and_the_verdict_picks_the_cheaper(three_teams):
    pool = three_teams.shared_pool
    assert pool.meets_every_target and {t.name for t in pool.teams} == {"agents", "support", "research"}
    for team in pool.teams:
        assert min(team.ceilings.values()) >= team.users
    shared = three_teams.winner.cost_per_month
    split = three_teams.partition.cost_per_month
    verdict = three_teams.verdict
    assert verdict["choice"] == ("share" if shared < split else "partition" if split < shared else "either")
    assert verdict["shared_cost_per_month"] == shared and verdict["partitioned_cost_per_month"] == split


def test_team_specs_and_priorities_are_read_and_refused_in_one_line():
    with pytest.raises(BadInput, match="NAME=USERS"):
        s.fleet(team=["=5"], models="llama-3.1-8b")
    with pytest.raises(BadInput, match="names must differ"):
        s.fleet(team=["a=5", "a=6"], models="llama-3.1-8b", gpus_from="H100")
    with pytest.raises(BadInput, match="team name"):
        s.fleet(team=["a b=5"], models="llama-3.1-8b", gpus_from="H100")
    with pytest.raises(BadInput, match="workload file"):
        s.fleet(team=["a=5:missing-file.toml"], models="llama-3.1-8b", gpus_from="H100")


def test_a_teams_panel_is_json_ready():
    inputs = plan_inputs(s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"))
    _, fixed = inputs.memory_and_fixed()
    mix = TeamMix((Team("agents", 40, inputs.workload), Team("support", 100, preset("chat").workload()
                                                                          .replace(max_model_len=180_000))))
    doc = shared_pool(fixed, mix, inputs.knobs, replicas=2).to_dict()
    assert doc["gpus"] == "2xH200-SXM" and doc["routing"] == "sticky"
    assert [t["name"] for t in doc["teams"]] == ["agents", "support"]
    for t in doc["teams"]:
        assert set(t) >= {"warm_users", "warm_users_alone", "ceilings", "binding", "miss_ttft_s", "meets_target"}
    found = replica_ceilings(fixed, mix, inputs.knobs, CeilingCache(), np.array([10.0, 20.0]), np.zeros(2, bool))
    assert not isinstance(found, str)
    expected = max(math.ceil(users / value) for per_team in found.values.values()
                   for users, value in zip((40, 100), per_team))
    assert found.replicas_needed() == expected >= math.ceil(100 / 20)


def test_the_teams_panel_of_a_scenarios_deployment_shares_its_replicas_and_splits_its_shape():
    scenario = s.Scenario(model="qwen3.6-27b", gpus="2xH200", data_parallel_size=2, quantization="fp8",
                          kv_cache_dtype="fp8", fills=400)
    panel = s.teams(scenario, team=["agents=100:coding-agent", "support=200:chat"], priority=["support=1"])
    doc = panel.to_dict()
    assert doc["shared"]["gpus"] == "2xH200-SXM" and doc["shared"]["data_parallel_size"] == 2
    agents, support = panel.shared.teams
    assert support.priority == 1 and support.miss_ttft_s < agents.miss_ttft_s  # served first, waits less
    assert panel.split.team_replicas["agents"] >= 1 and panel.split.shared_replicas >= 1
    with pytest.raises(BadInput, match="drop users"):
        s.teams(scenario.replace(users=5), team=["a=5"])


@pytest.mark.parametrize(("shared", "alone", "choice"), [
    (3, {"a": 1, "b": 1}, "partition"), (2, {"a": 1, "b": 2}, "share"), (2, {"a": 1, "b": 1}, "either"),
    (None, {"a": 1, "b": 1}, "partition"), (2, {"a": None, "b": 1}, "share"), (None, {"a": None, "b": 1}, "none")])
def test_sharing_or_splitting_is_the_fewer_replicas(shared, alone, choice):
    split = ShapeSplit(shared, alone)
    got, text = split.verdict(tp=2)
    assert got == choice and text.startswith(choice if choice != "none" else "no number")
    assert "(2 GPU(s) each)" in text


def test_plan_team_prints_the_library_teams_panel(capsys):
    from servesize.cli import main

    argv = ["plan", "qwen3.6-27b", "--gpus", "2xH200", "-dp", "2", "-q", "fp8", "--kv-cache-dtype", "fp8",
            "--fills", "400", "--team", "agents=60", "--team", "support=150:chat", "--priority", "support=1"]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    scenario = s.Scenario(model="qwen3.6-27b", gpus="2xH200", data_parallel_size=2, quantization="fp8",
                          kv_cache_dtype="fp8", fills=400)
    panel = s.teams(scenario, team=["agents=60", "support=150:chat"], priority=["support=1"])
    assert doc == json.loads(json.dumps(panel.to_dict()))
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"sharing or splitting: {panel.verdict()[1]}" in text
    for t in panel.shared.teams:
        assert re.search(rf"^  {t.name}\s+{t.users:,}\s+{t.warm.p5:,.0f}\s", text, re.M)


@pytest.mark.parametrize(("extra", "message"), [(["--priority", "a=1"], "name them with --team"),
                                                (["--team", "a=5", "--sweep", "median=10k,20k"], "one workload"),
                                                (["--team", "a=lots"], "whole number of users")])
def test_plan_team_refuses_in_one_line(capsys, extra, message):
    from servesize.cli import main

    assert main(["plan", "llama-3.1-8b", "--gpus", "1xH100", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesize: ") and message in err and err.count("\n") == 1


NO_SHARED_POOL = ["fleet", "--team", "agents=60:coding-agent", "--team", "support=400:chat", "--models", "qwen3.6-27b",
                  "--gpus-from", "H200", "-q", "fp8", "--kv-cache-dtype", "fp8", "-tp", "1", "--no-sticky-routing"]


def test_a_fleet_per_team_is_the_answer_when_no_shared_pool_serves_and_the_command_says_so(capsys):
    """Issue 31: fleet --team printed a fleet per team as its verdict and then "no fleet ... serves all 460 users",
    exit 2. Without sticky routing no shared pool keeps both teams warm, and a fleet per team (3 GPUs) does: that
    is the answer, exit 0, with the currency."""
    from servesize.cli import main

    assert main(NO_SHARED_POOL) == 0
    out, err = capsys.readouterr()
    assert "verdict: partition: no shared pool serves every team; a fleet per team (3 GPUs) costs 9,914 USD/month" in out
    assert "no shared fleet of at most 64 GPUs" in out and "servesize: no fleet" not in err
    assert main([*NO_SHARED_POOL, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["choice"] == "partition" and doc["verdict"]["partitioned_gpus"] == 3


def test_a_fleet_per_team_past_max_gpus_is_no_answer_and_the_verdict_says_why(capsys):
    """--max-gpus bounds the whole answer: the 3 GPUs of a fleet per team are more than 2."""
    from servesize.cli import main

    assert main([*NO_SHARED_POOL, "--max-gpus", "2"]) == 2
    out, err = capsys.readouterr()
    assert ("verdict: neither a shared pool nor a fleet per team in the search space serves every team: a fleet per "
            "team needs 3 GPUs, more than --max-gpus 2") in out
    assert err.splitlines()[-1].startswith("servesize: no fleet of at most 2 GPUs in the search space serves all 460 "
                                          "users")


def test_a_shared_pool_needs_at_least_the_replicas_of_its_largest_team_alone():
    """Several teams share the decode batch linearly, each at its own load-model ceiling (sizing/teams.py): until
    2026-12-06 they were priced by the every-user rule with no prefill chunk's stall, and the agents needed 4
    replicas alone and 3 beside support."""
    scenario = s.Scenario(model="qwen3.6-27b", gpus="2xH200", data_parallel_size=2, quantization="fp8",
                          kv_cache_dtype="fp8", fills=400)
    split = s.teams(scenario, team=["agents=100:coding-agent", "support=200:chat"], priority=["support=1"]).split
    assert split.shared_replicas >= max(split.team_replicas.values())


def test_several_teams_share_the_batch_linearly_at_each_ones_own_ceiling():
    """Team t alone holds C_t users per replica; at the mix the teams scale together until sum users_t / C_t = 1."""
    from servesize.sizing.teams import shared_decode

    targets, alone = np.array([60.0, 150.0]), np.array([33.0, 190.0])
    at_mix = shared_decode(targets, alone)
    assert np.allclose(at_mix / targets, 1 / (60 / 33 + 150 / 190))  # every team at the same scale of its users
    assert math.isclose(float(np.sum(at_mix / alone)), 1.0)           # the batch exactly full
    assert shared_decode(np.array([10.0]), np.array([33.0])).tolist() == [33.0]  # one team: its own ceiling
    assert shared_decode(targets, np.array([33.0, 0.0])).tolist() == [0.0, 0.0]  # a team no batch serves


def test_the_teams_decode_at_the_mix_is_each_teams_plan_alone_shared():
    """The shared pool's decode ceilings come from each team's own plan (its load model, its stalls) on one replica."""
    scenario = s.Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8", fills=200)
    alone = {name: s.plan(scenario.replace(preset=name)).to_dict()["ceilings"]["decode"]
             for name in ("coding-agent", "chat")}
    pool = s.teams(scenario, team=["agents=20:coding-agent", "support=60:chat"]).shared
    decode = {t.name: t.ceilings["decode"] for t in pool.teams}
    share = 20 / alone["coding-agent"] + 60 / alone["chat"]
    assert decode["agents"] == pytest.approx(20 / share, rel=1e-9)
    assert decode["support"] == pytest.approx(60 / share, rel=1e-9)


def test_a_gpu_without_flops_is_skipped_by_a_teams_search_and_refused_by_a_teams_plan(capsys):
    from cli_runner import run

    code, out, err = run(capsys, "fleet", "--models", "llama-3.1-8b", "--team", "a=10", "--team", "b=5:chat",
                         "--gpus-from", "A10G,L40S", "--gpu-hour-price", "A10G=1")
    assert code == 0 and "no FLOP/s to price the prefill" in out and "L40S" in out
    code, out, err = run(capsys, "plan", "llama-3.1-8b", "--gpus", "1xA10G", "--max-model-len", "32k", "-q", "fp8",
                         "--team", "a=3:chat", "--team", "b=4:chat")
    assert code == 2 and err.count("\n") == 1 and "has no dense FLOP/s" in err and "--gpu-flops" in err
