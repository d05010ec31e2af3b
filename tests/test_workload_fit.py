"""servesize workload fit: reading logs, the log-normal MLE, KS distance, the workload file."""

import gzip
import json
import math

import numpy as np
import pytest

from servesize.cli import main
from servesize.workload.files import load_workload
from servesize.workload.fit import fit_lognormal, fit_observations, kolmogorov_p_value, ks_statistic
from servesize.workload.presets import preset
from servesize.workload.readers import read_token_counts


def fit_workload(path, **kw):
    return fit_observations(read_token_counts(path), **kw)


def lognormal_sample(n=20_000, median=31_000, sigma=0.81, seed=0):
    return np.random.default_rng(seed).lognormal(math.log(median), sigma, n)


def write_csv(path, values, column="prompt_tokens"):
    path.write_text(f"request_id,{column}\n" + "".join(f"r{i},{v:.0f}\n" for i, v in enumerate(values)))
    return path


def test_the_fit_recovers_median_and_sigma_of_a_seeded_lognormal_sample(tmp_path):
    path = write_csv(tmp_path / "prompts.csv", lognormal_sample())
    fit = fit_workload(path, min_tokens=1)
    assert fit.user_fit.median == pytest.approx(31_000, rel=0.02)
    assert fit.user_fit.sigma == pytest.approx(0.81, rel=0.02)
    assert fit.user_fit.ks_d < 0.02            # a sample from the law itself: a close fit
    assert fit.workload.user.median_tokens == pytest.approx(fit.user_fit.median, rel=1e-5)


def test_the_mle_is_mean_and_population_std_of_ln_x():
    x = np.array([1_000.0, 10_000.0, 100_000.0])
    f = fit_lognormal(x)
    assert f.mu == pytest.approx(math.log(10_000))
    assert f.sigma == pytest.approx(math.sqrt(2 / 3) * math.log(10))   # ddof 0
    assert f.median == pytest.approx(10_000)


def test_ks_d_of_one_point_at_the_median_is_one_half():
    assert ks_statistic(np.array([31_000.0]), math.log(31_000), 0.81) == pytest.approx(0.5)


def test_the_kolmogorov_p_value_is_one_for_tiny_d_and_small_for_large_d():
    assert kolmogorov_p_value(0.001, 100) == 1.0
    assert kolmogorov_p_value(0.3, 1000) < 1e-10
    assert kolmogorov_p_value(1.36 / math.sqrt(10_000), 10_000) == pytest.approx(0.05, abs=0.005)


def test_nothing_is_dropped_unless_min_tokens_asks_and_the_count_dropped_is_printed(tmp_path, capsys):
    values = [10, 500, 2_000, 20_000, 200_000] * 4 + [700, 900]
    path = write_csv(tmp_path / "p.csv", values)
    kept = fit_workload(path)
    assert kept.user_fit.n == 22 and kept.dropped == 0
    asked = fit_workload(path, min_tokens=1_000)
    assert asked.user_fit.n == 12 and asked.dropped == 10
    assert main(["workload", "fit", str(path), "--min-tokens", "1000"]) == 0
    assert "10 dropped under --min-tokens 1,000" in capsys.readouterr().out
    assert main(["workload", "fit", str(path)]) == 0
    assert "0 dropped under --min-tokens 0" in capsys.readouterr().out


def test_dropping_short_requests_moves_the_median_of_a_short_workload(tmp_path):
    # the seed's 1,000-token floor on a chat-like log: a third of it below 1,000 moves the fitted median up
    sample = lognormal_sample(6_000, median=1_455, sigma=0.9, seed=3)
    path = write_csv(tmp_path / "chat.csv", sample)
    whole, floored = fit_workload(path), fit_workload(path, min_tokens=1_000)
    share_below = float(np.mean(sample < 1_000))
    assert 0.25 < share_below < 0.40 and abs(floored.dropped - share_below * 6_000) <= 5  # the CSV rounds to whole tokens
    assert whole.user_fit.median == pytest.approx(1_455, rel=0.05)
    assert floored.user_fit.median > 1.3 * whole.user_fit.median


def test_openai_usage_records_give_prompt_tokens_and_the_observed_hit_rate(tmp_path):
    rows = [{"id": i, "usage": {"prompt_tokens": p, "completion_tokens": 10,
                                "prompt_tokens_details": {"cached_tokens": c}}}
            for i, (p, c) in enumerate([(10_000, 8_000), (20_000, 15_000), (40_000, 0)])]
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows * 4) + "\n")
    obs = read_token_counts(path)
    assert obs.format == "openai" and list(obs.user) == [10_000, 20_000, 40_000] * 4
    fit = fit_workload(path)
    assert fit.cache_hit_rate() == pytest.approx((8_000 + 15_000 + 0) / (10_000 + 20_000 + 40_000))
    # one request in three reports no cached token: it matched no prefix (the --invalidation definition)
    assert fit.fields["invalidation"].value == pytest.approx(1 / 3, abs=1e-4)
    assert fit.fields["output_tokens"].value == 10 and fit.workload.output_tokens == 10


def test_the_replies_spread_is_their_deciles_over_their_mean_and_a_written_file_keeps_it(tmp_path):
    from servesize.percentile import quantiles
    from servesize.workload.files import load_workload

    outputs = [1, 1] + list(range(2, 200, 2))  # 101 replies: two of one token (not timed: no token after the first)
    rows = [{"id": i, "usage": {"prompt_tokens": 5_000 + i, "completion_tokens": o}} for i, o in enumerate(outputs)]
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    fit = fit_workload(path)
    mean = sum(outputs) / len(outputs)
    want = tuple(round(q / mean, 4) for q in quantiles(range(2, 200, 2), [(i + 0.5) / 10 for i in range(10)]))
    assert fit.fields["output_spread"].value == want == fit.workload.output_spread
    out = tmp_path / "w.json"
    out.write_text(json.dumps(fit.workload_dict()))
    assert load_workload(str(out)).output_spread == want
    # too few timed replies say nothing of a spread: every reply the mean, as before
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(json.dumps(r) for r in rows[:12]) + "\n")
    assert not fit_workload(few).fields["output_spread"].fitted and fit_workload(few).workload.output_spread is None


def test_a_bad_reply_spread_in_a_workload_file_is_one_clear_error(tmp_path):
    from servesize.errors import BadInput
    from servesize.workload.files import load_workload

    path = tmp_path / "w.json"
    for bad, said in (([], "1 to 100"), ([0.5, -1], "output_spread must be in"), ("wide", "list of numbers"),
                      ([1.0] * 101, "1 to 100")):
        path.write_text(json.dumps({"servesize_workload": 1, "user": {"median_tokens": 5000, "sigma": 0.5},
                                    "output_spread": bad}))
        with pytest.raises(BadInput, match=said):
            load_workload(str(path))


def test_batch_api_output_and_a_dotted_column_are_read(tmp_path):
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(json.dumps({"response": {"body": {"usage": {"prompt_tokens": p}}}}) for p in (5_000, 7_000)))
    assert list(read_token_counts(path).user) == [5_000, 7_000]
    assert list(read_token_counts(path, column="response.body.usage.prompt_tokens").user) == [5_000, 7_000]


def test_gzip_is_detected_from_the_content(tmp_path):
    plain = write_csv(tmp_path / "p.csv", [2_000, 3_000, 4_000], column="input_tokens")
    packed = tmp_path / "p.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    obs = read_token_counts(packed)
    assert obs.format == "csv" and list(obs.user) == [2_000, 3_000, 4_000]


def test_the_written_file_is_a_workload_plan_accepts(tmp_path):
    path = write_csv(tmp_path / "prompts.csv", lognormal_sample(2_000))
    for out in ("w.json", "w.toml"):
        rc = main(["workload", "fit", str(path), "--out", str(tmp_path / out), "--prefix-tokens", "12k"])
        assert rc == 0
        w = load_workload(tmp_path / out)
        assert w.user.prefix_tokens == 12_000 and w.user.sigma == pytest.approx(0.81, rel=0.05)
        # what the file does not say is the preset's (coding-agent), read back from the preset, not the file
        assert (w.think_time_s, w.output_tokens, w.invalidation) == (30.0, 1_000, 0.01)


def test_the_plot_is_a_png(tmp_path):
    path = write_csv(tmp_path / "prompts.csv", lognormal_sample(2_000))
    assert main(["workload", "fit", str(path), "--plot", str(tmp_path / "fit.png")]) == 0
    assert (tmp_path / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_output_is_one_document(tmp_path, capsys):
    path = write_csv(tmp_path / "prompts.csv", lognormal_sample(500))
    assert main(["workload", "fit", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["user"]["n"] == 500 and "ks_meaning" in doc["user"]


@pytest.mark.parametrize(
    "name, content",
    [
        ("garbage.csv", "prompt_tokens\n1000\nlots\n"),
        ("nocolumn.csv", "a,b\n1,2\n"),
        ("broken.jsonl", '{"usage": {"prompt_tokens": 5}}\n{not json\n'),
        ("unknown.jsonl", '{"hello": 1}\n'),
        ("empty.csv", ""),
        ("tooshort.csv", "prompt_tokens\n5\n7\n"),
    ],
)
def test_a_malformed_file_exits_2_with_one_line(tmp_path, capsys, name, content):
    path = tmp_path / name
    path.write_text(content)
    assert main(["workload", "fit", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesize: ") and err.count("\n") == 1


def test_a_missing_file_exits_2(tmp_path, capsys):
    assert main(["workload", "fit", str(tmp_path / "nope.csv")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_claude_code_trace_fits_every_field_from_the_file(traces_dir, capsys):
    path = traces_dir / "claude-code-sessions.jsonl.gz"
    fit = fit_workload(path)
    # session length = each request's input tokens (`in`, the full prompt: 64 x its prefix-block hashes)
    assert fit.observations.format == "claude-code" and fit.observations.skipped == 0
    assert fit.user_fit.n > 40_000
    assert 60_000 < fit.user_fit.median < 150_000       # measured: median ~99k, sigma ~0.66
    assert 0.4 < fit.user_fit.sigma < 1.0
    assert fit.subagent_fit is not None and fit.workload.subagent_ratio < 0.1
    f = fit.fields
    assert 14_000 < f["user_prefix_tokens"].value < 16_000   # median system + tool tokens: the seed's 15k
    assert 0.0 < f["invalidation"].value < 0.05              # in-session hash-block reuse (README: 0.964 hit rate)
    # think time: the mean of the pauses (end of a request to the next) of at most AWAY_AFTER_S (half an hour),
    # measured 48.3 s (median 9.6 s: the README's "about 10 s"), the log-normal MLE's sigma 1.29 their shape; the
    # 555 longer ones are the users away (67% of the pause time; with them the bare mean is 141 s)
    assert 40 < f["think_time_s"].value < 60 and 1.1 < f["think_time_sigma"].value < 1.5
    assert "555 pauses over 30 minutes" in f["think_time_s"].how
    assert 300 < f["output_tokens"].value < 600 and f["warm_turn_tokens"].fitted
    assert fit.from_preset() == ["reuse_tokens"]  # a trace of sessions: a returning turn is evicted by its pause
    with capsys.disabled():
        print(f"\nclaude-code trace: median {fit.user_fit.median:,.0f}, sigma {fit.user_fit.sigma:.3f}, "
              f"KS D {fit.user_fit.ks_d:.3f}, n {fit.user_fit.n:,}; prefix {f['user_prefix_tokens'].value:,}, "
              f"invalidation {f['invalidation'].value:.4f}, think {f['think_time_s'].value:.1f} s, "
              f"output {f['output_tokens'].value}, warm turn {f['warm_turn_tokens'].value}")


def test_the_mooncake_conversation_trace_gives_the_chat_presets_prefix(traces_dir):
    fit = fit_workload(traces_dir / "mooncake-conversation.jsonl.gz", preset_name="chat")
    assert fit.observations.format == "mooncake" and fit.user_fit.n == 12_031
    assert fit.fields["user_prefix_tokens"].value == 512 == preset("chat").values["user_prefix_tokens"]
    assert 0.55 < fit.fields["invalidation"].value < 0.65     # the chat preset's 'upper bound 0.61'
    assert 300 < fit.fields["output_tokens"].value < 400


def test_a_mooncake_trace_carries_its_warm_requests_reuse_distances_and_no_invented_subagents(traces_dir):
    from servesize import api
    from servesize.simulate.cache import CacheConfig, replay_exact
    from servesize.simulate.replay import ReplayOptions, build_replay
    from servesize.simulate.traces import read_trace

    path = traces_dir / "mooncake-synthetic.jsonl.gz"
    fit = api.fit_workload(path, max_model_len=40_960)
    w, f = fit.workload, fit.fields
    assert f["reuse_tokens"].fitted and f["subagent_ratio"].value == 0.0 and w.subagent_ratio == 0.0
    assert 100 < f["warm_turn_tokens"].value < 1_000  # a warm request's tokens past the hit: measured 427
    # the exact replay (vLLM's pool, LRU, tail-first) at 1,000 blocks of 512 tokens finds the prefix past the shared
    # one of as many warm requests as the distances say it holds
    replay = build_replay(read_trace(path), ReplayOptions(warmup=0.0, max_model_len=40_960))
    res = replay_exact(replay, CacheConfig(1_002, 512))
    warm = res.hit_tokens > 0
    ideal_warm = int(round((1 - f["invalidation"].value) * replay.requests))
    held = float(np.count_nonzero(warm)) / ideal_warm
    assert 1.0 - w.reuse_evicted(1_000 * 512) == pytest.approx(held, abs=0.02)  # 0.215 against 0.211
