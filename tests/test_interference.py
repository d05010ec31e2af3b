"""Decode stalls behind prefill chunks (planning/interference.py): the compound-Poisson tail against a direct
Monte Carlo of the same model, its limits, and what it does to the plan."""

from __future__ import annotations

import numpy as np
import pytest

from servesize.errors import BadInput
from servesize.planning.interference import StallLoad, allowed_slow_share, timed_decode_tokens


def _load(**kw) -> StallLoad:
    base = dict(output_tokens=400.0, floor_tok_s=40.0, tokens_per_step=1.0, chunk_stall_s=0.5, miss_rate=0.2,
                miss_stall_s=np.array([0.5, 1.0, 2.0, 4.0]), hit_stall_s=np.array([0.05, 0.1]),
                mean_service_s=0.0, second_moment_s2=0.0)
    base.update(kw)
    return StallLoad(**base)


def _monte_carlo(load: StallLoad, rate: float, token_s: float, n: int = 100_000, seed: int = 7) -> float:
    """P(not done by T = R / f): arrivals drawn one by one in time, each joining while the work lasts (no queue
    at the start: E[S] = 0)."""
    rng = np.random.default_rng(seed)
    end = np.full(n, load.output_tokens * token_s)  # when the decode would be done so far
    t = np.zeros(n)
    live = np.ones(n, dtype=bool)
    while live.any():
        t = t + rng.exponential(1.0 / rate, n)
        joins = live & (t < end) & (t < load.window_s)
        cold = rng.random(n) < load.miss_rate
        stall = np.where(cold, rng.choice(load.miss_stall_s, n), rng.choice(load.hit_stall_s, n))
        end = np.where(joins, end + stall, end)
        live = joins
    return float(np.mean(end > load.window_s))


@pytest.mark.parametrize("rate", [0.2, 1.0, 3.0])
def test_tail_matches_a_direct_monte_carlo(rate):
    load = _load()
    got = load.slow_share(rate, np.array([0.012]))
    want = _monte_carlo(load, rate, 0.012)
    assert got == pytest.approx(want, abs=0.015)


def test_one_user_alone_is_slow_only_where_its_own_decode_misses_the_floor():
    load = _load()
    token_s = np.array([0.01, 0.02, 0.03, 0.04])  # 100, 50, 33, 25 tok/s against a 40 tok/s floor
    assert load.slow_share(0.0, token_s) == pytest.approx(0.5)


def test_more_prefills_slow_more_decodes_and_a_full_queue_slows_all():
    load = _load(mean_service_s=0.3, second_moment_s2=0.3)
    shares = [load.slow_share(r, np.array([0.015])) for r in (0.1, 0.5, 1.0, 2.0, 3.0)]
    assert shares == sorted(shares) and shares[-1] > shares[0]
    assert load.slow_share(1 / 0.3, np.array([0.015])) == 1.0


def test_a_queue_at_the_start_adds_to_the_stall():
    quiet = _load()
    queued = _load(mean_service_s=0.4, second_moment_s2=1.0)
    assert queued.slow_share(1.0, np.array([0.015])) > quiet.slow_share(1.0, np.array([0.015]))


def test_a_spread_of_replies_is_priced_reply_by_reply():
    """Replies of 40 and 760 tokens (mean 400): the slowed share is the mean of each one's over its own window."""
    spread = timed_decode_tokens(400, (0.1025, 1.9025))   # 41 and 761 tokens: 40 and 760 timed after the first
    assert spread == pytest.approx((40.0, 760.0))
    load = _load(decode_spread=spread)
    token_s = np.array([0.012])
    short, long = (_load(output_tokens=r).slow_share(1.0, token_s) for r in spread)
    assert load.slow_share(1.0, token_s) == pytest.approx((short + long) / 2)
    assert abs(short - long) > 0.05  # each window its own share: the mean reply alone is not what they average to
    assert timed_decode_tokens(400, None) == () and timed_decode_tokens(400, (0.001,)) == (1.0,)  # at least one


def test_chunks_shorter_than_the_slack_per_step_cannot_slow_a_decode():
    # a step may last 1 / f = 25 ms; decoding alone takes 10 ms, so a chunk stalling 15 ms or less never breaks it
    assert _load(chunk_stall_s=0.015).slow_share(5.0, np.array([0.010])) == 0.0
    assert _load(chunk_stall_s=0.5).slow_share(5.0, np.array([0.010])) > 0.5


def test_bad_inputs_are_refused():
    with pytest.raises(BadInput):
        _load(output_tokens=0.0)
    with pytest.raises(BadInput):
        _load(miss_rate=1.5)
    with pytest.raises(BadInput):
        allowed_slow_share(100.0, 0.0)
    assert allowed_slow_share(95.0, 0.0) == pytest.approx(0.05)
    assert allowed_slow_share(95.0, 0.2) == pytest.approx(0.22)


def test_stall_of_a_prefill_is_its_compute_less_one_weight_read_a_chunk():
    from servesize.api import plan_inputs
    from servesize.planning.ceilings import step_model_of
    from servesize.scenario import Scenario

    inputs = plan_inputs(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"))
    _, fixed = inputs.memory_and_fixed()
    steps = step_model_of(fixed, inputs.knobs)
    compute = float(steps.prefill.flops(20_000, 0.0) / steps.prefill.achieved_flops_per_s)
    read = float(steps.decode.weight_bytes(8192)) / steps.decode.effective_bandwidth_bytes_per_s
    assert float(steps.stall_s(20_000, 0.0, 8192)) == pytest.approx(compute - 3 * read)
    assert float(steps.stall_s(20_000, 0.0, 2048)) == pytest.approx(compute - 10 * read)
    with pytest.raises(BadInput):
        steps.stall_s(100, 0.0, 0)


def test_the_plan_prices_the_stall_and_the_seed_reading_does_not():
    from dataclasses import replace

    from servesize.api import plan_inputs
    from servesize.planning.ceilings import ceilings
    from servesize.scenario import Scenario

    inputs = plan_inputs(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"))
    _, fixed = inputs.memory_and_fixed()
    priced = ceilings(fixed, inputs.workload, inputs.knobs)
    assert priced.decode_load.stall_share is not None
    assert priced.decode_load.stall_share <= priced.decode_load.stall_allowed + 1e-12
    off = replace(inputs.knobs, overrides=(*inputs.knobs.overrides, ("load.interference", False)))
    unpriced = ceilings(fixed, inputs.workload, off)
    assert unpriced.decode_load.stall_share is None
    assert priced.decode_load.stall_binds  # the seed's deployment: the chunks stop one user more
    assert unpriced.values["decode"] > priced.values["decode"]
    # smaller chunks (--max-num-batched-tokens) stall a decode less each step: never fewer users
    small = ceilings(replace(fixed, chunk_tokens=2048), inputs.workload, inputs.knobs)
    assert small.values["decode"] >= priced.values["decode"]


def test_evicted_turns_are_a_third_leg_that_re_prefills_the_whole_context():
    """StallLoad.with_evicted(x): x of the warm turns take a whole re-prefill's stall instead of the warm tail's,
    in the jumps and in the queue's moments; with the evicted draws the cold ones it is the same load as a cold
    share raised by (1 - m) x."""
    from servesize.planning.lru import Evictions, churn_bound
    from servesize.workload.presets import preset

    ev = Evictions(churn_bound(1e6, 5_000, 0.01, 100.0, 95.0), preset("coding-agent").workload())
    priced = {"calls": 0}

    def pricing(prompts):  # each prompt's stall, and its service: 1.2 s and E[S^2] 2.0 over the four
        priced["calls"] += 1
        return np.array([0.5, 1.0, 2.0, 4.0]), np.array([1.0, 1.0, 1.0, 1.8])

    load = _load(mean_service_s=0.3, second_moment_s2=0.3, evictions=ev, evicted_prompts=np.array([1.0, 2.0, 3.0, 4.0]),
                 evicted_pricing=pricing, hit_service_s=(0.1, 0.02))
    bare = _load()
    assert load.with_evicted(0.0) is load and bare.with_evicted(0.3) is bare  # no draws: nothing to price
    x = 0.1
    out = load.with_evicted(x)
    assert out.evicted_share == x
    assert out.mean_service_s == pytest.approx(0.3 + 0.8 * x * (1.2 - 0.1))
    assert out.second_moment_s2 == pytest.approx(0.3 + 0.8 * x * ((3 + 1.8 ** 2) / 4 - 0.02))
    raised = _load(miss_rate=0.2 + 0.8 * x, mean_service_s=out.mean_service_s, second_moment_s2=out.second_moment_s2)
    assert out.mean_stall_s == pytest.approx(raised.mean_stall_s)
    for rate in (0.2, 1.0):
        assert out.slow_share(rate, np.array([0.015])) == pytest.approx(raised.slow_share(rate, np.array([0.015])))
    assert out.slow_share(1.0, np.array([0.015])) > load.slow_share(1.0, np.array([0.015]))
    again = load.with_evicted(0.2).with_evicted(x)  # from another share: the same load
    assert (again.evicted_share, again.mean_service_s) == (x, pytest.approx(out.mean_service_s))
    assert again.with_evicted(0.0).mean_service_s == pytest.approx(0.3) and priced["calls"] == 1  # priced once


def test_the_plan_prices_the_turns_the_pool_evicts_below_its_ceiling(tmp_path):
    """Long contexts with a long-tailed pause (the Claude Code trace's fit, docs/accuracy.md): below the cache
    ceiling the pool still evicts the sessions whose pause outlasts its characteristic time, and their
    re-prefills stall the decodes (load.evicted_prefill); the seed's coding-agent preset (exponential 30 s pauses)
    evicts next to nothing and keeps its users."""
    import json
    from dataclasses import replace

    from servesize.api import plan_inputs
    from servesize.planning.ceilings import ceilings
    from servesize.scenario import Scenario

    path = tmp_path / "cc.json"
    path.write_text(json.dumps({
        "servesize_workload": 1, "preset": "coding-agent",
        "user": {"name": "user", "kind": "lognormal", "median_tokens": 99310.9, "sigma": 0.6606, "prefix_tokens": 14948},
        "subagent": {"name": "subagent", "kind": "lognormal", "median_tokens": 36985.0, "sigma": 0.6938,
                     "prefix_tokens": 8684},
        "subagent_ratio": 0.013893, "invalidation": 0.0129, "think_time_s": 48.33, "think_time_sigma": 1.2864,
        "output_tokens": 440, "warm_turn_tokens": 1672, "session_turns": 69}))
    for workload, moves in ((str(path), True), (None, False)):
        inputs = plan_inputs(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8",
                                      workload=workload))
        _, fixed = inputs.memory_and_fixed()
        priced = ceilings(fixed, inputs.workload, inputs.knobs)
        off = ceilings(fixed, inputs.workload, replace(inputs.knobs, overrides=(*inputs.knobs.overrides,
                                                                                ("load.evicted_prefill", False))))
        load = priced.decode_load
        assert load is not None and off.decode_load is not None and off.decode_load.evicted_share is None
        assert load.evicted_share == pytest.approx(priced.stall.evictions.share(load.users))
        if moves:
            assert 0.001 < load.evicted_share < 0.05 and load.users < off.decode_load.users
        else:
            assert load.evicted_share < 1e-4 and load.users == off.decode_load.users


def test_a_trace_of_lone_requests_evicts_by_its_reuse_distances_and_re_prefills_the_prompt_alone(tmp_path):
    """A workload fitted from a trace of lone requests sharing prefixes (Mooncake's) carries its warm requests' LRU
    reuse distances: the pool evicts the share past it at every load, and an evicted request prefills its own
    prompt again (a lone request's drawn length is its whole prompt), where a session's evicted turn prefills its
    context and the turn on top."""
    import json

    from servesize.api import plan_inputs
    from servesize.planning.ceilings import ceilings
    from servesize.scenario import Scenario

    base = {"servesize_workload": 1, "preset": "coding-agent",
            "user": {"name": "user", "kind": "lognormal", "median_tokens": 7000.0, "sigma": 1.0, "prefix_tokens": 0},
            "subagent_ratio": 0.0, "invalidation": 0.58, "output_tokens": 150, "warm_turn_tokens": 427,
            "session_turns": 0}
    reuse = [100_000.0 * (k + 1) for k in range(64)]  # 0.1M to 6.4M tokens
    found = {}
    for name, extra in (("lone", {"reuse_tokens": reuse}), ("sessions", {})):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**base, **extra}))
        inputs = plan_inputs(Scenario(model="qwen3-30b-a3b", gpus="1xH200", workload=str(path)))
        _, fixed = inputs.memory_and_fixed()
        found[name] = (inputs.workload, fixed, ceilings(fixed, inputs.workload, inputs.knobs))
    w, fixed, lone = found["lone"]
    share = w.reuse_evicted(fixed.pool_tokens)
    assert 0.8 < share < 0.9  # a pool of ~758k tokens holds the reuse of the seven points under it, of 64
    load = lone.decode_load
    assert load is not None and load.evicted_share == pytest.approx(share)
    assert lone.stall.evictions.share(1) == lone.stall.evictions.share(40) == pytest.approx(share)  # at any load
    _, _, sessions = found["sessions"]
    assert sessions.decode_load is not None and sessions.decode_load.evicted_share < 0.01  # by pause: 4e-4
    assert load.users < sessions.decode_load.users  # the evicted prefixes are prefilled beside the decodes
    # the same draws, priced: the lone request's own prompt, the session's turn on its context
    # (the turn and the half block a hit's end rounds to: planning.ceilings.warm_prefill_tokens)
    turn = sessions.stall.evicted_prompts - lone.stall.evicted_prompts
    assert np.allclose(turn, turn[0]) and 427.0 <= turn[0] < 427.0 + 16
