"""The engine simulator's worked examples: tiny deterministic workloads, decided by counts and simulated clocks."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from tracebuild import make_trace

from servesize.assumptions import assumption
from servesize.errors import BadInput
from servesize.planning.step_model import ConstantSteps, StepModel
from servesize.simulate.engine import (
    Comfort,
    EngineConfig,
    EngineRun,
    closed_loop,
    engine_users,
    judged_rate,
    simulate_engine,
    spread_ties,
    users_at_comfort,
)
from servesize.simulate.replay import ReplayOptions, build_replay

B = 16
H = assumption("engine.handoff_s")  # a request reaches the scheduler this long after it is sent


def _replay(rows, **opts):
    return build_replay(make_trace(rows, block_size=B, clock="session"), ReplayOptions(warmup=0.0, **opts))


def _ids(key: int, tokens: int) -> list[int]:
    return [1000 * key + j for j in range(tokens // B)]


def test_one_user_waits_exactly_its_prefill_for_the_first_token_then_decodes_one_token_a_step():
    rp = _replay([("a", 0.0, 160, _ids(1, 160), 11)])
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.02)
    run = simulate_engine(rp, EngineConfig(num_blocks=100, block_size=B), times, warmup=0.0)
    assert run.first_token_s[0] - run.arrival_s[0] == pytest.approx(H + 0.160)  # handed over, then 160 x 1 ms
    assert run.steps == 1 + 10  # the prefill step samples the first token, ten decode steps the rest
    assert run.finish_s[0] == pytest.approx(H + 0.160 + 10 * 0.02)
    assert run.decode_tok_s[0] == pytest.approx(50.0)  # 10 tokens over 10 steps of 20 ms


def test_one_user_on_the_planners_rooflines_waits_prefill_seconds():
    from servesize.planning.decode import DecodeSetup
    from servesize.planning.prefill import PrefillSetup

    prefill = PrefillSetup(gemm_params=8e9, attention_width=4096, full_attention_layers=32, peak_flops_per_gpu=1e15)
    decode = DecodeSetup(bandwidth_bytes_per_s=3.35e12, weight_bytes_per_step=16e9, kv_bytes_per_token_read=131072)
    rp = _replay([("a", 0.0, 4000, _ids(1, 4000), 5)])
    run = simulate_engine(rp, EngineConfig(num_blocks=1000, block_size=B), StepModel(prefill, decode), warmup=0.0)
    assert run.first_token_s[0] == pytest.approx(H + float(prefill.seconds(4000, 0)), rel=1e-12)
    ctx = 4000 + np.arange(1, 5)  # each decode step reads the context so far
    expect = sum(float(decode.step_seconds(decode.step_bytes(np.array([[c]]))[0])) for c in ctx)
    assert run.finish_s[0] - run.first_token_s[0] == pytest.approx(expect, rel=1e-9)


def test_n_users_all_decoding_step_at_the_roofline_of_a_batch_of_n():
    n = 8
    rows = [(f"u{k}", 0.0, 32, _ids(k + 1, 32), 101) for k in range(n)]
    rp = _replay(rows)
    # a step costs 10 ms + 1 ms per decoder: at a batch of 8, 18 ms. With no hand-off all eight reach the scheduler
    # together (with one, the first is prefilled alone: test_requests_sent_at_once_reach_the_scheduler_in_turn)
    times = ConstantSteps(prefill_per_token_s=1e-4, decode_step_s=0.010, decode_per_seq_s=0.001)
    run = simulate_engine(rp, EngineConfig(num_blocks=1000, block_size=B, max_num_batched_tokens=4096, handoff_s=0.0),
                          times, warmup=0.0)
    assert run.prefill_steps == 1  # all eight prompts (256 tokens) in one step
    assert np.allclose(run.decode_tok_s, 1 / 0.018)  # every user: 100 tokens in 100 steps of 18 ms
    assert run.decoders_per_step.count(n) == 100
    assert run.jumps >= 1 and run.steps == 101  # the decode-only steps were advanced in jumps, each one counted


def test_requests_sent_at_once_reach_the_scheduler_in_turn_and_an_idle_engine_starts_with_the_first():
    # the API server hands requests over one at a time (engine.handoff_s, H): four users sent at 0 reach the
    # scheduler at H, 2H, 3H and 4H; the idle engine prefills the first alone (0.1 s), then the other three together
    # (the real CPU engine does the same, wave after wave: scripts/engine_waves.py, on a quiet machine)
    rows = [(f"u{k}", 0.0, 96, _ids(k + 1, 96), 3) for k in range(4)]
    times = ConstantSteps(prefill_per_token_s=1e-3 / 0.96, decode_step_s=0.02)
    run = simulate_engine(_replay(rows), EngineConfig(num_blocks=1000, block_size=B), times, warmup=0.0)
    # the second step: the three prompts (0.3 s) beside the first user's decode (20 ms)
    assert run.first_token_s.tolist() == pytest.approx([H + 0.1] + [H + 0.1 + 0.3 + 0.02] * 3)
    together = simulate_engine(_replay(rows), EngineConfig(num_blocks=1000, block_size=B, handoff_s=0.0), times,
                               warmup=0.0)
    assert together.first_token_s.tolist() == pytest.approx([0.4] * 4) and together.prefill_steps == 1


def test_chunked_prefill_splits_a_long_prompt_into_ceil_length_over_budget_steps():
    L, budget = 1000, 256
    rp = _replay([("a", 0.0, L, _ids(1, L), 1)])
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.02)
    run = simulate_engine(rp, EngineConfig(num_blocks=200, block_size=B, max_num_batched_tokens=budget), times,
                          warmup=0.0)
    assert run.prefill_chunks == math.ceil(L / budget) == 4
    assert run.steps == 4 and run.first_token_s[0] == pytest.approx(H + 1.0)  # the same tokens, the same machine time


def test_a_decoder_shares_the_step_with_a_chunk_and_takes_one_token_of_the_budget():
    rows = [("a", 0.0, 32, _ids(1, 32), 50), ("b", 0.05, 600, _ids(2, 600), 1)]
    rp = _replay(rows)
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.02)
    run = simulate_engine(rp, EngineConfig(num_blocks=500, block_size=B, max_num_batched_tokens=100), times,
                          warmup=0.0)
    # b's 600 tokens go 99 a step beside a's one decode token: ceil(600 / 99) = 7 chunks
    assert run.prefill_chunks == 1 + 7
    assert run.mixed_steps == 7  # each of b's chunks stalls a's decode token for the chunk's 99 ms


def test_a_pool_too_small_for_everyone_preempts_the_last_scheduled_and_recomputes_it():
    # two users, 64-token prompts, 200 tokens of output each: 17 blocks apiece at the end; the pool holds 20
    rows = [("a", 0.0, 64, _ids(1, 64), 200), ("b", 0.0, 64, _ids(2, 64), 200)]
    rp = _replay(rows)
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    small = simulate_engine(rp, EngineConfig(num_blocks=21, block_size=B), times, warmup=0.0)
    big = simulate_engine(rp, EngineConfig(num_blocks=100, block_size=B), times, warmup=0.0)
    assert big.preemptions.sum() == 0
    assert small.preemptions[1] >= 1 and small.preemptions[0] == 0  # b was scheduled last: b is preempted
    assert np.isfinite(small.finish_s).all()  # b resumes after a finishes and completes
    assert small.finish_s[1] > big.finish_s[1] and small.prefill_chunks > big.prefill_chunks  # b recomputed


def test_max_num_seqs_holds_the_second_user_until_the_first_finishes():
    rows = [("a", 0.0, 32, _ids(1, 32), 10), ("b", 0.0, 32, _ids(2, 32), 10)]
    rp = _replay(rows)
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    run = simulate_engine(rp, EngineConfig(num_blocks=100, block_size=B, max_num_seqs=1), times, warmup=0.0)
    first, second = np.argsort(run.first_token_s)
    assert run.first_token_s[second] == pytest.approx(run.finish_s[first] + 0.032)
    assert max(run.decoders_per_step) == 1


def test_a_returning_turn_hits_its_prefix_and_prefills_only_its_tail_after_its_pause():
    # a user's second request (t = 10 s in the trace, first served in 1 s there) extends the first by 64 tokens
    first = _ids(1, 128)
    rows = [("a", 0.0, 128, first, 1, 1.0), ("a", 10.0, 192, first + [5000, 5001, 5002, 5003], 1)]
    rp = _replay(rows)
    pauses, starts, order = closed_loop(rp)
    assert pauses.tolist() == [0.0, 9.0] and order == {0: [0, 1]}
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    run = simulate_engine(rp, EngineConfig(num_blocks=100, block_size=B), times, warmup=0.0)
    assert run.hit_tokens.tolist() == [0, 128]
    assert run.arrival_s[1] == pytest.approx(run.finish_s[0] + 9.0)  # closed loop: the pause after the answer
    assert run.first_token_s[1] - run.arrival_s[1] == pytest.approx(H + 0.064)  # only the 64-token tail


def test_users_at_comfort_is_the_last_n_that_meets_the_slo_and_names_why_the_next_breaks():
    # a decode step costs 1 ms per user: 25 concurrent decoders get 40 tok/s, 26 get 38.5 (floor 39.5: off the edge);
    # every user reaches the scheduler at once (no hand-off), so all n decode in every step
    def run_at(n):
        rows = [(f"u{k}", 0.0, 16, _ids(k + 1, 16), 41) for k in range(n)]
        times = ConstantSteps(prefill_per_token_s=1e-6, decode_step_s=0.0, decode_per_seq_s=0.001)
        return simulate_engine(_replay(rows), EngineConfig(num_blocks=10_000, block_size=B, handoff_s=0.0), times,
                               warmup=0.0)

    found = users_at_comfort(run_at, Comfort(ttft_limit_s=10.0, decode_floor_tok_s=39.5))
    assert found.users == 25 and found.breaks_at == 26 and "decode" in found.reason
    assert set(found.points) >= {1, 2, 4, 8, 16, 32, 24, 25, 26}


def test_a_share_that_breaks_its_limit_by_a_hair_reads_apart_from_it():
    from servesize.simulate.engine import apart

    assert apart(0.0504, 0.05) == ("5.04%", "5.00%")  # was "5.0% (allowed 5.0%)"
    assert apart(0.05004, 0.05) == ("5.004%", "5.000%")
    assert apart(0.062, 0.05) == ("6.2%", "5.0%")
    assert apart(0.9, 0.95) == ("90.0%", "95.0%")


def test_the_search_over_users_runs_closed_loop_sessions_from_a_trace():
    rows = []
    for s in range(6):
        ids = []
        for turn in range(4):
            ids = ids + [100 * s + len(ids) + j for j in range(4)]
            rows.append((f"s{s}", 20.0 * turn, B * len(ids), list(ids), 20, 1.0))
    trace = make_trace(rows, block_size=B, clock="session")
    times = ConstantSteps(prefill_per_token_s=1e-4, decode_step_s=0.002, decode_per_seq_s=0.001)
    at, found = engine_users(trace, ReplayOptions(), EngineConfig(num_blocks=4000, block_size=B), times,
                             Comfort(), users=3)
    assert found is None and at.users == 3 and np.isfinite(at.finish_s[at.measured()]).all()
    _, found = engine_users(trace, ReplayOptions(), EngineConfig(num_blocks=4000, block_size=B), times, Comfort(),
                            max_users=64)
    # 1 ms a decoder and 2 ms a step: the floor (40 tok/s, 25 ms a step) holds to 23 decoding at once; users think
    # 19 s between 20-token answers, so far more than 23 users are served
    assert found.users > 23


def test_a_generated_turn_sends_its_subagent_requests_with_it_and_the_user_waits_for_the_turns_answer_alone():
    """Sessions generated from a workload with r = 1: each turn rides one subagent request, sent at the turn's
    moment (DESIGN.md's cycle), and the user's next turn follows the turn's own answer and pause, whenever the
    subagent's answer ends. A trace's subagents keep its own order."""
    from servesize.simulate.engine import riding
    from servesize.simulate.synthetic import synthesize
    from servesize.workload.model import SessionClass, Workload

    w = Workload(user=SessionClass("user", 600, 0.2, prefix_tokens=64), subagent=SessionClass("subagent", 3000, 0.2, 32),
                 subagent_ratio=1.0, think_time_s=5.0, output_tokens=40, warm_turn_tokens=64)
    rp = build_replay(synthesize(w, sessions=3, turns_per_session=8, seed=2),
                      ReplayOptions(requests="all", users=1, warmup=0.0, block_size=B, cut=False))
    rides = riding(rp)
    assert rides.sum() == (~rides).sum() == rp.requests // 2 and np.array_equal(rides, rp.subagent)
    times = ConstantSteps(prefill_per_token_s=1e-4, decode_step_s=0.01, decode_per_seq_s=0.0)
    run = simulate_engine(rp, EngineConfig(num_blocks=4000, block_size=B), times, warmup=0.0)
    pauses, _, order = closed_loop(rp)
    turns = [i for i in order[0] if not rides[i]]
    for a, b in zip(turns, turns[1:]):
        assert run.arrival_s[b] == pytest.approx(run.finish_s[a] + pauses[b])  # after the turn's answer alone
    for k, i in enumerate(order[0]):
        if rides[i]:  # sent with the turn before it in the user's order
            assert run.arrival_s[i] == run.arrival_s[order[0][k - 1]] and not rides[order[0][k - 1]]
    later = [run.finish_s[i] > run.finish_s[order[0][k - 1]] for k, i in enumerate(order[0]) if rides[i]]
    assert any(later)  # a subagent's longer prompt ends after its turn's answer: the next turn did not wait for it
    as_trace = replace(rp, choices={**rp.choices, "format": "claude-code"})
    assert not riding(as_trace).any()


def test_n_users_are_measured_until_the_first_runs_out_and_every_user_sends_until_then():
    """N closed-loop users: the run measures what is sent until the first user runs out of requests (after it,
    fewer users send and the load falls), and stops once those are answered. The replay keeps every drawn
    session (``cut=False``): a cut on the trace's clock, whose turns took 1 s, would drop the sessions the
    engine's slower service pushes past it (before the window existed, users ran out one by one through the
    measured half, and its load was a fraction of N users')."""
    rows = []
    for s in range(8):  # the trace served session s's turns in s % 3 s each: its turns 1 + s % 3 s apart, pauses 1 s
        ids: list[int] = []
        for turn in range(4):
            ids = ids + [100 * s + len(ids) + j for j in range(2)]
            rows.append((f"s{s}", (1.0 + s % 3) * turn, B * len(ids), list(ids), 40, float(s % 3)))
    trace = make_trace(rows, block_size=B, clock="session")
    times = ConstantSteps(prefill_per_token_s=1e-4, decode_step_s=0.05, decode_per_seq_s=0.0)  # 2 s a 40-token answer
    cfg = EngineConfig(num_blocks=4000, block_size=B)
    kept = build_replay(trace, ReplayOptions(users=4, sessions_per_user=6, warmup=0.0, block_size=B, cut=False))
    cut = build_replay(trace, ReplayOptions(users=4, sessions_per_user=6, warmup=0.0, block_size=B))
    assert kept.requests == 4 * 6 * 4 > cut.requests  # the trace's clock ends the cut replay's users early
    run = simulate_engine(kept, cfg, times)
    users = kept.user
    last = {u: np.nanmax(np.where(np.isnan(run.finish_s[users == u]), np.inf, run.finish_s[users == u]))
            for u in range(4)}
    assert run.window_end_s == min(last.values())  # the first user's last answer ends the window
    assert all(t >= run.window_end_s for t in last.values())  # every user sends until then
    m = run.measured()
    assert m.any() and (run.arrival_s[m] <= run.window_end_s).all()
    assert (run.arrival_s[m] >= 0.5 * run.window_end_s).all()  # the warm-up's half of the window is not measured
    sent = [int(((users == u) & (run.arrival_s <= run.window_end_s)).sum()) for u in range(4)]
    assert max(sent) - min(sent) <= 1, sent  # each user's cycle is the same: all send as often through the window


def test_a_window_that_measures_too_few_requests_draws_more_sessions_per_user_unless_the_user_chose_them(monkeypatch):
    """The comfort SLO reads 5% tails: N closed-loop users whose window measures fewer than MIN_MEASURED_REQUESTS
    draw more sessions per user and run again (MEASURE_PASSES runs at most), and a --sessions-per-user the user
    gave is one run as asked."""
    from servesize.simulate import engine as eng

    rows = []
    for s in range(6):  # sessions of 3 turns; the user draws 4 sessions by default: 12 requests a user
        ids: list[int] = []
        for turn in range(3):
            ids = ids + [100 * s + len(ids) + j for j in range(2)]
            rows.append((f"s{s}", 2.0 * turn, B * len(ids), list(ids), 20, 0.5))
    trace = make_trace(rows, block_size=B, clock="session")
    times = ConstantSteps(prefill_per_token_s=1e-4, decode_step_s=0.01, decode_per_seq_s=0.0)
    cfg = EngineConfig(num_blocks=4000, block_size=B)
    comfort = Comfort(ttft_limit_s=10.0, decode_floor_tok_s=1.0)
    runs: list[EngineRun] = []
    real = eng.simulate_engine

    def counted(*a, **k):
        runs.append(real(*a, **k))
        return runs[-1]

    monkeypatch.setattr(eng, "simulate_engine", counted)
    at, _ = engine_users(trace, ReplayOptions(), cfg, times, comfort, users=3)
    assert len(runs) >= 2 and int(runs[0].measured().sum()) < eng.MIN_MEASURED_REQUESTS
    assert at is runs[-1] and at.sessions_per_user > runs[0].sessions_per_user
    assert len(runs) <= eng.MEASURE_PASSES
    assert int(at.measured().sum()) > int(runs[0].measured().sum())
    runs.clear()
    at, _ = engine_users(trace, ReplayOptions(sessions_per_user=4), cfg, times, comfort, users=3)
    assert len(runs) == 1 and at.sessions_per_user == 4


def test_a_larger_draw_too_large_for_one_run_leaves_the_run_before_it():
    """measured_enough aims its larger draw under MAX_ENGINE_REQUESTS, but a seeded draw can still come out past it:
    the run already made stands, and the search does not stop there as at a run too large to price."""
    from servesize.simulate import engine as eng

    first = EngineRun(users=2, arrival_s=np.array([0.0, 1.0]), first_token_s=np.array([0.5, 1.5]),
                      finish_s=np.array([1.0, 2.0]), hit_tokens=np.zeros(2, dtype=np.int64),
                      ideal_tokens=np.zeros(2, dtype=np.int64), input_tokens=np.ones(2), output_tokens=np.ones(2),
                      preemptions=np.zeros(2, dtype=np.int64), warmup=0.0, sessions_per_user=4, drawn_requests=8)
    asked: list = []

    def run_with(per_user):
        asked.append(per_user)
        if per_user is None:
            return first
        raise eng.RunTooLarge("too many requests")

    assert eng.measured_enough(run_with, 2) is first and asked[0] is None and asked[1] > 4 and len(asked) == 2


def test_requests_logged_at_one_instant_are_spread_over_it_in_order():
    t = np.array([0.0, 0.0, 0.0, 3.0, 3.0, 10.0, 12.0, 12.0])
    spread = spread_ties(t, seed=1)
    assert (np.diff(spread) > 0).all()  # in order, no two at one instant
    # each group within the interval to the next distinct time; the last within the median interval (3, 7, 2: 3)
    assert (spread[:3] >= 0).all() and (spread[:3] < 3).all() and (spread[3:5] >= 3).all() and (spread[3:5] < 10).all()
    assert spread[5] == 10.0 and (spread[6:] >= 12).all() and (spread[6:] < 15).all()  # a lone time is kept
    assert spread_ties(t, seed=1).tolist() == spread.tolist() != spread_ties(t, seed=2).tolist()  # seeded
    distinct = np.array([0.0, 0.5, 4.0])
    assert spread_ties(distinct).tolist() == distinct.tolist()  # nothing tied: untouched
    # uniform positions given the count: over many groups the offsets fill the interval evenly
    many = spread_ties(np.repeat(np.arange(0.0, 2000.0, 1.0), 2), seed=3) % 1.0
    assert abs(float(np.mean(many)) - 0.5) < 0.02 and np.histogram(many, bins=4)[0].min() > 850
    with pytest.raises(BadInput, match="sorted"):
        spread_ties(np.array([1.0, 0.0]))


def test_an_open_loop_trace_logged_in_bursts_arrives_spread_over_its_timestamps():
    """A trace whose clock logs requests in groups (Mooncake's conversation trace: 12,031 requests at 1,180 distinct
    times 3 s apart) is replayed with each group spread over its interval: without it every group arrived at one
    instant, and one user's rate came as bursts whose prefills stalled each other's decodes."""
    rows = [(f"r{g}-{k}", 10.0 * g, 4 * B, _ids(10 * g + k + 1, 4 * B), 5) for g in range(5) for k in range(4)]
    trace = make_trace(rows, block_size=B)
    times = ConstantSteps(prefill_per_token_s=1e-4, decode_step_s=0.01)
    at, _ = engine_users(trace, ReplayOptions(), EngineConfig(num_blocks=4000, block_size=B), times, Comfort(),
                         users=1, think_time_s=30.0)
    arrivals = np.sort(at.arrival_s)
    assert (np.diff(arrivals) > 0).all()  # no two requests at one instant
    # the trace's times spread (seeded as the replay is), then stretched to one user's rate: one ratio throughout
    spread = spread_ties(np.repeat(10.0 * np.arange(5), 4), ReplayOptions().seed)
    assert arrivals / spread == pytest.approx(np.full(20, arrivals[-1] / spread[-1]))


def test_an_open_loop_trace_arrives_at_the_rate_its_users_send_between_their_pauses_and_replies():
    """N users of a trace of lone requests send one turn a cycle: the think time after a reply, and the reply's own
    time (the planner's cycle, planning.load). At 20 ms a step a 500-token reply takes about 10 s beside a 30 s
    pause, so 4 users send a quarter less than 4 / 30 a second; the engine sends at N / (think + the mean response
    its own run measures)."""
    from servesize.planning.latency import request_rate

    rows = [(f"r{k}", 1.0 * k, 4 * B, _ids(k + 1, 4 * B), 500) for k in range(120)]
    trace = make_trace(rows, block_size=B)
    times = ConstantSteps(prefill_per_token_s=1e-4, decode_step_s=0.02)
    at, _ = engine_users(trace, ReplayOptions(), EngineConfig(num_blocks=4000, block_size=B), times, Comfort(),
                         users=4, think_time_s=30.0)
    response = at.mean_response_s()
    assert response == pytest.approx(10.0, rel=0.1)
    assert at.rate_settled is True
    assert at.sent_rate_per_s == pytest.approx(request_rate(4, 30.0, response_s=response), rel=0.02)
    assert at.sent_rate_per_s < 0.8 * request_rate(4, 30.0)


def test_a_trace_whose_rate_is_not_flat_is_scaled_by_the_part_its_run_judges():
    """The run judges the requests sent after its warm-up's share of the clock (half). A trace that sends 40
    requests in its first 100 s and 80 in its second is scaled by the second half's rate: "4 users" is the load
    the comfort SLO judges. Scaled by its whole span it would send 4/3 of the users' rate where it is judged
    (Mooncake's conversation trace: 6.8% more in its second half)."""
    first, second = np.arange(40) * 2.5, 100.0 + np.arange(80) * 1.25
    t = np.concatenate([first, second])
    assert judged_rate(t, 0.5) == pytest.approx(80 / (t[-1] - t[-1] / 2))  # 80 sent at or after 99.4 s
    assert judged_rate(t, 0.0) == pytest.approx(120 / t[-1])
    assert judged_rate(np.array([0.0, 100.0]), 0.5) == pytest.approx(1 / 50)  # one judged arrival still has a rate
    rows = [(f"r{k}", float(x), 4 * B, _ids(k + 1, 4 * B), 2) for k, x in enumerate(t)]
    times = ConstantSteps(prefill_per_token_s=1e-5, decode_step_s=0.001)
    at, _ = engine_users(make_trace(rows, block_size=B), ReplayOptions(), EngineConfig(num_blocks=4000, block_size=B),
                         times, Comfort(), users=4, think_time_s=30.0)
    assert at.sent_rate_per_s == pytest.approx(4 / 30.0, rel=0.01)  # 2-token replies: the rate is N / think
    assert at.sent_per_s == pytest.approx(at.sent_rate_per_s, rel=0.03)  # judged at the users' rate, not 4/3 of it
    for bad in (np.array([5.0]), np.zeros(3)):
        with pytest.raises(BadInput, match="no rate|two arrivals"):
            judged_rate(bad, 0.5)
    with pytest.raises(BadInput, match="warm-up"):
        judged_rate(t, 1.0)


def _counted_runs(monkeypatch, decode_step_s: float, output: int, **constants) -> tuple[int, EngineRun]:
    import servesize.simulate.engine as engine

    for name, value in constants.items():
        monkeypatch.setattr(engine, name, value)
    calls = []
    real = engine.simulate_engine
    monkeypatch.setattr(engine, "simulate_engine", lambda *a, **k: calls.append(1) or real(*a, **k))
    rows = [(f"r{k}", 1.0 * k, 4 * B, _ids(k + 1, 4 * B), output) for k in range(120)]
    at, _ = engine_users(make_trace(rows, block_size=B), ReplayOptions(), EngineConfig(num_blocks=4000, block_size=B),
                         ConstantSteps(prefill_per_token_s=1e-5, decode_step_s=decode_step_s), Comfort(),
                         users=4, think_time_s=30.0)
    return len(calls), at


def test_the_open_loop_rate_is_corrected_only_while_the_response_moves_it_and_says_when_it_did_not_settle(monkeypatch):
    from servesize.simulate.engine import RATE_PASSES

    # 2-token replies at 1 ms a step: the response (a few ms) moves N / think by far under 1%: one run, settled
    runs, at = _counted_runs(monkeypatch, 0.001, 2)
    assert runs == 1 and at.rate_settled is True and at.sent_rate_per_s == pytest.approx(4 / 30.0)
    # 12 s replies: the first correction is over a quarter; the second moves it under 1%
    runs, at = _counted_runs(monkeypatch, 0.02, 600)
    assert 2 <= runs <= RATE_PASSES and at.rate_settled is True
    # no tolerance: every run is used, and the run says the rate had not settled (the replies overlap, ~10.5 s
    # apart, so each rate's prefills meet other decodes a little differently and no two responses are equal)
    runs, at = _counted_runs(monkeypatch, 0.02, 600, RATE_TOLERANCE=0.0)
    assert runs == RATE_PASSES and at.rate_settled is False
    assert at.summary()["rate_settled"] is False


def test_bad_engine_settings_are_one_line_errors():
    with pytest.raises(BadInput, match="max-num-batched-tokens"):
        EngineConfig(num_blocks=10, block_size=B, max_num_batched_tokens=0)
    with pytest.raises(BadInput, match="no sessions"):
        trace = make_trace([("a", 0.0, 32, _ids(1, 32), 1), ("b", 1.0, 32, _ids(2, 32), 1)], block_size=B)
        engine_users(trace, ReplayOptions(), EngineConfig(num_blocks=10, block_size=B),
                     ConstantSteps(0.001, 0.01), Comfort())


def test_the_disagreement_line_names_both_answers_the_binding_ceiling_and_what_broke():
    from servesize.simulate.engine import EngineUsers, disagreement

    found = EngineUsers(40, Comfort(), {}, breaks_at=41, reason="6.0% of turns wait > 10 s for the first token")
    assert disagreement(44, "decode", found) is None  # +10%: within 15%
    line = disagreement(24, "cache", found)
    assert line.startswith("plan 24 users (cache binds) vs the engine simulator's 40 (-40%)")
    assert "whole context fits" in line and line.endswith("at 41 the engine breaks on 6.0% of turns wait > 10 s "
                                                         "for the first token")
    assert disagreement(30, "cache", found, dp=2).startswith("plan 30 users (cache binds) vs the engine simulator's 80")


def test_one_user_alone_sets_the_baseline_a_budget_one_miss_exceeds_is_never_zero_users():
    # every prompt takes 12 s to prefill: one user alone misses a 10 s budget on every turn, and so do 2 users
    def run_at(n):
        rows = [(f"u{k}", 0.0, 1200, _ids(k + 1, 1200), 2) for k in range(n)]
        times = ConstantSteps(prefill_per_token_s=0.01, decode_step_s=0.001)
        return simulate_engine(_replay(rows), EngineConfig(num_blocks=10_000, block_size=B,
                                                           max_num_batched_tokens=1200), times, warmup=0.0)

    found = users_at_comfort(run_at, Comfort(ttft_limit_s=10.0), max_users=8)
    assert found.users >= 1 and found.points[1]["ttft_miss"] == 1.0 and found.points[1]["comfortable"]


def test_no_measured_turn_is_no_warm_share_never_100_percent():
    """Issue 31: with every output longer than max_model_len nothing is answered, and the run said 'warm 100.0%' from
    0 measured requests. A share of no turns is None, shown '-', and the SLO is then decided by what was measured."""
    from servesize.simulate.engine import EngineRun

    nan, n = np.full(3, np.nan), 3
    run = EngineRun(users=3, arrival_s=np.zeros(n), first_token_s=nan, finish_s=nan, hit_tokens=np.zeros(n),
                    ideal_tokens=np.full(n, 64.0), input_tokens=np.full(n, 128), output_tokens=np.full(n, 8),
                    preemptions=np.zeros(n, dtype=int), too_large=n, clock_s=1.0)
    assert run.warm_share is None and run.summary()["measured"] == 0 and run.summary()["warm_share"] is None
    met, why = Comfort().check(run)
    assert not met and "no request was answered" in why
    answered = EngineRun(users=1, arrival_s=np.zeros(1), first_token_s=np.ones(1), finish_s=np.full(1, 2.0),
                         hit_tokens=np.zeros(1), ideal_tokens=np.zeros(1), input_tokens=np.full(1, 128),
                         output_tokens=np.full(1, 8), preemptions=np.zeros(1, dtype=int), clock_s=2.0, warmup=0.0)
    assert answered.warm_share is None and Comfort().check(answered) == (True, "met")  # a first turn has nothing to keep


def test_the_warm_share_judges_returning_turns_and_not_a_sessions_first_request():
    """The comfort SLO asks 95% of returning turns warm. A session's first request can hit only what other sessions
    share (a system prompt), which stays cached while its sessions are evicted: on the chat preset, whose sessions
    are two requests, half the judged turns were such starts, all warm, so the engine passed a warm share of 95%
    with a tenth of the returning turns cold. Here session b's first request hits a's 64-token prefix and is not
    judged; a's second request returns to its session and is; on a trace without sessions every request is."""
    from servesize.simulate.engine import EngineRun, returning_turns

    prefix = _ids(1, 64)
    rows = [("a", 0.0, 256, prefix + _ids(2, 192), 1, 1.0), ("b", 1.0, 128, prefix + _ids(3, 64), 1, 1.0),
            ("a", 10.0, 320, prefix + _ids(2, 192) + _ids(4, 64), 1)]
    rp = _replay(rows)
    assert returning_turns(rp).tolist() == [False, False, True]
    run = simulate_engine(rp, EngineConfig(num_blocks=100, block_size=B),
                          ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01), warmup=0.0)
    assert run.ideal_tokens.tolist() == [0, 64, 256] and run.hit_tokens.tolist() == [0, 64, 256]
    assert run.returning.tolist() == [False, False, True] and run.warm_share == 1.0
    # a's own blocks evicted before it returned: the start hit the shared prefix, the return only that prefix
    cold = replace(run, hit_tokens=np.array([0, 64, 64]))
    assert cold.warm_share == 0.0 and replace(cold, returning=None).warm_share == 0.5
    open_loop = build_replay(make_trace([(f"r{k}", float(k), 64, prefix, 1) for k in range(3)], block_size=B),
                             ReplayOptions(warmup=0.0))
    assert returning_turns(open_loop).all()
    assert isinstance(run, EngineRun)


def test_a_replay_with_more_requests_than_one_run_prices_is_refused_before_any_step(monkeypatch):
    """Issue 31: an open-loop trace of 10^6 requests at 4 users ran past ten minutes with no bound; a run is now
    refused by its request count (MAX_ENGINE_REQUESTS, here lowered to the size of a small replay) before its loop."""
    import servesize.simulate.engine as engine

    rows = [(f"u{k}", 0.0, 16, _ids(k + 1, 16), 3) for k in range(5)]
    times = ConstantSteps(prefill_per_token_s=1e-6, decode_step_s=0.001)
    monkeypatch.setattr(engine, "MAX_ENGINE_REQUESTS", 5)
    assert np.isfinite(simulate_engine(_replay(rows), EngineConfig(num_blocks=100, block_size=B), times).finish_s).all()
    monkeypatch.setattr(engine, "MAX_ENGINE_REQUESTS", 4)
    calls = []
    monkeypatch.setattr(engine._Engine, "step", lambda self: calls.append(1) or False)
    with pytest.raises(engine.RunTooLarge, match=r"^5 requests in one engine run, past the simulator's 4 "):
        simulate_engine(_replay(rows), EngineConfig(num_blocks=100, block_size=B), times)
    assert calls == [] and issubclass(engine.RunTooLarge, BadInput)


def test_a_search_that_reaches_a_run_too_large_stops_there_with_at_least_the_users_it_found():
    """The search doubles users, and a session trace's requests grow with them: the first run past the request
    bound ends the search at the last users served ("at least"), with the reason; never a refusal of the whole."""
    from servesize.simulate.engine import RunTooLarge

    def run_at(n):
        if n > 8:
            raise RunTooLarge(f"{n * 1000:,} requests in one engine run, past the simulator's 8,000")
        rows = [(f"u{k}", 0.0, 16, _ids(k + 1, 16), 5) for k in range(n)]
        return simulate_engine(_replay(rows), EngineConfig(num_blocks=1000, block_size=B),
                               ConstantSteps(prefill_per_token_s=1e-6, decode_step_s=0.001), warmup=0.0)

    found = users_at_comfort(run_at, Comfort())
    assert found.users == 8 and found.capped and found.breaks_at is None
    assert set(found.points) == {1, 2, 4, 8}
    assert found.line().startswith("at least 8 users served comfortably (engine simulator); the search stopped "
                                   "there: the next run tried: 16,000 requests in one engine run")
    with pytest.raises(RunTooLarge):  # at one user there is nothing to report: the caller's refusal
        users_at_comfort(lambda n: run_at(n * 100), Comfort())


# -- hybrid models: recurrent states share the pool (EngineConfig.state_groups) ------------------

_TURNS = [("a", 0.0, 128, _ids(1, 128), 1, 1.0), ("b", 0.5, 96, _ids(2, 96), 1),
          ("a", 10.0, 192, _ids(1, 128) + [5000, 5001, 5002, 5003], 1)]


def _hybrid(num_blocks: int, groups: int = 2, per_group: int = 3, cached: bool = True) -> EngineConfig:
    return EngineConfig(num_blocks=num_blocks, block_size=B, state_groups=groups, state_blocks_per_group=per_group,
                        state_cached=cached)


def test_a_hybrid_models_returning_turn_hits_up_to_the_block_whose_state_its_last_prompt_left_cached():
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    run = simulate_engine(_replay(_TURNS), _hybrid(200), times, warmup=0.0)
    assert run.hit_tokens.tolist() == [0, 0, 128]
    # 'none' mode keeps no state after a request: nothing of a hybrid model's prompt is ever hit
    none = simulate_engine(_replay(_TURNS), _hybrid(200, cached=False), times, warmup=0.0)
    assert none.hit_tokens.tolist() == [0, 0, 0]


def test_a_hybrid_models_state_takes_pool_blocks_so_a_pool_that_kept_a_plain_models_prefix_loses_it():
    # 20 usable blocks. a holds 9 attention blocks (129 tokens) and 2 x 3 state blocks; it leaves its prompt's 8
    # full blocks and its 2 state blocks cached. b then takes its 4 own state blocks and 6 attention blocks from the
    # 10 empty ones, and the 2 blocks of its own prompt's state evict 2 of a's: a's return cannot resume (its state,
    # or the attention block it belongs to, is gone), so no hit
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    run = simulate_engine(_replay(_TURNS), _hybrid(21), times, warmup=0.0)
    assert run.hit_tokens.tolist() == [0, 0, 0]
    # without state layers the same pool keeps a's prefix through b (12 empty blocks are enough for b)
    plain = simulate_engine(_replay(_TURNS), EngineConfig(num_blocks=21, block_size=B), times, warmup=0.0)
    assert plain.hit_tokens.tolist() == [0, 0, 128]
    # and a pool two blocks larger keeps a's state too
    assert simulate_engine(_replay(_TURNS), _hybrid(23), times, warmup=0.0).hit_tokens.tolist() == [0, 0, 128]


def test_a_hybrid_models_request_too_large_for_the_pool_with_its_state_is_never_scheduled():
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    rows = [("a", 0.0, 128, _ids(1, 128), 1)]  # 9 attention blocks; with 2 x 3 state blocks 15 of the 14 usable
    assert simulate_engine(_replay(rows), _hybrid(15), times, warmup=0.0).too_large == 1
    assert simulate_engine(_replay(rows), _hybrid(16), times, warmup=0.0).too_large == 0


def test_the_engine_config_of_a_hybrid_deployment_carries_its_state_groups():
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario
    from servesize.simulate.engine import config_of

    report, _ = plan_inputs(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8",
                                     kv_cache_dtype="fp8")).memory_and_fixed(check_prefixes=False)
    cfg = config_of(report)
    states = [g for g in report.pool.groups if g.kind == "gated_deltanet"]
    assert cfg.state_groups == len(states) == 3 and cfg.state_cached  # 'align': prefix caching is on
    page = states[0].page_bytes * report.pool.group_size  # one block of a group: a page in each of its layers
    assert cfg.state_blocks_running * page == report.pool.state_bytes_per_sequence


def test_a_hybrid_prompt_is_prefilled_in_whole_blocks_up_to_its_last_full_block_then_the_rest():
    # 'align' mode: 100 tokens at 40 a step go 32, 32, 32 (the last full block's end, 96), then 4; plain: 40, 40, 20
    rows = [("a", 0.0, 100, _ids(1, 100), 1)]
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    hybrid = simulate_engine(_replay(rows), replace(_hybrid(200), max_num_batched_tokens=40), times, warmup=0.0)
    plain = simulate_engine(_replay(rows), EngineConfig(num_blocks=200, block_size=B, max_num_batched_tokens=40),
                            times, warmup=0.0)
    assert (hybrid.prefill_chunks, plain.prefill_chunks) == (4, 3)


def test_a_hybrid_prompt_the_steps_budget_could_not_start_is_admitted_the_next_step_not_after_the_decodes():
    """20 tokens a step, 16-token blocks: a's second chunk (16) ends its prefill and leaves 4 tokens of the budget,
    short of b's first whole block, so b waits that step only. (The engine took it for a pool without room and
    jumped a's 100 decode steps before admitting b: on the 27B its turns waited seconds behind every decode.)"""
    rows = [("a", 0.0, 32, _ids(1, 32), 100), ("b", 0.0, 20, _ids(2, 20), 1)]
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    run = simulate_engine(_replay(rows), replace(_hybrid(200), max_num_batched_tokens=20), times, warmup=0.0)
    a, b = (0, 1) if run.output_tokens[0] == 100 else (1, 0)
    assert run.first_token_s[b] < run.first_token_s[a] + 3 * 0.01 + 0.02 < run.finish_s[a]
    # a pool without room for b beside a's growing blocks does hold it until a finishes (the jump is right there)
    full = simulate_engine(_replay(rows), replace(_hybrid(17), max_num_batched_tokens=20), times, warmup=0.0)
    assert full.first_token_s[b] > full.finish_s[a]


def test_a_new_session_sharing_a_prefix_resumes_from_the_state_a_chunk_of_another_left_inside_it():
    # a and b share 96 tokens (6 blocks). a's 160 tokens go 64, 64, 32 a step: states at blocks 4, 8 and 10; b's
    # attention hit is the 6 shared blocks, and the last state within them is block 4's: 64 tokens
    prefix = _ids(1, 96)
    rows = [("a", 0.0, 160, prefix + _ids(2, 64), 1), ("b", 5.0, 160, prefix + _ids(3, 64), 1)]
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    hybrid = simulate_engine(_replay(rows), replace(_hybrid(200), max_num_batched_tokens=64), times, warmup=0.0)
    assert hybrid.hit_tokens.tolist() == [0, 64]
    plain = simulate_engine(_replay(rows), EngineConfig(num_blocks=200, block_size=B, max_num_batched_tokens=64),
                            times, warmup=0.0)
    assert plain.hit_tokens.tolist() == [0, 96]


def test_a_generated_sessions_next_prompt_hits_the_reply_it_repeats_and_a_traces_does_not():
    # 64 tokens in, 32 out: the reply fills blocks 5 and 6 (96 tokens), which the next prompt (128 tokens, the same
    # chain) names. Sessions generated from a workload repeat the reply (the engine hashes it under those ids, as
    # vLLM hashes a reply's blocks as they fill); a trace's ids do not say what its next prompt repeats
    rows = [("a", 0.0, 64, _ids(1, 64), 32, 1.0), ("a", 10.0, 128, _ids(1, 128), 1)]
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    trace = make_trace(rows, block_size=B, clock="session")
    generated = simulate_engine(build_replay(trace, ReplayOptions(warmup=0.0)), EngineConfig(num_blocks=100, block_size=B),
                                times, warmup=0.0)
    assert generated.hit_tokens.tolist() == [0, 96] and generated.ideal_tokens.tolist() == [0, 96]
    logged = replace(trace, format="claude-code")
    other = simulate_engine(build_replay(logged, ReplayOptions(warmup=0.0)), EngineConfig(num_blocks=100, block_size=B),
                            times, warmup=0.0)
    assert other.hit_tokens.tolist() == [0, 64] and other.ideal_tokens.tolist() == [0, 64]
    # a hybrid model keeps the state its decode left at the reply's last full block: the same hit
    assert simulate_engine(build_replay(trace, ReplayOptions(warmup=0.0)), _hybrid(100), times,
                           warmup=0.0).hit_tokens.tolist() == [0, 96]


def test_mtp_drafts_make_a_returning_turn_compute_its_hits_last_block_again():
    # the returning turn above hits its 8 blocks; with the block dropped (MTP / EAGLE drafts) it hits 7 and
    # prefills 16 tokens more
    first = _ids(1, 128)
    rows = [("a", 0.0, 128, first, 1, 1.0), ("a", 10.0, 192, first + [5000, 5001, 5002, 5003], 1)]
    times = ConstantSteps(prefill_per_token_s=0.001, decode_step_s=0.01)
    run = simulate_engine(_replay(rows), EngineConfig(num_blocks=100, block_size=B, drop_hit_block=True), times,
                          warmup=0.0)
    assert run.hit_tokens.tolist() == [0, 112]
    assert run.first_token_s[1] - run.arrival_s[1] == pytest.approx(H + 0.080)
    assert run.ideal_tokens.tolist() == [0, 112] and run.warm_share == 1.0  # an unbounded cache drops it too
