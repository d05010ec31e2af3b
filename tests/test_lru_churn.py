"""The cache ceiling under LRU churn (planning/lru.py): a returning turn is warm only if its blocks outlive the
pause, so past some users the pool turns over within a pause."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from servesize.errors import BadInput
from servesize.planning.lru import churn_bound


def test_the_bound_is_the_pool_over_what_a_pause_writes():
    b = churn_bound(1_000_000, 5_000, 0.01, 300.0, 95.0)
    assert b.users == pytest.approx(1_000_000 / (300.0 * 0.01 * 5_000))
    assert b.derivation.steps[-1].name == "churn_users"
    # twice the pool, twice the users; twice the pause, half
    assert churn_bound(2_000_000, 5_000, 0.01, 300.0, 95.0).users == pytest.approx(2 * b.users)
    assert churn_bound(1_000_000, 5_000, 0.01, 600.0, 95.0).users == pytest.approx(b.users / 2)
    # blocks a returning turn hits again are held through the pause before it, as well as its writes after it
    held = churn_bound(1_000_000, 5_000, 0.01, 300.0, 95.0, reread_tokens_per_request=6_000, held_pause_s=90.0)
    assert held.users == pytest.approx(1_000_000 / (0.01 * (5_000 * 300.0 + 6_000 * 90.0)))
    assert held.derivation.steps[-1].inputs[-1] == ("held_pause_s", 90.0)


def test_sessions_that_never_return_are_not_bounded():
    assert math.isinf(churn_bound(1_000_000, 5_000, 0.01, 300.0, 95.0, returning=False).users)
    with pytest.raises(BadInput):
        churn_bound(0, 5_000, 0.01, 300.0, 95.0)


def _inputs(preset: str):
    from servesize.api import plan_inputs
    from servesize.scenario import Scenario

    inputs = plan_inputs(Scenario(model="qwen3-30b-a3b", gpus="1xH200", preset=preset))
    return inputs, inputs.memory_and_fixed()[1]


def test_short_conversations_of_long_turns_bind_on_churn_and_coding_agents_on_the_fill():
    from servesize.planning.ceilings import ceilings

    inputs, fixed = _inputs("rag")
    rag = ceilings(fixed, inputs.workload, inputs.knobs)
    assert rag.churn is not None and rag.churn.users < rag.warm.users.p5
    assert rag.values["cache"] == math.floor(rag.churn.users)
    off = replace(inputs.knobs, overrides=(*inputs.knobs.overrides, ("cache.churn", False)))
    assert ceilings(fixed, inputs.workload, off).values["cache"] == float(rag.warm.users.p5)

    inputs, fixed = _inputs("coding-agent")
    agents = ceilings(fixed, inputs.workload, inputs.knobs)
    assert agents.churn.users > agents.warm.users.p5 and agents.values["cache"] == float(agents.warm.users.p5)


def test_binding_of_agrees_with_ceilings_where_churn_binds():
    from servesize.planning.ceilings import CeilingCache, binding_of, ceilings

    inputs, fixed = _inputs("rag")
    assert binding_of(fixed, inputs.workload, inputs.knobs, CeilingCache()) == \
        ceilings(fixed, inputs.workload, inputs.knobs, comfortable=False).binding


def _27b(preset: str):
    from servesize.api import plan_inputs
    from servesize.scenario import Scenario

    inputs = plan_inputs(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8",
                                  preset=preset))
    return inputs, inputs.memory_and_fixed()[1]


def _writes(fixed, workload, knobs, lengths):
    """cache_writes over a workload whose every prompt is one of ``lengths`` (all warm turns: no starts)."""
    from servesize.planning.ceilings import CeilingCache, cache_writes, contexts_of
    from servesize.workload.model import EmpiricalClass

    w = workload.replace(user=EmpiricalClass("user", lengths, prefix_tokens=512), invalidation=0.0, session_turns=0)
    return cache_writes(fixed, w, knobs, contexts_of(w, knobs, 0, CeilingCache()))[:2]


def test_a_request_writes_only_the_blocks_it_fills():
    """vLLM hashes a block into the prefix cache once it is full: a chat turn of 284 tokens and its 211-token reply
    (495 tokens) write 1,600 tokens where they fill a 1,600-token block and nothing where they end inside the
    block they began in. Qwen 3.6 27B on an H200 (1,600-token blocks, MTP drafts: a hit's last block is computed
    again, so a prompt's state is kept a block before its last full one)."""
    inputs, fixed = _27b("chat")
    w, knobs = inputs.workload, inputs.knobs
    assert fixed.block_size == 1600 and fixed.drops_hit_block and (w.warm_turn_tokens, w.output_tokens) == (284, 211)
    # 1,000 tokens: the previous prompt and reply (716) and this reply's end (1,211) lie in the first block
    assert _writes(fixed, w, knobs, [1000.0]) == (0.0, 0.0)
    # 1,500: the reply crosses the first block's end (1,711): one block, and the state at that boundary
    assert _writes(fixed, w, knobs, [1500.0]) == (1600.0, 1.0)
    # 5,000: cached up to 4,716 (2 blocks), the reply ends at 5,211 (3 blocks): one block; the prompt's state is
    # kept at block 2 (its last full block, 3, less the dropped one), which was cached: no state. It hits its two
    # cached blocks less the dropped one, and the state at that one's end
    assert _writes(fixed, w, knobs, [5000.0]) == (1600.0, 0.0)
    from servesize.planning.ceilings import CeilingCache, cache_writes, contexts_of
    from servesize.workload.model import EmpiricalClass

    one = w.replace(user=EmpiricalClass("user", [5000.0], prefix_tokens=512), invalidation=0.0, session_turns=0)
    assert cache_writes(fixed, one, knobs, contexts_of(one, knobs, 0, CeilingCache()))[2:] == (1600.0, 1.0)
    no_drafts = replace(fixed, drops_hit_block=False)
    assert _writes(no_drafts, w, knobs, [5000.0]) == (1600.0, 1.0)  # its state at block 3 is new
    # on 16-token blocks the same turn writes its 495 tokens to within a block
    tokens, _ = _writes(replace(fixed, block_size=16), w, knobs, [5000.0])
    assert tokens == 31 * 16 and abs(tokens - 495) < 16


def test_the_churn_counts_the_blocks_and_states_a_request_writes():
    """The churn bound's writes per request are the full blocks plus, on a hybrid model, each state kept (a block
    in each state group, in token-equivalents): on the 27B's chat, whose turns mostly end inside a block, under
    the raw 495 tokens a turn and its reply hold; on rag, whose prompts span several blocks, about the raw tokens."""
    from servesize.planning.ceilings import CeilingCache, cache_writes, churn_of, contexts_of
    from servesize.planning.inputs import knob_value

    for preset in ("chat", "rag"):
        inputs, fixed = _27b(preset)
        w, knobs = inputs.workload, inputs.knobs
        floor = float(knob_value(knobs, "decode_floor"))
        hybrid = churn_of(fixed, w, knobs, floor, None, CeilingCache())
        tokens, states = cache_writes(fixed, w, knobs, contexts_of(w, knobs, 0, CeilingCache()))[:2]
        state = fixed.state_bytes_rank / fixed.kv_bytes_per_token_rank
        assert hybrid.new_tokens_per_request == pytest.approx(tokens + states * state)
        plain = churn_of(replace(fixed, state_bytes_rank=0), w, knobs, floor, None, CeilingCache())
        assert plain.new_tokens_per_request == pytest.approx(tokens)
        raw = cache_writes(replace(fixed, block_size=1), w, knobs, contexts_of(w, knobs, 0, CeilingCache()))[0]
        if preset == "chat":
            assert tokens < 0.7 * raw and states < 0.2
        else:
            assert tokens == pytest.approx(raw, rel=0.1) and states > 1


def test_a_returning_turn_is_priced_at_its_sessions_prompt_and_holds_its_hits_through_its_pause():
    """rag's sessions are two requests, a first of about 5,700 tokens (its median context) and a second of at least
    that, its 211-token reply and another 5,190-token turn (Workload.session_start_tokens, as the session generator
    builds them): the second request hits the first's blocks beyond the shared prefix, and the pool holds them
    through its user's pause (Che's approximation: a block stays the characteristic time after its last access).
    cache.churn_occupancy = writes is the rule before, the writes alone."""
    from servesize.planning.ceilings import CeilingCache, cache_writes, churn_of, contexts_of
    from servesize.planning.inputs import knob_value

    inputs, fixed = _inputs("rag")
    w, knobs = inputs.workload, inputs.knobs
    assert (w.session_turns, w.warm_turn_tokens, w.output_tokens, w.user.prefix_tokens) == (2, 5190, 211, 512)
    writes = cache_writes(fixed, w, knobs, contexts_of(w, knobs, 0, CeilingCache()))
    returning = 1.0 - w.cold_shares()[1]  # half the requests: the second of each session
    own = writes.reread_tokens / returning
    assert 5_190 + 211 - 16 <= own <= 20_000  # at least the first request's turn and reply, in whole blocks
    assert writes.reread_states == pytest.approx(returning)  # every one hits (a plain model's states weigh nothing)
    floor = float(knob_value(knobs, "decode_floor"))
    held = churn_of(fixed, w, knobs, floor, None, CeilingCache())
    assert held.reread_tokens_per_request == writes.reread_tokens
    assert held.held_pause_s == pytest.approx(w.think_time_below_s(held.pause_s))
    before = replace(knobs, overrides=(*knobs.overrides, ("cache.churn_occupancy", "writes")))
    alone = churn_of(fixed, w, before, floor, None, CeilingCache())
    assert alone.reread_tokens_per_request == 0 and alone.users == pytest.approx(
        alone.pool_tokens / (alone.requests_per_user_s * alone.new_tokens_per_request * alone.pause_s))
    assert held.users < 0.9 * alone.users
    bad = replace(knobs, overrides=(*knobs.overrides, ("cache.churn_occupancy", "forever")))
    with pytest.raises(BadInput, match="cache.churn_occupancy"):
        churn_of(fixed, w, bad, floor, None, CeilingCache())


def test_below_the_bound_the_pool_evicts_the_turns_whose_pause_outlasts_its_characteristic_time():
    """Che's approximation at a load (planning.lru Evictions): T_C(N) solves pool = N x rate x (new x T + re-read x
    E[min(pause, T)]), and P(pause > T_C) of the returning turns find their session evicted."""
    from servesize.planning.lru import Evictions, characteristic_time_s
    from servesize.workload.presets import preset

    w = preset("coding-agent").workload().replace(think_time_s=40.0, think_time_sigma=None)  # exponential pauses
    writes = churn_bound(1_000_000, 5_000, 0.01, w.think_time_quantile_s(0.95), 95.0)
    # writes alone: T_C = pool / (N x rate x new), closed form; the share e^(-T / 40)
    for n in (5, 20, 50):
        t = 1_000_000 / (n * 0.01 * 5_000)
        assert characteristic_time_s(writes, n, w.think_time_below_s, w.think_time_exceeds) == pytest.approx(t, rel=1e-9)
        assert Evictions(writes, w).share(n) == pytest.approx(math.exp(-t / 40.0), rel=1e-9)
    # at the bound itself the p95 pause is T_C: 5% of the returning turns are evicted
    assert Evictions(writes, w).share(writes.users) == pytest.approx(0.05, rel=1e-6)
    # holding the hit blocks through the pause as well shortens T_C, and more users evict more
    held = churn_bound(1_000_000, 5_000, 0.01, w.think_time_quantile_s(0.95), 95.0, reread_tokens_per_request=20_000,
                       held_pause_s=w.think_time_below_s(w.think_time_quantile_s(0.95)))
    t = characteristic_time_s(held, 20, w.think_time_below_s, w.think_time_exceeds)
    assert 20 * 0.01 * (5_000 * t + 20_000 * w.think_time_below_s(t)) == pytest.approx(1_000_000, rel=1e-9)
    shares = [Evictions(held, w).share(n) for n in (5, 10, 20, 40)]
    assert shares == sorted(shares) and shares[0] < shares[-1]
    assert Evictions(held, w).share(held.users) == pytest.approx(0.05, rel=1e-6)
    # no turn returns: nothing evicted
    assert Evictions(churn_bound(1_000_000, 5_000, 0.01, 300.0, 95.0, returning=False), w).share(100) == 0.0
