"""Workload: the seed's reference defaults, validation, sampling (2.6 steps 1-3), moments, files."""

import math

import numpy as np
import pytest

from servesize.errors import BadInput
from servesize.workload.files import load_workload, save_workload
from servesize.workload.model import EmpiricalClass, SessionClass, Workload, clipped_lognormal_moment


def seed():
    return Workload.seed_reference()


def test_seed_reference_is_the_seeds_workload():
    w = seed()
    assert (w.user.median_tokens, w.user.sigma, w.user.prefix_tokens) == (31_000, 0.81, 15_000)
    assert (w.subagent.median_tokens, w.subagent.sigma, w.subagent.prefix_tokens) == (8_000, 0.9, 3_000)
    assert (w.subagent_ratio, w.invalidation, w.max_model_len, w.think_time_s) == (0.10, 0.01, 180_000, 30.0)
    assert w.subagents_share_prefix is False
    assert w.subagent_probability == pytest.approx(0.10 / (1 + 0.10))


def test_prefixes_are_reserved_once_per_class_present():
    w = seed()
    assert w.reserved_prefix_tokens() == 15_000 + 3_000
    assert w.replace(subagents_share_prefix=True).reserved_prefix_tokens() == 15_000
    assert w.replace(subagent_ratio=0).reserved_prefix_tokens() == 15_000
    assert w.replace(subagent=None).reserved_prefix_tokens() == 15_000


@pytest.mark.parametrize(
    "build, field",
    [
        (lambda: SessionClass("user", 31_000, 0.0, 15_000), "user.sigma"),
        (lambda: SessionClass("user", 31_000, -1, 15_000), "user.sigma"),
        (lambda: SessionClass("user", 0, 0.8, 15_000), "user.median_tokens"),
        (lambda: SessionClass("user", 31_000, 0.8, -5), "user.prefix_tokens"),
        (lambda: SessionClass("user", float("nan"), 0.8, 0), "user.median_tokens"),
        (lambda: seed().replace(invalidation=1.5), "workload.invalidation"),
        (lambda: seed().replace(subagent_ratio=-0.1), "workload.subagent_ratio"),
        (lambda: seed().replace(max_model_len=0), "workload.max_model_len"),
        (lambda: seed().replace(think_time_s=0), "workload.think_time_s"),
        (lambda: seed().replace(max_model_len=10_000), "user.prefix_tokens"),
        (lambda: EmpiricalClass("user", [1000, -3]), "user.lengths"),
    ],
)
def test_bad_values_are_refused_with_a_line_naming_the_field(build, field):
    with pytest.raises(BadInput) as exc:
        build()
    message = str(exc.value)
    assert field in message and "\n" not in message


def test_a_sample_follows_steps_one_to_three():
    w = seed()
    s = w.sample(np.random.default_rng(0), (200, 1000))
    n = s.full_tokens.size
    assert s.full_tokens.shape == (200, 1000)
    assert s.full_tokens.max() <= 180_000
    # a prompt holds at least its prefix (warm requests still carry it)
    warm = ~s.is_cold
    assert np.all(s.full_tokens[warm] >= s.prefix_tokens[warm])
    assert np.all(s.prefix_tokens[s.is_cold] == 0)
    assert set(np.unique(s.prefix_tokens[warm & ~s.is_subagent])) == {15_000.0}
    assert set(np.unique(s.prefix_tokens[warm & s.is_subagent])) == {3_000.0}
    # class share r/(1+r) and cold share f, within 5 standard errors
    p = 0.10 / 1.10
    assert abs(s.is_subagent.mean() - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert abs(s.is_cold.mean() - 0.01) < 5 * math.sqrt(0.01 * 0.99 / n)
    # the user median survives the prefix floor and the cap (15k < 31k < 180k)
    user = s.full_tokens[~s.is_subagent]
    assert np.median(user) == pytest.approx(31_000, rel=0.02)
    # ln L has the class's sigma between the floor and the cap: check the interquartile range
    q25, q75 = np.percentile(np.log(user), [25, 75])
    assert (q75 - q25) / (2 * 0.6744897501960817) == pytest.approx(0.81, rel=0.03)


def test_unique_tokens_is_full_minus_prefix_or_full_when_cold():
    s = seed().sample(np.random.default_rng(1), 5000)
    expected = np.where(s.is_cold, s.full_tokens, s.full_tokens - s.prefix_tokens)
    assert np.array_equal(s.unique_tokens(), expected)


def test_the_same_seed_draws_the_same_sample():
    a = seed().sample(np.random.default_rng(7), 1000)
    b = seed().sample(np.random.default_rng(7), 1000)
    assert np.array_equal(a.full_tokens, b.full_tokens) and np.array_equal(a.is_cold, b.is_cold)


def test_clipped_lognormal_moments_match_a_large_sample():
    w = seed()
    s = w.sample(np.random.default_rng(3), 2_000_000)
    assert w.mean_tokens() == pytest.approx(s.full_tokens.mean(), rel=0.005)
    assert w.second_moment_tokens() == pytest.approx((s.full_tokens ** 2).mean(), rel=0.01)


def test_without_clipping_the_moments_are_the_lognormal_ones():
    mu, sigma = math.log(31_000), 0.81
    assert clipped_lognormal_moment(mu, sigma, 0, 1e30, 1) == pytest.approx(math.exp(mu + sigma ** 2 / 2))
    assert clipped_lognormal_moment(mu, sigma, 0, 1e30, 2) == pytest.approx(math.exp(2 * mu + 2 * sigma ** 2))


def test_an_empirical_class_bootstraps_its_lengths_and_its_moments_are_exact():
    lengths = [2_000, 40_000, 250_000]
    w = Workload(EmpiricalClass("user", lengths, prefix_tokens=5_000), max_model_len=180_000)
    s = w.sample(np.random.default_rng(0), 3000)
    assert set(np.unique(s.full_tokens)) == {5_000.0, 40_000.0, 180_000.0}  # floor 5k, cap 180k
    assert w.mean_tokens() == pytest.approx((5_000 + 40_000 + 180_000) / 3)
    assert w.second_moment_tokens() == pytest.approx((5_000 ** 2 + 40_000 ** 2 + 180_000 ** 2) / 3)


def test_a_workload_without_subagents_draws_only_users():
    s = Workload(SessionClass("user", 31_000, 0.81, 15_000)).sample(np.random.default_rng(0), 1000)
    assert not s.is_subagent.any()


def test_a_workload_round_trips_through_dict_json_and_toml(tmp_path):
    w = seed().replace(subagents_share_prefix=True, invalidation=0.05)
    assert Workload.from_dict(w.to_dict()) == w
    for name in ("w.json", "w.toml"):
        path = tmp_path / name
        save_workload(w, path)
        assert load_workload(path) == w
    u = Workload(SessionClass("user", 20_000, 1.0, 0))
    save_workload(u, tmp_path / "u.toml")
    assert load_workload(tmp_path / "u.toml") == u


def test_workload_files_with_unknown_fields_or_bad_syntax_are_refused(tmp_path):
    data = seed().to_dict()
    data["max_seq_len"] = 100
    with pytest.raises(BadInput, match="unknown field"):
        Workload.from_dict(data)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(BadInput, match="not valid JSON"):
        load_workload(bad)
    with pytest.raises(BadInput, match="cannot read"):
        load_workload(tmp_path / "missing.json")


def test_a_log_normal_user_mixes_with_an_empirical_subagent_and_round_trips(tmp_path):
    w = Workload(SessionClass("user", 31_000, 0.81, 15_000), EmpiricalClass("subagent", [4_000, 9_000], 3_000),
                 subagent_ratio=1.0)
    s = w.sample(np.random.default_rng(0), 4000)
    assert set(np.unique(s.full_tokens[s.is_subagent])) == {4_000.0, 9_000.0}
    assert 0.45 < s.is_subagent.mean() < 0.55
    save_workload(w, tmp_path / "m.json")
    assert load_workload(tmp_path / "m.json") == w
    assert w != w.replace(subagent=EmpiricalClass("subagent", [4_000, 9_001], 3_000))


# --- the random numbers behind a sample (workload.draws) ----------------------------------------

def test_a_fills_numbers_do_not_depend_on_how_many_fills_or_sessions_are_drawn():
    from servesize.workload.draws import RandomBank
    small = RandomBank(4).take(0, 300, 0, 64)          # 300 fills x 64 sessions
    large = RandomBank(4)
    large.take(0, 1500, 0, 1000)                         # drawn wider and taller first
    again = large.take(0, 300, 0, 64)
    unkept = RandomBank(4, cache_cells=1).take(0, 300, 0, 64)  # past the memory bound: drawn again, not kept
    for name in ("class_word", "cold_word", "z"):
        assert np.array_equal(getattr(small, name), getattr(again, name))
        assert np.array_equal(getattr(small, name), getattr(unkept, name))
    spanning = large.take(10, 20, 60, 70)                # a range across two column blocks
    assert np.array_equal(spanning.z, large.take(0, 1500, 0, 1000).z[10:20, 60:70])


def test_the_same_numbers_under_a_longer_median_give_every_session_a_longer_prompt():
    # common random numbers: a sweep moves each session, it does not redraw it
    from servesize.workload.draws import RandomBank
    raw = RandomBank(0).take(0, 50, 0, 64)
    w = seed()
    shorter = w.realise(raw).full_tokens
    longer = w.replace(user=SessionClass("user", 45_000, 0.81, 15_000)).realise(raw).full_tokens
    assert np.all(longer >= shorter) and np.any(longer > shorter)
    assert np.array_equal(w.replace(invalidation=0.2).realise(raw).full_tokens, shorter)  # coldness moves no length


def test_the_pool_fills_costs_are_the_samples_unique_tokens_plus_the_state():
    for w in (seed(), seed().replace(subagents_share_prefix=True), seed().replace(subagent=None),
              Workload(EmpiricalClass("user", [2_000, 40_000], 5_000), SessionClass("subagent", 8_000, 0.9, 3_000))):
        raw = w.draw_raw(np.random.default_rng(2), (40, 100))
        s = w.realise(raw)
        cost, is_cold, is_sub = w.realise_costs(raw, 2_400.0)
        assert np.allclose(cost, s.unique_tokens() + 2_400.0, rtol=0, atol=1e-9)
        assert np.array_equal(is_cold, s.is_cold) and np.array_equal(is_sub, s.is_subagent)
        assert np.array_equal(w.full_tokens(raw), s.full_tokens)


@pytest.mark.parametrize("k", [3, 4])
def test_the_third_and_fourth_length_moments_match_a_large_sample(k):
    w = seed()
    s = w.sample(np.random.default_rng(3), 2_000_000)
    assert w.length_moment(k) == pytest.approx(np.mean(s.full_tokens ** k), rel=0.03)


def test_an_unknown_field_whose_name_breaks_the_line_is_echoed_quoted(tmp_path):
    # found by the fuzz suite in a random order: a key holding a newline made the refusal two lines
    import json

    for data in ({"servesize_workload": 1, "user": {"kind": "lognormal", "median_tokens": 1000, "sigma": 0.5, "\n0": 1}},
                 {"servesize_workload": 1, "user": {"kind": "lognormal", "median_tokens": 1000, "sigma": 0.5}, "a\nb": 1}):
        path = tmp_path / "w.json"
        path.write_text(json.dumps(data))
        with pytest.raises(BadInput, match="unknown field") as err:
            load_workload(path)
        assert "\n" not in str(err.value) and ("'\\n0'" in str(err.value) or "'a\\nb'" in str(err.value))


def test_the_share_of_prompts_at_least_so_long_matches_a_large_sample():
    import numpy as np

    from servesize.workload.presets import preset

    for name in ("chat", "coding-agent"):
        w = preset(name).workload()
        s = w.sample(np.random.default_rng(5), 400_000).full_tokens
        for tokens in (16, 1600, 20_000, 90_000):
            assert w.share_at_least(tokens) == pytest.approx(float(np.mean(s >= tokens)), abs=0.004), (name, tokens)
    assert preset("chat").workload().share_at_least(1) == 1.0


def test_the_mean_pause_cut_at_a_limit_is_the_distributions_own():
    """E[min(pause, limit)], what a pause shorter than the cache's characteristic time holds a session's blocks for
    (planning.lru): closed form for the exponential and the log-normal, checked against 400,000 drawn pauses."""
    import numpy as np

    for sigma in (None, 0.6, 1.43):
        w = seed().replace(think_time_s=40.0, think_time_sigma=sigma)
        draws = w.think_times(np.random.default_rng(0), 400_000)
        for limit in (10.0, w.think_time_quantile_s(0.95), 1e5):
            assert w.think_time_below_s(limit) == pytest.approx(float(np.minimum(draws, limit).mean()), rel=0.01)
    assert seed().think_time_below_s(0.0) == 0.0
    assert seed().think_time_below_s(1e9) == pytest.approx(seed().think_time_s)


def test_the_share_of_pauses_longer_than_a_time_is_the_distributions_own():
    """P(pause > t), the returning turns that outlast a cache's characteristic time (planning.lru Evictions):
    closed form for the exponential and the log-normal, checked against 400,000 drawn pauses."""
    import numpy as np

    for sigma in (None, 0.6, 1.43):
        w = seed().replace(think_time_s=40.0, think_time_sigma=sigma)
        draws = w.think_times(np.random.default_rng(0), 400_000)
        for t in (10.0, 40.0, w.think_time_quantile_s(0.95), 400.0):
            assert w.think_time_exceeds(t) == pytest.approx(float(np.mean(draws > t)), abs=2e-3)
        assert w.think_time_exceeds(w.think_time_quantile_s(0.95)) == pytest.approx(0.05)
    assert seed().think_time_exceeds(0.0) == 1.0
