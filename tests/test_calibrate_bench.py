"""calibrate --vllm-bench: a `vllm bench serve` result (its text block or its saved JSON) -> the step model's
efficiencies for that deployment, applied by bench and plan to it and refused for another."""

from __future__ import annotations

import json

import pytest

from cli_runner import run, run_json
from servesize.assumptions import assumption
from servesize.cli import main
from servesize.errors import BadInput
from servesize.vllm_logs.bench_result import read_bench_result

DEPLOYMENT = ["llama-3.1-8b", "--gpus", "1xH100"]
LOAD = ["--random-input-len", "2048", "--random-output-len", "256", "--num-prompts", "64", "--max-concurrency", "16"]

# the block vllm bench serve printed in a public run (tests/fixtures/measured: dennislee-qwen2-7b...-n10, trimmed)
PUBLISHED_BLOCK = """\
============ Serving Benchmark Result ============
Successful requests:                     10
Benchmark duration (s):                  12.83
Total input tokens:                      10240
Total generated tokens:                  10240
Request throughput (req/s):              0.78
Output token throughput (tok/s):         798.33
---------------Time to First Token----------------
Mean TTFT (ms):                          84.43
Median TTFT (ms):                        85.03
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          12.45
Median TPOT (ms):                        12.45
"""


def test_the_text_block_gives_the_load_and_the_means():
    m = read_bench_result(PUBLISHED_BLOCK)
    assert (m.completed, m.input_len, m.output_len, m.max_concurrency) == (10, 1024, 1024, None)
    assert (m.mean_ttft_ms, m.mean_tpot_ms, m.output_throughput) == (84.43, 12.45, 798.33)
    # the ready check's line before the block: the run's first prompt was cached (simulate/bench.py)
    assert not m.ready_check
    assert read_bench_result("Initial test run completed. Starting main benchmark run...\n" + PUBLISHED_BLOCK).ready_check


@pytest.mark.parametrize("text", ["", "Mean TTFT (ms): 12\n", '{"completed": 0, "total_input_tokens": 1, '
                                  '"total_output_tokens": 1, "mean_ttft_ms": 1, "mean_tpot_ms": 1}', "{not json",
                                  '{"completed": 10, "total_input_tokens": "x", "total_output_tokens": 1, '
                                  '"mean_ttft_ms": 1, "mean_tpot_ms": 1}', "[1, 2]"])
def test_a_result_that_says_too_little_is_one_line(text):
    with pytest.raises(BadInput):
        read_bench_result(text)


def _predicted(capsys, fmt: str) -> str:
    code, out, err = run(capsys, "bench", *DEPLOYMENT, *LOAD, *(["--json"] if fmt == "json" else []))
    assert code == 0, err
    return out


def _calibrated(tmp_path, capsys, result) -> tuple:
    """calibrate --vllm-bench of ``result`` for DEPLOYMENT: the calibration file and its document."""
    cal = tmp_path / "cal.json"
    code, _, err = run(capsys, "calibrate", "--vllm-bench", str(result), "--model", DEPLOYMENT[0], "--gpus", "1xH100",
                       "--out", str(cal))
    assert code == 0, err
    doc = json.loads(cal.read_text())
    return cal, doc["calibrations"][0] if "calibrations" in doc else doc


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_servesize_bench_s_own_result_calibrates_back_to_its_efficiencies(tmp_path, capsys, fmt):
    # the round trip: what bench predicts at the default efficiencies, read back, gives those efficiencies
    result = tmp_path / f"result.{fmt}"
    result.write_text(_predicted(capsys, fmt))
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-bench", str(result), "--model", DEPLOYMENT[0], "--gpus", "1xH100",
                 "--out", str(out), "--json"]) == 0
    cal = json.loads(out.read_text())["calibrations"][0] if "calibrations" in out.read_text() else json.loads(out.read_text())
    assert cal["gpu"] == "H100-SXM" and cal["tensor_parallel_size"] == 1
    assert cal["bandwidth_efficiency"] == pytest.approx(assumption("decode.bandwidth_efficiency"), rel=0.01)
    assert cal["mfu"] == pytest.approx(assumption("prefill.mfu"), rel=0.03)


def test_a_server_slower_than_the_defaults_calibrates_to_its_own_efficiencies_and_bench_applies_them(tmp_path, capsys):
    # a "server" whose kernels reach 0.5 of the bandwidth and 0.3 MFU: its result, read back, gives those, and bench
    # with that calibration prints the server's means again
    assert main(["bench", *DEPLOYMENT, *LOAD, "--bandwidth-efficiency", "0.5", "--mfu", "0.3"]) == 0
    result = tmp_path / "server.txt"
    result.write_text(capsys.readouterr().out)
    measured = read_bench_result(result.read_text())
    cal, doc = _calibrated(tmp_path, capsys, result)
    assert doc["bandwidth_efficiency"] == pytest.approx(0.5, rel=0.01) and doc["mfu"] == pytest.approx(0.3, rel=0.03)
    assert main(["bench", *DEPLOYMENT, *LOAD, "--calibration", str(cal), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mean_tpot_ms"] == pytest.approx(measured.mean_tpot_ms, rel=0.01)
    assert out["mean_ttft_ms"] == pytest.approx(measured.mean_ttft_ms, rel=0.02)
    assert any("calibrate --vllm-bench" in n for n in out["notes"])
    for other in (["--gpus", "1xH200"], ["--gpus", "2xH100", "-tp", "2"]):
        assert main(["bench", DEPLOYMENT[0], *other, *LOAD, "--calibration", str(cal)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "calibration" in err


def test_calibrate_needs_the_deployment_the_benchmark_measured(tmp_path, capsys):
    result = tmp_path / "r.txt"
    result.write_text(PUBLISHED_BLOCK)
    assert main(["calibrate", "--vllm-bench", str(result)]) == 2
    assert "--model" in capsys.readouterr().err


def test_a_calibration_of_a_marlin_server_is_refused_for_the_default_kernel_and_applies_to_marlin(tmp_path, capsys):
    """calibrate --vllm-bench records the fused-MoE kernel the server ran (--moe-backend): its efficiencies were
    fitted with that kernel's expert rate, so a plan on another kernel is another deployment."""
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"source": "r.txt", "era": "vllm bench serve", "model": "openai/gpt-oss-120b",
                               "tensor_parallel_size": 2, "gpu": "H100-SXM", "bandwidth_efficiency": 0.7, "mfu": 0.5,
                               "moe_backend": "marlin"}))
    gpt = ["gpt-oss-120b", "--gpus", "2xH100-SXM", "-tp", "2", "--random-input-len", "256", "--random-output-len",
           "32", "--num-prompts", "8", "--max-concurrency", "4", "--calibration", str(cal)]
    assert main(["bench", *gpt]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--moe-backend marlin" in err
    assert main(["bench", *gpt, "--moe-backend", "marlin", "--json"]) == 0
    assert any("calibrate --vllm-bench" in n for n in json.loads(capsys.readouterr().out)["notes"])
    # the flag reaches calibrate's own deployment (here refused for a release without it)
    result = tmp_path / "r.txt"
    result.write_text(PUBLISHED_BLOCK)
    assert main(["calibrate", "--vllm-bench", str(result), "--model", "gpt-oss-120b", "--gpus", "2xH100-SXM", "-tp",
                 "2", "--moe-backend", "marlin", "--vllm-version", "0.16.0"]) == 2
    assert "--moe-backend is not a flag of vllm serve 0.16.0" in capsys.readouterr().err


def test_a_dense_models_calibration_names_no_moe_kernel_so_any_backend_may_apply_it(tmp_path, capsys):
    result = tmp_path / "r.txt"
    result.write_text(_predicted(capsys, "text"))
    cal, doc = _calibrated(tmp_path, capsys, result)
    assert doc.get("moe_backend") is None
    assert main(["bench", *DEPLOYMENT, *LOAD, "--calibration", str(cal), "--moe-backend", "marlin", "--json"]) == 0


def test_a_result_whose_text_shows_the_ready_check_calibrates_with_it_and_says_so(tmp_path, capsys):
    # LOAD's 64 prompts, 16 at a time: the ready check caches the first prompt, which the run's first request hits;
    # the block printed after "Initial test run completed" is replayed with it, and round-trips to the defaults
    code, out, err = run(capsys, "bench", *DEPLOYMENT, *LOAD, "--ready-check-timeout-sec", "600")
    assert code == 0, err
    result = tmp_path / "result.txt"
    result.write_text("Initial test run completed. Starting main benchmark run...\n" + out)
    _, doc = _calibrated(tmp_path, capsys, result)
    cal = doc["calibrations"][0] if "calibrations" in doc else doc
    assert cal["mfu"] == pytest.approx(assumption("prefill.mfu"), rel=0.03)
    assert any("ready check" in n for n in cal["notes"])


def test_an_fp8_calibration_prices_the_prefill_it_was_solved_beside_whatever_the_gpus_share_says_later(tmp_path, capsys):
    """A calibration's MFU is solved beside the GPU's FP8 prefill share (gpus.toml), and records it: a file with
    another share (gpus.toml measured again), or none (written before the measured shares, when FP8 prefill ran at
    step.prefill_efficiency_fp8), still gives the TTFT it was solved to reproduce: the same effective rate, MFU x
    share, gives the same bench."""
    fp8 = [*DEPLOYMENT, "-q", "fp8", *LOAD]
    assert main(["bench", *fp8, "--mfu", "0.4", "--json"]) == 0
    result = tmp_path / "server.json"
    result.write_text(capsys.readouterr().out)
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-bench", str(result), "--model", DEPLOYMENT[0], "--gpus", "1xH100", "-q", "fp8",
                 "--out", str(cal)]) == 0
    capsys.readouterr()
    doc = json.loads(cal.read_text())
    entry = doc["calibrations"][0] if "calibrations" in doc else doc
    share = entry["fp8_prefill_share"]
    assert 0.5 < share < 1.0 and entry["mfu"] == pytest.approx(0.4, rel=0.03)  # the H100's measured share

    def ttft(**change) -> float:
        cal.write_text(json.dumps({**doc, "calibrations": [{**entry, **change}]} if "calibrations" in doc
                                  else {**entry, **change}))
        return run_json(capsys, "bench", *fp8, "--calibration", cal, "--json")["mean_ttft_ms"]

    base = ttft()
    effective = entry["mfu"] * share
    # gpus.toml measured again at 0.9: a file solved beside the old share still prices its own
    assert ttft(fp8_prefill_share=0.9, mfu=round(effective / 0.9, 6)) == pytest.approx(base, rel=0.01)
    # written before the shares (no field): its MFU ran at step.prefill_efficiency_fp8 on the FP8 peak
    old = {k: v for k, v in entry.items() if k != "fp8_prefill_share"}
    assert ttft(**{**old, "mfu": round(effective / assumption("step.prefill_efficiency_fp8"), 6)},
                fp8_prefill_share=None) == pytest.approx(base, rel=0.01)


def test_a_bf16_moe_calibration_prices_the_experts_it_was_solved_beside(tmp_path, capsys):
    """A calibration's bandwidth efficiency is solved beside the routed experts' measured kernel rate (bf16 on an
    H100: gpus.toml bf16_moe_tbps, step.bf16_moe_kernel_rate) and records it; bench with the calibration gives the TPOT
    it was solved to reproduce; a file that records none (written before bf16 experts had a rate) prices its experts
    at step.moe_expert_efficiency, as it was solved; a record out of range is one line."""
    moe = ["qwen3-30b-a3b", "--gpus", "1xH100", *LOAD]
    assert main(["bench", *moe, "--bandwidth-efficiency", "0.6", "--json"]) == 0
    result = tmp_path / "server.json"
    result.write_text(capsys.readouterr().out)
    measured = read_bench_result(result.read_text())
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--vllm-bench", str(result), "--model", "qwen3-30b-a3b", "--gpus", "1xH100",
                 "--out", str(cal)]) == 0
    capsys.readouterr()
    doc = json.loads(cal.read_text())
    entry = doc["calibrations"][0] if "calibrations" in doc else doc
    assert entry["expert_kernel_tbps"] == pytest.approx(2.86) and entry["bandwidth_efficiency"] == pytest.approx(0.6, rel=0.01)

    def tpot(**change) -> float:
        cal.write_text(json.dumps({**doc, "calibrations": [{**entry, **change}]} if "calibrations" in doc
                                  else {**entry, **change}))
        return run_json(capsys, "bench", *moe, "--calibration", cal, "--json")["mean_tpot_ms"]

    solved = tpot()
    assert solved == pytest.approx(measured.mean_tpot_ms, rel=0.01)
    # no rate recorded (an old file) or none (0): the experts at the fitted MoE efficiency, the rule it was solved under
    old = tpot(expert_kernel_tbps=None)
    assert old > solved * 1.1 and tpot(expert_kernel_tbps=0) == pytest.approx(old, rel=1e-6)
    cal.write_text(json.dumps({**entry, "expert_kernel_tbps": -1}))
    assert main(["bench", *moe, "--calibration", str(cal)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expert_kernel_tbps" in err
