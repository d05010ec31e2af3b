"""The exact simulator, on traces small enough to work out by hand (16-token blocks throughout)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tracebuild import make_trace

from servesize.errors import BadInput
from servesize.simulate.cache import CacheConfig, RecordedService, ServiceTimes, replay_exact
from servesize.simulate.replay import ReplayOptions, build_replay

B = 16


def exact(trace, num_blocks, *, service=None, outputs=False, max_num_seqs=None, warmup=0.0):
    rp = build_replay(trace, ReplayOptions(warmup=warmup, align="trace"))
    svc = RecordedService(rp.service_s) if service == "trace" else ServiceTimes()
    return rp, replay_exact(rp, CacheConfig(num_blocks, B, output_blocks=outputs, max_num_seqs=max_num_seqs), svc)


def test_a_growing_session_hits_its_longest_cached_prefix_and_never_its_last_token():
    # r0: 40 tokens = blocks A B + 8 tokens; r1 and r2: 72 tokens = A B C D + 8; r3: 64 tokens = A B C D exactly
    trace = make_trace([("s", 0, 40, [1, 2, 3], 0), ("s", 1, 72, [1, 2, 4, 5, 6], 0), ("s", 2, 72, [1, 2, 4, 5, 6], 0),
                        ("s", 3, 64, [1, 2, 4, 5], 0)])
    _, res = exact(trace, num_blocks=10)
    # r0 nothing; r1 A B (C D are new); r2 A B C D; r3 at most (64 - 1) // 16 = 3 blocks: its last token is recomputed
    assert res.hit_tokens.tolist() == [0, 2 * B, 4 * B, 3 * B]
    assert res.token_hit_rate == pytest.approx((2 + 4 + 3) * B / (40 + 72 + 72 + 64))
    assert res.ideal_tokens.tolist() == res.hit_tokens.tolist()  # the pool is large enough: nothing was evicted
    assert res.request_hit_rate == pytest.approx(3 / 4)


def cyclic(n_prompts: int, full_blocks: int, rounds: int):
    """n prompts of ``full_blocks`` blocks + 3 tokens, sent in turn, ``rounds`` times (the seed's worst case)."""
    rows, t = [], 0
    for _ in range(rounds):
        for j in range(n_prompts):
            rows.append((f"p{j}", t, full_blocks * B + 3, [1000 * j + k for k in range(full_blocks + 1)], 0))
            t += 1
    return make_trace(rows)


@pytest.mark.parametrize("n", [3, 10])
def test_n_prompts_cycling_through_a_pool_that_holds_n_minus_one_never_hit(n):
    full, rounds = 4, 5
    trace = cyclic(n, full, rounds)
    # the pool holds (n - 1) prompts' blocks, plus vLLM's null block and the block a partial tail takes first
    _, res = exact(trace, num_blocks=(n - 1) * full + 2)
    assert res.token_hit_rate == 0.0
    assert res.evictions > 0


def test_one_block_more_than_the_collapse_keeps_every_prompt_after_its_first_round():
    n, full, rounds = 10, 4, 5
    _, res = exact(cyclic(n, full, rounds), num_blocks=n * full + 2)
    expected = (rounds - 1) * n * full * B / (rounds * n * (full * B + 3))
    assert res.token_hit_rate == pytest.approx(expected)
    assert res.evictions == 0


def test_a_finished_request_releases_its_tail_first_so_its_head_survives_eviction():
    # 5 usable blocks. r0 = A B C D + tail (5 blocks), r1 another prompt of 2 blocks + tail: it takes r0's freed
    # partial block and evicts two cached blocks, which must be D and C (released first), not A and B
    trace = make_trace([("a", 0, 4 * B + 5, [1, 2, 3, 4, 5], 0), ("b", 1, 2 * B + 5, [11, 12, 13], 0),
                        ("a", 2, 4 * B + 5, [1, 2, 3, 4, 5], 0)])
    _, res = exact(trace, num_blocks=6)
    assert res.hit_tokens.tolist() == [0, 0, 2 * B]
    # r1 evicted D and C; the third request then needs C, D and a tail: r1's freed tail, then two of r1's blocks
    assert res.evictions == 2 + 2


def test_blocks_of_a_running_request_are_pinned_and_a_request_that_does_not_fit_waits_its_turn():
    # 5 usable blocks; r0 (3 blocks + tail = 4) runs from t=0 to t=10; r1 at t=1 needs 3 blocks, only 1 is free
    rows = [("a", 0, 3 * B + 5, [1, 2, 3, 4], 0, 10.0), ("b", 1, 2 * B + 5, [11, 12, 13], 0, 1.0),
            ("a", 20, 3 * B + 5, [1, 2, 3, 4], 0, 1.0)]
    _, res = exact(make_trace(rows), num_blocks=6, service="trace")
    assert res.admitted_s.tolist() == [0.0, 10.0, 20.0]
    assert res.waits == 1
    assert res.peak_pinned_blocks == 4
    # r1 took the two empty blocks and evicted r0's tail block C: r0's prompt later finds A B only
    assert res.hit_tokens.tolist() == [0, 0, 2 * B]


def test_without_service_times_nothing_overlaps_so_nothing_waits():
    rows = [("a", 0, 3 * B + 5, [1, 2, 3, 4], 0, 10.0), ("b", 1, 2 * B + 5, [11, 12, 13], 0, 1.0)]
    _, res = exact(make_trace(rows), num_blocks=6)
    assert res.waits == 0 and math.isclose(res.admitted_s[1], 1.0)


def test_max_num_seqs_makes_a_second_request_wait_even_with_blocks_to_spare():
    rows = [("a", 0, B + 5, [1, 2], 0, 5.0), ("b", 1, B + 5, [11, 12], 0, 5.0)]
    _, res = exact(make_trace(rows), num_blocks=100, service="trace", max_num_seqs=1)
    assert res.admitted_s.tolist() == [0.0, 5.0]


def test_a_request_larger_than_the_pool_is_counted_and_does_not_block_the_others():
    rows = [("a", 0, 10 * B + 5, list(range(11)), 0), ("b", 1, B + 5, [100, 101], 0)]
    _, res = exact(make_trace(rows), num_blocks=6)
    assert res.too_large == 1
    assert np.isnan(res.admitted_s[0]) and res.admitted_s[1] == 1.0


def test_a_running_requests_output_takes_blocks_and_its_full_output_blocks_stay_cached():
    # 4 usable blocks. r0 = A + 5 tokens with 40 output tokens: ceil(61 / 16) = 4 blocks while it runs, of which
    # (16 + 5 + 40) // 16 - 1 = 2 fill with output and are cached (under ids no prompt names) when it ends
    rows = [("a", 0, B + 5, [1, 2], 40, 10.0), ("b", 1, B + 5, [11, 12], 0, 1.0), ("a", 20, B + 5, [1, 2], 0, 1.0)]
    _, with_outputs = exact(make_trace(rows), num_blocks=5, outputs=True, service="trace")
    _, without = exact(make_trace(rows), num_blocks=5, outputs=False, service="trace")
    # with outputs r0 holds the whole pool: r1 waits for it; without, r1 fits beside it
    assert with_outputs.admitted_s.tolist()[:2] == [0.0, 10.0]
    assert without.admitted_s.tolist()[:2] == [0.0, 1.0]
    # r1 (2 blocks) then takes r0's freed tail and evicts the last output block (released first, evicted first)
    assert (with_outputs.evictions, without.evictions) == (1, 0)
    assert with_outputs.hit_tokens[2] == without.hit_tokens[2] == B


def test_a_pool_needs_the_null_block_and_one_more():
    with pytest.raises(BadInput):
        CacheConfig(1, B)
    assert CacheConfig(3, B).tokens == 2 * B


def test_the_warm_up_window_leaves_the_first_requests_uncounted():
    trace = cyclic(3, 2, 2)  # 6 requests: the first round misses, the second hits
    _, res = exact(trace, num_blocks=100, warmup=0.5)
    assert res.token_hit_rate == pytest.approx(2 * B / (2 * B + 3))
    assert res.warm_request_rate == 1.0
