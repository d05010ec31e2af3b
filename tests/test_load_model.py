"""The load model (planning/load.py): users decode a duty-cycle share of the time, TTFT binds as a share of turns
that miss the budget (never as zero users), the seed's every-user-decodes rule kept beside and under
--assumptions seed, and the fitted per-step decode overhead."""

import json
import math
import pathlib

import numpy as np
import pytest

from cli_runner import run_json
from servesize.assumptions import assumption
from servesize.cli import main
from servesize.planning.load import binomial_cdf_upto, binomial_quantile, decode_load_ceiling
from servesize.planning.plan import seed_words
from servesize.workload.presets import presets

FAST = ["--no-sensitivity", "--fills", "200"]
CHAT = ["llama-3.3-70b", "--gpus", "8xA100-40GB", "-tp", "8", "--preset", "chat"]
ROW_140K = ["qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8", "--median", "140k"]
ROOT = pathlib.Path(__file__).resolve().parents[1]


def plan_json(capsys, *argv, fast=FAST):
    return run_json(capsys, "plan", *argv, *fast, "--json")


def test_the_binomial_quantile_is_the_brute_force_one():
    rng = np.random.default_rng(0)
    for n, p in [(10, 0.3), (200, 0.05), (1000, 0.5), (5, 0.0), (5, 1.0)]:
        cdf = binomial_cdf_upto(n, p, n)
        pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
        assert cdf == pytest.approx(np.cumsum(pmf), abs=1e-9)
        draws = rng.binomial(n, p, 200_000)
        assert abs(binomial_quantile(n, p, 0.95) - np.percentile(draws, 95)) <= 1


def test_more_think_time_admits_more_users_and_never_fewer():
    speed = lambda k: 60.0 / (1 + 0.01 * k)  # noqa: E731 (a falling per-user speed)
    k_star = 49  # 60 / (1 + 0.49) = 40.3 >= 40 > 60 / 1.5
    users = [decode_load_ceiling(speed, k_star, 500, think).users for think in (1, 10, 30, 100, 1000)]
    assert users == sorted(users) and users[-1] > 50 * users[0]
    assert decode_load_ceiling(speed, k_star, 500, 1).users >= k_star  # never below the every-user bound


def test_the_chat_decode_ceiling_moves_with_think_time_and_matches_littles_law_by_hand(capsys):
    from dataclasses import replace

    from servesize.api import plan_inputs
    from servesize.planning.ceilings import ceilings
    from servesize.scenario import Scenario

    # the efficiency given (the fit's, unscaled): at the A100's measured memory-kernel factor one user alone falls
    # just under the 40 tok/s floor on this deployment, where the by-hand law below does not apply
    pinned = ("--bandwidth-efficiency", "0.75")
    by_think = {t: plan_json(capsys, *CHAT, *pinned, "--think-time", str(t)) for t in (10, 99, 1000)}
    decode = {t: d["ceilings"]["decode"] for t, d in by_think.items()}
    assert decode[1000] >= 5 * decode[10]
    # by hand, 99 s, the decoders alone (the prefill chunks beside them priced apart: planning.interference):
    # k* decoders meet 40 tok/s (the every-user bound); a reply of 211 tokens at ~40 tok/s takes D = 5.275 s; a
    # cycle is C = 99 s + the prefill's mean service + D; each user decodes a = D / C of the time.
    inputs = plan_inputs(Scenario(model="llama-3.3-70b", gpus="8xA100-40GB", tensor_parallel_size=8, preset="chat",
                                  think_time=99, fills=200, bandwidth_efficiency=0.75))
    _, fixed = inputs.memory_and_fixed()
    alone = ceilings(fixed, inputs.workload, replace(inputs.knobs, overrides=(("load.interference", False),)))
    d = by_think[99]
    k_star = d["decode"]["every_user_bound_users"]
    decode_s = 211 / 40
    a = decode_s / (99 + d["prefill"]["mean_service_s"] + decode_s)
    # Little's law gives mean decoders N a; its p95 (normal approximation to the binomial) N a + 1.645 sqrt(N a (1 - a))
    # equals k*: with x = sqrt(N a), x^2 + 1.645 sqrt(1 - a) x - k* = 0
    b = 1.645 * math.sqrt(1 - a)
    x = (-b + math.sqrt(b * b + 4 * k_star)) / 2
    by_hand = x * x / a
    assert alone.values["decode"] == pytest.approx(by_hand, rel=0.25)
    assert alone.decode_load.mean_decoders == pytest.approx(alone.values["decode"] * a, rel=0.05)
    # the chunks beside the decodes only take users away: one user alone here barely meets the floor
    assert decode[99] <= alone.values["decode"] and d["decode"]["load"]["stall_binds"]
    # the seed's every-user bound is shown beside
    assert all(v["decode"]["every_user_bound_users"] <= alone.values["decode"] for v in by_think.values())


def test_the_140k_row_gives_users_and_the_share_of_turns_that_miss_the_budget(capsys):
    row = [*ROW_140K, "--ttft-limit", "5"]  # at the fitted prefill MFU one cold 140k prefill takes ~6.6 s
    d = plan_json(capsys, *row)
    assert d["prefill"]["miss_ttft_s"] > 5  # one cold prefill alone exceeds the 5 s budget
    users = d["ceilings"][d["binding"]]
    assert d["ceilings"]["latency"] > 0 and users > 0
    # the warm-capacity seed's p5 19 / p50 23 at 140k are its cache ceiling; a session's cold start of so long a
    # context alone takes more than the budget, one request in eight (session_turns), so the TTFT binds first
    assert d["ceilings"]["cache"] == pytest.approx(19, abs=3)
    assert users < d["ceilings"]["cache"] and d["binding"] in ("latency", "decode")
    ttft = d["ttft"]
    # past 3% at zero load, load may add the slack (2%), as the decode floor's rule and the engine simulator's allow
    assert 0.05 < ttft["base_miss_share"] <= ttft["miss_share_at_binding"] <= ttft["base_miss_share"] + 0.02 + 1e-9
    assert ttft["allowed_extra_share"] == pytest.approx(0.02)
    main(["plan", *row, *FAST])
    text = capsys.readouterr().out
    assert "of turns miss the 5 s budget at" in text and "verdict: 0 users" not in text


@pytest.mark.parametrize("preset", [p.name for p in presets()])
def test_no_preset_gives_zero_users_because_one_cold_prefill_exceeds_the_budget(capsys, preset):
    # a tight budget that a cold re-prefill of a long session alone exceeds
    d = plan_json(capsys, "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8",
                  "--preset", preset, "--median", "60k", "--max-model-len", "180k", "--ttft-limit", "2")
    assert d["prefill"]["miss_ttft_s"] > 2 or d["ttft"]["base_miss_share"] > 0
    assert d["ceilings"]["latency"] > 0 and d["ceilings"][d["binding"]] > 0
    assert d["ttft"]["miss_share_at_binding"] is not None


def test_the_seeds_rule_stays_under_assumptions_seed(capsys):
    seed = plan_json(capsys, *ROW_140K, "--assumptions", "seed")
    assert seed["decode"]["load_model"] == "every_user" and seed["ttft"] is None
    assert seed["ceilings"]["decode"] == seed["decode"]["every_user_bound_users"]
    assert seed["ceilings"]["latency"] == 0  # the seed's mean-miss rule: a lone miss over the budget
    assert seed["decode"]["step_overhead_s"] == 0


def test_the_seeds_deployment_says_which_assumption_moves_the_answer(capsys):
    d = plan_json(capsys, "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--kv-cache-dtype", "fp8",
                  fast=["--fills", "200"])
    assert d["verdict"].startswith(f"{d['ceilings'][d['binding']]:,.0f} users: {d['binding']} binds first (workload ")
    s = d["vs_seed"]
    assert s is not None and f"{s['users']:,.0f} users ({s['binding']} binds)" in d["verdict"]
    assert seed_words(s["assumption"], s["seed_value"], s["default"]) in d["verdict"]   # the assumption, in words
    assert (round(s["users"]), s["binding"]) != (round(d["ceilings"][d["binding"]]), d["binding"])


def test_the_step_terms_are_the_fit_to_the_measured_runs():
    # scripts/step_accuracy.py --fit --write records the terms it fitted on the fit part of tests/fixtures/measured;
    # the defaults are those terms, and the seed still prices no overhead
    recorded = json.loads((ROOT / "tests" / "fixtures" / "measured" / "step-accuracy.json").read_text())
    assert recorded["terms"], "the fit's terms are recorded"
    for name, value in recorded["terms"].items():
        assert assumption(name) == value, name
    assert assumption("decode.step_overhead_s", "seed") == 0.0


def test_a_small_moe_no_longer_decodes_at_two_thousand_tokens_a_second_alone(capsys):
    d = plan_json(capsys, "qwen3.6-35b-a3b", "--gpus", "2xB200")
    one = d["decode"]["points"][0]
    assert one["concurrent_decoders"] == 1
    # MTP 1.7 tokens per step; a step can be no shorter than the overhead
    assert one["per_user_tok_s_p50"] < 1.7 / assumption("decode.step_overhead_s") < 2150


def _bisected_rate(m, miss_s, hit_s, budget_s, percentile):
    """The TTFT ceiling's rate by plain bisection to 60 halvings, straight from the model's definition:
    the share of turns with wait + own prefill over the budget, P(W > t) = rho exp(-rho t / E[W])."""
    def share(rate):
        rho = rate * m.mean_s
        if rho >= 1:
            return 1.0
        wait = rate * m.second_moment_s2 / (2.0 * (1.0 - rho))

        def tail(s):
            t = budget_s - s
            return float(np.mean(np.where(t < 0, 1.0, rho * np.exp(-rho * np.maximum(t, 0.0) / wait)))) if rho > 0 \
                else float(np.mean(t < 0))
        return m.miss_rate * tail(miss_s) + (1 - m.miss_rate) * tail(hit_s)
    from servesize.planning.interference import BASELINE_SLACK

    # within 1 - percentile, or what no load already misses plus the slack where that is more
    target = min(max(1 - percentile / 100, share(0.0) + BASELINE_SLACK), 1.0)
    lo, hi = 0.0, 1.0 / m.mean_s
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if share(mid) <= target else (lo, mid)
    return lo, share, target


@pytest.mark.parametrize(("miss_rate", "budget_s", "spread"), [(0.05, 10.0, 1.0), (0.3, 2.0, 0.5), (0.0, 1.0, 2.0)])
def test_the_ttft_ceilings_root_finder_lands_where_a_plain_bisection_does(miss_rate, budget_s, spread):
    from servesize.planning.latency import service_moments
    from servesize.planning.load import ttft_ceiling_rate

    rng = np.random.default_rng(7)
    miss_s = rng.lognormal(0.0, spread, 5000)  # cold re-prefills, median 1 s
    hit_s = 0.05 * rng.lognormal(0.0, spread, 5000)  # warm tails
    m = service_moments(miss_rate, float(miss_s.mean()), float((miss_s ** 2).mean()), float(hit_s.mean()),
                        float((hit_s ** 2).mean()))
    expected, share, target = _bisected_rate(m, miss_s, hit_s, budget_s, 95.0)
    got = ttft_ceiling_rate(m, miss_s, hit_s, budget_s, 95.0).rate_at_ceiling_per_s
    assert got == pytest.approx(expected, rel=1e-12)
    assert share(got) <= target < share(got * (1 + 1e-9))  # the answer meets the target; a hair more does not


def test_a_fixed_point_climbed_from_fewer_users_is_the_one_climbed_from_one_decoder():
    from servesize.planning.load import _Cycle

    speed = lambda k: 60.0 / (1 + 0.01 * k)  # noqa: E731 (a falling per-user speed)
    k_star, q = 49, 0.95  # 60 / (1 + 0.49) = 40.3 >= 40 > 60 / 1.5
    warm = _Cycle(speed, k_star, 500, 30.0, 0.5, 0.25, q)  # solves 1, 2, ... in turn: each climbs from the last
    for users in range(1, warm.upper_users() + 1):
        cold = _Cycle(speed, k_star, 500, 30.0, 0.5, 0.25, q)  # nothing solved: climbs from one decoder
        assert warm.fixed_point(users) == cold.fixed_point(users)


def test_a_sweep_of_the_pacing_reads_each_speed_of_the_curve_once(monkeypatch):
    from servesize.planning import ceilings as C
    from servesize.planning.inputs import Knobs
    from servesize.workload.presets import preset

    calls = []
    speed = lambda k: 60.0 / (1 + 0.01 * k)  # noqa: E731 (a falling per-user speed)
    monkeypatch.setattr(C, "median_speed", lambda setup, bank, k: calls.append(k) or speed(k))
    cache, bank, workload = C.CeilingCache(), object(), preset("chat").workload()
    users = [C.decode_load_of("setup", 49, workload.replace(think_time_s=think), Knobs(), bank, 0.5, cache=cache).users
             for think in (10.0, 30.0, 99.0)]
    assert users == sorted(users) and users[0] < users[-1]  # three different ceilings
    assert calls and len(calls) == len(set(calls))  # ... reading each k of the one speed curve once


def test_the_binomial_from_one_table_of_logs_is_the_direct_recursion_bit_for_bit():
    rng = np.random.default_rng(18)
    cases = [(int(n), float(rng.random()), int(rng.integers(0, n + 1))) for n in rng.integers(1, 5_000, 300)]
    cases += [(200_000, 0.001, 400), (1, 0.5, 1), (3, 0.999, 3)]  # past the table's cap; the smallest n
    for n, p, k_max in cases:
        k = np.arange(k_max, dtype=float)  # the recursion as written before the table
        steps = np.log(n - k) - np.log(k + 1.0) + math.log(p) - math.log1p(-p)
        logpmf = n * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
        direct = np.minimum(np.cumsum(np.exp(logpmf)), 1.0)
        assert binomial_cdf_upto(n, p, k_max).tobytes() == direct.tobytes()


def test_a_decode_bisection_stopped_early_says_what_the_full_one_does_and_finishes_on_the_same_ceiling():
    from servesize.planning.load import DecodeLoadSearch

    speed = lambda k: 60.0 / (1 + 0.01 * k)  # noqa: E731 (a falling per-user speed)
    full = decode_load_ceiling(speed, 49, 500, 30.0, 0.5, 0.25)
    for users in (0, 1, full.users // 3, full.users - 1, full.users, full.users + 5):
        search = DecodeLoadSearch(speed, 49, 500, 30.0, 0.5, 0.25)
        probes, admissible = [], search.cyc.admissible
        search.cyc.admissible = lambda n, probes=probes, admissible=admissible: probes.append(n) or admissible(n)
        assert search.users_at_least(users) == (full.users > users)
        assert len(probes) <= 1  # the predicate is monotone in the users: one probe, just above ``users``, decides
        search.cyc.admissible = admissible
        assert search.result().users == full.users and search.result().decoders_at_percentile == full.decoders_at_percentile
