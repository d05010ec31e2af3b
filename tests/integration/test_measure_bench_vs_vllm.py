"""``servesize measure bench`` beside ``vllm bench serve`` (vLLM's own benchmark, from the CPU build's venv) against
one real vLLM server (issue 31: a fixed-concurrency mode compared with vLLM's by counts and by definitions).

- **Counts, exactly**: each client's completed requests and generated tokens are what the server's own counters
  (``/metrics``) rose by while it ran; servesize's input tokens too (its prompts are exactly their length).
- **Definitions, exactly**: servesize's figures (``measure.bench.bench_figures``) over vLLM's own per-request
  timings (its ``--save-detailed`` TTFTs, ITLs, input and output lengths, and duration) are vLLM's own result: the
  same TTFT, TPOT, ITL, throughputs and totals, to float precision. No timing of this machine is compared."""

from __future__ import annotations

import json

import numpy as np
import pytest
from vllm_server import vllm_env

from servesize.cli import main
from servesize.measure.bench import bench_figures
from servesize.measure.client import RequestResult
from servesize.measure.metrics import parse_prometheus

pytestmark = pytest.mark.vllm

N, INPUT, OUTPUT, C = 12, 24, 6, 3
VLLM_BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
FIGURES = ("completed", "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
           "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
           "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms")


def _counters(url: str) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        series = parse_prometheus(resp.read().decode())
    return {name: sum(v for _, v in series.get(f"vllm:{name}", [])) for name in
            ("prompt_tokens_total", "generation_tokens_total", "request_success_total")}


def _risen(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in before}


def test_measure_bench_and_vllm_bench_serve_count_what_the_server_counts_and_define_each_figure_alike(
        vllm_server, vllm_python, tmp_path, capsys):
    import subprocess

    url, model = vllm_server.base_url, vllm_server.config.model
    load = ["--random-input-len", str(INPUT), "--random-output-len", str(OUTPUT), "--num-prompts", str(N),
            "--max-concurrency", str(C), "--seed", "0", "--ignore-eos"]

    before = _counters(url)
    argv = [str(vllm_python), "-c", VLLM_BENCH, "--backend", "vllm", "--base-url", url, "--model", model,
            "--served-model-name", vllm_server.config.served_model_name, "--tokenizer", model,
            "--dataset-name", "random", *load, "--num-warmups", "0",
            "--save-result", "--save-detailed", "--result-dir", str(tmp_path), "--result-filename", "vllm.json",
            "--disable-tqdm", "--ready-check-timeout-sec", "0"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=vllm_env())
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads((tmp_path / "vllm.json").read_text())
    by_vllm = _risen(before, _counters(url))

    before = _counters(url)
    code = main(["measure", "bench", "--url", url, *load, "--record", str(tmp_path / "ours.jsonl"), "--json",
                 "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    ours = json.loads(out)
    by_servesize = _risen(before, _counters(url))

    # counts: each client's against the server's own counters over its run
    assert theirs["completed"] == ours["completed"] == N and theirs["failed"] == ours["failed"] == 0, theirs["errors"][:2]
    assert by_vllm["request_success_total"] == by_servesize["request_success_total"] == N
    assert theirs["total_output_tokens"] == by_vllm["generation_tokens_total"] == N * OUTPUT
    assert ours["total_output_tokens"] == by_servesize["generation_tokens_total"] == N * OUTPUT
    assert ours["total_input_tokens"] == by_servesize["prompt_tokens_total"] == N * INPUT  # exact prompts
    assert theirs["total_input_tokens"] == by_vllm["prompt_tokens_total"]  # vLLM 0.32 takes usage's prompt_tokens

    # definitions: servesize's figures over vLLM's own per-request timings are vLLM's figures
    requests = []
    for ttft, itls, n_in, n_out in zip(theirs["ttfts"], theirs["itls"], theirs["input_lens"], theirs["output_lens"]):
        times = list(np.cumsum([ttft, *itls]))
        requests.append(RequestResult(id="v", prompt_tokens=n_in, completion_tokens=n_out, chunk_times_s=times,
                                      token_events=len(times), token_reads=len(times)))
    figures, coalesced = bench_figures(requests, np.asarray(theirs["input_lens"]), theirs["duration"])
    assert coalesced == 0
    for key in FIGURES:
        assert figures[key] == pytest.approx(theirs[key], rel=1e-9, abs=1e-9), key
