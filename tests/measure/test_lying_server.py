"""measure pool and measure sessions against a server whose cache counts lie: the client's own evidence
(the prompt it sent, the TTFTs it timed) overrules them, and no capacity the lie alone claims is reported.

The issue's example: a server reporting cached_tokens larger than the prompt made `measure pool` exit 0 with
"KV pool kept warm: >= 16,384 tokens" (the true pool 4,096; every probe 'warm' up to --max-parallel 32 of
512 resident tokens each) and `measure sessions` report a knee above the true one. Where a verdict rests on
TTFT, the test server's delays are made large against scheduling noise (as tests/measure/test_pool.py's
TTFT tests do): a cold prompt of 513 tokens waits 513 x 2 ms = 1.026 s for its first token, a warm one 2 ms,
and a measured TTFT is never below the injected one, so a cold request claimed warm is at least as slow as
its own cold round whatever the load.
"""

from __future__ import annotations

import asyncio
import json

from testserver import INSTANT, ServerConfig, TestServer

from cli_runner import run
from servesize.measure.pool import PoolConfig, measure_pool
from servesize.measure.record import RunRecord, read_record
from servesize.measure.sessions import ClassParams, SessionParams, SessionsConfig, measure_sessions

POOL = 4096  # 256 blocks of 16: 8 prompts of 513 tokens (32 blocks each, the last token recomputed)
SLOW = dict(ttft_base_s=0.0, ttft_per_token_s=0.002)  # cold 513-token prompt: 1.026 s; warm: 2 ms
ISSUE = ["--prompt-tokens", "513", "--max-parallel", "32", "--rounds", "2", "--quiet", "--json"]


def pool_cli(capsys, tmp_path, config: ServerConfig, *extra) -> tuple[int, dict | None, str]:
    with TestServer(config) as server:
        code, out, err = run(capsys, "measure", "pool", "--url", server.url, "--record", tmp_path / "p.jsonl", *ISSUE, *extra)
    return code, json.loads(out) if out else None, err


def test_the_lies_are_what_the_issue_saw_before_any_check(tmp_path):
    """The lying server's own log: what it reported against what it cached (the ground truth the others use)."""
    async def go():
        async with TestServer(ServerConfig(capacity_tokens=POOL, lie="over_prompt")) as server:
            await measure_pool(PoolConfig(url=server.url, prompt_tokens=513, rounds=2, max_parallel=10, fine=False))
            return server.log
    log = asyncio.run(go())
    assert all(e["reported_cached_tokens"] == 2 * e["prompt_tokens"] for e in log)
    assert all(e["cached_tokens"] <= e["prompt_tokens"] - 1 for e in log)


def test_cached_tokens_above_the_prompt_are_refuted_and_the_counters_find_the_true_pool(tmp_path, capsys):
    # The metrics that decide are themselves checked against TTFT, so a warm request must be clearly faster than
    # cold whatever the load: at the test server's default 0.05 ms a token (cold 28 ms) a loaded machine made most
    # warm TTFTs 80% of cold and refuted the honest counter; at 0.4 ms (cold 205 ms, warm 0.4 ms injected) the
    # block-level search still runs in about 20 s, where SLOW's 1 s colds take 100 s
    code, doc, err = pool_cli(capsys, tmp_path, ServerConfig(capacity_tokens=POOL, lie="over_prompt", ttft_base_s=0.0,
                                                             ttft_per_token_s=0.0004))
    assert code == 0, err
    pool = doc["pool_tokens"]
    assert (pool["low"], pool["high"], pool["resolution"]) == (POOL, POOL + 16, "block")  # not '>= 16,384'
    assert doc["signal"] == "metrics"
    said = [n for n in doc["notes"] if "not trusted" in n]
    assert said == ["the server's cached_tokens is not trusted for this run: it reported 1,026 cached tokens for a "
                    "prompt of 513: impossible; warmth is judged by metrics instead"]
    assert [e["signal"] for e in read_record(tmp_path / "p.jsonl").of_type("distrust")] == ["cached_tokens"]
    assert not any("served partly from cache" in n for n in doc["notes"] + doc["signal_notes"])  # the lie's own count


def test_cached_counts_claiming_warmth_that_ttft_denies_are_refuted(tmp_path, capsys):
    code, doc, err = pool_cli(capsys, tmp_path, ServerConfig(capacity_tokens=POOL, lie="claim_warm", **SLOW), "--no-fine")
    assert code == 0, err
    pool = doc["pool_tokens"]
    assert (pool["low"], pool["high"]) == (POOL, POOL + 512) and pool["low"] <= POOL < pool["high"]
    assert doc["signal"] == "metrics"
    assert any("cached_tokens is not trusted" in n and "no faster than cold" in n for n in doc["notes"])


def test_when_every_counter_lies_the_ttft_rule_finds_the_pool_to_the_prompt(tmp_path, capsys):
    code, doc, err = pool_cli(capsys, tmp_path, ServerConfig(capacity_tokens=POOL, lie="claim_warm", lie_metrics=True, **SLOW))
    assert code == 0, err
    pool = doc["pool_tokens"]
    assert (pool["low"], pool["high"], pool["resolution"]) == (POOL, POOL + 512, "prompt")
    assert doc["signal"] == "ttft" or "ttft" in doc["signal"].split("+")
    refuted = sorted(e["signal"] for e in read_record(tmp_path / "p.jsonl").of_type("distrust"))
    assert refuted == ["cached_tokens", "metrics"]
    assert any("no fine stage" in n for n in doc["notes"])  # TTFT cannot see a partial eviction


def test_hits_above_queries_are_refuted_too(tmp_path, capsys):
    code, doc, err = pool_cli(capsys, tmp_path, ServerConfig(capacity_tokens=POOL, lie="over_prompt", lie_metrics=True, **SLOW))
    assert code == 0, err
    assert (doc["pool_tokens"]["low"], doc["pool_tokens"]["high"]) == (POOL, POOL + 512)
    assert any("metrics is not trusted" in n and "impossible" in n for n in doc["notes"])


def test_with_only_the_lying_counter_allowed_the_run_refuses_rather_than_report_its_pool(tmp_path, capsys):
    code, doc, err = pool_cli(capsys, tmp_path, ServerConfig(capacity_tokens=POOL, lie="over_prompt"),
                              "--signals", "cached_tokens")
    assert code == 2 and doc is None
    assert err.count("\n") == 1 and err.startswith("servesize: no trustworthy warmth signal: the server's cached_tokens "
                                                   "reported 1,026 cached tokens for a prompt of 513: impossible")


# -- sessions ---------------------------------------------------------------------------------------------
# tests/measure/test_sessions.py's ladder (its true knee is [2, 16): 16 users' first prompts are 2.6 pools),
# with TTFT large against noise: 1 ms per uncached token, so a first turn (1,300 tokens past the shared
# prefix) waits 1.3 s, a warm returning turn about 0.1 s.
LADDER = SessionParams(user=ClassParams(1500, 0.0, 200), max_model_len=4000, think_time_s=0.0, output_tokens=4,
                       turn_tokens=100, seed=3)


def sessions_on(config: ServerConfig):
    async def go():
        async with TestServer(config) as server:
            cfg = SessionsConfig(url=server.url, params=LADDER, users=[1, 2, 16], duration_s=600, requests_per_user=5)
            return await measure_sessions(cfg)
    return asyncio.run(go())


def test_sessions_against_warmth_claims_ttft_denies_never_report_the_lies_knee():
    r = sessions_on(ServerConfig(capacity_tokens=8000, itl_s=0.001, ttft_base_s=0.0, ttft_per_token_s=0.001,
                                 lie="claim_warm"))
    # the 16-user rung's returning requests were evicted (cold, 1.3 s or more), all claimed warm: caught
    g16 = r.rungs[2]
    assert r.rungs[0].hit_shown  # the lower rungs' real hits showed in the TTFT: slow warm claims can refute
    assert g16.refuted is not None and g16.refuted.startswith(f"called {16 * 4} returning request(s) warm, but ")
    assert "no faster than cold" in g16.refuted
    # a counter caught lying judges nothing: the rungs it had judged are judged again without it, and with one
    # session length (no TTFT fit over first turns) nothing can: no rung is warm, no capacity is claimed
    assert [g.signal for g in r.rungs] == ["none", "none", "none"]
    assert [g.state(r.warm_target) for g in r.rungs] == ["no signal"] * 3
    assert r.knee == {"warm_users": None, "cold_users": None, "inconclusive_users": 1}  # the lie said >= 16
    assert sum("cached_tokens is not trusted for this run" in n for n in r.notes) == 1


def test_honest_counts_on_a_server_whose_ttft_is_mostly_overhead_are_not_refuted():
    """A hit saves 1,300 tokens of prefill at 20 us a token (26 ms) on a TTFT of 300 ms of fixed overhead: an honest
    warm turn is no faster than 80% of the cold TTFT predicted for its length, and no request shows a hit in its
    TTFT. Without that evidence slow warm claims refute nothing (two honest vLLM CPU engines were refuted under
    load this way), and the true counts judge every rung."""
    r = sessions_on(ServerConfig(capacity_tokens=8000, itl_s=0.001, ttft_base_s=0.3, ttft_per_token_s=0.00002))
    assert [g.refuted for g in r.rungs] == [None] * 3 and not any(g.hit_shown for g in r.rungs)
    assert [g.signal for g in r.rungs] == ["cached_tokens"] * 3
    assert r.knee["warm_users"] == 2 and r.knee["cold_users"] == 16  # the true knee: [2, 16)
    assert not any("not trusted" in n for n in r.notes)


def test_sessions_load_arriving_after_the_hits_showed_does_not_refute_the_honest_counters(tmp_path):
    """The 1- and 2-user rungs' warm turns are fast (hits show in the TTFT), then every first token takes at least
    3 s (another job takes the host's cores): at 16 users an honest warm turn is no faster than cold, which on
    the earlier rungs' evidence alone would refute the honest counters. The TTFT check runs again before they are
    refuted, finds that a hit no longer shows, and the counters go on judging: every rung warm (the pool holds all
    16 sessions)."""
    # the 1- and 2-user rungs' requests (4 per user) come first; the floor is long beside a loaded client's own lag,
    # so that at 16 users every warm claim is surely "no faster than cold" (at 1.5 s a loaded run saw the first turns
    # lag behind enough that the claims looked faster, and nothing was refuted to begin with)
    first_of_16 = 1 * 4 + 2 * 4
    config = ServerConfig(capacity_tokens=100_000, itl_s=0.001, ttft_base_s=0.0, ttft_per_token_s=0.001,
                          ttft_floor_from=(first_of_16, 3.0))

    async def go():
        async with TestServer(config) as server:
            cfg = SessionsConfig(url=server.url, params=LADDER, users=[1, 2, 16], duration_s=600, requests_per_user=4)
            record = RunRecord(tmp_path / "s.jsonl")
            try:
                return await measure_sessions(cfg, record=record)
            finally:
                record.close()

    r = asyncio.run(go())
    assert r.rungs[0].hit_shown and r.rungs[1].hit_shown
    assert [g.refuted for g in r.rungs] == [None] * 3
    assert [g.signal for g in r.rungs] == ["cached_tokens"] * 3
    assert [g.state(r.warm_target) for g in r.rungs] == ["warm"] * 3
    assert not any("not trusted" in n for n in r.notes)
    assert sum("a hit no longer shows in this server's TTFT" in n for n in r.notes) == 1
    events = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    (check,) = [e for e in events if e["type"] == "ttft_check"]
    asked = [e for e in events if e["type"] == "ttft_check_request"]  # each recorded as it completed
    assert (check["users"], check["sees_hits"]) == (16, False)
    assert sorted((e["round"], e["index"]) for e in asked) == [(rnd, i) for rnd in (1, 2) for i in range(3)]
    assert all(e["users"] == 16 and e["result"]["ttft_s"] >= 3.0 for e in asked)
    assert check["repeat_over_cold"] > 0.8  # the repeats waited for the floor like the cold prompts


def test_sessions_against_cached_tokens_above_the_prompt_judge_nothing_by_them():
    r = sessions_on(ServerConfig(capacity_tokens=8000, itl_s=0.001, lie="over_prompt"))
    assert r.rungs[0].refuted is not None and r.rungs[0].refuted.endswith(": impossible")
    assert all(g.signal != "cached_tokens" for g in r.rungs)
    assert r.knee["warm_users"] is None  # no rung can be judged (one session length: no TTFT fit): no capacity claimed
    assert sum("impossible" in n for n in r.notes) == 1


def test_a_resumed_pool_run_keeps_distrusting_the_counter_its_record_refuted(tmp_path, capsys):
    from testserver import Fault

    from servesize.measure.pool import CHECK_PROMPTS

    rec = tmp_path / "p.jsonl"
    lying = dict(capacity_tokens=POOL, lie="over_prompt", **INSTANT)
    with TestServer(ServerConfig(**lying, faults=[Fault("status", after=20 + 2 * CHECK_PROMPTS)])) as server:  # mid-search
        code, _, err = run(capsys, "measure", "pool", "--url", server.url, "--record", rec, *ISSUE)
    assert code == 2 and "HTTP 500" in err
    assert [e["signal"] for e in read_record(rec).of_type("distrust")] == ["cached_tokens"]
    with TestServer(ServerConfig(**lying)) as server:
        code, out, err = run(capsys, "measure", "pool", "--resume", rec, "--url", server.url, "--quiet", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["pool_tokens"]["low"], doc["pool_tokens"]["high"]) == (POOL, POOL + 16) and doc["signal"] == "metrics"


def test_a_resumed_sessions_record_judges_again_the_rungs_a_refuted_counter_had_judged(tmp_path, capsys):
    rec = tmp_path / "s.jsonl"
    flags = ["--median", "1500", "--sigma", "0.01", "--prefix", "200", "--think-time", "0.01", "--output-tokens", "4",
             "--turn-tokens", "100", "--max-model-len", "4000", "--subagent-ratio", "0", "--duration", "600",
             "--requests-per-user", "5", "--users", "1,2,16", "--quiet", "--json"]
    config = dict(capacity_tokens=8000, itl_s=0.001, ttft_base_s=0.0, ttft_per_token_s=0.001, lie="claim_warm")
    with TestServer(ServerConfig(**config)) as server:
        code, out, err = run(capsys, "measure", "sessions", "--url", server.url, "--record", rec, *flags)
    assert code == 0, err
    first = json.loads(out)
    recorded = {e["users"]: e["stats"]["signal"] for e in read_record(rec).of_type("rung")}
    assert recorded[1] == "cached_tokens" and first["rungs"][0]["signal"] != "cached_tokens"  # judged again in the run
    with TestServer(ServerConfig(**config)) as server:  # every rung complete: the resume sends nothing...
        code, out, err = run(capsys, "measure", "sessions", "--resume", rec, "--url", server.url, "--quiet", "--json")
        served = server.completions
    assert code == 0, err
    assert served == 0
    again = json.loads(out)
    # ... and still does not take the lower rungs' recorded verdicts, made by the counter refuted later
    assert [g["signal"] for g in again["rungs"]] == [g["signal"] for g in first["rungs"]]
    assert again["knee"] == first["knee"] and again["knee"]["warm_users"] != 16
    assert any("refuted before" in n for n in again["notes"])


def test_hits_that_make_no_request_warm_do_not_make_the_probe_warm():
    """Found by the lying-server fuzz: one prompt of 33 tokens (32 cacheable), 8 hit tokens a round and every
    TTFT as slow as cold. The token share (0.25) met --warm-share 0.25 and called the probe warm, though no
    request was (and so none the TTFT check could see)."""
    from servesize.measure.client import RequestResult
    from servesize.measure.metrics import MetricsDelta
    from servesize.measure.pool import classify

    rounds = [[RequestResult(id=f"r{k}", ttft_s=1.0)] for k in range(4)]
    deltas = [MetricsDelta(queries=33.0, hits=8.0, preemptions=0.0)] * 4
    v = classify([33], rounds, deltas, block_size=16, warm_share=0.25)
    assert v.signal == "metrics" and v.by_signal["metrics"] == 8 / 32
    assert v.flags == [[False]] * 3 and v.warm_fraction == 0.0 and not v.warm


def test_a_warm_claim_is_checked_against_ttft_only_where_a_prefill_shows_in_it():
    """The TTFT check is evidence only where the cold TTFT is REFUTE_RESOLVABLE_S or more: a 28 ms cold prefill
    on a loaded client (warm TTFTs 90% of cold) refutes nothing; a 1 s one does."""
    from servesize.measure.client import RequestResult
    from servesize.measure.pool import REFUTE_RESOLVABLE_S, _contradicted

    def req(i, ttft):
        return RequestResult(id=f"r{i}", ttft_s=ttft)

    for cold_s, refuted in [(0.028, False), (REFUTE_RESOLVABLE_S * 0.9, False), (1.0, True)]:
        later = [[req(i, 0.9 * cold_s) for i in range(8)]]
        why = _contradicted([[True] * 8], later, [cold_s] * 8)
        assert (why is not None) is refuted, (cold_s, why)
        if refuted:
            assert why.startswith("called 8 later-round request(s) warm, but 8 of them were no faster than cold"), why


# -- a server whose TTFT cannot show a hit (the real CPU vLLM with both cores busy) -------------------------------
# A 513-token prefill of 26 ms under a 200 ms floor: a warm request takes 89% of its cold TTFT, above
# REFUTE_TTFT_RATIO, so before the TTFT check the honest cached_tokens was refuted here (and, the counters gone,
# TTFT called every probe cold and reported a pool of [0, 512)). Every request still costs 0.2 s: no fine stage.
FLAT = dict(capacity_tokens=POOL, ttft_base_s=0.2, ttft_per_token_s=0.00005)


def test_where_a_hit_does_not_show_in_the_ttft_the_honest_counters_are_not_refuted(tmp_path, capsys):
    code, doc, err = pool_cli(capsys, tmp_path, ServerConfig(**FLAT), "--no-fine")
    assert code == 0, err
    assert (doc["pool_tokens"]["low"], doc["pool_tokens"]["high"]) == (POOL, POOL + 512) and doc["signal"] == "cached_tokens"
    events = read_record(tmp_path / "p.jsonl")
    assert events.of_type("distrust") == []
    (check,) = events.of_type("ttft_check")
    assert check["sees_hits"] is False and check["repeat_over_cold"] >= 0.4  # the server's own floor: >= 0.2 / 0.226
    assert any("a hit does not show in this server's TTFT" in n for n in doc["notes"])


def test_where_a_hit_does_not_show_in_the_ttft_and_no_counter_is_reported_nothing_is_claimed(tmp_path, capsys):
    code, doc, err = pool_cli(capsys, tmp_path, ServerConfig(**FLAT, report_cached_tokens=False, metrics=False), "--no-fine")
    lines = err.strip().splitlines()
    assert code == 2 and doc is None and len(lines) == 1, err
    line = lines[0]
    assert "no warmth signal available" in line and "TTFT cannot tell a hit on this server" in line


def test_where_a_hit_shows_in_the_ttft_the_check_says_so_and_a_lie_is_still_refuted(tmp_path, capsys):
    code, doc, err = pool_cli(capsys, tmp_path, ServerConfig(capacity_tokens=POOL, lie="claim_warm", **SLOW), "--no-fine")
    assert code == 0, err
    # the check before the search, and again before the lie is refuted: a hit still shows, so the lie is caught
    check, again = read_record(tmp_path / "p.jsonl").of_type("ttft_check")
    for c in (check, again):
        assert c["sees_hits"] is True and c["repeat_over_cold"] < 0.4
        assert len(c["cold_s"]) == len(c["repeat_s"]) == 3
    assert "cached_tokens" in [e["signal"] for e in read_record(tmp_path / "p.jsonl").of_type("distrust")]


def test_load_arriving_after_the_ttft_check_does_not_refute_the_honest_counters(tmp_path, capsys):
    """The TTFT check passes (a warm repeat takes 0.2% of its cold TTFT), then every first token takes at least
    0.25 s (another job takes the host's cores): a warm request is now 97% of its 0.257 s cold, which alone would
    refute the honest counters (and TTFT would then call every probe cold). The check runs again before a counter
    is refuted, finds that a hit no longer shows in the TTFT, and the counters go on deciding: the true pool."""
    config = ServerConfig(capacity_tokens=POOL, ttft_base_s=0.0, ttft_per_token_s=0.0005,
                          ttft_floor_from=(2 * 3, 0.25))  # after the check's 3 prompts, twice
    code, doc, err = pool_cli(capsys, tmp_path, config, "--no-fine")
    assert code == 0, err
    assert (doc["pool_tokens"]["low"], doc["pool_tokens"]["high"]) == (POOL, POOL + 512)
    assert doc["signal"] == "cached_tokens"
    events = read_record(tmp_path / "p.jsonl")
    assert events.of_type("distrust") == []
    first, again = events.of_type("ttft_check")
    assert first["sees_hits"] is True and again["sees_hits"] is False
