"""workload fit says only what the file says: each format's fields are fitted from it or marked as the preset's,
bad rows are skipped and counted, and the file written is read back over the preset it names."""

import json
import math

import numpy as np
import pytest

from servesize.cli import main
from servesize.workload.files import load_workload, read_workload_data, write_workload
from servesize.workload.fit import EMPIRICAL_POINTS, fit_observations
from servesize.workload.model import EmpiricalClass, SessionClass
from servesize.workload.presets import ORIGIN_FIELDS
from servesize.workload.readers import read_token_counts, shared_leading_blocks

NEVER_FITTED = {"max_model_len", "speculative", "subagents_share_prefix"}  # deployment choices no log states


def fit_file(path, **kw):
    return fit_observations(read_token_counts(path), **kw)


def every_field_is_fitted_or_the_presets(tmp_path, fit, name="w.json"):
    """The written file marks every workload field once: in fit.fitted (with how) or fit.from_preset (with why)."""
    out = tmp_path / name
    write_workload(fit, out)
    data = read_workload_data(out)
    fitted, from_preset = data["fit"]["fitted"], data["fit"]["from_preset"]
    assert set(fitted) | set(from_preset) == set(ORIGIN_FIELDS) and not set(fitted) & set(from_preset)
    assert NEVER_FITTED <= set(from_preset)
    assert all(text.strip() for text in (*fitted.values(), *from_preset.values()))
    assert data["preset"] == fit.preset_name
    loaded = load_workload(out)
    # read back, it is the workload the fit found: plan --workload on the file plans what simulate fitted
    assert loaded == fit.workload
    return data, loaded


def lognormal(n, median, sigma, seed=0):
    return np.random.default_rng(seed).lognormal(math.log(median), sigma, n)


# ------------------------------------------------------------------------------------------------ CSV

def test_a_csv_with_outputs_cache_hits_sessions_and_classes_fits_each_of_them(tmp_path):
    rows, rng = ["session_id,timestamp,prompt_tokens,completion_tokens,cached_tokens,class"], np.random.default_rng(1)
    for s in range(40):
        t = 0.0
        for turn in range(5):
            prompt = int(1_000 + 800 * turn + rng.integers(0, 200))
            cached = 0 if turn == 0 else prompt - 600  # the first turn of a session matches nothing
            rows.append(f"s{s},{t},{prompt},{300 + turn},{cached},user")
            t += 20.0  # one request every 20 s within a session
        rows.append(f"s{s},{t},{5_000 + s},50,0,subagent")
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    fit = fit_file(path, preset_name="chat", prefix_tokens=200)
    f = fit.fields
    assert f["output_tokens"].value == round(np.mean([300 + t for t in range(5)] * 40 + [50] * 40))
    assert f["think_time_s"].value == 20.0                    # gaps within a session, user-class only
    # the 40 first turns of 200 requests cached nothing: they start their sessions (of 5), no later turn is cold
    assert (f["invalidation"].value, f["session_turns"].value) == (0.0, 5)
    assert f["subagent_ratio"].value == pytest.approx(40 / 200) and fit.workload.subagent is not None
    assert "which preset chat has none of" in " ".join(fit.notes)
    data, w = every_field_is_fitted_or_the_presets(tmp_path, fit)
    # reuse distances are a trace of lone requests' (hash ids global): a log of sessions evicts by its pauses
    assert set(data["fit"]["from_preset"]) == {"warm_turn_tokens", "reuse_tokens"} | NEVER_FITTED
    assert w.think_time_s == 20.0 and w.warm_turn_tokens == 284  # the chat preset's warm turn


def test_a_csv_with_only_prompt_lengths_fits_the_lengths_and_leaves_the_rest_to_the_preset(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("ContextTokens\n" + "\n".join(str(int(x)) for x in lognormal(500, 1_000, 0.5)) + "\n")
    fit = fit_file(path, preset_name="chat")
    assert fit.fitted() == ["user_median_tokens", "user_sigma"]
    data, w = every_field_is_fitted_or_the_presets(tmp_path, fit, "w.toml")
    assert "prefix_tokens" not in data["user"] and w.user.prefix_tokens == 512  # the chat preset's block
    # the chat preset's: conversations of 2 requests, the first cold beyond the prefix, no other turn cold
    assert (w.invalidation, w.session_turns, w.output_tokens, w.subagent) == (0.0, 2, 211, None)


def test_bad_rows_are_skipped_and_counted_never_silently(tmp_path, capsys):
    good = [str(int(x)) for x in lognormal(30, 3_000, 0.4)]
    cells = good[:10] + ["nan", "lots", "", "-5", "0"] + good[10:]
    path = tmp_path / "bad.csv"
    path.write_text("id,prompt_tokens\n" + "\n".join(f"r{i},{c}" for i, c in enumerate(cells)) + "\n")
    obs = read_token_counts(path)
    assert len(obs.user) == 30 and obs.skipped == 5 and obs.records == 35
    assert "'nan'" in obs.skip_examples[0] and "'lots'" in obs.skip_examples[1] and "empty" in obs.skip_examples[2]
    assert main(["workload", "fit", str(path)]) == 0
    assert "5 unreadable row(s) skipped" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ JSONL

def test_a_truncated_last_jsonl_line_is_skipped_not_fatal(tmp_path):
    records = [json.dumps({"usage": {"prompt_tokens": int(x), "completion_tokens": 100}}) for x in lognormal(40, 5_000, 0.6)]
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(records) + '\n{"usage": {"prompt_tok')  # the writer was killed mid-line
    obs = read_token_counts(path)
    assert obs.format == "openai" and len(obs.user) == 40 and obs.skipped == 1
    assert "not valid JSON" in obs.skip_examples[0]
    fit = fit_observations(obs)
    assert fit.fields["output_tokens"].value == 100 and not fit.fields["invalidation"].fitted  # no cached tokens


def test_anthropic_usage_gives_prompts_outputs_and_cache_reads(tmp_path):
    recs = [{"usage": {"input_tokens": 100, "cache_read_input_tokens": 9_000 if i % 4 else 0,
                       "cache_creation_input_tokens": 900, "output_tokens": 250}} for i in range(40)]
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs))
    fit = fit_file(path)
    assert fit.observations.format == "anthropic"
    assert fit.fields["invalidation"].value == pytest.approx(0.25) and fit.fields["output_tokens"].value == 250
    every_field_is_fitted_or_the_presets(tmp_path, fit)


def test_claude_code_sessions_give_prefix_invalidation_think_time_output_and_turns_from_the_file(tmp_path):
    def session(k):
        reqs, ids = [], list(range(1, 400))  # 64-token blocks: 300 prefix blocks then the conversation
        for j in range(8):
            ids = ids + list(range(1_000 * (j + 1), 1_000 * (j + 1) + 10))
            reqs.append({"t": 30.0 * j, "in": 64 * len(ids), "out": 200, "hash_ids": list(ids)})
        rewritten = list(range(1, 301)) + list(range(90_000, 90_200))  # compaction: new history after the prefix
        reqs.append({"t": 30.0 * 8, "in": 64 * len(rewritten), "out": 200, "hash_ids": rewritten})
        return {"id": f"s{k}", "block_size": 64, "system_tokens": 4_000, "tool_tokens": 15_200, "requests": reqs}

    path = tmp_path / "cc.jsonl"
    path.write_text("\n".join(json.dumps(session(k)) for k in range(12)))
    fit = fit_file(path)
    f = fit.fields
    assert f["user_prefix_tokens"].value == 19_200
    # per session: the first request starts it (sessions of 9 requests); of the 8 after it, the compacted one
    # matches no history of its own
    assert f["session_turns"].value == 9 and f["invalidation"].value == pytest.approx(1 / 8, abs=1e-4)
    assert fit.workload.cold_shares() == pytest.approx((1 / 8 * 8 / 9, 1 / 9), abs=1e-4)  # 2 cold of 9, as read
    assert f["think_time_s"].value == 30.0 and f["output_tokens"].value == 200
    assert f["warm_turn_tokens"].value == 640                  # 10 new blocks of 64 tokens a turn
    assert f["subagent_ratio"].value == 0.0 and fit.workload.subagent is None  # labelled: none is a subagent's
    every_field_is_fitted_or_the_presets(tmp_path, fit)


def test_mooncake_hash_blocks_give_the_shared_prefix_and_the_cold_share():
    assert shared_leading_blocks([[0, 1, 2], [0, 1, 5], [0, 7], [0, 8], [9]]) == 1  # block 0 in 4 of 5, blocks 0-1 in 2
    assert shared_leading_blocks([[0, 1, 2], [0, 1, 5], [0, 1], [9]]) == 2        # blocks 0, 1 in 3 of 4
    assert shared_leading_blocks([[3], [4]]) == 0


def test_a_mooncake_file_fits_prefix_invalidation_and_output(tmp_path):
    recs = []
    for i in range(20):  # ten conversations of two turns behind one shared block
        first = [0, 100 + i * 10, 101 + i * 10]
        recs.append({"timestamp": i, "input_length": 1_500, "output_length": 300, "hash_ids": first})
        recs.append({"timestamp": i + 100, "input_length": 2_600, "output_length": 100, "hash_ids": first + [5_000 + i]})
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs))
    fit = fit_file(path, preset_name="chat")
    assert fit.fields["user_prefix_tokens"].value == 512
    assert fit.fields["invalidation"].value == 0.5            # every first turn is new past the shared block
    assert fit.fields["output_tokens"].value == 200
    every_field_is_fitted_or_the_presets(tmp_path, fit)


def test_a_trace_of_lone_requests_sharing_prefixes_carries_its_warm_requests_reuse_distances(tmp_path):
    from servesize import api
    from servesize.workload.model import REUSE_POINTS

    recs = []
    for i in range(20):  # twenty lone requests behind one shared block, each asked again 100 s later with more
        first = [0, 100 + i * 10, 101 + i * 10]
        recs.append({"timestamp": i, "input_length": 1_500, "output_length": 300, "hash_ids": first})
        recs.append({"timestamp": i + 100, "input_length": 2_600, "output_length": 100, "hash_ids": first + [5_000 + i]})
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs))
    fit = api.fit_workload(path, preset="chat")
    points = fit.fields["reuse_tokens"].value
    assert len(points) == REUSE_POINTS and list(points) == sorted(points)
    # request i's block past the shared one was last used by its first ask; since then the later first asks used two
    # blocks each (19 - i), the shared block one, and the repeats before it four each (its two, a new one and its
    # reply's full block): 39 + 2i distinct blocks, held by an LRU pool of more, i.e. (40 + 2i) x 512 tokens
    assert 40 * 512 <= points[0] < 42 * 512 and 76 * 512 < points[-1] <= 78 * 512
    # a pool of 30,000 tokens holds 58 blocks: it has evicted the prefixes of the ten repeats with i >= 10
    assert fit.workload.reuse_evicted(30_000) == pytest.approx(0.5, abs=0.03)
    assert fit.workload.reuse_evicted(0) == 1.0 and fit.workload.reuse_evicted(10**9) == 0.0
    # what a repeat prefills: its prompt past the two full blocks its first ask cached (the third was partial)
    assert fit.fields["warm_turn_tokens"].value == 2_600 - 2 * 512
    every_field_is_fitted_or_the_presets(tmp_path, fit)


def test_a_workload_with_sessions_carries_no_reuse_distances(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("prompt_tokens\n" + "\n".join(str(1_000 + i) for i in range(200)) + "\n")
    fit = fit_file(path, preset_name="chat")
    assert fit.workload.reuse_tokens is None and not fit.fields["reuse_tokens"].fitted


@pytest.mark.parametrize("bad, words", [([3.0, 2.0], "ascending"), ([-1.0], "reuse_tokens"), ("x", "list"),
                                        (list(range(1_001)), "1 to 1000")])
def test_reuse_distances_a_file_gives_are_checked(bad, words):
    from servesize.errors import BadInput
    from servesize.workload.presets import preset

    with pytest.raises(BadInput, match=words):
        preset("chat").workload().replace(reuse_tokens=bad)


# ------------------------------------------------------------------------------------------------ choice of distribution

def test_a_sample_whose_tail_stops_short_of_the_log_normals_is_read_as_itself(tmp_path):
    from servesize.workload.fit import TAIL_EXCESS_MAX

    whole = np.sort(lognormal(20_000, 6_000, 1.2, seed=3))
    path = tmp_path / "whole.csv"
    path.write_text("prompt_tokens\n" + "\n".join(f"{x:.0f}" for x in whole) + "\n")
    fit = fit_file(path, preset_name="chat")
    # drawn from a log-normal: the fit expects about one of them past the largest (Exp(1)), and keeps its form
    assert fit.distribution == "lognormal" and fit.user_fit.expected_past(whole[-1]) < 5
    # the same prompts, the longest 1% never sent (a context every prompt stays under): KS D is still small, but
    # the fit's tail prices some 150 prompts past the longest the trace holds, so the trace is read as itself
    cut = whole[: int(whole.size * 0.99)]
    path = tmp_path / "cut.csv"
    path.write_text("prompt_tokens\n" + "\n".join(f"{x:.0f}" for x in cut) + "\n")
    fit = fit_file(path, preset_name="chat")
    assert fit.user_fit.ks_d < 0.10 and fit.user_fit.expected_past(cut[-1]) > TAIL_EXCESS_MAX
    assert fit.distribution == "empirical" and "past the largest read" in fit.fields["user_sigma"].how
    assert isinstance(fit.workload.user, EmpiricalClass) and fit.workload.user.lengths.max() <= cut[-1]
    assert fit_file(path, preset_name="chat", distribution="lognormal").distribution == "lognormal"  # as asked


def test_a_poor_log_normal_fit_writes_the_observed_distribution_itself(tmp_path):
    bimodal = np.concatenate([np.full(3_000, 400.0), np.full(3_000, 4_000.0)]) + np.arange(6_000) % 7
    path = tmp_path / "two.csv"
    path.write_text("prompt_tokens\n" + "\n".join(f"{x:.0f}" for x in bimodal) + "\n")
    auto = fit_file(path, preset_name="chat")
    assert auto.user_fit.ks_d >= 0.10 and auto.distribution == "empirical"
    assert isinstance(auto.workload.user, EmpiricalClass) and auto.workload.user.lengths.size == EMPIRICAL_POINTS
    assert float(np.mean(auto.workload.user.lengths < 1_000)) == pytest.approx(0.5, abs=0.01)
    forced = fit_file(path, preset_name="chat", distribution="lognormal")
    assert isinstance(forced.workload.user, SessionClass)
    _, w = every_field_is_fitted_or_the_presets(tmp_path, auto)
    assert isinstance(w.user, EmpiricalClass)


def test_a_fitted_workload_plans_with_the_preset_filling_what_the_file_does_not_say(tmp_path, capsys):
    path = tmp_path / "p.csv"
    path.write_text("prompt_tokens,output_tokens\n" + "\n".join(f"{int(x)},{150}" for x in lognormal(400, 2_300, 0.7)))
    out = tmp_path / "w.json"
    assert main(["workload", "fit", str(path), "--preset", "chat", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["plan", "llama-3.1-8b", "--gpus", "1xL40S", "--workload", str(out), "--no-sensitivity", "--fills", "200",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    origin = d["workload_origin"]
    assert origin["preset"] == "chat" and origin["sources"]["output_tokens"].startswith("file w.json")
    assert origin["sources"]["think_time_s"].startswith("preset chat")
    assert d["workload"]["output_tokens"] == 150 and d["workload"]["user"]["prefix_tokens"] == 512


def test_a_prefix_the_file_does_not_give_and_the_preset_makes_too_long_is_flagged_by_the_fit(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("prompt_tokens\n" + "\n".join(str(int(x)) for x in lognormal(100, 2_300, 0.7)))
    fit = fit_file(path)  # coding-agent: a 15,000-token prefix
    assert any("plan will refuse it" in n for n in fit.notes)


def test_a_fitted_chat_log_plans_with_the_prefix_it_implies_not_the_seeds(tmp_path, capsys):
    # a chat log of 2,200- and 2,400-token prompts (mean 2,300) and nothing else: under the default preset its
    # missing prefix would be the seed's 15,000 tokens, longer than every session, and plan refuses it
    path = tmp_path / "chat.csv"
    path.write_text("prompt_tokens\n" + "\n".join(str(2_200 + 200 * (i % 2)) for i in range(400)) + "\n")
    assert main(["workload", "fit", str(path), "--out", str(tmp_path / "seed.json")]) == 0
    assert main(["workload", "fit", str(path), "--preset", "chat", "--out", str(tmp_path / "chat.json")]) == 0
    capsys.readouterr()
    plan = ["plan", "llama-3.1-8b", "--gpus", "1xL40S", "--no-sensitivity", "--json"]
    assert main([*plan, "--workload", str(tmp_path / "seed.json")]) == 2
    assert "the user prefix (15,000 tokens, preset coding-agent)" in capsys.readouterr().err
    assert main([*plan, "--workload", str(tmp_path / "chat.json")]) == 0
    d = json.loads(capsys.readouterr().out)
    # chat's 512-token prefix held once; every session warm beyond it (2,300 - 512): the cold requests are the
    # conversations' first (session_turns 2), not turns that lost their history
    prefix, mean_cost = 512, 2_300 - 512
    sessions = (d["pool_tokens"] - prefix) / mean_cost
    assert d["warm_users"]["p50"] == pytest.approx(sessions, abs=3)
    assert d["warm_sessions"]["p50"] == d["warm_users"]["p50"]  # no subagents: every warm session is a user's


def test_a_pause_longer_than_away_after_s_is_the_user_away_and_not_think_time(tmp_path):
    from servesize.workload.catalogue import AWAY_AFTER_S
    rows = ["session_id,timestamp,prompt_tokens,completion_tokens"]
    for s in range(20):
        stamps = [0.0, 10.0, 40.0, 40.0 + AWAY_AFTER_S + 600 * (s + 1), 50.0 + AWAY_AFTER_S + 600 * (s + 1)]
        rows += [f"s{s},{t},{1_000 + 100 * k},100" for k, t in enumerate(stamps)]
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    f = fit_file(path, preset_name="chat").fields
    # pauses 10, 30 and 10 s a session (its fourth, over half an hour, is the user away): the mean of those three
    assert f["think_time_s"].value == pytest.approx(50 / 3, abs=0.01)
    assert "20 pauses over 30 minutes" in f["think_time_s"].how and "the user away" in f["think_time_s"].how


def test_prompts_over_a_deployments_max_model_len_are_left_out_with_nothing_of_them_in_pauses_or_growth(tmp_path):
    """vLLM refuses a prompt over max_model_len: fitted for such a deployment (the engine simulator's plan beside a
    trace), a log's longer prompts are left out and counted, and a session's next pause runs from the request
    before them, as the engine's replay of the accepted requests sends it."""
    def session(k):
        reqs = [{"t": 30.0 * j, "api_time": 2.0, "in": 20_000 + 10_000 * j, "out": 100} for j in range(5)]
        reqs.append({"t": 200.0, "api_time": 2.0, "in": 21_000, "out": 100})  # compacted: short again
        return {"id": f"s{k}", "requests": reqs}

    path = tmp_path / "cc.jsonl"
    path.write_text("\n".join(json.dumps(session(k)) for k in range(12)))
    whole = read_token_counts(path)
    cut = read_token_counts(path, max_prompt_tokens=40_000)
    assert len(whole.user) == 72 and cut.refused == 12 * 2 and len(cut.user) == 12 * 4
    assert max(cut.user) <= 40_000 and max(whole.user) == 60_000
    # the pauses: 28 s each, then from the last accepted request's end (the 40,000-token one: t 60 + 2 s) to the
    # compacted one at 200 s, where the whole log's runs from the 60,000-token one's (t 120 + 2 s)
    assert sorted(set(np.round(cut.gaps_s, 6))) == [28.0, 138.0] and sorted(set(np.round(whole.gaps_s, 6))) == [28.0, 78.0]
    assert list(cut.turn_growth) == [10_000.0] * 24  # 20,000 -> 30,000 -> 40,000; the compacted one shrinks
    fit = fit_observations(cut)
    assert any("24 prompt(s) longer than max_model_len 40,000 left out" in n for n in fit.notes)
