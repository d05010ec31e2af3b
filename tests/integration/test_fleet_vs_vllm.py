"""`measure sessions` against a two-replica fleet of real vLLM CPU engines (issue #21).

Two engines on two loopback ports stand in for two data-parallel replicas: the tiny random-weight Llama of
make_tiny_model.py, prefix caching on, --enable-prompt-tokens-details, 16 MiB of KV (32,768 tokens) in blocks
of 32, each engine in its API server's process (one interpreter start each; both start together, once for the
module). The same short ladder runs twice, `--url A,B --routing sticky` and then `--routing per-request`, and
the test scrapes each engine's own /metrics before and after each run.

Every count is decided by arithmetic, not by timing. The tokenizer is word level (one word, one token, no BOS),
sessions are 600 tokens (sigma 1e-6: none moves off 600) with a 128-token shared prefix (4 blocks) and grow
4 + 64 tokens a turn, each user sends 3 requests (turns 0, 1, 2: prompts of 600, 668 and 736 tokens) 10 ms
apart, and the pool holds far more than everything sent (nothing is evicted). A returning turn is warm when
more than the prefix plus half its previous prompt's history was cached: turn 1 needs more than 364, turn 2
more than 398.

- sticky: user u's turns all reach endpoint u mod 2. Turn 1 finds turn 0's 600-token prompt (18 full blocks,
  576 tokens) cached, turn 2 finds turn 1's (20 blocks, 640): every returning turn hits, on both replicas.
- per-request: request k of user u goes to endpoint (u + k) mod 2. Turn 1 reaches the replica holding only
  the shared prefix of it (128 cached: a miss), turn 2 the one holding turn 0 (576: a hit): exactly half.

Each endpoint's client-side figures are checked against that engine's own counters: the cached tokens the
client was told on the endpoint's requests (which decide their warmth) add up to the engine's
prefix-cache hit increase, their prompt tokens to its query increase, rung by rung (the report's per-endpoint
/metrics lines) and over the whole run (this test's own scrapes, parsed here without servesize's parser).
"""

from __future__ import annotations

import concurrent.futures
import json
import re
import urllib.request

import pytest
from vllm_server import (
    SESSION_BLOCK_SIZE,
    SESSION_DTYPE,
    SESSION_KV_CACHE_MEMORY_BYTES,
    SESSION_MAX_MODEL_LEN,
    ServerConfig,
    VllmServer,
)

from cli_runner import run_captured
from servesize.measure.record import read_record

pytestmark = pytest.mark.vllm

USERS = (1, 2)
REQUESTS_PER_USER = 3
MEDIAN, PREFIX, TURN, OUTPUT = 600, 128, 64, 4
# --sigma must be > 0 (a log-normal); this one moves no session off 600 words: 600 x e^(1e-6 x 5) rounds to 600
SIGMA = 1e-6
WORKLOAD = ["--median", MEDIAN, "--sigma", SIGMA, "--prefix", PREFIX, "--turn-tokens", TURN, "--output-tokens", OUTPUT,
            "--think-time", 0.01, "--subagent-ratio", 0, "--invalidation", 0, "--max-model-len", 2048,
            "--turns-per-session", 8]
ENGINES = 2
MAX_NUM_SEQS = 8  # the ladder has at most 2 requests in flight on an engine


@pytest.fixture(scope="module")
def fleet(vllm_python, tiny_model, vllm_log_dir, start_timeout_s):
    """Two engines on two ports, started together (a start that fails stops the other and fails with its error)."""
    servers = [VllmServer(vllm_python, ServerConfig(
        model=tiny_model["path"], block_size=SESSION_BLOCK_SIZE, kv_cache_memory_bytes=SESSION_KV_CACHE_MEMORY_BYTES,
        max_model_len=SESSION_MAX_MODEL_LEN, max_num_seqs=MAX_NUM_SEQS, dtype=SESSION_DTYPE, in_process=True),
        vllm_log_dir / f"vllm-fleet-{i}.log") for i in range(ENGINES)]
    with concurrent.futures.ThreadPoolExecutor(ENGINES) as pool:
        starts = [pool.submit(s.start, timeout_s=2 * start_timeout_s) for s in servers]
        errors = [f.exception() for f in starts]
    if any(errors):
        for s in servers:
            s.stop()
        pytest.fail("two vLLM CPU engines could not run at once here:\n" +
                    "\n".join(f"engine {i}: {type(e).__name__}: {e}" for i, e in enumerate(errors) if e), pytrace=False)
    (vllm_log_dir / "fleet-starts.json").write_text(json.dumps([round(s.startup_s or 0, 1) for s in servers]))
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()


def prefix_cache_counters(url: str) -> dict[str, float]:
    """The engine's own prefix-cache counters (tokens), summed over label sets, read from its /metrics text."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for key in ("queries", "hits"):
        values = re.findall(rf"^vllm:prefix_cache_{key}_total(?:\{{[^}}]*\}})?\s+(\S+)$", text, re.MULTILINE)
        assert values, f"{url}/metrics has no vllm:prefix_cache_{key}_total"
        out[key] = sum(float(v) for v in values)
    return out


@pytest.fixture(scope="module")
def runs(fleet, tmp_path_factory, vllm_log_dir):
    """routing -> (the CLI's JSON report, the record's requests, each engine's own counter increase over the run)."""
    out = {}
    urls = ",".join(s.base_url for s in fleet)
    for routing in ("sticky", "per-request"):
        path = tmp_path_factory.mktemp("fleet") / f"{routing}.jsonl"
        before = [prefix_cache_counters(s.base_url) for s in fleet]
        code, stdout, stderr = run_captured("measure", "sessions", "--url", urls, "--routing", routing,
                                            "--users", ",".join(map(str, USERS)), "--requests-per-user", REQUESTS_PER_USER,
                                            "--duration", 600, *WORKLOAD, "--record", path, "--quiet", "--json")
        assert code == 0, stderr
        after = [prefix_cache_counters(s.base_url) for s in fleet]
        deltas = [{k: a[k] - b[k] for k in a} for b, a in zip(before, after)]
        requests = [e["result"] for e in read_record(path, "sessions").of_type("request")]
        out[routing] = (json.loads(stdout), requests, deltas)
        # the evidence, beside the engines' logs: the report, each engine's counter increase, each request's counts
        (vllm_log_dir / f"fleet-{routing}.json").write_text(json.dumps({
            "report": out[routing][0], "engine_deltas": deltas,
            "requests": [{k: r["tags"][k] for k in ("users", "user", "turn", "endpoint", "prefix_tokens", "reusable_tokens")}
                         | {"prompt_tokens": r["prompt_tokens"], "cached_tokens": r["cached_tokens"]} for r in requests]},
            indent=1))
    return out


def cached(r: dict) -> int:
    return r["cached_tokens"] or 0  # vLLM leaves the field out at 0


def on(requests: list[dict], endpoint: int, users: int | None = None) -> list[dict]:
    return [r for r in requests if r["tags"]["endpoint"] == endpoint and (users is None or r["tags"]["users"] == users)]


def check_each_endpoint_against_its_engine(doc: dict, requests: list[dict], deltas: list[dict], fleet) -> None:
    """Per rung, the report's /metrics line of each endpoint is that engine's increase, and it is the sum of the
    cached and prompt tokens the client was told on that endpoint; over the run, this test's own scrapes agree."""
    assert all(r["ok"] for r in requests) and len(requests) == REQUESTS_PER_USER * sum(USERS)
    for rung in doc["rungs"]:
        for e, line in enumerate(rung["endpoints"]):
            mine = on(requests, e, rung["users"])
            assert line["url"] == fleet[e].base_url and line["requests"] == len(mine)
            assert line["metrics"]["hits"] == sum(cached(r) for r in mine), (rung["users"], e, line)
            assert line["metrics"]["queries"] == sum(r["prompt_tokens"] for r in mine), (rung["users"], e, line)
            assert line["metrics"]["preemptions"] == 0
            expected = sum(cached(r) for r in mine) / sum(r["prompt_tokens"] for r in mine) if mine else None
            assert line["metrics_hit_ratio"] == expected
    for e, d in enumerate(deltas):
        mine = on(requests, e)
        assert d == {"hits": sum(cached(r) for r in mine), "queries": sum(r["prompt_tokens"] for r in mine)}, (e, d)


def prompt_of(turn: int) -> int:
    """Turn k's prompt: the session's 600 tokens, grown by the reply and the new tail each turn (word tokenizer)."""
    return MEDIAN + turn * (OUTPUT + TURN)


def full_blocks(tokens: int) -> int:
    """What the engine can serve of an earlier prompt from its cache: its full blocks."""
    return tokens // SESSION_BLOCK_SIZE * SESSION_BLOCK_SIZE


def counts(line: dict) -> tuple:
    return line["requests"], line["users"], line["returning"], line["warm_hits"], line["warm_hit_rate"]


def test_sticky_sessions_hit_on_each_replica_and_match_each_engines_own_counters(runs, fleet):
    doc, requests, deltas = runs["sticky"]
    assert doc["signal"] == "cached_tokens"
    one, two = doc["rungs"]
    assert (one["users"], one["returning"], one["warm_hits"], one["warm_hit_rate"]) == (1, 2, 2, 1.0)
    assert (two["users"], two["returning"], two["warm_hits"], two["warm_hit_rate"]) == (2, 4, 4, 1.0)
    # one user: all three turns on endpoint 0, none on 1; two users: one each, every returning turn warm
    assert [counts(x) for x in one["endpoints"]] == [(3, 1, 2, 2, 1.0), (0, 0, 0, 0, None)]
    assert [counts(x) for x in two["endpoints"]] == [(3, 1, 2, 2, 1.0), (3, 1, 2, 2, 1.0)]
    # what each engine said it served: turn k the full blocks of turn k - 1's prompt (576 and 640 tokens)
    assert all(r["prompt_tokens"] == prompt_of(r["tags"]["turn"]) for r in requests)
    assert all(cached(r) == full_blocks(prompt_of(r["tags"]["turn"] - 1)) for r in requests if r["tags"]["turn"])
    check_each_endpoint_against_its_engine(doc, requests, deltas, fleet)
    # an engine that served no request in a rung counted no query there
    assert one["endpoints"][1]["metrics"] == {"queries": 0.0, "hits": 0.0, "preemptions": 0.0}
    assert any("every user's requests went to one endpoint" in n for n in doc["notes"])


def test_a_router_that_spreads_a_users_turns_shows_the_lower_hit_rate_and_says_why(runs, fleet):
    doc, requests, deltas = runs["per-request"]
    sticky, _, sticky_deltas = runs["sticky"]
    assert doc["signal"] == "cached_tokens"
    one, two = doc["rungs"]
    # turn 1 lands on the replica that holds only the shared prefix of it, turn 2 back on the one holding turn 0
    assert (one["returning"], one["warm_hits"], one["warm_hit_rate"]) == (2, 1, 0.5)
    assert (two["returning"], two["warm_hits"], two["warm_hit_rate"]) == (4, 2, 0.5)
    assert [counts(x) for x in one["endpoints"]] == [(2, 1, 1, 1, 1.0), (1, 1, 1, 0, 0.0)]
    assert [counts(x) for x in two["endpoints"]] == [(3, 2, 2, 1, 0.5), (3, 2, 2, 1, 0.5)]
    assert all(p["warm_hit_rate"] < s["warm_hit_rate"] for p, s in zip(doc["rungs"], sticky["rungs"]))
    # a missed turn 1 was served the shared prefix and nothing of its own session; turn 2 the full blocks of turn 0
    assert {cached(r) for r in requests if r["tags"]["turn"] == 1} == {PREFIX}
    assert {cached(r) for r in requests if r["tags"]["turn"] == 2} == {full_blocks(prompt_of(0))}
    check_each_endpoint_against_its_engine(doc, requests, deltas, fleet)
    # each engine's own counters see it too: a smaller share of its queried tokens hit than under sticky routing
    assert all(p["hits"] / p["queries"] < s["hits"] / s["queries"] for p, s in zip(deltas, sticky_deltas)), (deltas, sticky_deltas)
    for rung_p, rung_s in zip(doc["rungs"][1:], sticky["rungs"][1:]):
        assert all(p["metrics_hit_ratio"] < s["metrics_hit_ratio"] for p, s in zip(rung_p["endpoints"], rung_s["endpoints"]))
    note = next(n for n in doc["notes"] if n.startswith("routing per-request"))
    assert "3 of 3 users sent requests to more than one endpoint" in note and "another replica" in note
