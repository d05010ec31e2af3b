"""What a replay sends: which requests, when, as which user, in the engine's blocks."""

from __future__ import annotations

import numpy as np
import pytest
from tracebuild import make_trace

from servesize.errors import BadInput
from servesize.simulate.replay import ReplayOptions, build_replay
from servesize.simulate.traces import ReadReport, SessionInfo, TraceBuilder


def two_sessions(clock="session"):
    # session a at 0 and 10 s, session b at 0 and 5 s, each on its own clock
    return make_trace([("a", 0, 100, [1, 2, 3, 4, 5, 6, 7], 0, 1.0), ("a", 10, 120, [1, 2, 3, 4, 5, 6, 7, 8], 0, 1.0),
                       ("b", 0, 50, [11, 12, 13, 14], 0, 1.0), ("b", 5, 60, [11, 12, 13, 14], 0, 1.0)], clock=clock)


def test_t0_starts_every_session_at_zero_and_interleaves_their_requests_by_time():
    rp = build_replay(two_sessions(), ReplayOptions(warmup=0.0))
    assert rp.choices["align"] == "t0"
    assert rp.arrival_s.tolist() == [0.0, 0.0, 5.0, 10.0]
    assert rp.input_tokens.tolist() == [100, 50, 60, 120]


def test_stagger_spreads_session_starts_over_one_median_session():
    rp = build_replay(two_sessions(), ReplayOptions(warmup=0.0, align="stagger"))
    # durations (last request's end): a 11 s, b 6 s; median 8.5 s over 2 sessions: b starts 4.25 s after a
    assert rp.choices["stagger_s"] == pytest.approx(8.5 / 2)
    assert sorted(rp.arrival_s.tolist()) == pytest.approx([0.0, 4.25, 9.25, 10.0])


def test_a_trace_whose_sessions_have_no_common_clock_refuses_to_be_replayed_on_it():
    with pytest.raises(BadInput, match="no common clock"):
        build_replay(two_sessions(), ReplayOptions(align="trace"))


def test_requests_without_sessions_cannot_be_made_into_users():
    trace = make_trace([(f"r{k}", k, 40, [k, k + 1, k + 2], 0) for k in range(4)])
    assert not trace.has_sessions
    with pytest.raises(BadInput, match="users cannot be made"):
        build_replay(trace, ReplayOptions(users=2))
    with pytest.raises(BadInput, match="cannot be aligned"):
        build_replay(trace, ReplayOptions(align="t0"))


def with_subagent():
    report = ReadReport("x", format="synthetic")
    b = TraceBuilder("synthetic", 16, "session", report)
    main = b.add_session(SessionInfo("m"))
    sub = b.add_session(SessionInfo("m/agent", parent=main, start_s=20.0))
    b.add_request(main, 0.0, 40, 1, np.array([1, 2, 3]))
    b.add_request(sub, 3.0, 40, 1, np.array([7, 8, 9]), subagent=True)
    b.add_request(main, 30.0, 60, 1, np.array([1, 2, 3, 4]))
    return b.build("x")


def test_main_leaves_subagents_out_and_all_starts_them_on_their_parents_clock():
    assert build_replay(with_subagent(), ReplayOptions(warmup=0.0)).requests == 2
    rp = build_replay(with_subagent(), ReplayOptions(requests="all", warmup=0.0))
    assert rp.arrival_s.tolist() == [0.0, 23.0, 30.0]
    assert rp.sessions == 2


def test_the_warm_up_counts_requests_in_arrival_order():
    rp = build_replay(two_sessions(), ReplayOptions(warmup=0.5))
    assert rp.measured_from == 2 and rp.measured_tokens() == 60 + 120


def test_prompts_longer_than_max_model_len_are_left_out_and_counted():
    rp = build_replay(two_sessions(), ReplayOptions(max_model_len=100))
    assert rp.requests == 3 and rp.choices["skipped"] == {"prompts longer than max_model_len (vLLM refuses them)": 1}


def test_n_users_run_drawn_sessions_back_to_back_and_two_draws_of_one_session_share_nothing():
    trace = two_sessions()
    rp = build_replay(trace, ReplayOptions(users=2, sessions_per_user=3, warmup=0.0))
    assert rp.choices["users"] == 2 and rp.choices["sessions_drawn"] == 6 and set(rp.user.tolist()) == {0, 1}
    # 6 draws of 2 sessions: copies 0, 1 and 2 of each, with ids of their own
    firsts = {int(rp.nodes_of(i)[0]) for i in range(rp.requests)}
    assert len(firsts) == rp.sessions
    assert rp.arrival_s.max() <= rp.choices["stop_s"]


def test_an_engine_block_smaller_than_the_traces_takes_its_identity_and_place():
    # one 64-token trace block shared, the second one not: at 16 tokens, 4 engine blocks are shared, then none
    trace = make_trace([("a", 0, 130, [1, 2, 3], 0), ("b", 1, 130, [1, 9, 10], 0)], block_size=64)
    rp = build_replay(trace, ReplayOptions(warmup=0.0, align="trace", block_size=16))
    a, b = rp.nodes_of(0), rp.nodes_of(1)
    assert a.size == b.size == 130 // 16
    assert a[:4].tolist() == b[:4].tolist() and not set(a[4:].tolist()) & set(b[4:].tolist())


def test_an_engine_block_larger_than_the_traces_is_named_by_the_last_trace_block_it_covers():
    trace = make_trace([("a", 0, 64, [1, 2, 3, 4], 0), ("b", 1, 64, [1, 2, 3, 9], 0)], block_size=16)
    rp = build_replay(trace, ReplayOptions(warmup=0.0, align="trace", block_size=32))
    a, b = rp.nodes_of(0), rp.nodes_of(1)
    assert a.size == 2 and a[0] == b[0] and a[1] != b[1]


def test_block_sizes_that_do_not_divide_name_each_engine_block_by_the_token_that_ends_it():
    # 48-token engine blocks over 64-token trace blocks: block 0 ends inside trace block 0, block 1 inside block 1
    trace = make_trace([("a", 0, 140, [1, 2, 3], 0), ("b", 1, 140, [1, 7, 8], 0), ("c", 2, 140, [1, 2, 5], 0)], block_size=64)
    rp = build_replay(trace, ReplayOptions(warmup=0.0, align="trace", block_size=48))
    a, b, c = (rp.nodes_of(i).tolist() for i in range(3))
    assert len(a) == 140 // 48 == 2
    assert a[0] == b[0] == c[0] and a[1] != b[1] and a[1] == c[1]


def test_engine_blocks_past_the_traces_ids_match_nothing():
    # Claude Code style: ids for full 64-token blocks only; the 16-token engine blocks in the unhashed tail are new
    trace = make_trace([("a", 0, 100, [1], 0), ("a", 1, 100, [1], 0)], block_size=64, clock="session")
    rp = build_replay(trace, ReplayOptions(warmup=0.0, block_size=16))
    a, b = rp.nodes_of(0).tolist(), rp.nodes_of(1).tolist()
    assert a[:4] == b[:4] and a[4:] != b[4:] and len(a) == 100 // 16


@pytest.mark.parametrize("opts", [dict(warmup=1.0), dict(requests="some"), dict(align="noon"), dict(users=0)])
def test_bad_replay_options_are_refused_in_one_line(opts):
    with pytest.raises(BadInput):
        ReplayOptions(**opts)


def away_and_back():
    # session a: requests at 0 and 10 s, then 4,000 s later (an hour away); session b: 0, 5 and 12 s; 1 s of service
    # each. Pauses: a 9 and 3,989 s, b 4 and 6 s: the median pause (the resume) is 7.5 s
    return make_trace([("a", 0, 40, [1, 2], 0, 1.0), ("a", 10, 60, [1, 2, 3], 0, 1.0), ("a", 4000, 80, [1, 2, 3, 4], 0, 1.0),
                       ("b", 0, 40, [9, 8], 0, 1.0), ("b", 5, 60, [9, 8, 7], 0, 1.0), ("b", 12, 80, [9, 8, 7, 6], 0, 1.0)],
                      clock="session")


def test_a_users_pause_over_away_after_s_is_cut_to_the_resume_and_everything_after_moves_with_it():
    from servesize.simulate.replay import _session_parts, away_shift, think_gap_s
    from servesize.workload.catalogue import AWAY_AFTER_S
    trace = away_and_back()
    keep = np.ones(trace.requests, dtype=bool)
    root, start = _session_parts(trace, keep)
    assert think_gap_s(trace, keep) == 7.5 and AWAY_AFTER_S < 3_989
    shift = away_shift(trace, keep, root, start, 7.5)
    # a's third request is sent 7.5 s after its second ends (11 s): 4,000 - 18.5 s earlier; nothing else moves
    assert shift.tolist() == [0.0, 0.0, 4_000 - 18.5, 0.0, 0.0, 0.0]
    # n users: no pause between a user's requests is longer than the resume, a's hour included
    rp = build_replay(trace, ReplayOptions(users=1, sessions_per_user=2, warmup=0.0))
    assert rp.requests == 6 and float(np.diff(np.sort(rp.arrival_s)).max()) <= 10.0
    # replayed as it is, the trace keeps its hour
    assert float(build_replay(trace, ReplayOptions(warmup=0.0)).arrival_s.max()) == 4_000.0


def test_a_given_resume_pause_replaces_the_traces_median_between_sessions_and_for_an_away_pause():
    """The engine beside a plan gives the workload's mean think time (the pause the plan cycles on) where the replay
    puts a pause of its own: between a user's sessions, and in place of an away pause; the default is the
    trace's median pause (7.5 s here)."""
    from servesize.simulate.engine import closed_loop
    trace = away_and_back()
    pauses = {}
    for resume in (None, 30.0):
        rp = build_replay(trace, ReplayOptions(users=1, sessions_per_user=2, warmup=0.0, cut=False, resume_s=resume))
        p, _, _ = closed_loop(rp)
        pauses[resume] = sorted(np.round(p[p > 0], 6).tolist())
    # within the sessions: a's 9 s, b's 4 and 6 s; the away hour and the gap between the two sessions: the resume
    assert pauses[None] == [4.0, 6.0, 7.5, 7.5, 9.0] and pauses[30.0] == [4.0, 6.0, 9.0, 30.0, 30.0]
    with pytest.raises(BadInput):
        ReplayOptions(resume_s=-1.0)
