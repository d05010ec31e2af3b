"""measure sessions: the seeded session generator, the ladder, verdicts, and a short run."""

import asyncio
import json
import math

import pytest
from testserver import Fault, ServerConfig, TestServer

from servesize.cli import main
from servesize.measure.client import RequestResult
from servesize.measure.record import RunRecord, read_record
from servesize.measure.sessions import (
    ClassParams,
    RungStats,
    SessionGenerator,
    SessionParams,
    SessionsConfig,
    is_warm_hit,
    knee,
    ladder,
    measure_sessions,
    rung_stats,
    ttft_fit,
    verdict,
)

PARAMS = SessionParams(user=ClassParams(1500, 0.5, 300), subagent=ClassParams(500, 0.5, 100), subagent_ratio=0.25,
                       invalidation=0.1, max_model_len=4000, think_time_s=0.05, output_tokens=4, turn_tokens=100, seed=3)


def turns(params=PARAMS, n=40, user=0):
    gen = SessionGenerator(params, rung=0, user=user, nonce=7)
    return [gen.next() for _ in range(n)]


def test_the_same_seed_gives_the_same_requests():
    assert [t.text for t in turns()] == [t.text for t in turns()]
    assert [t.text for t in turns(user=1)] != [t.text for t in turns()]


def test_each_turn_extends_the_previous_prompt_of_its_session_so_it_can_hit():
    last = {}
    for t in turns():
        if t.turn > 0 and not t.salted:
            prev = last[t.session]
            assert t.words[:len(prev)] == prev and t.reusable_words == len(prev)
            assert len(t.words) - len(prev) == PARAMS.output_tokens + PARAMS.turn_tokens
        last[t.session] = t.words


def test_sessions_never_pass_the_cap_and_share_their_class_prefix():
    ts = turns(n=200)
    assert max(len(t.words) for t in ts) + PARAMS.output_tokens <= PARAMS.max_model_len
    users = [t for t in ts if t.kind == "user" and not t.words[0].startswith("salt")]  # a salted session stays salted
    assert len({tuple(t.words[:300]) for t in users}) == 1
    share = sum(t.kind == "subagent" for t in ts) / len(ts)
    assert 0.1 < share < 0.3  # r / (1 + r) = 0.2


def test_the_ladder_is_geometric_around_the_prediction_and_includes_it():
    assert ladder(86) == [43, 61, 86, 121, 172]
    assert ladder(1) == [1, 2]


def test_a_warm_hit_covers_the_prefix_and_more_than_half_the_history():
    tags = {"returning": True, "prefix_tokens": 300, "reusable_tokens": 1300}
    hit = RequestResult(id="a", tags=tags, cached_tokens=1296, cached_tokens_reported=True)
    prefix_only = RequestResult(id="b", tags=tags, cached_tokens=288, cached_tokens_reported=True)
    assert is_warm_hit(hit) and not is_warm_hit(prefix_only)


def test_verdicts_are_brackets_within_25_percent():
    assert verdict("warm users", 9, 8, 16)["mark"] == "✓"
    assert verdict("warm users", 7, 8, 16)["mark"] == "✓"   # 12.5% below the bracket
    assert verdict("warm users", 5, 8, 16)["mark"] == "~"   # 37.5% below
    assert verdict("warm users", 40, 8, 16)["mark"] == "✗"


def test_the_knee_is_the_last_rung_above_target_before_the_first_below():
    def g(users, rate):
        return RungStats(users, 1, 10, 0, {}, 10, 10, rate, "cached_tokens", {}, {}, {}, None, None, None)
    assert knee([g(2, 1.0), g(4, 0.95), g(8, 0.5), g(16, 0.95)], 0.9) == \
        {"warm_users": 4, "cold_users": 8, "inconclusive_users": None}


def test_a_failed_rung_is_never_warm_and_leaves_the_knee_open_above_the_last_warm_rung():
    def g(users, rate, status="measured"):
        return RungStats(users, 1, 10, 0, {}, 10, 10, rate, "cached_tokens", {}, {}, {}, None, None, None, status=status)
    # the 4-user rung's few completed requests were all warm, but most of its requests failed
    rungs = [g(2, 1.0), g(4, 1.0, "failed")]
    assert knee(rungs, 0.9) == {"warm_users": 2, "cold_users": None, "inconclusive_users": 4}
    assert knee([g(2, None)], 0.9) == {"warm_users": None, "cold_users": None, "inconclusive_users": 2}  # no signal
    # the prediction is judged against what was measured: >= 2 users, nothing above
    assert verdict("warm users", 3, 2, None)["mark"] == "?"
    assert verdict("warm users", 0.5, 2, None)["mark"] == "✗"  # at least 75% below a lower bound of 2


def _r(rid, *, returning, cached=None, ttft=None, prompt=None, turn=1, prefix=300, reusable=1300, error=None, itl=None,
       decode=None):
    tags = {"returning": returning, "turn": turn, "prefix_tokens": prefix, "reusable_tokens": reusable}
    return RequestResult(id=rid, tags=tags, cached_tokens=cached, cached_tokens_reported=cached is not None, ttft_s=ttft,
                         prompt_tokens=prompt, error=error, itl=itl, decode_tok_per_s=decode)


def test_a_rungs_statistics_are_counted_from_its_requests():
    results = [
        _r("first", returning=False, cached=0, ttft=1.0, turn=0, itl={"p50_s": 0.010, "p95_s": 0.030}, decode=100.0),
        _r("hit", returning=True, cached=1296, ttft=0.1, itl={"p50_s": 0.020, "p95_s": 0.040}, decode=50.0),
        _r("miss", returning=True, cached=288, ttft=0.9),  # the prefix only: cold
        _r("failed", returning=True, error={"type": "http_error", "message": "HTTP 500"}),
    ]
    g = rung_stats(4, 10.0, results, preemptions=2.0, metrics_hit_ratio=0.5)
    assert (g.requests, g.errors, g.error_types, g.returning, g.warm_hits) == (4, 1, {"http_error": 1}, 3, 1)
    # the failed returning request is a miss, counted: 1 warm of 3 returning sent, not 1 of the 2 that completed
    assert g.signal == "cached_tokens" and g.warm_hit_rate == 1 / 3 and g.returning_errors == 1
    assert g.ttft_hit["n"] == 1 and g.ttft_hit["p50_s"] == 0.1
    assert g.ttft_miss["n"] == 2 and g.ttft_miss["p50_s"] == pytest.approx((1.0 + 0.9) / 2)  # first turns are misses too
    assert g.itl == {"p50_s": pytest.approx(0.015), "p95_s": pytest.approx(0.030 + 0.95 * (0.040 - 0.030))}
    assert g.decode_tok_per_s_p50 == pytest.approx(75.0)
    assert (g.preemptions, g.metrics_hit_ratio) == (2.0, 0.5)


def test_without_cached_tokens_a_hit_is_a_ttft_under_0_4_of_the_cold_ttft_fitted_over_first_turns():
    # first turns: ttft = 0.001 s x (prompt - prefix), exactly; the fit must find it
    first = [_r(f"f{n}", returning=False, ttft=n / 1000, prompt=n + 100, prefix=100, turn=0) for n in (1000, 2000, 3000)]
    fast = _r("fast", returning=True, ttft=0.79, prompt=2100, prefix=100)  # under 0.4 x 2.0 s
    slow = _r("slow", returning=True, ttft=1.21, prompt=3100, prefix=100)  # over 0.4 x 3.0 s
    assert ttft_fit(first) == pytest.approx((0.0, 0.001))
    g = rung_stats(2, 1.0, first + [fast, slow])
    assert g.signal == "ttft" and (g.returning, g.warm_hits, g.warm_hit_rate) == (2, 1, 0.5)
    assert g.ttft_hit["n"] == 1 and g.ttft_hit["p50_s"] == 0.79
    assert rung_stats(2, 1.0, [fast, slow]).signal == "none"  # no first turns to fit: no verdict, not a guess


# The ladder, bounded by count (requests_per_user), so it sends the same requests on any machine, with a
# pool that decides each rung by arithmetic, not by how the users' requests happen to interleave:
# every session is 1,500 tokens (sigma 0: no draw), 200 of them a shared prefix, and grows 104 tokens a
# turn; 5 requests per user stay within one session (8 turns), so a user's prompts span at most
# 1,500 + 4 x 104 = 1,916 tokens, 120 blocks of 16. The rungs of 1 and 2 users bring 3 users, at most
# 360 blocks, into a pool of 500: nothing is ever evicted, every returning request hits. 16 users'
# first prompts alone are 16 x 1,300 unique tokens, 2.6 pools: cycled through LRU, they evict each
# other before their turns come back.
LADDER = SessionParams(user=ClassParams(1500, 0.0, 200), max_model_len=4000, think_time_s=0.0, output_tokens=4,
                       turn_tokens=100, seed=3)
REQUESTS_PER_USER = 5


def test_a_short_ladder_finds_the_knee_of_a_small_pool():
    assert 3 * math.ceil((1500 + 4 * 104) / 16) <= 8000 // 16 < 16 * (1500 - 200) // 16

    async def go():
        async with TestServer(ServerConfig(capacity_tokens=8000, itl_s=0.02)) as server:
            cfg = SessionsConfig(url=server.url, params=LADDER, users=[1, 2, 16], duration_s=60,
                                 requests_per_user=REQUESTS_PER_USER, predicted_users=2)
            return await measure_sessions(cfg)
    r = asyncio.run(go())
    assert [g.users for g in r.rungs] == [1, 2, 16]
    assert [g.requests for g in r.rungs] == [REQUESTS_PER_USER * g.users for g in r.rungs]
    assert [g.returning for g in r.rungs] == [(REQUESTS_PER_USER - 1) * g.users for g in r.rungs]  # all but each first turn
    assert r.signal == "cached_tokens"
    assert [g.warm_hit_rate for g in r.rungs[:2]] == [1.0, 1.0]
    assert r.rungs[2].warm_hit_rate < r.warm_target
    assert all(g.errors == 0 for g in r.rungs)
    assert r.rungs[0].decode_tok_per_s_p50 > 0  # 4 tokens 20 ms apart: only a 60 ms stall in each request would hide it
    assert r.knee == {"warm_users": 2, "cold_users": 16, "inconclusive_users": None}
    assert [(v["name"], v["mark"]) for v in r.verdicts] == [("warm users", "✓")]


def test_a_rung_bounded_by_count_sends_exactly_that_many_requests_per_user():
    # without the bound, 60 s of users that never think would send thousands
    async def go():
        async with TestServer(ServerConfig()) as server:
            cfg = SessionsConfig(url=server.url, params=LADDER, users=[3], duration_s=60, requests_per_user=2)
            return await measure_sessions(cfg), server.completions
    r, served = asyncio.run(go())
    assert r.rungs[0].requests == served == 3 * 2


def test_errors_above_the_first_rung_fail_that_rung_end_the_ladder_and_keep_every_request(tmp_path):
    # 1 user x 2 requests succeed, then the server fails every request: the second rung stops the ladder
    async def go(record):
        async with TestServer(ServerConfig(faults=[Fault("status", status=500, after=2)])) as server:
            cfg = SessionsConfig(url=server.url, params=LADDER, users=[1, 2, 4], duration_s=60, requests_per_user=2)
            return await measure_sessions(cfg, record=record)
    record = RunRecord.create(tmp_path / "s.jsonl", "sessions", {})
    r = asyncio.run(go(record))
    record.close()
    assert [g.users for g in r.rungs] == [1, 2]
    assert (r.rungs[0].errors, r.rungs[1].errors, r.rungs[1].error_types) == (0, 4, {"http_error": 4})
    assert r.rungs[1].stop.startswith("error rate 100% > 5%: 4 of 4 requests failed") and r.rungs[1].failed
    assert r.exit_code == 2 and r.failure.startswith("the 2-user rung failed (error rate 100%")
    assert r.knee == {"warm_users": 1, "cold_users": None, "inconclusive_users": 2}
    contents = read_record(tmp_path / "s.jsonl", "sessions")
    assert len(contents.of_type("request")) == 2 + 4
    assert [e["users"] for e in contents.of_type("rung")] == [1]  # only the measured rung is complete
    assert [e["users"] for e in contents.of_type("rung_failed")] == [2]


def test_an_error_rate_over_the_limit_on_the_first_rung_ends_the_ladder_with_exit_2(tmp_path, capsys):
    rec = tmp_path / "s.jsonl"
    # every request fails; the rung's one second holds its first request even on a loaded machine
    with TestServer(ServerConfig(faults=[Fault("status", status=500)])) as server:
        code = main(["measure", "sessions", "--url", server.url, "--users", "1,2,4", "--duration", "1", "--median", "500",
                     "--prefix", "100", "--think-time", "0.02", "--output-tokens", "2", "--turn-tokens", "50",
                     "--max-model-len", "4000", "--subagent-ratio", "0", "--record", str(rec), "--json", "--quiet"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 2  # the report still comes out; nothing was measured, and stderr says why in one line
    assert captured.err.startswith("servesize: the 1-user rung failed (error rate 100%") and captured.err.count("\n") == 1
    assert "--resume" in captured.err
    assert len(out["rungs"]) == 1 and out["rungs"][0]["stop"].startswith("error rate 100%")
    assert out["failure"] and out["knee"]["inconclusive_users"] == 1
    lines = [json.loads(x) for x in open(rec)]
    types = [e["type"] for e in lines]
    assert lines[0]["type"] == "header" and types.count("rung") == 0 and types.count("rung_failed") == 1
    assert [e["type"] for e in lines].count("request") == out["rungs"][0]["requests"] >= 1


def test_resume_skips_completed_rungs(tmp_path, capsys):
    rec = tmp_path / "s.jsonl"
    args = ["--users", "1,2", "--duration", "0.4", "--median", "500", "--prefix", "100", "--think-time", "0.02",
            "--output-tokens", "2", "--turn-tokens", "50", "--max-model-len", "4000", "--quiet"]
    with TestServer(ServerConfig()) as server:
        assert main(["measure", "sessions", "--url", server.url, "--record", str(rec), *args]) == 0
        before = server.completions
        assert main(["measure", "sessions", "--resume", str(rec), "--json", "--quiet"]) == 0
        assert server.completions == before  # both rungs were complete: nothing sent again
    lines = [json.loads(x) for x in open(rec)]
    assert [e["type"] for e in lines].count("segment") == 1


def test_sessions_needs_a_ladder_or_a_prediction(capsys):
    assert main(["measure", "sessions", "--url", "http://127.0.0.1:9"]) == 2
    assert "--users" in capsys.readouterr().err


def test_a_verdict_line_says_what_its_mark_means():
    assert verdict("warm users", 59, 30, 42)["line"] == \
        "~ warm users: predicted 59, measured [30, 42): 40% above it: near: beyond ±25%, within ±50%"
    assert verdict("warm users", 9, 8, 16)["line"] == "✓ warm users: predicted 9, measured [8, 16): inside the measured range"
    assert verdict("warm users", 40, 8, 16)["line"].endswith("150% above it: disagrees: beyond ±50%")
    assert verdict("warm users", 10, 4, None)["line"].startswith("? warm users: predicted 10, measured >= 4 (a lower bound)")
    assert verdict("warm users", 3, None, 4)["line"] == "✓ warm users: predicted 3, measured < 4: inside the measured range"


def test_the_rung_table_shows_a_rate_on_the_side_of_the_target_the_knee_put_it():
    from servesize.measure.report import hit_rate_text, render_sessions
    from servesize.measure.sessions import SessionsResult

    assert hit_rate_text(0.898, 0.9) == "89.8%" and hit_rate_text(0.8996, 0.9) == "89.96%"
    assert hit_rate_text(0.9, 0.9) == "90.0%" and hit_rate_text(None, 0.9) == "-"

    def g(users, rate):
        return RungStats(users, 1, 50, 0, {}, 49, round(49 * rate), rate, "cached_tokens", {}, {}, {}, None, None, None)
    rungs = [g(30, 1.0), g(42, 0.898)]
    r = SessionsResult(url="u", model="m", workload_line="w", rungs=rungs, signal="cached_tokens", warm_target=0.9,
                       knee=knee(rungs, 0.9), verdicts=[], notes=[], record_path=None)
    text = render_sessions(r)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("42 "))
    assert "89.8%" in row and "below 90%" in row and "0.90" not in row
    assert "warm-hit rate >= 90% up to 30 users, below it at 42: warm capacity in [30, 42) users" in text


def test_resuming_an_older_record_measures_again_a_rung_it_recorded_as_complete_with_too_many_errors():
    from servesize.measure.record import RecordContents
    from servesize.measure.sessions import SessionsRun

    def stats(users, stop=None):
        return RungStats(users, 1, 34, 24 if stop else 0, {}, 30, 10, 1.0, "cached_tokens", {}, {}, {}, None, None, None,
                         stop=stop).to_dict()
    old = [{"type": "rung", "users": 2, "stats": stats(2)},
           {"type": "rung", "users": 4, "stats": stats(4, "error rate 71% > 5% (connection_refused x24)")}]
    run = SessionsRun(SessionsConfig(url="u", params=LADDER, users=[2, 4]), resume=RecordContents(header={}, events=old))
    assert list(run._completed_rungs()) == [2]  # the 4-user rung is measured again
    assert run.attempts[4] == 1


def test_a_rung_interrupted_mid_way_is_measured_again_as_a_new_attempt():
    from servesize.measure.record import RecordContents
    from servesize.measure.sessions import SessionsRun

    done = RungStats(2, 1, 4, 0, {}, 2, 2, 1.0, "cached_tokens", {}, {}, {}, None, None, None).to_dict()
    # the 2-user rung is complete; the 4-user rung was interrupted (Ctrl-C, SIGTERM) after 3 requests: no rung line
    events = [{"type": "request", "users": 2, "attempt": 1, "result": {"id": "a"}}, {"type": "rung", "users": 2, "stats": done},
              *({"type": "request", "users": 4, "attempt": 1, "result": {"id": f"b{k}"}} for k in range(3)),
              {"type": "interrupted", "signal": "SIGTERM"}]
    run = SessionsRun(SessionsConfig(url="u", params=LADDER, users=[2, 4]), resume=RecordContents(header={}, events=events))
    assert list(run._completed_rungs()) == [2]
    # its next attempt is 2: a new nonce (new prompts, none warm from the interrupted ones), its requests apart
    assert run.attempts[4] == 1 and run.attempts[2] == 0


def test_each_rung_carries_the_servers_gauges_sampled_while_it_ran(monkeypatch, capsys):
    """KV usage and the scheduler's running requests, read from /metrics while the rung runs (GaugeSampler). The
    test server's requests take 4 x 20 ms of decode each, 5 per user one after another: a rung lasts 0.4 s or more,
    sampled every 20 ms here (GAUGE_SAMPLE_S shortened). What is asserted holds whatever the timing: a user has at
    most one request in flight, usage is a share of the pool."""
    import servesize.measure.metrics as metrics

    monkeypatch.setattr(metrics, "GAUGE_SAMPLE_S", 0.02)

    async def go():
        async with TestServer(ServerConfig(capacity_tokens=8000, itl_s=0.02)) as server:
            cfg = SessionsConfig(url=server.url, params=LADDER, users=[1, 2], duration_s=60,
                                 requests_per_user=REQUESTS_PER_USER)
            return await measure_sessions(cfg)
    r = asyncio.run(go())
    for g in r.rungs:
        (gauge,) = g.gauges
        assert gauge["samples"] >= 1 and gauge["failed_reads"] == 0
        assert 0.0 <= gauge["kv_usage_mean"] <= gauge["kv_usage_peak"] <= 1.0
        assert 0 <= gauge["running_mean"] <= gauge["running_peak"] <= g.users
        assert "waiting_peak" not in gauge  # the test server publishes no queue
    assert r.rungs[-1].gauges[0]["kv_usage_peak"] > 0  # two users' sessions are resident while the rung runs
    from servesize.measure.report import render_sessions

    text = render_sessions(r)
    assert "the server's gauges during each rung" in text and "KV usage peak" in text and "running peak" in text


def test_a_gauge_sampler_keeps_peaks_and_means_over_the_samples_that_carried_each_gauge():
    from servesize.measure.metrics import GaugeSampler, MetricsSnapshot

    g = GaugeSampler(scraper=None, interval_s=1.0)  # type: ignore[arg-type]
    for kv, running, waiting in [(0.5, 3.0, None), (0.9, 1.0, 4.0), (float("nan"), 2.0, 0.0)]:
        g.add(MetricsSnapshot(t_ns=0, kv_usage=kv, running=running, waiting=waiting))
    g.add(None)  # a failed read is no sample
    assert g.samples == 3
    out = asyncio.run(g.stop())
    assert out == {"samples": 3, "failed_reads": 0, "kv_usage_peak": 0.9, "running_peak": 3.0, "waiting_peak": 4.0,
                   "kv_usage_mean": 0.7, "running_mean": 2.0, "waiting_mean": 2.0}
