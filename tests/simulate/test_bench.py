"""servesize bench: vllm bench serve's load in its own flags, through the engine simulator, reported in its keys.
Decided by the simulated clock and counts, never by the machine's."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cli_runner import run_json
from servesize.assumptions import assumption
from servesize.cli import main
from servesize.errors import BadInput
from servesize.planning.step_model import ConstantSteps
from servesize.simulate.bench import BenchLoad, bench_metrics, bench_replay
from servesize.simulate.engine import EngineConfig, simulate_engine

SAVE_RESULT_KEYS = {"mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
                    "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "request_throughput", "output_throughput",
                    "total_token_throughput", "duration", "completed"}


def _run(load: BenchLoad, times, blocks: int = 100_000, batched: int = 8192):
    rp = bench_replay(load, 16)
    return simulate_engine(rp, EngineConfig(num_blocks=blocks, block_size=16, max_num_batched_tokens=batched), times,
                           warmup=0.0)


def test_one_client_at_a_time_gets_the_constant_step_times_exactly():
    # one request in flight: handed to the scheduler (1 ms, engine.handoff_s), prefill 1,000 tokens at 1 us each
    # in one chunk, then 99 decode steps of 10 ms
    load = BenchLoad(random_input_len=1000, random_output_len=100, num_prompts=5, max_concurrency=1)
    m = bench_metrics(_run(load, ConstantSteps(prefill_per_token_s=1e-6, decode_step_s=0.010)))
    assert m["completed"] == 5 and m["failed"] == 0
    h = assumption("engine.handoff_s")
    assert h == 0.001
    assert m["mean_ttft_ms"] == pytest.approx(1e3 * h + 1.0)
    assert m["mean_tpot_ms"] == pytest.approx(10.0)
    assert m["median_itl_ms"] == pytest.approx(10.0)
    assert m["duration"] == pytest.approx(5 * (h + 0.001 + 99 * 0.010))
    assert m["output_throughput"] == pytest.approx(500 / m["duration"])


def test_the_concurrency_cap_is_the_batch():
    load = BenchLoad(random_input_len=64, random_output_len=50, num_prompts=40, max_concurrency=8)
    run = _run(load, ConstantSteps(prefill_per_token_s=1e-6, decode_step_s=0.01, decode_per_seq_s=0.001))
    assert max(run.decoders_per_step) == 8
    m = bench_metrics(run)
    # a step of 8 decoders costs 18 ms: every TPOT sits between the 1-decoder and the 8-decoder step
    assert 11.0 <= m["median_tpot_ms"] <= 18.0 + 1e-9


def test_exact_lengths_sent_at_once_prefill_the_first_then_the_rest_and_keep_those_groups_every_wave():
    # 4 requests sent at once to an idle engine reach the scheduler 1 ms apart (engine.handoff_s): the first is
    # prefilled alone (260 ms for 256 tokens), the other three together in the next step; with exact lengths and
    # --ignore-eos each group finishes together and its replacements are sent together, so the split lasts every
    # wave. The real CPU engine did the same on a quiet machine (scripts/engine_waves.py, docs/accuracy.md).
    load = BenchLoad(random_input_len=256, random_output_len=4, num_prompts=16, max_concurrency=4, ignore_eos=True)
    run = _run(load, ConstantSteps(prefill_per_token_s=1e-3, decode_step_s=0.02))
    first = run.first_token_s.tolist()
    groups: dict[float, list[int]] = {}
    for i, t in enumerate(first):
        groups.setdefault(t, []).append(i)
    assert list(groups.values()) == [[0], [1, 2, 3], [4], [5, 6, 7], [8], [9, 10, 11], [12], [13, 14, 15]]


def test_the_request_fixed_cost_adds_to_ttft_only():
    class Fixed(ConstantSteps):
        request_fixed_s = 0.050

    load = BenchLoad(random_input_len=500, random_output_len=20, num_prompts=4, max_concurrency=1)
    plain = bench_metrics(_run(load, ConstantSteps(1e-6, 0.01)))
    fixed = bench_metrics(_run(load, Fixed(1e-6, 0.01)))
    assert fixed["mean_ttft_ms"] - plain["mean_ttft_ms"] == pytest.approx(50.0)
    assert fixed["mean_tpot_ms"] == pytest.approx(plain["mean_tpot_ms"])


def test_random_prompts_share_nothing_but_the_prefix():
    load = BenchLoad(random_input_len=256, random_output_len=8, random_prefix_len=64, num_prompts=10, max_concurrency=1)
    rp = bench_replay(load, 16)
    firsts = [tuple(rp.nodes_of(i)[:4]) for i in range(10)]
    assert len(set(firsts)) == 1  # the 64-token prefix: the same 4 blocks
    rests = np.concatenate([rp.nodes_of(i)[4:] for i in range(10)])
    assert np.unique(rests).size == rests.size
    assert set(rp.input_tokens.tolist()) == {320}


def test_a_range_ratio_spreads_the_lengths_within_it():
    inputs, outputs = BenchLoad(random_input_len=1000, random_output_len=100, random_range_ratio=0.5,
                                num_prompts=2000, random_seed=3).lengths()
    assert inputs.min() >= 500 and inputs.max() <= 1500 and 950 < inputs.mean() < 1050
    assert outputs.min() >= 50 and outputs.max() <= 150


def test_a_poisson_rate_sends_one_request_per_client():
    rp = bench_replay(BenchLoad(num_prompts=200, request_rate=4.0, random_seed=1), 16)
    assert np.unique(rp.user).size == 200
    gaps = np.diff(rp.arrival_s)
    assert np.all(gaps >= 0) and 0.15 < gaps.mean() < 0.35  # 1 / 4 requests per second


@pytest.mark.parametrize("bad", [dict(num_prompts=0), dict(random_input_len=-1), dict(random_range_ratio=1.0),
                                 dict(request_rate=0.0), dict(max_concurrency=0),
                                 dict(request_rate=2.0, max_concurrency=4), dict(random_range_ratio=math.nan)])
def test_bad_loads_are_refused(bad):
    with pytest.raises(BadInput):
        BenchLoad(**bad)


def test_the_cli_prints_the_benchmark_block_and_its_saved_keys(capsys):
    args = ["bench", "llama-3.1-8b", "--gpus", "1xH100", "--random-input-len", "512", "--random-output-len", "64",
            "--num-prompts", "50", "--max-concurrency", "8"]
    assert main(args) == 0
    text = capsys.readouterr().out
    for line in ("Serving Benchmark Result", "Mean TTFT (ms):", "Median TPOT (ms):", "P99 ITL (ms):",
                 "Output token throughput (tok/s):", "Maximum request concurrency:            8"):
        assert line in text
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert SAVE_RESULT_KEYS <= set(doc)
    assert doc["completed"] == 50 and doc["mean_tpot_ms"] > 0


def test_a_load_past_the_length_limit_is_one_line(capsys):
    code = main(["bench", "llama-3.1-8b", "--gpus", "1xH100", "--max-model-len", "2048", "--random-input-len", "4096"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--max-model-len" in err


def test_the_block_docs_simulate_md_quotes_is_what_the_command_prints(capsys):
    import pathlib
    import re
    import shlex

    page = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "simulate.md").read_text()
    (block,) = re.findall(r"```\n(\$ servesize bench .*?)```", page, flags=re.S)
    lines = block.rstrip("\n").splitlines()
    assert main(shlex.split(lines[0][2:])[1:]) == 0
    assert capsys.readouterr().out.rstrip("\n").splitlines() == lines[1:]


def _bench_json(capsys, *extra: str) -> dict:
    argv = ["bench", "qwen3.6-27b", "--gpus", "1xH200", "-q", "fp8", "--random-input-len", "1000",
            "--random-output-len", "200", "--num-prompts", "16", "--max-concurrency", "4", "--json", *extra]
    return run_json(capsys, *argv)


def test_a_server_started_without_a_speculative_config_drafts_nothing_even_with_an_mtp_head(capsys):
    # vllm bench serve measures the server its flags start: no --speculative-config, no drafts. Qwen3.6-27B has an
    # MTP head, which plan's recipe serves; the benchmark's server must not be priced with it (it was: TPOT 1.65x
    # faster than the same server's steps on MiniMax-M2.5, whose head vLLM cannot serve at all)
    plain = _bench_json(capsys)
    off = _bench_json(capsys, "--num-speculative-tokens", "0")
    drafting = _bench_json(capsys, "--num-speculative-tokens", "2")
    metrics = ("mean_tpot_ms", "mean_ttft_ms", "output_throughput")
    assert [plain[k] for k in metrics] == [off[k] for k in metrics]
    assert plain["mean_tpot_ms"] == pytest.approx(plain["mean_itl_ms"])  # one token a step: TPOT is the step
    assert drafting["mean_tpot_ms"] < plain["mean_tpot_ms"] < drafting["mean_itl_ms"]


def test_without_ignore_eos_the_result_says_what_a_real_run_may_differ_by_and_names_the_waves_only_where_they_form(
        capsys):
    # equal lengths at a fixed concurrency: the simulated requests finish together and are replaced in waves (as the
    # real engine's are with --ignore-eos: scripts/engine_waves.py); replies ending at EOS
    # would break them up. Drawn lengths never form waves; with --ignore-eos the simulation is the run asked for
    plain = " ".join(_bench_json(capsys)["notes"])
    assert "--ignore-eos asks" in plain and "replaced in waves" in plain
    drawn = " ".join(_bench_json(capsys, "--random-range-ratio", "0.1")["notes"])
    assert "--ignore-eos asks" in drawn and "waves" not in drawn
    assert not [n for n in _bench_json(capsys, "--ignore-eos")["notes"] if "EOS" in n]


def test_the_ready_check_sends_the_first_prompt_alone_first_and_the_runs_first_request_hits_its_blocks():
    # vllm bench serve's ready check (benchmark_serving.py always; vllm bench serve with --ready-check-timeout-sec
    # above 0 since PR #30975): the first request's prompt and output, alone and answered before the run starts. The
    # run's first request then hits its 62 full blocks (vLLM recomputes the last prompt token: 999 // 16), prefills
    # 8 tokens, and the benchmark counts neither the test request nor its steps
    from dataclasses import replace

    from servesize.simulate.bench import ready_check_replay

    load = BenchLoad(random_input_len=1000, random_output_len=100, num_prompts=5, max_concurrency=1, ready_check=True)
    times = ConstantSteps(prefill_per_token_s=1e-6, decode_step_s=0.010)
    cfg = EngineConfig(num_blocks=100_000, block_size=16, max_num_batched_tokens=8192)
    alone = simulate_engine(ready_check_replay(load, 16), cfg, times, warmup=0.0)
    h = assumption("engine.handoff_s")
    start = float(alone.finish_s[0])
    assert alone.steps == 100 and start == pytest.approx(h + 0.001 + 99 * 0.010)
    run = simulate_engine(bench_replay(load, 16, start), cfg, times, warmup=0.0)
    assert run.arrival_s[1] == start and run.hit_tokens[1] == 992 and not run.hit_tokens[2:].any()
    checked = bench_metrics(run, skip=1, skip_steps=alone.steps)
    plain = bench_metrics(_run(replace(load, ready_check=False), times))
    assert checked["completed"] == plain["completed"] == 5
    assert checked["total_input_tokens"] == plain["total_input_tokens"]
    assert checked["mean_ttft_ms"] == pytest.approx(plain["mean_ttft_ms"] - 992 * 1e-3 / 5)
    assert checked["median_ttft_ms"] == pytest.approx(plain["median_ttft_ms"])
    assert checked["duration"] == pytest.approx(plain["duration"] - 992e-6)
    assert checked["mean_itl_ms"] == pytest.approx(plain["mean_itl_ms"])


def test_the_ready_check_flag_reaches_the_prediction_and_a_negative_timeout_is_one_line(capsys):
    from cli_runner import run

    plain = _bench_json(capsys, "--random-range-ratio", "0.1")
    checked = _bench_json(capsys, "--random-range-ratio", "0.1", "--ready-check-timeout-sec", "600")
    assert checked["load"]["ready_check"] and not plain["load"]["ready_check"]
    assert any("ready check" in n for n in checked["notes"]) and not any("ready check" in n for n in plain["notes"])
    assert checked["completed"] == plain["completed"] == 16
    assert checked["mean_ttft_ms"] < plain["mean_ttft_ms"]
    code, out, err = run(capsys, "bench", "llama-3.1-8b", "--gpus", "1xH100", "--ready-check-timeout-sec", "-1")
    assert code != 0 and not out and len(err.strip().splitlines()) == 1 and "--ready-check-timeout-sec" in err
    # one request at a time: the run takes the steps it takes without the check (the test's ~200 are not counted;
    # the first request's cached prompt may save it the one step its prefill took)
    one = ("--max-concurrency", "1", "--num-prompts", "4")
    steps = _bench_json(capsys, *one)["engine_steps"]
    assert steps - 1 <= _bench_json(capsys, *one, "--ready-check-timeout-sec", "600")["engine_steps"] <= steps
    # with prefix caching off the test request leaves nothing to hit: the run is the run without it
    off = ("--random-range-ratio", "0.1", "--no-enable-prefix-caching")
    checked_off, plain_off = _bench_json(capsys, *off, "--ready-check-timeout-sec", "600"), _bench_json(capsys, *off)
    assert checked_off["mean_ttft_ms"] == pytest.approx(plain_off["mean_ttft_ms"], rel=1e-9)
    assert checked_off["duration"] == pytest.approx(plain_off["duration"], rel=1e-9)
    assert any("prefix caching off" in n for n in checked_off["notes"])
