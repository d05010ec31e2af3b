"""Warm capacity: worked examples, then the seed's published figures (quoted with their URLs in tests/fixtures/seeds.json).

Pools are written as the seed computes them (2.4-2.5): per GPU V = 141e9 B, the calibrated
reserve R = 19,308,875,468.8 B, weights 28.8 GiB (27B) or 35.5e9 B (35B-A3B). The seed's own
RNG stream is not reproduced, so figures are checked within 3 users of Monte-Carlo noise.
"""

from collections import OrderedDict

import numpy as np
import pytest

from servesize.errors import BadInput
from servesize.planning.warm_capacity import DEFAULT_PCIE_BYTES_PER_S, warm_capacity
from servesize.render.text import render_text
from servesize.workload.model import EmpiricalClass, SessionClass, Workload

GiB = 2**30
V_H200 = 141e9
RESERVE = 19_308_875_468.8
W_27B = 28.8 * GiB
W_35B = 35.5e9
KV_27B_FP8 = 32_768          # 16 attention layers x 4 KV heads x 256 x 2 (K, V) x 1 B
STATE_27B = 78_643_200       # 75 MiB per session
KV_35B_FP8 = 10_240          # 10 x 2 x 256 x 2 x 1 B
STATE_35B = 33_423_360       # 30 x (32*128*128 + 4*8192) x 2 B
POOL_27B_FP8 = (V_H200 - W_27B - RESERVE) / KV_27B_FP8
POOL_35B_FP8 = (V_H200 - W_35B - RESERVE) / KV_35B_FP8
NOISE = 3


def fixed(length, prefix=0, **kw):
    """A workload whose every session is exactly ``length`` tokens: counts become arithmetic."""
    return Workload(EmpiricalClass("user", [length], prefix_tokens=prefix), **{"invalidation": 0.0, **kw})


# --- worked examples -------------------------------------------------------------------------

def test_a_pool_holds_pool_over_session_sessions_and_ties_fit():
    wc = warm_capacity(fixed(10_000), 100_000, 1_000, fills=20, draws=50)
    assert wc.sessions.p5 == wc.sessions.p50 == wc.sessions.p95 == 100_000 // 10_000
    assert wc.users.p50 == wc.gpu_resident.p50 == 10 and wc.cpu_offloaded.p50 == 0


def test_each_session_is_charged_its_state_as_token_equivalents():
    state_bytes = 2_000_000                         # = 2,000 tokens at 1,000 B/token
    wc = warm_capacity(fixed(10_000), 100_000, 1_000, state_bytes, fills=10, draws=50)
    assert wc.sessions.p50 == 100_000 // (10_000 + 2_000)


def test_the_shared_prefix_is_reserved_once_and_not_charged_per_session():
    wc = warm_capacity(fixed(10_000, prefix=4_000), 100_000, 1_000, fills=10, draws=50)
    assert wc.sessions.p50 == (100_000 - 4_000) // (10_000 - 4_000)


def test_cold_sessions_occupy_their_full_length_and_never_count_warm():
    wc = warm_capacity(fixed(10_000, prefix=4_000, invalidation=1.0), 100_000, 1_000, fills=10, draws=50)
    assert wc.sessions.p95 == 0


def test_cpu_offload_holds_the_next_sessions_at_unique_times_b_plus_s_bytes():
    b, s = 1_000, 2_000_000
    ram = 5 * (10_000 * b + s) + 4_000 * b            # five more sessions after the reserved prefix bytes
    wc = warm_capacity(fixed(14_000, prefix=4_000), 4_000 + 4 * 12_000, b, s, cpu_offload_bytes=ram, fills=10, draws=50,
                       offload_tier="additive")
    assert wc.gpu_resident.p50 == 4
    assert wc.cpu_offloaded.p50 == 5
    assert wc.sessions.p50 == 4 + 5
    assert wc.restore["seconds_per_100k_tokens"] == pytest.approx(100_000 * b / DEFAULT_PCIE_BYTES_PER_S)
    assert wc.restore["median_session_seconds"] == pytest.approx((10_000 * b + s) / DEFAULT_PCIE_BYTES_PER_S)


def test_the_warm_users_split_into_gpu_kv_and_host_ram_only_on_the_inclusive_tier():
    b = 1_000
    ram = 9 * 10_000 * b + 4_000 * b                  # host RAM keeps nine sessions after the reserved prefix
    wc = warm_capacity(fixed(14_000, prefix=4_000), 4_000 + 4 * 10_000, b, cpu_offload_bytes=ram, fills=10, draws=50)
    assert wc.users.p50 == 9                          # inclusive: RAM holds a copy of the 4 in HBM too
    assert wc.users_gpu_resident.p50 == 4
    assert wc.users_cpu_offloaded.p50 == 9 - 4
    assert wc.to_dict()["users_cpu_offloaded"]["p5"] == 5


def test_the_users_split_is_one_fills_so_its_two_tiers_add_up_to_that_fills_users():
    wl = Workload.seed_reference()
    wc = warm_capacity(wl, POOL_35B_FP8 / 4, KV_35B_FP8, STATE_35B, cpu_offload_bytes=64 * GiB, fills=200)
    for q in ("p5", "p50", "p95"):
        gpu, ram = getattr(wc.users_gpu_resident, q), getattr(wc.users_cpu_offloaded, q)
        assert ram > 0 and gpu > 0
        assert gpu + ram == pytest.approx(getattr(wc.users, q), abs=1)   # nearest rank vs interpolated percentile


def test_the_restore_is_priced_over_the_host_link_given_at_its_efficiency_per_tp_rank():
    from servesize.planning.warm_capacity import HostLink

    b, s = 1_000, 2_000_000
    link = HostLink("PCIe Gen4 x16", 32e9, 0.78, 2, "a test link")
    wc = warm_capacity(fixed(14_000, prefix=4_000), 4_000 + 4 * 12_000, b, s, cpu_offload_bytes=10**9, fills=10,
                       draws=50, host_link=link)
    rate = 32e9 * 0.78 * 2
    assert wc.restore["pcie_bytes_per_s"] == pytest.approx(rate)
    assert wc.restore["median_session_seconds"] == pytest.approx((10_000 * b + s) / rate)
    assert wc.restore["link"] == "PCIe Gen4 x16" and wc.restore["link_source"] == "a test link"
    assert not wc.restore["pcie_assumed"]
    assert "pcie_bytes_per_s = host_link_bytes_per_s × host_link_efficiency × tp_ranks" in wc.explain()


def test_a_fill_that_does_not_exhaust_its_draws_grows_them_instead_of_raising():
    wc = warm_capacity(fixed(1_000), 500_000, 1_000, fills=4, draws=16)
    assert wc.sessions.p50 == 500_000 // 1_000
    assert wc.draws_used >= 501 and wc.draws_requested == 16


def test_sticky_data_parallel_is_replicas_times_one_replica():
    wl = Workload.seed_reference()
    one = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=300)
    dp = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, replicas=2, fills=300)
    assert dp.routing == "sticky"
    assert dp.users.p50 == 2 * one.users.p50 and dp.per_replica["users"] == one.users


def test_random_routing_keeps_only_one_replicas_worth_warm():
    wl = Workload.seed_reference()
    one = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=300)
    dp = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, replicas=4, sticky_routing=False, fills=300)
    assert dp.routing == "random"
    assert dp.users == one.users
    assert dp.sticky_population_hit_rate_bound == 1 / 4
    assert "random routing" in render_text(dp)


def test_an_inclusive_cpu_tier_keeps_the_most_recent_sessions_whether_or_not_they_are_in_hbm():
    """vLLM's offloading connector copies every computed block to host RAM: RAM sized for nine
    sessions keeps nine warm, four of them also in HBM (not 4 + 9)."""
    b, s = 1_000, 2_000_000
    ram = 9 * (10_000 * b + s) + 4_000 * b
    wc = warm_capacity(fixed(14_000, prefix=4_000), 4_000 + 4 * 12_000, b, s, cpu_offload_bytes=ram, fills=10, draws=50)
    assert wc.gpu_resident.p50 == 4
    assert wc.sessions.p50 == 9
    assert wc.cpu_offloaded.p50 == 9 - 4


def test_a_pool_of_zero_holds_nothing_even_with_offload():
    wc = warm_capacity(Workload.seed_reference(), 0, KV_27B_FP8, STATE_27B, cpu_offload_bytes=100 * GiB, fills=10)
    assert wc.sessions.p95 == 0


def test_the_same_seed_gives_the_same_result():
    wl = Workload.seed_reference()
    a = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=200, seed=5)
    b = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=200, seed=5)
    assert a.to_dict() == b.to_dict()


def test_a_shared_bank_a_small_memory_bound_and_a_fresh_bank_give_the_same_result():
    from servesize.workload.draws import RandomBank
    wl = Workload.seed_reference()
    fresh = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=400, seed=3)
    bank = RandomBank(3)
    warm_capacity(wl.replace(invalidation=0.2), POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=600, seed=3, bank=bank)
    shared = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=400, seed=3, bank=bank)
    bounded = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=400, seed=3,
                            bank=RandomBank(3, cache_cells=1))   # every block drawn again, none kept
    assert fresh.to_dict() == shared.to_dict() == bounded.to_dict()


def test_a_bank_for_another_seed_is_refused():
    from servesize.workload.draws import RandomBank
    with pytest.raises(BadInput, match="another seed"):
        warm_capacity(Workload.seed_reference(), 1e6, 1000, fills=10, seed=1, bank=RandomBank(2))


@pytest.mark.parametrize("kwargs", [dict(kv_bytes_per_token=0), dict(replicas=0), dict(fills=0),
                                    dict(pool_tokens=float("nan")), dict(state_bytes_per_session=-1)])
def test_bad_arguments_are_refused(kwargs):
    args = dict(pool_tokens=1e6, kv_bytes_per_token=1000)
    args.update(kwargs)
    with pytest.raises(BadInput):
        warm_capacity(Workload.seed_reference(), **args)


def test_the_result_explains_itself_and_serialises():
    wc = warm_capacity(Workload.seed_reference(), POOL_27B_FP8, KV_27B_FP8, STATE_27B, fills=100)
    d = wc.to_dict()
    assert set(d["users"]) == {"p5", "p50", "p95"} and d["routing"] == "single"
    text = render_text(wc, explain=True)
    assert "state_tokens_per_session = state_bytes_per_session / kv_bytes_per_token" in text
    assert "gpu_budget_tokens" in text and "assumptions:" in text


# --- the seed's figures ------------------------------------------------------------------------

def test_the_seed_pool_is_the_calibrated_2_77m_tokens():
    assert POOL_27B_FP8 == pytest.approx(2_770_000)


def test_27b_fp8_on_one_h200_keeps_86_users_warm_at_p50_and_69_at_p5():
    wc = warm_capacity(Workload.seed_reference(), POOL_27B_FP8, KV_27B_FP8, STATE_27B)
    assert wc.users.p50 == pytest.approx(86, abs=NOISE)
    assert wc.users.p5 == pytest.approx(69, abs=NOISE)
    assert wc.sessions.p50 == pytest.approx(94, abs=NOISE)


def test_fp16_kv_halves_the_pool_to_45_warm_users():
    kv = 2 * KV_27B_FP8
    wc = warm_capacity(Workload.seed_reference(), (V_H200 - W_27B - RESERVE) / kv, kv, STATE_27B)
    assert wc.users.p50 == pytest.approx(45, abs=NOISE)


def test_tp2_keeps_202_users_warm_at_p50_and_177_at_p5():
    pool = (2 * V_H200 - W_27B - 2 * RESERVE) / KV_27B_FP8
    wc = warm_capacity(Workload.seed_reference(), pool, KV_27B_FP8, STATE_27B)
    assert wc.users.p50 == pytest.approx(202, abs=NOISE)
    assert wc.users.p5 == pytest.approx(177, abs=NOISE)


@pytest.mark.parametrize("median, p50, p5", [(31_000, 86, 69), (45_000, 56, 45), (60_000, 42, 34),
                                             (80_000, 33, 27), (100_000, 28, 23), (140_000, 23, 19)])
def test_the_median_context_table(median, p50, p5):
    wl = Workload.seed_reference()
    wl = wl.replace(user=SessionClass("user", median, 0.81, 15_000))
    wc = warm_capacity(wl, POOL_27B_FP8, KV_27B_FP8, STATE_27B)
    assert wc.users.p50 == pytest.approx(p50, abs=NOISE)
    assert wc.users.p5 == pytest.approx(p5, abs=NOISE)


@pytest.mark.parametrize("prefix, sessions_p50", [(3_000, 209), (15_000, 280), (30_000, 399)])
def test_a_bigger_shared_prefix_raises_warm_sessions_on_the_moe_sibling(prefix, sessions_p50):
    # tables.py "System-prompt sweep, warm p50": which="all", i.e. warm sessions of every class, p50
    wl = Workload.seed_reference()
    wl = wl.replace(user=SessionClass("user", 31_000, 0.81, prefix))
    wc = warm_capacity(wl, POOL_35B_FP8, KV_35B_FP8, STATE_35B)
    assert wc.sessions.p50 == pytest.approx(sessions_p50, abs=NOISE)


def test_600_gib_of_cpu_offload_holds_about_2400_moe_sessions():
    # the seed: 2294 / 2382 / 2469 (n_iter 400, draw 10,000); 600 GiB is one engine's buffer
    wc = warm_capacity(Workload.seed_reference(), POOL_35B_FP8, KV_35B_FP8, STATE_35B,
                       cpu_offload_bytes=600 * GiB, fills=400, offload_tier="additive")  # the seed's tier model
    assert wc.sessions.p50 == pytest.approx(2382, rel=0.01)
    assert wc.sessions.p5 == pytest.approx(2294, rel=0.01)
    assert wc.draws_used > 2000          # 2,000 draws would be censored: grown, not raised
    assert wc.cpu_offloaded.p50 > 7 * wc.gpu_resident.p50
    assert wc.restore is not None and wc.restore["seconds_per_100k_tokens"] > 0


def lru_hit_rate(users, capacity, replicas, cycles=40, seed=0):
    """Equal-size sessions, one request per user per cycle in random order, random replica per request."""
    rng = np.random.default_rng(seed)
    caches = [OrderedDict() for _ in range(replicas)]
    hits = total = 0
    for cycle in range(cycles):
        for user in rng.permutation(users):
            cache = caches[rng.integers(replicas)]
            hit = user in cache
            if hit:
                cache.move_to_end(user)
            else:
                cache[user] = True
                if len(cache) > capacity:
                    cache.popitem(last=False)
            if cycle >= cycles // 2:
                hits, total = hits + hit, total + 1
    return hits / total


@pytest.mark.parametrize("replicas", [2, 4])
def test_random_routing_model_agrees_with_an_lru_simulation(replicas):
    # the model's two claims: one replica's worth (K) stays fully warm; a sticky-sized load
    # (replicas x K) hits at most 1/replicas of the time
    capacity = 40
    assert lru_hit_rate(capacity, capacity, replicas) >= 0.99     # the rest: first visits to a replica
    assert lru_hit_rate(replicas * capacity, capacity, replicas) <= 1 / replicas
