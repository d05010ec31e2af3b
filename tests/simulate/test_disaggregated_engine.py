"""The engine simulator with prefill and decode apart (simulate/disaggregated.py): a request is prefilled on its
prefill instance, handed to its decode instance after the pull, recomputes its last token there and decodes; the
client's TTFT runs from the send to the decode instance's first token."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from servesize.planning.ceilings import step_model_of
from servesize.resolve import plan_inputs
from servesize.scenario import Scenario
from servesize.simulate.disaggregated import simulate_disaggregated
from servesize.simulate.engine import config_of
from servesize.simulate.replay import ReplayOptions, build_replay
from servesize.simulate.synthetic import synthesize


@pytest.fixture(scope="module")
def setup():
    inputs = plan_inputs(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"))
    report, fixed = inputs.memory_and_fixed(check_prefixes=False)
    cfg = replace(config_of(report), max_num_seqs=64, max_num_batched_tokens=8192)
    trace = synthesize(inputs.workload, sessions=40, seed=3)
    opts = ReplayOptions(warmup=0.0, seed=3, block_size=cfg.block_size, align="stagger",
                         max_model_len=report.pool.max_model_len, session_gap_s=float(inputs.workload.think_time_s))
    return cfg, step_model_of(fixed, inputs.knobs), trace, opts


def _run(setup, users, pull, extra=0.0, x=1, y=1):
    from dataclasses import replace

    cfg, times, trace, opts = setup
    replay = build_replay(trace, replace(opts, users=users))
    return simulate_disaggregated(replay, (cfg, times, x), (cfg, times, y), pull, extra, 1, warmup=0.0)


def test_every_request_is_sent_prefilled_pulled_then_answered_in_that_order(setup):
    run = _run(setup, 3, lambda prompt, hit: 0.01)
    done = np.isfinite(run.finish_s)
    assert done.all() and run.too_large == 0
    assert (run.arrival_s < run.first_token_s).all() and (run.first_token_s <= run.finish_s).all()


def test_a_slower_pull_delays_a_lone_users_first_token_by_exactly_the_difference(setup):
    fast, slow = _run(setup, 1, lambda p, h: 0.0), _run(setup, 1, lambda p, h: 0.5)
    assert np.allclose(slow.ttft_s - fast.ttft_s, 0.5, atol=1e-9)
    # and the hand-over's other steps, given as time, the same way
    extra = _run(setup, 1, lambda p, h: 0.0, extra=0.25)
    assert np.allclose(extra.ttft_s - fast.ttft_s, 0.25, atol=1e-9)


def test_a_returning_turn_pulls_only_what_its_decode_instance_lacks(setup):
    asked: list[tuple[int, int]] = []

    def pull(prompt: int, hit: int) -> float:
        asked.append((prompt, hit))
        return 0.0

    _run(setup, 2, pull)
    warm = [(p, h) for p, h in asked if h > 0]
    assert len(warm) >= len(asked) // 2  # most turns return to a context the decode instance still holds
    assert all(h < p for p, h in asked)


def test_the_decode_instances_steps_carry_no_prompt_but_each_requests_recomputed_token(setup):
    cfg, times, trace, opts = setup
    run = _run(setup, 4, lambda p, h: 0.0)
    # every request: its prompt in chunks on the prefill instance; on the decode instance one chunk, its last token
    assert run.prefill_chunks >= run.arrival_s.size
    assert run.mixed_steps <= run.arrival_s.size


def test_two_decode_instances_share_the_users_and_each_keeps_its_own_sessions(setup):
    one, two = _run(setup, 4, lambda p, h: 0.0, y=1), _run(setup, 4, lambda p, h: 0.0, y=2)
    assert np.isfinite(two.finish_s).all()
    assert np.median(two.decode_tok_s) >= np.median(one.decode_tok_s)  # fewer decoders per instance


def test_the_check_on_one_prefill_and_one_decode_instance_gives_the_engines_users_and_says_why_plan_differs():
    """1P1D of the 27B on two H200s, coding-agent: plan's latency ceiling (the prefill queue) binds. Until the engine
    measured its users only while all of them sent (2026-12-05 night), its load fell through the measured half and
    the two agreed; at the full load the engine's TTFT breaks first, and the check says so in one line."""
    from servesize.api import check_disaggregated

    got = check_disaggregated(Scenario(model="qwen3.6-27b", gpus="2xH200", quantization="fp8", kv_cache_dtype="fp8",
                                       prefill_instances=1, decode_instances=1))
    assert got["engine_users"] > 0 and "engine simulator" in got["line"]
    assert got["agree"] == (abs(got["gap"]) <= got["tolerance"])
    if not got["agree"]:
        why = got["disagreement"]
        assert f"plan {got['plan_users']:,.0f} users ({got['plan_binding']} binds)" in why, why
        assert f"the engine simulator's {got['engine_users']:,}" in why and got["reason"] in why, why


def test_a_turn_is_warm_by_its_prefill_instances_hit_whatever_its_decode_instance_holds(setup):
    """Only the prefill instance computes a prefix; what the decode instance's cache lacks is pulled (TTFT). So a
    decode instance that holds nothing (a pool of one request) leaves every turn's warmth as it was. One user, whose
    requests follow one another, so that the small pool changes no request's timing (it would queue a second
    user's request behind the first, and the prefill pool's order with it)."""
    cfg, times, trace, opts = setup
    replay = build_replay(trace, replace(opts, users=1))
    both = simulate_disaggregated(replay, (cfg, times, 1), (cfg, times, 1), lambda p, h: 0.0, 0.0, 1, warmup=0.0)
    longest = int(np.max(replay.input_tokens + replay.output_tokens))  # one request at a time, nothing kept
    tiny = replace(cfg, num_blocks=-(-longest // cfg.block_size) + 2 * cfg.state_blocks_running + 8)
    lone = simulate_disaggregated(replay, (cfg, times, 1), (tiny, times, 1), lambda p, h: 0.0, 0.0, 1, warmup=0.0)
    assert both.warm_share is not None and both.warm_share > 0.5
    assert lone.warm_share == both.warm_share and np.array_equal(lone.hit_tokens, both.hit_tokens)
