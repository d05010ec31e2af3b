"""Users at a target hit rate, the Workload fitted from a trace, and sessions generated from a Workload."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tracebuild import make_trace

from servesize.planning.ceilings import start_tokens
from servesize.simulate.cache import CacheConfig, replay_exact
from servesize.simulate.replay import ReplayOptions, build_replay
from servesize.simulate.synthetic import synthesize
from servesize.simulate.users import fit_trace_workload, shared_prefix_blocks, users_at_target
from servesize.workload.model import SessionClass, Workload

B = 16
FULL = 4  # each session sends the same prompt of 4 blocks + 3 tokens, every 10 s, 10 times


def steady_sessions(n_sessions: int = 6):
    rows = []
    for s in range(n_sessions):
        ids = [100 * s + k for k in range(FULL + 1)]
        rows += [(f"s{s}", 10.0 * k, FULL * B + 3, ids, 0) for k in range(10)]
    return make_trace(rows, clock="session")


@pytest.mark.parametrize("k", [2, 5])
def test_users_in_lockstep_stay_warm_up_to_the_pool_and_one_more_collapses_them(k):
    # N users in lockstep visit their prompts in turn: LRU keeps all of them while 4N blocks fit in the stack of
    # num_blocks - 2, and none of them one user later (the seed's cyclic worst case, one user too many)
    trace = steady_sessions()
    found = users_at_target(trace, ReplayOptions(), num_blocks=FULL * k + 2, target=0.5, output_blocks=False)
    assert found.users == k
    rates = {p.users: p.hit_rate for p in found.points}
    warm = 9 / 10 * FULL * B / (FULL * B + 3)  # a session's first request misses; the others hit 4 blocks of 67 tokens
    assert rates[k] == pytest.approx(warm, abs=0.02)
    assert rates[k + 1] == 0.0


def test_the_exact_replay_of_users_in_lockstep_agrees_with_the_search():
    trace = steady_sessions()
    for n, expect_warm in ((3, True), (4, False)):
        rp = build_replay(trace, ReplayOptions(users=n))
        res = replay_exact(rp, CacheConfig(FULL * 3 + 2, B, output_blocks=False))
        assert (res.token_hit_rate > 0.5) is expect_warm


def test_a_pool_too_small_for_one_user_keeps_no_users():
    # an LRU stack of 1 block keeps one user's first block (released last): 9/10 x 16/67 of the tokens
    found = users_at_target(steady_sessions(), ReplayOptions(), num_blocks=1 + 2, target=0.5, output_blocks=False)
    assert found.users == 0
    assert found.points[0].hit_rate == pytest.approx(9 / 10 * B / (FULL * B + 3), abs=0.02)


WORKLOAD = Workload(user=SessionClass("user", 2000, 0.5, prefix_tokens=512), subagent=None, invalidation=0.0,
                    think_time_s=7.0, output_tokens=40, warm_turn_tokens=300, max_model_len=32_000)


def test_generated_sessions_grow_by_one_reply_and_one_turn_and_share_the_user_prefix():
    trace = synthesize(WORKLOAD, sessions=30, turns_per_session=6, seed=3)
    assert trace.requests == 30 * 6 and len(trace.sessions) == 30
    first = trace.session == 0
    steps = np.diff(trace.input_tokens[first])
    assert steps.tolist() == [40 + 300] * 5
    a, b = trace.ids_of(0), trace.ids_of(6)  # the first requests of two sessions
    assert a[: 512 // B].tolist() == b[: 512 // B].tolist() and a[512 // B] != b[512 // B]
    assert np.all(np.diff(trace.t_s[first]) > 0)


def test_generated_requests_have_the_workloads_context_not_half_a_session_more():
    # coding-agent's user class alone: sessions of 8 requests growing 3,000 tokens each. Started at their draw,
    # the requests averaged 1.17-1.25x the class's mean over seeds 0-5 (half a session's growth above it); each
    # draw placed at a uniformly drawn request, 1.00-1.09x (the shared prefix and one turn floor the starts)
    w = Workload(user=SessionClass("user", 31000, 0.81, prefix_tokens=15000), subagent=None, invalidation=0.0,
                 think_time_s=30.0, output_tokens=1000, warm_turn_tokens=2000, max_model_len=180_000, session_turns=8)
    ratios = [synthesize(w, sessions=300, seed=s).input_tokens.mean() / w.mean_tokens() for s in range(3)]
    assert all(0.95 < r < 1.12 for r in ratios), ratios
    # the plan prices a session's start by the same rule: the k-th draw reached at request k mod 8
    new, prior = start_tokens(w, np.full(8, 40_000.0))
    assert prior == 15000 and new.tolist() == [max(40_000 - k * 3000, 17_000) - 15000 for k in range(8)]


def test_a_workload_fitted_from_generated_sessions_recovers_their_prefix_and_think_time():
    made = WORKLOAD.replace(think_time_sigma=0.8)  # log-normal pauses of mean 7 s: median 7 exp(-0.32) = 5.08 s
    trace = synthesize(made, sessions=400, turns_per_session=6, seed=1)
    fitted = fit_trace_workload(trace, ReplayOptions(block_size=B))
    w = fitted.workload
    assert w.user.prefix_tokens == 512
    # the think time is a log-normal fitted to the 2,000 pauses: its median, shape and mean come back
    assert w.think_time_median_s == pytest.approx(7 * math.exp(-0.32), rel=0.06)
    assert w.think_time_sigma == pytest.approx(0.8, rel=0.06)
    assert w.think_time_s == pytest.approx(7.0, rel=0.08)
    assert w.output_tokens == 40 and w.invalidation == 0.0
    assert fitted.requests_per_session_p50 == 6 and w.session_turns == 6  # each session's first starts it
    assert 2000 < w.user.median_tokens < 2000 + 5 * 340


def test_subagent_turns_are_sessions_of_their_own_with_their_own_prefix():
    w = Workload(user=SessionClass("user", 3000, 0.4, prefix_tokens=256), subagent=SessionClass("subagent", 800, 0.3, 64),
                 subagent_ratio=1.0, think_time_s=2.0, output_tokens=20, warm_turn_tokens=100)
    trace = synthesize(w, sessions=50, turns_per_session=8, seed=0)
    assert trace.subagent.any() and not trace.subagent.all()
    subs = [k for k, s in enumerate(trace.sessions) if s.parent >= 0]
    assert subs and all(trace.sessions[k].prefix_tokens == 64 for k in subs)
    rp = build_replay(trace, ReplayOptions(requests="all", warmup=0.0, block_size=B))
    assert rp.requests == trace.requests


def test_a_turn_is_sent_with_its_subagent_requests_r_per_turn_and_one_think_time_between_turns():
    """DESIGN.md's cycle: think -> send a turn (plus any subagent requests). r = 1.5: every turn brings one subagent
    request and half of them a second, at the turn's own moment; the user's clock moves by think times alone."""
    w = Workload(user=SessionClass("user", 3000, 0.4, prefix_tokens=256), subagent=SessionClass("subagent", 800, 0.3, 64),
                 subagent_ratio=1.5, think_time_s=2.0, output_tokens=20, warm_turn_tokens=100)
    trace = synthesize(w, sessions=200, turns_per_session=12, seed=1)
    sub = trace.subagent
    assert sub.sum() / (~sub).sum() == pytest.approx(1.5, rel=0.05)  # r subagent requests per user request
    turns: dict[int, set] = {}  # each user session's turns, on its clock
    for k in np.flatnonzero(~sub):
        turns.setdefault(int(trace.session[k]), set()).add(round(float(trace.t_s[k]), 9))
    for k in np.flatnonzero(sub):  # a subagent request is sent at the moment of one of its parent's turns
        info = trace.sessions[int(trace.session[k])]
        assert round(info.start_s + float(trace.t_s[k]), 9) in turns[info.parent]
    gaps = [np.diff(sorted(t)) for t in turns.values()]
    assert np.concatenate(gaps).mean() == pytest.approx(2.0, rel=0.15)  # one think a turn, none for its subagents


def test_the_shared_prefix_is_what_most_sessions_start_with():
    rows = [(f"s{k}", 0, 100, [1, 2, 3] + [10 + k, 20 + k], 0) for k in range(5)]
    rows.append(("odd", 0, 100, [9, 9, 9, 9, 9], 0))
    rp = build_replay(make_trace(rows, clock="session"), ReplayOptions(warmup=0.0))
    assert shared_prefix_blocks(rp) == 3
