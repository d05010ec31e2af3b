"""``servesize measure bench``: vllm bench serve's fixed-concurrency load, measured, with the benchmark's definitions.

The figures are decided on injected request timings (``bench_figures``: what each definition gives, exactly); the
command runs end to end against the fake OpenAI server (tests/measure/testserver.py) for its counts, record and
refusals. tests/integration/test_measure_bench_vs_vllm.py runs it and ``vllm bench serve`` against one real vLLM."""

from __future__ import annotations

import json

import numpy as np
import pytest
from testserver import Fault, ServerConfig, TestServer

from cli_runner import run
from servesize.errors import BadInput
from servesize.measure.bench import BenchConfig, bench_figures, error_kinds
from servesize.measure.client import RequestResult
from servesize.measure.record import read_record
from servesize.simulate.bench import BenchLoad


def _result(times, out, prompt=100, reads=None, error=None) -> RequestResult:
    r = RequestResult(id="r", prompt_tokens=prompt, completion_tokens=out, chunk_times_s=list(times),
                      token_events=len(times), token_reads=len(times) if reads is None else reads)
    if error:
        r.error = {"type": error, "message": error}
    return r


def test_each_figure_is_the_benchmarks_definition_on_the_streamed_choices():
    a = _result([0.100, 0.120, 0.150, 0.160], out=4)          # TTFT 100 ms; ITLs 20, 30, 10; TPOT 60 / 3 = 20 ms
    b = _result([0.300, 0.340], out=2, prompt=50)              # TTFT 300 ms; ITL 40; TPOT 40 ms
    c = _result([0.050], out=1)                                # one token: a TTFT, no TPOT, no ITL
    failed = _result([0.010], out=1, error="http_error")       # counted as failed, in no figure
    m, coalesced = bench_figures([a, b, c, failed], np.array([100, 50, 100, 100]), duration_s=2.0)
    assert (m["completed"], m["failed"], coalesced) == (3, 1, 0)
    assert m["total_input_tokens"] == 250 and m["total_output_tokens"] == 7
    assert m["request_throughput"] == 1.5 and m["output_throughput"] == 3.5 and m["total_token_throughput"] == 128.5
    assert m["mean_ttft_ms"] == pytest.approx(150.0) and m["median_ttft_ms"] == pytest.approx(100.0)
    assert m["mean_tpot_ms"] == pytest.approx(30.0) and m["median_tpot_ms"] == pytest.approx(30.0)
    assert m["mean_itl_ms"] == pytest.approx(25.0) and m["median_itl_ms"] == pytest.approx(25.0)
    assert m["p99_itl_ms"] == pytest.approx(float(np.percentile([20, 30, 10, 40], 99)))


def test_a_coalesced_stream_gives_no_tpot_or_itl_and_usage_missing_falls_back_to_what_was_asked_and_streamed():
    burst = _result([0.2, 0.2, 0.2, 0.2], out=4, reads=1)       # every token in one read: its gaps are the client's
    no_usage = _result([0.1, 0.2, 0.3], out=None, prompt=None)  # no usage: the events carrying text, the asked length
    m, coalesced = bench_figures([burst, no_usage], np.array([64, 80]), duration_s=1.0)
    assert coalesced == 1 and m["completed"] == 2
    assert m["total_output_tokens"] == 4 + 3 and m["total_input_tokens"] == 100 + 80
    assert m["mean_tpot_ms"] == pytest.approx(100.0) and m["mean_itl_ms"] == pytest.approx(100.0)  # no_usage's only
    assert m["mean_ttft_ms"] == pytest.approx(150.0)  # a burst's first token time still counts as its TTFT


def test_where_nothing_was_measured_there_is_no_figure_never_0_ms():
    """Every stream coalesced: no TPOT or ITL (they were 0.00 ms, which calibrate --vllm-bench would have taken);
    no request completed: no latency figure at all. Each failure is named, a stream without a choice as no_choice."""
    bursts = [_result([0.2] * 8, out=8, reads=1) for _ in range(3)]
    m, coalesced = bench_figures(bursts, np.array([64] * 3), duration_s=1.0)
    assert coalesced == 3 and m["mean_ttft_ms"] == pytest.approx(200.0)
    assert all(m[f"{s}_{q}_ms"] is None for s in ("mean", "median", "p99") for q in ("tpot", "itl"))
    one_token = [_result([0.1], out=1)]  # every output one token: vLLM's TPOT of 0, a figure, not a gap
    assert bench_figures(one_token, np.array([64]), 1.0)[0]["mean_tpot_ms"] == 0.0
    no_choice = RequestResult(id="e", chunk_times_s=[])  # [DONE] with no choice: ok, yet nothing completed
    failed = [_result([0.1], out=1, error="http_error"), no_choice]
    m, _ = bench_figures(failed, np.array([64, 64]), duration_s=1.0)
    assert (m["completed"], m["failed"]) == (0, 2) and m["mean_ttft_ms"] is None and m["p99_itl_ms"] is None
    assert error_kinds(failed) == {"http_error": 1, "no_choice": 1}
    from servesize.simulate.bench import result_block

    assert f"{'Mean TTFT (ms):':<40}{'-':<10}" in result_block(m, 2)


def test_each_request_carries_the_fields_vllms_bench_sends_and_no_others():
    """vLLM 0.32's bench sends no temperature (the server's default sampling) and ignore_eos only with --ignore-eos;
    servesize's client sends temperature 0 and ignore_eos for its own measurements."""
    from servesize.measure.bench import BENCH_FIELDS
    from servesize.measure.client import StreamClient

    client = StreamClient("http://127.0.0.1:9", "m")
    plain, eos = client.body("p", 8, BENCH_FIELDS[False]), client.body("p", 8, BENCH_FIELDS[True])
    assert "temperature" not in plain and "ignore_eos" not in plain
    assert "temperature" not in eos and eos["ignore_eos"] is True
    assert client.body("p", 8)["temperature"] == 0.0 and client.body("p", 8)["ignore_eos"] is True


def test_what_measure_bench_cannot_send_is_refused_by_name():
    with pytest.raises(BadInput, match="--random-prefix-len"):
        BenchConfig(url="http://x", load=BenchLoad(random_prefix_len=10, num_prompts=4, max_concurrency=2))
    with pytest.raises(BadInput, match="--request-rate"):
        BenchConfig(url="http://x", load=BenchLoad(request_rate=2.0, num_prompts=4))
    with pytest.raises(BadInput, match="--num-prompts 20,000"):
        BenchConfig(url="http://x", load=BenchLoad(num_prompts=20_000))


def test_against_a_server_every_request_is_sent_counted_and_recorded_at_the_concurrency(capsys, tmp_path):
    path = tmp_path / "bench.jsonl"
    with TestServer(ServerConfig(capacity_tokens=1 << 16)) as server:
        code, out, err = run(capsys, "measure", "bench", "--url", server.url, "--random-input-len", 64, "--random-output-len", 8,
                             "--num-prompts", 12, "--max-concurrency", 3, "--record", path, "--json", "--quiet",
                             "--ignore-eos")
        peak, received, sent = server.peak_in_flight, server.completions, [e["ignore_eos"] for e in server.log]
        listings = server.models_served
    assert code == 0, err
    assert listings == 1  # the model's name and its max_model_len from one /v1/models
    doc = json.loads(out)
    assert (doc["completed"], doc["failed"]) == (12, 0)
    assert doc["total_input_tokens"] == 12 * 64 and doc["total_output_tokens"] == 12 * 8  # /tokenize: exact prompts
    assert doc["prompts"] == "tokenize" and doc["max_concurrency"] == 3 and doc["measured"] is True
    for key in ("mean_ttft_ms", "request_throughput", "duration"):
        assert doc[key] > 0
    timed = doc["completed"] - doc["coalesced_streams"]  # a starved host may read a stream in one burst
    for key in ("median_tpot_ms", "p99_itl_ms"):
        assert (doc[key] is None) if timed == 0 else doc[key] > 0
    assert received == 12 and 1 <= peak <= 3  # never more than --max-concurrency streaming at once
    assert sent == [True] * 12 and doc["load"]["ignore_eos"] is True  # as the benchmark sends with --ignore-eos
    # the measured result is what `calibrate --vllm-bench` reads, as JSON and as the printed block
    from servesize.vllm_logs.bench_result import read_bench_result

    read = read_bench_result(out)
    assert (read.completed, read.max_concurrency, read.input_len, read.output_len) == (12, 3, 64, 8)
    assert read.mean_tpot_ms == pytest.approx(doc["mean_tpot_ms"])
    code, text, _ = run(capsys, "measure", "bench", "--resume", path)  # no --resume: a benchmark's duration is one uninterrupted run's
    assert code == 2
    record = read_record(path, "bench")
    assert record.header["params"]["load"]["num_prompts"] == 12
    assert sorted(e["index"] for e in record.of_type("request")) == list(range(12))
    assert record.of_type("end")[0]["result"]["completed"] == 12


def test_a_request_longer_than_the_servers_max_model_len_is_refused_before_any_is_sent(capsys, tmp_path):
    with TestServer(ServerConfig(max_model_len=100)) as server:
        code, out, err = run(capsys, "measure", "bench", "--url", server.url, "--random-input-len", 96, "--random-output-len", 8,
                             "--num-prompts", 2, "--record", tmp_path / "b.jsonl", "--quiet")
    assert code == 2 and err.count("\n") == 1 and "max_model_len 100" in err and "104 tokens" in err


def test_when_no_request_completes_there_is_no_figure_and_the_exit_is_2(capsys, tmp_path):
    with TestServer(ServerConfig(faults=[Fault("status", status=500, after=0)])) as server:
        code, out, err = run(capsys, "measure", "bench", "--url", server.url, "--random-input-len", 32, "--random-output-len", 4,
                             "--num-prompts", 3, "--record", tmp_path / "b.jsonl", "--quiet", "--json")
    assert code == 2 and "no request of 3 completed" in err and "http_error" in err
    doc = json.loads(out)
    assert doc["completed"] == 0 and doc["mean_ttft_ms"] is None and doc["median_tpot_ms"] is None


def test_a_bench_never_tells_the_user_to_resume_it(capsys, tmp_path):
    """measure bench has no --resume (a benchmark's duration is one uninterrupted run's): a record that exists is
    refused with another --record as the way out, not the --resume the other measure commands offer."""
    path = tmp_path / "b.jsonl"
    path.write_text('{"type": "header"}\n')
    code, _, err = run(capsys, "measure", "bench", "--url", "http://127.0.0.1:9", "--num-prompts", 2, "--record", path, "--quiet")
    assert code == 2 and "already exists; choose another --record" in err and "--resume" not in err


def test_the_ready_check_sends_the_first_prompt_alone_first_and_counts_it_in_no_figure(capsys, tmp_path):
    """--ready-check-timeout-sec above 0: the benchmark's first prompt is sent alone and answered before the clock
    starts (vllm bench serve's ready check), so the run's first request finds it in the server's prefix cache."""
    path = tmp_path / "bench.jsonl"
    with TestServer(ServerConfig(capacity_tokens=1 << 16)) as server:
        code, out, err = run(capsys, "measure", "bench", "--url", server.url, "--random-input-len", 64,
                             "--random-output-len", 4, "--num-prompts", 4, "--max-concurrency", 2, "--record", path,
                             "--json", "--quiet", "--ready-check-timeout-sec", 600)
        log = list(server.log)
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["completed"], doc["failed"], doc["total_input_tokens"]) == (4, 0, 4 * 64) and doc["load"]["ready_check"]
    assert len(log) == 5 and log[0]["cached_tokens"] == 0           # the test request, alone and first
    assert sum(e["cached_tokens"] > 0 for e in log[1:]) == 1         # the run's first request hits the test's prompt
    record = read_record(path, "bench")
    assert sorted(e["index"] for e in record.of_type("request")) == list(range(4))
    assert [e for e in record.of_type("info") if "ready_check" in e]
