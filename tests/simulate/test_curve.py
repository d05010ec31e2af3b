"""The one-pass curve against the exact simulator, and the FIFO / LRU / Belady bounds on a worked sequence."""

from __future__ import annotations

import numpy as np
import pytest
from tracebuild import make_trace

from servesize.simulate.cache import CacheConfig, replay_exact
from servesize.simulate.curve import POOL_OVERHEAD_BLOCKS, belady_hit_blocks, fifo_hit_blocks, lru_curve
from servesize.simulate.replay import ReplayOptions, build_replay
from servesize.simulate.traces import PrefixChains

B = 16


def random_trace(seed: int, sessions: int = 12, requests: int = 120):
    """Sessions that grow (a shared prefix, then their own history), sometimes restart, interleaved in time.
    Prompt and prompt + output lengths are never whole blocks, so every request has a partial tail."""
    rng = np.random.default_rng(seed)
    chains = PrefixChains(B)
    size = {s: int(rng.integers(20, 200)) for s in range(sessions)}
    rows = []
    for k in range(requests):
        s = int(rng.integers(sessions))
        size[s] += int(rng.integers(1, 120))
        tokens = size[s] + (1 if size[s] % B == 0 else 0)
        out = int(rng.integers(0, 50))
        if (tokens + out) % B == 0:
            out += 1
        restart = bool(rng.random() < 0.05)
        ids = chains.ids(s, tokens, shared="system", shared_tokens=64, restart=restart)
        rows.append((s, k, tokens, ids, out))
    return make_trace(rows, block_size=B)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("outputs", [False, True])
def test_the_one_pass_curve_equals_the_exact_simulator_when_nothing_is_pinned(seed, outputs):
    replay = build_replay(random_trace(seed), ReplayOptions(warmup=0.25, align="trace"))
    curve = lru_curve(replay, output_blocks=outputs)
    smallest = curve.smallest_pool  # below it vLLM cannot admit the largest request at all
    for num_blocks in (smallest, smallest + 7, 2 * smallest, 400):
        res = replay_exact(replay, CacheConfig(num_blocks, B, output_blocks=outputs))
        cap = curve.capacity_of_pool(num_blocks)
        assert int(res.hit_tokens[replay.measured_from:].sum()) == int(curve.hit_blocks(cap)) * B, num_blocks
        assert res.warm_request_rate == pytest.approx(float(curve.warm_request_rate(cap)))
        assert res.request_hit_rate == pytest.approx(float(curve.request_hit_rate(cap)))
    assert curve.ideal_token_hit_rate == pytest.approx(res.ideal_token_hit_rate)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_probed_block_is_held_exactly_at_capacities_above_its_distance(seed):
    # the first block past the 64-token shared prefix (block 4): the exact simulator hits it at a pool whose
    # LRU capacity is above the probe's distance, and misses it at one at or below it
    replay = build_replay(random_trace(seed), ReplayOptions(warmup=0.0, align="trace"))
    depth = 64 // B
    curve = lru_curve(replay, probe_depth=depth)
    assert curve.probe_requests.size > 20 and np.all(curve.probe_seen > depth)
    checked = set()
    for num_blocks in (curve.smallest_pool, curve.smallest_pool + 9, 2 * curve.smallest_pool, 400):
        res = replay_exact(replay, CacheConfig(num_blocks, B))
        cap = int(curve.capacity_of_pool(num_blocks))
        held = res.hit_tokens[curve.probe_requests] > depth * B
        assert np.array_equal(held, cap > curve.probe_distances), num_blocks
        checked.update(bool(h) for h in held)
    assert checked == {True, False}  # both sides of the rule were seen
    # a request whose block past the prefix no earlier request used is not probed
    assert not np.any(lru_curve(replay, probe_depth=10_000).probe_requests.size)


def test_below_the_smallest_pool_the_exact_replay_counts_the_requests_vllm_could_not_admit():
    replay = build_replay(random_trace(0), ReplayOptions(warmup=0.0, align="trace"))
    curve = lru_curve(replay, output_blocks=False)
    blocks = -(-replay.input_tokens // B)
    assert curve.smallest_pool == int(blocks.max()) + 1
    res = replay_exact(replay, CacheConfig(curve.smallest_pool - 10, B, output_blocks=False))
    assert res.too_large == int(np.count_nonzero(blocks > curve.smallest_pool - 11))


def single_blocks(sequence: str):
    """One request per letter: one full block named by the letter, plus one token (so it may hit that block)."""
    return make_trace([(f"s{k}", k, B + 1, [ord(c), 1000 + k], 0) for k, c in enumerate(sequence)])


@pytest.mark.parametrize("capacity, lru, fifo, belady", [
    # A B C A B D A B with room for 2: LRU and FIFO keep evicting what comes next; the optimum keeps A and B
    (2, 0, 0, 4),
    # room for 3: LRU keeps A B when D comes (C is older); FIFO evicts A then B; the optimum drops C, never used again
    (3, 4, 2, 4),
])
def test_lru_fifo_and_belady_on_the_textbook_sequence(capacity, lru, fifo, belady):
    replay = build_replay(single_blocks("ABCABDAB"), ReplayOptions(warmup=0.0, align="trace"))
    curve = lru_curve(replay, output_blocks=False)
    assert int(curve.hit_blocks(capacity)) == lru
    assert fifo_hit_blocks(replay, capacity, output_blocks=False) == fifo
    assert belady_hit_blocks(replay, capacity, output_blocks=False) == belady
    exact = replay_exact(replay, CacheConfig(capacity + POOL_OVERHEAD_BLOCKS, B, output_blocks=False))
    assert int(exact.hit_tokens.sum()) == lru * B


def test_the_curve_shows_the_cyclic_collapse_one_block_below_the_working_set():
    n, full, rounds = 10, 4, 5
    rows, t = [], 0
    for _ in range(rounds):
        for j in range(n):
            rows.append((f"p{j}", t, full * B + 3, [100 * j + k for k in range(full + 1)], 0))
            t += 1
    curve = lru_curve(build_replay(make_trace(rows), ReplayOptions(warmup=0.0, align="trace")), output_blocks=False)
    working_set = n * full
    per_round = (rounds - 1) / rounds / (full * B + 3)
    # room for n - 1 prompts: each prompt's blocks were all evicted when it comes round again
    assert float(curve.token_hit_rate(working_set - full)) == 0.0
    # one block short: released tail first, each prompt loses only its last block
    assert float(curve.token_hit_rate(working_set - 1)) == pytest.approx((full - 1) * B * per_round)
    assert float(curve.token_hit_rate(working_set)) == pytest.approx(full * B * per_round)
    assert curve.pool_for(float(curve.token_hit_rate(working_set))) == working_set + POOL_OVERHEAD_BLOCKS


def test_belady_is_never_below_lru_nor_fifo_on_random_sessions():
    replay = build_replay(random_trace(7), ReplayOptions(warmup=0.0, align="trace"))
    curve = lru_curve(replay, output_blocks=False)
    for capacity in (5, 20, 80):
        best = belady_hit_blocks(replay, capacity, output_blocks=False)
        assert best >= int(curve.hit_blocks(capacity))
        assert best >= fifo_hit_blocks(replay, capacity, output_blocks=False)


def test_the_curve_never_falls_as_the_pool_grows_and_ends_at_the_unbounded_rate():
    curve = lru_curve(build_replay(random_trace(3), ReplayOptions(align="trace")))
    blocks = curve.grid(100)
    rates = curve.at_pool(blocks)
    assert np.all(np.diff(rates) >= 0)
    assert rates[-1] == pytest.approx(curve.ideal_token_hit_rate)


def test_a_hash_id_reused_at_another_depth_ends_the_match_instead_of_looping(tmp_path):
    """A Mooncake id names one prefix; a trace that reuses id 1 at depth 0 after seeing it at depth 1 made the
    one-pass curve loop forever, growing (20 GB in 60 s from three lines, found by the trace fuzz run)."""
    import json

    from servesize.cli import main

    path = tmp_path / "reused.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in [
        {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 1, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}]))
    assert main(["simulate", str(path), "--pool-tokens", "1M", "--quiet", "--no-bounds", "--no-exact"]) == 0
