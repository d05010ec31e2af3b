"""The load model behind the decode and latency ceilings (issue 17, item 1).

- decode: a user decodes only part of each think -> TTFT -> decode cycle, so the decoders at a moment
  are ~Binomial(users, duty); the ceiling is the most users whose p95 of decoders meets the floor;
- latency: a budget that one cold prefill exceeds is reported as the share of turns that miss it,
  and the ceiling binds on queueing (warm turns), never as zero users.
"""

from __future__ import annotations

import json
import math

import pytest

import servesize as s
from servesize.cli import main
from servesize.planning.latency import service_moments, ttft_s
from servesize.planning.load import binomial_quantile, decode_load
from servesize.workload.catalogue import preset_names

FAST = ["--no-sensitivity", "--fills", "200"]
CHAT_70B = ["llama-3.3-70b", "--gpus", "8xA100-40GB", "-tp", "8", "--preset", "chat"]
LONG_27B = ["qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--median", "140k"]


def plan_json(capsys, *argv):
    code = main(["plan", *argv, *FAST, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


# -- the binomial and the search ---------------------------------------------------------------------

@pytest.mark.parametrize("trials, p, q", [(1, 0.3, 0.95), (10, 0.5, 0.95), (40, 0.05, 0.95), (200, 0.2, 0.5),
                                          (7, 0.999, 0.95), (300, 1e-4, 0.95)])
def test_the_binomial_quantile_is_the_first_k_whose_exact_cdf_reaches_q(trials, p, q):
    cdf, k = 0.0, 0
    while True:
        cdf += math.comb(trials, k) * p**k * (1 - p) ** (trials - k)
        if cdf >= q - 1e-12:
            break
        k += 1
    assert binomial_quantile(trials, p, q, trials) == k
    assert binomial_quantile(trials, p, q, k - 1) == k if k > 0 else True  # past ``upto``: upto + 1


def test_the_decode_load_meets_the_floor_at_its_users_and_not_one_more():
    # a toy replica: per-user speed 4,000 / (B + 39) tok/s (100 alone); the 40 tok/s floor allows 61 decoders
    def speed(b):
        return 4000.0 / (b + 39.0)

    assert speed(61) >= 40 > speed(62)

    load = decode_load(61, speed, output_tokens=500, think_s=60.0, ttft_s=1.0, streams_per_user=1.0, percentile=0.95)
    n = load.users

    def p95_and_fixed_point(users):
        b = 1
        while True:
            d = (500 / speed(b)) / (61.0 + 500 / speed(b))
            bp = binomial_quantile(users, d, 0.95, 10**6)
            if bp <= b:
                return bp
            b = bp

    assert p95_and_fixed_point(n) <= 61 < p95_and_fixed_point(n + 1)
    assert load.decoders_at_percentile == p95_and_fixed_point(n)
    assert n > 61  # users think most of the time: more users than decoders


def test_every_user_decoding_at_once_is_the_limit_of_no_think_time():
    load = decode_load(36, lambda b: 40.0, output_tokens=200, think_s=0.0, ttft_s=0.0, streams_per_user=1.0,
                       percentile=0.95)
    assert load.duty == 1.0 and load.users == 36


# -- the decode ceiling on the deployment -----------------------------------------------------

def test_the_decode_ceiling_moves_with_think_time(capsys):
    ten = plan_json(capsys, *CHAT_70B, "--think-time", "10")
    thousand = plan_json(capsys, *CHAT_70B, "--think-time", "1000")
    assert thousand["ceilings"]["decode"] >= 5 * ten["ceilings"]["decode"]
    # the seed's every-user-decodes figure is shown beside and does not move
    assert ten["decode_all_at_once"] == thousand["decode_all_at_once"] == ten["decode"]["ceiling_per_replica"] * 1


def test_the_99_s_chat_decode_ceiling_is_littles_law_at_the_floor(capsys):
    d = plan_json(capsys, *CHAT_70B, "--think-time", "99")
    b_floor = d["decode"]["ceiling_per_replica"]   # the batch whose per-user p50 meets 40 tok/s (36 on this row)
    output = d["workload"]["output_tokens"]          # chat: 211 tokens
    # by hand: a user decodes ~output / 40 tok/s = 5.3 s of every 99 s + 5.3 s cycle (TTFT ~0.2 s, left out)
    t_decode = output / 40.0
    duty = t_decode / (99.0 + t_decode)
    littles_law = b_floor / duty                       # mean decoders = users x duty = B_floor: ~710 users
    # with the p95 margin, normal approximation: users x duty + 1.645 sqrt(users x duty (1 - duty)) = B_floor
    a = 1.645 * math.sqrt(1 - duty)
    at_p95 = ((-a + math.sqrt(a * a + 4 * b_floor)) / 2) ** 2 / duty  # ~545 users
    users = d["ceilings"]["decode"]
    assert users == pytest.approx(at_p95, rel=0.25)
    assert users == pytest.approx(littles_law, rel=0.25)
    assert users < littles_law  # the p95 margin only takes users away
    assert d["decode"]["load"]["decoders_at_percentile"] <= b_floor


def test_the_seed_keeps_every_user_decoding_at_once(capsys):
    d = plan_json(capsys, *CHAT_70B, "--think-time", "99", "--assumptions", "seed")
    assert d["decode"]["load"] is None and d["decode"]["load_model"] == "all_at_once"
    assert d["ceilings"]["decode"] == d["decode"]["ceiling_per_replica"] == d["decode_all_at_once"]


def test_the_text_shows_the_conservative_bound_beside(capsys):
    assert main(["plan", *CHAT_70B, "--think-time", "99", *FAST]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.strip().startswith("decode "))
    assert "p95 of decoders" in line and "conservative bound, all decoding at once: 36" in line


# -- no cliff to zero ---------------------------------------------------------------------------------

def test_one_cold_prefill_over_the_budget_is_a_share_of_turns_not_zero_users(capsys):
    d = plan_json(capsys, *LONG_27B)
    assert d["prefill"]["miss_ttft_s"] > 10.0             # one cold prefill alone exceeds the 10 s budget
    assert d["ceilings"]["latency"] > 0 and min(d["ceilings"].values()) > 0
    lat = d["latency"]
    assert lat["ceiling_request"] == "hit"
    assert 0 < lat["budget_miss_share"] <= 1
    assert lat["budget_miss_share"] <= d["workload"]["invalidation"]  # only cold turns can miss on their own
    assert 0 < lat["ttft_p95_s"] < math.inf
    # the ceiling is where a warm turn's mean TTFT reaches the budget (M/G/1, FCFS)
    m = lat["moments"]
    mom = service_moments(m["miss_rate"], m["miss_s"], 0.0, m["hit_s"], 0.0)
    mom = type(mom)(mom.miss_rate, m["mean_s"], m["second_moment_s2"], m["miss_s"], m["hit_s"])
    r = d["workload"]["subagent_ratio"]
    rate = d["ceilings"]["latency"] * (1 + r) / d["workload"]["think_time_s"]
    assert ttft_s(rate, mom, "hit", "fcfs") == pytest.approx(10.0, rel=1e-6)


def test_the_seed_keeps_its_zero(capsys):
    d = plan_json(capsys, *LONG_27B, "--assumptions", "seed")
    assert d["ceilings"]["latency"] == 0 and d["latency"]["ceiling_request"] == "miss"


@pytest.mark.parametrize("preset", preset_names())
def test_no_preset_returns_zero_users_because_one_miss_exceeds_the_budget(preset):
    base = dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8", preset=preset, fills=200)
    checked = 0
    for extra in ({}, dict(median=140_000, max_model_len=262_144)):  # the preset, and its sessions at the 140k
        first = s.plan(s.Scenario(**base, **extra), sensitivity=False)
        cold, warm = first.result.prefill.miss_s, first.result.prefill.hit_s
        if not warm < cold:
            continue  # rag and batch at their own size: a warm turn costs what a cold one does; no budget splits them
        for limit in (warm + 0.9 * (cold - warm), math.sqrt(cold * warm)):  # one cold prefill exceeds these, a warm turn meets them
            p = s.plan(s.Scenario(**base, **extra, ttft_limit=limit), sensitivity=False)
            assert p.result.latency_request == "hit"
            assert p.ceilings["latency"] > 0 and min(p.ceilings.values()) > 0, (preset, extra, limit, p.ceilings)
            f = p.workload.invalidation  # batch: 0, no turn misses the cache, so none misses the budget on its own
            assert (0 < p.latency.budget_miss_share <= f) if f > 0 else p.latency.budget_miss_share == 0
            checked += 1
    assert checked >= 2  # the 140k sessions always split them


def test_a_floor_still_met_at_the_search_cap_is_a_lower_bound():
    load = decode_load(500, lambda b: 100.0, output_tokens=100, think_s=1000.0, ttft_s=0.0, streams_per_user=1.0,
                       percentile=0.95, cap=2_000)
    assert load.users == 2_000 and load.capped
    uncapped = decode_load(500, lambda b: 100.0, output_tokens=100, think_s=1000.0, ttft_s=0.0, streams_per_user=1.0,
                           percentile=0.95)
    assert not uncapped.capped and uncapped.users > 2_000
