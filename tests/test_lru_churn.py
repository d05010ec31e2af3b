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


def test_a_hybrid_models_requests_also_write_their_state_where_their_prompt_fills_a_block():
    """Qwen 3.6 27B caches a request's recurrent state at its prompt's last full block (1,600-token blocks on an
    H200): the churn's writes per request are the plain model's plus the state, times the share of prompts
    that fill a block (short chat prompts write none)."""
    from servesize.api import plan_inputs
    from servesize.planning.ceilings import churn_of
    from servesize.planning.inputs import knob_value
    from servesize.scenario import Scenario

    for preset in ("chat", "rag"):
        inputs = plan_inputs(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8",
                                      preset=preset))
        fixed = inputs.memory_and_fixed()[1]
        assert fixed.state_bytes_rank > 0 and fixed.block_size == 1600
        floor = float(knob_value(inputs.knobs, "decode_floor"))
        hybrid = churn_of(fixed, inputs.workload, inputs.knobs, floor, None)
        plain = churn_of(replace(fixed, state_bytes_rank=0), inputs.workload, inputs.knobs, floor, None)
        share = inputs.workload.share_at_least(1600)
        state = fixed.state_bytes_rank / fixed.kv_bytes_per_token_rank
        assert hybrid.new_tokens_per_request == pytest.approx(plain.new_tokens_per_request + share * state)
        assert (0.2 < share < 0.5) if preset == "chat" else share > 0.99  # median 1,020 tokens; 5,700
