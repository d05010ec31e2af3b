"""One pass over the random bank fills many pools: exactly the counts warm_capacity makes for each, one by one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesize.errors import BadInput
from servesize.planning.warm_capacity import warm_capacity
from servesize.sizing.fill_pass import cap_for, warm_at_budgets, warm_at_charges
from servesize.workload.draws import RandomBank
from servesize.workload.model import EmpiricalClass, SessionClass, Workload
from servesize.workload.presets import preset
from servesize.workload.teams import single_team

WORKLOADS = {
    "the seed's coding agents": Workload.seed_reference(),
    "chat (half the requests cold)": preset("chat").workload().replace(max_model_len=32768),
    "an empirical class": Workload(user=EmpiricalClass("user", [1_000, 5_000, 20_000, 80_000], 500),
                                   invalidation=0.1),
    "subagents sharing the prefix": Workload(user=SessionClass("user", 20_000, 0.7, 4_000),
                                             subagent=SessionClass("subagent", 6_000, 0.9, 1_000),
                                             subagent_ratio=0.5, subagents_share_prefix=True),
}
POOLS = [2.2e5, 1.0e6, 2.77e6, 6.0e6]
B, S = 8704 * 2, 41_779_200  # a KV byte count and a recurrent state per session, as a hybrid model has


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_budget_gets_exactly_the_warm_users_warm_capacity_counts_for_it(name):
    w = WORKLOADS[name]
    got = warm_at_budgets(single_team(w, 100), RandomBank(0, uniforms=w.needs_uniforms), 600,
                          [p - w.reserved_prefix_tokens() for p in POOLS], S / B)
    for q, pool in enumerate(POOLS):
        one = warm_capacity(w, pool, B, S, fills=600)
        assert (got.users(q).p5, got.users(q).p50, got.users(q).p95) == (one.users.p5, one.users.p50, one.users.p95)
    assert got.exact.all()


def test_several_state_charges_in_one_pass_get_each_its_own_passs_counts():
    w = Workload.seed_reference()
    charges = [([3e5, 2e6], 0.0), ([1e6, 4e6, 9e6], 4_800.0), ([2.5e6], 19_200.0)]
    together = warm_at_charges(single_team(w, 100), RandomBank(0), 500, charges)
    for (budgets, state), got in zip(charges, together):
        alone = warm_at_budgets(single_team(w, 100), RandomBank(0), 500, budgets, state)
        assert np.array_equal(got.percentiles, alone.percentiles)


def test_a_host_ram_tier_is_a_larger_budget_for_the_same_sessions():
    """vLLM's offload tier keeps a copy of every block: a fill keeps the sessions that fit the larger of HBM and RAM."""
    w = Workload.seed_reference()
    ram = 40 * 2**30
    one = warm_capacity(w, 1.0e6, B, S, cpu_offload_bytes=ram, fills=600)
    budget = max(1.0e6 - w.reserved_prefix_tokens(), (ram - w.reserved_prefix_tokens() * B) / B)
    got = warm_at_budgets(single_team(w, 100), RandomBank(0), 600, [budget], S / B)
    assert got.users(0).p5 == one.users.p5 and got.users(0).p95 == one.users.p95


def test_a_cap_decides_p5_against_the_target_exactly_and_stops_counting_past_it():
    w = Workload.seed_reference()
    budgets = np.geomspace(2e5, 2e7, 40)
    full = warm_at_budgets(single_team(w, 100), RandomBank(0), 1500, budgets, S / B)
    target = 60
    capped = warm_at_budgets(single_team(w, 100), RandomBank(0), 1500, budgets, S / B, caps=[cap_for(target, 1500)])
    assert capped.sessions_drawn < full.sessions_drawn
    for q in range(budgets.size):
        for v in range(1, target + 1):  # every decision "p5 >= v" up to the target is the uncapped one
            assert (capped.p5(q) >= v) == (full.p5(q) >= v)
        if capped.exact[0, q, 0]:
            assert capped.p5(q) == full.p5(q)


@pytest.mark.parametrize("fills, expected", [(1500, math.ceil(61 / 0.95)), (1501, 61), (1000, math.ceil(61 / 0.95)),
                                             (201, 61), (1600, math.ceil(61 / 0.95))])
def test_the_cap_is_the_target_over_numpys_p5_interpolation_weight(fills, expected):
    """p5 of F values interpolates x_i and x_(i+1) with weight t = frac(0.05 (F - 1)): 1500 -> 74.95 (t = 0.95),
    1501 -> 75.0 (t = 0: one order statistic, the target itself), 1000 -> 49.95, 201 -> 10.0, 1600 -> 79.95."""
    assert cap_for(61, fills) == expected


def test_a_pool_that_holds_exactly_k_fixed_length_sessions_keeps_k_in_every_fill():
    w = Workload(user=EmpiricalClass("user", [2_000]), invalidation=0.0)
    got = warm_at_budgets(single_team(w, 10), RandomBank(0, uniforms=True), 300, [37 * 2_000, 37 * 2_000 - 1])
    assert (got.users(0).p5, got.users(0).p95) == (37, 37)   # ties fit
    assert (got.users(1).p5, got.users(1).p95) == (36, 36)


def test_bad_inputs_are_refused():
    w = Workload.seed_reference()
    with pytest.raises(BadInput):
        warm_at_budgets(single_team(w, 1), RandomBank(0), 0, [1e6])
    with pytest.raises(BadInput):
        warm_at_budgets(single_team(w, 1), RandomBank(0), 10, [])
    with pytest.raises(BadInput):
        warm_at_budgets(single_team(w, 1), RandomBank(0), 10, [1e6], caps=[1, 2])
    emp = Workload(user=EmpiricalClass("user", [1_000]))
    with pytest.raises(BadInput, match="uniforms"):
        warm_at_budgets(single_team(emp, 1), RandomBank(0), 10, [1e6])


def test_many_budgets_are_counted_in_runs_of_bounded_memory_with_the_same_result(monkeypatch):
    import servesize.sizing.fill_pass as fill_pass

    w = Workload.seed_reference()
    budgets = list(np.geomspace(2e5, 8e6, 23))
    whole = warm_at_budgets(single_team(w, 100), RandomBank(0), 200, budgets, 100.0)
    monkeypatch.setattr(fill_pass, "_MAX_CELLS", 200 * 5)  # five budgets per run
    runs = warm_at_budgets(single_team(w, 100), RandomBank(0), 200, budgets, 100.0)
    assert np.array_equal(whole.percentiles, runs.percentiles) and np.array_equal(whole.budgets, runs.budgets)


def test_a_budget_the_first_session_of_a_block_passes_alone_counts_no_session_of_that_block():
    """Found by the 10,000-case command-line run (fleet --models qwen3.6-27b --users 40 --priority a=high --seed 2
    --invalidation 0.9 --fills 20 --draws 200): with most sessions cold, one session of a new block can carry a fill
    past several budgets at once, and those budgets were looked up before the block's own range: a wrong count where
    the lookup wrapped within the row, an IndexError ('servesize: bug') where it did not. Every count is checked here
    against counting by hand, budgets below the block's first entry included."""
    from servesize.planning.warm_capacity import _count_at_most

    rng = np.random.default_rng(7)
    cum = np.cumsum(rng.uniform(1.0, 50.0, (6, 64)), axis=1) + rng.uniform(0.0, 400.0, (6, 1))
    budgets = np.sort(rng.uniform(0.0, 3_500.0, 40))
    rows, q = np.repeat(np.arange(6), 40), np.tile(np.arange(40), 6)
    by_hand = [(cum[r] <= budgets[k]).sum() for r, k in zip(rows, q)]
    assert _count_at_most(cum, budgets, rows, q).tolist() == by_hand  # 240 pairs: the running histogram
    few = slice(100, 106)  # no more pairs than rows: the pairs compared directly, the same counts
    assert _count_at_most(cum, budgets, rows[few], q[few]).tolist() == by_hand[few]
    assert min(by_hand) == 0 and (budgets < cum[:, 0].min()).any()  # the case: a budget below every entry
    assert _count_at_most(np.array([[10.0, 20.0, 30.0]]), np.array([5.0, 15.0, 25.0]), np.array([0]),
                          np.array([0])).tolist() == [0]  # it wrapped to 3
