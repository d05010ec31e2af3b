"""measure sessions against a fleet: --url with several endpoints, sticky or spread routing, per-endpoint warmth.

Two test servers stand in for two replicas. Every count is decided by arithmetic, not by how requests
interleave: the pool is far larger than everything sent (nothing is evicted), every session is 1,500 tokens
(sigma 0) with a 200-token shared prefix and grows 104 tokens a turn, and each user sends 3 requests (turns
0, 1, 2). Sticky, a user's turns all reach one replica and every returning turn hits. Spread per request
(request k of user u to endpoint (u + k) mod 2), turn 1 reaches the replica that has only the shared prefix
of it (a miss) and turn 2 the one that holds turn 0 (1,488 of its 1,708 tokens cached: a hit): exactly half.
"""

from __future__ import annotations

import asyncio

from testserver import ServerConfig, TestServer

from servesize.cli import main
from servesize.measure.record import RunRecord, read_record
from servesize.measure.sessions import ClassParams, SessionParams, SessionsConfig, endpoint_of, endpoints, measure_sessions

PARAMS = SessionParams(user=ClassParams(1500, 0.0, 200), max_model_len=4000, think_time_s=0.0, output_tokens=4,
                       turn_tokens=100, subagent_ratio=0.0, invalidation=0.0, seed=3)
REQUESTS = 3


def _fleet(routing: str, path, workers=None):
    with TestServer(ServerConfig(capacity_tokens=1 << 20)) as a, TestServer(ServerConfig(capacity_tokens=1 << 20)) as b:
        cfg = SessionsConfig(url=f"{a.url},{b.url}", params=PARAMS, users=[2], duration_s=600, requests_per_user=REQUESTS,
                             routing=routing)
        record = RunRecord.create(path, "sessions", cfg.to_params())
        try:
            result = asyncio.run(measure_sessions(cfg, record=record, workers=workers))
        finally:
            record.close()
        return result, [a, b]


def _check_against_each_server(result, servers, path):
    """Each endpoint's figures are that server's own: its requests, the cached tokens its log says it served, and
    the prefix-cache hit ratio its /metrics counters give."""
    requests = read_record(path, "sessions").of_type("request")
    for e, (line, server) in enumerate(zip(result.rungs[0].endpoints, servers)):
        mine = [x["result"] for x in requests if x["result"]["tags"]["endpoint"] == e]
        assert line["url"] == server.url and line["requests"] == len(mine) == server.completions
        assert sum(r["cached_tokens"] for r in mine) == sum(entry["cached_tokens"] for entry in server.log)
        assert line["metrics_hit_ratio"] == server.prefix_hits / server.prefix_queries


def test_routing_picks_the_endpoint_by_user_or_by_request():
    assert [endpoint_of("sticky", u, k, 2) for u in (0, 1) for k in range(3)] == [0, 0, 0, 1, 1, 1]
    assert [endpoint_of("per-request", u, k, 2) for u in (0, 1) for k in range(3)] == [0, 1, 0, 1, 0, 1]
    assert endpoints("http://a:1, http://b:2,") == ["http://a:1", "http://b:2"]


def test_sticky_sessions_hit_on_every_replica_and_match_each_ones_own_counters(tmp_path):
    r, servers = _fleet("sticky", tmp_path / "s.jsonl")
    g = r.rungs[0]
    assert (g.requests, g.returning, g.warm_hits, g.warm_hit_rate) == (6, 4, 4, 1.0)
    assert [(e["requests"], e["users"], e["returning"], e["warm_hits"], e["warm_hit_rate"]) for e in g.endpoints] == \
        [(3, 1, 2, 2, 1.0), (3, 1, 2, 2, 1.0)]
    _check_against_each_server(r, servers, tmp_path / "s.jsonl")
    assert any("every user's requests went to one endpoint" in n for n in r.notes)


def test_a_router_that_spreads_a_users_turns_shows_the_lower_hit_rate_and_says_why(tmp_path):
    r, servers = _fleet("per-request", tmp_path / "p.jsonl")
    g = r.rungs[0]
    assert (g.requests, g.returning, g.warm_hits, g.warm_hit_rate) == (6, 4, 2, 0.5)
    assert [(e["requests"], e["users"], e["returning"], e["warm_hits"]) for e in g.endpoints] == [(3, 2, 2, 1), (3, 2, 2, 1)]
    _check_against_each_server(r, servers, tmp_path / "p.jsonl")
    note = next(n for n in r.notes if n.startswith("routing per-request"))
    assert "2 of 2 users sent requests to more than one endpoint" in note and "another replica" in note
    sticky, _ = _fleet("sticky", tmp_path / "s.jsonl")
    # each replica's own counters see it too: fewer of its queried tokens were hits than under sticky routing
    assert all(p["metrics_hit_ratio"] < s["metrics_hit_ratio"] for p, s in zip(g.endpoints, sticky.rungs[0].endpoints))


def test_the_cli_takes_a_comma_list_of_endpoints_and_prints_a_line_for_each(tmp_path, capsys):
    with TestServer(ServerConfig()) as a, TestServer(ServerConfig()) as b:
        code = main(["measure", "sessions", "--url", f"{a.url},{b.url}", "--routing", "per-request", "--users", "2",
                     "--requests-per-user", "3", "--median", "500", "--prefix", "100", "--think-time", "0.02",
                     "--output-tokens", "2", "--turn-tokens", "50", "--max-model-len", "4000", "--subagent-ratio", "0",
                     "--record", str(tmp_path / "c.jsonl"), "--quiet"])
        served = (a.completions, b.completions)
    out = capsys.readouterr().out
    assert code == 0 and served == (3, 3)
    assert f"{a.url}: 3 requests from 2 users" in out and f"{b.url}: 3 requests from 2 users" in out
    assert "note: routing per-request: 2 of 2 users sent requests to more than one endpoint" in out


def test_a_bad_endpoint_in_the_list_is_named_in_one_line(capsys):
    code = main(["measure", "sessions", "--url", "http://127.0.0.1:9,ftp://x", "--users", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("servesize: --url 'http://127.0.0.1:9,ftp://x': 'ftp://x' is not an http(s) URL")
    assert err.count("\n") == 1


def test_a_record_taken_before_routing_existed_continues_with_the_default_routing_only():
    import pytest

    from servesize.commands._measure import config_defaults, refuse_other_params
    from servesize.errors import BadInput

    old = SessionsConfig(url="http://a:1", params=PARAMS, users=[2]).to_params()
    del old["routing"]  # a header written before --routing
    defaults = config_defaults(SessionsConfig)
    refuse_other_params("s.jsonl", old, SessionsConfig(url="http://a:1", params=PARAMS, users=[2]).to_params(), defaults)
    with pytest.raises(BadInput, match="routing"):
        refuse_other_params("s.jsonl", old, SessionsConfig(url="http://a:1", params=PARAMS, users=[2],
                                                           routing="per-request").to_params(), defaults)
