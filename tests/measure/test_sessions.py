"""measure sessions: the seeded session generator, the ladder, verdicts, and a short run."""

import asyncio
import json

from servesize.cli import main
from servesize.measure.client import RequestResult
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
    verdict,
)
from servesize.measure.testserver import Fault, ServerConfig, TestServer

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
    assert knee([g(2, 1.0), g(4, 0.95), g(8, 0.5), g(16, 0.95)], 0.9) == {"warm_users": 4, "cold_users": 8}


def test_a_short_ladder_finds_the_knee_of_a_small_pool():
    async def go():
        async with TestServer(ServerConfig(capacity_tokens=20000, itl_s=0.002)) as server:
            cfg = SessionsConfig(url=server.url, params=PARAMS, users=[1, 2, 16], duration_s=0.8, predicted_users=2)
            return await measure_sessions(cfg)
    r = asyncio.run(go())
    assert [g.users for g in r.rungs] == [1, 2, 16]
    assert r.signal == "cached_tokens"
    assert r.rungs[0].warm_hit_rate >= 0.9 and r.rungs[-1].warm_hit_rate < 0.9
    assert r.rungs[0].errors == 0 and r.rungs[0].decode_tok_per_s_p50 > 0
    assert r.knee["cold_users"] == 16
    assert r.verdicts and r.verdicts[0]["name"] == "warm users"


def test_an_error_rate_over_the_limit_ends_the_ladder(tmp_path, capsys):
    rec = tmp_path / "s.jsonl"
    with TestServer(ServerConfig(faults=[Fault("status", status=500, after=5)])) as server:
        code = main(["measure", "sessions", "--url", server.url, "--users", "1,2,4", "--duration", "0.5", "--median", "500",
                     "--prefix", "100", "--think-time", "0.02", "--output-tokens", "2", "--turn-tokens", "50",
                     "--max-model-len", "4000", "--subagent-ratio", "0", "--record", str(rec), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert len(out["rungs"]) < 3 and "error rate" in out["rungs"][-1]["stop"]
    # the report still comes out; the exit is 2 when the first rung already failed (nothing was measured)
    assert code == (2 if len(out["rungs"]) == 1 else 0)
    lines = [json.loads(x) for x in open(rec)]
    assert lines[0]["type"] == "header" and any(e["type"] == "rung" for e in lines)


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
