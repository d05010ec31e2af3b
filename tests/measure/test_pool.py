"""measure pool against a server whose pool is known: the measurement must recover what was injected."""

import asyncio
import json
import pathlib

import pytest
from testserver import INSTANT, Fault, ServerConfig, TestServer

from servesize.cli import main
from servesize.errors import ServesizeError
from servesize.measure.client import RequestResult
from servesize.measure.metrics import MetricsDelta
from servesize.measure.pool import (
    REFUTE_SHARE,
    REFUTE_TTFT_RATIO,
    Bisection,
    PoolConfig,
    aligned_prompt_tokens,
    cacheable_tokens,
    classify,
    measure_pool,
    predicted_tokens_of,
)
from servesize.measure.record import read_record

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures" / "measured"


def measure_on(server_config: ServerConfig, **pool_kw):
    """measure_pool against a fresh test server: (the result, the server, whose log is the ground truth)."""
    async def go():
        async with TestServer(server_config) as server:
            return await measure_pool(PoolConfig(url=server.url, **pool_kw)), server
    return asyncio.run(go())


def measure(server_config: ServerConfig, **pool_kw):
    return measure_on(server_config, **pool_kw)[0]


# -- the pure pieces --

def test_a_prompt_of_m_blocks_plus_one_token_caches_all_m_blocks():
    assert cacheable_tokens(32 * 16 + 1, 16) == 32 * 16
    assert cacheable_tokens(32 * 16, 16) == 31 * 16  # the last token is always recomputed
    assert aligned_prompt_tokens(4097, 16) == 4097
    assert aligned_prompt_tokens(1000, 16) == (999 // 16) * 16 + 1


@pytest.mark.parametrize("edge", [1, 2, 7, 9, 10, 31, 100])
@pytest.mark.parametrize("start", [None, 1, 8, 9, 12, 60])
def test_bisection_finds_the_last_warm_n_from_any_start(edge, start):
    b = Bisection(start=start, limit=1000)
    probes = 0
    while (n := b.next()) is not None:
        b.observe(n, n <= edge)
        probes += 1
    assert (b.lo, b.hi) == (edge, edge + 1)
    distance = abs((start or 1) - edge)  # galloping costs about 2 log2 of how far the prediction was off
    assert probes <= 2 * (distance + 1).bit_length() + 2


def test_a_prediction_one_prompt_off_costs_three_probes():
    b = Bisection(start=9, limit=100)
    seen = []
    while (n := b.next()) is not None:
        seen.append(n)
        b.observe(n, n <= 10)
    assert seen == [9, 10, 12, 11]


def test_bisection_stops_at_the_limit_as_a_lower_bound():
    b = Bisection(start=4, limit=16)
    while (n := b.next()) is not None:
        b.observe(n, True)
    assert b.lo == 16 and b.hi is None and b.capped


def test_predictions_are_read_from_numbers_objects_and_functions():
    class Pool:
        usable_kv_tokens = 12345
    assert predicted_tokens_of(1000) == 1000
    assert predicted_tokens_of(Pool()) == 12345
    assert predicted_tokens_of(lambda: Pool()) == 12345


def _result(ttft, cached=None):
    return RequestResult(id="x", ttft_s=ttft, cached_tokens=cached, cached_tokens_reported=cached is not None)


def test_classify_prefers_cached_tokens_and_reports_every_available_signal():
    sizes = [33, 33]
    rounds = [[_result(0.1, 0), _result(0.1, 0)], [_result(0.01, 32), _result(0.01, 16)]]
    deltas = [None, MetricsDelta(queries=66, hits=48, preemptions=0)]
    v = classify(sizes, rounds, deltas, block_size=16)
    assert v.signal == "cached_tokens" and v.flags == [[True, False]] and not v.warm
    assert v.by_signal == {"cached_tokens": 0.5, "metrics": 48 / 64, "ttft": 1.0}


def test_classify_falls_back_to_metrics_then_ttft():
    sizes = [33]
    rounds = [[_result(0.1)], [_result(0.01)]]
    assert classify(sizes, rounds, [None, MetricsDelta(33, 32, 0)], block_size=16).signal == "metrics"
    v = classify(sizes, rounds, [None, None], block_size=16)
    assert v.signal == "ttft" and v.warm


def test_the_ttft_rule_judges_each_request_against_its_own_prompts_cold_ttft():
    """Warm when TTFT < 0.4 x the same prompt's round-1 TTFT: injected timings, so the rule is checked exactly."""
    cold = [1.0, 2.0, 0.5]
    later = [0.39, 0.79, 0.2]  # under 0.4 x its own cold, under 0.4 x its own cold, exactly 0.4 x (not under)
    rounds = [[_result(t) for t in cold], [_result(t) for t in later]]
    v = classify([33, 33, 33], rounds, [None, None], block_size=16)
    assert v.signal == "ttft" and v.flags == [[True, True, False]]
    assert v.warm_fraction == pytest.approx(2 / 3) and not v.warm
    assert classify([33, 33, 33], rounds, [None, None], block_size=16, warm_share=0.6).warm
    assert classify([33, 33, 33], rounds, [None, None], block_size=16, ttft_ratio=0.5).flags == [[True, True, True]]


def test_every_later_round_counts_toward_the_ttft_verdict():
    rounds = [[_result(1.0), _result(1.0)], [_result(0.1), _result(0.1)], [_result(0.1), _result(0.9)]]
    v = classify([33, 33], rounds, [None, None, None], block_size=16)
    assert v.flags == [[True, True], [True, False]] and v.warm_fraction == pytest.approx(3 / 4) and not v.warm


def test_honest_hits_served_in_one_step_are_not_refuted_by_the_cold_rounds_first_chunks():
    """A probe of the real CPU vLLM under load (tests/fixtures/measured/pool-probe-cpu-vllm-under-load.json): 32
    honest hits served together in one step of 0.29-0.31 s, where the cold round gave its first prompts their
    first token after one prefill chunk (0.13 s). Paired request by request, most warm TTFTs are >= 80% of their
    own cold one (that pairing alone refuted both counters in an earlier run, which then measured the pool at
    < 26,784 of 32,768 tokens); the round as a whole took 56% of the cold round's time, so the counters stand."""
    doc = json.loads((FIXTURES / "pool-probe-cpu-vllm-under-load.json").read_text())
    rounds = [[RequestResult(id=f"r{k}-{i}", **r) for i, r in enumerate(rnd)] for k, rnd in enumerate(doc["rounds"])]
    deltas = [MetricsDelta(**d) for d in doc["deltas"]]
    cold = [r.ttft_s for r in rounds[0]]
    paired = [w.ttft_s / c for w, c in zip(rounds[1], cold)]
    assert sum(x >= REFUTE_TTFT_RATIO for x in paired) > REFUTE_SHARE * len(paired)  # the pairing alone would refute
    v = classify(doc["sizes"], rounds, deltas, block_size=doc["block_size"])
    assert v.signal == "cached_tokens" and v.warm and v.refuted == {}
    assert v.by_signal["ttft"] == 0.0  # TTFT's own rule still calls every one of them cold: it does not decide here
    # the same TTFTs under a counter that claims warmth the round did not save: every later TTFT as slow as the
    # cold round's slowest, and the claim is refuted
    slow = [[rounds[0][i] for i in range(len(cold))], [RequestResult(id=f"s{i}", ttft_s=max(cold), cached_tokens=r.cached_tokens,
                                                                 cached_tokens_reported=True) for i, r in enumerate(rounds[1])]]
    assert "cached_tokens" in classify(doc["sizes"], slow, [None, None], block_size=doc["block_size"]).refuted


def test_without_a_cold_ttft_for_every_prompt_there_is_no_ttft_signal():
    rounds = [[_result(1.0), _result(None)], [_result(0.1), _result(0.1)]]
    with pytest.raises(ServesizeError, match="no warmth signal"):
        classify([33, 33], rounds, [None, None], block_size=16, signals=("ttft",))


# -- against the test server --

CAPACITY = 5000  # 312 blocks of 16 = 4,992 tokens


@pytest.mark.parametrize("eviction", ["lru", "tail_first"])
def test_measure_pool_recovers_the_injected_pool_to_the_block_from_cached_tokens(eviction):
    r = measure(ServerConfig(capacity_tokens=CAPACITY, block_size=16, eviction=eviction, **INSTANT), prompt_tokens=513)
    true_tokens = CAPACITY // 16 * 16
    assert r.signal == "cached_tokens"
    assert r.resolution == "block"
    assert r.pool_low_tokens <= true_tokens < r.pool_high_tokens
    assert r.pool_high_tokens - r.pool_low_tokens == 16
    assert r.engine_tokens == true_tokens and r.inside(r.engine_tokens)


def test_a_server_that_omits_cached_tokens_at_zero_is_still_judged_by_cached_tokens():
    """A missing field after the server has reported it reads as 0: cold, not 'signal unavailable'."""
    r = measure(ServerConfig(capacity_tokens=CAPACITY, block_size=16, omit_zero_cached=True, metrics=False, **INSTANT),
                prompt_tokens=513, block_size=16)  # no /metrics: the block size comes from the flag
    assert r.signal == "cached_tokens"
    assert r.resolution == "block" and r.pool_low_tokens <= CAPACITY // 16 * 16 < r.pool_high_tokens


def test_measure_pool_recovers_the_pool_from_the_prefix_cache_counters_alone():
    r = measure(ServerConfig(capacity_tokens=CAPACITY, block_size=16, report_cached_tokens=False, **INSTANT), prompt_tokens=513)
    assert r.signal == "metrics"
    assert r.pool_low_tokens == CAPACITY // 16 * 16 and r.resolution == "block"
    assert any("--enable-prompt-tokens-details" in n for n in r.signal_notes)


def test_measure_pool_reads_the_older_vllm_metric_names():
    r = measure(ServerConfig(capacity_tokens=CAPACITY, report_cached_tokens=False, metrics_names="legacy", **INSTANT), prompt_tokens=513)
    assert r.signal == "metrics" and r.pool_low_tokens == CAPACITY // 16 * 16


# -- the TTFT signal, end to end --
# A TTFT-only run decides warm from measured times, so the test server's delays are made large against
# scheduling noise: a cold prompt of 513 tokens waits 513 x 2 ms = 1.026 s for its first token, a warm one
# (512 tokens cached, the last recomputed) 2 ms. The rule, warm when TTFT < 0.4 x the prompt's own cold
# TTFT, then misreads a warm request only if it is delayed by 0.4 s, and a cold one only if its round 1
# was late by 1.5 s; a measured TTFT is never below the injected one (tests/measure/test_client.py). The
# prediction starts the search at the edge, so two probes of two rounds decide it (about 3 s).
TTFT_ONLY = dict(capacity_tokens=CAPACITY, block_size=16, ttft_base_s=0.0, ttft_per_token_s=0.002,
                 report_cached_tokens=False, metrics=False)
TTFT_RUN = dict(prompt_tokens=513, rounds=2, predicted_tokens=4800)


def assert_ttft_flags_agree_with_the_injected_delays(result, server, ratio=0.4):
    """Round by round, the requests the client called warm from measured TTFT are as many as the server's
    own injected delays say: injected TTFT under ratio x the same prompt's injected cold TTFT."""
    from servesize.measure.pool import CHECK_PROMPTS

    log = iter(server.log[2 * CHECK_PROMPTS:])  # every completion after the TTFT check, in order; rounds do not overlap
    for probe in result.probes:
        rounds = [[next(log) for _ in rnd] for rnd in probe.rounds]
        cold = {e["prompt_tokens"]: e["ttft_injected_s"] for e in rounds[0]}
        assert all(e["cached_tokens"] == 0 for e in rounds[0])  # round 1 is all cold: fresh ids
        for flags, entries in zip(probe.verdict.flags, rounds[1:]):
            injected_warm = sum(e["ttft_injected_s"] < ratio * cold[e["prompt_tokens"]] for e in entries)
            assert sum(flags) == injected_warm, (probe.summary(), [r.ttft_s for rnd in probe.rounds for r in rnd])
    assert next(log, None) is None


def test_measure_pool_falls_back_to_ttft_and_knows_the_pool_to_the_prompt():
    r, server = measure_on(ServerConfig(**TTFT_ONLY), **TTFT_RUN)
    assert r.signal == "ttft" and r.resolution == "prompt"
    assert (r.n_warm, r.n_cold) == (CAPACITY // 512, CAPACITY // 512 + 1)
    assert r.pool_low_tokens <= CAPACITY < r.pool_high_tokens
    assert any("/metrics answered HTTP 404" in n for n in r.notes)
    assert_ttft_flags_agree_with_the_injected_delays(r, server)


def test_a_given_block_size_makes_the_ttft_only_run_align_its_prompts():
    r, server = measure_on(ServerConfig(**TTFT_ONLY), **{**TTFT_RUN, "prompt_tokens": 520}, block_size=16, signals=("ttft",))
    assert r.prompt_tokens == 513 and r.n_warm == 9
    assert_ttft_flags_agree_with_the_injected_delays(r, server)


def test_a_prediction_starts_the_search_and_its_error_is_reported():
    r = measure(ServerConfig(capacity_tokens=CAPACITY, **INSTANT), prompt_tokens=513, predicted_tokens=4800)
    assert r.probes[0].n == 4800 // 512
    assert r.relative_error(4800) == pytest.approx((4800 - 4992) / 4992)


def test_the_engine_figure_is_compared_not_trusted():
    r = measure(ServerConfig(capacity_tokens=CAPACITY, published_blocks=100, **INSTANT), prompt_tokens=513)
    assert r.engine_tokens == 1600 and r.pool_low_tokens == 4992 and not r.inside(r.engine_tokens)


def test_a_pool_larger_than_max_parallel_prompts_is_a_lower_bound():
    r = measure(ServerConfig(capacity_tokens=CAPACITY, **INSTANT), prompt_tokens=513, max_parallel=4, fine=False)
    assert r.resolution == "lower bound" and r.pool_low_tokens == 4 * 512 and r.pool_high_tokens is None


# -- the command: failures give one line, exit 2, and an intact record --

def _records(path):
    return [json.loads(line) for line in open(path)]


def test_a_server_that_is_down_gives_one_clear_line_and_exit_2(tmp_path, capsys):
    rec = tmp_path / "run.jsonl"
    code = main(["measure", "pool", "--url", "http://127.0.0.1:9", "--record", str(rec), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("servesize: cannot reach http://127.0.0.1:9") and err.count("\n") == 1
    assert read_record(rec, "pool").header["params"]["url"] == "http://127.0.0.1:9"


# Only the stall case races two timers: the server stalls 30 s (ended when the test stops it), 150x the
# client's --stall-timeout; the other faults keep the default stall timeout (60 s), which no load reaches.
@pytest.mark.parametrize("fault, words, flags", [
    (Fault("status", status=500, after=3), "HTTP 500", []),
    (Fault("malformed", after=3), "malformed_sse", []),
    (Fault("stall", after=3, stall_s=30), "stall_timeout", ["--stall-timeout", "0.2"]),
    (Fault("reset", after=3), "connection_reset", []),
])
def test_a_failing_server_gives_one_line_and_keeps_every_result_taken(tmp_path, capsys, fault, words, flags):
    rec = tmp_path / "run.jsonl"
    with TestServer(ServerConfig(capacity_tokens=CAPACITY, faults=[fault], itl_s=0.0)) as server:
        code = main(["measure", "pool", "--url", server.url, "--prompt-tokens", "513", "--record", str(rec), "--quiet",
                     *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert words in err and "--resume" in err and err.count("\n") == 1
    lines = _records(rec)
    assert lines[0]["type"] == "header"
    requests = [e for e in lines if e["type"] == "request"]
    assert len([e for e in requests if e["result"]["ok"]]) == 3
    assert lines[-1]["type"] == "error"


def test_a_missing_metrics_endpoint_is_a_note_and_the_run_goes_on(tmp_path, capsys):
    with TestServer(ServerConfig(capacity_tokens=CAPACITY, metrics=False, **INSTANT)) as server:
        code = main(["measure", "pool", "--url", server.url, "--prompt-tokens", "513", "--block-size", "16",
                     "--record", str(tmp_path / "r.jsonl"), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["pool_tokens"]["low"] == 4992 and out["signal"] == "cached_tokens"
    assert any("/metrics" in n for n in out["notes"])


def test_resume_continues_a_broken_run_without_redoing_completed_probes(tmp_path, capsys):
    rec = tmp_path / "run.jsonl"
    # first run: the server fails from its 40th request on, after a few probes have completed
    with TestServer(ServerConfig(capacity_tokens=CAPACITY, faults=[Fault("status", after=40)], **INSTANT)) as server:
        assert main(["measure", "pool", "--url", server.url, "--prompt-tokens", "513", "--record", str(rec), "--quiet"]) == 2
    capsys.readouterr()
    done_before = [e for e in _records(rec) if e["type"] == "probe"]
    assert done_before
    with TestServer(ServerConfig(capacity_tokens=CAPACITY, **INSTANT)) as server:
        code = main(["measure", "pool", "--resume", str(rec), "--url", server.url, "--json", "--quiet"])
        served = server.completions
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["pool_tokens"]["low"] == 4992
    assert any("resumed" in n for n in out["notes"])
    probes = [e for e in _records(rec) if e["type"] == "probe"]
    keys = [(p["stage"], p["n"], p["extra_blocks"]) for p in probes]
    assert len(keys) == len(set(keys))  # no completed probe was run twice
    assert served < sum(len(p["sizes"]) * 3 for p in probes)  # the completed ones were not sent again


def test_json_and_plot_outputs(tmp_path, capsys):
    png = tmp_path / "pool.png"
    with TestServer(ServerConfig(capacity_tokens=CAPACITY, **INSTANT)) as server:
        code = main(["measure", "pool", "--url", server.url, "--prompt-tokens", "513", "--record", str(tmp_path / "r.jsonl"),
                     "--plot", str(png), "--predicted-tokens", "4.5k", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0 and png.stat().st_size > 0
    assert "KV pool kept warm:  [4,992, 5,008) tokens" in out
    assert "prediction: 4,500 tokens (given as --predicted-tokens)" in out


def test_a_predict_is_named_in_the_report_and_kept_in_the_record_for_resume(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    predict = "llama-3.1-8b --gpus 1xH100 --kv-cache-memory-bytes 640MiB --max-model-len 4096"  # one 4k request fits: vLLM starts
    assert main(["memory", *predict.split(), "--json"]) == 0
    usable = json.loads(capsys.readouterr().out)["usable_kv_tokens"]  # servesize memory's own figure (5,104)
    with TestServer(ServerConfig(capacity_tokens=CAPACITY, **INSTANT)) as server:
        code = main(["measure", "pool", "--url", server.url, "--prompt-tokens", "513", "--record", str(rec), "--quiet",
                     "--predict", predict])
        out = capsys.readouterr().out
        assert code == 0
        assert f"prediction: {usable:,} tokens (the usable KV tokens of `servesize memory {predict}`)" in out
        assert "prediction object" not in out
        code = main(["measure", "pool", "--resume", str(rec), "--url", server.url, "--json", "--quiet"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["prediction"]["tokens"] == usable and predict in doc["prediction"]["source"]
