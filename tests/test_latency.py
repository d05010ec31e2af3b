import math

import pytest

from seed_reference import reference_contexts
from servesize.assumptions import assumption
from servesize.errors import BadInput
from servesize.planning.latency import (
    breakeven_miss_rate,
    burst_drain_s,
    burst_tolerance,
    latency_ceiling_rate,
    latency_ceiling_users,
    latency_report,
    moments_from,
    queue_wait_s,
    request_rate,
    saturation_ceiling_users,
    service_moments,
    sla_miss_rate,
    ttft_s,
    users_for_rate,
    utilisation,
)
from servesize.planning.prefill import PrefillSetup, prefill_costs


@pytest.fixture(scope="module")
def seed_27b_costs():
    """Qwen3.6-27B prefill on 1xH200 and TP2, 2,000-token warm turn."""
    out = {}
    for tp in (1, 2):
        setup = PrefillSetup(gemm_params=24.5e9, attention_width=6144, full_attention_layers=16,
                             peak_flops_per_gpu=1.979e15, tp=tp, mfu=assumption("prefill.mfu", "seed"))
        out[tp] = prefill_costs(setup, sample_contexts=reference_contexts)
    return out


@pytest.fixture(scope="module")
def seed_27b_moments(seed_27b_costs):
    """... at the seed's f = 1%."""
    return {tp: moments_from(c, miss_rate=0.01) for tp, c in seed_27b_costs.items()}


def simple():
    # misses 2 s (E[S^2] 5 s^2), hits 0.1 s (0.02 s^2), f = 10%
    return service_moments(0.10, miss_s=2.0, miss_s2=5.0, hit_s=0.1, hit_s2=0.02)


def test_moments_mix_miss_and_hit_at_the_miss_rate():
    m = simple()
    assert m.mean_s == pytest.approx(0.1 * 2.0 + 0.9 * 0.1)
    assert m.second_moment_s2 == pytest.approx(0.1 * 5.0 + 0.9 * 0.02)


def test_pollaczek_khinchine_wait_and_fcfs_ttft():
    m = simple()
    rate = 2.0
    rho = 2.0 * 0.29
    assert utilisation(rate, m) == pytest.approx(rho)
    wait = 2.0 * 0.518 / (2 * (1 - rho))
    assert queue_wait_s(rate, m) == pytest.approx(wait)
    assert ttft_s(rate, m, "miss", "fcfs") == pytest.approx(wait + 2.0)
    assert ttft_s(rate, m, "hit", "fcfs") == pytest.approx(wait + 0.1)


def test_processor_sharing_stretches_each_request_by_its_own_size():
    m = simple()
    assert ttft_s(2.0, m, "hit", "ps") == pytest.approx(0.1 / (1 - 0.58))
    assert ttft_s(2.0, m, "miss", "ps") == pytest.approx(2.0 / (1 - 0.58))


def test_no_steady_state_at_full_utilisation():
    m = simple()
    assert queue_wait_s(1 / m.mean_s, m) == math.inf
    assert ttft_s(10.0, m) == math.inf


def test_users_and_rates_convert_through_think_time_and_the_subagent_tow():
    assert request_rate(64, think_time_s=30, sub_ratio=0.1) == pytest.approx(64 * 1.1 / 30)
    assert users_for_rate(64 * 1.1 / 30, think_time_s=30, sub_ratio=0.1) == pytest.approx(64)
    # a user waits for its reply before the pause: its turns come think + response apart
    assert request_rate(64, think_time_s=30, sub_ratio=0.1, response_s=10) == pytest.approx(64 * 1.1 / 40)


@pytest.mark.parametrize("discipline", ["fcfs", "ps"])
def test_at_the_latency_ceiling_a_miss_waits_exactly_the_ttft_limit(discipline):
    m = simple()
    lam = latency_ceiling_rate(m, ttft_limit_s=10.0, discipline=discipline)
    assert ttft_s(lam, m, "miss", discipline) == pytest.approx(10.0)


def test_the_latency_ceiling_is_always_inside_saturation():
    m = simple()
    assert 0 < latency_ceiling_users(m, 0.1, 30, 10.0) < saturation_ceiling_users(m, 0.1, 30)


def test_a_limit_below_one_misss_own_prefill_admits_no_users():
    assert latency_ceiling_users(simple(), 0.1, 30, ttft_limit_s=1.5) == 0.0


def test_saturation_is_think_over_one_plus_r_times_mean_service():
    m = simple()
    assert saturation_ceiling_users(m, sub_ratio=0.1, think_time_s=30) == pytest.approx(30 / (1.1 * 0.29))


def test_draining_the_tolerated_burst_takes_exactly_the_limit():
    m = simple()
    rho = utilisation(1.0, m)
    b = burst_tolerance(m, rho, ttft_limit_s=10.0)
    assert b == pytest.approx(10.0 * (1 - rho) / 2.0)
    assert burst_drain_s(b, m, rho) == pytest.approx(10.0)
    assert burst_tolerance(m, 1.0, 10.0) == 0.0


def test_the_seeds_prefill_server_moments_for_the_27b(seed_27b_moments):
    # seed docs (spike table): E[S] 173.2 / 96.2 ms, squared CV 5.50
    assert seed_27b_moments[1].mean_s == pytest.approx(0.1732, rel=0.01)
    assert seed_27b_moments[2].mean_s == pytest.approx(0.0962, rel=0.01)
    assert seed_27b_moments[1].scv == pytest.approx(5.50, abs=0.1)


def test_the_seeds_latency_and_saturation_ceilings_146_157_and_273_283(seed_27b_moments):
    # working-set-model.md section 4, operating point at f = 1%, 30 s think, 10 s budget:
    # 27B 1xH200 cache 70 / decode 118 / latency 146 / saturation 157; TP2 177 / 228 / 273 / 283
    for tp, lat, sat in ((1, 146, 157), (2, 273, 283)):
        m = seed_27b_moments[tp]
        assert abs(latency_ceiling_users(m, sub_ratio=0.1, think_time_s=30, ttft_limit_s=10) - lat) <= 2
        assert abs(saturation_ceiling_users(m, sub_ratio=0.1, think_time_s=30) - sat) <= 2


def test_the_seeds_burst_tolerance_and_32_miss_drain(seed_27b_moments):
    # seed docs: at 2.13 req/s, B* (10 s) = 2.2 on 1xH200, 5.1 on TP2; a 32-miss spike drains in 143 s / 63 s
    for tp, b_star, drain in ((1, 2.2, 143), (2, 5.1, 63)):
        m = seed_27b_moments[tp]
        rho = utilisation(2.13, m)
        assert burst_tolerance(m, rho, 10.0) == pytest.approx(b_star, abs=0.05)
        assert burst_drain_s(32, m, rho) == pytest.approx(drain, abs=1.5)


def test_the_report_carries_every_figure_and_its_derivation(seed_27b_moments):
    r = latency_report(seed_27b_moments[2], users=64, sub_ratio=0.1, think_time_s=30, ttft_limit_s=10, burst=32)
    assert r.rate_per_s == pytest.approx(64 * 1.1 / 30)
    assert r.latency_ceiling_users == pytest.approx(latency_ceiling_users(seed_27b_moments[2], 0.1, 30, 10))
    assert r.miss_ttft_s == pytest.approx(r.wait_s + seed_27b_moments[2].miss_s)
    assert r.derivation.value("saturation_ceiling_users") == r.saturation_ceiling_users
    assert r.to_dict()["burst_drain_s"] == r.burst_drain_s
    assert "k / (E_S2 + k × E_S)" in r.derivation.render()


def test_the_report_gives_the_budget_and_the_ttfts_as_the_client_sees_them(seed_27b_moments):
    """The queue and the prefill get the budget less the request's fixed cost; the report adds the cost back to
    every TTFT and to the budget, so a page never shows a 9.98 s budget for a 10 s one."""
    m = seed_27b_moments[2]
    queue = latency_report(m, users=64, sub_ratio=0.1, think_time_s=30, ttft_limit_s=9.98, burst=32)
    client = latency_report(m, users=64, sub_ratio=0.1, think_time_s=30, ttft_limit_s=9.98, burst=32,
                            request_fixed_s=0.02)
    assert client.ttft_limit_s == pytest.approx(10.0) and queue.ttft_limit_s == pytest.approx(9.98)
    assert client.miss_ttft_s == pytest.approx(queue.miss_ttft_s + 0.02)
    assert client.hit_ttft_s == pytest.approx(queue.hit_ttft_s + 0.02)
    assert (client.burst_tolerance, client.latency_ceiling_users) == (queue.burst_tolerance, queue.latency_ceiling_users)
    assert client.derivation.value("client_miss_ttft_s") == client.miss_ttft_s


def test_an_overloaded_server_reports_no_burst_tolerance_and_an_endless_drain():
    r = latency_report(simple(), users=1000, sub_ratio=0.0, think_time_s=30)
    assert r.rho >= 1 and r.wait_s == math.inf and r.burst_tolerance == 0.0 and r.burst_drain_s == math.inf


@pytest.mark.parametrize("call", [
    lambda: service_moments(1.5, 1, 1, 1, 1),
    lambda: ttft_s(1.0, simple(), discipline="lifo"),
    lambda: ttft_s(1.0, simple(), request="cold"),
    lambda: request_rate(10, think_time_s=0),
    lambda: request_rate(10, think_time_s=30, response_s=-1.0),
    lambda: request_rate(10, think_time_s=30, response_s=math.inf),
    lambda: latency_ceiling_rate(simple(), ttft_limit_s=0),
])
def test_impossible_queue_inputs_are_refused(call):
    with pytest.raises(BadInput):
        call()


@pytest.mark.parametrize("f, latency, saturation", [(0.04, 177, 194), (0.05, 159, 175), (0.10, 104, 118), (0.25, 51, 60)])
def test_the_seeds_tp2_ceilings_collapse_as_the_miss_rate_grows(seed_27b_costs, f, latency, saturation):
    # seed docs (two-axis planner, 27B TP2): latency and saturation against f; the cache ceiling
    # (169 / 166 / 152 / 117) is crossed by latency at f = 5%
    m = moments_from(seed_27b_costs[2], f)
    assert abs(latency_ceiling_users(m, 0.1, 30, 10) - latency) <= 2
    assert abs(saturation_ceiling_users(m, 0.1, 30) - saturation) <= 2


@pytest.mark.parametrize("f, duty", [(0.0, 0.173), (0.01, 0.205), (0.05, 0.332), (0.10, 0.490), (0.25, 0.966)])
def test_the_seeds_tp2_prefill_duty_against_miss_rate_at_2_13_requests_per_s(seed_27b_costs, f, duty):
    assert utilisation(2.13, moments_from(seed_27b_costs[2], f)) == pytest.approx(duty, abs=0.003)


def test_the_seeds_breakeven_and_sla_miss_rates(seed_27b_costs):
    # seed docs: f* 12.1% (1xH200) and 26.1% (TP2) at 2.13 req/s; f_sla (10 s) FCFS | PS
    # 8.3% | 7.1% and 21.5% | 21.1%
    for tp, f_star, fcfs, ps in ((1, 0.121, 0.083, 0.071), (2, 0.261, 0.215, 0.211)):
        c = seed_27b_costs[tp]
        fs = breakeven_miss_rate(2.13, c.miss_s, c.hit_s)
        assert fs == pytest.approx(f_star, abs=0.002)
        assert utilisation(2.13, moments_from(c, fs)) == pytest.approx(1.0)
        assert sla_miss_rate(c, 2.13, 10.0, "fcfs") == pytest.approx(fcfs, abs=0.002)
        assert sla_miss_rate(c, 2.13, 10.0, "ps") == pytest.approx(ps, abs=0.002)
        assert sla_miss_rate(c, 2.13, 10.0, "fcfs") < fs


def test_under_fcfs_a_hit_queues_behind_misses(seed_27b_costs):
    # seed docs, 27B TP2 at 2.13 req/s and f = 10%: hit TTFT 1,209 ms FCFS vs 160 ms PS; miss 2.70 | 3.08 s
    m = moments_from(seed_27b_costs[2], 0.10)
    assert ttft_s(2.13, m, "hit", "fcfs") == pytest.approx(1.209, rel=0.02)
    assert ttft_s(2.13, m, "hit", "ps") == pytest.approx(0.160, rel=0.02)
    assert ttft_s(2.13, m, "miss", "fcfs") == pytest.approx(2.70, rel=0.02)
    assert ttft_s(2.13, m, "miss", "ps") == pytest.approx(3.08, rel=0.02)
